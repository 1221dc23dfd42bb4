"""The session a client asked for: its handshake collation, and the warnings of its last statement.

The collation id in the handshake response (its "charset" byte) is the session's, as on MariaDB:
replayed on every backend connection, visible in @@collation_connection and in how strings compare.
SHOW WARNINGS relays what the node(s) that ran the last statement reported, with SHOW COUNT(*)
WARNINGS and @@warning_count agreeing.
"""

from __future__ import annotations

import subprocess
from typing import Any, Iterator

import pytest

from harness import require_tool
from wire import BASE_CAPS, RawClient, drop_after

TABLE = "sharding_4_t1"
GLOBAL = "test"  # a global table on dn1..dn4 in the shared config


@pytest.fixture(scope="module", autouse=True)
def _table(proxy) -> Iterator[None]:
    proxy.query(f"DROP TABLE IF EXISTS {TABLE}")
    proxy.query(f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, name VARCHAR(20))")
    proxy.query(f"INSERT INTO {TABLE} VALUES " + ",".join(f"({i}, 'n{i}')" for i in range(1, 9)))
    proxy.query(f"DROP TABLE IF EXISTS {GLOBAL}")
    proxy.query(f"CREATE TABLE {GLOBAL} (id INT PRIMARY KEY, name VARCHAR(20))")
    proxy.query(f"INSERT INTO {GLOBAL} VALUES (1, 'g1')")
    yield from drop_after(proxy, TABLE, GLOBAL)


