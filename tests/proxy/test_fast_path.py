"""The hot path: statements served from the data callback must behave exactly like the general path.

Pipelined commands (Connector/J sends its post-login queries and batches that way) are answered in
order whether each one takes the fast path or the task; the router's regex shortcut for point reads
plans exactly what the full planner plans.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Iterator

import pytest

from harness import proxy_config

from wire import RawClient, drop_after


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    """Leave the shared backends without this module's tables."""
    yield from drop_after(proxy, "sharding_4_t1", "fp_plain")


@pytest.fixture(scope="module")
def seeded(proxy) -> None:
    proxy.query("DROP TABLE IF EXISTS sharding_4_t1")
    proxy.query("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))")
    proxy.query("INSERT INTO sharding_4_t1 VALUES " + ", ".join(f"({i}, 'n{i}')" for i in range(1, 41)))


def _packet(sql: str) -> bytes:
    payload = b"\x03" + sql.encode()
    return len(payload).to_bytes(3, "little") + b"\x00" + payload


def test_pipelined_commands_are_answered_in_order(proxy, seeded) -> None:
    statements = [
        "SELECT name FROM sharding_4_t1 WHERE id = 1",     # fast
        "SELECT name FROM sharding_4_t1 WHERE id = 2",     # fast, another node
        "SET @x = 'set-in-between'",                       # the task
        "SELECT @x",                                       # the task (no table)
        "SELECT name FROM sharding_4_t1 WHERE id = 3",     # fast again, with the session var replayed first
        "SELECT COUNT(*) FROM sharding_4_t1",              # the task (merge)
        "UPDATE sharding_4_t1 SET name = 'upd' WHERE id = 4",
        "SELECT name FROM sharding_4_t1 WHERE id = 4",
        "SELECT DATABASE()",
    ]
    expected = [[b"n1"], [b"n2"], None, [b"set-in-between"], [b"n3"], [b"40"], None, [b"upd"], [b"schema1"]]
    with RawClient(proxy.port) as c:
        assert c.login().kind == "ok"
        for _ in range(3):
            c.send_raw(b"".join(_packet(s) for s in statements))   # one write: all pipelined
            for sql, want in zip(statements, expected):
                res = c.read_result()
                assert res.error is None, (sql, res.error.payload)
                if want is None:
                    assert res.oks, sql
                else:
                    assert res.sets[0][1] == [want], sql
        proxy.query("UPDATE sharding_4_t1 SET name = 'n4' WHERE id = 4")


def test_pipelined_fast_queries_then_quit(proxy, seeded) -> None:
    with RawClient(proxy.port) as c:
        assert c.login().kind == "ok"
        ids = list(range(1, 41)) * 5
        c.send_raw(b"".join(_packet(f"SELECT id, name FROM sharding_4_t1 WHERE id = {i}") for i in ids)
                   + b"\x01\x00\x00\x00\x01")
        for i in ids:
            assert c.read_result().sets[0][1] == [[str(i).encode(), f"n{i}".encode()]]
        assert c.closed_by_server()


def test_fast_errors_keep_the_session(proxy, seeded) -> None:
    with RawClient(proxy.port) as c:
        assert c.login().kind == "ok"
        c.send_raw(_packet("SELECT nope FROM sharding_4_t1 WHERE id = 1")
                   + _packet("SELECT name FROM sharding_4_t1 WHERE id = 1")
                   + _packet("INSERT INTO sharding_4_t1 VALUES (1, 'dup')")
                   + _packet("SELECT name FROM sharding_4_t1 WHERE id = 5"))
        first = c.read_result()
        assert first.error is not None and first.error.err_code == 1054
        assert c.read_result().sets[0][1] == [[b"n1"]]
        dup = c.read_result()
        assert dup.error is not None and dup.error.err_code == 1062
        assert c.read_result().sets[0][1] == [[b"n5"]]


def test_fast_path_inside_transactions(proxy, seeded) -> None:
    conn = proxy.connect(autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE sharding_4_t1 SET name = 'tx' WHERE id = 7")
            cur.execute("SELECT name FROM sharding_4_t1 WHERE id = 7")   # same pinned connection
            assert cur.fetchone() == ("tx",)
            assert proxy.query("SELECT name FROM sharding_4_t1 WHERE id = 7") == [("n7",)]
            conn.rollback()
            cur.execute("SELECT name FROM sharding_4_t1 WHERE id = 7")
            assert cur.fetchone() == ("n7",)
    finally:
        conn.close()


def test_session_state_reaches_fast_queries(proxy, seeded) -> None:
    proxy.query("DROP TABLE IF EXISTS fp_plain")
    proxy.query("CREATE TABLE fp_plain (id INT PRIMARY KEY, s VARCHAR(20))")
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = 'ANSI_QUOTES'")
            cur.execute("INSERT INTO fp_plain VALUES (1, 'x')")
            cur.execute("SELECT @@sql_mode FROM fp_plain WHERE id = 1")
            assert cur.fetchone() == ("ANSI_QUOTES",)
            cur.execute("SELECT LAST_INSERT_ID()")
    finally:
        conn.close()


# -- the router's shortcut ----------------------------------------------------------------------

def _router():
    from meta.config import parse_config
    from proxy.router import Router

    fake = [SimpleNamespace(host="127.0.0.1", port=p) for p in (3306, 3307)]
    raw = proxy_config(fake, 8066, 9066)
    raw["functions"]["by-name"] = {"type": "stringhash", "partition_count": [4], "partition_length": [256]}
    raw["functions"]["by-range"] = {"type": "range", "ranges": [{"start": 0, "end": 100, "node": 0},
                                                                 {"start": 100, "end": 200, "node": 1}]}
    tables = raw["schemas"]["schema1"]["tables"]
    tables["s4"] = {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "by-name",
                    "column": "name"}
    tables["r2"] = {"type": "sharding", "nodes": ["dn1", "dn2"], "function": "by-range", "column": "id"}
    return Router(parse_config(raw))


SHORTCUT_CASES = [
    "SELECT c FROM sharding_4_t1 WHERE id=5012",
    "select a, b,c from sharding_4_t1 where ID = 3 ",
    "SELECT * FROM sharding_2_t1 WHERE id = 0",
    "SELECT name FROM sharding_4_t1 WHERE name = 7",      # not the sharding column: scatter
    "SELECT x FROM test WHERE id = 1",                    # global
    "SELECT x FROM plain_default WHERE id = 99",          # default node
    "SELECT x FROM s4 WHERE name = 12",                   # stringhash on a number
    "SELECT x FROM r2 WHERE id = 150",                    # range
    "SELECT x FROM r2 WHERE id = 5000",                   # range: no node
    "SELECT x FROM r2 WHERE ID=99",
]


@pytest.mark.parametrize("sql", SHORTCUT_CASES)
def test_router_shortcut_plans_what_the_planner_plans(sql, monkeypatch) -> None:
    import proxy.router as router_mod

    fast = _router()
    try:
        got = fast.route(sql, "schema1")
    except Exception as e:  # noqa: BLE001 - compared below
        got = e
    monkeypatch.setattr(router_mod, "_FAST_SELECT", re.compile(r"(?!)"))
    slow = _router()
    try:
        want = slow.route(sql, "schema1")
    except Exception as e:  # noqa: BLE001
        want = e
    if isinstance(want, Exception):
        assert type(got) is type(want) and str(got) == str(want)
    else:
        assert (got.kind, got.targets, got.is_write, got.tables) == (want.kind, want.targets, want.is_write,
                                                                     want.tables)
