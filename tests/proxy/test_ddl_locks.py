"""Per-table DDL locks through a real proxy: a DDL held up on one backend blocks other DDL on its table
(4006 at once), not DML and not other tables; a client leaving mid-DDL, and `kill @@ddl_lock`, free it.

A DDL is made slow the way it is in production: another connection holds the table on one backend
(`LOCK TABLES ... WRITE`, or an open transaction's metadata lock), so the proxy's statement waits there.
"""

from __future__ import annotations

import re
import socket
import time
from typing import Any, Iterator

import pymysql
import pytest

from ddl_env import ALL4, Background, MetaProxyEnv, env_fixture

T_DEF = "(id INT NOT NULL, v VARCHAR(10), PRIMARY KEY (id))"
BUSY = "SCHEMA[schema1], TABLE[{}] is doing DDL"


@pytest.fixture(scope="module")
def env(backends: Any) -> Iterator[MetaProxyEnv]:
    yield from env_fixture(backends, tag="ddllock")


def _fresh(env: MetaProxyEnv, table: str) -> None:
    env.drop_everywhere(table)
    env.sql(f"CREATE TABLE {table} {T_DEF}")
    env.sql(f"INSERT INTO {table} (id, v) VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')")


def _wait_blocked_on_backend(env: MetaProxyEnv, node: str, timeout: float = 10.0) -> None:
    """Wait (bounded) until the proxy's DDL sits on the node's backend waiting for the table."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for row in env.server_of(node).query("SHOW PROCESSLIST"):
            state, info = row[6] or "", row[7] or ""
            if "metadata lock" in state and re.match(r"(ALTER|CREATE|DROP|TRUNCATE)", info, re.I):
                return
        time.sleep(0.05)
    raise AssertionError(f"no DDL waiting on {node}")


def _fails_fast_with_4006(env: MetaProxyEnv, sql: str, table: str) -> None:
    t0 = time.monotonic()
    code, msg = env.error_of(sql)
    assert (code, msg) == (4006, BUSY.format(table)), sql
    assert time.monotonic() - t0 < 2.0, f"{sql} waited {time.monotonic() - t0:.2f}s before failing"


def test_second_ddl_fails_at_once_while_dml_and_other_tables_go_on(env: MetaProxyEnv) -> None:
    _fresh(env, "shard_a")
    blocker = env.direct("dn4")
    try:
        blocker.cursor().execute("LOCK TABLES shard_a WRITE")
        slow = Background(lambda: env.sql("ALTER TABLE shard_a ADD COLUMN slow INT DEFAULT 3"))
        _wait_blocked_on_backend(env, "dn4")
        (row,) = env.wait_ddl("shard_a")
        assert row["schema"] == "schema1" and row["sql"] == "ALTER TABLE shard_a ADD COLUMN slow INT DEFAULT 3"
        assert row["instance"] == "pydble-ddllock" and row["phase"] == "EXECUTING"
        assert re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d", row["since"])
        for sql in ("ALTER TABLE shard_a ADD COLUMN other INT", "CREATE INDEX ix_v ON shard_a (v)",
                    "DROP INDEX ix_v ON shard_a", "TRUNCATE TABLE shard_a", "DROP TABLE shard_a",
                    "DROP TABLE IF EXISTS shard_a", f"CREATE TABLE IF NOT EXISTS shard_a {T_DEF}"):
            _fails_fast_with_4006(env, sql, "shard_a")
        # DML is not held by the DDL lock: rows on the nodes that are not locked answer at once
        t0 = time.monotonic()
        assert env.sql("SELECT id, v FROM shard_a WHERE id = 1") == [(1, "a")]            # dn2
        env.sql("INSERT INTO shard_a (id, v) VALUES (5, 'e')")                             # dn2
        env.sql("UPDATE shard_a SET v = 'bb' WHERE id = 2")                                # dn3
        assert env.sql("SELECT v FROM shard_a WHERE id = 2") == [("bb",)]
        assert time.monotonic() - t0 < 3.0
        # the lock is per table: DDL elsewhere and a reload of another table proceed
        env.drop_everywhere("shard_b")
        env.sql(f"CREATE TABLE shard_b {T_DEF}")
        env.sql("DROP TABLE shard_b")
        env.reload("schema='schema1' and table='shard_b'")
        code, msg = env.manager_error("reload @@metadata")
        assert code == 4006 and msg.startswith("There is other session is doing DDL")
        assert "ALTER TABLE shard_a ADD COLUMN slow" in msg
        assert not slow.done
        blocker.cursor().execute("UNLOCK TABLES")
        slow.join()
        assert slow.error is None, slow.error
    finally:
        blocker.close()
    # answered only after the metadata was refreshed: the very next check shows the column
    row = env.row("schema1", "shard_a")
    assert "`slow` int(11) DEFAULT 3" in row["table_structure"]
    assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (1, 1)
    for n in ALL4:
        assert "slow" in env.columns_on(n, "shard_a")
    assert env.show_ddl() == []
    env.sql("ALTER TABLE shard_a DROP COLUMN slow")        # the lock is free again


@pytest.mark.parametrize("table, node", [("glob_a", "dn3"), ("dflt_lock", "dn5")])
def test_ddl_held_by_an_open_transaction_locks_only_its_table(env: MetaProxyEnv, table: str, node: str) -> None:
    _fresh(env, table)
    blocker = env.direct(node)
    try:
        cur = blocker.cursor()
        cur.execute("BEGIN")
        cur.execute(f"SELECT COUNT(*) FROM {table}")      # a shared metadata lock until COMMIT
        slow = Background(lambda: env.sql(f"CREATE INDEX ix_slow ON {table} (v)"))
        _wait_blocked_on_backend(env, node)
        env.wait_ddl(table)
        _fails_fast_with_4006(env, f"ALTER TABLE {table} ADD COLUMN x INT", table)
        _fails_fast_with_4006(env, f"DROP TABLE {table}", table)
        cur.execute("COMMIT")
        slow.join()
        assert slow.error is None, slow.error
    finally:
        blocker.close()
    assert "KEY `ix_slow` (`v`)" in env.row("schema1", table)["table_structure"]
    env.sql(f"DROP TABLE {table}")


def test_client_leaving_mid_ddl_releases_the_lock_once_the_ddl_ends(env: MetaProxyEnv) -> None:
    _fresh(env, "dflt_gone")
    blocker = env.direct("dn5")
    leaver = env.client()
    try:
        cur = blocker.cursor()
        cur.execute("BEGIN")
        cur.execute("SELECT COUNT(*) FROM dflt_gone")
        ddl = Background(lambda: leaver.cursor().execute("ALTER TABLE dflt_gone ADD COLUMN late INT"))
        _wait_blocked_on_backend(env, "dn5")
        env.wait_ddl("dflt_gone")
        leaver._sock.shutdown(socket.SHUT_RDWR)           # the client goes away mid-DDL
        ddl.join()
        assert isinstance(ddl.error, pymysql.MySQLError)
        # the statement is still running on the backend: the table stays locked meanwhile
        _fails_fast_with_4006(env, "ALTER TABLE dflt_gone ADD COLUMN other INT", "dflt_gone")
        cur.execute("COMMIT")
        env.wait_ddl("dflt_gone", present=False)
    finally:
        blocker.close()
        leaver.close()
    # the abandoned DDL completed and refreshed memory; the next DDL runs normally
    assert "`late` int(11)" in env.row("schema1", "dflt_gone")["table_structure"]
    env.sql("ALTER TABLE dflt_gone DROP COLUMN late")
    assert "late" not in env.columns_on("dn5", "dflt_gone")
    env.sql("DROP TABLE dflt_gone")


def test_kill_ddl_lock_frees_the_table_for_the_next_ddl(env: MetaProxyEnv) -> None:
    _fresh(env, "glob_b")
    blocker = env.direct("dn2")
    try:
        blocker.cursor().execute("LOCK TABLES glob_b WRITE")
        first = Background(lambda: env.sql("ALTER TABLE glob_b ADD COLUMN k1 INT"))
        _wait_blocked_on_backend(env, "dn2")
        env.wait_ddl("glob_b")
        _fails_fast_with_4006(env, "ALTER TABLE glob_b ADD COLUMN k2 INT", "glob_b")
        code, msg = env.manager_error("kill @@ddl_lock where schema='schema1' and table='glob_b'")
        assert code == 1105 and "belongs to online instance(s) pydble-ddllock" in msg and "force" in msg
        assert len(env.show_ddl()) == 1
        assert env.mq("kill @@ddl_lock where schema='schema1' and table='glob_b' force") == ([], [])
        assert env.show_ddl() == []
        code, msg = env.manager_error("kill @@ddl_lock where schema=schema1 and table=glob_b")
        assert code == 1105 and "no ddl lock" in msg
        # the next DDL is admitted (it then waits on the backend like the first)
        second = Background(lambda: env.sql("ALTER TABLE glob_b ADD COLUMN k2 INT"))
        (row,) = env.wait_ddl("glob_b")
        assert "k2" in row["sql"]
        blocker.cursor().execute("UNLOCK TABLES")
        first.join()
        second.join()
        assert first.error is None and second.error is None, (first.error, second.error)
    finally:
        blocker.close()
    env.wait_ddl("glob_b", present=False)   # the first DDL's end did not free the second's lock early
    structure = env.row("schema1", "glob_b")["table_structure"]
    assert "`k1`" in structure and "`k2`" in structure
    env.sql("DROP TABLE glob_b")
