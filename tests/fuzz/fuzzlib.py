"""Shared pieces of the fuzz tests: hypothesis profiles, a time bound, and grammar-aware strategies.

Profiles: ``ci`` (the default: a few thousand cases in total, fast enough for every CI run) and
``long`` (100,000+ cases in total, on demand). ``long`` is chosen by the environment variable
``PYDBLE_FUZZ=long`` or by ``--hypothesis-profile=long``; under it every fuzz test is marked
``slow``, so run it with ``-m slow``. Each test names its own example count for both profiles.
"""

from __future__ import annotations

import os
import struct
import time
from typing import Any, Callable, Sequence, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from meta.config import Config, parse_config
from proxy.wire import constants as C
from proxy.wire.packets import lenenc_int

F = TypeVar("F", bound=Callable[..., Any])

_COMMON: dict[str, Any] = dict(
    deadline=None,   # wall-clock bounds are checked by `bounded`, robustly, where they matter
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                           HealthCheck.function_scoped_fixture],
)
settings.register_profile("ci", max_examples=200, **_COMMON)
settings.register_profile("long", max_examples=10_000, **_COMMON)


def profile_name() -> str:
    """'long' when asked for by PYDBLE_FUZZ=long or --hypothesis-profile=long, else 'ci'."""
    if os.environ.get("PYDBLE_FUZZ", "").lower() == "long":
        return "long"
    try:
        if settings.get_current_profile_name() == "long":
            return "long"
    except AttributeError:  # pragma: no cover - very old hypothesis
        pass
    return "ci"


def is_long() -> bool:
    """True under the long profile (asked at collection time, after pytest loaded any --hypothesis-profile)."""
    return profile_name() == "long"

# Cases run per test are recorded here so the long run can report its total.
CASES: dict[str, int] = {}


def fuzz(ci: int, long: int) -> Callable[[F], F]:
    """Hypothesis settings for one fuzz test: `ci` examples normally, `long` under the long profile."""
    long_run = is_long()
    n = long if long_run else ci
    base = settings.get_profile("long" if long_run else "ci")

    def deco(fn: F) -> F:
        out = settings(base, max_examples=n)(fn)
        if long_run:
            out = pytest.mark.slow(out)
        return out  # type: ignore[return-value]
    return deco


def count(name: str) -> None:
    """Record one executed case of a fuzz test."""
    CASES[name] = CASES.get(name, 0) + 1


def bounded(fn: Callable[[], Any], limit: float = 0.5) -> Any:
    """Run fn; if it took longer than limit, time it twice more and fail only if it is slow every time.

    A loaded 2-core CI machine stalls now and then; pathological backtracking is slow every time.
    Exceptions propagate from the first run.
    """
    t0 = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - t0
    if elapsed > limit:
        best = elapsed
        for _ in range(2):
            t0 = time.perf_counter()
            try:
                fn()
            except Exception:
                pass
            best = min(best, time.perf_counter() - t0)
        assert best <= limit, f"took {best:.3f} s (> {limit} s) every time: pathological input"
    return result


# -- the DESIGN.md section 2 configuration ----------------------------------------------------------

EXAMPLE_CONFIG: dict[str, Any] = {
    "server": {"instance": "dble-1", "bind": "127.0.0.1", "port": 8066, "manager_port": 9066},
    "users": [{"name": "test", "password": "111111", "schemas": ["schema1", "schema2"]}],
    "manager_users": [{"name": "root", "password": "111111"}],
    "db_groups": {"ha_group1": {"host": "127.0.0.1", "port": 3306, "user": "root", "password": "", "max_con": 64},
                  "ha_group2": {"host": "127.0.0.1", "port": 3307, "user": "root", "password": ""}},
    "sharding_nodes": {"dn1": {"db_group": "ha_group1", "database": "db1"},
                       "dn2": {"db_group": "ha_group2", "database": "db1"},
                       "dn3": {"db_group": "ha_group1", "database": "db2"},
                       "dn4": {"db_group": "ha_group2", "database": "db2"},
                       "dn5": {"db_group": "ha_group1", "database": "db3"}},
    "functions": {"hash-two": {"type": "hash", "partition_count": [2], "partition_length": [1]},
                  "hash-four": {"type": "hash", "partition_count": [4], "partition_length": [1]}},
    "schemas": {
        "schema1": {"default_node": "dn5", "tables": {
            "test": {"type": "global", "nodes": ["dn1", "dn2", "dn3", "dn4"]},
            "sharding_2_t1": {"type": "sharding", "nodes": ["dn1", "dn2"], "function": "hash-two", "column": "id"},
            "sharding_4_t1": {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "hash-four",
                              "column": "id"}}},
        "schema2": {"tables": {"sing": {"type": "single", "nodes": ["dn1"]}}},
    },
}


def example_config() -> Config:
    """The DESIGN.md section 2 example, parsed by meta.config.parse_config."""
    import copy
    return parse_config(copy.deepcopy(EXAMPLE_CONFIG))


# -- grammar-aware SQL ---------------------------------------------------------------------------------

