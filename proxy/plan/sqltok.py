"""A fast MySQL tokenizer: one compiled regex, tokens as plain tuples with offsets into the SQL.

It sits on the per-query hot path, so tokens are tuples `(kind, text, start, end)` rather than objects.
Kinds (one letter, compared by identity-cheap string equality):

  w  word: keyword or unquoted identifier        q  `quoted identifier`
  s  'string' or "string"                        n  number: 12, 1.5, .5, 1e3
  x  hex/bit literal: x'0A', 0x0A, b'01', 0b01   p  ? placeholder
  v  @user_var / @@system.var                    h  /*!pydble:...*/ or /*!dble:...*/ hint
  o  operator or punctuation                     e  an unterminated string, identifier or comment
                                                    (it takes the rest of the text)

Plain comments (`-- `, `#`, `/* */`) and whitespace produce no token; since every token keeps its
offsets, callers rewrite the original text precisely and comments survive in what they forward.

Version comments are read as the server reads them, here and nowhere else: `/*!NNNNN text */` and
MariaDB's `/*M!NNNNNN text */` yield the tokens of `text` when the server version is at least NNNNN
and nothing otherwise; `/*! text */` without a number always yields them (see set_server_version).
As in MariaDB's lexer, the text of one that runs is code like any other (a `*/` inside its strings or
comments does not end it), one that does not run may hold one plain comment, and `/*!pydble:...*/` is a
hint only where it opens the statement.
"""

from __future__ import annotations

import re
from typing import Iterator


Token = tuple[str, str, int, int]

KIND, TEXT, START, END = 0, 1, 2, 3
LITERALS = frozenset("snx")

# Possessive loops lex like MySQL (a doubled quote is always an escaped quote) and never backtrack,
# so hostile input costs linear time: this runs before anything else on every query.
_STR1 = r"'(?:[^'\\]|\\[\s\S]|'')*+'"
_STR2 = r'"(?:[^"\\]|\\[\s\S]|"")*+"'
_QID = r"`(?:[^`]|``)*+`"

# MariaDB's lexer, not Python's Unicode classes: whitespace is ASCII's six, every character from U+0080 up is
# an identifier character (NBSP too), and `--` opens a comment before a space or a control character only
_WS = r"[ \t\n\v\f\r]"
WHITESPACE = " \t\n\v\f\r"   # what str.strip() must be given: its default strips NBSP and NEL, MariaDB's identifier characters
_ID = r"[0-9A-Za-z_$\u0080-\U0010ffff]"

_TOKEN_RE = re.compile(rf"""
    {_WS}*(?:
       (?P<w>(?![xXbB]')[A-Za-z_\u0080-\U0010ffff]{_ID}*)
      |(?P<o>[(),;=*+])
      |(?P<n>(?>[0-9]+(?:\.[0-9]*+)?|\.[0-9]++)(?>[eE][-+]?[0-9]++)?(?!{_ID}))
      |(?P<s>{_STR1}|{_STR2})
      |(?P<q>{_QID})
      |(?P<c>--(?=[\x00-\x20\x7f]|$)[^\n]*|\#[^\n]*|/\*(?!M?!)[\s\S]*?\*/)
      |(?P<h>/\*M?![\s\S]*?\*/)
      |(?P<x>[xX]'[0-9a-fA-F]*+'|[bB]'[01]*+'|0x[0-9a-fA-F]++(?!{_ID})|0b[01]++(?!{_ID}))
      |(?P<W>{_ID}+)
      |(?P<v>@@?(?:[.0-9A-Za-z_$\u0080-\U0010ffff]+|{_QID}|{_STR1}|{_STR2})?)
      |(?P<p>\?)
      |(?P<e>(?:/\*|['"`])[\s\S]*)
      |(?P<O><=>|<=|>=|<>|!=|:=|<<|>>|&&|\|\||->>|->|[^ \t\n\v\f\r0-9A-Za-z_$'"`\u0080-\U0010ffff])
    )""", re.X)

