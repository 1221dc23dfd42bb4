"""Server-side prepared statements through the proxy, checked against MariaDB's own answers.

A raw client (tests/proxy/ps_wire.py) sends COM_STMT_* the way libmariadb does; PREPARE answers
and binary rows through the proxy must equal, byte for byte, what the backend node sends for the
same statement, and bound sharding keys must land rows on the node the function names.
"""

from __future__ import annotations

import copy
import struct
import time
from itertools import permutations
from typing import Any, Iterator

import pytest

from harness import ProxyProcess, free_port, global_status, proxy_config
from proxy.backends.backend import PREPARE_RETRY_S
from ps_wire import (T_BLOB, T_LONG, T_STRING, Prepared, PsClient, column_type, p_datetime, p_double, p_float, p_long,
                     p_longlong, p_null, p_str, p_time)

NODES = ("dn1", "dn2", "dn3", "dn4")
# dn1 = backend1.db1, dn2 = backend2.db1, dn3 = backend1.db2, dn4 = backend2.db2 (harness config)
NODE_DB = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2")}
TYPES_DDL = """CREATE TABLE ps_types (
  id INT NOT NULL PRIMARY KEY, ti TINYINT, si SMALLINT UNSIGNED, mi MEDIUMINT, bi BIGINT UNSIGNED,
  f FLOAT, d DOUBLE, dec1 DECIMAL(12,3), ch CHAR(5), vc VARCHAR(40), vb VARBINARY(20), tx TEXT,
  dt DATE, dtm DATETIME(6), ts TIMESTAMP NULL, tm TIME(3), yr YEAR, bt BIT(5), en ENUM('a','b'), js JSON
)"""
TYPES_ROWS = [
    "(1, -128, 65535, -8388608, 18446744073709551615, 1.5, -2.25e100, -123456789.125, 'ab', 'héllo', x'00ff', "
    "'text', '2024-02-29', '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05', '-838:59:59.000', 2024, b'10101', "
    "'b', '{\"k\": [1, 2]}')",
    "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL)",
    "(3, 0, 0, 0, 0, 0, 0, 0, '', '', '', '', '1000-01-01', '2024-01-02 00:00:00', NULL, '00:00:00', 1901, b'0', "
    "'a', '[]')",
    "(6, 127, 1, 1, 1, 3.4e38, 1e-300, 0.001, 'x', 'it''s', x'5c', 'a\\\\b', '9999-12-31', '9999-12-31 23:59:59', "
    "'2038-01-19 03:14:07', '12:34:56.789', 2155, b'11111', 'a', 'null')",
]


def node_of(i: int) -> str:
    """hash-four over dn1..dn4: value mod 4."""
    return NODES[i % 4]


@pytest.fixture(scope="module")
def ps_proxy(backends: list[Any]) -> Iterator[ProxyProcess]:
    """A proxy of our own whose config has the sharding tables these tests create."""
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-ps"))
    tables = cfg["schemas"]["schema1"]["tables"]
    for name in ("ps_t", "ps_types", "ps_tx", "ps_ddl", "ps_fwd"):
        tables[name] = {"type": "sharding", "nodes": list(NODES), "function": "hash-four", "column": "id"}
    # ps_use: schema1's on its default node dn5 (backend1.db3), schema2's on dn2 (backend2.db1)
    cfg["schemas"]["schema2"]["tables"]["ps_use"] = {"type": "single", "nodes": ["dn2"]}
    p = ProxyProcess(cfg, name="proxy-ps", release_ports=True)
    try:
        p.start()
        conn = p.connect()
        with conn.cursor() as cur:
            for t in ("ps_t", "ps_types", "ps_tx", "ps_ddl", "ps_fwd"):
                cur.execute(f"DROP TABLE IF EXISTS {t}")
            cur.execute("CREATE TABLE ps_t (id BIGINT PRIMARY KEY, name VARCHAR(100), vb VARBINARY(100), "
                        "dtm DATETIME(6), tm TIME(6), f FLOAT, d DOUBLE, n INT)")
            cur.execute(TYPES_DDL)
            cur.execute("INSERT INTO ps_types VALUES " + ",".join(TYPES_ROWS))
            cur.execute("CREATE TABLE ps_tx (id INT PRIMARY KEY, v INT)")
            cur.execute("CREATE TABLE ps_ddl (id INT PRIMARY KEY, a INT)")
            cur.execute("CREATE TABLE ps_fwd (id INT PRIMARY KEY, a INT)")
        conn.close()
        yield p
    finally:
        p.cleanup()


def direct(backends: list[Any], node: str, **kw: Any) -> PsClient:
    """A raw client straight to the backend database of a node."""
    idx, db = NODE_DB[node]
    return PsClient(backends[idx].port, user="root", password="", database=db, **kw)


def logical(defs: list[bytes]) -> list[bytes]:
    """A backend's column definitions as pydble sends them: the schema field names schema1, not db1/db2."""
    out = []
    for d in defs:
        for db in (b"\x03db1", b"\x03db2"):
            if d.startswith(b"\x03def" + db):
                d = b"\x03def\x07schema1" + d[4 + len(db):]
        out.append(d)
    return out