EXAMPLE_TABLES = ("test", "sharding_2_t1", "sharding_4_t1", "sing", "unconfigured_t", "dual")
SCHEMAS = ("schema1", "schema2", "SCHEMA1", "information_schema", "mysql", "nosuch")
COLUMNS = ("id", "name", "c", "k", "pad", "code", "`id`", "`Name`", "`we``ird`")
KEYWORDS = ("SELECT", "FROM", "WHERE", "AND", "OR", "XOR", "NOT", "IN", "IS", "NULL", "BETWEEN", "LIKE", "JOIN",
            "LEFT", "ON", "USING", "GROUP", "BY", "ORDER", "HAVING", "LIMIT", "OFFSET", "UNION", "ALL", "INSERT",
            "INTO", "VALUES", "VALUE", "SET", "UPDATE", "DELETE", "REPLACE", "CREATE", "TABLE", "DROP", "ALTER",
            "TRUNCATE", "RENAME", "TO", "INDEX", "WITH", "AS", "DISTINCT", "EXISTS", "CASE", "WHEN", "THEN",
            "ELSE", "END", "DUPLICATE", "KEY", "ROW", "FOR", "SHOW", "DESC", "EXPLAIN", "USE", "BEGIN", "COMMIT",
            "IF", "PRIMARY", "INT", "VARCHAR", "DEFAULT", "LOCK", "INTERVAL", "STRAIGHT_JOIN", "NATURAL", "CROSS",
            "RETURNING", "PARTITION", "IGNORE", "LOW_PRIORITY", "HIGH_PRIORITY", "SQL_CALC_FOUND_ROWS", "TABLES",
            "DATABASE", "SCHEMA", "COUNT", "SUM", "MIN", "MAX", "AVG", "GROUP_CONCAT")
PUNCT = ("(", ")", ",", ";", ".", "=", "<", ">", "<=", ">=", "<>", "!=", "<=>", "*", "+", "-", "/", "%", "?", "@",
         "@@", ":=", "'", '"', "`", "\\", "/*", "*/", "--", "-- ", "#", "/*!", "/*!pydble:", "||", "&&", "->>")


def _case(word: str) -> st.SearchStrategy[str]:
    return st.sampled_from([word, word.lower(), word.capitalize()])


def kw(word: str) -> st.SearchStrategy[str]:
    """A keyword in random letter case."""
    return _case(word)


ws = st.sampled_from([" ", " ", " ", "  ", "\t", "\n", "\r\n", " /* c */ ", " -- c\n", " #c\n", "/**/"])

_int_lit = st.one_of(st.integers(-10, 10), st.integers(-(2 ** 70), 2 ** 70)).map(str)
_num_lit = st.one_of(
    _int_lit,
    st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["1e3", "-1.5E-2", ".5", "1.", "0x1F", "0b101", "X'0A'", "x''", "b'01'", "B'1'", "00012",
                     "18446744073709551616", "-9223372036854775809", "1e400", "0e0"]),
)
_str_body = st.text(st.one_of(st.characters(), st.sampled_from(list("'\"\\%_\n\0"))), max_size=12)
_str_lit = st.one_of(
    _str_body.map(lambda s: "'" + s.replace("\\", "\\\\").replace("'", "''") + "'"),
    _str_body.map(lambda s: '"' + s.replace("\\", "\\\\").replace('"', '""') + '"'),
    st.sampled_from(["''", "'\\''", "'a''b'", "_utf8mb4'x'", "N'abc'", "'\\\\'", "'%'", "'2024-01-02'"]),
)
literal = st.one_of(_num_lit, _str_lit,
                    st.sampled_from(["NULL", "TRUE", "FALSE", "?", "@v", "@@autocommit", "DEFAULT",
                                     "DATE '2024-01-01'", "CURRENT_TIMESTAMP", "-?", "+1", "- -1"]))


class Tables(tuple):
    """Table names for the grammar, with the schema qualifiers it may use and whether it must stay harmless.

    `safe` grammar is what the session fuzz sends to real backends: no system schemas, no statements
    that act beyond the given tables (no INTO OUTFILE, no views, users or databases, no SHUTDOWN behind
    a hint), and INSERT ... SELECT from bounded sources only, so random writes stay small and local."""

    schemas: tuple[str, ...] = SCHEMAS
    safe: bool = False


def tables_of(names: Sequence[str], schemas: Sequence[str] = SCHEMAS, safe: bool = False) -> Tables:
    """A Tables value for the strategies below."""
    t = Tables(names)
    t.schemas = tuple(schemas)
    t.safe = safe
    return t


def _schemas(tables: Sequence[str]) -> tuple[str, ...]:
    return getattr(tables, "schemas", SCHEMAS)


def _safe(tables: Sequence[str]) -> bool:
    return bool(getattr(tables, "safe", False))


@st.composite
def table_ref(draw: st.DrawFn, tables: Sequence[str]) -> str:
    """[schema.]table, maybe backticked, in random case."""
    schemas = _schemas(tables)
    t = draw(st.sampled_from(list(tables)))
    t = draw(st.sampled_from([t, t.upper(), f"`{t}`"]))
    if draw(st.integers(0, 3)) == 0:
        s = draw(st.sampled_from(list(schemas)))
        s = draw(st.sampled_from([s, f"`{s}`"]))
        t = f"{s}.{t}"
    return t


