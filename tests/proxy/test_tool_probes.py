"""What client tools send besides their users' queries, answered through pydble as one MariaDB holding the
logical schemas answers it: Connector/J's setMaxRows (sql_select_limit), mysqldump's and HeidiSQL's SHOW
forms. Each is compared with a plain MariaDB database holding the same rows."""

from __future__ import annotations

from typing import Any, Iterator

import pymysql
import pytest

from wire import drop_after

REF_DB = "toolref"
ROWS = [(i, i % 3, f"s{i}") for i in range(1, 13)]


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    """Leave the shared backends without this module's tables."""
    yield from drop_after(proxy, "sharding_4_t1", "sharding_2_t1")


@pytest.fixture(scope="module")
def pair(proxy, backends) -> Iterator[tuple[Any, Any]]:
    """(pydble session on schema1, reference session): sharding_4_t1 and sharding_2_t1 with the same rows."""
    backends[0].create_databases(REF_DB)
    ddl = ["DROP TABLE IF EXISTS sharding_4_t1", "DROP TABLE IF EXISTS sharding_2_t1",
           "CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, k INT, s VARCHAR(10))",
           "CREATE TABLE sharding_2_t1 (id INT PRIMARY KEY, k INT)",
           "INSERT INTO sharding_4_t1 VALUES " + ", ".join(f"({i}, {k}, '{s}')" for i, k, s in ROWS),
           "INSERT INTO sharding_2_t1 VALUES " + ", ".join(f"({i}, {k})" for i, k, _ in ROWS[:6])]
    px, ref = proxy.connect(), backends[0].connect(REF_DB)
    try:
        for conn in (px, ref):
            with conn.cursor() as cur:
                for sql in ddl:
                    cur.execute(sql)
        yield px, ref
    finally:
        px.close()
        ref.close()


