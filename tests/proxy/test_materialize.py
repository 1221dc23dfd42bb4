"""Cross-node reads answered over temporary copies of their rows (proxy/exec/materialize.py): window
functions, JOINs of three tables, non-equi joins and subqueries over tables on different nodes answer
exactly as one MariaDB holding all the rows; what would be evaluated differently is refused with 1235."""

from __future__ import annotations

from typing import Any, Iterator

import pymysql
import pytest

from harness import ProxyProcess
from same_answer import answer, assert_same_answer, proxy_and_reference

REF_DB = "mtref"
TABLES = {
    "mt_a": {"type": "sharding", "nodes": ["dn1", "dn2"], "function": "hash-two", "column": "id"},
    "mt_b": {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "hash-four", "column": "id"},
    "mt_s": {"type": "single", "nodes": ["dn3"]},
    "mt_g": {"type": "global", "nodes": ["dn1", "dn2", "dn3", "dn4"]},
    "mt_big": {"type": "sharding", "nodes": ["dn1", "dn2"], "function": "hash-two", "column": "id"},
}
DDL = ("CREATE TABLE {t} (id INT NOT NULL PRIMARY KEY, k INT NULL, "
       "s VARCHAR(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NULL, "
       "b VARCHAR(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL, m DECIMAL(6,2) NULL, d DATE NULL, "
       "dt DATETIME(3) NULL, ts TIMESTAMP(6) NULL DEFAULT NULL, f FLOAT NULL, db DOUBLE NULL, bt BIT(5) NULL, "
       "e ENUM('x','y z') NULL, bl BLOB NULL, j JSON NULL, tm TIME(2) NULL, g INT AS (k * 2) VIRTUAL)")