@st.composite
def column(draw: st.DrawFn, qualifiers: Sequence[str] = ()) -> str:
    """A column, maybe qualified by a table or alias."""
    c = draw(st.sampled_from(COLUMNS))
    if qualifiers and draw(st.booleans()):
        c = f"{draw(st.sampled_from(list(qualifiers)))}.{c}"
    return c


@st.composite
def expr(draw: st.DrawFn, tables: Sequence[str], depth: int = 0) -> str:
    """A boolean condition: comparisons, IN, BETWEEN, IS NULL, LIKE, subqueries, AND/OR/NOT, parentheses."""
    quals = ("a", "b", *tables[:2])
    col = draw(column(quals))
    choice = draw(st.integers(0, 12 if depth < 2 else 7))
    if choice <= 2:
        op = draw(st.sampled_from(["=", "=", "<", ">", "<=", ">=", "<>", "!=", "<=>"]))
        right = draw(st.one_of(literal, column(quals)))
        return draw(st.sampled_from([f"{col} {op} {right}", f"{right}{op}{col}"]))
    if choice == 3:
        items = draw(st.lists(literal, min_size=1, max_size=5))
        neg = draw(st.sampled_from(["", "NOT "]))
        return f"{col} {neg}IN ({', '.join(items)})"
    if choice == 4:
        return f"{col} BETWEEN {draw(literal)} AND {draw(literal)}"
    if choice == 5:
        return f"{col} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if choice == 6:
        return f"{col} LIKE {draw(_str_lit)}"
    if choice == 7:
        return draw(st.sampled_from(["1", "0", "TRUE", "1=1", "1=0", "id = id", "(id, name) = (1, 'a')"]))
    if choice == 8:
        return f"NOT ({draw(expr(tables, depth + 1))})"
    if choice == 9:
        conj = draw(st.sampled_from([" AND ", " OR ", " XOR ", " && ", " || "]))
        return f"{draw(expr(tables, depth + 1))}{conj}{draw(expr(tables, depth + 1))}"
    if choice == 10:
        return f"({draw(expr(tables, depth + 1))})"
    if choice == 11:
        sub = draw(select_stmt(tables, depth + 1))
        return draw(st.sampled_from([f"{col} IN ({sub})", f"EXISTS ({sub})", f"{col} = ({sub})"]))
    return f"{col} = {draw(literal)} AND {draw(expr(tables, depth + 1))}"


@st.composite
def select_item(draw: st.DrawFn) -> str:
    """One item of a SELECT list."""
    return draw(st.one_of(
        st.sampled_from(["*", "a.*", "COUNT(*)", "count(id)", "SUM(id)", "MIN(id)", "MAX(name)", "AVG(k)",
                         "COUNT(DISTINCT id)", "GROUP_CONCAT(name)", "DATABASE()", "id + 1", "CONCAT(name, 'x')",
                         "CASE WHEN id > 1 THEN 'a' ELSE 'b' END", "@@version_comment", "LAST_INSERT_ID()",
                         "1", "NULL", "id AS x", "name `n`", "(SELECT 1)", "ROW_NUMBER() OVER (ORDER BY id)"]),
        column(("a", "b")),
        literal,
    ))


@st.composite
def from_clause(draw: st.DrawFn, tables: Sequence[str]) -> str:
    """FROM with one table or joins."""
    first = draw(table_ref(tables))
    out = f"{first}{draw(st.sampled_from(['', ' a', ' AS a']))}"
    for _ in range(draw(st.integers(0, 2))):
        join = draw(st.sampled_from(["JOIN", "INNER JOIN", "LEFT JOIN", "LEFT OUTER JOIN", "RIGHT JOIN",
                                     "CROSS JOIN", "STRAIGHT_JOIN", "NATURAL JOIN", ","]))
        t = draw(table_ref(tables))
        alias = draw(st.sampled_from([" b", " AS b", "", " c"]))
        cond = draw(st.sampled_from(["", " ON a.id = b.id", " USING (id)", " ON a.id = b.id AND b.id = 3",
                                     " ON 1", " ON a.name = b.name"]))
        out += f" {join} {t}{alias}{cond if join != ',' else ''}"
    if draw(st.integers(0, 6)) == 0:
        out = f"({draw(select_stmt(tables, 2))}) AS d" + draw(st.sampled_from(["", ", " + first]))
    return out


