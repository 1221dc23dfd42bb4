"""The router's parser on its own: token positions it finds, with a resolver that needs no config."""

from __future__ import annotations

import pytest

from meta.errors import ParseError
from proxy.plan.analysis import Table
from proxy.plan.parser import Parser
from proxy.plan.sqltok import tokenize


def parser(sql: str) -> Parser:
    """A parser whose tables all live on one node of a schema `s`."""
    return Parser(lambda parts, schema: Table(schema or "s", parts[-1].lower(), "single", ("dn1",)),
                  tokenize(sql), "s")


def texts(p: Parser, ranges: list[tuple[int, int]]) -> list[str]:
    return [" ".join(t[1] for t in p.toks[a:b]) for a, b in ranges]


def test_comma_skips_parenthesised_commas() -> None:
    p = parser("a, f(b, c), (d, (e, f)), g")
    first = p.comma(0, p.n)
    assert p.toks[first][1] == "," and first == 1
    second = p.comma(first + 1, p.n)
    assert texts(p, [(first + 1, second)]) == ["f ( b , c )"]
    third = p.comma(second + 1, p.n)
    assert texts(p, [(second + 1, third)]) == ["( d , ( e , f ) )"]
    assert p.comma(third + 1, p.n) == p.n   # none left: the end


def test_comma_stays_inside_its_range() -> None:
    p = parser("a, b c d, e")       # a , b c d , e: commas at 1 and 5
    assert p.comma(2, 4) == 4       # the comma at 5 is past the range: its end is returned
    assert p.comma(2, p.n) == 5


def test_unbalanced_parentheses_are_a_syntax_error() -> None:
    with pytest.raises(ParseError):
        parser("SELECT (1, 2")
    with pytest.raises(ParseError):
        parser("SELECT 1)")


def test_tables_are_resolved_through_the_callback() -> None:
    seen: list[tuple[list[str], str | None]] = []

    def resolve(parts: list[str], schema: str | None) -> Table:
        seen.append((parts, schema))
        return Table("s", parts[-1].lower(), "single", ("dn1",))

    p = Parser(resolve, tokenize("SELECT * FROM x.T1 JOIN t2 ON 1"), "s")
    p.query(0, p.n, None, {})
    assert seen == [(["x", "T1"], "s"), (["t2"], "s")]
    assert [r.table.name for r in p.refs] == ["t1", "t2"]
