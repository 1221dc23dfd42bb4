"""SQL-level PREPARE / EXECUTE / DEALLOCATE PREPARE through the proxy, checked against MariaDB's own answers.

Each execution routes like a plain statement with the values written in: a bound sharding key sends
the row to the node hash-four names. Errors are MariaDB's (1243, 1210, 1295, 1064) and the statements
belong to the session: gone for other connections and after COM_RESET_CONNECTION / COM_CHANGE_USER.
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any, Iterator

import pymysql
import pytest

from harness import ProxyProcess, free_port, proxy_config
from wire import RawClient, scramble

NODES = ("dn1", "dn2", "dn3", "dn4")
NODE_DB = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2")}


@pytest.fixture(scope="module")
def sp_proxy(backends: list[Any]) -> Iterator[ProxyProcess]:
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-sqlps"))
    cfg["schemas"]["schema1"]["tables"]["sp_t"] = {"type": "sharding", "nodes": list(NODES),
                                                  "function": "hash-four", "column": "id"}
    cfg["users"].append({"name": "only2", "password": "pw", "schemas": ["schema2"]})
    p = ProxyProcess(cfg, name="proxy-sqlps", release_ports=True)
    try:
        p.start()
        p.query("DROP TABLE IF EXISTS sp_t")
        p.query("CREATE TABLE sp_t (id BIGINT PRIMARY KEY, name VARCHAR(40), d DECIMAL(10,3), f DOUBLE)")
        yield p
    finally:
        p.cleanup()


def run(cur: Any, sql: str) -> list[tuple[Any, ...]]:
    cur.execute(sql)
    return list(cur.fetchall())


def err(cur: Any, sql: str) -> tuple[int, str]:
    with pytest.raises(pymysql.MySQLError) as e:
        cur.execute(sql)
    return e.value.args[0], e.value.args[1]


def on_node(backends: list[Any], node: str, sql: str) -> list[tuple[Any, ...]]:
    idx, db = NODE_DB[node]
    return backends[idx].query(sql, db)


def test_prepare_execute_routes_each_execution(sp_proxy: ProxyProcess, backends: list[Any]) -> None:
    conn = sp_proxy.connect()
    with conn.cursor() as cur:
        run(cur, "PREPARE ins FROM 'INSERT INTO sp_t (id, name, d, f) VALUES (?, ?, ?, ?)'")
        run(cur, "SET @id = 6, @name = 'it''s', @d = 1.50, @f = 0.1e0")
        run(cur, "EXECUTE ins USING @id, @name, @d, @f")
        assert cur.rowcount == 1
        run(cur, "EXECUTE ins USING 7, 'seven', -2.125, 1e300")
        # a variable holding a constant expression: the value MariaDB stores (DECIMAL scale kept)
        run(cur, "SET @id = 4 + 5, @d = 1/3, @nul = NULL")
        run(cur, "EXECUTE ins USING @id, NULL, @d, @nul")
        for i in (6, 7, 9):  # each row on the node hash-four names, nowhere else
            assert on_node(backends, NODES[i % 4], f"SELECT COUNT(*) FROM sp_t WHERE id = {i}") == [(1,)]
        assert sum(on_node(backends, n, "SELECT COUNT(*) FROM sp_t")[0][0] for n in NODES) == 3
        run(cur, "PREPARE sel FROM 'SELECT id, name, d, f FROM sp_t WHERE id = ?'")
        assert run(cur, "EXECUTE sel USING 6") == [(6, "it's", Decimal("1.500"), 0.1)]
        assert run(cur, "EXECUTE sel USING @id") == [(9, None, Decimal("0.333"), None)]
        assert run(cur, "EXECUTE sel USING 100") == []
        # names are case-insensitive; LIMIT ? takes a string variable as MariaDB does
        run(cur, "PREPARE Lim FROM 'SELECT id FROM sp_t ORDER BY id LIMIT ?'")
        run(cur, "SET @n = '2'")
        assert run(cur, "EXECUTE lim USING @n") == [(6,), (7,)]
        run(cur, "SET @stmt = 'SELECT COUNT(*) FROM sp_t WHERE id > ?'")
        run(cur, "PREPARE c FROM @stmt")
        assert run(cur, "EXECUTE c USING 6") == [(2,)]
        run(cur, "DEALLOCATE PREPARE c")
        run(cur, "DROP PREPARE sel")
        assert err(cur, "EXECUTE sel USING 1")[0] == 1243
        # a statement the session answers itself (SET) prepares and executes too
        run(cur, "PREPARE st FROM 'SET @z = ?'")
        run(cur, "EXECUTE st USING 42")
        assert run(cur, "SELECT @z") == [(42,)]
        run(cur, "DELETE FROM sp_t")
    conn.close()


@pytest.mark.parametrize("sql", [
    "EXECUTE nope",
    "DEALLOCATE PREPARE nope",
    "EXECUTE s USING 1, 2",
    "EXECUTE s",
    "PREPARE x FROM 'SELECT 1; SELECT 2'",
    "PREPARE x FROM 'EXECUTE s'",
    "PREPARE x FROM 'DEALLOCATE PREPARE s'",
    "PREPARE x FROM 'SELEC 1'",
    "PREPARE x FROM @num",
    "PREPARE x FROM @nul",
    "EXECUTE s USING (SELECT 1)",
])
def test_errors_are_mariadbs(sp_proxy: ProxyProcess, backends: list[Any], sql: str) -> None:
    """The same statements straight on a backend and through the proxy fail with the same code and text."""
    setup = ["PREPARE s FROM 'SELECT ? + 1'", "SET @num = 5", "SET @nul = NULL"]
    direct = backends[0].connect("db1", autocommit=True)
    conn = sp_proxy.connect()
    try:
        with direct.cursor() as dc, conn.cursor() as pc:
            for s in setup:
                dc.execute(s)
                pc.execute(s)
            want = err(dc, sql)
            got = err(pc, sql)
            assert got[0] == want[0], (got, want)
            if want[0] != 1064:  # the syntax messages name the server ("MariaDB"), the rest must match
                assert got[1] == want[1]
    finally:
        direct.close()
        conn.close()


def test_failed_prepare_drops_the_old_statement(sp_proxy: ProxyProcess) -> None:
    conn = sp_proxy.connect()
    with conn.cursor() as cur:
        run(cur, "PREPARE s FROM 'SELECT 1'")
        assert err(cur, "PREPARE s FROM 'SELECT * FROM no_such_table_here'")[0] == 1146
        assert err(cur, "EXECUTE s")[0] == 1243   # as MariaDB: a failed PREPARE leaves no statement s
    conn.close()


def test_values_that_cannot_be_known_exactly_are_refused(sp_proxy: ProxyProcess) -> None:
    conn = sp_proxy.connect()
    with conn.cursor() as cur:
        run(cur, "PREPARE s FROM 'SELECT ?'")
        run(cur, "SET @t = NOW(6)")   # SET computes it once (its value is then known exactly)
        assert run(cur, "EXECUTE s USING @t") == run(cur, "SELECT @t")
        code, _ = err(cur, "EXECUTE s USING RAND()")
        assert code == 1235
        # never SET here (an assignment with := inside a statement is refused: it would stay on a backend connection)
        assert err(cur, "SELECT @v := 5")[0] == 1235
        code, msg = err(cur, "EXECUTE s USING @v")
        assert code == 1235 and "@v" in msg
        assert run(cur, "EXECUTE s USING CONCAT('a', 'b')") == [("ab",)]
    conn.close()


def test_statements_belong_to_the_session(sp_proxy: ProxyProcess) -> None:
    a, b = sp_proxy.connect(), sp_proxy.connect()
    with a.cursor() as ca, b.cursor() as cb:
        run(ca, "PREPARE mine FROM 'SELECT 1'")
        assert run(ca, "EXECUTE mine") == [(1,)]
        assert err(cb, "EXECUTE mine")[0] == 1243
    a.close()
    b.close()
    with RawClient(sp_proxy.port) as c:
        assert c.login().kind == "ok"
        for reset in (b"\x1f", None):
            c.query("PREPARE mine FROM 'SELECT 1'")
            assert c.read_packet().kind == "ok"
            if reset is not None:   # COM_RESET_CONNECTION
                c.command(reset)
            else:                   # COM_CHANGE_USER to the same user
                c.command(b"\x11test\x00" + bytes((20,)) + scramble("111111", c.greeting.salt[:20]) + b"schema1\x00"
                          + b"\x2d\x00mysql_native_password\x00")
            assert c.read_packet().kind == "ok"
            c.query("EXECUTE mine")
            assert c.read_result().error.err_code == 1243


def test_answers_match_mariadb_where_a_literal_would_differ(sp_proxy: ProxyProcess, backends: list[Any]) -> None:
    """Column names come from the text as prepared (`? + 1`, a bare `?`), LIMIT ? works across nodes, and
    a ? alone in ORDER BY (a constant for MariaDB, a column position if written as a number) is refused."""
    direct = backends[0].connect("db1", autocommit=True)
    conn = sp_proxy.connect()
    try:
        with direct.cursor() as dc, conn.cursor() as pc:
            dc.execute("CREATE TABLE IF NOT EXISTS sp_t (id BIGINT PRIMARY KEY, name VARCHAR(40), d DECIMAL(10,3), "
                       "f DOUBLE)")
            for c in (dc, pc):
                c.execute("DELETE FROM sp_t")
                c.execute("INSERT INTO sp_t (id, name) VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e')")
                c.execute("PREPARE n FROM 'SELECT ? + 1, ?, (?), (? - 1), ? LIKE ''a%'', CONCAT(name, ?) AS x, id "
                          "FROM sp_t WHERE id > ? ORDER BY id LIMIT ?'")
                c.execute("EXECUTE n USING 5, 'a', 2.5, 3, 'abc', '!', 1, 3")
            want = (tuple(d[0] for d in dc.description), dc.fetchall())
            got = (tuple(d[0] for d in pc.description), pc.fetchall())
            assert got == want
            assert want[0] == ("? + 1", "?", "?", "(? - 1)", "? LIKE 'a%'", "x", "id")
            for c in (dc, pc):
                c.execute("DROP PREPARE n")
            assert err(pc, "PREPARE o FROM 'SELECT id FROM sp_t ORDER BY ?'")[0] == 1235
            pc.execute("DELETE FROM sp_t")
            dc.execute("DROP TABLE sp_t")
    finally:
        direct.close()
        conn.close()


def test_65535_placeholders_prepare_and_65536_are_refused_without_stalling(sp_proxy: ProxyProcess) -> None:
    """MariaDB's limit (the count is two bytes): 65535 work, 65536 get 1390; neither stalls the instance."""
    conn = sp_proxy.connect(read_timeout=60)
    with conn.cursor() as cur:
        run(cur, "PREPARE big FROM 'SELECT " + ",".join(["?"] * 65535) + "'")
        assert len(run(cur, "EXECUTE big USING " + ",".join(["7"] * 65535))[0]) == 65535
        assert err(cur, "PREPARE big FROM 'SELECT " + ",".join(["?"] * 65536) + "'")[0] == 1390
        assert err(cur, "EXECUTE big USING 1")[0] == 1243  # a failed PREPARE leaves no statement of that name
    conn.close()


