"""A DDL half-applied because a backend died in the middle of it is shown and repaired, not left to guess.

Real MariaDB: a copying ALTER on a sharding table with enough rows that it takes a moment; the backend
of one of its nodes is killed (SIGKILL) while the ALTER runs there, then restarted. `check full
@@metadata` names the lagging node, `show @@ddl_history` keeps where the ALTER succeeded and failed,
`pydble ddl repair` refuses while the lagging node has a third structure, a later ALTER of the table
is refused on every instance until the repair, which re-runs the ALTER on the lagging node only, every
instance of the cluster reloads, and a second repair has nothing to do. The repair runs on the OTHER
instance of the cluster than the one whose ALTER was half-applied: it reads the DDL (statement, nodes
where it succeeded and failed, structure before it) from ZooKeeper's ddl_history.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import pymysql
import pytest

from harness import cluster_section, free_port, proxy_config
from harness.proxy import REPO_ROOT

TABLE = "sharding_2_t1"   # dn1 on the first backend, dn2 on the second (DESIGN.md §2)
ALTER = f"ALTER TABLE {TABLE} ADD COLUMN added INT NOT NULL DEFAULT 7, ALGORITHM=COPY"
SECOND = f"ALTER TABLE {TABLE} ADD COLUMN later INT"   # refused until the half-applied ALTER is repaired
ROWS_FAST, ROWS_SLOW = 2_000, 400_000   # dn2's copy must still run when its server is killed


def _manager(p: Any, sql: str) -> list[dict[str, Any]]:
    conn = p.manager()
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            cols = [d[0] for d in cur.description or ()]
            return [dict(zip(cols, r)) for r in cur.fetchall()]
    finally:
        conn.close()


def _show_create(server: Any) -> str:
    return server.query(f"SHOW CREATE TABLE {TABLE}", database="db1")[0][1]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)


def _wait(cond: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _half_applied(fresh_backends: list, fresh_proxy: Any, cluster: Any = None) -> Any:
    """A proxy whose last ALTER of TABLE succeeded on dn1 and died with dn2's server (restarted since)."""
    b1, b2 = fresh_backends
    p = fresh_proxy(proxy_config(fresh_backends, free_port(), free_port(), instance="dble-1", cluster=cluster),
                    backends=fresh_backends)
    if cluster is None:   # (a cluster's test made it on the nodes before any instance started)
        p.query(f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, name VARCHAR(64))")
    for server, n in ((b1, ROWS_FAST), (b2, ROWS_SLOW)):   # straight into the shards: fast to fill
        server.query(f"INSERT INTO {TABLE} SELECT seq, REPEAT('x', 60) FROM seq_1_to_{n}", database="db1")
    outcome: dict[str, Any] = {}

    def alter() -> None:
        try:
            p.query(ALTER)
            outcome["ok"] = True
        except pymysql.MySQLError as e:
            outcome["error"] = e.args

    t = threading.Thread(target=alter)
    t.start()
    _wait(lambda: b2.query("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE info LIKE 'ALTER TABLE%'")[0][0],
          20, "the ALTER to run on dn2")
    time.sleep(0.3)   # well into the copy
    b2.kill()
    t.join(60)
    assert not t.is_alive(), "the ALTER never answered after its backend died"
    assert "error" in outcome, outcome
    assert "dn2" in outcome["error"][1] and "succeeded on dn1" in outcome["error"][1], outcome
    assert f"table schema1.{TABLE}" in outcome["error"][1] and "db1" not in outcome["error"][1], outcome  # logical
    with pytest.raises(pymysql.MySQLError) as ei:   # while dn2's server is down
        _manager(p, f"repair @@ddl where schema='schema1' and table='{TABLE}'")
    assert "dn2" in ei.value.args[1] and "repair once it is back" in ei.value.args[1], ei.value.args
    b2.start()
    assert "`added`" in _show_create(b1) and "`added`" not in _show_create(b2)
    return p


