"""UNION / INTERSECT / EXCEPT whose branches live on different shardingNodes, answered in the proxy.

Each branch (a SELECT, or a parenthesized query) is planned like any statement: one node, or a
scatter with its merge. The proxy then combines the branch results as one MariaDB would: UNION ALL
concatenates, UNION / INTERSECT / EXCEPT compare whole rows by each column's collation (asked of the
nodes, as COLLATION()/COERCIBILITY() of the branch's columns), INTERSECT binds tighter than UNION and
EXCEPT, and a trailing ORDER BY / LIMIT applies to the whole. Result names come from the first branch;
branches whose columns differ in type are refused, since MariaDB's type unification is not reproduced.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Union

from meta.errors import NotSupported, ProxyError
from proxy.analysis import not_supported
from proxy.sqltok import Token, tokenize, unquote_ident

if TYPE_CHECKING:  # pragma: no cover
    from proxy.analyzer import Grants
    from proxy.runtime import ExecContext, Planner
    from proxy.protocol.messages import ColumnDef, ErrInfo, ResultSet
    from proxy.reply import Reply
    from proxy.plan import Plan

Row = list[Union[bytes, None]]
_OPS = frozenset({"UNION", "EXCEPT", "INTERSECT"})
_TAIL = frozenset({"ORDER", "LIMIT"})
_REFUSED_TAIL = frozenset({"INTO", "FOR", "LOCK", "PROCEDURE"})
_MAX_LIMIT = (1 << 64) - 1
PROBE_CTE = "_pydble_probe"
_INT_RANK = {0x01: 0, 0x02: 1, 0x09: 2, 0x03: 3, 0x08: 4}   # TINYINT < SMALLINT < MEDIUMINT < INT < BIGINT


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
        near = self.sql[self.toks[i][2]:self.toks[i][2] + 40] if i < len(self.toks) else ""
        return ProxyError("You have an error in your SQL syntax; check the manual that corresponds to your "
                          f"MariaDB server version for the right syntax to use near '{near}'", 1064, "42000")


def plan_set_operation(router: "Planner", sql: str, toks: list[Token], schema: str | None,
                       grants: "Grants | None", tables: tuple[tuple[str, str], ...]) -> "Plan":
    """Plan a set operation whose branches do not all route to one node (or refuse with 1235)."""
    from proxy.plan import Plan

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
    from proxy.scatter import _lex, _layout, _split
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


# --- running --------------------------------------------------------------------------------------

@dataclass
class _Result:
    """A branch's (or a sub-expression's) rows, with each column's collation (name, coercibility)."""

    columns: list["ColumnDef"]
    rows: list[Row]
    collations: list[tuple[bytes | None, int]]