def on_node(backends: list[Any], node: str, sql: str) -> list[tuple[Any, ...]]:
    idx, db = NODE_DB[node]
    return backends[idx].query(sql, db)


@pytest.mark.parametrize("deprecate_eof", [False, True])
def test_prepare_answer_matches_mariadb(ps_proxy: ProxyProcess, backends: list[Any], deprecate_eof: bool) -> None:
    sql = "SELECT id, f, dec1, vc, dtm FROM ps_types WHERE id = ? AND vc <> ?"
    with PsClient(ps_proxy.port, deprecate_eof=deprecate_eof) as c, \
            direct(backends, "dn1", deprecate_eof=deprecate_eof) as d:
        got, want = c.prepare(sql), d.prepare(sql)
        assert (got.params, got.columns) == (want.params, want.columns) == (2, 5)
        assert got.column_defs == logical(want.column_defs)
        assert got.param_defs == want.param_defs


@pytest.mark.parametrize("deprecate_eof", [False, True])
def test_binary_rows_equal_mariadb_for_every_type(ps_proxy: ProxyProcess, backends: list[Any],
                                                  deprecate_eof: bool) -> None:
    sql = "SELECT * FROM ps_types WHERE id = ?"
    with PsClient(ps_proxy.port, deprecate_eof=deprecate_eof) as c:
        st = c.prepare(sql)
        for i in (1, 2, 3, 6):
            got = c.execute(st.stmt_id, [p_long(i)], send_types=(i == 1))
            with direct(backends, node_of(i), deprecate_eof=deprecate_eof) as d:
                dst = d.prepare(sql)
                want = d.execute(dst.stmt_id, [p_long(i)])
            assert got.kind == want.kind == "rows", (got.err_message, want.err_message)
            assert got.column_defs == logical(want.column_defs)
            assert got.rows == want.rows, f"row id={i}"
            assert got.seqs == want.seqs


def test_scattered_result_is_converted_after_the_merge(ps_proxy: ProxyProcess, backends: list[Any]) -> None:
    sql = "SELECT * FROM ps_types WHERE id BETWEEN ? AND ? ORDER BY id DESC"
    with PsClient(ps_proxy.port) as c:
        st = c.prepare(sql)
        assert st.columns == 20
        got = c.execute(st.stmt_id, [p_long(0), p_long(100)])
    want = []
    for i in (6, 3, 2, 1):
        with direct(backends, node_of(i)) as d:
            want += d.execute(d.prepare("SELECT * FROM ps_types WHERE id = ?").stmt_id, [p_long(i)]).rows
    assert got.kind == "rows"
    assert got.rows == want


def test_aggregates_over_nodes(ps_proxy: ProxyProcess) -> None:
    with PsClient(ps_proxy.port) as c:
        st = c.prepare("SELECT COUNT(*), SUM(mi), MAX(id) FROM ps_types WHERE id BETWEEN ? AND ?")
        assert st.columns == 3
        a = c.execute(st.stmt_id, [p_long(1), p_long(6)])
    assert a.kind == "rows" and len(a.rows) == 1
    row = a.rows[0]
    # bitmap: 3 columns, none NULL; COUNT is a LONGLONG, SUM a DECIMAL (text), MAX(id) an INT
    assert row[:2] == b"\x00\x00"
    assert struct.unpack_from("<q", row, 2)[0] == 4
    n = row[10]
    assert row[11:11 + n] == b"-8388607"
    assert struct.unpack_from("<i", row, 11 + n)[0] == 6


def test_bound_sharding_key_routes_each_row_to_its_node(ps_proxy: ProxyProcess, backends: list[Any]) -> None:
    with PsClient(ps_proxy.port) as c:
        c.query("DELETE FROM ps_t WHERE id BETWEEN 100 AND 199")
        st = c.prepare("INSERT INTO ps_t (id, name) VALUES (?, ?)")
        assert (st.params, st.columns) == (2, 0)
        for k, i in enumerate(range(100, 120)):
            a = c.execute(st.stmt_id, [p_longlong(i), p_str(f"n{i}")], send_types=(k == 0))
            assert a.kind == "ok" and a.affected == 1, a.err_message
        sel = c.prepare("SELECT name FROM ps_t WHERE id = ?")
        a = c.execute(sel.stmt_id, [p_longlong(107)])
        assert a.rows == [b"\x00\x00\x04n107"]
    for node in NODES:
        ids = [r[0] for r in on_node(backends, node, "SELECT id FROM ps_t WHERE id BETWEEN 100 AND 199 ORDER BY id")]
        assert ids == [i for i in range(100, 120) if node_of(i) == node]


