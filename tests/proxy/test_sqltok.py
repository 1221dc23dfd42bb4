"""The tokenizer: kinds, offsets, quoting rules, comments, first_keyword and split_statements."""

from __future__ import annotations

import timeit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.sqltok import first_keyword, hex_value, split_statements, tokenize, unquote_ident, unquote_string


def kinds(sql: str) -> list[tuple[str, str]]:
    return [(k, t) for k, t, _, _ in tokenize(sql)]


def test_point_select() -> None:
    assert kinds("SELECT c FROM sbtest1 WHERE id=5") == [
        ("w", "SELECT"), ("w", "c"), ("w", "FROM"), ("w", "sbtest1"), ("w", "WHERE"), ("w", "id"),
        ("o", "="), ("n", "5")]


def test_offsets_slice_back_to_the_text() -> None:
    sql = "select `a``b`, 'it''s', \"q\\\"x\" from s1.t -- tail\n where x >= -1.5e3"
    for _, text, start, end in tokenize(sql):
        assert sql[start:end] == text


@pytest.mark.parametrize("sql,expected", [
    ("'a''b'", [("s", "'a''b'")]),
    ("'a\\'b'", [("s", "'a\\'b'")]),
    ('"a""b"', [("s", '"a""b"')]),
    ("`weird``name`", [("q", "`weird``name`")]),
    ("12 1.5 .5 1e3 1.5E-3 5.", [("n", "12"), ("n", "1.5"), ("n", ".5"), ("n", "1e3"), ("n", "1.5E-3"), ("n", "5.")]),
    ("0x1F X'0a' x'' b'101' 0b11", [("x", "0x1F"), ("x", "X'0a'"), ("x", "x''"), ("x", "b'101'"), ("x", "0b11")]),
    ("1abc 0xyz t1 $x _utf8", [("w", "1abc"), ("w", "0xyz"), ("w", "t1"), ("w", "$x"), ("w", "_utf8")]),
    ("? @a @@session.autocommit @'q'", [("p", "?"), ("v", "@a"), ("v", "@@session.autocommit"), ("v", "@'q'")]),
    ("a<=>b<=c>=d<>e!=f:=g||h&&i->j->>k", [
        ("w", "a"), ("o", "<=>"), ("w", "b"), ("o", "<="), ("w", "c"), ("o", ">="), ("w", "d"), ("o", "<>"),
        ("w", "e"), ("o", "!="), ("w", "f"), ("o", ":="), ("w", "g"), ("o", "||"), ("w", "h"), ("o", "&&"),
        ("w", "i"), ("o", "->"), ("w", "j"), ("o", "->>"), ("w", "k")]),
    ("s1.t.c", [("w", "s1"), ("o", "."), ("w", "t"), ("o", "."), ("w", "c")]),
    ("id=-5", [("w", "id"), ("o", "="), ("o", "-"), ("n", "5")]),
])
def test_token_kinds(sql: str, expected: list[tuple[str, str]]) -> None:
    assert kinds(sql) == expected


def test_comments_are_skipped_but_hints_kept() -> None:
    sql = "/* c1 */ select -- c2\n 1 # c3\n /*!pydble:shardingNode=dn1*/ /*!40101 x */ --5"
    assert kinds(sql) == [("w", "select"), ("n", "1"), ("h", "/*!pydble:shardingNode=dn1*/"),
                          ("h", "/*!40101 x */"), ("o", "-"), ("o", "-"), ("n", "5")]


def test_double_dash_needs_a_space_to_be_a_comment() -> None:
    assert kinds("1--2") == [("n", "1"), ("o", "-"), ("o", "-"), ("n", "2")]
    assert kinds("1 --") == [("n", "1")]


@pytest.mark.parametrize("sql", ["select 'abc", 'select "abc', "select `abc", "select /* abc"])
def test_unterminated_quotes_and_comments_are_error_tokens(sql: str) -> None:
    assert any(k == "e" for k, _ in kinds(sql))