def test_a_ddl_half_applied_by_a_dying_backend_is_shown_then_repaired(fresh_backends, fresh_proxy, zookeeper,
                                                                      zk_root) -> None:
    b1, b2 = fresh_backends
    for server in (b1, b2):   # made on the nodes: the half-applied ALTER is the cluster's first DDL, #0
        server.query(f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, name VARCHAR(64))", database="db1")
    section = cluster_section(zookeeper, root=zk_root)
    p2 = fresh_proxy(proxy_config(fresh_backends, free_port(), free_port(), instance="dble-2", cluster=section),
                     backends=fresh_backends)
    p = _half_applied(fresh_backends, fresh_proxy, section)

    # check full @@metadata_nodes names the lagging node (DBLE's columns, then pydble's)
    where = f"where schema='schema1' and table='{TABLE}'"
    row = _wait(lambda: (r := _manager(p, f"check full @@metadata_nodes {where}"))
                and r[0]["differing_sharding_nodes"] == "dn2" and r[0], 20, "dn2 to be readable again")
    assert int(row["consistent_in_sharding_nodes"]) == 0

    # the history keeps the statement with where it succeeded and where it failed
    (last, *_) = _manager(p, "show @@ddl_history")
    assert last["sql"] == ALTER and last["outcome"] == "FAILED"
    assert (last["succeeded_nodes"], last["failed_nodes"]) == ("dn1", "dn2")

    # refused while dn2 has neither the structure from before the ALTER nor the one it made (asked of
    # dble-2, which did not run the ALTER: the cluster's history says what it was)
    b2.query(f"ALTER TABLE {TABLE} ADD COLUMN by_hand INT", database="db1")
    with pytest.raises(pymysql.MySQLError) as ei:
        _manager(p2, f"repair @@ddl where schema='schema1' and table='{TABLE}'")
    assert "dn2" in ei.value.args[1] and "fix by hand" in ei.value.args[1], ei.value.args
    assert "`added`" not in _show_create(b2)   # nothing was run
    r = _cli("ddl", "repair", f"schema1.{TABLE}", "--config", str(p2.config_path))
    assert r.returncode == 3 and "fix by hand" in r.stderr, (r.stdout, r.stderr)
    b2.query(f"ALTER TABLE {TABLE} DROP COLUMN by_hand", database="db1")   # back to the structure from before

    # a later DDL on the table would make the half-applied one unrepairable: refused on every instance
    shapes = (_show_create(b1), _show_create(b2))
    for q in (p, p2):
        deadline = time.monotonic() + 60
        while True:   # 4006 (the table busy with this instance's own re-read of dn2) says: retry
            with pytest.raises(pymysql.MySQLError) as ei:
                q.query(SECOND)
            if ei.value.args[0] != 4006 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert ei.value.args[0] == 1105 and "dn2" in ei.value.args[1], (q.instance, ei.value.args)
        assert f"repair @@ddl where schema='schema1' and table='{TABLE}'" in ei.value.args[1], ei.value.args
    assert (_show_create(b1), _show_create(b2)) == shapes   # it ran nowhere

    # repair through the CLI on dble-2: re-run on dn2 only, then every node and memory have the new structure
    r = _cli("ddl", "repair", f"schema1.{TABLE}", "--config", str(p2.config_path))
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "re-run on dn2" in r.stdout
    assert _show_create(b1) == _show_create(b2)
    assert b2.query(f"SELECT COUNT(*), MIN(added), MAX(added) FROM {TABLE}", database="db1")[0] == (ROWS_SLOW, 7, 7)
    row = _manager(p, f"check full @@metadata_nodes {where}")[0]
    assert (int(row["consistent_in_sharding_nodes"]), int(row["consistent_in_memory"])) == (1, 1)
    assert "`added`" in row["table_structure"] and row["differing_sharding_nodes"] == ""
    for i, q in enumerate((p, p2)):   # every instance reloaded: memory's column order has three columns
        row = _manager(q, f"check full @@metadata {where}")[0]
        assert (int(row["consistent_in_memory"]), "`added`" in row["table_structure"]) == (1, True), q.instance
        q.query(f"INSERT INTO {TABLE} VALUES ({900001 + i}, 'n', 5)")
        assert q.query(f"SELECT added FROM {TABLE} WHERE id = {900001 + i}") == [(5,)]
    (repair_row, *_) = _manager(p2, "show @@ddl_history")   # the repair is dble-2's
    assert (repair_row["sql"], repair_row["nodes"], repair_row["outcome"]) == (ALTER, "dn2", "OK")
    # (the ALTER is ddl_history's entry 0: its repair is a repair all the same, never refused as a later DDL)

    # a second repair has nothing to do, from either instance
    (again,) = _manager(p, f"repair @@ddl where schema='schema1' and table='{TABLE}'")
    assert again["action"] == "nothing" and "nothing to repair" in again["message"]
    assert _cli("ddl", "repair", f"schema1.{TABLE}", "--config", str(p2.config_path)).returncode == 1
    assert any("repair @@ddl" in h["STATEMENT"] for h in _manager(p, "show @@help"))

    # repaired: the DDL that was refused runs
    p2.query(SECOND)
    assert "`later`" in _show_create(b1) and "`later`" in _show_create(b2)



def test_a_single_instance_repairs_from_its_own_history(fresh_backends, fresh_proxy) -> None:
    """Without ZooKeeper the instance's own DDL history says what to re-run."""
    b1, b2 = fresh_backends
    p = _half_applied(fresh_backends, fresh_proxy)
    where = f"where schema='schema1' and table='{TABLE}'"
    _wait(lambda: (r := _manager(p, f"check full @@metadata_nodes {where}")) and r[0]["differing_sharding_nodes"] == "dn2",
          20, "dn2 to be readable again")
    (done,) = _manager(p, f"repair @@ddl {where}")
    assert done["action"] == "repaired" and "re-run on dn2" in done["message"], done
    assert _show_create(b1) == _show_create(b2)
    row = _manager(p, f"check full @@metadata {where}")[0]
    assert (int(row["consistent_in_sharding_nodes"]), int(row["consistent_in_memory"])) == (1, 1)