def test_values_round_trip_as_literals(ps_proxy: ProxyProcess, backends: list[Any]) -> None:
    tricky = "it's a \\ \"quote\"\n\x00 ü 😀 -- not a comment /* nor this */ ?"
    blob = bytes(range(256))[:100]
    with PsClient(ps_proxy.port) as c:
        c.query("DELETE FROM ps_t WHERE id BETWEEN 200 AND 299")
        st = c.prepare("INSERT INTO ps_t (id, name, vb, dtm, tm, f, d, n) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        a = c.execute(st.stmt_id, [p_long(201), p_str(tricky), p_str(blob, T_BLOB),
                                   p_datetime(2024, 1, 2, 3, 4, 5, 6), p_time(True, 1, 2, 3, 4, 500),
                                   p_float(0.1), p_double(-1e-300), p_null(T_LONG)])
        assert a.kind == "ok", a.err_message
        a = c.execute(st.stmt_id, [p_long(202), p_null(), p_null(), p_null(), p_null(), p_null(), p_null(),
                                   p_long(-7)])
        assert a.kind == "ok", a.err_message
    conn = ps_proxy.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT id, name, vb, CAST(dtm AS CHAR), CAST(tm AS CHAR), f, d, n FROM ps_t "
                    "WHERE id IN (201, 202) ORDER BY id")
        rows = cur.fetchall()
    conn.close()
    assert rows[0][1] == tricky
    assert rows[0][2] == blob
    assert rows[0][3:5] == ("2024-01-02 03:04:05.000006", "-26:03:04.000500")
    assert abs(rows[0][5] - 0.1) < 1e-6 and rows[0][6] == -1e-300 and rows[0][7] is None
    assert rows[1][1:] == (None, None, None, None, None, None, -7)
    assert on_node(backends, node_of(201), "SELECT name FROM ps_t WHERE id = 201") == [(tricky,)]


def test_string_sharding_key_and_placeholders_in_text(ps_proxy: ProxyProcess) -> None:
    with PsClient(ps_proxy.port) as c:
        st = c.prepare("SELECT '?' AS q, name FROM ps_t WHERE id = ? /* ? */")
        assert st.params == 1 and st.columns == 2
        a = c.execute(st.stmt_id, [p_str("107")])  # a string key routes like the number
        assert a.kind == "rows" and a.rows == [b"\x00\x00\x01?\x04n107"]


def test_long_data_then_reset(ps_proxy: ProxyProcess) -> None:
    with PsClient(ps_proxy.port) as c:
        c.query("DELETE FROM ps_t WHERE id IN (301, 302)")
        st = c.prepare("INSERT INTO ps_t (id, name) VALUES (?, ?)")
        c.send_long_data(st.stmt_id, 1, b"long ")
        c.send_long_data(st.stmt_id, 1, b"data")
        a = c.execute(st.stmt_id, [p_long(301), (T_STRING, False, b"")])  # no value: it came as long data
        assert a.kind == "ok", a.err_message
        c.send_long_data(st.stmt_id, 1, b"dropped")
        assert c.reset(st.stmt_id).kind == "ok"
        a = c.execute(st.stmt_id, [p_long(302), p_str("short")])
        assert a.kind == "ok", a.err_message
        sel = c.prepare("SELECT name FROM ps_t WHERE id = ?")
        assert c.execute(sel.stmt_id, [p_long(301)]).rows == [b"\x00\x00\x09long data"]
        assert c.execute(sel.stmt_id, [p_long(302)], send_types=False).rows == [b"\x00\x00\x05short"]


def test_refused_long_data_fails_the_executes_until_reset(ps_proxy: ProxyProcess) -> None:
    """As MariaDB: SEND_LONG_DATA has no answer, so a chunk for a parameter the statement lacks fails its
    EXECUTEs with 1210 until COM_STMT_RESET (the execute ran as if nothing had been sent)."""
    with PsClient(ps_proxy.port) as c:
        st = c.prepare("SELECT LENGTH(?)")
        c.send_long_data(st.stmt_id, 3, b"abc")
        for _ in range(2):
            a = c.execute(st.stmt_id, [p_str("xy")])
            assert (a.kind, a.err_code, a.err_message) == (
                "err", 1210, "Incorrect arguments to mysqld_stmt_send_long_data")
        assert c.reset(st.stmt_id).kind == "ok"
        assert c.execute(st.stmt_id, [p_str("xy")]).rows == [b"\x00\x00\x02\x00\x00\x00"]


