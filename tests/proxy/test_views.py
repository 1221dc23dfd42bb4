"""Views, as DBLE has them: a view over one node's tables is created on that node; any other view is
kept by pydble (a local file here), expanded into the queries that read it, and survives a restart."""

from __future__ import annotations

import copy
import subprocess
from typing import Any

import pymysql
import pytest
from harness import free_port, proxy_config, require_tool

from meta.errors import ParseError
from proxy.plan.view_parse import parse


def _err(cur: Any, sql: str) -> tuple[int, str]:
    with pytest.raises(pymysql.MySQLError) as e:
        cur.execute(sql)
    return e.value.args[0], e.value.args[1]


def test_pushed_and_kept_views_survive_a_restart(fresh_proxy, backends, backend_rows):
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-views"))
    cfg["users"].append({"name": "nosel", "password": "pw", "schemas": ["schema1", "schema2"],
                         "privileges": {"schema1.sharding_4_t1": "1101"}})   # no SELECT on the base table
    p = fresh_proxy(cfg)
    c = p.connect()
    cur = c.cursor()
    for sql in ("DROP TABLE IF EXISTS sharding_4_t1", "CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))",
                "INSERT INTO sharding_4_t1 VALUES (1,'a'),(2,'b'),(3,'c'),(4,'d'),(5,'e'),(6,'f'),(7,'g'),(8,'h')",
                "USE schema2", "DROP TABLE IF EXISTS sing", "CREATE TABLE sing (id INT PRIMARY KEY, v INT)",
                "INSERT INTO sing VALUES (1,10),(2,20),(3,30)"):
        cur.execute(sql)
    for db in ("db1", "db2", "db3"):   # views a previous run left on the backends
        for b in backends:
            for (name,) in backend_rows(b, db, "SELECT TABLE_NAME FROM information_schema.VIEWS "
                                               "WHERE TABLE_SCHEMA = DATABASE()"):
                backend_rows(b, db, f"DROP VIEW `{name}`")

    # pushed down: every table it reads is on dn1, so the view is created there and dn1 answers it
    cur.execute("CREATE VIEW sv AS SELECT id, v FROM sing WHERE v > 10")
    assert backend_rows(backends[0], "db1", "SELECT TABLE_NAME FROM information_schema.VIEWS "
                                            "WHERE TABLE_SCHEMA = 'db1'") == [("sv",)]
    cur.execute("SELECT * FROM sv ORDER BY id")
    assert cur.fetchall() == ((2, 20), (3, 30))

    # kept by pydble: it reads a table on four nodes; expanded and merged like any query
    cur.execute("USE schema1")
    cur.execute("CREATE VIEW v4 AS SELECT id, name FROM sharding_4_t1 WHERE id > 2")
    cur.execute("CREATE VIEW v4c (k, n) AS SELECT id, name FROM sharding_4_t1")
    cur.execute("CREATE VIEW vv AS SELECT k FROM v4c WHERE n <> 'a'")   # a view over a view
    for b in backends:
        for db in ("db1", "db2", "db3"):
            assert backend_rows(b, db, "SELECT COUNT(*) FROM information_schema.VIEWS "
                                       "WHERE TABLE_SCHEMA = DATABASE()")[0][0] == (1 if (b, db) == (backends[0], "db1") else 0)
    cur.execute("SELECT COUNT(*), MAX(id) FROM v4")
    assert cur.fetchall() == ((6, 8),)
    cur.execute("SELECT name FROM v4 ORDER BY id LIMIT 2")
    assert cur.fetchall() == (("c",), ("d",))
    fields = cur._result.fields   # type: ignore[union-attr]
    assert [(bytes(f.db).decode(), f.table_name) for f in fields] == [("schema1", "v4")]   # not the node's database
    cur.execute("SELECT x.name FROM schema1.v4 AS x WHERE x.id = 5")
    assert cur.fetchall() == (("e",),)
    cur.execute("SELECT n FROM v4c WHERE k = 1")
    assert cur.fetchall() == (("a",),)
    cur.execute("SELECT COUNT(*) FROM vv")
    assert cur.fetchall() == ((7,),)
    cur.execute("USE schema2")
    cur.execute("SELECT COUNT(*) FROM schema1.v4")   # the view's tables are read in its own schema
    assert cur.fetchall() == ((6,),)
    cur.execute("USE schema1")

    # listed and shown
    cur.execute("SHOW FULL TABLES WHERE Table_type = 'VIEW'")
    assert set(cur.fetchall()) == {("v4", "VIEW"), ("v4c", "VIEW"), ("vv", "VIEW")}
    cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'VIEW' "
                "ORDER BY 1, 2")
    assert cur.fetchall() == (("schema1", "v4"), ("schema1", "v4c"), ("schema1", "vv"), ("schema2", "sv"))
    cur.execute("SELECT TABLE_NAME, VIEW_DEFINITION FROM information_schema.VIEWS WHERE TABLE_NAME = 'v4'")
    assert cur.fetchall() == (("v4", "SELECT id, name FROM sharding_4_t1 WHERE id > 2"),)
    cur.execute("DESC v4c")   # MariaDB describes the view's statement
    assert [row[:3] for row in cur.fetchall()] == [("k", "int(11)", "NO"), ("n", "varchar(20)", "YES")]
    cur.execute("SHOW COLUMNS FROM schema1.v4 LIKE 'na%'")
    assert [row[0] for row in cur.fetchall()] == ["name"]
    cur.execute("SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_NAME IN ('v4c', 'sv') ORDER BY 1, ORDINAL_POSITION")
    assert cur.fetchall() == (("sv", "id", "int(11)"), ("sv", "v", "int(11)"),
                              ("v4c", "k", "int(11)"), ("v4c", "n", "varchar(20)"))
    cur.execute("SHOW TABLE STATUS LIKE 'v4%'")
    comment = [d[0] for d in cur.description].index("Comment")
    assert [(row[0], row[1], row[comment]) for row in cur.fetchall()] == [("v4", None, "VIEW"), ("v4c", None, "VIEW")]
    cur.execute("SHOW CREATE VIEW v4")
    assert cur.fetchall()[0][:2] == ("v4", "CREATE VIEW `v4` AS SELECT id, name FROM sharding_4_t1 WHERE id > 2")

    # DBLE's errors, and what pydble cannot answer exactly
    assert _err(cur, "CREATE VIEW v4 AS SELECT 1")[0] == 1050
    assert _err(cur, "CREATE VIEW sharding_4_t1 AS SELECT 1")[0] == 1050
    assert _err(cur, "ALTER VIEW nope AS SELECT 1")[0] == 1146
    assert _err(cur, "CREATE VIEW d (a, a) AS SELECT id, name FROM sharding_4_t1")[0] == 1166
    assert _err(cur, "CREATE VIEW d (a) AS SELECT id, name FROM sharding_4_t1") == (
        1222, "The Column_list Size and Select_statement Size Not Match")
    assert _err(cur, "CREATE VIEW agg AS SELECT COUNT(*) FROM sharding_4_t1")[0] == 1235
    assert _err(cur, "INSERT INTO v4 VALUES (9, 'i')")[0] == 1235
    assert _err(cur, "DROP VIEW nope") == (4092, "Unknown VIEW: 'schema1.nope'")   # MariaDB's answer
    assert _err(cur, "DROP TABLE v4")[0] == 1051
    assert _err(cur, "ALTER TABLE v4 ADD c INT")[0] == 1347
    nodb = p.connect(database=None)
    assert _err(nodb.cursor(), "CREATE VIEW v AS SELECT 1")[0] == 1046
    nodb.close()
    nosel = p.connect(user="nosel", password="pw")
    assert _err(nosel.cursor(), "SELECT * FROM v4")[0] == 1142   # checked on the base table it reads
    definition = "SELECT VIEW_DEFINITION FROM information_schema.VIEWS WHERE TABLE_NAME = 'v4'"
    with nosel.cursor() as ncur:   # as MySQL: the definition is hidden from who may not read its tables
        ncur.execute(definition)
        assert ncur.fetchall() == (("",),)
    nosel.close()
    cur.execute(definition)
    assert "sharding_4_t1" in cur.fetchall()[0][0]

    # replaced, altered, and still there after a restart
    cur.execute("CREATE OR REPLACE VIEW v4 AS SELECT id, name FROM sharding_4_t1 WHERE id > 6")
    cur.execute("ALTER VIEW v4c AS SELECT id FROM sharding_4_t1 WHERE id < 3")
    c.close()
    p.restart()
    c = p.connect()
    cur = c.cursor()
    cur.execute("SELECT id FROM v4 ORDER BY id")
    assert cur.fetchall() == ((7,), (8,))
    cur.execute("SELECT COUNT(*) FROM v4c")
    assert cur.fetchall() == ((2,),)
    cur.execute("SELECT COUNT(*) FROM schema2.sv")
    assert cur.fetchall() == ((2,),)
    # as MariaDB: what exists is dropped, the missing one is named
    assert _err(cur, "DROP VIEW vv, v4, nope1, v4c") == (4092, "Unknown VIEW: 'schema1.nope1'")
    cur.execute("DROP VIEW IF EXISTS v4")
    cur.execute("SHOW WARNINGS")
    assert cur.fetchall()[0][1] == 4092
    cur.execute("DROP VIEW schema2.sv")
    for b in backends:   # nothing left behind (DESC and information_schema.COLUMNS make views for a moment)
        assert backend_rows(b, None, "SELECT COUNT(*) FROM information_schema.VIEWS "
                                     "WHERE TABLE_SCHEMA IN ('db1', 'db2', 'db3')") == [(0,)]
    assert _err(cur, "SELECT * FROM v4")[0] == 1146
    c.close()


