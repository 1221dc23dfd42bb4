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
    from proxy.plan.router import Router

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
    import proxy.plan.router as router_mod

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


# -- the quick whole-answer check against the general scanner ---------------------------------------

def _answers():
    from hypothesis import strategies as st

    from proxy.wire.packets import frame, lenenc_int, lenenc_str

    def coldef(name: bytes) -> bytes:
        return (lenenc_str(b"def") + lenenc_str(b"db") + lenenc_str(b"t") + lenenc_str(b"t") + lenenc_str(name)
                + lenenc_str(name) + b"\x0c\x21\x00\xff\x00\x00\x00\xfd\x00\x00\x00\x00")

    value = st.one_of(st.none(), st.binary(max_size=300))
    status = st.integers(0, 0xFFFF)
    warnings = st.integers(0, 0xFFFF)

    @st.composite
    def resultset(draw, deprecate_eof: bool) -> bytes:
        ncols = draw(st.integers(1, 4))
        rows = draw(st.lists(st.lists(value, min_size=ncols, max_size=ncols), max_size=5))
        seq = 1
        out = [frame(seq, lenenc_int(ncols))]
        for i in range(ncols):
            seq += 1
            out.append(frame(seq, coldef(b"c%d" % i)))
        if not deprecate_eof:
            seq += 1
            out.append(frame(seq, b"\xfe\x00\x00\x02\x00"))
        for row in rows:
            seq += 1
            out.append(frame(seq, b"".join(b"\xfb" if v is None else lenenc_str(v) for v in row)))
        st_ = draw(status)
        w = draw(warnings).to_bytes(2, "little")
        seq += 1
        out.append(frame(seq, (b"\xfe\x00\x00" + st_.to_bytes(2, "little") + w) if deprecate_eof
                         else b"\xfe" + w + st_.to_bytes(2, "little")))
        return b"".join(out)

    @st.composite
    def ok(draw) -> bytes:
        return frame(1, b"\x00" + lenenc_int(draw(st.integers(0, 2 ** 40))) + lenenc_int(draw(st.integers(0, 2 ** 40)))
                     + draw(status).to_bytes(2, "little") + draw(warnings).to_bytes(2, "little")
                     + draw(st.binary(max_size=20)))

    @st.composite
    def answer(draw) -> tuple[bytes, bool]:
        de = draw(st.booleans())
        parts = draw(st.lists(st.one_of(resultset(de), ok(), st.just(frame(1, b"\xff\x15\x04#42000no"))),
                              min_size=1, max_size=3))
        data = b"".join(parts)
        cut = draw(st.one_of(st.just(len(data)), st.integers(0, len(data))))
        return data[:cut], de

    return answer()


def test_quick_answer_check_agrees_with_the_scanner() -> None:
    from hypothesis import given, settings

    from proxy.backends.backend import whole_text_answer
    from proxy.wire.constants import STATUS_MORE_RESULTS
    from proxy.wire.response import ResponseScanner

    hits = []

    @settings(max_examples=400, deadline=None)
    @given(_answers())
    def check(case: tuple[bytes, bool]) -> None:
        data, de = case
        got = whole_text_answer(data, de)
        sc = ResponseScanner(de)
        try:
            end = sc.scan(data)
        except Exception:  # noqa: BLE001 - garbage the scanner refuses: the quick check must not accept it
            assert got < 0
            return
        if got >= 0:  # sound: only a whole, final, single answer, with the scanner's status
            hits.append(got)
            assert sc.done and end == len(data) and sc.error is None
            assert got & 0xFFFF == sc.status and not got & STATUS_MORE_RESULTS
            assert got >> 16 == sc.warnings

    check()
    assert hits  # and it does recognise the common answers