def test_long_data_past_max_allowed_packet_is_never_cut_short(backends: list[Any], fresh_proxy: Any) -> None:
    """Long data growing past max_allowed_packet fails the EXECUTE with MariaDB's 1105 until COM_STMT_RESET (the
    chunk that went over was dropped and the statement ran with what was left: a 700000-byte value bound)."""
    cfg = proxy_config(backends, free_port(), free_port(), instance="pydble-ps-long")
    cfg["server"]["max_allowed_packet"] = 1 << 20
    p = fresh_proxy(cfg)
    with PsClient(p.port) as c:
        st = c.prepare("SELECT LENGTH(?)")
        for _ in range(3):
            c.send_long_data(st.stmt_id, 0, b"z" * 350000)
        for _ in range(2):
            a = c.execute(st.stmt_id, [(T_STRING, False, b"")])
            assert (a.kind, a.err_code, a.err_message) == ("err", 1105, (
                "Parameter of prepared statement which is set through mysql_send_long_data() is longer than "
                "'max_allowed_packet' bytes"))
        assert c.reset(st.stmt_id).kind == "ok"
        c.send_long_data(st.stmt_id, 0, b"z" * 350000)
        a = c.execute(st.stmt_id, [(T_STRING, False, b"")])
        assert a.kind == "rows" and a.rows == [b"\x00\x00" + struct.pack("<I", 350000)], a.err_message


def test_parameters_mariadb_refuses_or_misreads_are_refused(ps_proxy: ProxyProcess) -> None:
    """1210, as MariaDB answers a JSON or NULL-typed value; for DECIMAL text that is no number, where MariaDB
    reads 0 with a warning, pydble bound the string 'abc' (and Python's reading of 1_0: 10)."""
    with PsClient(ps_proxy.port) as c:
        st = c.prepare("SELECT ?")
        for param in ((0xF5, False, b"\x02{}"), (0x06, False, b"\x0212"), (0xF6, False, b"\x03abc"),
                      (0xF6, False, b"\x031_0")):
            a = c.execute(st.stmt_id, [param])
            assert (a.kind, a.err_code) == ("err", 1210), (param, a.kind, a.rows)
        assert c.execute(st.stmt_id, [(0xF6, False, b"\x041.50")]).rows == [b"\x00\x00\x041.50"]


def test_an_execute_shorter_than_its_header_is_a_malformed_packet(ps_proxy: ProxyProcess) -> None:
    """MariaDB's 1835 (was 1243 'Unknown prepared statement handler (0)' or 1210), and the session goes on."""
    with PsClient(ps_proxy.port) as c:
        st = c.prepare("SELECT 1")
        head = struct.pack("<BI", 0x17, st.stmt_id)
        for payload in (b"\x17", head, head + b"\x00\x01"):
            c.send(0, payload)
            a = c.answer()
            assert (a.kind, a.err_code, a.err_message) == ("err", 1835, "Malformed communication packet"), payload
        assert c.execute(st.stmt_id).kind == "rows"


def test_close_unknown_and_fetch(ps_proxy: ProxyProcess) -> None:
    with PsClient(ps_proxy.port) as c:
        st = c.prepare("SELECT 1")
        assert st.columns == 1 and st.params == 0
        a = c.execute(st.stmt_id)
        assert a.kind == "rows" and int.from_bytes(a.rows[0][2:], "little") == 1
        c.close_stmt(st.stmt_id)
        a = c.execute(st.stmt_id)
        assert (a.kind, a.err_code) == ("err", 1243)
        st = c.prepare("SELECT 2")
        c.send(0, b"\x1c" + struct.pack("<II", st.stmt_id, 1))
        a = c.answer()
        assert (a.kind, a.err_code, a.err_message) == ("err", 1421, f"The statement ({st.stmt_id}) has no open cursor")
        c.send(0, b"\x1c" + struct.pack("<II", 999, 1))   # MariaDB's answers: the statement is unknown
        a = c.answer()
        assert (a.kind, a.err_code, a.err_message) == (
            "err", 1243, "Unknown prepared statement handler (999) given to mysqld_stmt_fetch")
        assert c.query("SELECT 3").kind == "rows"  # the session goes on


def test_prepare_errors_come_from_the_right_place(ps_proxy: ProxyProcess) -> None:
    with PsClient(ps_proxy.port) as c:
        a = c.prepare("SELECT * FROM ps_t WHERE nope = ?")
        assert a.kind == "err" and a.err_code == 1054, a.err_message
        a = c.prepare("SELEC * FROM ps_t")
        assert a.kind == "err" and a.err_code == 1064
        a = c.prepare("SELECT * FROM no_such_table WHERE id = ?")
        assert a.kind == "err" and a.err_code == 1146
        for sql in ("EXECUTE s", "PREPARE s FROM 'SELECT 1'", "DEALLOCATE PREPARE s"):   # as MariaDB
            a = c.prepare(sql)
            assert a.kind == "err" and a.err_code == 1295, (sql, a.err_message)
        a = c.prepare("SELECT id FROM ps_t ORDER BY ?")   # a column position once written as a number
        assert a.kind == "err" and a.err_code == 1235
        st = c.prepare("INSERT INTO ps_t (id, name) VALUES (?, ?)")
        c.execute(st.stmt_id, [p_long(401), p_str("x")])
        a = c.execute(st.stmt_id, [p_long(401), p_str("x")], send_types=False)
        assert (a.kind, a.err_code) == ("err", 1062)
        a = c.execute(st.stmt_id, [p_long(402)])  # too few values for the bound types
        assert (a.kind, a.err_code) == ("err", 1210)
        assert c.query("DELETE FROM ps_t WHERE id IN (401, 402)").kind == "ok"


