"""A DDL that waits on a backend's metadata lock longer than `backend_timeout_s` (issue 17 item 1).

The DDL is not subject to the backend timeout: it waits as long as the backend lets it, keeps the
table locked (and shown by `show @@ddl`) meanwhile, and ends with memory equal to the backends. A DDL
whose table has a node that cannot be reached is refused before any node runs it.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Iterator

import pymysql
import pytest

from ddl_env import Background, MetaProxyEnv, env_fixture
from harness import free_port, proxy_config

T_DEF = "(id INT NOT NULL, v VARCHAR(10), PRIMARY KEY (id))"
BACKEND_TIMEOUT_S = 2
DDL_TIMEOUT_S = 4


def _add_dead_node(cfg: dict[str, Any]) -> None:
    """A shardingNode on a port nothing listens on, and a table that spans it."""
    cfg["db_groups"]["ha_dead"] = {"host": "127.0.0.1", "port": free_port(), "user": "root", "password": "",
                                   "connect_timeout_s": 1}
    cfg["sharding_nodes"]["dn6"] = {"db_group": "ha_dead", "database": "db1"}
    cfg["schemas"]["schema1"]["tables"]["half_dead"] = {"type": "global", "nodes": ["dn1", "dn6"]}


@pytest.fixture(scope="module")
def env(backends: Any) -> Iterator[MetaProxyEnv]:
    yield from env_fixture(backends, tag="ddlslow", server_extra={"backend_timeout_s": BACKEND_TIMEOUT_S,
                                                                 "ddl_timeout_s": DDL_TIMEOUT_S},
                           mutate=_add_dead_node)


def _wait_blocked(env: MetaProxyEnv, node: str, timeout: float = 10.0) -> None:
    """Wait (bounded) until the proxy's ALTER sits on the node waiting for the table's metadata lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for row in env.server_of(node).query("SHOW PROCESSLIST"):
            if "metadata lock" in (row[6] or "") and (row[7] or "").upper().startswith("ALTER"):
                return
        time.sleep(0.05)
    raise AssertionError(f"no ALTER waiting on {node}")


def test_alter_waiting_on_a_metadata_lock_outlasts_the_backend_timeout(env: MetaProxyEnv) -> None:
    env.drop_everywhere("sharding_2_t1")
    env.sql(f"CREATE TABLE sharding_2_t1 {T_DEF}")
    env.sql("INSERT INTO sharding_2_t1 (id, v) VALUES (1, 'a'), (2, 'b')")
    blocker = env.direct("dn1")
    try:
        cur = blocker.cursor()
        cur.execute("BEGIN")
        cur.execute("SELECT * FROM sharding_2_t1")      # a metadata lock until the transaction ends
        alter = Background(lambda: env.sql("ALTER TABLE sharding_2_t1 ADD COLUMN x INT FIRST"))
        _wait_blocked(env, "dn1")
        time.sleep(BACKEND_TIMEOUT_S + 1.5)             # well past backend_timeout_s
        assert not alter.done, f"the ALTER ended while dn1 still waited: {alter.error}"
        (row,) = env.wait_ddl("sharding_2_t1")
        assert row["sql"] == "ALTER TABLE sharding_2_t1 ADD COLUMN x INT FIRST"
        code, msg = env.error_of("ALTER TABLE sharding_2_t1 ADD COLUMN y INT")
        assert code == 4006 and "is doing DDL" in msg
        cur.execute("COMMIT")
        alter.join()
        assert alter.error is None, alter.error
    finally:
        blocker.close()
    for node in ("dn1", "dn2"):
        assert env.columns_on(node, "sharding_2_t1")[0] == "x"
    row = env.row("schema1", "sharding_2_t1")
    assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (1, 1)
    assert "`x` int(11) DEFAULT NULL,\n  `id`" in row["table_structure"]
    assert env.show_ddl() == []
    env.sql("DROP TABLE sharding_2_t1")


def test_ddl_with_an_unreachable_node_is_refused_before_any_node_runs_it(env: MetaProxyEnv) -> None:
    env.drop_everywhere("half_dead", nodes=("dn1",))
    t0 = time.monotonic()
    code, msg = env.error_of("CREATE TABLE half_dead (id INT PRIMARY KEY)")
    assert not 2000 <= code < 3000, (code, msg)
    assert code == 1105 and "shardingNode[dn6]" in msg and "unreachable" in msg, msg
    assert time.monotonic() - t0 < 10
    assert env.show_create("dn1", "half_dead") is None   # not half-created
    assert env.show_ddl() == []


def _ddl_on(env: MetaProxyEnv, node: str) -> list[str]:
    """The ALTER statements a node is running now."""
    return [row[7] for row in env.server_of(node).query("SHOW PROCESSLIST")
            if (row[7] or "").upper().startswith("ALTER")]


