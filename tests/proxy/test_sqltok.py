"""The tokenizer: kinds, offsets, quoting rules, comments, first_keyword and split_statements."""

from __future__ import annotations

import timeit
from typing import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.plan import sqltok
from proxy.plan.sqltok import first_keyword, hex_value, split_statements, tokenize, unquote_ident, unquote_string


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
                          ("w", "x"), ("o", "-"), ("o", "-"), ("n", "5")]


@pytest.fixture
def mariadb_10_11() -> Iterator[None]:
    """Version comments read as a MariaDB 10.11 server reads them (pydble advertises its backends' version)."""
    sqltok.set_server_version("5.5.5-10.11.19-MariaDB-0+deb12u1")
    yield
    sqltok.set_server_version("5.7.21-pydble")


@pytest.mark.parametrize("sql, words", [
    ("/*!40100 SET @@SQL_MODE='' */", ["SET", "@@SQL_MODE", "=", "''"]),
    ("/*!40101 SET NAMES utf8mb4 */", ["SET", "NAMES", "utf8mb4"]),
    ("/*M!100616 SET NOTE_VERBOSITY=1 */", ["SET", "NOTE_VERBOSITY", "=", "1"]),
    ("/*M!999999\\- enable the sandbox mode */", []),               # newer than the server: a comment
    ("/*!50717 SELECT 1 */", []),                                    # MySQL 5.7+ versions: MariaDB ignores them
    ("/*!80000 SET x=1 */", []),
    ("/*! SELECT 3 */", ["SELECT", "3"]),                             # no number: always runs
    ("/*!1234 x */", ["1234", "x"]),                                  # not five digits: no version
    ("SELECT /*!40001 SQL_NO_CACHE */ * FROM t", ["SELECT", "SQL_NO_CACHE", "*", "FROM", "t"]),
    ("CREATE TABLE t (a INT) /*!40101 DEFAULT CHARSET=utf8 */", ["CREATE", "TABLE", "t", "(", "a", "INT", ")",
                                                                  "DEFAULT", "CHARSET", "=", "utf8"]),
    ("/*!pydble:shardingNode=dn1*/ SELECT 1", ["/*!pydble:shardingNode=dn1*/", "SELECT", "1"]),
])
def test_version_comments_run_as_mariadb_runs_them(mariadb_10_11: None, sql: str, words: list[str]) -> None:
    toks = sqltok.tokenize(sql)
    assert [t[1] for t in toks] == words
    assert all(sql[t[2]:t[3]] == t[1] for t in toks)   # offsets still point into the original text
    first = next((w for w in words if not w.startswith("/*")), "")
    assert sqltok.first_keyword(sql) == (first.upper() if first[:1].isalpha() else "")


def test_version_comments_on_a_mysql_server() -> None:
    sqltok.set_server_version("8.0.36")
    try:
        assert [t[1] for t in sqltok.tokenize("/*!50717 SELECT 1 */")] == ["SELECT", "1"]
        assert sqltok.tokenize("/*M!100100 SELECT 1 */") == []          # MySQL: a plain comment
        assert sqltok.tokenize("/*!80040 SELECT 1 */") == []
    finally:
        sqltok.set_server_version("5.7.21-pydble")


def test_split_statements_sees_semicolons_inside_running_version_comments(mariadb_10_11: None) -> None:
    assert sqltok.split_statements("/*!40101 SET @a=1 */;\n/*!50000 SELECT ';' */; SELECT 2") == [
        "/*!40101 SET @a=1 */", "/*!50000 SELECT ';' */", "SELECT 2"]


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
    "nested-version-comments": "/*!40101 " * 7000 + "*/" * 7000,
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
