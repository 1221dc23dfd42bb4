"""The router's parser: a recursive-descent reader of just enough SQL structure (tables, scopes,
subqueries, condition trees) to route a statement. No I/O; tables are resolved by a callback."""

from __future__ import annotations

from typing import Any, Callable, Collection

from meta.errors import ParseError, syntax_error
from proxy.plan.analysis import NULL_LITERAL, Query, Ref, Scope, Table, not_supported
from proxy.plan.sqltok import Token, unquote_ident, unquote_string

_SETOPS = frozenset({"UNION", "EXCEPT", "INTERSECT"})
_SELECT_CLAUSES = frozenset({"FROM", "WHERE", "GROUP", "HAVING", "WINDOW", "ORDER", "LIMIT", "INTO",
                             "FOR", "LOCK", "PROCEDURE"})
_JOIN_WORDS = frozenset({"JOIN", "INNER", "CROSS", "LEFT", "RIGHT", "NATURAL", "STRAIGHT_JOIN", "FULL"})
_NOT_ALIAS = _SELECT_CLAUSES | _JOIN_WORDS | _SETOPS | frozenset({
    "ON", "USING", "SET", "USE", "IGNORE", "FORCE", "PARTITION", "VALUES", "VALUE", "SELECT", "AS",
    "OUTER", "WITH", "TABLE", "ROW", "DUPLICATE", "RETURNING"})
_AGGREGATES = frozenset({"COUNT", "SUM", "MIN", "MAX", "AVG", "GROUP_CONCAT", "STD", "STDDEV", "STDDEV_POP",
                         "STDDEV_SAMP", "VARIANCE", "VAR_POP", "VAR_SAMP", "BIT_AND", "BIT_OR", "BIT_XOR",
                         "JSON_ARRAYAGG", "JSON_OBJECTAGG"})
_NOT_COLUMN = frozenset({"NULL", "TRUE", "FALSE", "NOT", "EXISTS", "CASE", "INTERVAL", "BINARY", "DEFAULT",
                         "SELECT", "ROW", "DATE", "TIME", "TIMESTAMP", "AND", "OR", "XOR", "IS", "IN",
                         "BETWEEN", "LIKE", "REGEXP", "RLIKE", "ANY", "ALL", "SOME", "WITH", "VALUES"})