async def run_set_operation(ex: "ExecContext", plan: "Plan", r: "Reply", more: bool) -> None:
    """Run every branch, combine them as MariaDB does and send the one result set."""
    from proxy.merge import merge_results
    from proxy.protocol.messages import ResultSet
    sp: SetPlan = plan.setop
    compare = _compares(sp.expr)
    results: dict[int, _Result] = {}

    async def one(lf: Leaf) -> ErrInfo | None:
        targets = [(t.node, t.sql) for t in lf.plan.targets]
        along = compare and lf.width is not None   # the probe rides behind the first node's query
        if along:
            targets[0] = (targets[0][0], f"{targets[0][1]};{probe_sql(lf.phys, lf.width, list(range(lf.width)))}")
        scanners = await ex._run_on(targets, copies=ex._global_only(lf.plan))
        probed = None
        if along:
            sc0 = scanners[0]
            if len(sc0.results) == 2 and sc0.error is None and sc0.results[1].rows:
                probed = sc0.results[1].rows[0]
                del sc0.results[1]
            elif sc0.results and sc0.results[0].columns:   # the branch ran, the probe did not
                raise NotSupported("pydble could not ask a shardingNode which collations a branch of this set "
                                   "operation compares by" + (f": {sc0.error.message}" if sc0.error else ""))
        for sc in scanners:
            if sc.error is not None:
                return sc.error
        sets = [sc.results[0] for sc in scanners if sc.results and sc.results[0].columns]
        if len(sets) != len(scanners):
            raise NotSupported("a branch of this set operation did not return a result set")
        rs = merge_results(lf.plan.merge, sets) if lf.plan.merge is not None else sets[0]
        colls: list[tuple[bytes | None, int]] = [(None, 5)] * len(rs.columns)
        if probed is not None and len(rs.columns) == lf.width:
            colls = [(probed[2 * i], int(probed[2 * i + 1]) if probed[2 * i + 1] is not None else 6)
                     if _is_text(c) else (None, 5) for i, c in enumerate(rs.columns)]
        elif compare:
            colls = await _probe(ex, lf, rs)
        results[id(lf)] = _Result(list(rs.columns), [list(x) for x in rs.rows], colls)
        return None

    if ex._pinning() or ex.locked or ex.temp.conns:   # one connection per node: the branches take turns
        errors = [await one(lf) for lf in sp.leaves]
    else:
        errors = list(await asyncio.gather(*(one(lf) for lf in sp.leaves)))
    err = next((e for e in errors if e is not None), None)
    if err is not None:
        r.err_info(err)
        return
    branches = [results[id(lf)] for lf in sp.leaves]
    for group in sp.nested:   # as MariaDB refuses the derived table it makes of the group
        dup = _duplicate_name([c.name for c in results[id(_leaves(group)[0])].columns])
        if dup is not None:
            raise ProxyError(f"Duplicate column name '{dup}'", 1060, "42S21")
    _result_columns(sp, branches, branches[0])   # differing types are refused before any value is compared
    if compare:   # MariaDB types the result columns once, over every branch: each step compares by them
        colls = branches[0].collations
        for b in branches[1:]:
            colls = [_aggregate_collation(x, y, c.name) for x, y, c in zip(colls, b.collations, b.columns)]
        for b in branches:
            b.collations = list(colls)
    out = _evaluate(sp.expr, results)
    columns = _result_columns(sp, branches, out)
    warnings = min(len(ex.session.warnings), 0xFFFF)
    r.resultset(ResultSet(columns, out.rows), ex.session.status(), more, warnings)


def _is_text(col: "ColumnDef") -> bool:
    from proxy.merge import K_BIN, K_CI, column_kind
    return column_kind(col) in (K_CI, K_BIN)


async def _probe(ex: "ExecContext", lf: Leaf, rs: "ResultSet") -> list[tuple[bytes | None, int]]:
    """The collation and coercibility of each text column of a branch, asked of one of its nodes
    (through a CTE left-joined to one row, so a branch without rows still answers)."""
    n = len(rs.columns)
    texts = [i for i, c in enumerate(rs.columns) if _is_text(c)]
    out: list[tuple[bytes | None, int]] = [(None, 5)] * n
    if not texts:
        return out
    sql = probe_sql(lf.phys, n, texts)
    node = lf.plan.targets[0].node
    (sc,) = await ex._run_on([(node, sql)])
    if sc.error is not None or not sc.results or not sc.results[0].rows:
        raise NotSupported("pydble could not ask a shardingNode which collations a branch of this set "
                           "operation compares by" + (f": {sc.error.message}" if sc.error is not None else ""))
    row = sc.results[0].rows[0]
    for k, i in enumerate(texts):
        coer = row[2 * k + 1]
        out[i] = (row[2 * k], int(coer) if coer is not None else 6)
    return out


def _aggregate_collation(a: tuple[bytes | None, int], b: tuple[bytes | None, int], col: str
                         ) -> tuple[bytes | None, int]:
    """MariaDB's collation aggregation for a UNION column: the lower coercibility wins; at equal
    coercibility a _bin collation of the same character set wins; anything else is refused."""
    (ca, da), (cb, db) = a, b
    if ca is None or da >= 6:
        return b if cb is not None else a
    if cb is None or db >= 6:
        return a
    if ca == cb:
        return (ca, min(da, db))
    if da != db:
        return a if da < db else b
    csa, csb = ca.split(b"_")[0], cb.split(b"_")[0]
    if da != 0 and csa == csb:
        if ca.endswith(b"_bin"):
            return a
        if cb.endswith(b"_bin"):
            return b
    raise NotSupported(f"the column {col} mixes the collations {ca.decode('ascii', 'replace')} and "
                       f"{cb.decode('ascii', 'replace')} across the branches of this set operation, which "
                       f"pydble does not combine")