def test_client_gone_past_ddl_timeout_kills_the_ddl_then_reloads_and_releases(env: MetaProxyEnv) -> None:
    env.drop_everywhere("sharding_2_t1")
    env.sql(f"CREATE TABLE sharding_2_t1 {T_DEF}")
    blocker = env.direct("dn1")
    leaver = env.client()
    try:
        cur = blocker.cursor()
        cur.execute("BEGIN")
        cur.execute("SELECT * FROM sharding_2_t1")
        t0 = time.monotonic()
        alter = Background(lambda: leaver.cursor().execute("ALTER TABLE sharding_2_t1 ADD COLUMN gone INT"))
        _wait_blocked(env, "dn1")
        leaver._sock.shutdown(socket.SHUT_RDWR)          # the client goes away mid-DDL
        alter.join()
        env.wait_ddl("sharding_2_t1")                    # still running on dn1: still locked
        assert _ddl_on(env, "dn1")
        env.wait_ddl("sharding_2_t1", present=False, timeout=DDL_TIMEOUT_S + 10)
        assert time.monotonic() - t0 >= DDL_TIMEOUT_S - 0.5
        # released only once the ALTER was stopped on dn1, while the transaction still holds the table
        assert _ddl_on(env, "dn1") == []
        cur.execute("COMMIT")
    finally:
        blocker.close()
        leaver.close()
    assert "gone" not in env.columns_on("dn1", "sharding_2_t1")
    assert "gone" in env.columns_on("dn2", "sharding_2_t1")   # dn2 had finished before the give-up
    row = env.row("schema1", "sharding_2_t1")                 # memory reloaded from the backends
    assert row["consistent_in_sharding_nodes"] == 0
    assert row["table_structure"] in (env.show_create("dn1", "sharding_2_t1"), env.show_create("dn2", "sharding_2_t1"))
    env.sql("DROP TABLE sharding_2_t1")


def test_shutdown_stops_a_waiting_ddl_on_its_nodes_before_exiting(backends: Any) -> None:
    """SIGTERM while an ALTER waits on dn1: pydble stops it there (KILL QUERY) and exits cleanly,
    instead of leaving the statement queued behind the transaction with nobody to answer."""
    for env in env_fixture(backends, tag="ddlstop"):
        env.drop_everywhere("sharding_2_t1")
        env.sql(f"CREATE TABLE sharding_2_t1 {T_DEF}")
        blocker = env.direct("dn1")
        try:
            cur = blocker.cursor()
            cur.execute("BEGIN")
            cur.execute("SELECT * FROM sharding_2_t1")
            alter = Background(lambda: env.sql("ALTER TABLE sharding_2_t1 ADD COLUMN bye INT"))
            _wait_blocked(env, "dn1")
            env.proxy.stop(timeout=30)
            assert env.proxy.returncode == 0, env.proxy.returncode   # exited on its own, not killed
            assert _ddl_on(env, "dn1") == []        # stopped there while the transaction still holds the table
            assert "giving up on a DDL" in env.proxy.log_text() and "Traceback" not in env.proxy.log_text()
            alter.join()
            assert alter.error is not None
            cur.execute("COMMIT")
        finally:
            blocker.close()
        assert "bye" not in env.columns_on("dn1", "sharding_2_t1")


def test_a_node_frozen_while_its_ddl_waits_fails_that_part_instead_of_hanging(
        fresh_backends: Any, fresh_proxy: Any) -> None:
    """No time limit for a DDL does not mean waiting forever on a dead node: a backend frozen (SIGSTOP)
    while the ALTER waits there is found out by the liveness check (every backend_timeout_s, from
    another connection), and the client gets an error naming the node; the table is free again."""
    cfg = proxy_config(list(fresh_backends), free_port(), free_port(), instance="pydble-frozen")
    cfg["server"]["backend_timeout_s"] = BACKEND_TIMEOUT_S
    cfg["db_groups"]["ha_group2"]["connect_timeout_s"] = 1
    p = fresh_proxy(cfg, backends=fresh_backends)
    p.query(f"CREATE TABLE sharding_2_t1 {T_DEF}")
    b2 = fresh_backends[1]
    blocker = pymysql.connect(host=b2.host, port=b2.port, user="root", password="", database="db1")
    try:
        with blocker.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT * FROM sharding_2_t1")
        alter = Background(lambda: p.query("ALTER TABLE sharding_2_t1 ADD COLUMN z INT"))
        deadline = time.monotonic() + 10
        while not any("metadata lock" in (r[6] or "") for r in b2.query("SHOW PROCESSLIST")):
            assert time.monotonic() < deadline, "no ALTER waiting on dn2"
            time.sleep(0.05)
        b2.pause()
        try:
            alter.join(6 * BACKEND_TIMEOUT_S + 10)
            assert isinstance(alter.error, pymysql.MySQLError), alter.error
            assert "dn2" in alter.error.args[1], alter.error.args
        finally:
            b2.resume()
    finally:
        blocker.close()
    # not locked for good (an ALTER would now be refused until the half-applied one is repaired)
    p.query("TRUNCATE TABLE sharding_2_t1")
