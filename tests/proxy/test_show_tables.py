"""SHOW TABLES / FULL TABLES / TABLE STATUS / OPEN TABLES / COLUMNS / INDEX through pydble answer as one
MariaDB holding the same tables: compared with a plain MariaDB database named like the logical schema
(column names, types and order; the rows), and a configured table not created yet is not listed."""

from __future__ import annotations

from typing import Any, Iterator

import pymysql
import pytest

from wire import drop_after

REF = "schema1"   # the reference database on a plain MariaDB (backend 2 holds no database of that name)
DDL = ("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20), k INT, KEY k_idx (k, name))",
       "CREATE TABLE test (id INT PRIMARY KEY, note TEXT)",                 # a global table
       "CREATE TABLE h9_plain (a INT, b VARCHAR(5) NOT NULL DEFAULT 'x', UNIQUE KEY ub (b))")  # default node


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    yield from drop_after(proxy, "sharding_4_t1", "test", "sharding_2_t1", "h9_plain")


@pytest.fixture(scope="module")
def both(proxy, backends) -> Iterator[tuple[Any, Any]]:
    """(a pydble session, a plain MariaDB session) on the same tables; sharding_2_t1 exists on neither."""
    for t in ("sharding_4_t1", "test", "sharding_2_t1", "h9_plain"):
        proxy.query(f"DROP TABLE IF EXISTS {t}")
    # what earlier modules left in schema1 on the shared backends would be listed by pydble only
    for name, kind in proxy.query("SHOW FULL TABLES", database="schema1"):
        proxy.query(f"DROP {'VIEW' if kind == 'VIEW' else 'TABLE'} IF EXISTS `{name}`", database="schema1")
    for ddl in DDL:
        proxy.query(ddl)
    ref_server = backends[1]
    ref_server.query(f"DROP DATABASE IF EXISTS {REF}")
    ref_server.query(f"CREATE DATABASE {REF}")
    ref_server.execute_many(DDL, REF)
    p, r = proxy.connect(database="schema1"), ref_server.connect(REF)
    for c in (p, r):
        with c.cursor() as cur:
            cur.execute("INSERT INTO sharding_4_t1 VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 2), (4, NULL, NULL)")
    try:
        yield p, r
    finally:
        p.close()
        r.close()
        ref_server.query(f"DROP DATABASE IF EXISTS {REF}")


def answer(conn: Any, sql: str) -> tuple[Any, ...]:
    """(error code) or (column names and types, rows)."""
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            desc = tuple(tuple(d) for d in cur.description or ())
            return desc, tuple(cur.fetchall())
    except pymysql.MySQLError as e:
        return (e.args[0],)


SAME = [
    "SHOW TABLES", "SHOW FULL TABLES", "SHOW TABLES LIKE 'shard%'", "SHOW TABLES FROM schema1",
    "SHOW FULL TABLES IN schema1 LIKE 't%'",
    "SHOW TABLES WHERE Tables_in_schema1 LIKE '%4%'",
    "SHOW FULL TABLES WHERE Table_type = 'BASE TABLE' AND Tables_in_schema1 <> 'test'",
    "SHOW TABLES WHERE no_such_column = 1", "SHOW TABLES WHERE Table_type = 'VIEW'",
    "SHOW FULL TABLES WHERE Table_type = 'view'", "SHOW TABLES IN schema1 WHERE Tables_in_schema1 = 'TEST'",
    "SHOW COLUMNS FROM sharding_4_t1", "SHOW FULL COLUMNS FROM sharding_4_t1 FROM schema1",
    "SHOW FIELDS IN schema1.sharding_4_t1 LIKE 'n%'", "SHOW COLUMNS FROM sharding_4_t1 WHERE `Key` = 'PRI'",
    "SHOW INDEX FROM sharding_4_t1", "SHOW KEYS FROM sharding_4_t1 FROM schema1",
    "SHOW INDEXES FROM schema1.sharding_4_t1 WHERE Key_name = 'k_idx'",
    "SHOW COLUMNS FROM sharding_2_t1", "SHOW INDEX FROM sharding_2_t1",
    "SHOW FULL COLUMNS FROM test", "SHOW INDEX FROM test", "SHOW COLUMNS FROM h9_plain", "SHOW INDEX FROM h9_plain",
    "SHOW FULL TABLES WHERE Tables_in_schema1 LIKE 'h9%'",
]


@pytest.mark.parametrize("sql", SAME)
def test_show_answers_as_one_mariadb(both, sql) -> None:
    p, r = both
    got, ref = answer(p, sql), answer(r, sql)
    if "INDEX" in sql or "KEYS" in sql:   # Cardinality is an estimate of each server's own statistics
        got, ref = _without(got, "Cardinality"), _without(ref, "Cardinality")
    assert got == ref


def _without(ans: tuple[Any, ...], col: str) -> tuple[Any, ...]:
    if len(ans) == 1:
        return ans
    names = [d[0] for d in ans[0]]
    i = names.index(col)
    return ans[0], tuple(row[:i] + row[i + 1:] for row in ans[1])


STATUS_KEEP = ("Name", "Engine", "Version", "Row_format", "Collation", "Create_options", "Comment", "Temporary")


@pytest.mark.parametrize("sql", ["SHOW TABLE STATUS", "SHOW TABLE STATUS FROM schema1 LIKE 'shard%'",
                                 "SHOW TABLE STATUS WHERE Name = 'test'",
                                 "SHOW TABLE STATUS IN schema1 WHERE Engine = 'InnoDB' AND Rows >= 0",
                                 "SHOW TABLE STATUS WHERE Create_time > '2000-01-01 00:00:00'",
                                 "SHOW TABLE STATUS WHERE nope = 1",
                                 "SHOW TABLE STATUS WHERE `Rows` >= 0 AND Auto_increment IS NULL"])
def test_show_table_status_answers_as_one_mariadb(both, sql) -> None:
    p, r = both
    got, ref = answer(p, sql), answer(r, sql)
    if len(ref) == 1:
        assert got == ref
        return
    assert got[0] == ref[0]   # every column, named and typed as MariaDB does
    keep = [i for i, d in enumerate(ref[0]) if d[0] in STATUS_KEEP]  # sizes and times are each server's own
    assert [[row[i] for i in keep] for row in got[1]] == [[row[i] for i in keep] for row in ref[1]]


@pytest.mark.parametrize("sql", ["SHOW OPEN TABLES FROM schema1", "SHOW OPEN TABLES FROM schema1 LIKE 'shard%'",
                                 "SHOW OPEN TABLES IN schema1 WHERE `Table` = 'test'",
                                 "SHOW OPEN TABLES WHERE `Database` = 'schema1' AND In_use = 0"])
def test_show_open_tables_answers_as_one_mariadb(both, sql) -> None:
    p, r = both
    for c in (p, r):   # both tables open in the table cache (on every node of pydble's)
        answer(c, "SELECT COUNT(*) FROM sharding_4_t1")
        answer(c, "SELECT COUNT(*) FROM test")
    got, ref = answer(p, sql), answer(r, sql)
    assert got[0] == ref[0]
    assert sorted(got[1]) == sorted(ref[1])
