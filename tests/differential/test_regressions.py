"""Every difference the differential test found, as the smallest statement: what one MariaDB holding
all the rows answers, and what pydble must answer (the same, or a 1235 refusal saying why).

The table is sharded over four nodes by id (id % 4), one row per node and value, so each statement
has to merge values that no single node compares.
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any, Iterator

import pymysql
import pytest

from harness import ProxyProcess, free_port, proxy_config

NODES = ["dn1", "dn2", "dn3", "dn4"]
REF_DB = "regref"
DDL = ("CREATE TABLE rg (id INT PRIMARY KEY, "
       "b VARCHAR(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, "
       "u VARCHAR(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci, "
       "s VARCHAR(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci)")
ROWS = ("(1, 'a', 'ss', 'a'), (2, 'A', 'ß', 'A'), (3, 'x y', 's', 'b'), (4, 'Zed', 'b', 'B '), "
        "(5, 'b', 'a', 'x'), (6, 'B', 'A', 'Zed')")


@pytest.fixture(scope="module")
def both(backends: list[Any]) -> Iterator[tuple[Any, Any]]:
    """(pydble connection, reference connection), both holding ROWS in table rg."""
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-reg"))
    for t in ("rg", "rgj"):
        cfg["schemas"]["schema1"]["tables"][t] = {"type": "sharding", "nodes": NODES,
                                                  "function": "hash-four", "column": "id"}
    backends[0].create_databases(REF_DB)
    p = ProxyProcess(cfg, name="proxy-reg", release_ports=True)
    try:
        p.start()
        px, ref = p.connect(), backends[0].connect(REF_DB)
        for conn in (px, ref):
            with conn.cursor() as cur:
                cur.execute("DROP TABLE IF EXISTS rg")
                cur.execute(DDL)
                cur.execute(f"INSERT INTO rg VALUES {ROWS}")
                cur.execute("DROP TABLE IF EXISTS rgj")
                cur.execute("CREATE TABLE rgj (id INT PRIMARY KEY, j JSON)")
                cur.execute("""INSERT INTO rgj VALUES (1, '{"a": 1}'), (2, '{"a": 1}'), (3, '[2]')""")
        yield px, ref
        px.close()
        ref.close()
    finally:
        p.cleanup()


def rows(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return [tuple(r) for r in cur.fetchall()]


def same(both: tuple[Any, Any], sql: str, expected: list[tuple[Any, ...]]) -> None:
    """MariaDB answers `expected`, and pydble answers exactly that."""
    px, ref = both
    assert rows(ref, sql) == expected
    assert rows(px, sql) == expected


# --- a utf8mb4_bin column arrives labelled utf8mb4_general_ci: merged case-insensitively before

def test_order_by_a_binary_collated_column_sorts_by_code_point(both):
    same(both, "SELECT b FROM rg ORDER BY b", [("A",), ("B",), ("Zed",), ("a",), ("b",), ("x y",)])


def test_distinct_on_a_binary_collated_column_keeps_a_and_A_apart(both):
    same(both, "SELECT DISTINCT b FROM rg ORDER BY b",
         [("A",), ("B",), ("Zed",), ("a",), ("b",), ("x y",)])


def test_count_distinct_on_a_binary_collated_column(both):
    same(both, "SELECT COUNT(DISTINCT b) FROM rg", [(6,)])


def test_max_of_a_binary_collated_column_is_the_highest_code_point(both):
    same(both, "SELECT MAX(b), MIN(b) FROM rg", [("x y", "A")])


def test_group_by_a_binary_collated_column_keeps_case_variants_as_groups(both):
    same(both, "SELECT b, COUNT(*) FROM rg WHERE b IN ('a', 'A', 'b', 'B') GROUP BY b ORDER BY b",
         [("A", 1), ("B", 1), ("a", 1), ("b", 1)])


# --- the general_ci default still merges case- and trailing-space-insensitively

def test_general_ci_groups_case_and_trailing_space_variants(both):
    px, ref = both
    sql = "SELECT UPPER(s), COUNT(*) FROM rg GROUP BY s ORDER BY s"
    expected = [("A", 2), ("B", 2), ("X", 1), ("ZED", 1)]
    assert [(u.rstrip(), n) for u, n in rows(ref, sql)] == expected
    assert [(u.rstrip(), n) for u, n in rows(px, sql)] == expected


# --- a collation pydble does not reproduce (unicode_ci: 'ß' = 'ss') is refused, not guessed

def test_distinct_of_a_unicode_ci_column_across_nodes_is_answered_over_copies(both):
    """The merge cannot compare by unicode_ci; one MariaDB over copies of the rows does (materialize)."""
    px, ref = both
    assert len(rows(ref, "SELECT DISTINCT u FROM rg")) == 4   # ss = ß, s, b, a = A
    over_copies(both, "SELECT DISTINCT u FROM rg ORDER BY u")


def test_order_by_a_text_column_by_its_position_inside_star_is_answered_over_copies(both):
    px, ref = both
    assert rows(ref, "SELECT * FROM rg ORDER BY 2 LIMIT 2") == [(2, "A", "ß", "A"), (6, "B", "A", "Zed")]
    over_copies(both, "SELECT * FROM rg ORDER BY 2 LIMIT 2")
    same(both, "SELECT * FROM rg ORDER BY 1 DESC LIMIT 2", [(6, "B", "A", "Zed"), (5, "b", "a", "x")])


# --- issue 18 item 4: a multi-node write is all or nothing (the executor takes a transaction per node)

def test_multi_row_insert_failing_on_one_node_changes_no_node(both):
    px, ref = both
    sql = "INSERT INTO rg (id, b) VALUES (1000, 'new'), (1, 'dup')"   # 1000 -> dn1, 1 -> dn2 (taken)
    for conn in (ref, px):
        with pytest.raises(pymysql.MySQLError) as e:
            rows(conn, sql)
        assert e.value.args[0] == 1062
    assert rows(ref, "SELECT COUNT(*) FROM rg WHERE id = 1000") == [(0,)]
    try:
        assert rows(px, "SELECT COUNT(*) FROM rg WHERE id = 1000") == [(0,)]
    finally:
        rows(px, "DELETE FROM rg WHERE id = 1000")


def agree(both: tuple[Any, Any], sql: str, ordered: bool = True) -> list[tuple[Any, ...]]:
    """pydble answers what MariaDB answers (names too); returns the rows."""
    px, ref = both
    with ref.cursor() as cur:
        cur.execute(sql)
        want, names = [tuple(r) for r in cur.fetchall()], [d[0] for d in cur.description]
    with px.cursor() as cur:
        cur.execute(sql)
        got, got_names = [tuple(r) for r in cur.fetchall()], [d[0] for d in cur.description]
    assert got_names == names
    assert (got if ordered else sorted(got, key=repr)) == (want if ordered else sorted(want, key=repr))
    return want


def over_copies(both: tuple[Any, Any], sql: str) -> None:
    """What the proxy cannot merge exactly, one MariaDB answers over copies of the rows (proxy/exec/materialize.py):
    pydble answers as the reference does."""
    same(both, sql, rows(both[1], sql))


def refused(both: tuple[Any, Any], sql: str, words: str) -> None:
    """MariaDB answers; pydble refuses with 1235 and a sentence."""
    px, ref = both
    rows(ref, sql)
    with pytest.raises(pymysql.MySQLError) as e:
        rows(px, sql)
    assert e.value.args[0] == 1235 and words in e.value.args[1], e.value.args


# --- issue 18 item 2: set operations over branches on different nodes, combined in the proxy

def test_union_across_nodes_compares_by_general_ci(both):
    same(both, "SELECT s FROM rg WHERE id = 1 UNION SELECT s FROM rg WHERE id = 2", [("a",)])


def test_union_across_nodes_keeps_a_and_A_apart_under_bin(both):
    same(both, "SELECT b FROM rg WHERE id = 1 UNION SELECT b FROM rg WHERE id = 2 ORDER BY b", [("A",), ("a",)])


def test_union_of_general_ci_and_bin_columns_compares_by_bin(both):
    same(both, "SELECT s FROM rg WHERE id = 2 UNION SELECT b FROM rg WHERE id = 1 ORDER BY 1", [("A",), ("a",)])


def test_intersect_binds_tighter_than_union(both):
    same(both, "SELECT id FROM rg WHERE id < 3 UNION SELECT id FROM rg WHERE id > 4 "
               "INTERSECT SELECT id FROM rg WHERE id = 6 ORDER BY id", [(1,), (2,), (6,)])


def test_except_and_intersect_all_count_copies(both):
    same(both, "SELECT id % 2 AS p FROM rg EXCEPT ALL SELECT id % 2 FROM rg WHERE id < 3 ORDER BY p",
         [(0,), (0,), (1,), (1,)])
    same(both, "SELECT id % 2 AS p FROM rg INTERSECT ALL SELECT id % 3 FROM rg ORDER BY p", [(0,), (0,), (1,), (1,)])
    same(both, "SELECT id % 2 AS p FROM rg EXCEPT SELECT id FROM rg WHERE id = 1", [(0,)])


def test_parenthesized_branches_keep_their_limits_under_the_outer_order_and_limit(both):
    same(both, "(SELECT id FROM rg ORDER BY id DESC LIMIT 2) UNION ALL (SELECT id FROM rg ORDER BY id LIMIT 1) "
               "ORDER BY id LIMIT 2", [(1,), (5,)])


def test_set_operation_names_come_from_the_first_branch(both):
    agree(both, "SELECT id AS x, b FROM rg WHERE id = 1 UNION SELECT id AS y, s FROM rg WHERE id = 2 ORDER BY x")


def test_set_operation_of_int_and_varchar_branches_is_answered_over_copies(both):
    # found by the differential test: the INT key was applied to text values and the connection dropped;
    # MariaDB's own type unification now answers it over copies of the rows (proxy/exec/materialize.py)
    sql = "SELECT id FROM rg WHERE id = 1 UNION SELECT b FROM rg ORDER BY id LIMIT 9"
    over_copies(both, sql)
    assert [f[7:] for f in _fields(both[0], sql)] == [f[7:] for f in _fields(both[1], sql)]


def test_set_operation_by_a_unicode_ci_column_is_answered_over_copies(both):
    over_copies(both, "SELECT u FROM rg WHERE id = 1 UNION SELECT u FROM rg WHERE id = 2")


# --- issue 18 item 2: aggregates merged from per-node partials

def test_stddev_and_variance_family_across_nodes(both):
    same(both, "SELECT STDDEV(id), STD(id), STDDEV_POP(id), STDDEV_SAMP(id), VARIANCE(id), VAR_POP(id), "
               "VAR_SAMP(id) FROM rg", [(1.7078, 1.7078, 1.7078, 1.8708, 2.9167, 2.9167, 3.5)])
    agree(both, "SELECT id % 2 AS g, VAR_SAMP(id), STDDEV(id * 1.5) FROM rg GROUP BY g ORDER BY g")
    same(both, "SELECT VAR_SAMP(id), STDDEV_POP(id) FROM rg WHERE id = 3", [(None, 0.0)])


def test_stddev_of_a_double_is_answered_over_copies(both):
    over_copies(both, "SELECT STDDEV(id / 3e0) FROM rg")


def test_group_concat_with_its_own_order_and_separator(both):
    same(both, "SELECT GROUP_CONCAT(b ORDER BY b DESC SEPARATOR '|') FROM rg", [("x y|b|a|Zed|B|A",)])
    same(both, "SELECT id % 2 AS g, GROUP_CONCAT(s ORDER BY s, id) FROM rg GROUP BY g ORDER BY g",
         [(0, "A,B ,Zed"), (1, "a,b,x")])
    same(both, "SELECT GROUP_CONCAT(DISTINCT id % 3 ORDER BY id % 3 DESC) FROM rg", [("2,1,0",)])


def test_group_concat_longer_than_group_concat_max_len_is_answered_over_copies(both):
    px, ref = both
    for conn in both:
        rows(conn, "SET SESSION group_concat_max_len = 6")
    try:
        assert rows(ref, "SELECT GROUP_CONCAT(b ORDER BY id) FROM rg") == [("a,A,x ",)]
        over_copies(both, "SELECT GROUP_CONCAT(b ORDER BY id) FROM rg")   # the session's limit, and warning
        same(both, "SELECT GROUP_CONCAT(id ORDER BY id) FROM rg WHERE id < 4", [("1,2,3",)])
    finally:
        for conn in both:
            rows(conn, "SET SESSION group_concat_max_len = 1024")


def test_bit_aggregates_and_count_distinct_of_two_columns(both):
    same(both, "SELECT BIT_AND(id), BIT_OR(id), BIT_XOR(id), COUNT(DISTINCT id % 2, s) FROM rg", [(0, 7, 7, 6)])


def test_every_step_of_a_set_operation_compares_by_the_collation_of_all_branches(both):
    # found by the differential test: a utf8mb4_bin branch after an EXCEPT of general_ci branches makes the
    # whole result (and the EXCEPT) compare by utf8mb4_bin, even when that branch has no rows
    same(both, "SELECT s FROM rg WHERE id IN (1, 2) EXCEPT SELECT s FROM rg WHERE id = 3 "
               "UNION SELECT b FROM rg WHERE id < 0 ORDER BY 1", [("A",), ("a",)])


def test_group_by_with_rollup_across_nodes(both):
    same(both, "SELECT id % 2 AS g, COUNT(*), SUM(id), GROUP_CONCAT(id ORDER BY id) FROM rg GROUP BY g WITH ROLLUP",
         [(0, 3, 12, "2,4,6"), (1, 3, 9, "1,3,5"), (None, 6, 21, "1,2,3,4,5,6")])
    same(both, "SELECT id % 2 AS g, id % 3 AS h, COUNT(*) FROM rg GROUP BY g, h WITH ROLLUP HAVING COUNT(*) > 1",
         [(0, None, 3), (1, None, 3), (None, None, 6)])
    same(both, "SELECT s, COUNT(*) FROM rg WHERE id < 4 GROUP BY s WITH ROLLUP LIMIT 1, 2", [("b", 1), (None, 3)])


def test_rollup_with_order_by_is_mariadbs_error(both):
    for conn in both:
        with pytest.raises(pymysql.MySQLError) as e:
            rows(conn, "SELECT id % 2 AS g, COUNT(*) FROM rg GROUP BY g WITH ROLLUP ORDER BY g")
        assert e.value.args[0] == 1221


def test_rollup_of_an_expression_over_a_key_is_answered_over_copies(both):
    """The merge cannot roll it up; proxy/exec/materialize.py lets one MariaDB do it over copies of the rows."""
    sql = "SELECT id % 2 AS g, (id % 2) + 1, COUNT(*) FROM rg GROUP BY g WITH ROLLUP"
    same(both, sql, rows(both[1], sql))


def _fields(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        cur.fetchall()
        return [(f.db, f.table_name, f.org_table, f.name, f.org_name, f.charsetnr, f.length, f.type_code, f.flags,
                 f.scale) for f in cur._result.fields]


@pytest.mark.parametrize("sql", [
    "SELECT id, b FROM rg WHERE id = 1 UNION SELECT id, b FROM rg WHERE id = 2",
    "SELECT id, s FROM rg WHERE id = 1 UNION ALL SELECT id, s FROM rg WHERE id = 2",
    "SELECT id, s FROM rg WHERE id = 1 UNION ALL SELECT id, s FROM rg WHERE id = 2 ORDER BY id",
    "SELECT s FROM rg WHERE id = 1 UNION SELECT b FROM rg WHERE id = 2",
    "SELECT 'a' AS l, id % 2 AS p FROM rg WHERE id = 1 INTERSECT SELECT 'abc', id FROM rg WHERE id = 2",
    "SELECT id AS x FROM rg WHERE id = 1 EXCEPT ALL SELECT id FROM rg WHERE id = 2",
])
def test_set_operation_column_definitions_are_mariadbs(both, sql):
    px, ref = both
    assert _fields(px, sql) == _fields(ref, sql)


def test_set_operation_inside_a_transaction_reads_its_own_writes(both):
    px, _ = both
    px.begin()
    try:
        rows(px, "INSERT INTO rg (id, b) VALUES (100, 'new')")
        assert sorted(rows(px, "SELECT id, b FROM rg WHERE id = 100 UNION SELECT id, b FROM rg WHERE id = 1")) == [
            (1, "a"), (100, "new")]
    finally:
        px.rollback()
    assert rows(px, "SELECT id FROM rg WHERE id = 100 UNION ALL SELECT id FROM rg WHERE id = 101") == []


def test_rollup_by_a_json_key_is_answered_over_copies(both):
    # found by the differential test: MariaDB sends a JSON (LONGTEXT) key of a ROLLUP as LONGBLOB (251);
    # one MariaDB over copies of the rows does the same (proxy/exec/materialize.py)
    sql = "SELECT j, COUNT(*) FROM rgj GROUP BY j WITH ROLLUP"
    over_copies(both, sql)
    assert [f[7] for f in _fields(both[0], sql)] == [f[7] for f in _fields(both[1], sql)]
    same(both, "SELECT j, COUNT(*) FROM rgj GROUP BY j ORDER BY j", [("[2]", 1), ('{"a": 1}', 2)])


def test_arithmetic_over_aggregates_across_nodes(both):
    same(both, "SELECT COUNT(*) + 1, MAX(id) - MIN(id), -SUM(id) * 2, COUNT(b) - 0.5 FROM rg",
         [(7, 5, -42, Decimal("5.5"))])
    agree(both, "SELECT id % 2 AS g, MAX(id) - MIN(id) AS spread FROM rg GROUP BY g ORDER BY spread DESC, g")
    same(both, "SELECT MAX(id) - MIN(id) FROM rg WHERE id > 100", [(None,)])


def test_arithmetic_over_aggregates_of_doubles_or_division_is_answered_over_copies(both):
    """Not mergeable from partial results; answered by one MariaDB over copies (proxy/exec/materialize.py)."""
    for sql in ("SELECT MAX(id / 3e0) - MIN(id) FROM rg", "SELECT SUM(id) / COUNT(*) FROM rg"):
        same(both, sql, rows(both[1], sql))
# --- the 1,000,000-statement run (bench/RESULTS.md, 2026-11-25, h4)

def _same_error(both: tuple[Any, Any], sql: str) -> tuple[int, str]:
    """MariaDB refuses sql, and pydble answers that very error."""
    px, ref = both
    errors = []
    for conn in (ref, px):
        with pytest.raises(pymysql.MySQLError) as e:
            rows(conn, sql)
        errors.append(e.value.args)
    assert errors[1] == errors[0]
    return errors[0]


def test_a_nested_set_operation_whose_first_branch_repeats_a_name_is_mariadbs_1060(both):
    # seed 111 #22563: `... UNION SELECT m, s, s FROM dx_vg INTERSECT ...` answered rows; MariaDB makes a
    # derived table of the INTERSECT (or of any parenthesized set operation), whose names must be unique
    for sql in ("SELECT id, s FROM rg WHERE id = 1 UNION SELECT s, S FROM rg WHERE id = 2 "
                "INTERSECT SELECT s, s FROM rg WHERE id = 3",
                "SELECT id, s FROM rg WHERE id = 1 UNION (SELECT s, s FROM rg WHERE id = 2 "
                "UNION SELECT id, s FROM rg WHERE id = 3)",
                # seed 114 #29150: the same under an outer ORDER BY ... LIMIT
                "SELECT id, s FROM rg WHERE id = 1 UNION SELECT id, id FROM rg WHERE id = 2 "
                "INTERSECT SELECT id, s FROM rg WHERE id = 3 ORDER BY 1, 2 LIMIT 3"):
        assert _same_error(both, sql)[0] == 1060
    # where MariaDB reads the names from the top level, repeats are fine
    agree(both, "SELECT s, s FROM rg WHERE id = 1 UNION SELECT s, b FROM rg WHERE id = 2 "
                "INTERSECT SELECT s, b FROM rg WHERE id = 2", ordered=False)
    agree(both, "SELECT s, s FROM rg WHERE id = 1 INTERSECT SELECT s, s FROM rg WHERE id = 5 "
                "UNION SELECT b, b FROM rg WHERE id = 3", ordered=False)


def test_limit_0_over_several_nodes_has_the_column_types_of_limit_0(both):
    # seed 111 #23693, #37516: the nodes ran `... ORDER BY ... LIMIT offset+0`, typed through a sort as
    # BLOB (252); one MariaDB with LIMIT 0 runs nothing and types the COALESCE over JSON as LONGBLOB (251)
    for sql in ("SELECT COALESCE(b.j, '{}') AS x FROM rgj a LEFT JOIN rgj b ON a.id = b.id ORDER BY a.id, b.id "
                "LIMIT 2, 0",
                "SELECT COALESCE(a.j, 'x') AS x FROM rgj a JOIN rgj b ON a.id = b.id ORDER BY a.id LIMIT 0 OFFSET 1"):
        px, ref = both
        assert rows(px, sql) == [] == rows(ref, sql)
        assert _fields(px, sql) == _fields(ref, sql)


def test_a_variance_halfway_between_two_printed_values_is_answered_over_copies(both):
    # seed 111 #20435: VAR_SAMP exactly ...0125 at 6 decimals: pydble printed 5.250013, MariaDB's row-by-row
    # double arithmetic 5.250012; which way a tie goes there cannot be known from the partial sums, so the
    # merge refuses and one MariaDB answers over copies of the rows (proxy/exec/materialize.py)
    over_copies(both, "SELECT VAR_POP(CASE WHEN id = 4 THEN 0.1 ELSE 0 END) FROM rg WHERE id <= 4")  # 0.001875
    agree(both, "SELECT VAR_POP(CASE WHEN id = 4 THEN 0 ELSE 0.02 END), VAR_SAMP(id) FROM rg WHERE id <= 4")
