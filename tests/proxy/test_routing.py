"""Routing and merging over real shards: where rows land, and that merged answers equal one server's.

Placement is checked by reading each shardingNode's database directly; merged reads are compared with
the same query on a table holding all the rows on one node.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Iterator

import pymysql
import pytest

from wire import NODES, drop_after, extended_config, hash_node, node_rows, start_proxy, stringhash_node

FOUR = ("dn1", "dn2", "dn3", "dn4")


@pytest.fixture(scope="module")
def rproxy(backends) -> Iterator[Any]:
    """A proxy with the §2 config plus a stringhash table, a second global table and co-sharded tables."""
    p = start_proxy(extended_config(backends, instance="pydble-routing"), "rproxy")
    try:
        yield p
    finally:
        p.cleanup()


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(rproxy) -> Iterator[None]:
    """Leave the shared backends without this module's tables."""
    yield from drop_after(rproxy, 'sharding_2_t1', 'h4_t', 'h4_u', 'h2_t', 'str_t', 'glob_t', 'rt_plain', 'rt_auto', 'm4_a', 'm4_b', 'm_all')


@pytest.fixture
def cur(rproxy) -> Iterator[Any]:
    conn = rproxy.connect()
    try:
        with conn.cursor() as c:
            yield c
    finally:
        conn.close()


def _recreate(cur: Any, table: str, ddl: str) -> None:
    cur.execute(f"DROP TABLE IF EXISTS {table}")
    cur.execute(f"CREATE TABLE {table} {ddl}")


def _on_node(backends, backend_rows, node: str, sql: str) -> list[tuple]:
    return node_rows(backends, backend_rows, node, sql)


# -- placement ----------------------------------------------------------------------------------

def test_hash_rows_land_on_the_node_the_function_says(cur, backends, backend_rows) -> None:
    _recreate(cur, "h4_t", "(id BIGINT PRIMARY KEY, v VARCHAR(20))")
    ids = list(range(0, 23)) + [-1, -2, -7, 1000003, 2**40 + 1]
    n = cur.execute("INSERT INTO h4_t (id, v) VALUES " + ", ".join(f"({i}, 'v{i}')" for i in ids))
    assert n == len(ids)  # one multi-row INSERT, split per node, affected rows summed
    for node in FOUR:
        got = sorted(r[0] for r in _on_node(backends, backend_rows, node, "SELECT id FROM h4_t"))
        assert got == sorted(i for i in ids if hash_node(i, FOUR) == node), node
    # each id is found through the proxy by key, from its node only
    for i in ids:
        cur.execute("SELECT v FROM h4_t WHERE id = %s", (i,))
        assert cur.fetchall() == ((f"v{i}",),)
    cur.execute("SELECT id FROM h4_t WHERE id IN (1, 2, 3, 1000003) ORDER BY id")
    assert cur.fetchall() == ((1,), (2,), (3,), (1000003,))


def test_two_node_hash_table(cur, backends, backend_rows) -> None:
    _recreate(cur, "sharding_2_t1", "(id INT PRIMARY KEY, name VARCHAR(20))")
    cur.execute("INSERT INTO sharding_2_t1 VALUES (1,'a'),(2,'b'),(3,'c'),(4,'d')")
    assert sorted(_on_node(backends, backend_rows, "dn1", "SELECT id FROM sharding_2_t1")) == [(2,), (4,)]
    assert sorted(_on_node(backends, backend_rows, "dn2", "SELECT id FROM sharding_2_t1")) == [(1,), (3,)]
    # dn3/dn4 are not nodes of this table: it does not exist there
    for node in ("dn3", "dn4"):
        with pytest.raises(pymysql.err.ProgrammingError):
            _on_node(backends, backend_rows, node, "SELECT 1 FROM sharding_2_t1")


def test_insert_without_column_list_and_by_set(cur, backends, backend_rows) -> None:
    _recreate(cur, "h4_t", "(id BIGINT PRIMARY KEY, v VARCHAR(20))")
    cur.execute("INSERT INTO h4_t VALUES (5, 'five'), (6, 'six')")
    cur.execute("INSERT INTO h4_t SET id = 7, v = 'seven'")
    assert _on_node(backends, backend_rows, "dn2", "SELECT id, v FROM h4_t") == [(5, "five")]
    assert _on_node(backends, backend_rows, "dn3", "SELECT id, v FROM h4_t") == [(6, "six")]
    assert _on_node(backends, backend_rows, "dn4", "SELECT id, v FROM h4_t") == [(7, "seven")]