@pytest.mark.parametrize("deprecate_eof", [False, True])
def test_prepared_begin_commit_and_status_flags(ps_proxy: ProxyProcess, backends: list[Any],
                                                deprecate_eof: bool) -> None:
    with PsClient(ps_proxy.port, deprecate_eof=deprecate_eof) as c:
        c.query("DELETE FROM ps_tx")
        begin, commit = c.prepare("BEGIN"), c.prepare("COMMIT")
        ins = c.prepare("INSERT INTO ps_tx (id, v) VALUES (?, ?)")
        sel = c.prepare("SELECT v FROM ps_tx WHERE id = ?")
        a = c.execute(begin.stmt_id)
        assert a.kind == "ok" and a.status & 1 and a.status & 2
        for i in range(4):
            a = c.execute(ins.stmt_id, [p_long(i), p_long(i * 10)], send_types=(i == 0))
            assert a.kind == "ok" and a.status & 1
        a = c.execute(sel.stmt_id, [p_long(3)])
        assert a.rows == [b"\x00\x00\x1e\x00\x00\x00"] and a.status & 1
        assert sum(len(on_node(backends, n, "SELECT * FROM ps_tx")) for n in NODES) == 0  # not yet committed
        a = c.execute(commit.stmt_id)
        assert a.kind == "ok" and not a.status & 1 and a.status & 2
    assert sum(len(on_node(backends, n, "SELECT * FROM ps_tx")) for n in NODES) == 4


def test_shapes_are_learned_again_after_ddl(ps_proxy: ProxyProcess) -> None:
    with PsClient(ps_proxy.port) as c:
        assert c.prepare("SELECT * FROM ps_ddl WHERE id = ?").columns == 2
        assert c.query("ALTER TABLE ps_ddl ADD COLUMN b VARCHAR(10)").kind == "ok"
        st = c.prepare("SELECT * FROM ps_ddl WHERE id = ?")
        assert st.columns == 3
        assert [column_type(d)[0] for d in st.column_defs] == ["id", "a", "b"]


def test_many_statements_and_reset_connection(ps_proxy: ProxyProcess) -> None:
    with PsClient(ps_proxy.port) as c:
        ids = [c.prepare(f"SELECT {i}").stmt_id for i in range(50)]
        assert len(set(ids)) == 50
        a = c.execute(ids[49])
        assert a.kind == "rows" and int.from_bytes(a.rows[0][2:], "little") == 49
        c.send(0, b"\x1f")  # COM_RESET_CONNECTION forgets every statement
        assert c.answer().kind == "ok"
        a = c.execute(ids[0])
        assert (a.kind, a.err_code) == ("err", 1243)


def test_execute_direct_runs_the_statement_prepared_last(ps_proxy: ProxyProcess) -> None:
    """MariaDB's execute-direct: PREPARE and EXECUTE(stmt_id=0xFFFFFFFF) pipelined in one write."""
    with PsClient(ps_proxy.port) as c:
        sql = b"SELECT ? + 1 AS answer"
        c.send(0, b"\x16" + sql)
        c.send(0, c.execute_packet(0xFFFFFFFF, [p_long(41)]))
        _, ok = c.read()
        assert ok[0] == 0x00
        for _ in range(2):  # one param def + its EOF, one column def + its EOF
            c.read()
            c.read()
        a = c.answer()
        assert a.kind == "rows" and len(a.rows) == 1
        c.send(0, b"\x16SELEC nonsense ?")
        c.send(0, c.execute_packet(0xFFFFFFFF, [p_long(1)]))
        assert c.read()[1][0] == 0xFF
        a = c.answer()
        assert (a.kind, a.err_code) == ("err", 1243)
        st = c.prepare("SELECT 1")   # CLOSE of 0xFFFFFFFF closes the statement prepared last, as MariaDB's (was kept)
        c.close_stmt(0xFFFFFFFF)
        for stmt_id in (st.stmt_id, 0xFFFFFFFF):
            a = c.execute(stmt_id)
            assert (a.kind, a.err_code, a.err_message) == (
                "err", 1243, f"Unknown prepared statement handler ({stmt_id}) given to mysqld_stmt_execute")


