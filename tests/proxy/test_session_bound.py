"""Session-bound statements through pydble: user locks (GET_LOCK and kin), LOCK TABLES, row locks of
SELECT ... FOR UPDATE, and all-or-nothing writes over several nodes, each checked from another session
or on the backends directly, as a user of one MySQL would notice them."""

from __future__ import annotations

from typing import Any, Iterator

import pymysql
import pytest

from wire import drop_after, hash_node, node_rows

FOUR = ("dn1", "dn2", "dn3", "dn4")


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    """Leave the shared backends without this module's tables."""
    yield from drop_after(proxy, "sharding_4_t1")


@pytest.fixture
def table(proxy) -> Iterator[str]:
    """sharding_4_t1 recreated with ids 1..8: (id INT PRIMARY KEY, v TINYINT)."""
    proxy.query("DROP TABLE IF EXISTS sharding_4_t1")
    proxy.query("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, v TINYINT)")
    proxy.query("INSERT INTO sharding_4_t1 VALUES " + ", ".join(f"({i}, {i})" for i in range(1, 9)))
    yield "sharding_4_t1"


def one(conn: Any, sql: str) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
    return row[0] if row else None


def err(conn: Any, sql: str) -> int:
    with pytest.raises(pymysql.MySQLError) as e:
        with conn.cursor() as cur:
            cur.execute(sql)
    return e.value.args[0]


def close(*conns: Any) -> None:
    for c in conns:
        if c.open:
            c.close()


def session(proxy, db: str = "schema1") -> Any:
    c = proxy.connect(database=db) if db else proxy.connect()
    c.autocommit(True)
    return c


# -- user locks ----------------------------------------------------------------------------------

def test_get_lock_contends_between_sessions_and_ends_with_the_session(proxy) -> None:
    a, b = session(proxy), session(proxy, "schema2")   # another schema: the same lock namespace
    try:
        assert one(a, "SELECT GET_LOCK('h9_lock', 0)") == 1
        assert one(b, "SELECT GET_LOCK('h9_lock', 0)") == 0          # held by a, as on one MySQL
        assert one(b, "SELECT IS_FREE_LOCK('h9_lock')") == 0
        assert one(b, "SELECT IS_USED_LOCK('h9_lock')") == one(a, "SELECT CONNECTION_ID()")
        assert one(b, "SELECT RELEASE_LOCK('h9_lock')") == 0         # not b's to release
        for _ in range(5):  # a's other statements (pooled connections) do not lose or spread the lock
            one(a, "SELECT 1 FROM dual")
            assert one(b, "SELECT GET_LOCK('h9_lock', 0)") == 0
        assert one(a, "SELECT RELEASE_LOCK('h9_lock')") == 1
        assert one(b, "SELECT GET_LOCK('h9_lock', 0)") == 1
        b.close()                                                      # session end releases it
        assert one(a, "SELECT GET_LOCK('h9_lock', 5)") == 1
        assert one(a, "SELECT RELEASE_ALL_LOCKS()") == 1
        assert one(a, "SELECT IS_FREE_LOCK('h9_lock')") == 1
    finally:
        close(a, b)


def test_reset_connection_releases_user_locks(proxy) -> None:
    a, b = session(proxy), session(proxy)
    try:
        assert one(a, "SELECT GET_LOCK('h9_reset', 0)") == 1
        assert one(b, "SELECT GET_LOCK('h9_reset', 0)") == 0
        a._execute_command(0x1F, b"")  # COM_RESET_CONNECTION, as a connection pool sends it
        a._read_ok_packet()
        assert one(b, "SELECT GET_LOCK('h9_reset', 0)") == 1
    finally:
        close(a, b)


def test_user_lock_functions_where_they_cannot_stay_on_the_session_are_refused(proxy, table) -> None:
    a = session(proxy)
    try:
        assert err(a, "SELECT GET_LOCK('h9_x', 0) FROM sharding_4_t1 WHERE id = 1") == 1235
        assert err(a, "SET @got = GET_LOCK('h9_x', 0)") == 1235
        assert err(a, "SELECT 1 + IS_USED_LOCK('h9_x')") == 1235
        with a.cursor(pymysql.cursors.Cursor) as cur:  # nothing was taken by the refused statements
            cur.execute("SELECT IS_FREE_LOCK('h9_x')")
            assert cur.fetchone() == (1,)
    finally:
        a.close()