def test_stringhash_rows_land_on_the_node_the_function_says(cur, backends, backend_rows) -> None:
    _recreate(cur, "str_t", "(name VARCHAR(40) PRIMARY KEY, n INT)")
    names = [f"user{i}" for i in range(40)] + ["a", "zz", "Hello, World", "x" * 30]
    cur.executemany("INSERT INTO str_t VALUES (%s, %s)", [(s, i) for i, s in enumerate(names)])
    placed = {node: sorted(r[0] for r in _on_node(backends, backend_rows, node, "SELECT name FROM str_t"))
              for node in FOUR}
    for node in FOUR:
        assert placed[node] == sorted(s for s in names if stringhash_node(s) == node), node
    assert sum(1 for v in placed.values() if v) >= 3  # the values really spread
    for i, s in enumerate(names):
        cur.execute("SELECT n FROM str_t WHERE name = %s", (s,))
        assert cur.fetchall() == ((i,),)
    cur.execute("SELECT COUNT(*) FROM str_t")
    assert cur.fetchone() == (len(names),)


def test_global_table_writes_everywhere_reads_one_copy(cur, backends, backend_rows) -> None:
    _recreate(cur, "glob_t", "(id INT PRIMARY KEY, v VARCHAR(20))")
    n = cur.execute("INSERT INTO glob_t VALUES (1,'a'),(2,'b'),(3,'c')")
    assert n == 3  # not 12: one logical table
    for node in FOUR:
        assert sorted(_on_node(backends, backend_rows, node, "SELECT id, v FROM glob_t")) == [
            (1, "a"), (2, "b"), (3, "c")], node
    assert cur.execute("UPDATE glob_t SET v = 'B' WHERE id = 2") == 1
    assert cur.execute("DELETE FROM glob_t WHERE id = 3") == 1
    for node in FOUR:
        assert sorted(_on_node(backends, backend_rows, node, "SELECT id, v FROM glob_t")) == [
            (1, "a"), (2, "B")], node
    cur.execute("SELECT COUNT(*), SUM(id) FROM glob_t")
    assert cur.fetchone() == (2, 3)  # one copy read, not the four summed
    cur.execute("SELECT v FROM glob_t ORDER BY id")
    assert cur.fetchall() == (("a",), ("B",))


def test_single_table_lives_on_its_node(rproxy, backends, backend_rows) -> None:
    conn = rproxy.connect(database="schema2")
    try:
        with conn.cursor() as c:
            _recreate(c, "sing", "(id INT PRIMARY KEY, v INT)")
            c.execute("INSERT INTO sing VALUES (1, 10), (2, 20), (3, 30)")
            c.execute("SELECT SUM(v), COUNT(*) FROM sing WHERE id >= 2")
            assert c.fetchone() == (Decimal(50), 2)
            c.execute("SELECT id FROM sing ORDER BY v DESC LIMIT 1")
            assert c.fetchall() == ((3,),)
    finally:
        conn.close()
    assert sorted(_on_node(backends, backend_rows, "dn1", "SELECT id FROM sing")) == [(1,), (2,), (3,)]
    with pytest.raises(pymysql.err.ProgrammingError):
        _on_node(backends, backend_rows, "dn2", "SELECT 1 FROM sing")


def test_unconfigured_tables_live_on_the_default_node(cur, backends, backend_rows) -> None:
    _recreate(cur, "rt_plain", "(id INT PRIMARY KEY, v INT)")
    cur.execute("INSERT INTO rt_plain VALUES (1, 1), (2, 4), (3, 9)")
    assert sorted(_on_node(backends, backend_rows, "dn5", "SELECT id, v FROM rt_plain")) == [
        (1, 1), (2, 4), (3, 9)]
    for node in FOUR:
        with pytest.raises(pymysql.err.ProgrammingError):
            _on_node(backends, backend_rows, node, "SELECT 1 FROM rt_plain")
    cur.execute("SELECT v FROM rt_plain WHERE id = 2")
    assert cur.fetchall() == ((4,),)
    cur.execute("SELECT schema1.rt_plain.v FROM schema1.rt_plain WHERE schema1.rt_plain.id = 3")
    assert cur.fetchall() == ((9,),)


# -- scatter-gather against one server holding every row -------------------------------------------

ROWS = [(i, f"g{i % 5}" if i % 7 else None, (i * 37) % 101, ["apple", "Banana", "cherry", "apple", "Date"][i % 5],
         Decimal(i * 13 % 17) / 4) for i in range(1, 61)]