COLS = "id, k, s, b, m, d, dt, ts, f, db, bt, e, bl, j, tm"
ROWS = {
    "mt_a": ["(1, 1, 'a', 'a', 1.50, '2024-01-01', '2024-01-01 10:00:00.123', '2024-03-31 02:30:00.5', 0.1, "
             "0.1, b'10101', 'x', X'00FF', '{\"a\": 1}', '-838:59:59.99')",
             "(2, 2, 'A ', 'A', 2.00, NULL, NULL, NULL, 3.4028e38, 1e308, b'0', 'y z', '', '[]', '12:00')",
             "(3, NULL, 'b', 'b', NULL, '2024-02-29', '1999-12-31 23:59:59.999', '1970-01-01 01:00:01', -1.5, "
             "2.2250738585072014e-308, NULL, NULL, NULL, NULL, NULL)",
             "(4, 1, 'é', 'B ', 7.00, '2024-01-01', NULL, '2038-01-19 03:14:07.999999', 1.17549e-38, "
             "0.30000000000000004, b'11111', 'x', X'C3A9', '{\"b\": \"é\"}', '00:00:00.01')",
             "(5, 9, NULL, NULL, 1.5, '2023-12-31', '2024-01-01 00:00:00', NULL, NULL, -0.0, b'1', 'y z', NULL, "
             "'null', '-00:00:01')"],
    "mt_b": ["(10, 1, 'A', 'A', 1.5, '2024-01-01', NULL, NULL, 1, 1, NULL, 'x', NULL, NULL, NULL)",
             "(11, 1, 'a', 'a', 2, NULL, NULL, NULL, 2, 2, NULL, NULL, NULL, NULL, NULL)",
             "(12, NULL, 'E', 'B', 7, '2024-02-29', NULL, NULL, NULL, NULL, NULL, 'y z', NULL, NULL, NULL)",
             "(13, 2, 'zed', NULL, -1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
             "(14, 3, NULL, 'b', NULL, '2023-12-31', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
             "(2, 2, 'b ', 'x', 0, '2024-01-01', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"],
    "mt_s": ["(1, 2, 'Zed', 'Zed', 1.50, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
             "(2, 1, 'a', 'a', 2.00, '2024-01-01', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
             "(7, NULL, 'E', 'A', 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"],
    "mt_g": ["(1, 1, 'g', 'g', 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
             "(2, 3, 'G', 'h', 2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"],
}
# (SQL, ORDER BY total?) compared with the reference
SAME = [
    # window functions over rows on several nodes
    ("SELECT id, k, ROW_NUMBER() OVER (PARTITION BY k ORDER BY id) AS rn, RANK() OVER (ORDER BY k) AS r, "
     "SUM(m) OVER (PARTITION BY k ORDER BY id) AS sm FROM mt_b ORDER BY id", True),
    ("SELECT id, LAG(s) OVER (ORDER BY id) AS p, COUNT(*) OVER () AS n FROM mt_a WHERE id > 1 ORDER BY id", True),
    ("SELECT a.id, DENSE_RANK() OVER (ORDER BY b.k DESC) AS dr FROM mt_a a JOIN mt_b b ON a.k = b.k "
     "ORDER BY a.id, dr", False),
    # JOINs of three tables, non-equi and outer joins, aggregates over a join
    ("SELECT a.id, b.id, s.id FROM mt_a a JOIN mt_b b ON a.k = b.k JOIN mt_s s ON s.k = b.k", False),
    ("SELECT a.id, b.id, g.s FROM mt_a a LEFT JOIN mt_b b ON a.k = b.k LEFT JOIN mt_g g ON g.k = a.k "
     "ORDER BY a.id, b.id", True),
    ("SELECT a.id, b.id FROM mt_a a LEFT JOIN mt_b b ON a.k < b.k AND b.m > 0 ORDER BY a.id, b.id", True),
    ("SELECT a.id, b.id FROM mt_a a RIGHT JOIN mt_b b ON a.s = b.s", False),
    ("SELECT COUNT(*), SUM(a.m + b.m), MAX(b.s) FROM mt_a a JOIN mt_b b ON a.k <= b.k", True),
    ("SELECT a.k, COUNT(*) FROM mt_a a JOIN mt_s s USING (k) GROUP BY a.k ORDER BY a.k", True),
    ("SELECT a.id, s.id FROM mt_a a, mt_s s WHERE a.k = s.k AND a.id > 1 AND s.m >= 1", False),
    # subqueries across nodes, correlated or not
    ("SELECT id FROM mt_a WHERE k IN (SELECT k FROM mt_s)", False),
    ("SELECT id FROM mt_a a WHERE NOT EXISTS (SELECT 1 FROM mt_b b WHERE b.k = a.k)", False),
    ("SELECT id, (SELECT MAX(b.m) FROM mt_b b WHERE b.k = a.k) AS mx FROM mt_a a ORDER BY id", True),
    ("SELECT id FROM mt_s WHERE m > (SELECT AVG(m) FROM mt_b)", False),
    # an unaliased item is named by its text, which the copies' qualified table names must not change
    ("SELECT DISTINCT id, (SELECT  MAX(b.m) FROM mt_b b /* c */ WHERE b.k = a.k), COALESCE((SELECT MIN(s.id) "
     "FROM mt_s AS s WHERE s.k = a.k), 0) + 1, (SELECT 1 FROM mt_s LIMIT 1) one FROM mt_a a ORDER BY id", True),
    ("SELECT q.k, COUNT(*) FROM (SELECT k FROM mt_a UNION ALL SELECT k FROM mt_s) q GROUP BY q.k ORDER BY q.k",
     True),
    # found by the differential test: the router scattered this to mt_b's nodes, each summing every row of
    # the global mt_g (its rows come from mt_g only; mt_b is read in a subquery)
    ("SELECT q.k, SUM(q.n), MAX(q.s) FROM (SELECT x.k, x.id AS n, x.s FROM mt_g x WHERE x.k IN (SELECT k FROM mt_b)) q "
     "GROUP BY q.k ORDER BY q.k", True),
    ("WITH c AS (SELECT k, COUNT(*) AS n FROM mt_b GROUP BY k) SELECT a.id, c.n FROM mt_a a JOIN c ON c.k = a.k "
     "ORDER BY a.id", True),
    # every value type round-trips exactly, metadata as MariaDB sends it
    ("SELECT a.*, s.id FROM mt_a a JOIN mt_s s ON a.k < s.k ORDER BY a.id, s.id", True),
    ("SELECT a.ts, a.f, a.db, a.bt, a.e, a.bl, a.j, a.tm, a.g, b.id FROM mt_a a JOIN mt_b b ON a.e = b.e "
     "ORDER BY a.id, b.id", True),
    ("SELECT a.id, b.id FROM mt_a a JOIN mt_b b ON a.s = b.s WHERE a.s = 'a'", False),   # general_ci
    ("SELECT id, LAST_VALUE(k) OVER (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS l, "
     "UNIX_TIMESTAMP(a.dt) AS u FROM mt_a a WHERE k IN (SELECT k FROM mt_s) ORDER BY id", True),
]
REFUSED = [
    "SELECT a.id, NOW() FROM mt_a a JOIN mt_b b ON a.k < b.k",
    "SELECT id, RAND() FROM mt_b WHERE k IN (SELECT k FROM mt_s)",
    "SELECT a.id FROM mt_a a JOIN mt_b b ON a.k < b.k WHERE a.id > @x",
    "SELECT a.id FROM mt_a a JOIN mt_b b ON a.k < b.k FOR UPDATE",
    "SELECT a.id FROM mt_a a JOIN mt_b b ON a.k < b.k LOCK IN SHARE MODE",
    "SELECT SQL_CALC_FOUND_ROWS a.id FROM mt_a a JOIN mt_b b ON a.k < b.k",
    "SELECT id, UUID() FROM mt_a WHERE k IN (SELECT k FROM mt_s)",
]