# Alternatives are ordered by frequency (words, simple punctuation, numbers first); W and O are the
# rarer spellings of words (leading digit) and operators, reported as kinds w and o.
_KIND_OF_GROUP: tuple[str, ...] = ("",) + tuple(
    {"W": "w", "O": "o"}.get(name, name) for name, _ in sorted(_TOKEN_RE.groupindex.items(), key=lambda kv: kv[1]))
_finditer = _TOKEN_RE.finditer

_FIRST_RE = re.compile(rf"""
    (?:{_WS}+|--(?=[\x00-\x20\x7f]|$)[^\n]*|\#[^\n]*|/\*(?!M?!)[\s\S]*?\*/
       |/\*!\s*(?:pydble|dble)\s*:[\s\S]*?\*/|\()*+
    ([A-Za-z_]+)(?!{_ID})""", re.X | re.I)
_HINT_RE = re.compile(r"/\*!\s*(?:pydble|dble)\s*:", re.I)
_VERSION_RE = re.compile(r"/\*(M?)!(?:([0-9]{5})([0-9]?))?")
_SERVER_VERSION_RE = re.compile(r"(?:5\.5\.5-)?([0-9]+)\.([0-9]+)\.([0-9]+)")

# The server whose version comments tokenize() runs: (version as MMmmpp, MariaDB or not).
_server: tuple[int, bool] = (50721, False)


def set_server_version(version: str) -> None:
    """Run version comments as the server advertised to clients would (its backends' version)."""
    global _server
    m = _SERVER_VERSION_RE.match(version)
    if m is None:
        raise ValueError(f"not a server version: {version!r}")
    a, b, c = (int(x) for x in m.groups())
    _server = (a * 10000 + b * 100 + c, "mariadb" in version.lower())


def _runs(text: str) -> int:
    """Where the code of a /*!...*/ comment starts in it, 0 for a hint, -1 when it is a comment.

    MariaDB's lexer: 5 or 6 digits are a version; MySQL 5.7-9.x versions (50700-99999) are ignored
    unless the comment is MariaDB's /*M! form. MySQL reads /*M! as a plain comment."""
    if _HINT_RE.match(text):
        return 0
    m = _VERSION_RE.match(text)
    mariadb_syntax, digits = m.group(1), m.group(2)  # type: ignore[union-attr]
    version_id, mariadb = _server
    if not mariadb and mariadb_syntax:
        return -1
    if digits is None:
        return m.end()  # type: ignore[union-attr]
    v = int(digits + m.group(3))  # type: ignore[union-attr]
    if v <= version_id and (not mariadb or v < 50700 or v > 99999 or mariadb_syntax):
        return m.end()  # type: ignore[union-attr]
    return -1


def tokenize(sql: str, pos: int = 0, endpos: int | None = None) -> list[Token]:
    """Split SQL into tokens, dropping whitespace and plain comments, opening version comments."""
    out: list[Token] = []
    _scan(sql, pos, len(sql) if endpos is None else endpos, out, False)
    return out


def _scan(sql: str, pos: int, end: int, out: list[Token], inside: bool) -> int:
    """Append the tokens of sql[pos:end] to out; return end, or inside a version comment the server runs,
    where the `*/` closing it ends (-1: nothing does). As MariaDB's lexer: that comment's text is code like
    any other, so a `*/` in one of its strings or comments does not close it, and one the server skips may
    hold one plain comment (_skip_version_comment)."""
    append = out.append
    kinds = _KIND_OF_GROUP
    while True:
        for m in _finditer(sql, pos, end):
            i = m.lastindex
            k = kinds[i]  # type: ignore[index]
            if k == "c":
                continue
            s, e = m.span(i)  # type: ignore[arg-type]
            if inside and k == "o" and sql[s] == "*" and e < end and sql[e] == "/":
                return e + 1
            if k == "h":
                at = _runs(sql[s:e])
                if at == 0 and not out and not inside:   # pydble's hint, opening the statement
                    append((k, sql[s:e], s, e))
                    continue
                # where the comment's text starts (a hint elsewhere is code to the server: `/*!` then its text)
                code = s + at if at > 0 else s + 4 if sql.startswith("/*M!", s) else s + 3
                mark = len(out)
                nxt = -1 if inside else _skip_version_comment(sql, code, end) if at < 0 else _scan(
                    sql, code, end, out, True)   # (MariaDB refuses a version comment inside another)
                if nxt < 0:   # never closed: one error token for all of it (none of what its scan found)
                    del out[mark:]
                    if inside:
                        return -1
                    append(("e", sql[s:end], s, end))
                    return end
                pos = nxt
                break
            append((k, sql[s:e], s, e))
        else:
            return -1 if inside else end