@st.composite
def select_stmt(draw: st.DrawFn, tables: Sequence[str], depth: int = 0) -> str:
    """A SELECT with optional DISTINCT, joins, WHERE, GROUP BY, HAVING, ORDER BY, LIMIT, UNION, CTE."""
    parts = [draw(kw("SELECT"))]
    if draw(st.integers(0, 4)) == 0:
        parts.append(draw(st.sampled_from(["DISTINCT", "ALL", "SQL_NO_CACHE", "HIGH_PRIORITY",
                                           "SQL_CALC_FOUND_ROWS", "STRAIGHT_JOIN"])))
    parts.append(", ".join(draw(st.lists(select_item(), min_size=1, max_size=4))))
    if draw(st.integers(0, 7)):
        parts.append(f"{draw(kw('FROM'))} {draw(from_clause(tables))}")
        if draw(st.booleans()):
            parts.append(f"{draw(kw('WHERE'))} {draw(expr(tables, depth))}")
        if draw(st.integers(0, 3)) == 0:
            parts.append(f"GROUP BY {draw(column(('a',)))}" + draw(st.sampled_from(["", " WITH ROLLUP"])))
            if draw(st.booleans()):
                parts.append(f"HAVING {draw(st.sampled_from(['COUNT(*) > 1', 'SUM(id) < 5', 'id = 1']))}")
        if draw(st.integers(0, 2)) == 0:
            parts.append(f"ORDER BY {draw(column(('a',)))} {draw(st.sampled_from(['', 'ASC', 'DESC']))}"
                         + draw(st.sampled_from(["", ", 1", ", name DESC", ", id + 1"])))
        if draw(st.integers(0, 2)) == 0:
            parts.append(draw(st.sampled_from(["LIMIT 1", "LIMIT 10", "LIMIT 2, 3", "LIMIT 5 OFFSET 2", "LIMIT ?",
                                               "LIMIT 0", "LIMIT 18446744073709551615", "LIMIT -1",
                                               "LIMIT 1,", "LIMIT ? OFFSET ?"])))
        if draw(st.integers(0, 6)) == 0:
            tails = ["FOR UPDATE", "LOCK IN SHARE MODE", "FOR SHARE", "INTO @x"]
            parts.append(draw(st.sampled_from(tails if _safe(tables) else tails + ["INTO OUTFILE '/tmp/x'"])))
    sql = " ".join(parts)
    if depth < 2 and draw(st.integers(0, 8)) == 0:
        sql += f" {draw(st.sampled_from(['UNION', 'UNION ALL', 'UNION DISTINCT', 'EXCEPT', 'INTERSECT']))} " \
               + draw(select_stmt(tables, depth + 1))
    if depth == 0 and draw(st.integers(0, 10)) == 0:
        sql = f"WITH cte AS ({draw(select_stmt(tables, 1))}) {sql}"
    if depth == 0 and draw(st.integers(0, 12)) == 0:
        sql = f"({sql})"
    return sql


@st.composite
def insert_stmt(draw: st.DrawFn, tables: Sequence[str]) -> str:
    """INSERT/REPLACE with VALUES rows, SET, or SELECT, and ON DUPLICATE KEY UPDATE."""
    verb = draw(st.sampled_from(["INSERT", "INSERT IGNORE", "REPLACE", "INSERT LOW_PRIORITY", "insert into"]))
    t = draw(table_ref(tables))
    into = "" if verb.endswith("into") else draw(st.sampled_from([" INTO", " INTO", ""]))
    cols = draw(st.lists(st.sampled_from(["id", "name", "k", "`id`", "c"]), min_size=0, max_size=3))
    collist = f" ({', '.join(cols)})" if cols or draw(st.booleans()) else ""
    how = draw(st.integers(0, 5))
    if how <= 3:
        width = max(len(cols), 1) + draw(st.sampled_from([0, 0, 0, 1, -1]))
        rows = draw(st.lists(st.lists(literal, min_size=max(width, 0), max_size=max(width, 0)),
                             min_size=1, max_size=4))
        row_kw = draw(st.sampled_from(["", "", "ROW"]))
        body = f" {draw(st.sampled_from(['VALUES', 'VALUE', 'values']))} " + ", ".join(
            f"{row_kw}({', '.join(r)})" for r in rows)
    elif how == 4:
        body = " SET " + ", ".join(f"{c} = {draw(literal)}" for c in (cols or ["id"]))
        collist = ""
    elif _safe(tables):
        src = draw(st.sampled_from(list(tables)))
        body = " " + draw(st.sampled_from(["SELECT 1, 'a'", f"SELECT id, name FROM {src} WHERE id = 1",
                                            f"SELECT * FROM {src} LIMIT 2", f"SELECT id FROM {src} ORDER BY id LIMIT 1"]))
    else:
        body = " " + draw(select_stmt(tables, 1))
    sql = f"{verb}{into} {t}{collist}{body}"
    if verb.startswith("INSERT") and draw(st.integers(0, 4)) == 0:
        sql += f" ON DUPLICATE KEY UPDATE {draw(st.sampled_from(['name', 'id', 'k']))} = " \
               + draw(st.sampled_from(["VALUES(name)", "1", "name", "'x'", "id + 1"]))
    return sql