def test_view_statements_are_read_as_written():
    st = parse("CREATE OR REPLACE ALGORITHM=MERGE DEFINER=`root`@`%` SQL SECURITY INVOKER VIEW s.v (a, `b c`) "
               "AS SELECT 1, 2 WITH LOCAL CHECK OPTION;")
    assert st is not None
    assert (st.op, st.names, st.or_replace, st.columns, st.select, st.algorithm, st.check_option) == (
        "CREATE", [["s", "v"]], True, ("a", "b c"), "SELECT 1, 2", "MERGE", "WITH LOCAL CHECK OPTION")
    st = parse("drop view if exists a, `s`.b cascade")
    assert st is not None and (st.op, st.names, st.if_exists) == ("DROP", [["a"], ["s", "b"]], True)
    st = parse("DESC s.v c")
    assert st is not None and (st.op, st.names, st.select) == ("DESC", [["s", "v"]], "SHOW COLUMNS FROM {} LIKE 'c'")
    st = parse("SHOW FULL FIELDS IN v FROM s WHERE Type LIKE 'int%'")
    assert st is not None and (st.names, st.select) == ([["s", "v"]], "SHOW FULL COLUMNS FROM {} WHERE Type LIKE 'int%'")
    st = parse("ALTER VIEW v AS (SELECT x FROM t)")
    assert st is not None and (st.op, st.select) == ("ALTER", "(SELECT x FROM t)")
    for other in ("CREATE TABLE t (id INT)", "ALTER TABLE t ADD c INT", "DROP TABLE v", "SHOW CREATE TABLE t x",
                  "CREATE DEFINER=root@localhost PROCEDURE p() SELECT 1", "SHOW TABLES",
                  "EXPLAIN SELECT * FROM v", "DESC SELECT 1", "SHOW INDEX IN"):
        assert parse(other) is None, other
    st = parse("SHOW KEYS FROM v IN s WHERE Non_unique = 0")   # answered from a scratch view: no index
    assert st is not None and (st.names, st.select) == ([["s", "v"]], "SHOW INDEX FROM {} WHERE Non_unique = 0")
    for bad in ("DROP VIEW", "CREATE VIEW v", "CREATE VIEW v SELECT 1", "CREATE VIEW v () AS SELECT 1",
                "SHOW CREATE VIEW", "DROP VIEW a b"):
        with pytest.raises(ParseError):
            parse(bad)