class Parser:
    """A recursive-descent reader of just enough SQL structure to route a statement."""

    def __init__(self, resolve: Callable[[list[str], str | None], Table], toks: list[Token],
                 schema: str | None, sql: str = "") -> None:
        self.resolve = resolve   # the router's: name parts and the current schema -> a resolved table
        self.toks = toks
        self.sql = sql           # the text toks were read from, which a syntax error quotes (else the tokens)
        self.schema = schema
        self.n = len(toks)
        self.up = [t[1].upper() if t[0] == "w" else t[1] for t in toks]
        self.close = self._match_parens()
        self.refs: list[Ref] = []
        self.scopes: list[Scope] = []
        self.queries: list[Query] = []

    # -- basics ------------------------------------------------------------------------------------

    def _match_parens(self) -> list[int]:
        close = [-1] * self.n
        stack: list[int] = []
        for i, t in enumerate(self.toks):
            if t[0] == "o":
                if t[1] == "(":
                    stack.append(i)
                elif t[1] == ")":
                    if not stack:
                        raise self.syntax(i)
                    close[stack.pop()] = i
            elif t[0] == "e":
                raise ParseError("You have an error in your SQL syntax; unterminated quoted string, "
                                 f"identifier or comment near '{self.r_text(i)}'")
        if stack:   # unclosed: MariaDB reads on to the end
            raise self.syntax(self.n)
        return close

    def r_text(self, i: int) -> str:
        toks = self.toks
        return " ".join(t[1] for t in toks[i:i + 6])[:80]

    def syntax(self, i: int) -> ParseError:
        if self.sql:
            return syntax_error(self.sql, self.toks[i][2] if i < self.n else None)
        return syntax_error(self.r_text(i) if i < self.n else "", 0)

    def at(self, i: int) -> str:
        return self.up[i] if i < self.n else ""

    def word(self, i: int, w: str) -> bool:
        return i < self.n and self.up[i] == w and self.toks[i][0] == "w"

    def ident(self, i: int) -> str | None:
        if i >= self.n:
            return None
        kind = self.toks[i][0]
        if kind == "w":
            return self.toks[i][1]
        if kind == "q":
            return unquote_ident(self.toks[i][1])
        return None

    def dotted(self, i: int, limit: int | None = None) -> tuple[list[str], int]:
        """An identifier chain a[.b[.c]]; returns ([] , i) when there is none."""
        end = self.n if limit is None else limit
        name = self.ident(i) if i < end else None
        if name is None:
            return [], i
        parts = [name]
        i += 1
        while i + 1 < end and self.up[i] == "." and self.toks[i][0] == "o":
            nxt = self.ident(i + 1)
            if nxt is None:
                break
            parts.append(nxt)
            i += 2
        return parts, i

    def is_query(self, i: int) -> bool:
        up = self.up
        while i < self.n and up[i] == "(" and self.toks[i][0] == "o":
            i += 1
        return i < self.n and self.toks[i][0] == "w" and up[i] in ("SELECT", "WITH")

    def comma(self, i: int, end: int) -> int:
        """The next top-level comma in [i, end) (parentheses skipped), or end."""
        toks, up = self.toks, self.up
        while i < end:
            if toks[i][0] == "o":
                if up[i] == "(":
                    i = self.close[i] + 1
                    continue
                if up[i] == ",":
                    return i
            i += 1
        return end

    def skip_to(self, i: int, end: int, stops: Collection[str], sc: Scope | None) -> int:
        """Advance to the next top-level word in stops, parsing subqueries met on the way."""
        toks, up = self.toks, self.up
        while i < end:
            kind = toks[i][0]
            if kind == "o" and up[i] == "(":
                c = self.close[i]
                if sc is not None:
                    self.subqueries(i, c + 1, sc)
                i = c + 1
                continue
            if kind == "w" and up[i] in stops:
                return i
            i += 1
        return end

    def subqueries(self, i: int, end: int, sc: Scope) -> None:
        """Parse every parenthesised subquery in [i, end) as a child of sc."""
        toks, up = self.toks, self.up
        while i < end:
            if toks[i][0] == "o" and up[i] == "(":
                if self.is_query(i + 1):
                    sc.subs[i] = self.query(i + 1, self.close[i], sc, sc.ctes)
                    i = self.close[i] + 1
                    continue
            elif toks[i][0] == "w" and up[i] in _AGGREGATES and i + 1 < end and up[i + 1] == "(":
                sc.simple = False
            elif toks[i][0] == "w" and up[i] == "OVER":
                sc.simple = False
            i += 1

    def new_scope(self, parent: Scope | None, ctes: dict[str, Query]) -> Scope:
        sc = Scope(parent, ctes)
        self.scopes.append(sc)
        return sc

    # -- queries -----------------------------------------------------------------------------------

    def query(self, i: int, end: int, parent: Scope | None, ctes: dict[str, Query]) -> Query:
        """A query expression in [i, end): [WITH ...] branch {UNION branch} [ORDER BY/LIMIT]."""
        q = Query(parent)
        self.queries.append(q)
        up = self.up
        if self.word(i, "WITH"):
            q.has_ctes = True
            ctes = dict(ctes)
            i += 1
            if self.word(i, "RECURSIVE"):
                i += 1
            while True:
                name = self.ident(i)
                if name is None or i >= end:
                    raise self.syntax(i)
                i += 1
                if self.at(i) == "(":
                    i = self.close[i] + 1
                if not self.word(i, "AS") or self.at(i + 1) != "(":
                    raise self.syntax(i)
                body = Query(parent)
                ctes[name.lower()] = body
                inner = self.query(i + 2, self.close[i + 1], parent, ctes)
                body.branches, body.union, body.has_ctes = inner.branches, inner.union, inner.has_ctes
                i = self.close[i + 1] + 1
                if self.at(i) == ",":
                    i += 1
                    continue
                break
        while True:
            if i >= end:
                raise self.syntax(i)
            if up[i] == "(" and self.toks[i][0] == "o":
                c = self.close[i]
                if not self.is_query(i + 1):
                    raise self.syntax(i)
                inner = self.query(i + 1, c, parent, ctes)
                q.branches.extend(inner.branches)
                q.union = q.union or inner.union
                q.has_ctes = q.has_ctes or inner.has_ctes
                i = self.skip_to(c + 1, end, _SETOPS | {"INTO"}, parent)
                if self.word(i, "INTO"):
                    raise not_supported("SELECT ... INTO is not supported by pydble")
            elif self.word(i, "SELECT"):
                sc, i = self.select(i, end, parent, ctes)
                q.branches.append(sc)
            elif self.toks[i][0] == "w" and up[i] in ("VALUES", "TABLE"):
                raise not_supported(f"the {up[i]} statement is not supported by pydble")
            else:
                raise self.syntax(i)
            if i < end and up[i] in _SETOPS and self.toks[i][0] == "w":
                q.union = True
                i += 1
                if self.at(i) in ("ALL", "DISTINCT"):
                    i += 1
                continue
            break
        if i < end:
            raise self.syntax(i)
        return q

    def select(self, i: int, end: int, parent: Scope | None, ctes: dict[str, Query]) -> tuple[Scope, int]:
        """One SELECT block, up to a set operator or the end of its range."""
        sc = self.new_scope(parent, ctes)
        toks, up = self.toks, self.up
        k = i + 1
        clause = "SELECT"
        start = k
        list_start = k
        while k < end:
            kind, t = toks[k][0], up[k]
            if kind == "o" and t == "(":
                c = self.close[k]
                self.subqueries(k, c + 1, sc)
                k = c + 1
                continue
            if kind == "w":
                if t in _SETOPS:
                    break
                if t in _SELECT_CLAUSES:
                    self._end_clause(sc, clause, start, k, list_start)
                    clause, start = t, k + 1
                    if t == "FROM":
                        k, _ = self.from_(k + 1, end, sc)
                        start = k
                        clause = "AFTER_FROM"
                        continue
                    if t in ("GROUP", "HAVING", "WINDOW", "LIMIT"):
                        sc.simple = False
                    elif t == "INTO":
                        sc.into = True
                    k += 1
                    continue
                if clause == "SELECT" and t in ("DISTINCT", "DISTINCTROW"):
                    sc.simple = False
                elif t == "OVER" or (t in _AGGREGATES and k + 1 < end and up[k + 1] == "("):
                    sc.simple = False
            k += 1
        self._end_clause(sc, clause, start, k, list_start)
        if sc.into:
            raise not_supported("SELECT ... INTO is not supported by pydble")
        return sc, k

    def _end_clause(self, sc: Scope, clause: str, start: int, k: int, list_start: int) -> None:
        if clause == "SELECT":
            sc.select_list = (list_start, k)
        elif clause == "WHERE":
            sc.where = (start, k)

    # -- FROM clauses ------------------------------------------------------------------------------

    def from_(self, k: int, end: int, sc: Scope) -> tuple[int, list[Any]]:
        """table_refs: factors joined by commas and JOINs; returns (next index, items)."""
        up = self.up
        left: list[Any] = []
        k, items = self.factor(k, end, sc)
        left.extend(items)
        while k < end:
            t = up[k]
            if t == "," and self.toks[k][0] == "o":
                k, items = self.factor(k + 1, end, sc)
                left.extend(items)
                continue
            if self.toks[k][0] != "w" or t not in _JOIN_WORDS:
                break
            jt = "inner"
            if t == "NATURAL":  # joins on common columns: no known sharding-column equality
                k += 1
                t = self.at(k)
            if t in ("INNER", "CROSS"):
                k += 1
            elif t in ("LEFT", "RIGHT", "FULL"):
                if t == "FULL":
                    raise not_supported("FULL OUTER JOIN is not supported")
                jt = t.lower()
                k += 1
                if self.word(k, "OUTER"):
                    k += 1
            if self.word(k, "STRAIGHT_JOIN") or self.word(k, "JOIN"):
                k += 1
            else:
                raise self.syntax(k)
            k, right = self.factor(k, end, sc)
            if self.word(k, "ON"):
                s = k + 1
                k = self._on_end(s, end, sc)
                sc.ons.append((s, k))
            elif self.word(k, "USING") and self.at(k + 1) == "(":
                c = self.close[k + 1]
                cols = [self.ident(j) or "" for j in range(k + 2, c) if self.toks[j][0] in "wq"]
                sc.usings.append((right, [x.lower() for x in cols], list(left)))
                k = c + 1
            if jt == "left":
                sc.outer.append((list(left), right))
            elif jt == "right":
                sc.outer.append((right, list(left)))
            left.extend(right)
        return k, left

    def _on_end(self, i: int, end: int, sc: Scope) -> int:
        toks, up = self.toks, self.up
        while i < end:
            kind, t = toks[i][0], up[i]
            if kind == "o":
                if t == "(":
                    c = self.close[i]
                    self.subqueries(i, c + 1, sc)
                    i = c + 1
                    continue
                if t == ",":
                    return i
            elif kind == "w":
                if t in _JOIN_WORDS and not (i + 1 < end and up[i + 1] == "("):
                    return i
                if t in _SELECT_CLAUSES or t in _SETOPS or t == "SET":
                    return i
            i += 1
        return end

    def factor(self, k: int, end: int, sc: Scope) -> tuple[int, list[Any]]:
        """One table factor: a table, a derived table, a parenthesised join, DUAL or JSON_TABLE."""
        if k >= end:
            raise self.syntax(k)
        toks, up = self.toks, self.up
        t = up[k]
        lateral = False
        if toks[k][0] == "w" and t == "LATERAL":
            lateral = True
            k += 1
            if k >= end:
                raise self.syntax(k)
            t = up[k]
        if t == "(" and toks[k][0] == "o":
            c = self.close[k]
            if self.is_query(k + 1):
                q = self.query(k + 1, c, sc if lateral else sc.parent, sc.ctes)
                k, alias, _ = self.alias(c + 1, end)
                if self.at(k) == "(":
                    k = self.close[k] + 1
                sc.derived.append(((alias or "").lower(), q))
                return k, [q]
            k2, items = self.from_(k + 1, c, sc)
            if k2 != c:
                raise self.syntax(k2)
            return c + 1, items
        if toks[k][0] == "o" and t == "{":
            raise not_supported("the ODBC { OJ ... } join syntax is not supported")
        if toks[k][0] == "w" and t == "DUAL":
            return k + 1, []
        if toks[k][0] == "w" and t == "JSON_TABLE" and self.at(k + 1) == "(":
            self.subqueries(k + 1, self.close[k + 1], sc)   # a subquery in its arguments names tables too
            k, _, _ = self.alias(self.close[k + 1] + 1, end)
            return k, []
        parts, k2 = self.dotted(k, end)
        if not parts or len(parts) > 2:
            raise self.syntax(k)
        if len(parts) == 1 and parts[0].lower() in sc.ctes:
            q = sc.ctes[parts[0].lower()]
            k2, alias, _ = self.alias(k2, end)
            sc.derived.append(((alias or parts[0]).lower(), q))
            return k2, [q]
        table = self.resolve(parts, self.schema)
        span = (k, k2)
        k = k2
        if self.word(k, "PARTITION") and self.at(k + 1) == "(":
            k = self.close[k + 1] + 1
        k, alias, has_alias = self.alias(k, end)
        k = self._index_hints(k, end)
        ref = Ref(table, (alias or table.name).lower(), has_alias, sc, span)
        sc.refs.append(ref)
        self.refs.append(ref)
        return k, [ref]

    def alias(self, k: int, end: int) -> tuple[int, str | None, bool]:
        if self.word(k, "AS"):
            name = self.ident(k + 1)
            if name is None and k + 1 < end and self.toks[k + 1][0] == "s":
                name = unquote_string(self.toks[k + 1][1])
            if name is None:
                raise self.syntax(k + 1)
            return k + 2, name, True
        if k < end:
            kind = self.toks[k][0]
            if kind == "q" or (kind == "w" and self.up[k] not in _NOT_ALIAS):
                return k + 1, self.ident(k), True
            if kind == "s":
                return k + 1, unquote_string(self.toks[k][1]), True
        return k, None, False

    def _index_hints(self, k: int, end: int) -> int:
        while k < end and self.toks[k][0] == "w" and self.up[k] in ("USE", "IGNORE", "FORCE") \
                and self.at(k + 1) in ("INDEX", "KEY"):
            k += 2
            if self.word(k, "FOR"):
                k += 3 if self.at(k + 1) in ("ORDER", "GROUP") else 2
            if self.at(k) == "(":
                k = self.close[k] + 1
            if self.at(k) == "," and self.at(k + 1) in ("USE", "IGNORE", "FORCE"):
                k += 1
        return k

    # -- conditions --------------------------------------------------------------------------------

    def cond(self, i: int, j: int, sc: Scope) -> Any:
        """A condition tree: ('or'|'and', [..]), atoms ('eq'|'in'|'range'|'isnull'|'ceq'|'insub'|'empty'), or None."""
        parts = self._split(i, j, ("OR", "||"), True)
        if parts is None:
            return None
        if len(parts) > 1:
            return ("or", [self._conj(a, b, sc) for a, b in parts])
        return self._conj(i, j, sc)

    def _conj(self, i: int, j: int, sc: Scope) -> Any:
        parts = self._split(i, j, ("AND", "&&"), False)
        if parts is None:
            return None
        if len(parts) > 1:
            return ("and", [self._atom(a, b, sc) for a, b in parts])
        return self._atom(i, j, sc)

    def _split(self, i: int, j: int, seps: tuple[str, str], xor_fails: bool) -> list[tuple[int, int]] | None:
        toks, up, close = self.toks, self.up, self.close
        out: list[tuple[int, int]] = []
        a = k = i
        between = case = 0
        while k < j:
            kind, t = toks[k][0], up[k]
            if kind == "o":
                if t == "(":
                    k = close[k] + 1
                    continue
                if t == seps[1] and not case:
                    out.append((a, k))
                    a = k + 1
            elif kind == "w":
                if t == "CASE":
                    case += 1
                elif t == "END" and case:
                    case -= 1
                elif t == "BETWEEN":
                    between += 1
                elif t == "XOR" and xor_fails and not case:
                    return None
                elif t == seps[0] and not case:
                    if t == "AND" and between:
                        between -= 1
                    else:
                        out.append((a, k))
                        a = k + 1
            k += 1
        out.append((a, j))
        return out

    def colref(self, k: int, end: int) -> tuple[tuple[tuple[str, ...], str] | None, int]:
        if k >= end:
            return None, k
        kind = self.toks[k][0]
        if kind not in "wq" or (kind == "w" and self.up[k] in _NOT_COLUMN):
            return None, k
        parts, k2 = self.dotted(k, end)
        if not parts or len(parts) > 3:
            return None, k
        low = [p.lower() for p in parts]
        return (tuple(low[:-1]), low[-1]), k2

    def literal(self, k: int, end: int) -> tuple[Any, int]:
        if k >= end:
            return None, k
        kind, t = self.toks[k][0], self.up[k]
        if kind in ("n", "s", "x"):
            return (kind, k, False), k + 1
        if kind == "o" and t in ("-", "+") and k + 1 < end and self.toks[k + 1][0] == "n":
            return ("n", k + 1, t == "-"), k + 2
        if kind == "w":
            if t == "NULL":
                return NULL_LITERAL, k + 1
            if t in ("TRUE", "FALSE"):
                return ("const", 1 if t == "TRUE" else 0), k + 1
            if (t[:1] == "_" or t == "N") and k + 1 < end and self.toks[k + 1][0] == "s":
                return ("s", k + 1, False), k + 2
        return None, k

    def _atom(self, a: int, b: int, sc: Scope) -> Any:
        if a >= b:
            return None
        up = self.up
        if up[a] == "(" and self.toks[a][0] == "o" and self.close[a] == b - 1:
            return None if self.is_query(a + 1) else self.cond(a + 1, b - 1, sc)
        c1, k = self.colref(a, b)
        if c1 is not None and k < b:
            op = up[k]
            if op in ("=", "<=>"):
                v, k2 = self.literal(k + 1, b)
                if v is not None and k2 == b:
                    if v is NULL_LITERAL:
                        return ("isnull", c1) if op == "<=>" else ("empty", c1)
                    return ("eq", c1, v)
                c2, k2 = self.colref(k + 1, b)
                if c2 is not None and k2 == b and op == "=":
                    return ("ceq", c1, c2)
                return None
            if op == "IN" and self.at(k + 1) == "(" and self.close[k + 1] == b - 1:
                if self.is_query(k + 2):
                    sub = sc.subs.get(k + 1)
                    return ("insub", c1, sub) if sub is not None else None
                vals = []
                m = k + 2
                while m < b - 1:
                    v, m = self.literal(m, b - 1)
                    if v is None:
                        return None
                    vals.append(v)
                    if m < b - 1:
                        if up[m] != ",":
                            return None
                        m += 1
                return ("in", c1, tuple(vals)) if vals else None
            if op == "BETWEEN":
                lo, m = self.literal(k + 1, b)
                if lo is None or lo is NULL_LITERAL or not self.word(m, "AND"):
                    return None
                hi, m = self.literal(m + 1, b)
                if hi is None or hi is NULL_LITERAL or m != b:
                    return None
                return ("range", c1, lo, hi)
            if op in ("<", "<=", ">", ">="):
                v, m = self.literal(k + 1, b)
                if v is None or v is NULL_LITERAL or m != b:
                    return None
                return ("range", c1, v, None) if op[0] == ">" else ("range", c1, None, v)
            if op == "IS" and k + 2 == b and up[k + 1] == "NULL":
                return ("isnull", c1)
            return None
        v, k = self.literal(a, b)
        if v is not None and k == b:
            return ("lit", "truth", v, None)            # WHERE 0 / WHERE FALSE
        if v is not None and k < b:
            op = up[k]
            if op in ("=", "<>", "!="):
                v2, m = self.literal(k + 1, b)
                if v2 is not None and m == b:
                    return ("lit", op, v, v2)           # WHERE 1=0, Spark's schema probe
            c, m = self.colref(k + 1, b)
            if c is not None and m == b:
                if op == "=":
                    return ("empty", c) if v is NULL_LITERAL else ("eq", c, v)
                if op == "<=>":
                    return ("isnull", c) if v is NULL_LITERAL else ("eq", c, v)
                if v is not NULL_LITERAL and op in ("<", "<="):
                    return ("range", c, v, None)
                if v is not NULL_LITERAL and op in (">", ">="):
                    return ("range", c, None, v)
        return None