@st.composite
def update_stmt(draw: st.DrawFn, tables: Sequence[str]) -> str:
    """UPDATE single- and multi-table, with SET, WHERE, ORDER BY, LIMIT."""
    t = draw(table_ref(tables))
    target = t + draw(st.sampled_from(["", " a", f", {draw(table_ref(tables))}",
                                       f" a JOIN {draw(table_ref(tables))} b ON a.id = b.id"]))
    sets = ", ".join(f"{draw(column(('a', 'b')))} = {draw(st.one_of(literal, column()))}"
                     for _ in range(draw(st.integers(1, 3))))
    sql = f"{draw(kw('UPDATE'))} {draw(st.sampled_from(['', 'LOW_PRIORITY ', 'IGNORE ']))}{target} SET {sets}"
    if draw(st.integers(0, 4)):
        sql += f" WHERE {draw(expr(tables))}"
    sql += draw(st.sampled_from(["", "", " ORDER BY id", " LIMIT 1", " ORDER BY id DESC LIMIT 2"]))
    return sql


@st.composite
def delete_stmt(draw: st.DrawFn, tables: Sequence[str]) -> str:
    """DELETE single- and multi-table."""
    t = draw(table_ref(tables))
    form = draw(st.integers(0, 3))
    if form == 0:
        sql = f"DELETE a FROM {t} a JOIN {draw(table_ref(tables))} b ON a.id = b.id"
    elif form == 1:
        sql = f"DELETE FROM {t} USING {t} JOIN {draw(table_ref(tables))}"
    else:
        sql = f"{draw(kw('DELETE'))} {draw(st.sampled_from(['', 'LOW_PRIORITY ', 'QUICK ', 'IGNORE ']))}FROM {t}"
    if draw(st.integers(0, 4)):
        sql += f" WHERE {draw(expr(tables))}"
    sql += draw(st.sampled_from(["", "", " LIMIT 1", " ORDER BY id LIMIT 3", " RETURNING *"]))
    return sql


_COLUMN_DEFS = ("id INT PRIMARY KEY", "id BIGINT NOT NULL", "name VARCHAR(20)", "k INT DEFAULT 0",
                "pad CHAR(60) NOT NULL DEFAULT ''", "c TEXT", "PRIMARY KEY (id)", "KEY k_1 (k)",
                "UNIQUE KEY (name)", "code VARCHAR(10) CHARACTER SET utf8mb4", "id INT AUTO_INCREMENT",
                "ts TIMESTAMP DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP", "CHECK (id > 0)",
                "FOREIGN KEY (k) REFERENCES other(id)")


@st.composite
def ddl_stmt(draw: st.DrawFn, tables: Sequence[str]) -> str:
    """CREATE/DROP/ALTER/TRUNCATE/RENAME TABLE, CREATE/DROP INDEX, views, databases."""
    t = draw(table_ref(tables))
    other = draw(table_ref(tables))
    form = draw(st.integers(0, 11))
    if _safe(tables) and form == 10:
        form = 0
    if form <= 2:
        cols = ", ".join(draw(st.lists(st.sampled_from(_COLUMN_DEFS), min_size=1, max_size=4)))
        opts = draw(st.sampled_from(["", " ENGINE=InnoDB", " DEFAULT CHARSET=utf8mb4", " AUTO_INCREMENT=5",
                                     " COMMENT='x'", " PARTITION BY HASH(id) PARTITIONS 2"]))
        return f"CREATE {draw(st.sampled_from(['', 'TEMPORARY ']))}TABLE " \
               f"{draw(st.sampled_from(['', 'IF NOT EXISTS ']))}{t} ({cols}){opts}"
    if form == 3:
        return f"CREATE TABLE {t} LIKE {draw(table_ref(tables))}"
    if form == 4:
        src = f"SELECT * FROM {other} LIMIT 3" if _safe(tables) else draw(select_stmt(tables, 1))
        return f"CREATE TABLE {t} AS {src}"
    if form == 5:
        more = draw(st.sampled_from(["", f", {draw(table_ref(tables))}"]))
        return f"DROP {draw(st.sampled_from(['', 'TEMPORARY ']))}TABLE " \
               f"{draw(st.sampled_from(['', 'IF EXISTS ']))}{t}{more}"
    if form == 6:
        spec = draw(st.sampled_from(["ADD COLUMN x INT", "ADD x INT AFTER id", "DROP COLUMN name", "MODIFY name TEXT",
                                     "CHANGE name name2 VARCHAR(5)", "ADD INDEX i (k)", "DROP INDEX i",
                                     f"RENAME TO {other}", "ENGINE=InnoDB", "ADD PRIMARY KEY (id)",
                                     "ALGORITHM=INPLACE, LOCK=NONE", "AUTO_INCREMENT=10", "CONVERT TO CHARACTER SET latin1"]))
        return f"ALTER {draw(st.sampled_from(['', 'ONLINE ', 'IGNORE ']))}TABLE {t} {spec}"
    if form == 7:
        return f"TRUNCATE {draw(st.sampled_from(['', 'TABLE ']))}{t}"
    if form == 8:
        return f"RENAME TABLE {t} TO {other}" + draw(st.sampled_from(["", f", {other} TO {t}"]))
    if form == 9:
        return draw(st.sampled_from([f"CREATE INDEX i ON {t} (k)", f"CREATE UNIQUE INDEX i ON {t} (id, name)",
                                     f"DROP INDEX i ON {t}", f"CREATE FULLTEXT INDEX i ON {t} (c)"]))
    if form == 10:
        return draw(st.sampled_from([f"CREATE VIEW v AS SELECT * FROM {t}", "DROP VIEW v", "CREATE DATABASE d",
                                     "DROP DATABASE d", "CREATE SCHEMA IF NOT EXISTS d", f"CREATE TRIGGER tr BEFORE "
                                     f"INSERT ON {t} FOR EACH ROW SET @x = 1", "CREATE PROCEDURE p() SELECT 1",
                                     "DROP FUNCTION f", "CREATE EVENT e ON SCHEDULE EVERY 1 DAY DO SELECT 1",
                                     "CREATE USER u", "ALTER DATABASE d CHARACTER SET utf8"]))
    return f"{draw(st.sampled_from(['ANALYZE', 'OPTIMIZE', 'REPAIR', 'CHECK', 'CHECKSUM']))} TABLE {t}"


