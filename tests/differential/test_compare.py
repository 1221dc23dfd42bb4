"""The differential comparator: which differences count, and the one type pair that does not (issue 18,
seeds 124 #33703 and 125 #15875: LONG_BLOB 251 against BLOB 252 of length 2**32-1)."""

from __future__ import annotations

from typing import Any

import MySQLdb
import pytest

from .engine import Answer, compare, run_sql
from .gen import DDL, Case

CASE = Case("", "select", "join-order", ordered=True)
ROW = [(1, "1")]


def answer(code: int, length: int, rows: list[tuple[Any, ...]] = ROW) -> Answer:
    """An answer of two columns, an INT and one of the given type code and length."""
    return Answer(names=("x0", "x1"), types=((3, None), (code, None)), lengths=(11, length), rows=rows)


@pytest.mark.parametrize("got, ref", [
    ((251, 67108864), (252, 4294967295)),    # JSON_EXTRACT straight from the expression / through a temporary table
    ((252, 4294967295), (251, 67108864)),
    ((251, 4294967295), (252, 4294967295)),  # COALESCE over JSON
    ((252, 4294967295), (252, 4294967295)),
])
def test_longblob_and_a_blob_of_longblob_length_are_the_same_answer(got, ref):
    assert compare(answer(*got), answer(*ref), CASE) is None


@pytest.mark.parametrize("got, ref", [
    ((251, 67108864), (252, 65535)),          # a BLOB of BLOB size is another type
    ((252, 16777215), (251, 4294967295)),     # ... and so is a MEDIUMBLOB-sized one
    ((251, 4294967295), (250, 16777215)),     # MEDIUM_BLOB
    ((251, 4294967295), (253, 4294967295)),   # VAR_STRING
])
def test_other_type_differences_still_count(got, ref):
    assert compare(answer(*got), answer(*ref), CASE).startswith("column types")


def test_the_pair_does_not_hide_different_values():
    why = compare(answer(251, 4294967295, [(1, "1")]), answer(252, 4294967295, [(1, "2")]), CASE)
    assert why.startswith("rows")


def test_one_mariadb_sends_either_code_for_one_statement_depending_on_its_rows(backends):
    """Why the pair is the same answer: one plain MariaDB answers the same JOIN ... ORDER BY with 251
    over six rows and 252 (length 2**32-1) over three, where its plan sorts through a temporary table."""
    backends[0].create_databases("cmpref")
    conn = MySQLdb.connect(host="127.0.0.1", port=backends[0].port, user="root", passwd="", db="cmpref",
                           charset="utf8mb4", autocommit=True, conv={})
    sql = ("SELECT a.id, JSON_EXTRACT(b.j, '$.a') FROM t a JOIN t b ON a.id = b.id "
           "WHERE b.id IS NULL OR b.dt > '2023-12-31 08:00:00' ORDER BY a.id, b.id")
    rows = ("(1, 0, 'a', 'a', NULL, '2024-01-01 00:00:00', 1.5, '{\"a\": 1}'), "
            "(2, 1, 'b', 'b', NULL, '2024-02-29 23:59:59', 2, '[1, 2]'), "
            "(3, 1, 'c', 'c', NULL, '2024-01-01 12:30:00', 7, '{\"a\": 2}'), "
            "(4, 2, 'd', 'd', NULL, '2023-12-31 08:00:00', 0, NULL), "
            "(5, 3, 'e', 'e', NULL, '2024-01-01 00:00:00', 1, '{\"a\": null}'), "
            "(6, 5, 'f', 'f', NULL, '2024-01-01 00:00:00', 1, '{\"b\": \"y\"}')")
    try:
        seen = {}
        for n in (6, 3):
            for stmt in ("DROP TABLE IF EXISTS t", DDL.format(t="t"), f"INSERT INTO t VALUES {rows}",
                         f"DELETE FROM t WHERE id > {n}"):
                assert run_sql(conn, stmt).error is None, stmt
            ans = run_sql(conn, sql)
            seen[n] = (ans.types[1][0], ans.lengths[1], len(ans.rows))
        assert seen[6][0] == 251 and seen[6][2] == 5
        assert seen[3] == (252, 4294967295, 3)
        assert compare(run_sql(conn, sql), Answer(names=ans.names, types=((3, None), (251, None)),
                                                  lengths=(11, seen[6][1]), rows=ans.rows), CASE) is None
    finally:
        conn.close()
