"""UNION / INTERSECT / EXCEPT whose branches live on different shardingNodes: their plan.

Each branch (a SELECT, or a parenthesized query) is planned like any statement: one node, or a
scatter with its merge; the set operators over them become an expression tree (SetPlan) that
proxy.exec.setops runs, combining the branch results in the proxy as one MariaDB would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Union

from meta.errors import ProxyError, syntax_error
from proxy.plan.analysis import not_supported
from proxy.plan.sqltok import Token, tokenize, unquote_ident

if TYPE_CHECKING:
    from proxy.plan.analyzer import Grants
    from proxy.plan.plan import Plan

_OPS = frozenset({"UNION", "EXCEPT", "INTERSECT"})
_TAIL = frozenset({"ORDER", "LIMIT"})
_REFUSED_TAIL = frozenset({"INTO", "FOR", "LOCK", "PROCEDURE"})
PROBE_CTE = "_pydble_probe"


@dataclass(frozen=True)
class Leaf:
    """One branch: its client SQL, how it is run, and its physical SQL for the collation probe."""

    sql: str
    plan: "Plan"
    phys: str
    width: int | None = None   # its number of columns when the text tells (no `*`): probed in the same trip


@dataclass(frozen=True)
class SetNode:
    """left op right; `all` keeps duplicates (UNION ALL, INTERSECT ALL, EXCEPT ALL)."""

    op: str
    all: bool
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True)
class Ordered:
    """A parenthesized set operation with its own ORDER BY / LIMIT."""

    body: "Expr"
    order: tuple[tuple[Union[int, str], bool], ...]
    offset: int
    limit: int | None


Expr = Union[Leaf, SetNode, Ordered]


@dataclass(frozen=True)
class SetPlan:
    """What the executor runs: the expression tree over the branches and whether it streams."""

    expr: Expr
    leaves: tuple[Leaf, ...]
    streaming: bool      # only UNION ALL, no ORDER BY: MariaDB sends the branches' rows as they come
    nested: tuple[Expr, ...] = ()   # groups MariaDB makes derived tables of: their first branch names columns


# --- parsing ------------------------------------------------------------------------------------

class _Reader:
    """A recursive-descent reader of a query expression's set operators over the tokens."""

    def __init__(self, sql: str, toks: list[Token], leaf: Callable[[str], Leaf]) -> None:
        self.sql, self.toks, self.leaf = sql, toks, leaf
        self.close: dict[int, int] = {}
        stack: list[int] = []
        for i, t in enumerate(toks):
            if t[0] == "o" and t[1] == "(":
                stack.append(i)
            elif t[0] == "o" and t[1] == ")" and stack:
                self.close[stack.pop()] = i
        self.leaves: list[Leaf] = []
        self.ops: list[tuple[str, bool]] = []
        self.ordered = False
        # a parenthesized set operation, or an INTERSECT chain right of UNION/EXCEPT: a derived table in
        # MariaDB, whose column names must be unique (1060)
        self.nested: list[Expr] = []

    def word(self, i: int, end: int) -> str:
        return self.toks[i][1].upper() if i < end and self.toks[i][0] == "w" else ""

    def text(self, a: int, b: int) -> str:
        return self.sql[self.toks[a][2]:self.toks[b - 1][3]]

    def query(self, a: int, end: int) -> Expr:
        """query := term {(UNION|EXCEPT) [ALL|DISTINCT] term} [ORDER BY ...] [LIMIT ...]."""
        if self.word(a, end) == "WITH":
            raise not_supported("WITH (common table expressions) over a UNION, INTERSECT or EXCEPT across "
                                "shardingNodes is not supported")
        left, i = self.term(a, end)
        while self.word(i, end) in ("UNION", "EXCEPT"):
            op = self.word(i, end)
            i, dup = self.quantifier(i + 1, end)
            right, i = self.term(i, end)
            if isinstance(right, SetNode) and all(right is not x for x in self.nested):
                self.nested.append(right)
            left = SetNode(op, dup, left, right)
            self.ops.append((op, dup))
        order: tuple[tuple[Union[int, str], bool], ...] = ()
        offset, limit = 0, None
        if self.word(i, end) == "ORDER":
            if self.word(i + 1, end) != "BY":
                raise self.syntax(i)
            i, order = self.order_by(i + 2, end)
        if self.word(i, end) == "LIMIT":
            i, offset, limit = self.limit(i + 1, end)
        if i < end:
            if self.word(i, end) in _REFUSED_TAIL:
                raise not_supported(f"{self.word(i, end)} after a UNION, INTERSECT or EXCEPT across shardingNodes "
                                    f"is not supported")
            raise self.syntax(i)
        if order or limit is not None:
            self.ordered = self.ordered or bool(order)
            return Ordered(left, order, offset, limit)
        return left

    def quantifier(self, i: int, end: int) -> tuple[int, bool]:
        w = self.word(i, end)
        if w == "ALL":
            return i + 1, True
        if w == "DISTINCT":
            return i + 1, False
        return i, False

    def term(self, a: int, end: int) -> tuple[Expr, int]:
        """term := primary {INTERSECT [ALL|DISTINCT] primary}."""
        left, i = self.primary(a, end)
        while self.word(i, end) == "INTERSECT":
            i, dup = self.quantifier(i + 1, end)
            right, i = self.primary(i, end)
            left = SetNode("INTERSECT", dup, left, right)
            self.ops.append(("INTERSECT", dup))
        return left, i

    def primary(self, a: int, end: int) -> tuple[Expr, int]:
        toks = self.toks
        if a >= end:
            raise self.syntax(a)
        if toks[a][0] == "o" and toks[a][1] == "(":
            c = self.close.get(a, -1)
            if c < 0 or c >= end:
                raise self.syntax(a)
            if self.has_setop(a + 1, c):
                group = self.query(a + 1, c)
                self.nested.append(group)
                return group, c + 1
            return self.leaf(self.text(a + 1, c)), c + 1
        if self.word(a, end) != "SELECT":
            raise self.syntax(a)
        i = a + 1
        while i < end:
            t = toks[i]
            if t[0] == "o" and t[1] == "(":
                i = self.close.get(i, end - 1) + 1
                continue
            if t[0] == "w" and t[1].upper() in _OPS | _TAIL:
                break
            i += 1
        return self.leaf(self.text(a, i)), i

    def has_setop(self, a: int, b: int) -> bool:
        i = a
        while i < b:
            t = self.toks[i]
            if t[0] == "o" and t[1] == "(":
                i = self.close.get(i, b) + 1
                continue
            if t[0] == "w" and t[1].upper() in _OPS:
                return True
            i += 1
        return False

    def order_by(self, i: int, end: int) -> tuple[int, tuple[tuple[Union[int, str], bool], ...]]:
        """ORDER BY terms over the result: a column position or a result column's name."""
        out: list[tuple[Union[int, str], bool]] = []
        while True:
            t = self.toks[i] if i < end else None
            if t is None:
                raise self.syntax(i)
            if t[0] == "n" and t[1].isdigit():
                key: Union[int, str] = int(t[1])
            elif t[0] in "wq" and t[1].upper() not in ("ASC", "DESC", "LIMIT"):
                key = unquote_ident(t[1]) if t[0] == "q" else t[1]
            else:
                raise not_supported("ORDER BY over a UNION, INTERSECT or EXCEPT across shardingNodes is only "
                                    "supported by result column name or position")
            i += 1
            nxt = self.toks[i] if i < end else None
            if nxt is not None and not (nxt[0] == "o" and nxt[1] == ",") and self.word(i, end) not in (
                    "ASC", "DESC", "LIMIT"):
                raise not_supported("ORDER BY over a UNION, INTERSECT or EXCEPT across shardingNodes is only "
                                    "supported by result column name or position")
            desc = False
            if self.word(i, end) in ("ASC", "DESC"):
                desc = self.word(i, end) == "DESC"
                i += 1
            out.append((key, desc))
            if i < end and self.toks[i][0] == "o" and self.toks[i][1] == ",":
                i += 1
                continue
            return i, tuple(out)

    def limit(self, i: int, end: int) -> tuple[int, int, int | None]:
        def num(k: int) -> int:
            if k >= end or self.toks[k][0] != "n" or not self.toks[k][1].isdigit():
                raise not_supported("LIMIT over a UNION, INTERSECT or EXCEPT across shardingNodes must be an "
                                    "integer literal")
            return int(self.toks[k][1])
        first = num(i)
        i += 1
        if i < end and self.toks[i][0] == "o" and self.toks[i][1] == ",":
            return i + 2, first, num(i + 1)
        if self.word(i, end) == "OFFSET":
            return i + 2, num(i + 1), first
        return i, 0, first

    def syntax(self, i: int) -> ProxyError:
        return syntax_error(self.sql, self.toks[i][2] if i < len(self.toks) else None)