@st.composite
def misc_stmt(draw: st.DrawFn, tables: Sequence[str]) -> str:
    """SHOW/DESC/EXPLAIN, session statements and statements the proxy refuses."""
    t = draw(table_ref(tables))
    return draw(st.sampled_from([s for s in _MISC(t) if not (_safe(tables) and s.split()[0] in _UNSAFE)]))


_UNSAFE = frozenset({"SHUTDOWN", "KILL", "FLUSH", "GRANT", "XA", "CALL", "LOAD", "HANDLER", "PREPARE", "EXECUTE",
                     "DEALLOCATE", "HELP"})


def _MISC(t: str) -> list[str]:  # noqa: N802 - a table of statements
    return [
        "SHOW TABLES", "SHOW FULL TABLES", "SHOW TABLES FROM schema1", "SHOW TABLES LIKE 'sh%'",
        "SHOW FULL TABLES WHERE Table_type = 'BASE TABLE'", "SHOW TABLES WHERE x = 1", "SHOW DATABASES",
        "SHOW DATABASES LIKE 's_h%'", f"SHOW CREATE TABLE {t}", f"SHOW COLUMNS FROM {t}", f"SHOW INDEX FROM {t}",
        f"SHOW FULL COLUMNS FROM {t} FROM schema1", "SHOW VARIABLES LIKE 'max%'", "SHOW WARNINGS", "SHOW ERRORS",
        "SHOW STATUS", "SHOW PROCESSLIST", "SHOW TABLE STATUS", "SHOW ENGINES", "SHOW CREATE DATABASE schema1",
        f"DESC {t}", f"DESCRIBE {t} id", f"EXPLAIN SELECT * FROM {t} WHERE id = 1", f"EXPLAIN {t}",
        "SET autocommit = 0", "SET autocommit=1", "SET NAMES utf8mb4", "SET NAMES latin1 COLLATE latin1_bin",
        "SET @a = 1", "SET @@session.sql_mode = 'ANSI'", "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "SET GLOBAL x = 1", "SET x", "SET", "SET CHARACTER SET utf8", "SET tx_read_only = 0",
        "USE schema1", "USE `schema2`", "USE nosuch", "USE", "USE ;", "BEGIN", "START TRANSACTION",
        "START SLAVE", "COMMIT", "ROLLBACK", "SAVEPOINT sp1", "ROLLBACK TO sp1", "ROLLBACK TO SAVEPOINT `s``p`",
        "RELEASE SAVEPOINT sp1", "LOCK TABLES t READ", "UNLOCK TABLES", "LOAD DATA INFILE 'x' INTO TABLE t",
        "KILL 1", "KILL QUERY 5", "FLUSH TABLES", "GRANT ALL ON *.* TO u", "XA START 'x'", "CALL p()",
        "PREPARE s FROM 'SELECT 1'", "EXECUTE s", "DEALLOCATE PREPARE s", "DO 1", "DO SLEEP(0)",
        "HANDLER t OPEN", f"TABLE {t}", "VALUES ROW(1)", "HELP 'x'", "SHUTDOWN", "SELECT DATABASE()",
        "SELECT @@version_comment LIMIT 1", "select connection_id()", "SELECT USER(), LAST_INSERT_ID()",
        "SELECT @@max_allowed_packet, @@system_time_zone", "SELECT 1 FROM DUAL", "SELECT SLEEP(0)",
    ]


def decorate(draw: st.DrawFn, sql: str) -> str:
    """Random comments, hints, version comments, case, whitespace and a trailing semicolon around sql."""
    pre = draw(st.sampled_from([
        "", "", "", "", "/* c */ ", "-- c\n", "# c\n", "/*!pydble:shardingNode=dn1*/ ", "/*!dble:shardingNode=dn2*/",
        "/*!pydble:shardingNode=dn9*/ ", "/*!pydble:sql=select 1*/ ", "/*!pydble:shardingNode=dn5*/", "/*!pydble:shardingNode=*/ ",
        "/*!pydble:shardingNode=dn1 ", "/*!dble:db_type=master*/ ", "/*+ MAX_EXECUTION_TIME(1) */ ",
        "/*!40101 */ ", "\n\t ", "(", "/*!pydble:shardingNode=dn5*/ /* x */ ",
    ]))
    if draw(st.integers(0, 15)) == 0:
        sql = f"/*!40101 {sql}*/"
    post = draw(st.sampled_from(["", "", "", ";", " ;", ";;", "; ", " -- tail", " /* tail */", "\n", " #", ")",
                                 "/*", "'", "`", "\\"]))
    return pre + sql + post