def _key_fn(columns: list["ColumnDef"], collations: list[tuple[bytes | None, int]]
            ) -> list[Callable[[bytes], Any]]:
    from proxy.merge import K_BIN, K_CI, collation_kind, column_kind, value_key
    keys = []
    for c, (name, _) in zip(columns, collations):
        kind = column_kind(c)
        if kind in (K_CI, K_BIN):
            kind = collation_kind(name, kind, c.name)
        keys.append(value_key(c, kind))
    return keys


def _row_key(keys: list[Callable[[bytes], Any]]) -> Callable[[Row], tuple]:
    return lambda row: tuple(None if v is None else f(v) for v, f in zip(row, keys))


def _check_width(a: _Result, b: _Result) -> None:
    if len(a.columns) != len(b.columns):
        raise ProxyError("The used SELECT statements have a different number of columns", 1222, "21000")


def _evaluate(e: Expr, results: dict[int, _Result]) -> _Result:
    if isinstance(e, Leaf):
        return results[id(e)]
    if isinstance(e, Ordered):
        body = _evaluate(e.body, results)
        return _order_limit(body, e)
    left, right = _evaluate(e.left, results), _evaluate(e.right, results)
    _check_width(left, right)
    colls = [_aggregate_collation(a, b, c.name) for a, b, c in zip(left.collations, right.collations,
                                                                     left.columns)]
    out = _Result(left.columns, [], colls)
    if e.op == "UNION" and e.all:
        out.rows = left.rows + right.rows
        return out
    key = _row_key(_key_fn(left.columns, colls))
    if e.op == "UNION":
        seen: set[tuple] = set()
        for row in left.rows + right.rows:
            k = key(row)
            if k not in seen:
                seen.add(k)
                out.rows.append(row)
        return out
    rcount = Counter(key(row) for row in right.rows)
    if e.all:   # INTERSECT ALL: min(m, n) copies; EXCEPT ALL: max(m - n, 0) copies
        used: Counter[tuple] = Counter()
        for row in left.rows:
            k = key(row)
            used[k] += 1
            if (e.op == "INTERSECT") == (used[k] <= rcount[k]):
                out.rows.append(row)
        return out
    done: set[tuple] = set()
    for row in left.rows:
        k = key(row)
        if k in done:
            continue
        done.add(k)
        if (k in rcount) == (e.op == "INTERSECT"):
            out.rows.append(row)
    return out


def _order_limit(res: _Result, e: Ordered) -> _Result:
    from proxy.merge import row_sort_key
    from proxy.protocol.constants import ENUM_FLAG, SET_FLAG, T_ENUM, T_SET
    rows = res.rows
    if e.order:
        keys = _key_fn(res.columns, res.collations)
        terms = []
        for key, desc in e.order:
            if isinstance(key, int):
                if not 1 <= key <= len(res.columns):
                    raise ProxyError(f"Unknown column '{key}' in 'order clause'", 1054, "42S22")
                i = key - 1
            else:
                hits = [j for j, c in enumerate(res.columns) if c.name.lower() == key.lower()]
                if not hits:
                    raise ProxyError(f"Unknown column '{key}' in 'order clause'", 1054, "42S22")
                i = hits[0]
            c = res.columns[i]
            if c.type in (T_ENUM, T_SET) or c.flags & (ENUM_FLAG | SET_FLAG):
                raise NotSupported("ORDER BY an ENUM or SET column over a set operation across shardingNodes "
                                   "is not supported")
            terms.append((i, desc, keys[i]))
        rows = sorted(rows, key=row_sort_key(terms))
    if e.offset or e.limit is not None:
        stop = None if e.limit is None else min(e.offset + e.limit, _MAX_LIMIT)
        rows = rows[e.offset:stop]
    return _Result(res.columns, rows, res.collations)


