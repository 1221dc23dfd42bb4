"""The view statements pydble answers itself, read from their tokens: CREATE [OR REPLACE] / ALTER / DROP
VIEW, SHOW CREATE VIEW|TABLE, DESC / SHOW [FULL] COLUMNS / SHOW INDEX (proxy/session/views.py decides which are
about views)."""

from __future__ import annotations

from dataclasses import dataclass

from meta.errors import ParseError, syntax_error

from proxy.plan.sqltok import Token, tokenize, unquote_ident

KEYWORDS = frozenset({"CREATE", "ALTER", "DROP", "SHOW", "DESC", "DESCRIBE", "EXPLAIN"})   # what parse() reads
# SHOW ... FROM a view that MariaDB answers from the view's structure (a view has no index: SHOW INDEX is empty)
_DESCRIBING = {"COLUMNS": "COLUMNS", "FIELDS": "COLUMNS", "INDEX": "INDEX", "INDEXES": "INDEX", "KEYS": "INDEX"}


@dataclass
class ViewStmt:
    """A view statement as written."""

    op: str                                   # CREATE | ALTER | DROP | SHOW | DESC | DROP_TABLE
    names: list[list[str]]                    # each [schema,] name as written
    or_replace: bool = False
    if_exists: bool = False                   # DROP ... IF EXISTS, CREATE ... IF NOT EXISTS
    columns: tuple[str, ...] = ()
    select: str = ""                          # the SELECT (DESC: the SHOW COLUMNS to run, {} the name)
    algorithm: str = ""
    check_option: str = ""                    # WITH [CASCADED|LOCAL] CHECK OPTION, as written
    show_table: bool = False                  # SHOW CREATE TABLE (answered here only for a view)


def _up(t: Token) -> str:
    return t[1].upper() if t[0] == "w" else t[1]


def _name(toks: list[Token], k: int) -> tuple[list[str], int]:
    """[schema.]name at k: its parts and the index after it ([] when there is none)."""
    parts: list[str] = []
    while k < len(toks) and toks[k][0] in "wq":
        parts.append(unquote_ident(toks[k][1]) if toks[k][0] == "q" else toks[k][1])
        k += 1
        if k < len(toks) and toks[k][:2] == ("o", ".") and len(parts) < 2:
            k += 1
            continue
        break
    return parts, k


def _syntax(sql: str, toks: list[Token], k: int) -> ParseError:
    return syntax_error(sql, toks[k][2] if k < len(toks) else None)