@pytest.fixture(scope="module")
def merged(rproxy) -> Iterator[Any]:
    """m4_a and m4_b sharded over four nodes, and m_all (on the default node) with the same rows."""
    conn = rproxy.connect()
    try:
        with conn.cursor() as c:
            ddl = "(id INT PRIMARY KEY, grp VARCHAR(10), val INT, name VARCHAR(20), amount DECIMAL(10,2))"
            for t in ("m4_a", "m4_b", "m_all"):
                _recreate(c, t, ddl)
                c.executemany(f"INSERT INTO {t} VALUES (%s, %s, %s, %s, %s)", ROWS)
            c.execute("INSERT INTO m_all VALUES (1000, NULL, NULL, NULL, NULL)")
            c.execute("INSERT INTO m4_a VALUES (1000, NULL, NULL, NULL, NULL)")
        yield conn
    finally:
        conn.close()


QUERIES = [
    "SELECT id, val FROM {t} ORDER BY val, id",
    "SELECT id, val FROM {t} ORDER BY val DESC, id DESC",
    "SELECT id FROM {t} ORDER BY id LIMIT 7",
    "SELECT id FROM {t} ORDER BY id DESC LIMIT 5 OFFSET 3",
    "SELECT id FROM {t} ORDER BY id LIMIT 50, 5",
    "SELECT id, name FROM {t} ORDER BY name, id",
    "SELECT id, grp FROM {t} ORDER BY grp, id",
    "SELECT COUNT(*) FROM {t}",
    "SELECT COUNT(*), SUM(val), MIN(val), MAX(val), AVG(val) FROM {t}",
    "SELECT COUNT(grp), SUM(amount), AVG(amount), MIN(name), MAX(name) FROM {t}",
    "SELECT grp, COUNT(*), SUM(val), MIN(val), MAX(val), AVG(val) FROM {t} GROUP BY grp ORDER BY grp",
    "SELECT grp, COUNT(*) AS c FROM {t} GROUP BY grp ORDER BY c DESC, grp",
    "SELECT grp, SUM(val) FROM {t} WHERE id > 10 GROUP BY grp HAVING SUM(val) > 300 ORDER BY grp",
    "SELECT name, AVG(amount) FROM {t} GROUP BY name ORDER BY name",
    "SELECT DISTINCT grp FROM {t} ORDER BY grp",
    "SELECT DISTINCT name FROM {t} ORDER BY name",
    "SELECT DISTINCT grp, name FROM {t} ORDER BY grp, name",
    "SELECT COUNT(*) FROM {t} WHERE val BETWEEN 20 AND 60",
    "SELECT MAX(id) FROM {t} WHERE id < 0",
    "SELECT COUNT(*), SUM(val) FROM {t} WHERE id < 0",
    "SELECT id FROM {t} WHERE id IN (3, 4, 5, 6, 77) ORDER BY id",
    "SELECT grp, MAX(amount) FROM {t} GROUP BY grp ORDER BY grp LIMIT 2",
    "SELECT id FROM {t} ORDER BY val - 50, id",
    "SELECT id FROM {t} ORDER BY amount DESC, id LIMIT 10",
    "SELECT id, val FROM {t} ORDER BY 2 DESC, 1 LIMIT 8",
    "SELECT id AS k, val AS w FROM {t} ORDER BY w, k",
    "SELECT id FROM {t} ORDER BY val, id",
    "SELECT COUNT(DISTINCT grp), COUNT(DISTINCT name) FROM {t}",
    "SELECT MIN(grp), MAX(grp), MIN(amount), MAX(amount) FROM {t}",
    "SELECT id - 100 AS neg FROM {t} ORDER BY neg LIMIT 15",
    "SELECT grp, COUNT(*) FROM {t} GROUP BY grp ORDER BY grp DESC LIMIT 2 OFFSET 1",
    "SELECT UPPER(name) AS u, COUNT(*) FROM {t} GROUP BY u ORDER BY u",
    "SELECT SUM(val) FROM {t} WHERE grp IS NULL",
]


@pytest.mark.parametrize("query", QUERIES)
def test_merged_reads_equal_one_server(merged, query) -> None:
    with merged.cursor() as c:
        c.execute(query.format(t="m4_a"))
        sharded = c.fetchall()
        c.execute(query.format(t="m_all"))
        single = c.fetchall()
    assert sharded == single