@st.composite
def sql_statement(draw: st.DrawFn, tables: Sequence[str] = EXAMPLE_TABLES, ddl_tables: Sequence[str] | None = None,
                  session: bool = True) -> str:
    """One plausible MySQL statement over `tables`, decorated (DDL over `ddl_tables`, default `tables`)."""
    kind = draw(st.integers(0, 9))
    if kind <= 3:
        sql = draw(select_stmt(tables))
    elif kind == 4:
        sql = draw(insert_stmt(tables))
    elif kind == 5:
        sql = draw(update_stmt(tables))
    elif kind == 6:
        sql = draw(delete_stmt(tables))
    elif kind == 7:
        sql = draw(ddl_stmt(ddl_tables if ddl_tables is not None else tables))
    elif kind == 8 and session:
        sql = draw(misc_stmt(tables))
    else:
        sql = draw(select_stmt(tables))
    return decorate(draw, sql)


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[str]) -> str:
    """A statement from base with a few random edits: cut, delete, duplicate, insert a token or a byte."""
    sql = draw(base)
    for _ in range(draw(st.integers(1, 3))):
        n = len(sql)
        i = draw(st.integers(0, n))
        op = draw(st.integers(0, 4))
        if op == 0:
            sql = sql[:i]
        elif op == 1:
            j = draw(st.integers(i, min(n, i + 8)))
            sql = sql[:i] + sql[j:]
        elif op == 2:
            j = draw(st.integers(i, min(n, i + 12)))
            sql = sql[:j] + sql[i:j] + sql[j:]
        elif op == 3:
            tok = draw(st.one_of(st.sampled_from(KEYWORDS), st.sampled_from(PUNCT), literal))
            sql = sql[:i] + f" {tok} " + sql[i:]
        else:
            sql = sql[:i] + draw(st.characters()) + sql[i:]
    return sql


@st.composite
def token_soup(draw: st.DrawFn, tables: Sequence[str] = EXAMPLE_TABLES) -> str:
    """Keywords, names, punctuation and literals in random order: reaches parser corners random text cannot."""
    atoms = st.one_of(st.sampled_from(KEYWORDS), st.sampled_from(PUNCT), st.sampled_from(list(tables)),
                      st.sampled_from(_schemas(tables)), st.sampled_from(COLUMNS), literal)
    toks = draw(st.lists(atoms, min_size=1, max_size=30))
    seps = draw(st.lists(st.sampled_from(["", " ", " ", "\n", "."]), min_size=len(toks), max_size=len(toks)))
    return "".join(t + s for t, s in zip(toks, seps))


def surrogate_text(max_size: int = 200) -> st.SearchStrategy[str]:
    """Text as the session decodes client bytes: UTF-8 with surrogateescape, so lone surrogates occur."""
    return st.binary(max_size=max_size).map(lambda b: b.decode("utf-8", "surrogateescape"))


def any_sql(tables: Sequence[str] = EXAMPLE_TABLES) -> st.SearchStrategy[str]:
    """Everything: arbitrary text, token soup, grammar SQL and mutated grammar SQL."""
    return st.one_of(
        st.text(max_size=200),
        surrogate_text(),
        token_soup(tables),
        sql_statement(tables),
        mutated(sql_statement(tables)),
    )


# -- manager commands -----------------------------------------------------------------------------------

_M_NAME = st.one_of(st.sampled_from(["schema1", "sharding_4_t1", "t", "`s`", "'s'", '"s"', "", "x.y", "'", "`"]),
                    st.text(max_size=8))


@st.composite
def manager_command(draw: st.DrawFn) -> str:
    """Manager-port commands: the real ones with random filters, and near misses."""
    head = draw(st.sampled_from(["reload @@metadata", "check @@metadata", "check full @@metadata", "show @@ddl",
                                 "kill @@ddl_lock", "show @@cluster", "show @@help", "show @@backend",
                                 "RELOAD @@METADATA", "show @@", "reload @@metadata2", "check  full @@metadata",
                                 "show @@ddl_history", "show @@help;", ""]))
    where = draw(st.one_of(
        st.just(""),
        st.builds(lambda s, t: f" where schema={s} and table={t}", _M_NAME, _M_NAME),
        st.builds(lambda s: f" where schema = {s}", _M_NAME),
        st.builds(lambda items: " where table in (" + ",".join(items) + ")",
                  st.lists(st.one_of(_M_NAME, st.builds(lambda a, b: f"{a}.{b}", _M_NAME, _M_NAME)), max_size=4)),
        st.builds(lambda op, t: f" where reload_time {op} '{t}'",
                  st.sampled_from([">=", "<=", "=", ">", "<", "=="]),
                  st.one_of(st.sampled_from(["2024-01-02 10:00:00", "2024/1/2", "9999-99-99 99:99:99",
                                             "0000-00-00", "2024-01-02T10:00"]), st.text(max_size=20))),
        st.sampled_from([" where reload_time is null", " where consistent_in_sharding_nodes=0",
                         " where consistent_in_memory = '1'", " where consistent_in_data_nodes=2", " where",
                         " where where", " WHERE schema='a' AND table='b' AND x", " where table in (", " where table in ()"]),
        st.text(max_size=30).map(lambda s: " where " + s),
    ))
    return head + where + draw(st.sampled_from(["", ";", " ;", "  "]))