def plan_set_operation(router: Any, sql: str, toks: list[Token], schema: str | None,
                       grants: "Grants | None", tables: tuple[tuple[str, str], ...]) -> "Plan":
    """Plan a set operation whose branches do not all route to one node (or refuse with 1235)."""
    from proxy.plan.plan import Plan

    def leaf(text: str) -> Leaf:
        plan = router.route(text, schema, grants)
        if plan.setop is not None or plan.kind != "select" or plan.is_write or not plan.targets:
            raise not_supported("a branch of this UNION, INTERSECT or EXCEPT cannot be run on its own")
        ltoks = tokenize(text)
        phys = router._render(text, ltoks, tuple(router.analyzer.strips(ltoks)))
        return Leaf(text, plan, phys, _width(phys))

    rd = _Reader(sql, toks, leaf)
    expr = rd.query(0, len(toks))
    rd.leaves = list(_leaves(expr))
    streaming = all(op == "UNION" and dup for op, dup in rd.ops) and not rd.ordered
    setplan = SetPlan(expr, tuple(rd.leaves), streaming, tuple(rd.nested))
    all_tables = dict.fromkeys(tables)
    for lf in rd.leaves:
        all_tables.update(dict.fromkeys(lf.plan.tables))
    return Plan("select", (), False, tuple(all_tables), setop=setplan)


