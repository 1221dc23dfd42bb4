"""information_schema and result metadata name the logical schemas, never the physical databases.

A user sees information_schema as one MariaDB holding its logical schemas would show it (only the
schemas it is granted, one row per logical table, logical names everywhere); column definitions of
results and error messages name the logical schema; what pydble cannot answer exactly is refused.
"""

from __future__ import annotations

import copy
from typing import Any, Iterator

import pymysql
import pytest
from harness import ProxyProcess, free_port, proxy_config
from ps_wire import PsClient, p_str
from wire import RawClient

PHYSICAL = (b"db1", b"db2", b"db3")


@pytest.fixture(scope="module")
def isp(backends: list[Any]) -> Iterator[ProxyProcess]:
    """A proxy with a user granted schema1 only; tables with keys, indexes and a foreign key."""
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-is"))
    cfg["users"].append({"name": "limited", "password": "lim-pw", "schemas": ["schema1"]})
    # a schema1 table on dn1 whose foreign key references schema2's sing, in the same physical database db1
    cfg["schemas"]["schema1"]["tables"]["is_fk"] = {"type": "single", "nodes": ["dn1"]}
    p = ProxyProcess(cfg, name="proxy-is", release_ports=True)
    p.start()
    try:
        for sql in ("DROP TABLE IF EXISTS is_fk", "DROP TABLE IF EXISTS is_child", "DROP TABLE IF EXISTS is_parent",
                    "DROP TABLE IF EXISTS sharding_4_t1", "DROP TABLE IF EXISTS sharding_2_t1",
                    "CREATE TABLE sharding_4_t1 (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(20) NOT NULL, "
                    "KEY k_name (name))",
                    "CREATE TABLE sharding_2_t1 (id INT PRIMARY KEY, v INT, CONSTRAINT v_positive CHECK (v >= 0))",
                    "CREATE TABLE is_parent (id INT PRIMARY KEY) COMMENT 'café ☕'",
                    "CREATE TABLE is_child (id INT PRIMARY KEY, pid INT, "
                    "CONSTRAINT fk_parent FOREIGN KEY (pid) REFERENCES is_parent (id))",
                    "INSERT INTO sharding_4_t1 VALUES (1,'a'),(2,'b'),(3,'c'),(4,'d'),(5,'e'),(6,'f'),(7,'g'),(8,'h')",
                    "INSERT INTO sharding_2_t1 VALUES (1, 10), (2, 20)",
                    "ANALYZE TABLE sharding_4_t1"):
            p.query(sql)
        p.query("DROP TABLE IF EXISTS sing", database="schema2")
        p.query("CREATE TABLE sing (id INT PRIMARY KEY, s VARCHAR(10))", database="schema2")
        p.query("INSERT INTO sing VALUES (1, 'x')", database="schema2")
        p.query("CREATE TABLE is_fk (id INT PRIMARY KEY, sid INT, CONSTRAINT fk_sing FOREIGN KEY (sid) "
                "REFERENCES sing (id))")
        yield p
    finally:
        try:  # the backends are shared with other tests: leave no foreign key pointing at their tables
            for sql in ("DROP TABLE IF EXISTS is_fk", "DROP TABLE IF EXISTS is_child", "DROP TABLE IF EXISTS is_parent"):
                p.query(sql)
        finally:
            p.cleanup()


def _fetch(conn: Any, sql: str) -> tuple[list[tuple[Any, ...]], list[Any]]:
    """Rows and column definitions of sql on conn, which is closed after."""
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall()), list(cur._result.fields)  # type: ignore[union-attr]
    finally:
        conn.close()


def _run(p: ProxyProcess, sql: str, user: str = "test", password: str = "111111",
         database: str | None = "schema1", **kw: Any) -> tuple[list[tuple[Any, ...]], list[Any]]:
    return _fetch(p.connect(user=user, password=password, database=database, **kw), sql)


def _in_transaction(p: ProxyProcess, *sqls: str) -> list[tuple[Any, ...]]:
    """Run sqls inside BEGIN ... ROLLBACK on one connection; what each returned."""
    conn = p.connect(database="schema1")
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            out = []
            for sql in sqls:
                cur.execute(sql)
                out.append(cur.fetchall())
            cur.execute("ROLLBACK")
            return out
    finally:
        conn.close()