# -- wire-level payloads ----------------------------------------------------------------------------------

@st.composite
def handshake_responses(draw: st.DrawFn) -> bytes:
    """HandshakeResponse41-shaped payloads: random capability bits and fields, maybe cut or extended."""
    caps = draw(st.integers(0, 2 ** 32 - 1)) | (C.PROTOCOL_41 if draw(st.integers(0, 5)) else 0)
    out = struct.pack("<IIB", caps, draw(st.integers(0, 2 ** 32 - 1)), draw(st.integers(0, 255))) + b"\x00" * 23
    out += draw(st.binary(max_size=12)).replace(b"\x00", b"") + b"\x00"
    auth = draw(st.binary(max_size=30))
    form = draw(st.integers(0, 2))
    out += lenenc_int(len(auth)) + auth if form == 0 else bytes((len(auth),)) + auth if form == 1 else auth + b"\x00"
    out += draw(st.binary(max_size=10)) + draw(st.sampled_from([b"", b"\x00"]))
    out += draw(st.sampled_from([b"", b"mysql_native_password\x00", b"caching_sha2_password\x00", b"x"]))
    if draw(st.booleans()):
        attrs = b"".join(lenenc_int(len(k)) + k + lenenc_int(len(v)) + v
                         for k, v in draw(st.lists(st.tuples(st.binary(max_size=5), st.binary(max_size=5)),
                                                   max_size=3)))
        out += lenenc_int(len(attrs) + draw(st.integers(-2, 2)) if attrs else 0) + attrs
    if draw(st.integers(0, 3)) == 0:
        out = out[:draw(st.integers(0, len(out)))]
    return out


PARAM_TYPES = sorted({*C.NUMERIC_TYPES, C.T_NULL, C.T_DATE, C.T_DATETIME, C.T_TIMESTAMP, C.T_NEWDATE, C.T_TIME,
                      C.T_VAR_STRING, C.T_STRING, C.T_BLOB, C.T_JSON, C.T_BIT, 0x42, 0xFF})

u8, u16, u32 = st.integers(0, 255), st.integers(0, 0xFFFF), st.integers(0, 2 ** 32 - 1)
# Binary temporal values with every field over its whole wire range (not just valid dates and times).
temporal_values = st.one_of(
    st.builds(lambda y, mo, d: struct.pack("<BHBB", 4, y, mo, d), u16, u8, u8),
    st.builds(lambda y, mo, d, h, mi, s: struct.pack("<BHBBBBB", 7, y, mo, d, h, mi, s), u16, u8, u8, u8, u8, u8),
    st.builds(lambda y, mo, d, h, mi, s, us: struct.pack("<BHBBBBBI", 11, y, mo, d, h, mi, s, us),
              u16, u8, u8, u8, u8, u8, u32),
    st.builds(lambda n, days, h, mi, s: struct.pack("<BBIBBB", 8, n, days, h, mi, s), u8, u32, u8, u8, u8),
    st.builds(lambda n, days, h, mi, s, us: struct.pack("<BBIBBBI", 12, n, days, h, mi, s, us),
              u8, u32, u8, u8, u8, u32),
)
param_bytes = st.one_of(
    st.binary(max_size=16),
    temporal_values,
    st.builds(lambda n, b: bytes((n,)) + b, st.sampled_from([0, 4, 7, 8, 11, 12, 251, 252, 253, 254]),
              st.binary(max_size=14)),
)


@st.composite
def execute_payloads(draw: st.DrawFn, nparams: int) -> bytes:
    """COM_STMT_EXECUTE payloads: a real header, a NULL bitmap, maybe types, then random value bytes."""
    out = b"\x17" + struct.pack("<IBI", draw(st.integers(0, 2 ** 32 - 1)), draw(st.integers(0, 255)),
                                draw(st.integers(0, 2 ** 32 - 1)))
    if nparams:
        out += draw(st.binary(min_size=(nparams + 7) // 8, max_size=(nparams + 7) // 8))
        bound = draw(st.integers(0, 2))
        out += bytes((min(bound, 1),))
        if bound:
            for _ in range(nparams):
                out += bytes((draw(st.sampled_from(PARAM_TYPES)), draw(st.sampled_from([0, 0x80]))))
        for _ in range(nparams):
            out += draw(param_bytes)
    if draw(st.integers(0, 4)) == 0:
        out = out[:draw(st.integers(0, len(out)))]
    return out
