"""README's "SQL support" table, row by row: each row's example runs through pydble and on one plain MariaDB
holding the same rows, and pydble answers as the row says (so the table cannot drift from the code).

A row's example is one code span of statements separated by `; `, run in order on a fresh session of
each side; every statement must answer as the reference does (the same rows, column names and types, or
the same error code), except a refused row's last statement, which pydble refuses with 1235. The
"pydble" cell says how the first statement pydble can EXPLAIN is answered: `one node` is one BASE SQL
row; otherwise every TYPE the cell names in backticks (`MERGE`, `JOIN`, `OVER_COPIES`, `MULTI_WRITE`...)
is in its EXPLAIN. `as one MariaDB` rows (session-bound statements, writes) may name none.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pymysql
import pytest

from same_answer import proxy_and_reference

README = Path(__file__).resolve().parents[2] / "README.md"
ALL4 = ["dn1", "dn2", "dn3", "dn4"]
TABLES = {
    "sq_t4": {"type": "sharding", "nodes": ALL4, "function": "hash-four", "column": "id"},
    "sq_t4b": {"type": "sharding", "nodes": ALL4, "function": "hash-four", "column": "id"},
    "sq_t2": {"type": "sharding", "nodes": ["dn1", "dn2"], "function": "hash-two", "column": "id"},
    "sq_g": {"type": "global", "nodes": ALL4},
    "sq_s": {"type": "single", "nodes": ["dn2"]},
    "sq_seq": {"type": "sharding", "nodes": ALL4, "function": "hash-four", "column": "id",
               "increment_column": "id"},
}   # and sq_d, not configured: the default node's
DDL = "CREATE TABLE {t} (id INT NOT NULL PRIMARY KEY, k INT, s VARCHAR(16), m DECIMAL(8,2))"
SEQ_DDL = "CREATE TABLE sq_seq (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, v VARCHAR(8))"
ROWS = ", ".join(f"({i}, {'NULL' if i % 5 == 0 else i % 3}, '{'abcab'[i % 5]}{i % 2}', {i * 1.25:.2f})"
                 for i in range(1, 13))
DATA_TABLES = ("sq_t4", "sq_t4b", "sq_t2", "sq_g", "sq_s", "sq_d")
EXPLAINABLE = re.compile(r"\s*(SELECT|WITH|INSERT|REPLACE|UPDATE|DELETE|\()", re.I)
PYDBLE_ONLY = re.compile(r"\s*SET\s+xa\s*=", re.I)   # pydble's own session switch, unknown to MariaDB
KINDS = ("one node", "merged", "joined in the proxy", "over copies", "as one mariadb", "refused")


def support_table() -> list[tuple[str, str, str]]:
    """(feature, example, how pydble answers) of each row of README's "SQL support" table."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"#+ SQL support$", line))
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if not line.startswith("| ") or set(line) <= set("|- ") or line.startswith("| SQL |"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        example = re.search(r"`([^`]+)`", cells[1])
        rows.append((cells[0], example.group(1) if example else "", cells[2]))
    return rows


ROWS_OF_TABLE = support_table()


def kind_of(how: str) -> str:
    """The kind of answer a "pydble" cell claims (its first words)."""
    low = how.lower()
    return next(k for k in KINDS if low.startswith(k))


@pytest.fixture(scope="module")
def servers(backends: list[Any]) -> Iterator[Any]:
    """The proxy (tables above in schema1) and the reference server, both holding ROWS. The reference
    database lives on the second server: user locks are server-wide, and pydble takes them on dn1's."""
    backends[1].create_databases("sqlsup_ref")
    with proxy_and_reference(backends, "sqlsup", "sqlsup_unused", copy.deepcopy(TABLES)) as (px, _, p):
        ref = backends[1].connect("sqlsup_ref")
        for conn in (px, ref):
            with conn.cursor() as cur:
                cur.execute("DROP VIEW IF EXISTS sq_v, sq_vs")
                for t in (*DATA_TABLES, "sq_seq"):
                    cur.execute(f"DROP TABLE IF EXISTS {t}")
                    cur.execute(SEQ_DDL if t == "sq_seq" else DDL.format(t=t))
                    if t != "sq_seq":
                        cur.execute(f"INSERT INTO {t} VALUES {ROWS}")
        ref.close()
        yield p, backends[1]


def test_the_table_has_rows_of_every_kind() -> None:
    assert {kind_of(how) for _, _, how in ROWS_OF_TABLE} == set(KINDS)
    assert all(example for _, example, _ in ROWS_OF_TABLE)


@pytest.mark.parametrize("feature, example, how", ROWS_OF_TABLE, ids=[r[0][:60] for r in ROWS_OF_TABLE])
def test_each_row_answers_as_the_table_says(servers, feature: str, example: str, how: str) -> None:
    proxy, ref_server = servers
    kind = kind_of(how)
    stmts = [s.strip() for s in example.split("; ") if s.strip()]
    explained = min((i for i, s in enumerate(stmts) if EXPLAINABLE.match(s)), default=None)
    claimed = re.findall(r"`([A-Z_]+)`", how)
    px, ref = proxy.connect(), ref_server.connect("sqlsup_ref")
    try:
        for i, sql in enumerate(stmts):
            if i == explained and kind != "refused":
                with px.cursor() as cur:
                    cur.execute("EXPLAIN " + sql)
                    plan = cur.fetchall()
                types = [r[1] for r in plan]
                if kind == "one node":
                    assert types == ["BASE SQL"], plan
                else:
                    assert (claimed or kind == "as one mariadb") and set(claimed) <= set(types), plan
            if PYDBLE_ONLY.match(sql):
                assert _run(px, sql)[0] == "ok"
                continue
            got = _run(px, sql)
            if kind == "refused" and i == len(stmts) - 1:
                assert got[:2] == ("error", 1235), got
                continue
            want = _run(ref, sql)
            assert _comparable(got, sql) == _comparable(want, sql), sql
    finally:
        px.close()
        ref.close()
        _reset(proxy, ref_server)


def _run(conn: Any, sql: str) -> tuple[Any, ...]:
    """One statement's answer: ("error", code), ("ok", affected) or ("rows", rows, metadata)."""
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            if cur.description is None:
                return ("ok", cur.rowcount)
            meta = [(d[0], d[1], d[5] if d[1] in (0, 4, 5, 246) else None) for d in cur.description]
            return ("rows", [tuple(r) for r in cur.fetchall()], meta)
    except pymysql.MySQLError as e:
        return ("error", e.args[0])


def _comparable(ans: tuple[Any, ...], sql: str) -> tuple[Any, ...]:
    """Rows in order where the statement ends with an ORDER BY of its own, else as a multiset."""
    if ans[0] != "rows" or re.search(r"\bORDER BY [^()]*$", sql, re.I):
        return ans
    return ("rows", Counter(map(repr, ans[1])), ans[2])


def _reset(proxy: Any, ref_server: Any) -> None:
    """Rows a row's example added or changed go, on both sides, so every row starts from ROWS."""
    for conn in (proxy.connect(), ref_server.connect("sqlsup_ref")):
        with conn.cursor() as cur:
            cur.execute("DROP VIEW IF EXISTS sq_v, sq_vs")
            for t in DATA_TABLES:
                cur.execute(f"DELETE FROM {t}")
                cur.execute(f"INSERT INTO {t} VALUES {ROWS}")
            cur.execute("DELETE FROM sq_seq")
        conn.close()