# --- result metadata ------------------------------------------------------------------------------

def _result_columns(sp: SetPlan, branches: list[_Result], out: _Result) -> list["ColumnDef"]:
    """The column definitions MariaDB sends for the set operation, from the first branch's, or a refusal
    when the branches' types differ (MariaDB would unify them in ways pydble does not reproduce)."""
    from proxy.protocol.constants import (BINARY_FLAG, ENUM_FLAG, NOT_NULL_FLAG, SET_FLAG, NUMERIC_TYPES, T_BLOB, T_LONG_BLOB,
                                          T_MEDIUM_BLOB, T_STRING, T_TINY_BLOB, T_VAR_STRING, UNSIGNED_FLAG,
                                          ZEROFILL_FLAG)
    first = branches[0]
    for b in branches[1:]:
        _check_width(first, b)
    strings = (T_VAR_STRING, T_STRING)
    blobs = (T_TINY_BLOB, T_BLOB, T_MEDIUM_BLOB, T_LONG_BLOB)
    cols = []
    for i, c0 in enumerate(first.columns):
        length = c0.length
        not_null = True
        ints = [b.columns[i] for b in branches]
        if all(c.type in _INT_RANK for c in ints) and len({c.flags & UNSIGNED_FLAG for c in ints}) == 1:
            c0 = replace(c0, type=max((c.type for c in ints), key=_INT_RANK.__getitem__))   # INT and BIGINT: BIGINT
        for b in branches:
            c = b.columns[i]
            if c.type in _INT_RANK and c0.type in _INT_RANK:
                c = replace(c, type=c0.type)
            same = (c.type == c0.type and c.charset == c0.charset and c.decimals == c0.decimals
                    and (c.flags & UNSIGNED_FLAG) == (c0.flags & UNSIGNED_FLAG)
                    and (c0.type in NUMERIC_TYPES or (bool(c.flags & BINARY_FLAG) or c.type in strings + blobs)
                         == (bool(c0.flags & BINARY_FLAG) or c0.type in strings + blobs)))
            if c.flags & (ENUM_FLAG | SET_FLAG):
                raise NotSupported(f"the ENUM or SET column {c0.name} in a set operation across shardingNodes is "
                                   f"not supported: MariaDB turns it into a string type pydble does not reproduce")
            if not same:
                raise NotSupported(f"the column {c0.name} has different types in the branches of this set "
                                   f"operation across shardingNodes; MariaDB would unify them in a way pydble "
                                   f"does not reproduce (cast every branch to one type)")
            length = max(length, c.length)
            not_null = not_null and bool(c.flags & NOT_NULL_FLAG)
        if c0.type in strings and length > 65532:
            raise NotSupported(f"the column {c0.name} of this set operation is too long to be merged")
        numeric = c0.type in NUMERIC_TYPES
        text = c0.type in strings + blobs and c0.charset != 63
        flags = (NOT_NULL_FLAG if not_null else 0) | (c0.flags & (UNSIGNED_FLAG | ZEROFILL_FLAG))
        if text:
            coll = out.collations[i][0]
            if coll is not None and coll.endswith(b"_bin") or (coll is None and c0.flags & BINARY_FLAG):
                flags |= BINARY_FLAG
        elif numeric:
            flags |= BINARY_FLAG if sp.streaming else 0
        else:
            flags |= c0.flags & BINARY_FLAG
        decimals = c0.decimals
        if text and c0.type in strings:   # as MariaDB: unset when streamed, 0 from its temporary table
            decimals = 39 if sp.streaming else 0
        cols.append(replace(c0, schema="", table="", org_table="", org_name="" if sp.streaming else c0.name,
                            length=length, flags=flags | (c0.flags & 16 if c0.type in blobs else 0),
                            decimals=decimals, raw=None))
    return cols