@pytest.fixture(scope="module")
def both(backends: list[Any]) -> Iterator[tuple[Any, Any, ProxyProcess]]:
    """(pydble connection, reference connection, proxy), the tables filled alike on both."""
    limited = {"name": "limited", "password": "pw", "schemas": ["schema1"], "privileges": {"schema1.mt_s": "1101"}}
    with proxy_and_reference(backends, "mt", REF_DB, TABLES, [limited], merge_memory_mb=1) as (px, ref, p):
        for conn in (px, ref):
            with conn.cursor() as cur:
                cur.execute("SET time_zone = '+01:00'")
                for t in TABLES:
                    cur.execute(f"DROP TABLE IF EXISTS {t}")
                    cur.execute(DDL.format(t=t))
                for t, rows in ROWS.items():
                    cur.execute(f"INSERT INTO {t} ({COLS}) VALUES {', '.join(rows)}")
                cur.execute("SET time_zone = DEFAULT")
            conn.commit()
        yield px, ref, p


@pytest.mark.parametrize("sql,ordered", SAME)
def test_a_cross_node_read_answers_as_one_mariadb(both: tuple[Any, Any, Any], sql: str, ordered: bool) -> None:
    px, ref, _ = both
    want = assert_same_answer(px, ref, sql, ordered)
    assert want


@pytest.mark.parametrize("sql", REFUSED)
def test_what_the_scratch_connection_would_evaluate_differently_is_refused(both: tuple[Any, Any, Any],
                                                                           sql: str) -> None:
    px, _, _ = both
    with pytest.raises(pymysql.err.MySQLError) as e:
        answer(px, sql)
    assert e.value.args[0] == 1235, e.value.args


def test_timestamps_in_the_sessions_time_zone(both: tuple[Any, Any, Any]) -> None:
    """TIMESTAMPs are copied as instants: read back in the session's zone as MariaDB shows them."""
    px, ref, _ = both
    sql = "SELECT a.id, a.ts, b.id FROM mt_a a JOIN mt_b b ON a.k < b.k ORDER BY a.id, b.id"
    for zone in ("'+05:30'", "'-07:00'"):
        for conn in (px, ref):
            with conn.cursor() as cur:
                cur.execute(f"SET time_zone = {zone}")
        assert answer(px, sql) == answer(ref, sql)
    for conn in (px, ref):
        with conn.cursor() as cur:
            cur.execute("SET time_zone = DEFAULT")


def test_column_metadata_names_the_logical_schema_and_tables(both: tuple[Any, Any, Any]) -> None:
    px, _, _ = both
    with px.cursor() as cur:
        cur.execute("SELECT a.id AS x, b.s FROM mt_a a JOIN mt_b b ON a.k < b.k LIMIT 1")
        fields = cur._result.fields
    assert [(f.db, f.table_name, f.org_table, f.name, f.org_name) for f in fields] == [
        (b"schema1", "a", "mt_a", "x", "id"), (b"schema1", "b", "mt_b", "s", "s")]


def test_an_error_of_the_statement_is_mariadbs_and_leaves_nothing_behind(both: tuple[Any, Any, Any]) -> None:
    px, ref, _ = both
    sql = "SELECT id, (SELECT b.id FROM mt_b b WHERE b.k = a.k) FROM mt_a a"   # several rows: 1242
    for _ in range(3):   # the same temporary tables again on the same pooled connection
        for conn in (px, ref):
            with pytest.raises(pymysql.err.MySQLError) as e:
                answer(conn, sql)
            assert e.value.args[0] == 1242
        assert answer(px, SAME[0][0]) == answer(ref, SAME[0][0])


def test_a_transaction_reads_its_own_writes(both: tuple[Any, Any, Any]) -> None:
    px, _, _ = both
    sql = "SELECT a.id FROM mt_a a WHERE a.k IN (SELECT k FROM mt_s WHERE id > 50) ORDER BY a.id"
    with px.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("INSERT INTO mt_s (id, k) VALUES (60, 1)")   # mt_s on dn3; mt_a on dn1, dn2
        cur.execute(sql)
        assert cur.fetchall() == ((1,), (4,))
        cur.execute("ROLLBACK")
        cur.execute(sql)
        assert cur.fetchall() == ()