def test_a_variable_assigned_with_colon_equals_is_not_bound_from_its_old_set(sp_proxy: ProxyProcess) -> None:
    """`SELECT @a := 10` would change @a on one backend connection only: pydble refuses it, so EXECUTE
    keeps binding the value SET told it (and a later SET tells it again)."""
    conn = sp_proxy.connect()
    with conn.cursor() as cur:
        run(cur, "PREPARE p FROM 'SELECT ?'")
        run(cur, "SET @a = 5")
        assert run(cur, "EXECUTE p USING @a") == [(5,)]
        code, _ = err(cur, "SELECT @a := 10")
        assert code == 1235
        assert run(cur, "EXECUTE p USING @a") == [(5,)]   # @a is still 5, as MariaDB would have it
        run(cur, "SET @a = 11")
        assert run(cur, "EXECUTE p USING @a") == [(11,)]
    conn.close()


def test_a_statement_another_user_prepared_is_still_checked_against_the_grants(sp_proxy: ProxyProcess) -> None:
    """The shapes PREPARE learns are shared, but not across grants: a user without SELECT on the table gets
    1142 at PREPARE even right after a user with it prepared the same text in the same schema."""
    text = "PREPARE g FROM 'SELECT * FROM schema1.sp_t WHERE id = ?'"
    owner = sp_proxy.connect(database="schema2")
    other = sp_proxy.connect(user="only2", password="pw", database="schema2")
    with owner.cursor() as cur:
        run(cur, "CREATE TABLE IF NOT EXISTS schema1.sp_t (id BIGINT PRIMARY KEY, name VARCHAR(40), d DECIMAL(10,3), "
                 "f DOUBLE)")
        run(cur, text)
    with other.cursor() as cur:
        assert err(cur, text)[0] == 1142
        assert err(cur, "EXECUTE g USING 1")[0] == 1243
    owner.close()
    other.close()