def _duplicate_name(names: list[str]) -> str | None:
    """The first column name that repeats an earlier one (case-insensitively), as MariaDB names it."""
    seen: set[str] = set()
    for name in names:
        if name.lower() in seen:
            return name
        seen.add(name.lower())
    return None


def _width(sql: str) -> int | None:
    """The number of select items of a plain SELECT, or None (a `*`, a parenthesized or WITH query)."""
    from proxy.plan.scatter import _lex, _layout, _split
    toks = _lex(sql)
    lay = _layout(sql, toks)
    if lay.select != 0:
        return None
    items = _split(sql, toks, lay.items, lay.clause_end(lay.select))
    for a, b in items:
        if sql[toks[b - 1][1]:toks[b - 1][2]] == "*":
            return None
    return len(items) or None


def probe_sql(phys: str, width: int, texts: list[int]) -> str:
    """COLLATION() and COERCIBILITY() of a branch's columns, through a CTE left-joined to one row, so a
    branch without rows still answers."""
    names = ", ".join(f"c{i}" for i in range(width))
    items = ", ".join(f"COLLATION(c{i}), COERCIBILITY(c{i})" for i in texts)
    return (f"WITH {PROBE_CTE}({names}) AS ({phys}) SELECT {items} FROM (SELECT 1) AS _pydble_one "
            f"LEFT JOIN {PROBE_CTE} ON 1")


def _leaves(e: Expr) -> list[Leaf]:
    if isinstance(e, Leaf):
        return [e]
    if isinstance(e, Ordered):
        return _leaves(e.body)
    return _leaves(e.left) + _leaves(e.right)


def _compares(e: Expr) -> bool:
    """Whether any step compares rows (anything but UNION ALL without ORDER BY)."""
    if isinstance(e, Leaf):
        return False
    if isinstance(e, Ordered):
        return bool(e.order) or _compares(e.body)
    return not (e.op == "UNION" and e.all) or _compares(e.left) or _compares(e.right)