def test_mysqldump_of_a_schema_with_a_view_loads_back_through_pydble(fresh_proxy):
    p = fresh_proxy()
    for sql in ("DROP TABLE IF EXISTS sharding_4_t1", "CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))",
                "INSERT INTO sharding_4_t1 VALUES (1,'a'),(2,'b'),(3,'c')",
                "CREATE VIEW dv AS SELECT id, name FROM sharding_4_t1 WHERE id > 1"):
        p.query(sql)
    login = ["--no-defaults", "-h127.0.0.1", f"-P{p.port}", "-utest", "-p111111"]
    # LOCK TABLES ... dv READ LOCAL locks the view's table; SHOW FIELDS FROM dv for its placeholder
    dump = subprocess.run([require_tool("mysqldump"), *login, "schema1", "sharding_4_t1", "dv"],
                          capture_output=True, text=True, timeout=60)
    assert dump.returncode == 0 and not dump.stderr, dump.stderr
    assert "CREATE VIEW `dv` AS SELECT id, name FROM sharding_4_t1 WHERE id > 1" in dump.stdout
    p.query("DROP VIEW dv")
    load = subprocess.run([require_tool("mysql"), *login, "schema1"], input=dump.stdout, capture_output=True,
                          text=True, timeout=60)
    assert load.returncode == 0, load.stderr
    assert p.query("SELECT name FROM dv ORDER BY id") == [("b",), ("c",)]


def test_a_kept_view_answers_as_mariadb_or_is_refused(proxy):
    """DATABASE() in a kept view is the session's schema (not the node's db); a view's SELECT holding a
    user variable or a placeholder is refused with MariaDB's 1351, however it arrives."""
    for sql in ("DROP VIEW IF EXISTS vdbq", "DROP TABLE IF EXISTS sharding_4_t1",
                "CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))",
                "INSERT INTO sharding_4_t1 VALUES (1,'a'),(2,'b'),(3,'c')",
                "CREATE VIEW vdbq AS SELECT id, DATABASE() AS d FROM sharding_4_t1"):
        proxy.query(sql)
    assert proxy.query("SELECT * FROM vdbq ORDER BY id") == [(1, "schema1"), (2, "schema1"), (3, "schema1")]
    c = proxy.connect()
    cur = c.cursor()
    assert _err(cur, "CREATE VIEW vvar AS SELECT id, @x AS x FROM sharding_4_t1")[0] == 1351
    assert _err(cur, "PREPARE s FROM 'CREATE VIEW vpar AS SELECT id FROM sharding_4_t1 WHERE id = ?'")[0] == 1351
    assert proxy.query("SHOW FULL TABLES LIKE 'vvar'") == [] and proxy.query("SHOW FULL TABLES LIKE 'vpar'") == []
    proxy.query("DROP VIEW vdbq")
    c.close()