def test_pipelined_executes_and_their_warnings(ps_proxy: ProxyProcess, backends: list[Any]) -> None:
    """Executes sent in one write are answered in order with MariaDB's binary rows (the fast path serves
    them from the data callback), and a warning of one stays for SHOW WARNINGS as MariaDB keeps it."""
    sql = "SELECT id, vc FROM ps_types WHERE id = ?"
    with PsClient(ps_proxy.port) as c, direct(backends, node_of(6)) as d:
        st = c.prepare(sql)
        ids = [1, 2, 3, 6, 5, 1] * 3
        c.sock.sendall(b"".join(struct.pack("<I", len(p)) + p
                                for p in (c.execute_packet(st.stmt_id, [p_long(i)]) for i in ids)))
        answers = [c.answer() for _ in ids]
        for i, a in zip(ids, answers):
            want = [] if i == 5 else [r for r in (1, 2, 3, 6) if r == i]
            assert a.kind == "rows" and len(a.rows) == len(want), (i, a.err_message)
        dst = d.prepare(sql)
        got = c.execute(st.stmt_id, [p_str("6x")])   # Truncated incorrect DECIMAL value, as MariaDB warns
        want = d.execute(dst.stmt_id, [p_str("6x")])
        assert got.kind == want.kind == "rows" and len(got.rows) == 1 and got.rows == want.rows
        shown, direct_shown = c.query("SHOW WARNINGS"), d.query("SHOW WARNINGS")
        assert shown.kind == "rows" and shown.rows == direct_shown.rows != []


@pytest.mark.parametrize("deprecate_eof", [False, True])
def test_executes_that_send_no_types_read_their_own_rows(ps_proxy: ProxyProcess, backends: list[Any],
                                                         deprecate_eof: bool) -> None:
    """A client that binds once and then sends values only (sysbench) gets each execute's own rows, signs,
    NULLs and empty results included, byte for byte as MariaDB answers the same executes."""
    rows = {310: ("'n310'", -7), 311: ("NULL", 2 ** 31 - 1), 312: ("'" + "x" * 100 + "'", -2 ** 31), 313: ("''", 0)}
    with PsClient(ps_proxy.port, deprecate_eof=deprecate_eof) as c:
        c.query("DELETE FROM ps_t WHERE id BETWEEN 310 AND 319")
        for i, (name, n) in rows.items():
            assert c.query(f"INSERT INTO ps_t (id, name, n) VALUES ({i}, {name}, {n})").kind == "ok"
        for sql, params in (
                ("SELECT name FROM ps_t WHERE id = ?", lambda i, n: [p_longlong(i, unsigned=True)]),
                ("SELECT name, n FROM ps_t WHERE id = ? AND n >= ?", lambda i, n: [p_long(i), p_long(n)]),
                ("SELECT name, n FROM ps_t WHERE id = ? AND n >= ?", lambda i, n: [p_long(i), p_null(T_LONG)])):
            st = c.prepare(sql)
            for k, (i, n) in enumerate([(i, n) for i, (_, n) in rows.items()] + [(310, -6), (319, 0)]):
                got = c.execute(st.stmt_id, params(i, n), send_types=(k == 0))
                with direct(backends, node_of(i), deprecate_eof=deprecate_eof) as d:
                    want = d.execute(d.prepare(sql).stmt_id, params(i, n))
                assert got.kind == want.kind == "rows", (sql, i, got.err_message)
                assert (got.rows, got.seqs) == (want.rows, want.seqs), (sql, i, n)
                assert got.column_defs == logical(want.column_defs)


def test_a_prepared_point_read_follows_use_and_views(ps_proxy: ProxyProcess) -> None:
    """The route an execute of a prepared point read takes is planned for the session's schema and the
    names as they resolve now: after USE the same statement reads the other schema's table, and after its
    table is replaced by a view the view's rows come back, not an error from the table that is gone."""
    with PsClient(ps_proxy.port) as c:
        for sql in ("USE schema2", "DROP TABLE IF EXISTS ps_use", "CREATE TABLE ps_use (id BIGINT PRIMARY KEY, "
                    "name VARCHAR(100))", "INSERT INTO ps_use VALUES (7, 'in_schema2')", "USE schema1",
                    "DROP VIEW IF EXISTS ps_use", "DROP TABLE IF EXISTS ps_use",
                    "CREATE TABLE ps_use (id BIGINT PRIMARY KEY, name VARCHAR(100))",
                    "INSERT INTO ps_use VALUES (7, 'in_schema1')", "DELETE FROM ps_t WHERE id = 7",
                    "INSERT INTO ps_t (id, name) VALUES (7, 'through_the_view')"):
            assert c.query(sql).kind == "ok", (sql, c.query("SHOW WARNINGS").rows)
        st = c.prepare("SELECT name FROM ps_use WHERE id = ?")

        def name_of(k: int) -> bytes | str | None:
            got = c.execute(st.stmt_id, [p_long(k)], send_types=False)
            if got.kind != "rows":
                return got.err_message
            return got.rows[0][3:] if got.rows else None   # (header, NULL bitmap, length, then the name)

        assert c.execute(st.stmt_id, [p_long(7)]).kind == "rows"   # binds the types
        for _ in range(3):   # the kept route, executes after the first
            assert name_of(7) == b"in_schema1"
        assert name_of(8) is None
        assert c.query("USE schema2").kind == "ok"
        assert name_of(7) == b"in_schema2"
        assert c.query("USE schema1").kind == "ok"
        assert name_of(7) == b"in_schema1"
        for sql in ("DROP TABLE ps_use", "CREATE VIEW ps_use AS SELECT id, name FROM ps_t"):   # kept by pydble
            assert c.query(sql).kind == "ok", sql
        try:
            assert name_of(7) == b"through_the_view"
            assert name_of(3) is None
        finally:
            c.query("DROP VIEW ps_use")