def test_group_by_without_order_by_has_the_same_groups(merged) -> None:
    with merged.cursor() as c:
        c.execute("SELECT grp, COUNT(*), SUM(val) FROM m4_a GROUP BY grp")
        sharded = c.fetchall()
        c.execute("SELECT grp, COUNT(*), SUM(val) FROM m_all GROUP BY grp")
        single = c.fetchall()
    assert sorted(sharded, key=repr) == sorted(single, key=repr)
    assert len(sharded) == len({r[0] for r in sharded})


def test_unordered_limit_and_plain_scatter(merged) -> None:
    with merged.cursor() as c:
        c.execute("SELECT id FROM m4_a LIMIT 9")
        assert len(c.fetchall()) == 9
        c.execute("SELECT id, val FROM m4_a")
        rows = c.fetchall()
        c.execute("SELECT id, val FROM m_all")
        assert sorted(rows) == sorted(c.fetchall())


def test_merged_column_metadata_matches(merged) -> None:
    with merged.cursor() as c:
        c.execute("SELECT id, grp, amount, COUNT(*) AS n FROM m4_a GROUP BY id, grp, amount ORDER BY id LIMIT 1")
        sharded = [(d[0], d[1]) for d in c.description]
        c.execute("SELECT id, grp, amount, COUNT(*) AS n FROM m_all GROUP BY id, grp, amount ORDER BY id LIMIT 1")
        single = [(d[0], d[1]) for d in c.description]
    assert sharded == single


def test_co_sharded_join_and_join_with_global(merged) -> None:
    with merged.cursor() as c:
        c.execute("SELECT a.id, b.val FROM m4_a a JOIN m4_b b ON a.id = b.id WHERE a.val > 50 ORDER BY a.id")
        joined = c.fetchall()
        c.execute("SELECT id, val FROM m_all WHERE val > 50 ORDER BY id")
        assert joined == c.fetchall()
        _recreate(c, "glob_t", "(g VARCHAR(10) PRIMARY KEY, label VARCHAR(20))")
        c.execute("INSERT INTO glob_t VALUES ('g1','one'),('g2','two')")
        c.execute("SELECT label, COUNT(*) FROM m4_a JOIN glob_t ON m4_a.grp = glob_t.g GROUP BY label ORDER BY label")
        rows = c.fetchall()
        c.execute("SELECT COUNT(*) FROM m_all WHERE grp = 'g1'")
        (g1,) = c.fetchone()
        assert rows[0] == ("one", g1)


def test_cross_node_join_is_refused_with_a_reason(cur) -> None:
    """What pydble cannot answer exactly across nodes, even over copies of the rows, is refused with a
    sentence (every table exists: a missing one is 1146 first, as on MySQL)."""
    for table in ("h4_t", "h4_u"):
        cur.execute(f"CREATE TABLE IF NOT EXISTS {table} (id BIGINT PRIMARY KEY, v VARCHAR(20))")
    for sql in ("SELECT COUNT(*) FROM h4_t a JOIN h4_u b ON a.id < b.id + @x",   # a user variable over copies
                "SELECT * FROM h4_t a JOIN h4_u b ON a.id < b.id FOR UPDATE",
                "SELECT * FROM h4_t WHERE id IN (SELECT id FROM h4_u) INTO OUTFILE '/tmp/x'"):
        with pytest.raises(pymysql.err.MySQLError) as ei:
            cur.execute(sql)
        code, msg = ei.value.args
        assert code == 1235, (sql, msg)
        assert len(msg.split()) >= 6, msg  # a sentence, not a bare code
    cur.execute("SELECT 1")  # the session goes on
    assert cur.fetchone() == (1,)


# -- writes by key and to all -------------------------------------------------------------------