def _skip_version_comment(sql: str, i: int, end: int) -> int:
    """Past the `*/` that ends a version comment the server does not run, from i in its text: MariaDB's
    consume_comment, which lets it hold one plain `/* ... */` (-1: nothing ends it)."""
    while i < end - 1:
        c = sql[i]
        if c == "/" and sql[i + 1] == "*":
            j = sql.find("*/", i + 2, end)
            if j < 0:
                return -1
            i = j + 2
        elif c == "*" and sql[i + 1] == "/":
            return i + 2
        else:
            i += 1
    return -1


def top_level(toks: list[Token], a: int = 0, b: int | None = None) -> Iterator[int]:
    """Indices in [a, b) of the tokens outside every parenthesis (the parentheses themselves excluded)."""
    depth = 0
    for i in range(a, len(toks) if b is None else b):
        kind, text = toks[i][0], toks[i][1]
        if kind == "o" and text == "(":
            depth += 1
        elif kind == "o" and text == ")":
            depth -= 1
        elif depth == 0:
            yield i


def first_keyword(sql: str) -> str:
    """The first word of a statement, upper-cased, skipping comments, hints and opening parentheses."""
    m = _FIRST_RE.match(sql)
    if m is not None:
        return m.group(1).upper()
    for t in tokenize(sql):  # a version comment comes first: read it as the server does
        if t[0] == "w":
            return t[1].upper()
        if t[0] != "h" and t[1] != "(":
            return ""
    return ""


def split_statements(sql: str) -> list[str]:
    """Split a multi-statement string on top-level `;`, respecting strings and comments."""
    if ";" not in sql:
        return [sql.strip(WHITESPACE)] if tokenize(sql) else []
    out: list[str] = []
    begin = 0
    has_token = False
    for kind, text, start, end in tokenize(sql):
        if kind == "o" and text == ";":
            if has_token:
                out.append(sql[begin:start].strip(WHITESPACE))
            begin, has_token = end, False
        elif kind == "e":
            break  # an unterminated string or comment swallows the rest, as it would on the server
        else:
            has_token = True
    else:
        if has_token:
            out.append(sql[begin:].strip(WHITESPACE))
        return out
    out.append(sql[begin:].strip(WHITESPACE))
    return out


def unquote_ident(text: str) -> str:
    """The name inside a `quoted` identifier (or the word itself)."""
    if text[:1] == "`":
        return text[1:-1].replace("``", "`")
    return text


_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}
_ESC_RE1 = re.compile(r"\\([\s\S])|''")
_ESC_RE2 = re.compile(r'\\([\s\S])|""')


def unquote_string(text: str) -> str:
    """The value of a '...' or "..." literal, with MySQL's backslash and doubled-quote escapes."""
    q = text[0]
    body = text[1:-1]
    if "\\" in body:  # one pass: `\'\'` is two quotes, not one doubled quote
        return (_ESC_RE1 if q == "'" else _ESC_RE2).sub(_unescape, body)
    if q + q in body:
        body = body.replace(q + q, q)
    return body


def _unescape(m: re.Match[str]) -> str:
    c = m.group(1)
    if c is None:
        return m.group(0)[0]   # a doubled quote
    return _ESCAPES.get(c, c if c not in "%_" else "\\" + c)


def hex_value(text: str) -> bytes:
    """The bytes of a x'..', 0x.., b'..' or 0b.. literal."""
    t = text.lower()
    if t.startswith("0x") or t.startswith("x'"):
        digits = t[2:] if t.startswith("0x") else t[2:-1]
        if len(digits) % 2:
            digits = "0" + digits
        return bytes.fromhex(digits)
    digits = t[2:] if t.startswith("0b") else t[2:-1]
    if not digits:
        return b""
    n = int(digits, 2)
    return n.to_bytes((len(digits) + 7) // 8, "big")