@pytest.mark.parametrize("deprecate_eof", [False, True])
def test_a_prepared_point_read_runs_as_the_backends_own_statement(ps_proxy: ProxyProcess, backends: list[Any],
                                                                 deprecate_eof: bool) -> None:
    """Executes of a prepared point read run on the backend as its own prepared statement (Com_stmt_execute
    counts them), and every answer, over every column type, NULLs and a missing row, is the one MariaDB
    gives the same execute, byte for byte, before and after the table changes under the statement."""
    sql = "SELECT * FROM ps_types WHERE id = ?"
    ids = [1, 2, 3, 6, 5] * 6
    with PsClient(ps_proxy.port, deprecate_eof=deprecate_eof) as c:
        st = c.prepare(sql)
        wants = {}
        for i in set(ids):
            with direct(backends, node_of(i), deprecate_eof=deprecate_eof) as d:
                wants[i] = d.execute(d.prepare(sql).stmt_id, [p_long(i)])
        before = global_status(backends[:2], "Com_stmt_execute")
        for k, i in enumerate(ids):
            got = c.execute(st.stmt_id, [p_long(i)], send_types=(k == 0))
            want = wants[i]
            assert got.kind == want.kind == "rows", (i, got.err_message)
            assert (got.rows, got.seqs, got.status) == (want.rows, want.seqs, want.status), (k, i)
            assert got.column_defs == logical(want.column_defs), (k, i)
        # at most the first execute per node and shared connection goes as text while its PREPARE is piped
        assert global_status(backends[:2], "Com_stmt_execute") - before >= len(ids) - 8

        st = c.prepare("SELECT * FROM ps_fwd WHERE id = ?")
        assert c.query("INSERT INTO ps_fwd VALUES (4, 40), (5, 50)").kind == "ok"
        for _ in range(3):
            assert c.execute(st.stmt_id, [p_long(5)]).rows == [b"\x00\x00\x05\x00\x00\x00\x32\x00\x00\x00"]
        try:
            assert c.query("ALTER TABLE ps_fwd ADD COLUMN b VARCHAR(10) FIRST").kind == "ok"
            assert c.query("UPDATE ps_fwd SET b = 'new' WHERE id = 5").kind == "ok"
            with direct(backends, node_of(5), deprecate_eof=deprecate_eof) as d:
                want = d.execute(d.prepare("SELECT * FROM ps_fwd WHERE id = ?").stmt_id, [p_long(5)])
            for _ in range(3):   # the backend's statement is prepared again by MariaDB: the new columns
                got = c.execute(st.stmt_id, [p_long(5)])
                assert (got.rows, got.column_defs) == (want.rows, logical(want.column_defs))
                assert got.rows[0].startswith(b"\x00\x00\x03new")
        finally:
            c.query("DROP TABLE ps_fwd")
            c.query("CREATE TABLE ps_fwd (id INT PRIMARY KEY, a INT)")


def test_the_statements_a_shared_connection_keeps_on_the_backend_are_bounded(ps_proxy: ProxyProcess,
                                                                            backends: list[Any]) -> None:
    """Hundreds of distinct prepared point reads do not pile up prepared statements on the backend (each
    counts in its max_prepared_stmt_count): a shared connection keeps the most recently used 128 and closes
    the others, and every one still answers right."""
    cols = ("id", "name", "vb", "dtm", "tm", "f", "d", "n")
    texts = [f"SELECT {', '.join(p)} FROM ps_t WHERE id = ?" for p in permutations(cols, 3)][:300]
    with PsClient(ps_proxy.port) as c:
        assert c.query("DELETE FROM ps_t WHERE id = 404").kind == "ok"
        assert c.query("INSERT INTO ps_t (id, name, n) VALUES (404, 'four', 44)").kind == "ok"
        before = global_status(backends[:2], "Prepared_stmt_count")
        for text in texts:
            st = c.prepare(text)
            for k in range(2):
                a = c.execute(st.stmt_id, [p_long(404)], send_types=(k == 0))
                assert a.kind == "rows" and len(a.rows) == 1, (text, a.err_message)
            c.close_stmt(st.stmt_id)
        grown = global_status(backends[:2], "Prepared_stmt_count") - before
        assert grown <= 2 * 128, grown   # two shared connections per dbGroup at most; unbounded would be 300
        st = c.prepare(texts[0])
        a = c.execute(st.stmt_id, [p_long(404)])
        assert a.kind == "rows" and len(a.rows) == 1