def _mysql(proxy, *args: str) -> subprocess.CompletedProcess:
    argv = [require_tool("mysql"), "--no-defaults", "-h127.0.0.1", f"-P{proxy.port}", "-utest", "-p111111", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


# -- collation ------------------------------------------------------------------------------------

def _login_with_collation(proxy, collation_id: int) -> RawClient:
    c = RawClient(proxy.port)
    c.read_greeting()
    resp = c.handshake_response("test", "111111", "schema1", BASE_CAPS)
    c.send_packet(1, resp[:8] + bytes((collation_id,)) + resp[9:])
    ok = c.read_packet()
    assert ok.kind == "ok", ok
    return c


def _one_row(c: RawClient, sql: str) -> list[bytes | None]:
    c.query(sql)
    return c.read_result().sets[0][1][0]


@pytest.mark.parametrize("collation_id,expected", [
    (224, [b"utf8mb4_unicode_ci", b"utf8mb4", b"1"]),    # what mysql2 and Connector/J send
    (46, [b"utf8mb4_bin", b"utf8mb4", b"0"]),
    (45, [b"utf8mb4_general_ci", b"utf8mb4", b"0"]),
])
def test_the_handshake_collation_is_the_sessions(proxy, collation_id: int, expected: list[bytes]) -> None:
    c = _login_with_collation(proxy, collation_id)
    try:
        probe = "SELECT @@collation_connection, @@character_set_client, 'ß' = 'ss'"
        assert _one_row(c, probe) == expected
        # the same on a statement routed to a table's node, and after COM_RESET_CONNECTION (as MariaDB)
        assert _one_row(c, f"SELECT @@collation_connection FROM {TABLE} WHERE id = 3") == expected[:1]
        c.command(b"\x1f")
        assert c.read_packet().kind == "ok"
        assert _one_row(c, probe) == expected
    finally:
        c.close()


def test_mysql_cli_default_character_set(proxy) -> None:
    res = _mysql(proxy, "--default-character-set=latin1", "-N", "schema1", "-e",
                 "SELECT @@character_set_client, @@collation_connection")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["latin1", "latin1_swedish_ci"]


# -- warnings -------------------------------------------------------------------------------------

def _warnings(cur: Any) -> list[tuple[Any, ...]]:
    cur.execute("SHOW WARNINGS")
    rows = [tuple(r) for r in cur.fetchall()]
    cur.execute("SHOW COUNT(*) WARNINGS")
    assert cur.fetchone() == (len(rows),)
    cur.execute("SELECT @@warning_count")
    assert cur.fetchone() == (len(rows),)
    return rows


def test_show_warnings_relays_the_backends_warnings(proxy) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            # one node (the client's point select)
            cur.execute(f"SELECT CAST(CONCAT(name, 'x') AS INT) FROM {TABLE} WHERE id = 3")
            first = _warnings(cur)
            assert first == [("Warning", 1292, "Truncated incorrect INTEGER value: 'n3x'")]
            # as in MariaDB, statements on no table keep them: SET, USE, BEGIN/COMMIT, SELECT 1 + 1
            for sql in ("SET @w = 1", "USE schema1", "BEGIN", "COMMIT", "SELECT 1 + 1", "SELECT DATABASE()"):
                cur.execute(sql)
                assert _warnings(cur) == first, sql
            # a statement on a table without warnings clears them
            cur.execute(f"SELECT name FROM {TABLE} WHERE id = 3")
            assert _warnings(cur) == []
            # every node of a merged read (ORDER BY: the rows are merged by pydble)
            cur.execute(f"SELECT CAST(CONCAT(id, 'x') AS INT) AS v FROM {TABLE} ORDER BY id")
            assert [r[0] for r in cur.fetchall()] == list(range(1, 9))
            got = _warnings(cur)
            assert sorted(got) == sorted(("Warning", 1292, f"Truncated incorrect INTEGER value: '{i}x'")
                                         for i in range(1, 9))
            cur.execute("SHOW WARNINGS LIMIT 2, 3")
            assert [tuple(r) for r in cur.fetchall()] == got[2:5]
            # every node of a streamed scatter (no ORDER BY)
            cur.execute(f"SELECT CAST(CONCAT(id, 'y') AS INT) FROM {TABLE} WHERE id IN (1, 2, 3)")
            assert len(cur.fetchall()) == 3
            assert sorted(m for _, _, m in _warnings(cur)) == [
                f"Truncated incorrect INTEGER value: '{i}y'" for i in (1, 2, 3)]
            # a write's warning (a duplicate ignored), then SHOW WARNINGS twice gives the same
            cur.execute(f"INSERT IGNORE INTO {TABLE} VALUES (3, 'again')")
            assert cur.rowcount == 0
            first = _warnings(cur)
            assert [(lv, code) for lv, code, _ in first] == [("Warning", 1062)]
            assert _warnings(cur) == first
            # an error is what SHOW ERRORS and @@error_count tell
            with pytest.raises(Exception):
                cur.execute(f"SELECT nosuch FROM {TABLE} WHERE id = 1")
            cur.execute("SHOW ERRORS")
            rows = cur.fetchall()
            assert [(lv, code) for lv, code, _ in rows] == [("Error", 1054)]
            cur.execute("SELECT @@error_count")
            assert cur.fetchone() == (1,)
    finally:
        conn.close()


def test_a_global_table_warns_once_like_one_table(proxy) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT IGNORE INTO {GLOBAL} VALUES (1, 'again')")  # a duplicate on every copy
            assert [(lv, code) for lv, code, _ in _warnings(cur)] == [("Warning", 1062)]
            cur.execute(f"SELECT CAST(CONCAT(name, 'q') AS INT) FROM {GLOBAL}")
            assert [m for _, _, m in _warnings(cur)] == ["Truncated incorrect INTEGER value: 'g1q'"]
    finally:
        conn.close()


def test_warnings_of_a_statement_in_a_transaction(proxy) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"UPDATE {TABLE} SET name = CONCAT(name, '') WHERE id = 5 AND CAST('5z' AS INT) = 5")
            got = _warnings(cur)
            assert got and set(got) == {("Warning", 1292, "Truncated incorrect INTEGER value: '5z'")}
            cur.execute("ROLLBACK")
    finally:
        conn.close()


def test_mysql_cli_show_warnings(proxy) -> None:
    # the CLI asks SHOW WARNINGS when the result's end says there are some: streamed and merged reads
    for order in ("", "ORDER BY id"):
        res = _mysql(proxy, "--show-warnings", "schema1", "-e",
                     f"SELECT CAST(CONCAT(name, 'w') AS INT) AS v FROM {TABLE} WHERE id IN (2, 4) {order}")
        assert res.returncode == 0, res.stderr
        out = res.stdout + res.stderr
        for i in (2, 4):
            assert f"Warning (Code 1292): Truncated incorrect INTEGER value: 'n{i}w'" in out, out


def test_warning_text_stays_in_the_sessions_character_set(proxy) -> None:
    conn = proxy.connect(charset="latin1")
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT CAST('\u00e9t\u00e9' AS INT) FROM {TABLE} WHERE id = 1")
            assert _warnings(cur) == [("Warning", 1292, "Truncated incorrect INTEGER value: '\u00e9t\u00e9'")]
    finally:
        conn.close()