def _db(field: Any) -> str:
    """The schema a column definition names (PyMySQL keeps it as bytes)."""
    return field.db.decode() if isinstance(field.db, bytes) else field.db


def _no_physical(rows: list[tuple[Any, ...]]) -> None:
    for row in rows:
        for v in row:
            b = v.encode() if isinstance(v, str) else v if isinstance(v, bytes) else b""
            assert b not in PHYSICAL, row


# -- (b) column definitions and errors --------------------------------------------------------

@pytest.mark.parametrize("sql, schema, table", [
    ("SELECT id, name FROM sharding_4_t1 WHERE id = 3", "schema1", "sharding_4_t1"),       # fast point read
    ("SELECT id, name FROM sharding_4_t1 WHERE id IN (1, 2)", "schema1", "sharding_4_t1"),  # streamed concat
    ("SELECT id, name FROM sharding_4_t1 ORDER BY name", "schema1", "sharding_4_t1"),       # merged
    ("SELECT s.id, s.v FROM sharding_2_t1 AS s WHERE s.id = 1", "schema1", "sharding_2_t1"),
    ("SELECT id, s FROM schema2.sing", "schema2", "sing"),                                   # single on dn1 = db1
    ("SELECT id FROM is_parent", "schema1", "is_parent"),                                     # default node
])
def test_result_columns_name_the_logical_schema(isp: ProxyProcess, sql: str, schema: str, table: str) -> None:
    _, fields = _run(isp, sql)
    assert fields
    for f in fields:
        assert _db(f) == schema, (sql, f.db)
        assert f.org_table == table


def test_a_long_answer_relayed_in_pieces_names_the_logical_schema(isp: ProxyProcess) -> None:
    """Past the one-read fast relay (16 KB), packets are renamed as they stream through the scanner."""
    rows, fields = _run(isp, "SELECT id, name, REPEAT('x', 70000) AS pad FROM sharding_4_t1 WHERE id = 2")
    assert rows == [(2, "b", "x" * 70000)]
    assert [(_db(f), f.org_table) for f in fields] == [("schema1", "sharding_4_t1")] * 2 + [("", "")]