@pytest.mark.parametrize("deprecate_eof", [False, True])
def test_a_shared_statements_reprepare_is_not_the_clients(ps_proxy: ProxyProcess, backends: list[Any],
                                                           deprecate_eof: bool) -> None:
    """MariaDB flags the execute of a statement it had to prepare again with other columns
    (SERVER_STATUS_METADATA_CHANGED). The statement a shared connection keeps is not the client's: a client
    that prepares after the table changed gets the status MariaDB gives its own statement, unflagged."""
    sql = "SELECT * FROM ps_fwd WHERE id = ?"
    with PsClient(ps_proxy.port, deprecate_eof=deprecate_eof) as c:
        for stmt in ("DROP TABLE ps_fwd", "CREATE TABLE ps_fwd (id INT PRIMARY KEY, a INT)",
                     "INSERT INTO ps_fwd VALUES (5, 50)"):
            assert c.query(stmt).kind == "ok", stmt
        st = c.prepare(sql)
        for k in range(4):   # the shared connection prepares the statement and runs it
            assert c.execute(st.stmt_id, [p_long(5)], send_types=(k == 0)).kind == "rows"
        assert c.query("ALTER TABLE ps_fwd ADD COLUMN b INT").kind == "ok"
    try:
        with PsClient(ps_proxy.port, deprecate_eof=deprecate_eof) as c, \
                direct(backends, node_of(5), deprecate_eof=deprecate_eof) as d:
            st, dst = c.prepare(sql), d.prepare(sql)
            for k in range(4):
                got = c.execute(st.stmt_id, [p_long(5)], send_types=(k == 0))
                want = d.execute(dst.stmt_id, [p_long(5)], send_types=(k == 0))
                assert got.kind == want.kind == "rows", (k, got.err_message)
                assert (got.status, got.rows, got.seqs) == (want.status, want.rows, want.seqs), k
                assert got.column_defs == logical(want.column_defs)
    finally:
        with PsClient(ps_proxy.port) as c:
            c.query("DROP TABLE ps_fwd")
            c.query("CREATE TABLE ps_fwd (id INT PRIMARY KEY, a INT)")


def test_a_statement_the_backend_refused_to_prepare_is_tried_again(ps_proxy: ProxyProcess, backends: list[Any]) -> None:
    """A backend at its max_prepared_stmt_count refuses the shared connection's PREPARE: the executes are
    answered right as text meanwhile, and once the backend has room again they run as its own statement."""
    sql = "SELECT n, name, id FROM ps_t WHERE id = ?"
    limits = [int(b.query("SELECT @@GLOBAL.max_prepared_stmt_count")[0][0]) for b in backends[:2]]
    with PsClient(ps_proxy.port) as c:
        assert c.query("DELETE FROM ps_t WHERE id = 408").kind == "ok"
        assert c.query("INSERT INTO ps_t (id, name, n) VALUES (408, 'eight', 48)").kind == "ok"
        st = c.prepare(sql)
        try:
            for b in backends[:2]:
                b.query("SET GLOBAL max_prepared_stmt_count = 0")
            before = global_status(backends[:2], "Com_stmt_execute")
            for k in range(10):
                a = c.execute(st.stmt_id, [p_long(408)], send_types=(k == 0))
                assert a.kind == "rows" and len(a.rows) == 1 and a.rows[0].endswith(b"\x05eight\x98\x01\x00\x00\x00\x00\x00\x00"), a
            assert global_status(backends[:2], "Com_stmt_execute") == before   # all as text
        finally:
            for b, limit in zip(backends[:2], limits):
                b.query(f"SET GLOBAL max_prepared_stmt_count = {limit}")
        time.sleep(PREPARE_RETRY_S + 0.5)
        before = global_status(backends[:2], "Com_stmt_execute")
        for _ in range(10):
            a = c.execute(st.stmt_id, [p_long(408)])
            assert a.kind == "rows" and len(a.rows) == 1
        assert global_status(backends[:2], "Com_stmt_execute") - before >= 8


@pytest.mark.parametrize("deprecate_eof", [False, True])
def test_a_prepared_statement_gets_the_sessions_database_named_and_typed_as_mariadb_does(
        ps_proxy: ProxyProcess, backends: list[Any], deprecate_eof: bool) -> None:
    """DATABASE() in a prepared statement is the client's logical schema (a node would answer db1), in a column
    named and typed as MariaDB's own prepare describes it."""
    sql = "SELECT DATABASE(), CONCAT(DATABASE(), ?) AS c, LENGTH(DATABASE()) FROM ps_types WHERE id = ?"
    with PsClient(ps_proxy.port, deprecate_eof=deprecate_eof) as c, \
            direct(backends, "dn1", deprecate_eof=deprecate_eof) as d:
        got, want = c.prepare(sql), d.prepare(sql)
        assert isinstance(got, Prepared) and isinstance(want, Prepared)
        assert got.column_defs == logical(want.column_defs)
        params = [p_str("x"), p_long(1)]
        ran, ref = c.execute(got.stmt_id, params), d.execute(want.stmt_id, params)
        assert ran.kind == ref.kind == "rows", (ran.err_message, ref.err_message)
        assert ran.column_defs == logical(ref.column_defs)
        assert b"schema1" in ran.rows[0] and b"schema1x" in ran.rows[0] and b"db1" not in ran.rows[0]