def rows(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return [tuple(r) for r in cur.fetchall()]


def on_both(pair: tuple[Any, Any], *sqls: str) -> None:
    """The same statements in the pydble session and in the reference one."""
    for conn in pair:
        for sql in sqls:
            rows(conn, sql)


@pytest.mark.parametrize("sql", [
    "SELECT id FROM sharding_4_t1 ORDER BY id DESC",
    "SELECT k, COUNT(*) FROM sharding_4_t1 GROUP BY k ORDER BY k DESC",
    "SELECT DISTINCT k FROM sharding_4_t1 ORDER BY k",
    "SELECT COUNT(*) FROM sharding_4_t1 a JOIN sharding_2_t1 b ON a.k = b.id",
    "SELECT id FROM sharding_4_t1 ORDER BY id LIMIT 5",
    "SELECT id FROM sharding_4_t1 WHERE id = 7",
    "SELECT id FROM sharding_4_t1 UNION SELECT id FROM sharding_2_t1 ORDER BY id",
])
def test_sql_select_limit_caps_the_answer_not_the_nodes_reads(pair, sql: str) -> None:
    """Connector/J's Statement.setMaxRows(n) sends SET SQL_SELECT_LIMIT=n (DBeaver sets it on every query):
    the answer is the first n rows MariaDB gives, never a merge of cut node reads (wrong counts, groups)."""
    px, ref = pair
    try:
        on_both(pair, "SET @@SQL_SELECT_LIMIT=2")
        assert rows(px, sql) == rows(ref, sql)
    finally:
        on_both(pair, "SET @@SQL_SELECT_LIMIT=DEFAULT")
    assert rows(px, sql) == rows(ref, sql)   # and back to whole answers


def test_sql_select_limit_inside_a_transaction(pair) -> None:
    """The nodes a transaction pinned read whole rows too, and keep the session's limit afterwards."""
    px, ref = pair
    sql = "SELECT k, COUNT(*) FROM sharding_4_t1 GROUP BY k ORDER BY k"
    try:
        on_both(pair, "SET sql_select_limit = 1", "BEGIN")
        assert rows(px, "SELECT id FROM sharding_4_t1 WHERE id = 3") == [(3,)]
        assert rows(px, sql) == rows(ref, sql)
        assert rows(px, "SELECT id FROM sharding_4_t1 WHERE id IN (1, 2, 3, 4) ORDER BY id") == [(1,)]
    finally:
        on_both(pair, "ROLLBACK", "SET sql_select_limit = DEFAULT")


def test_sql_select_limit_set_to_an_expression_is_refused_across_nodes(pair) -> None:
    px, _ = pair
    try:
        rows(px, "SET sql_select_limit = 1 + 1")
        assert rows(px, "SELECT id FROM sharding_4_t1 WHERE id = 5") == [(5,)]
        with pytest.raises(pymysql.MySQLError) as e:
            rows(px, "SELECT k, COUNT(*) FROM sharding_4_t1 GROUP BY k")
        assert e.value.args[0] == 1235
    finally:
        rows(px, "SET sql_select_limit = DEFAULT")


# -- SHOW forms of tools: mysqldump --routines/--events, HeidiSQL's and Workbench's object lists -------------

@pytest.mark.parametrize("sql", [
    "SHOW FUNCTION STATUS WHERE Db = 'schema1'",
    "SHOW PROCEDURE STATUS WHERE `Db` = 'schema1'",
    "SHOW FUNCTION STATUS LIKE 'zz%'",
    "SHOW TRIGGERS",
    "SHOW TRIGGERS FROM {db}",
    "SHOW TRIGGERS IN {db} LIKE 'sharding%'",
    "SHOW EVENTS",
    "SHOW EVENTS FROM {db}",
    "SHOW EVENTS WHERE Name = 'e'",
    "SHOW CREATE DATABASE {db}",
    "SHOW CREATE SCHEMA IF NOT EXISTS `{db}`",
    "SHOW STORAGE ENGINES",                                   # SHOW ENGINES as older tools spell it
])
def test_show_forms_of_dumps_and_gui_tools_answer_as_mariadb(pair, sql: str) -> None:
    """As MariaDB answers them for a database without stored programs: the same columns, no rows (a logical
    schema has none: CREATE PROCEDURE/TRIGGER/EVENT are refused), the schema's CREATE DATABASE."""
    px, ref = pair

    def answer(conn: Any, db: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        with conn.cursor() as cur:
            cur.execute(sql.format(db=db))
            return [d[0] for d in cur.description], [tuple(r) for r in cur.fetchall()]

    got, want = answer(px, "schema1"), answer(ref, REF_DB)
    assert got[0] == want[0]
    assert [tuple(str(v).replace(REF_DB, "schema1") for v in r) for r in want[1]] == \
           [tuple(str(v) for v in r) for r in got[1]]


def test_show_forms_about_a_schema_keep_to_the_grants(pair) -> None:
    px, _ = pair
    for sql in ("SHOW TRIGGERS FROM db1", "SHOW EVENTS FROM mysql", "SHOW CREATE DATABASE db2"):
        with pytest.raises(pymysql.MySQLError) as e:
            rows(px, sql)
        assert e.value.args[0] == 1044, sql


def test_show_table_status_counts_a_global_tables_rows_once(proxy) -> None:
    """A global table's four copies hold the same rows: SHOW TABLE STATUS (HeidiSQL's and Navicat's row
    counts) shows them once, as information_schema.TABLES does."""
    proxy.query("DROP TABLE IF EXISTS test")
    proxy.query("CREATE TABLE test (id INT PRIMARY KEY)")
    try:
        proxy.query("INSERT INTO test VALUES (1), (2), (3)")
        for t in ("test", "sharding_4_t1"):
            proxy.query(f"ANALYZE TABLE {t}")
        status = {r[0]: r[4] for r in proxy.query("SHOW TABLE STATUS WHERE Name IN ('test', 'sharding_4_t1')")}
        tables = dict(proxy.query("SELECT TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES "
                                  "WHERE TABLE_SCHEMA = 'schema1' AND TABLE_NAME IN ('test', 'sharding_4_t1')"))
        assert status == tables and status["test"] == 3
    finally:
        proxy.query("DROP TABLE IF EXISTS test")


def test_set_continued_in_a_version_comment(pair) -> None:
    """mysqldump --skip-opt / --compatible: SET SQL_QUOTE_SHOW_CREATE=1/*!40102 ,SQL_MODE=concat(...) */."""
    px, ref = pair
    sql = "SET SQL_QUOTE_SHOW_CREATE=1/*!40102 ,SQL_MODE=concat(@@sql_mode, _utf8 ',NO_KEY_OPTIONS') */"
    try:
        on_both(pair, "SET @b = 0", sql, "SET @a = 1 /*!40101 , @b = 2 */ /*!99999 , @a = 3 */")
        assert rows(px, "SELECT @a, @b, @@sql_mode LIKE '%NO_KEY_OPTIONS%'") == [(1, 2, 1)]
        assert rows(ref, "SELECT @a, @b, @@sql_mode LIKE '%NO_KEY_OPTIONS%'") == [(1, 2, 1)]
    finally:
        on_both(pair, "SET SQL_MODE = DEFAULT")


def test_show_warnings_after_an_error_pydble_answers_itself(pair) -> None:
    """HeidiSQL and the mysql CLI read SHOW WARNINGS after an error: it is that error, not an older one."""
    px, _ = pair
    with pytest.raises(pymysql.MySQLError):
        rows(px, "SELECT * FROM no_such_table")
    for sql, code in (("SELECT * FROM db1.sharding_4_t1", 1142), ("USE db2", 1044),
                      ("SHOW BINLOG EVENTS", 1235)):
        with pytest.raises(pymysql.MySQLError) as e:
            rows(px, sql)
        assert e.value.args[0] == code
        assert rows(px, "SHOW WARNINGS") == [("Error", code, e.value.args[1])], sql
        assert rows(px, "SHOW COUNT(*) ERRORS") == [(1,)]


@pytest.mark.parametrize("sql", ["SHOW INDEX FROM {v}", "SHOW KEYS FROM {v} WHERE Key_name = 'PRIMARY'",
                                 "SHOW INDEXES FROM {v} FROM {db}"])
def test_show_index_of_a_view_pydble_keeps_is_empty_as_on_mariadb(pair, proxy, sql: str) -> None:
    """mysqldump --xml and --order-by-primary read SHOW KEYS of every table, views included."""
    px, ref = pair
    on_both(pair, "CREATE OR REPLACE VIEW tool_v AS SELECT id, k FROM sharding_4_t1")
    try:
        with px.cursor() as a, ref.cursor() as b:
            a.execute(sql.format(v="tool_v", db="schema1"))
            b.execute(sql.format(v="tool_v", db=REF_DB))
            assert [d[0] for d in a.description] == [d[0] for d in b.description]
            assert a.fetchall() == b.fetchall() == ()
    finally:
        on_both(pair, "DROP VIEW IF EXISTS tool_v")


def test_information_schema_read_opens_no_transaction_with_autocommit_off(pair, proxy) -> None:
    """A tool with autocommit off (mysql-connector-python's default, DBeaver's manual commit) reads metadata
    first: as on MariaDB that opens no transaction, so IN_TRANS stays clear and a later read still sees rows
    committed meanwhile (its snapshot starts at its first read of a table)."""
    px, ref = pair
    on_both(pair, "CREATE TABLE tool_plain (id INT PRIMARY KEY)")   # on the default node, where copies are made
    writer = proxy.connect()
    try:
        for conn, db in ((px, "schema1"), (ref, REF_DB)):
            conn.autocommit(False)
            try:
                rows(conn, f"SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{db}'")
                rows(conn, "SET @after_metadata = 1")   # an OK packet: its status flags
                assert not (conn.server_status & 1), db   # SERVER_STATUS_IN_TRANS
            finally:
                conn.rollback()
                conn.autocommit(True)
        px.autocommit(False)
        try:
            rows(px, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'schema1'")
            rows(writer, "INSERT INTO tool_plain VALUES (1)")
            assert rows(px, "SELECT COUNT(*) FROM tool_plain") == [(1,)]
        finally:
            px.rollback()
            px.autocommit(True)
    finally:
        writer.close()
        on_both(pair, "DROP TABLE tool_plain")


def test_show_databases_like_and_where_as_mariadb(pair) -> None:
    """MariaDB heads a LIKE's column `Database (pattern)` and judges a WHERE over the rows it lists."""
    px, ref = pair
    for sql, want in (("SHOW DATABASES LIKE 'schema%'", [("schema1",), ("schema2",)]),
                      ("SHOW SCHEMAS WHERE `Database` = 'schema2'", [("schema2",)]),
                      ("SHOW DATABASES WHERE `Database` LIKE 'SCHEMA_' AND LENGTH(`Database`) = 7",
                       [("schema1",), ("schema2",)])):
        with px.cursor() as a, ref.cursor() as b:
            a.execute(sql)
            b.execute(sql)
            assert [d[0] for d in a.description] == [d[0] for d in b.description], sql
            assert [tuple(r) for r in a.fetchall()] == want, sql
    with pytest.raises(pymysql.MySQLError) as e:
        rows(px, "SHOW DATABASES WHERE nosuch = 1")
    assert e.value.args[0] == 1054


@pytest.mark.parametrize("form", ["EXPLAIN EXTENDED", "EXPLAIN FORMAT=JSON", "ANALYZE"])
def test_mariadb_plans_name_the_logical_schema(pair, form: str) -> None:
    """EXPLAIN EXTENDED / FORMAT=JSON and ANALYZE (DBeaver's and Workbench's visual plans) are the node's
    own plan: its `ref` names the logical schema (schema1.p.id), never the node's database."""
    px, ref = pair
    on_both(pair, "CREATE TABLE tool_p (id INT PRIMARY KEY)",
            "CREATE TABLE tool_c (id INT PRIMARY KEY, pid INT, KEY (pid))",
            "INSERT INTO tool_p VALUES (1), (2)", "INSERT INTO tool_c VALUES (1, 1), (2, 2), (3, NULL)")
    try:
        sql = f"{form} SELECT * FROM tool_p p JOIN tool_c c ON c.pid = p.id"
        got = str(rows(px, sql))
        assert "schema1.p.id" in got and "db3" not in got
        assert got == str(rows(ref, sql)).replace(REF_DB, "schema1") or form == "ANALYZE"   # (timings)
    finally:
        on_both(pair, "DROP TABLE tool_c", "DROP TABLE tool_p")


def test_sql_mode_is_the_servers_on_every_backend_connection(pair, proxy, backends) -> None:
    """A new backend connection's sql_mode is the server's (no IGNORE_SPACE of pydble's own asking): GUI tools
    show @@sql_mode, and `count (*)` is a syntax error as on MariaDB, whichever pooled connection runs it."""
    want = backends[0].query("SELECT @@session.sql_mode")
    fresh = proxy.connect()
    try:
        for i in range(6):   # every node's connections, new and reused
            assert rows(fresh, f"SELECT @@session.sql_mode FROM sharding_4_t1 WHERE id = {i + 1}") == want
        assert rows(fresh, "SELECT @@session.sql_mode") == want
        with pytest.raises(pymysql.MySQLError) as e:
            rows(fresh, "SELECT count (*) FROM sharding_4_t1 WHERE id = 1")
        assert e.value.args[0] == 1064
    finally:
        fresh.close()


@pytest.mark.parametrize("sql", [
    "SELECT CONNECTION_ID() > 0",                                   # DBeaver's and Workbench's session probes
    "SELECT USER() LIKE '%@%', CURRENT_USER() = USER()",
    "SELECT CONCAT(DATABASE(), '.t') , 1",
    "SELECT SQL_NO_CACHE DATABASE()",
    "SELECT id, COALESCE(SCHEMA(), 'none') FROM sharding_4_t1 WHERE id = 1",
    "SELECT (CONNECTION_ID() > 0)",
    "SELECT CONNECTION_ID() > 0 AS alive, USER() LIKE '%' u, DATABASE() d",   # aliases stay as written
])
def test_a_session_function_inside_an_expression_keeps_the_column_name(pair, sql: str) -> None:
    """pydble answers CONNECTION_ID(), USER(), DATABASE() itself, writing their values into the statement; the
    column keeps the name MariaDB gives it (the item as written), which DictCursor keys and GUI grids show."""
    px, ref = pair
    with px.cursor(pymysql.cursors.DictCursor) as a, ref.cursor(pymysql.cursors.DictCursor) as b:
        a.execute(sql)
        b.execute(sql)
        assert [d[0] for d in a.description] == [d[0] for d in b.description]
        assert a.fetchone().keys() == b.fetchone().keys()


@pytest.mark.parametrize("sql", [
    "SHOW TABLES", "SHOW FULL TABLES FROM {db}", "SHOW TABLE STATUS", "SHOW DATABASES", "SHOW VARIABLES LIKE 'x'",
    "SHOW GLOBAL STATUS LIKE 'x'", "SHOW ENGINES", "SHOW COLLATION LIKE 'x'", "SHOW CHARSET", "SHOW OPEN TABLES",
    "SHOW TRIGGERS", "SHOW EVENTS", "SHOW PROCEDURE STATUS WHERE Db = '{db}'",
    "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{db}'",
    # no table read: the last statement's warnings stay, as on MariaDB
    "SHOW CREATE DATABASE {db}", "SHOW PRIVILEGES", "SELECT 1", "SELECT 'information_schema.TABLES'",
])
def test_a_statement_reading_tables_starts_fresh_warnings(pair, sql: str) -> None:
    """MariaDB clears SHOW WARNINGS for a statement that reads a table, the SHOW forms it answers from
    information_schema included; what the GUI tools' metadata reads between a user's statement and the
    SHOW WARNINGS they send after it must not leave the old warnings listed (nor keep them when MariaDB does)."""
    px, ref = pair

    def warnings(conn: Any, db: str) -> list[tuple[Any, ...]]:
        rows(conn, "SELECT 1/0")
        rows(conn, sql.format(db=db))
        return rows(conn, "SHOW WARNINGS") + rows(conn, "SHOW COUNT(*) WARNINGS")

    assert warnings(px, "schema1") == warnings(ref, REF_DB)


@pytest.mark.parametrize("begin", ["", "BEGIN"], ids=["autocommit", "in-transaction"])
def test_warnings_of_an_insert_split_over_nodes_name_the_statements_rows(pair, begin: str) -> None:
    """A load in non-strict mode (or INSERT IGNORE) reads SHOW WARNINGS to find the rows it truncated:
    '... at row N' counts the statement's VALUES rows, in their order, not each node's part of them."""
    px, ref = pair
    insert = ("INSERT {}INTO sharding_4_t1 VALUES (101, 1, 'ok'), (102, 99999999999, 'ok'), (103, 1, 'xxxxxxxxxxxxx'), "
              "(104, 1, 'ok'), (105, 1, 'yyyyyyyyyyyyyyyy'), (106, 1, 'ok'), (107, -99999999999, 'zzzzzzzzzzzzz')")
    try:
        on_both(pair, "SET SESSION sql_mode = ''", *[begin] * bool(begin), insert.format(""))
        want = rows(ref, "SHOW WARNINGS")
        assert [w[2][-8:] for w in want] == ["at row 2", "at row 3", "at row 5", "at row 7", "at row 7"]
        assert rows(px, "SHOW WARNINGS") == want
        on_both(pair, "DELETE FROM sharding_4_t1 WHERE id IN (103, 106)", insert.format("IGNORE "))
        want = rows(ref, "SHOW WARNINGS")   # the duplicates name no row: only the set is sure
        assert sorted(rows(px, "SHOW WARNINGS")) == sorted(want) and len(want) == 10
    finally:
        on_both(pair, *["ROLLBACK"] * bool(begin), "SET SESSION sql_mode = DEFAULT",
                "DELETE FROM sharding_4_t1 WHERE id > 100")


@pytest.mark.parametrize("sql", ["SHOW PROCESSLIST", "SHOW FULL PROCESSLIST"])
def test_show_processlist_has_mariadbs_columns(pair, sql: str) -> None:
    """mysqladmin processlist and the GUI tools' session managers read MariaDB's columns, Progress last,
    with its types (Time an INT, Progress a DOUBLE with 3 decimals)."""
    px, ref = pair

    def answer(conn: Any) -> tuple[list[tuple[Any, ...]], tuple[Any, ...]]:
        with conn.cursor() as cur:
            cur.execute(sql)
            mine = next(r for r in cur.fetchall() if r[7] == sql)
            return [(f.name, f.type_code, f.scale if f.type_code == 5 else 0) for f in cur._result.fields], mine

    (got, row), (want, ref_row) = answer(px), answer(ref)
    assert got == want
    assert row[5:] == (0, "executing", sql, 0.0) and ref_row[8] == 0.0


def test_set_statement_for_is_refused_as_unsupported_not_as_a_syntax_error(pair) -> None:
    """MariaDB's SET STATEMENT var = value FOR statement is valid SQL: 1235 saying so, not a 1064 blaming the
    user's syntax; the session's variables stay as they were."""
    px, _ = pair
    for sql in ("SET STATEMENT max_statement_time = 10 FOR SELECT COUNT(*) FROM sharding_4_t1",
                "set statement sql_select_limit=2, sql_mode='' for select id from sharding_4_t1"):
        with pytest.raises(pymysql.MySQLError) as e:
            rows(px, sql)
        assert e.value.args[0] == 1235 and "SET STATEMENT" in e.value.args[1], sql
    assert rows(px, "SELECT @@max_statement_time, @@sql_select_limit < 1000") == [(0.0, 0)]


def test_information_schema_outer_join_columns_are_nullable_as_on_mariadb(pair) -> None:
    """DataGrip and DBeaver read keys with information_schema.KEY_COLUMN_USAGE LEFT JOIN REFERENTIAL_CONSTRAINTS:
    the joined columns come back NULL for a primary key, so MariaDB declares them nullable; a column
    declared NOT NULL that carries NULLs breaks clients that trust the declaration."""
    px, ref = pair
    sql = ("SELECT kcu.CONSTRAINT_NAME, kcu.TABLE_NAME, rc.UPDATE_RULE, rc.DELETE_RULE "
           "FROM information_schema.KEY_COLUMN_USAGE kcu LEFT JOIN information_schema.REFERENTIAL_CONSTRAINTS rc "
           "ON rc.CONSTRAINT_SCHEMA = kcu.CONSTRAINT_SCHEMA AND rc.CONSTRAINT_NAME = kcu.CONSTRAINT_NAME "
           "WHERE kcu.TABLE_SCHEMA = '{db}' ORDER BY kcu.TABLE_NAME, kcu.CONSTRAINT_NAME")

    def answer(conn: Any, db: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        with conn.cursor() as cur:
            cur.execute(sql.format(db=db))
            return [(d[0], d[6]) for d in cur.description], [tuple(r) for r in cur.fetchall()]

    got, want = answer(px, "schema1"), answer(ref, REF_DB)
    assert got == want
    assert got[0][2:] == [("UPDATE_RULE", True), ("DELETE_RULE", True)] and got[1][0][2] is None


@pytest.mark.parametrize("sql", [
    'SHOW TABLES LIKE "sharding%"', 'SHOW FULL TABLES FROM {db} LIKE "sharding\\_4%"', 'SHOW TABLE STATUS LIKE "nomatch"',
    'SHOW TRIGGERS LIKE "x%"', 'SHOW PROCEDURE STATUS WHERE Db = "{db}"', 'SHOW OPEN TABLES FROM {db} LIKE "nomatch"',
    'SHOW COLUMNS FROM sharding_4_t1 LIKE "i%"',
])
def test_show_forms_with_a_double_quoted_pattern_answer_as_mariadb(pair, sql: str) -> None:
    """Scripts write SHOW TABLES LIKE "t%": MariaDB reads "..." as a string (no ANSI_QUOTES), as '...'
    (was: 1235 'SHOW TABLES is not supported by pydble')."""
    px, ref = pair

    def answer(conn: Any, db: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        with conn.cursor() as cur:
            cur.execute(sql.format(db=db))
            return [d[0].replace(db, "DB") for d in cur.description], [tuple(r) for r in cur.fetchall()]

    got, want = answer(px, "schema1"), answer(ref, REF_DB)
    assert got == want