def test_update_and_delete_by_key_and_on_all_nodes(cur, backends, backend_rows) -> None:
    _recreate(cur, "h4_t", "(id INT PRIMARY KEY, v INT)")
    cur.execute("INSERT INTO h4_t VALUES " + ", ".join(f"({i}, 0)" for i in range(1, 13)))
    assert cur.execute("UPDATE h4_t SET v = 1 WHERE id = 6") == 1
    assert _on_node(backends, backend_rows, "dn3", "SELECT id FROM h4_t WHERE v = 1") == [(6,)]
    assert cur.execute("UPDATE h4_t SET v = 2 WHERE id IN (1, 2)") == 2
    assert cur.execute("UPDATE h4_t SET v = v + 10 WHERE v = 0") == 9  # no key: every node
    for node in FOUR:
        vals = sorted(r[0] for r in _on_node(backends, backend_rows, node, "SELECT v FROM h4_t"))
        assert all(v in (1, 2, 10) for v in vals) and len(vals) == 3, (node, vals)
    assert cur.execute("DELETE FROM h4_t WHERE id = 12") == 1
    assert _on_node(backends, backend_rows, "dn1", "SELECT id FROM h4_t ORDER BY id") == [(4,), (8,)]
    assert cur.execute("DELETE FROM h4_t WHERE v = 10") == 8
    cur.execute("SELECT id, v FROM h4_t ORDER BY id")
    assert cur.fetchall() == ((1, 2), (2, 2), (6, 1))
    with pytest.raises(pymysql.err.MySQLError) as ei:
        cur.execute("UPDATE h4_t SET id = 5 WHERE id = 1")  # would move the row to another node
    assert ei.value.args[0] in (1235, 1064)


def test_insert_on_duplicate_key_and_replace_by_key(cur, backends, backend_rows) -> None:
    _recreate(cur, "h4_t", "(id INT PRIMARY KEY, v INT)")
    cur.execute("INSERT INTO h4_t VALUES (1, 1), (2, 2)")
    cur.execute("INSERT INTO h4_t VALUES (1, 5), (3, 3) ON DUPLICATE KEY UPDATE v = v + 100")
    cur.execute("REPLACE INTO h4_t VALUES (2, 20)")
    cur.execute("SELECT id, v FROM h4_t ORDER BY id")
    assert cur.fetchall() == ((1, 101), (2, 20), (3, 3))
    assert _on_node(backends, backend_rows, "dn2", "SELECT id, v FROM h4_t") == [(1, 101)]


def test_duplicate_key_error_passes_through(cur) -> None:
    _recreate(cur, "h4_t", "(id INT PRIMARY KEY, v INT)")
    cur.execute("INSERT INTO h4_t VALUES (1, 1)")
    with pytest.raises(pymysql.err.IntegrityError) as ei:
        cur.execute("INSERT INTO h4_t VALUES (1, 2)")
    assert ei.value.args[0] == 1062 and "Duplicate entry '1'" in ei.value.args[1]


def test_auto_increment_and_last_insert_id_on_a_default_node_table(cur) -> None:
    _recreate(cur, "rt_auto", "(id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
    cur.execute("INSERT INTO rt_auto (v) VALUES (1)")
    cur.execute("INSERT INTO rt_auto (v) VALUES (2)")
    assert cur.lastrowid == 2
    cur.execute("SELECT LAST_INSERT_ID()")
    assert cur.fetchone() == (2,)


# -- the shardingNode hint ----------------------------------------------------------------------

def test_sharding_node_hint_sends_sql_as_is(cur, backends, backend_rows) -> None:
    _recreate(cur, "h4_t", "(id INT PRIMARY KEY, v INT)")
    cur.execute("INSERT INTO h4_t VALUES " + ", ".join(f"({i}, {i})" for i in range(1, 9)))
    cur.execute("/*!pydble:shardingNode=dn3*/ SELECT id FROM h4_t ORDER BY id")
    assert cur.fetchall() == ((2,), (6,))
    cur.execute("/*!dble:shardingNode=dn1*/ SELECT COUNT(*), DATABASE() FROM h4_t")
    assert cur.fetchone()[0] == 2
    # a write by hint lands where the hint says, whatever the function would say
    cur.execute("/*!pydble:shardingNode=dn4*/ INSERT INTO h4_t VALUES (100, 0)")
    assert (100,) in _on_node(backends, backend_rows, "dn4", "SELECT id FROM h4_t")
    with pytest.raises(pymysql.err.MySQLError) as ei:
        cur.execute("/*!pydble:shardingNode=dn99*/ SELECT 1")
    assert "dn99" in ei.value.args[1]


def test_schema_qualified_names_reach_the_physical_database(cur, backends, backend_rows) -> None:
    _recreate(cur, "schema1.h4_t", "(id INT PRIMARY KEY, v INT)")
    cur.execute("INSERT INTO schema1.h4_t (id, v) VALUES (3, 9)")
    cur.execute("SELECT schema1.h4_t.v FROM schema1.h4_t WHERE schema1.h4_t.id = 3")
    assert cur.fetchall() == ((9,),)
    assert _on_node(backends, backend_rows, "dn4", "SELECT id FROM h4_t") == [(3,)]
    assert NODES["dn4"] == (1, "db2")
