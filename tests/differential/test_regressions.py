"""Every difference the differential test found, as the smallest statement: what one MariaDB holding
all the rows answers, and what pydble must answer (the same, or a 1235 refusal saying why).

The table is sharded over four nodes by id (id % 4), one row per node and value, so each statement
has to merge values that no single node compares.
"""

from __future__ import annotations

import copy
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
    cfg["schemas"]["schema1"]["tables"]["rg"] = {"type": "sharding", "nodes": NODES,
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

def test_order_by_a_unicode_ci_column_across_nodes_is_refused(both):
    px, ref = both
    assert len(rows(ref, "SELECT DISTINCT u FROM rg")) == 4   # ss = ß, s, b, a = A
    with pytest.raises(pymysql.MySQLError) as e:
        rows(px, "SELECT DISTINCT u FROM rg")
    assert e.value.args[0] == 1235
    assert "utf8mb4_unicode_ci" in e.value.args[1]


def test_order_by_a_text_column_by_its_position_inside_star_is_refused(both):
    px, ref = both
    assert rows(ref, "SELECT * FROM rg ORDER BY 2 LIMIT 2") == [(2, "A", "ß", "A"), (6, "B", "A", "Zed")]
    with pytest.raises(pymysql.MySQLError) as e:
        rows(px, "SELECT * FROM rg ORDER BY 2 LIMIT 2")
    assert e.value.args[0] == 1235 and "name the column" in e.value.args[1]
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