def test_first_keyword() -> None:
    assert first_keyword("SELECT 1") == "SELECT"
    assert first_keyword("  /* x */ -- y\n # z\n  insert into t values (1)") == "INSERT"
    assert first_keyword("/*!pydble:shardingNode=dn1*/ update t set a=1") == "UPDATE"
    assert first_keyword("/*!40101 SET NAMES utf8 */") == "SET"
    assert first_keyword("((select 1)) union (select 2)") == "SELECT"
    assert first_keyword("") == ""
    assert first_keyword("   ") == ""
    assert first_keyword("begin") == "BEGIN"


def test_split_statements() -> None:
    sql = "select 1; select ';' ; -- only a comment\n ; /* x; */ insert into t values (1);  "
    assert split_statements(sql) == ["select 1", "select ';'", "/* x; */ insert into t values (1)"]
    assert split_statements("select 1") == ["select 1"]
    assert split_statements("  ") == []
    assert split_statements("-- nothing") == []
    assert split_statements("select 'a;b'; select \"c;d\"") == ["select 'a;b'", 'select "c;d"']
    assert split_statements("select 1; select 'oops; select 2") == ["select 1", "select 'oops; select 2"]


def test_unquoting_helpers() -> None:
    assert unquote_ident("`a``b`") == "a`b"
    assert unquote_ident("plain") == "plain"
    assert unquote_string("'it''s'") == "it's"
    assert unquote_string(r"'a\nb\tc\\d\'e\%f\_g\0'") == "a\nb\tc\\d'e\\%f\\_g\0"
    assert unquote_string('"say ""hi"""') == 'say "hi"'
    assert hex_value("0x1F") == b"\x1f"
    assert hex_value("X'0a0B'") == b"\n\x0b"
    assert hex_value("0xF") == b"\x0f"
    assert hex_value("b'100000001'") == b"\x01\x01"
    assert hex_value("0b1") == b"\x01"
    assert hex_value("b''") == b""


@given(st.text(max_size=200))
def test_any_text_tokenizes_with_exact_offsets(sql: str) -> None:
    toks = tokenize(sql)
    last = 0
    for kind, text, start, end in toks:
        assert sql[start:end] == text
        assert start >= last
        last = end
        assert kind in "wqsnxpvhoe"
    split_statements(sql)
    first_keyword(sql)


def test_point_select_is_fast() -> None:
    sql = "SELECT c FROM sbtest1 WHERE id=5"
    per_call = min(timeit.repeat(lambda: tokenize(sql), number=2000, repeat=5)) / 2000
    assert per_call < 50e-6  # typically ~4 us; generous for loaded CI machines


HOSTILE = {
    "quotes": "'" * 20001, "quote-a": "'a" * 10000, "open-comments": "/*" * 10000, "backticks": "`" * 20001,
    "dq-backslash": '"\\' * 10000, "open-hints": "/*!" * 7000, "var-quote": "@'" * 10000, "x-quote": "x'" * 10000,
    "digits-then-letter": "1" * 20000 + "x", "exponents": "1e" * 10000, "blanks-then-bang": " " * 20000 + "!",
    "parens": "(" * 20000, "dots": "." * 20000, "hex-then-letter": "0x" + "f" * 20000 + "g",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_costs_linear_time(name: str) -> None:
    """The session runs these on every query in one event loop: no backtracking blow-ups allowed."""
    sql = HOSTILE[name]
    start = timeit.default_timer()
    tokenize(sql)
    split_statements(sql)
    first_keyword(sql)
    assert timeit.default_timer() - start < 1.0


def test_doubled_quotes_lex_like_mysql() -> None:
    assert kinds("'a'''") == [("s", "'a'''")]
    assert kinds("'a'' 'b'") == [("s", "'a'' '"), ("w", "b"), ("e", "'")]   # '' is always an escaped quote
    assert kinds("'a''") == [("e", "'a''")]
    assert kinds("'a' 'b'") == [("s", "'a'"), ("s", "'b'")]
    assert kinds("select 'x") == [("w", "select"), ("e", "'x")]
