"""`pydble ddl gc` reconciles from the real backends before deleting, and running proxies follow."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import pymysql
import pytest
from cliops import run_cli
from harness import cluster_section, free_port, proxy_config, to_toml

from zk.records import INIT

TABLE = "sharding_4_t1"             # dn1..dn4 of the example config
NODES = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2")}
ADD = f"ALTER TABLE {TABLE} ADD COLUMN c_gc INT"


def _on_nodes(backends: list[Any], sql: str, nodes: tuple[str, ...] = tuple(NODES)) -> None:
    for n in nodes:
        server, db = NODES[n]
        backends[server].query(sql, database=db)


def _reset(backends: list[Any]) -> None:
    _on_nodes(backends, f"DROP TABLE IF EXISTS `{TABLE}`")
    _on_nodes(backends, f"CREATE TABLE `{TABLE}` (id INT PRIMARY KEY, v INT)")


def _config(tmp_path: Path, backends: list[Any], zookeeper: Any, zk_root: str, dead_group2: bool = False) -> str:
    servers: list[Any] = list(backends)
    if dead_group2:  # ha_group2 names a port nothing listens on
        from types import SimpleNamespace
        servers[1] = SimpleNamespace(host="127.0.0.1", port=free_port())
    cfg = proxy_config(servers, free_port(), free_port(), instance="ops",
                       cluster=cluster_section(zookeeper, root=zk_root))
    cfg["db_groups"]["ha_group2"]["connect_timeout_s"] = 2
    path = tmp_path / ("dead.toml" if dead_group2 else "pydble.toml")
    path.write_text(to_toml(cfg))
    return str(path)


def _rows(run: Any) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in run.out.splitlines() if line.startswith("schema1.")}


def test_gc_reconciles_then_deletes_records_of_offline_owners(seed, backends, zookeeper, zk_root, tmp_path):
    _reset(backends)
    _on_nodes(backends, ADD)                      # the dead originator's DDL reached every node
    seed.record("schema1", TABLE, "dble-9", ADD, INIT, acks={"dble-9": INIT})
    seed.lock("schema1", TABLE, "dble-9", ADD)
    seed.record("schema1", "ops_gone", "dble-9", "CREATE TABLE ops_gone (id INT)", INIT)  # never created
    cfg = _config(tmp_path, backends, zookeeper, zk_root)

    dry = run_cli("ddl", "gc", "--dry-run", "--config", cfg)
    assert dry.rc == 0, dry
    assert _rows(dry)[f"schema1.{TABLE}"][4:6] == ["consistent", "would"], dry.out
    assert seed.exists(seed.paths.ddl_record("schema1", TABLE))

    r = run_cli("ddl", "gc", "--config", cfg)
    assert r.rc == 0, r
    rows = _rows(r)
    assert rows[f"schema1.{TABLE}"][1:6] == ["INIT", "dble-9", rows[f"schema1.{TABLE}"][3], "consistent", "deleted"]
    assert "same structure on dn1,dn2,dn3,dn4; columns id, v, c_gc" in r.out
    assert rows["schema1.ops_gone"][4:6] == ["absent", "deleted"], r.out
    assert not seed.exists(seed.paths.ddl_record("schema1", TABLE))
    assert not seed.exists(seed.paths.ddl_lock("schema1", TABLE))
    assert not seed.exists(seed.paths.ddl_record("schema1", "ops_gone"))


def test_gc_reports_a_table_left_inconsistent(seed, backends, zookeeper, zk_root, tmp_path):
    _reset(backends)
    _on_nodes(backends, ADD, ("dn1",))             # the originator died half-way
    seed.record("schema1", TABLE, "dble-9", ADD, INIT)
    r = run_cli("ddl", "gc", "--json", "--config", _config(tmp_path, backends, zookeeper, zk_root))
    assert r.rc == 0, r
    (row,) = r.json()["tables"]
    assert row["action"] == "deleted" and row["backends"]["state"] == "inconsistent", row
    variants = {tuple(v["nodes"]): v["columns"] for v in row["backends"]["variants"]}
    assert variants == {("dn2", "dn3", "dn4"): ["id", "v"], ("dn1",): ["id", "v", "c_gc"]}
    assert not seed.exists(seed.paths.ddl_record("schema1", TABLE))


def test_gc_keeps_a_record_when_a_node_cannot_be_read(seed, backends, zookeeper, zk_root, tmp_path):
    _reset(backends)
    seed.record("schema1", TABLE, "dble-9", ADD, INIT)
    cfg = _config(tmp_path, backends, zookeeper, zk_root, dead_group2=True)
    r = run_cli("ddl", "gc", "--config", cfg)
    assert r.rc == 3, r
    row = _rows(r)[f"schema1.{TABLE}"]
    assert row[4:6] == ["unknown", "kept"], r.out
    assert "could not read every node" in r.out
    assert seed.exists(seed.paths.ddl_record("schema1", TABLE))
    data = run_cli("ddl", "gc", "--json", "--config", cfg).json()
    assert set(data["tables"][0]["backends"]["unknown"]) == {"dn2", "dn4"}


def _full_meta(proxy: Any, table: str = TABLE) -> tuple[Any, ...]:
    conn = proxy.manager()
    try:
        with conn.cursor() as cur:
            cur.execute(f"check full @@metadata where schema='schema1' and table='{table}'")
            rows = cur.fetchall()
    finally:
        conn.close()
    assert len(rows) == 1, rows
    return tuple(str(c) for c in rows[0])   # the 0/1 flags as text, whatever type the driver gives


def _wait(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def test_gc_with_proxies_online_and_their_metadata_follows(seed, backends, zookeeper, zk_root, fresh_proxy):
    _reset(backends)
    section = cluster_section(zookeeper, root=zk_root, session_timeout_s=3, ack_timeout_s=5)
    p1 = fresh_proxy(instance="dble-1", cluster=section)
    p2 = fresh_proxy(instance="dble-2", cluster=section)
    # Hold the survivors' reconcile election, as a stuck elected survivor would: they cannot heal the
    # orphan themselves, so the operator's gc has to.
    seed.client.create(seed.paths.reconcile_lock, b"stuck-survivor", ephemeral=True, makepath=True)

    status = run_cli("cluster", "status", "--json", "--config", str(p1.config_path)).json()
    assert {(i["name"], i["port"]) for i in status["online"]} == {("dble-1", p1.proxy_port), ("dble-2", p2.proxy_port)}
    assert all(i["meta_version"] > 0 for i in status["online"])
    assert status["reconcile_lock"]["instance"] == "stuck-survivor"

    # dble-9 wrote INIT, both instances locked the table and acked, the ALTER reached the nodes, dble-9 died
    seed.record("schema1", TABLE, "dble-9", ADD, INIT)
    acks = seed.paths.ddl_acks("schema1", TABLE)
    _wait(lambda: set(seed.client.get_children(acks)) >= {"dble-1", "dble-2"}, 15, "INIT acks of both instances")
    _on_nodes(backends, ADD)
    assert _full_meta(p1)[5] == "0"                  # memory is behind the backends
    with pytest.raises(pymysql.MySQLError) as e:     # and the table stays locked by the dead originator
        p2.query(f"ALTER TABLE {TABLE} ADD COLUMN c_other INT")
    assert e.value.args[0] == 4006

    listed = run_cli("ddl", "list", "--json", "--config", str(p1.config_path)).json()
    (row,) = listed["ddl"]
    assert row["owner"] == "dble-9" and row["owner_online"] is False and row["phase"] == INIT
    assert {a["instance"] for a in row["record"]["acks"]} == {"dble-1", "dble-2"}

    r = run_cli("ddl", "gc", "--config", str(p2.config_path))
    assert r.rc == 0, r
    assert _rows(r)[f"schema1.{TABLE}"][4:6] == ["consistent", "deleted"], r.out
    assert not seed.exists(seed.paths.ddl_record("schema1", TABLE))

    for p in (p1, p2):
        row = _wait(lambda p=p: (lambda m: m if m[4:6] == ("1", "1") and "`c_gc`" in m[3] else None)(_full_meta(p)),
                    10, f"{p.instance} to refresh {TABLE} from the backends")
        assert "`c_gc`" in row[3]
    p2.query(f"ALTER TABLE {TABLE} DROP COLUMN c_gc")   # the local locks are gone too
    assert "`c_gc`" not in _full_meta(p1)[3]
    assert run_cli("ddl", "list", "--json", "--config", str(p1.config_path)).json()["ddl"] == []