def test_multi_statement_and_collected_results_name_the_logical_schema(isp: ProxyProcess) -> None:
    conn = isp.connect(database="schema1", client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM sharding_4_t1 WHERE id = 1; SELECT id FROM schema2.sing")
            assert [_db(f) for f in cur._result.fields] == ["schema1"]
            assert cur.nextset()
            assert [_db(f) for f in cur._result.fields] == ["schema2"]
    finally:
        conn.close()


def test_errors_name_the_logical_schema(isp: ProxyProcess) -> None:
    with pytest.raises(pymysql.MySQLError) as e:
        _run(isp, "SELECT * FROM schema1.is_nosuch")
    assert e.value.args[0] == 1146
    assert e.value.args[1] == "Table 'schema1.is_nosuch' doesn't exist"


def test_foreign_key_error_and_warning_name_the_logical_schema(isp: ProxyProcess) -> None:
    with pytest.raises(pymysql.MySQLError) as e:
        _run(isp, "INSERT INTO is_child VALUES (5, 99)")
    assert e.value.args[0] == 1452
    assert "(`schema1`.`is_child`, CONSTRAINT `fk_parent`" in e.value.args[1], e.value.args[1]
    _, warnings = _in_transaction(isp, "INSERT IGNORE INTO is_child VALUES (5, 99)", "SHOW WARNINGS")
    (level, code, message), = warnings
    assert code == 1452 and "(`schema1`.`is_child`, CONSTRAINT" in message, message


def test_field_list_names_the_logical_schema(isp: ProxyProcess) -> None:
    c = RawClient(isp.port)
    try:
        assert c.login(database="schema2").kind == "ok"
        c.command(b"\x04sing\x00")
        defs = []
        while True:
            p = c.read_packet()
            if p.kind in ("eof", "err"):
                break
            defs.append(p.payload)
        assert p.kind == "eof" and len(defs) == 2
        for d in defs:
            assert d[:4] == b"\x03def" and d[4:12] == b"\x07schema2", d
        c.command(b"\x04nosuch\x00")
        p = c.read_packet()
        assert p.kind == "err" and b"db" not in p.payload, p.payload
    finally:
        c.close()
    c = RawClient(isp.port)
    try:
        assert c.login(database="schema1").kind == "ok"
        c.command(b"\x04is_nosuch\x00")  # asked of the default node, whose database is db3
        p = c.read_packet()
        assert p.kind == "err" and p.err_message == "Table 'schema1.is_nosuch' doesn't exist"
    finally:
        c.close()


# -- (a) information_schema ---------------------------------------------------------------------

def test_schemata_lists_the_granted_logical_schemas_only(isp: ProxyProcess) -> None:
    rows, fields = _run(isp, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA ORDER BY SCHEMA_NAME")
    assert rows == [("schema1",), ("schema2",)]
    assert _db(fields[0]) == "information_schema"
    assert _run(isp, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA ORDER BY 1", database=None)[0] == rows
    rows, _ = _run(isp, "SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME FROM information_schema.schemata",
                   user="limited", password="lim-pw")
    assert [r[0] for r in rows] == ["schema1"] and rows[0][1]
    rows, _ = _run(isp, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA IN "
                        "('schema2', 'db1', 'db2', 'db3', 'mysql')", user="limited", password="lim-pw")
    assert rows == [(0,)]


def test_tables_one_row_per_logical_table(isp: ProxyProcess, backends: list[Any]) -> None:
    rows, _ = _run(isp, "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES "
                        "WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME")
    names = [r[1] for r in rows]
    assert names == sorted(set(names))  # each table once, though sharding_4_t1 lives on four nodes
    assert {"sharding_4_t1", "sharding_2_t1", "is_parent", "is_child"} <= set(names)
    assert all(r[0] == "schema1" and r[2] == "BASE TABLE" for r in rows)
    rows, _ = _run(isp, "SELECT * FROM information_schema.TABLES")
    _no_physical(rows)
    assert {(r[1], r[2]) for r in rows} >= {("schema1", "sharding_4_t1"), ("schema2", "sing")}
    # a sharding table's row counts are the sum of its parts, its next AUTO_INCREMENT the largest
    (total, auto), = _run(isp, "SELECT TABLE_ROWS, AUTO_INCREMENT FROM information_schema.TABLES "
                               "WHERE TABLE_SCHEMA = 'schema1' AND TABLE_NAME = 'sharding_4_t1'")[0]
    parts = [backends[b].query("SELECT TABLE_ROWS, AUTO_INCREMENT FROM information_schema.TABLES "
                               f"WHERE TABLE_SCHEMA = '{db}' AND TABLE_NAME = 'sharding_4_t1'")[0]
             for b, db in ((0, "db1"), (1, "db1"), (0, "db2"), (1, "db2"))]
    assert total == sum(p[0] for p in parts)
    assert auto == max(p[1] for p in parts) == 9
    rows, _ = _run(isp, "SELECT TABLE_ROWS FROM information_schema.PARTITIONS "
                        "WHERE TABLE_SCHEMA = 'schema1' AND TABLE_NAME = 'sharding_4_t1'")
    assert rows == [(total,)]


def test_columns_and_keys_as_one_mariadb_shows_them(isp: ProxyProcess, backends: list[Any]) -> None:
    rows, _ = _run(isp, "SELECT COLUMN_NAME, ORDINAL_POSITION, COLUMN_TYPE, IS_NULLABLE, COLUMN_KEY "
                        "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'schema1' "
                        "AND TABLE_NAME = 'sharding_4_t1' ORDER BY ORDINAL_POSITION")
    assert rows == [("id", 1, "int(11)", "NO", "PRI"), ("name", 2, "varchar(20)", "NO", "MUL")]
    rows, _ = _run(isp, "SELECT TABLE_SCHEMA, INDEX_SCHEMA, INDEX_NAME, COLUMN_NAME FROM "
                        "information_schema.STATISTICS WHERE TABLE_NAME = 'sharding_4_t1' ORDER BY INDEX_NAME")
    # utf8_general_ci, as information_schema compares: k_name sorts before PRIMARY
    assert rows == [("schema1", "schema1", "k_name", "name"), ("schema1", "schema1", "PRIMARY", "id")]
    rows, _ = _run(isp, "SELECT CONSTRAINT_SCHEMA, TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, REFERENCED_TABLE_SCHEMA, "
                        "REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
                        "WHERE TABLE_SCHEMA = 'schema1' AND TABLE_NAME = 'is_child' ORDER BY CONSTRAINT_NAME")
    assert rows == [("schema1", "schema1", "is_child", "pid", "schema1", "is_parent", "id"),
                    ("schema1", "schema1", "is_child", "id", None, None, None)]
    rows, _ = _run(isp, "SELECT CONSTRAINT_SCHEMA, CONSTRAINT_NAME, UNIQUE_CONSTRAINT_SCHEMA, TABLE_NAME, "
                        "REFERENCED_TABLE_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS ORDER BY 2")
    assert rows == [("schema1", "fk_parent", "schema1", "is_child", "is_parent"),
                    ("schema1", "fk_sing", "schema2", "is_fk", "sing")]  # another schema's table, same db1
    rows, _ = _run(isp, "SELECT TABLE_SCHEMA, REFERENCED_TABLE_SCHEMA, REFERENCED_TABLE_NAME FROM "
                        "information_schema.KEY_COLUMN_USAGE WHERE CONSTRAINT_NAME = 'fk_sing'")
    assert rows == [("schema1", "schema2", "sing")]
    rows, _ = _run(isp, "SELECT c.TABLE_NAME, c.CONSTRAINT_TYPE FROM information_schema.TABLE_CONSTRAINTS c "
                        "JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA "
                        "AND t.TABLE_NAME = c.TABLE_NAME WHERE c.TABLE_SCHEMA = 'schema2'")
    assert rows == [("sing", "PRIMARY KEY")]
    rows, _ = _run(isp, "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, CHECK_CLAUSE "
                        "FROM information_schema.CHECK_CONSTRAINTS WHERE TABLE_NAME LIKE 'sharding%'")
    assert rows == [("schema1", "sharding_2_t1", "v_positive", "`v` >= 0")]  # once, though on two nodes
    for t in ("ROUTINES", "VIEWS", "TRIGGERS", "EVENTS", "PARAMETERS"):
        assert _run(isp, f"SELECT * FROM information_schema.{t}")[0] == [], t


@pytest.mark.parametrize("table", ["SCHEMATA", "TABLES", "COLUMNS", "STATISTICS", "KEY_COLUMN_USAGE",
                                   "TABLE_CONSTRAINTS", "REFERENTIAL_CONSTRAINTS", "ROUTINES", "PROCESSLIST"])
@pytest.mark.parametrize("charset", ["utf8mb4", "latin1"])
def test_column_definitions_equal_mariadbs(isp: ProxyProcess, backends: list[Any], table: str, charset: str) -> None:
    """Types, lengths, flags and character sets of the answer are information_schema's own."""
    sql = f"SELECT * FROM information_schema.{table} LIMIT 0"
    _, got = _run(isp, sql, charset=charset)
    _, want = _fetch(pymysql.connect(host=backends[0].host, port=backends[0].port, user="root", database="db1",
                                     charset=charset), sql)

    def shape(f: Any) -> tuple[Any, ...]:
        return (_db(f), f.table_name, f.org_table, f.name, f.org_name, f.charsetnr, f.length, f.type_code, f.flags,
                f.scale)

    assert [shape(f) for f in got] == [shape(f) for f in want]


@pytest.mark.parametrize("charset, comment", [("utf8mb4", "café ☕"), ("latin1", "café ?")])
def test_text_reaches_the_client_in_its_character_set(isp: ProxyProcess, charset: str, comment: str) -> None:
    rows, _ = _run(isp, "SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_NAME = 'is_parent'",
                   charset=charset)
    assert rows == [(comment,)]


def test_a_shardingnode_hint_does_not_reach_the_physical_information_schema(isp: ProxyProcess) -> None:
    rows, _ = _run(isp, "/*!pydble:shardingNode=dn1*/ SELECT SCHEMA_NAME FROM information_schema.SCHEMATA "
                        "ORDER BY 1", user="limited", password="lim-pw")
    assert rows == [("schema1",)]


def test_with_and_database_in_a_common_table_expression(isp: ProxyProcess) -> None:
    rows, _ = _run(isp, "WITH t AS (SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()) "
                        "SELECT COUNT(*) FROM t WHERE TABLE_NAME LIKE 'sharding%'")
    assert rows == [(2,)]


def test_group_by_and_functions_run_as_in_mariadb(isp: ProxyProcess) -> None:
    rows, fields = _run(isp, "SELECT TABLE_SCHEMA, COUNT(*) AS n, GROUP_CONCAT(TABLE_NAME ORDER BY TABLE_NAME) "
                             "FROM information_schema.TABLES WHERE TABLE_NAME LIKE 'S%' GROUP BY TABLE_SCHEMA "
                             "ORDER BY TABLE_SCHEMA")
    assert rows == [("schema1", 2, "sharding_2_t1,sharding_4_t1"), ("schema2", 1, "sing")]
    assert [f.name for f in fields] == ["TABLE_SCHEMA", "n", "GROUP_CONCAT(TABLE_NAME ORDER BY TABLE_NAME)"]
    assert _db(fields[0]) == "information_schema" and fields[0].org_table == "TABLES"


def test_prepared_statement_on_information_schema(isp: ProxyProcess) -> None:
    with PsClient(isp.port) as c:
        st = c.prepare("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?")
        got = c.execute(st.stmt_id, [p_str("schema2")])
    assert got.kind == "rows" and len(got.rows) == 1
    assert b"\x07schema2\x04sing" in got.rows[0]
    assert all(b"\x12information_schema" in d for d in got.column_defs)


OURS = {"is_child", "is_parent", "sharding_2_t1", "sharding_4_t1"}


def _param(p: ProxyProcess, sql: str, args: Any) -> list[tuple[Any, ...]]:
    return p.query(sql, args=args)


def test_what_mycli_completion_asks(isp: ProxyProcess) -> None:
    """mycli's completion queries (mycli.packages.execution.sql_execute), as it sends them."""
    from mycli.packages.execution.sql_execute import SQLExecute as Q
    cols = _param(isp, Q.table_columns_query, ("schema1",))
    assert cols == sorted(cols, key=lambda r: r[0].lower())  # table_name order, each table's columns in place
    assert [r for r in cols if r[0] in OURS] == [("is_child", "id"), ("is_child", "pid"), ("is_parent", "id"),
                                                 ("sharding_2_t1", "id"), ("sharding_2_t1", "v"),
                                                 ("sharding_4_t1", "id"), ("sharding_4_t1", "name")]
    idx = [r for r in _param(isp, Q.indexed_columns_query, ("schema1",)) if r[0] in OURS]
    assert idx == [("is_child", "id"), ("is_child", "pid"), ("is_parent", "id"), ("sharding_2_t1", "id"),
                   ("sharding_4_t1", "id"), ("sharding_4_t1", "name")]
    fks = [r for r in _param(isp, Q.foreign_keys_query, ("schema1",)) if r[0] in OURS]
    assert fks == [("is_child", "pid", "is_parent", "id")]
    assert _param(isp, Q.functions_query, ("schema1",)) == []
    assert _param(isp, Q.enum_values_query, ("schema1",)) == [r for r in _param(isp, Q.enum_values_query,
                                                                                  ("schema1",)) if r[0] not in OURS]


def test_sqlalchemy_reflection(isp: ProxyProcess) -> None:
    """SQLAlchemy's inspector on MariaDB: sequences come from information_schema, keys from SHOW CREATE."""
    import sqlalchemy as sa
    engine = sa.create_engine(f"mysql+pymysql://test:111111@127.0.0.1:{isp.port}/schema1")
    try:
        insp = sa.inspect(engine)
        assert insp.get_sequence_names() == []
        assert not insp.has_sequence("sharding_4_t1")
        assert [c["name"] for c in insp.get_columns("sharding_4_t1")] == ["id", "name"]
        assert insp.get_pk_constraint("is_child")["constrained_columns"] == ["id"]
        fk, = insp.get_foreign_keys("is_child")
        assert (fk["referred_table"], fk["referred_columns"], fk["constrained_columns"]) == ("is_parent", ["id"],
                                                                                           ["pid"])
    finally:
        engine.dispose()


@pytest.mark.parametrize("sql", [  # what a GUI tool's navigator asks (DBeaver's MySQL plugin style)
    "SELECT * FROM information_schema.TABLES WHERE TABLE_SCHEMA='schema1' ORDER BY TABLE_NAME",
    "SELECT * FROM information_schema.COLUMNS WHERE TABLE_SCHEMA='schema1' AND TABLE_NAME='sharding_4_t1' "
    "ORDER BY ORDINAL_POSITION",
    "SELECT * FROM information_schema.STATISTICS WHERE TABLE_SCHEMA='schema1' ORDER BY TABLE_NAME, INDEX_NAME, "
    "SEQ_IN_INDEX",
    "SELECT * FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA='schema1'",
    "SELECT kc.CONSTRAINT_NAME, kc.TABLE_NAME, kc.COLUMN_NAME, kc.ORDINAL_POSITION FROM "
    "information_schema.KEY_COLUMN_USAGE kc WHERE kc.TABLE_SCHEMA='schema1' AND kc.REFERENCED_TABLE_NAME IS NULL "
    "ORDER BY kc.TABLE_NAME, kc.ORDINAL_POSITION",
    "SELECT * FROM information_schema.ENGINES",
    "SELECT * FROM information_schema.COLLATIONS WHERE CHARACTER_SET_NAME = 'utf8mb4'",
    "SELECT * FROM `information_schema`.`SCHEMATA`",
])
def test_gui_navigator_queries_show_no_physical_name(isp: ProxyProcess, sql: str) -> None:
    rows, fields = _run(isp, sql)
    assert rows
    _no_physical(rows)
    assert all(_db(f) in ("information_schema", "") for f in fields)


def test_what_mysqldump_asks(isp: ProxyProcess) -> None:
    """mysqldump's tablespace queries (FILES within PARTITIONS of the dumped schema) run and find nothing."""
    assert _run(isp, "SELECT LOGFILE_GROUP_NAME, FILE_NAME, TOTAL_EXTENTS, INITIAL_SIZE, ENGINE, EXTRA FROM "
                     "INFORMATION_SCHEMA.FILES WHERE FILE_TYPE = 'UNDO LOG' AND FILE_NAME IS NOT NULL AND "
                     "LOGFILE_GROUP_NAME IS NOT NULL AND LOGFILE_GROUP_NAME IN (SELECT DISTINCT LOGFILE_GROUP_NAME "
                     "FROM INFORMATION_SCHEMA.FILES WHERE FILE_TYPE = 'DATAFILE' AND TABLESPACE_NAME IN (SELECT "
                     "DISTINCT TABLESPACE_NAME FROM INFORMATION_SCHEMA.PARTITIONS WHERE TABLE_SCHEMA IN "
                     "('schema1'))) GROUP BY LOGFILE_GROUP_NAME, FILE_NAME, ENGINE, TOTAL_EXTENTS, INITIAL_SIZE "
                     "ORDER BY LOGFILE_GROUP_NAME")[0] == []
    rows, _ = _run(isp, "SELECT TABLE_SCHEMA, TABLE_NAME, PARTITION_NAME FROM INFORMATION_SCHEMA.PARTITIONS "
                        "WHERE TABLE_SCHEMA IN ('schema1') AND TABLE_NAME = 'sharding_4_t1'")
    assert rows == [("schema1", "sharding_4_t1", None)]


def test_inside_a_transaction(isp: ProxyProcess) -> None:
    """The copies live on a connection of the session's transaction and are gone after the query."""
    isp.query("CREATE TABLE IF NOT EXISTS tables (id INT)")  # a user table on the default node named like a copy
    try:
        _, counted, own = _in_transaction(
            isp, "INSERT INTO sharding_2_t1 VALUES (50, 1)",
            "SELECT COUNT(*) FROM information_schema.tables WHERE TABLE_NAME = 'sharding_2_t1'",
            "SELECT COUNT(*) FROM tables")  # the same pinned connection: the copy must be gone
        assert counted == ((1,),) and own == ((0,),)
        assert isp.query("SELECT COUNT(*) FROM sharding_2_t1 WHERE id = 50") == [(0,)]
        assert isp.query("SELECT COUNT(*) FROM tables") == [(0,)]
    finally:
        isp.query("DROP TABLE tables")


def test_information_schema_in_a_string_or_comment_is_an_ordinary_query(isp: ProxyProcess) -> None:
    rows, _ = _run(isp, "SELECT id, name /* information_schema.TABLES */ FROM sharding_4_t1 "
                        "WHERE name <> 'information_schema.TABLES' ORDER BY id LIMIT 2")
    assert rows == [(1, "a"), (2, "b")]


def test_an_error_in_the_query_is_mariadbs(isp: ProxyProcess) -> None:
    conn = isp.connect(database="schema1")
    try:
        with conn.cursor() as cur:
            with pytest.raises(pymysql.MySQLError) as e:
                cur.execute("SELECT no_such_column FROM information_schema.TABLES")
            assert e.value.args[0] == 1054 and e.value.args[1].startswith("Unknown column 'no_such_column' in ")
            cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_NAME = 'sing'")
            assert cur.fetchall() == ((1,),)  # the session goes on; the copies of the failed query are gone
    finally:
        conn.close()


def test_a_version_comment_reading_information_schema_is_answered_as_its_content(isp: ProxyProcess) -> None:
    # the tokenizer opens /*!50000 ... */ as MariaDB does, so its content is answered like plain SQL
    plain = isp.query("SELECT 1, (SELECT COUNT(*) FROM information_schema.SCHEMATA)")
    assert isp.query("SELECT 1 /*!50000 , (SELECT COUNT(*) FROM information_schema.SCHEMATA) */") == plain
    assert plain[0][1] >= 2


def test_processlist_is_pydbles_sessions(isp: ProxyProcess) -> None:
    """information_schema.PROCESSLIST answers pydble's client sessions (the rest: tests/security)."""
    conn = isp.connect(database="schema1")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            me = cur.fetchone()[0]
            sql = ("SELECT ID, USER, DB, COMMAND, INFO, INFO_BINARY, TID FROM information_schema.PROCESSLIST "
                   "WHERE ID = CONNECTION_ID() AND 'x😀é' <> ''")
            cur.execute(sql)
            # INFO is utf8mb3 (MariaDB shows '????' for what it cannot hold), INFO_BINARY the bytes
            assert cur.fetchall() == ((me, "test", "schema1", "Query", sql.replace("😀", "????"), sql.encode(), 0),)
    finally:
        conn.close()


@pytest.mark.parametrize("sql", [
    "SELECT * FROM information_schema.USER_PRIVILEGES",
    "SELECT t.TABLE_NAME FROM information_schema.TABLES t JOIN sharding_4_t1 s ON s.id = 1",
    "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_NAME IN (SELECT s FROM schema2.sing)",
    "INSERT INTO sharding_2_t1 SELECT ORDINAL_POSITION, 1 FROM information_schema.COLUMNS",
    "SET @x = (SELECT SCHEMA_NAME FROM information_schema.SCHEMATA LIMIT 1)",
    "EXPLAIN SELECT * FROM information_schema.TABLES",
    "DO (SELECT COUNT(*) FROM information_schema.TABLES)",
])
def test_what_cannot_be_answered_exactly_is_refused(isp: ProxyProcess, sql: str) -> None:
    with pytest.raises(pymysql.MySQLError) as e:
        _run(isp, sql)
    assert e.value.args[0] == 1235, e.value.args
    assert isp.query("SELECT COUNT(*) FROM sharding_2_t1") == [(2,)]