def parse(sql: str) -> ViewStmt | None:
    """CREATE/ALTER/DROP VIEW and SHOW CREATE VIEW|TABLE; None for any other statement."""
    toks = tokenize(sql)
    while toks and toks[-1][:2] == ("o", ";"):
        toks.pop()
    n = len(toks)

    def at(k: int) -> str:
        return _up(toks[k]) if k < n else ""

    first = at(0)
    if first in ("DESC", "DESCRIBE", "EXPLAIN"):
        parts, k = _name(toks, 1)
        if not parts or (k < n and toks[k][0] not in "wqs") or k + 1 < n:
            return None   # EXPLAIN of a statement, or not a table: the router decides
        tail = sql[toks[k][2]:toks[k][3]] if k < n else ""
        return ViewStmt("DESC", [parts], select="SHOW COLUMNS FROM {}" + (f" LIKE {_like(toks[k])}" if tail else ""))
    if first == "SHOW" and at(1) in ("FULL", *_DESCRIBING):
        k = 2 if at(1) == "FULL" else 1
        if at(k) not in _DESCRIBING or at(k + 1) not in ("FROM", "IN"):
            return None
        parts, j = _name(toks, k + 2)
        if not parts:
            return None
        if at(j) in ("FROM", "IN") and len(parts) == 1 and j + 1 < n and toks[j + 1][0] in "wq":
            parts = [unquote_ident(toks[j + 1][1]) if toks[j + 1][0] == "q" else toks[j + 1][1], parts[0]]
            j += 2
        tail = sql[toks[j][2]:toks[n - 1][3]] if j < n else ""
        head = f"SHOW {'FULL ' if at(1) == 'FULL' else ''}{_DESCRIBING[at(k)]} FROM {{}}"
        return ViewStmt("DESC", [parts], select=head + (f" {tail}" if tail else ""))
    if first == "SHOW":
        if at(1) != "CREATE" or at(2) not in ("VIEW", "TABLE"):
            return None
        parts, k = _name(toks, 3)
        if not parts or k != n:
            if at(2) == "TABLE":
                return None
            raise _syntax(sql, toks, k)
        return ViewStmt("SHOW", [parts], show_table=at(2) == "TABLE")
    if first == "DROP" and at(1) in ("TABLE", "TABLES") and at(2) == "IF" and at(3) == "EXISTS":
        st = ViewStmt("DROP_TABLE", [], if_exists=True)   # answered here only when it names views only
        k = 4
        while True:
            parts, k = _name(toks, k)
            if not parts:
                return None
            st.names.append(parts)
            if at(k) != ",":
                break
            k += 1
        return st if k == n else None
    if first == "DROP":
        if at(1) != "VIEW":
            return None
        st = ViewStmt("DROP", [])
        k = 2
        if at(k) == "IF" and at(k + 1) == "EXISTS":
            st.if_exists, k = True, k + 2
        while True:
            parts, k = _name(toks, k)
            if not parts:
                raise _syntax(sql, toks, k)
            st.names.append(parts)
            if at(k) == ",":
                k += 1
                continue
            break
        if at(k) in ("RESTRICT", "CASCADE"):
            k += 1
        if k != n:
            raise _syntax(sql, toks, k)
        return st
    if first not in ("CREATE", "ALTER"):
        return None
    st = ViewStmt(first, [])
    k = 1
    if first == "CREATE" and at(k) == "OR" and at(k + 1) == "REPLACE":
        st.or_replace, k = True, k + 2
    while at(k) != "VIEW":
        w = at(k)
        if w == "ALGORITHM" and at(k + 1) == "=" and at(k + 2):
            st.algorithm = at(k + 2)
            k += 3
        elif w == "DEFINER":   # pushed views run as the backend account; kept ones as the client
            k += 1
            while k < n and at(k) not in ("SQL", "VIEW"):
                k += 1
        elif w == "SQL" and at(k + 1) == "SECURITY" and at(k + 2):
            k += 3
        else:
            return None   # CREATE TABLE, ALTER TABLE, CREATE INDEX...: not ours
    k += 1
    if first == "CREATE" and at(k) == "IF" and at(k + 1) == "NOT" and at(k + 2) == "EXISTS":
        st.if_exists, k = True, k + 3
    parts, k = _name(toks, k)
    if not parts:
        raise _syntax(sql, toks, k)
    st.names.append(parts)
    if at(k) == "(":
        cols: list[str] = []
        k += 1
        while k < n and toks[k][0] in "wq":
            cols.append(unquote_ident(toks[k][1]) if toks[k][0] == "q" else toks[k][1])
            k += 1
            if at(k) == ",":
                k += 1
        if at(k) != ")" or not cols:
            raise _syntax(sql, toks, k)
        st.columns = tuple(cols)
        k += 1
    if at(k) != "AS" or k + 1 >= n:
        raise _syntax(sql, toks, k)
    end = n
    if end - k > 3 and at(end - 1) == "OPTION" and at(end - 2) == "CHECK":
        w = end - 3 if at(end - 3) == "WITH" else end - 4
        if at(w) != "WITH":
            raise _syntax(sql, toks, w)
        st.check_option = sql[toks[w][2]:toks[end - 1][3]]
        end = w
    st.select = sql[toks[k + 1][2]:toks[end - 1][3]].strip()
    return st


def _like(tok: Token) -> str:
    """DESC v col|'pattern': the LIKE pattern SHOW COLUMNS takes for it."""
    if tok[0] == "s":
        return tok[1]
    text = unquote_ident(tok[1]) if tok[0] == "q" else tok[1]
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


__all__ = ["KEYWORDS", "ViewStmt", "parse"]
