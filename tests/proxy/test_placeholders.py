"""Sans-I/O: where a `?` written as a literal would change a prepared statement's meaning (proxy/plan/placeholders.py)."""

from __future__ import annotations

import pytest

from proxy.plan.placeholders import positional_placeholder, select_aliases
from proxy.plan.sqltok import tokenize


@pytest.mark.parametrize("sql, names", [
    ("SELECT ?  +  1, CONCAT(?,  \"x\") , 5 = ? /* c */ , ? AS z, ? zz, (?) FROM t WHERE 1 = ?",
     ["?  +  1", 'CONCAT(?,  "x")', "5 = ?", "?"]),
    ("SELECT CASE WHEN k % 3 = ? THEN 1 ELSE 0 END FROM t", ["CASE WHEN k % 3 = ? THEN 1 ELSE 0 END"]),
    ("SELECT DISTINCT ?, id FROM t", ["?"]),
    ("SELECT ? IS NULL", ["? IS NULL"]),
    ("SELECT (? > 0), ((?)), ((? + 1))", ["(? > 0)", "?", "((? + 1))"]),   # MariaDB keeps an expression's parentheses
    ("SELECT ? LIKE 'a%', ? = 'b'", ["? LIKE 'a%'", "? = 'b'"]),   # a string after an operator is no alias
    ("SELECT ? 'x', ? `y`, ? AS \"z\"", []),          # aliased already: an alias added would be a syntax error
    ("SELECT a FROM t WHERE id = ?", []),
    ("SELECT ? UNION SELECT ?", ["?"]),               # the first branch names the columns
    ("INSERT INTO t VALUES (?)", []),
])
def test_unaliased_items_are_named_after_their_text(sql: str, names: list[str]) -> None:
    got = select_aliases(sql, tokenize(sql))
    assert [a[1] for a in got] == [f" AS `{n}`" for n in names]
    for at, _ in got:   # each alias goes right after its item
        assert sql[:at].rstrip() == sql[:at]


@pytest.mark.parametrize("sql, positional", [
    ("SELECT a FROM t ORDER BY ?", True),
    ("SELECT a FROM t GROUP BY a, ? DESC", True),
    ("SELECT a FROM t WHERE a IN (SELECT b FROM u ORDER BY ?)", True),
    ("SELECT a FROM t ORDER BY a + ?", False),
    ("SELECT a FROM t WHERE a IN (?, ?)", False),
    ("SELECT a, ? FROM t", False),
    ("SELECT a FROM t ORDER BY f(?, 1), g(1, ?)", False),
    ("SELECT a FROM t ORDER BY a LIMIT ?", False),
    ("INSERT INTO t VALUES (?, ?)", False),
])
def test_a_placeholder_alone_in_order_or_group_by_is_found(sql: str, positional: bool) -> None:
    assert positional_placeholder(tokenize(sql)) is positional
