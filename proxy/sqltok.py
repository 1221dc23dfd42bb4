"""A fast MySQL tokenizer: one compiled regex, tokens as plain tuples with offsets into the SQL.

It sits on the per-query hot path, so tokens are tuples `(kind, text, start, end)` rather than objects.
Kinds (one letter, compared by identity-cheap string equality):

  w  word: keyword or unquoted identifier        q  `quoted identifier`
  s  'string' or "string"                        n  number: 12, 1.5, .5, 1e3
  x  hex/bit literal: x'0A', 0x0A, b'01', 0b01   p  ? placeholder
  v  @user_var / @@system.var                    h  /*! ... */ or /*M! ... */ executable comment, or
                                                    a pydble/dble hint
  o  operator or punctuation                     e  an unterminated string, identifier or comment
                                                    (it takes the rest of the text)

Plain comments (`-- `, `#`, `/* */`) and whitespace produce no token; since every token keeps its
offsets, callers rewrite the original text precisely and comments survive in what they forward.
"""

from __future__ import annotations

import re

from meta.errors import ParseError

Token = tuple[str, str, int, int]

KIND, TEXT, START, END = 0, 1, 2, 3
LITERALS = frozenset("snx")

# Possessive loops lex like MySQL (a doubled quote is always an escaped quote) and never backtrack,
# so hostile input costs linear time: this runs before anything else on every query.
_STR1 = r"'(?:[^'\\]|\\[\s\S]|'')*+'"
_STR2 = r'"(?:[^"\\]|\\[\s\S]|"")*+"'
_QID = r"`(?:[^`]|``)*+`"

_TOKEN_RE = re.compile(rf"""
    \s*(?:
       (?P<w>(?![xXbB]')[^\W\d][\w$]*)
      |(?P<o>[(),;=*+])
      |(?P<n>(?>[0-9]+(?:\.[0-9]*+)?|\.[0-9]++)(?>[eE][-+]?[0-9]++)?(?![\w$]))
      |(?P<s>{_STR1}|{_STR2})
      |(?P<q>{_QID})
      |(?P<c>--(?=\s|$)[^\n]*|\#[^\n]*|/\*(?!!|M!)[\s\S]*?\*/)
      |(?P<h>/\*M?![\s\S]*?\*/)
      |(?P<x>[xX]'[0-9a-fA-F]*+'|[bB]'[01]*+'|0x[0-9a-fA-F]++(?![\w$])|0b[01]++(?![\w$]))
      |(?P<W>[\w$]+)
      |(?P<v>@@?(?:[\w$.]+|{_QID}|{_STR1}|{_STR2})?)
      |(?P<p>\?)
      |(?P<e>(?:/\*|['"`])[\s\S]*)
      |(?P<O><=>|<=|>=|<>|!=|:=|<<|>>|&&|\|\||->>|->|[^\s\w$'"`])
    )""", re.X)

# Alternatives are ordered by frequency (words, simple punctuation, numbers first); W and O are the
# rarer spellings of words (leading digit) and operators, reported as kinds w and o.
_KIND_OF_GROUP: tuple[str, ...] = ("",) + tuple(
    {"W": "w", "O": "o"}.get(name, name) for name, _ in sorted(_TOKEN_RE.groupindex.items(), key=lambda kv: kv[1]))
_finditer = _TOKEN_RE.finditer

_FIRST_RE = re.compile(r"""
    (?:\s+|--(?=\s|$)[^\n]*|\#[^\n]*|/\*(?!!)[\s\S]*?\*/|/\*!\s*(?:pydble|dble)\s*:[\s\S]*?\*/|\()*+
    (?:/\*![0-9]*+)?\s*+([A-Za-z_]+)""", re.X | re.I)


def tokenize(sql: str) -> list[Token]:
    """Split SQL into tokens, dropping whitespace and plain comments."""
    out: list[Token] = []
    append = out.append
    kinds = _KIND_OF_GROUP
    for m in _finditer(sql):
        i = m.lastindex
        k = kinds[i]  # type: ignore[index]
        if k == "c":
            continue
        s, e = m.span(i)  # type: ignore[arg-type]
        append((k, sql[s:e], s, e))
    return out


_EXEC_HEAD = re.compile(r"/\*M?![0-9]*")
_PROXY_HINT = re.compile(r"/\*!\s*(?:pydble|dble)\s*:", re.I)


def expand_executable_comments(sql: str) -> str:
    """The statement with each `/*!NNNNN text */` replaced by its text, as the backend would run it
    (pydble/dble hints stay): what is analysed is then what runs."""
    for _ in range(8):  # the text of one may form another
        out: list[str] = []
        pos = 0
        for kind, text, start, end in tokenize(sql):
            if kind == "h" and not _PROXY_HINT.match(text):
                out += (sql[pos:start], " ", text[_EXEC_HEAD.match(text).end():-2], " ")  # type: ignore[union-attr]
                pos = end
        if not pos:
            return sql
        out.append(sql[pos:])
        sql = "".join(out)
    raise ParseError("You have an error in your SQL syntax: executable comments nested too deeply")


def first_keyword(sql: str) -> str:
    """The first word of a statement, upper-cased, skipping comments, hints and opening parentheses."""
    m = _FIRST_RE.match(sql)
    return m.group(1).upper() if m else ""


def split_statements(sql: str) -> list[str]:
    """Split a multi-statement string on top-level `;`, respecting strings and comments."""
    if ";" not in sql:
        return [sql.strip()] if tokenize(sql) else []
    out: list[str] = []
    begin = 0
    has_token = False
    for kind, text, start, end in tokenize(sql):
        if kind == "o" and text == ";":
            if has_token:
                out.append(sql[begin:start].strip())
            begin, has_token = end, False
        elif kind == "e":
            break  # an unterminated string or comment swallows the rest, as it would on the server
        else:
            has_token = True
    else:
        if has_token:
            out.append(sql[begin:].strip())
        return out
    out.append(sql[begin:].strip())
    return out


def unquote_ident(text: str) -> str:
    """The name inside a `quoted` identifier (or the word itself)."""
    if text[:1] == "`":
        return text[1:-1].replace("``", "`")
    return text


_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}
_ESC_RE = re.compile(r"\\([\s\S])")


def unquote_string(text: str) -> str:
    """The value of a '...' or "..." literal, with MySQL's backslash and doubled-quote escapes."""
    q = text[0]
    body = text[1:-1]
    if "\\" in body:
        body = _ESC_RE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1) if m.group(1) not in "%_"
                                                  else "\\" + m.group(1)), body)
    if q + q in body:
        body = body.replace(q + q, q)
    return body


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