def test_a_user_without_select_on_one_table_is_refused(both: tuple[Any, Any, ProxyProcess]) -> None:
    _, _, p = both
    conn = p.connect(user="limited", password="pw")
    try:
        for sql in ("SELECT a.id FROM mt_a a JOIN mt_b b ON a.k < b.k JOIN mt_s s ON s.k = a.k",
                    "SELECT id FROM mt_a WHERE k IN (SELECT k FROM mt_s)",
                    "SELECT id, ROW_NUMBER() OVER (ORDER BY id) FROM mt_a WHERE EXISTS (SELECT 1 FROM mt_s)"):
            with pytest.raises(pymysql.err.MySQLError) as e:
                answer(conn, sql)
            assert e.value.args[0] == 1142 and "mt_s" in e.value.args[1], e.value.args
        # the tables it may read still answer
        got, _ = answer(conn, "SELECT id, ROW_NUMBER() OVER (ORDER BY id) FROM mt_a")
        assert len(got) == 5
    finally:
        conn.close()


def test_past_the_memory_budget_is_refused_clearly(both: tuple[Any, Any, Any]) -> None:
    px, _, _ = both
    with px.cursor() as cur:
        cur.execute("DELETE FROM mt_big")
        for start in range(0, 3000, 500):
            cur.execute("INSERT INTO mt_big (id, k, s, bl) VALUES "
                        + ", ".join(f"({i}, {i % 7}, 'x', REPEAT('z', 600))" for i in range(start, start + 500)))
        cur.execute("SELECT id, ROW_NUMBER() OVER (ORDER BY k, id) FROM mt_big WHERE id < 20")  # pushed down
        assert len(cur.fetchall()) == 20
        with pytest.raises(pymysql.err.OperationalError) as e:
            cur.execute("SELECT id, ROW_NUMBER() OVER (ORDER BY k, id) FROM mt_big")   # ~2 MB of rows
        assert e.value.args[0] == 1038 and "merge_memory_mb" in e.value.args[1], e.value.args
        cur.execute("SELECT 1")
        assert cur.fetchall() == ((1,),)


def test_a_view_on_a_node_is_read_as_its_select(both: tuple[Any, Any, Any]) -> None:
    """mt_sv lives on mt_s's node (pushed down); joined with tables elsewhere it is read as its SELECT."""
    px, ref, _ = both
    for conn in (px, ref):
        with conn.cursor() as cur:
            cur.execute("CREATE OR REPLACE VIEW mt_sv AS SELECT id, k, s FROM mt_s WHERE k IS NOT NULL")
    try:
        for sql in ("SELECT a.id, v.id, v.s FROM mt_a a JOIN mt_sv v ON a.k < v.k ORDER BY a.id, v.id",
                    "SELECT id FROM mt_b WHERE k IN (SELECT k FROM mt_sv) ORDER BY id"):
            assert answer(px, sql) == answer(ref, sql)
    finally:
        for conn in (px, ref):
            with conn.cursor() as cur:
                cur.execute("DROP VIEW IF EXISTS mt_sv")


def test_the_temporary_twin_keeps_the_columns_and_drops_what_temporary_tables_cannot_have() -> None:
    from proxy.exec.materialize import temporary_definition
    create = ("CREATE TABLE `t``x` (\n  `id` int(11) NOT NULL,\n  `p` int(11) DEFAULT NULL,\n"
              "  `s` varchar(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL,\n"
              "  `ts` timestamp(3) NULL DEFAULT NULL,\n  `g` int(11) GENERATED ALWAYS AS (`p` + 1) VIRTUAL,\n"
              "  PRIMARY KEY (`id`),\n  KEY `p` (`p`),\n  FULLTEXT KEY `ft` (`s`),\n"
              "  CONSTRAINT `fk` FOREIGN KEY (`p`) REFERENCES `parent` (`id`),\n"
              "  CONSTRAINT `c` CHECK (`p` > 0)\n) ENGINE=InnoDB DEFAULT CHARSET=latin1 COLLATE=latin1_swedish_ci\n"
              " PARTITION BY HASH (`id`)\nPARTITIONS 4")
    name, text, columns = temporary_definition("schema1", create)
    assert name == "t`x"
    assert text.startswith("CREATE TEMPORARY TABLE `schema1`.`t``x` (\n  `id` int(11) NOT NULL,")
    assert "FOREIGN KEY" not in text and "FULLTEXT" not in text and "PARTITION" not in text
    assert "CHECK (`p` > 0)" in text and "KEY `p` (`p`)" in text and "GENERATED ALWAYS" in text
    assert text.endswith(") ENGINE=InnoDB DEFAULT CHARSET=latin1 COLLATE=latin1_swedish_ci")
    assert [(c.name, c.kind) for c in columns] == [("id", "num"), ("p", "num"), ("s", "bytes"), ("ts", "ts")]

