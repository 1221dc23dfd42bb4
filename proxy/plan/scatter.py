"""Rewrite a SELECT that runs on several shardingNodes into the SQL each node runs and a MergePlan.

The node SQL is the client's text with a few token-level edits (AVG becomes SUM plus a hidden
COUNT, helper columns are appended to the select list, HAVING/ORDER BY/LIMIT are dropped or
changed), so everything sqlglot does not model is sent unchanged. Plans are cached per statement
shape: literals in FROM/WHERE cannot change the plan, so they are masked in the cache key and the
edits are replayed on each new statement's own tokens.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from meta.errors import NotSupported, ProxyError

from proxy.plan.mergeplan import (
    ANY, AVG, BIT_AND, BIT_OR, BIT_XOR, COUNT, GROUP_CONCAT, MAX, MIN, STD_POP, STD_SAMP, SUM, VAR_POP,
    VAR_SAMP, VARIANCES, ARITH, Aggregate, HavingTerm, MergePlan, SortKey,
)
from proxy.wire.packets import splice

# --- a small MySQL lexer: enough to find clauses, items and literals ----------------------

_TOKEN = re.compile(r"""
  (\s+)
| (--(?=[ \t\r\n]|$)[^\n]*|\#[^\n]*|/\*.*?\*/)
| ((?:[xXbBnN])?'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
| (`(?:[^`]|``)*`)
| (0[xX][0-9a-fA-F]+(?![\w$])|0[bB][01]+(?![\w$])|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w$]))
| (@@?(?:[\w$.]+|`(?:[^`]|``)*`|'(?:[^'\\]|\\.|'')*'))
| ([\w$\u0080-\uffff]+)
| (<=>|<=|>=|<>|!=|:=|&&|\|\||<<|>>|->>|->|.)
""", re.X | re.S)
_WS, _COMMENT, _STR, _QID, _NUM, _VAR, _WORD, _OP = range(1, 9)

Tok = tuple[int, int, int]  # kind, start, end (exclusive)

_CLAUSES = frozenset({"FROM", "WHERE", "GROUP", "HAVING", "WINDOW", "ORDER", "LIMIT", "FOR",
                      "LOCK", "INTO", "PROCEDURE", "UNION", "EXCEPT", "INTERSECT"})
_NEEDS_BY = frozenset({"GROUP", "ORDER"})
_MODIFIERS = frozenset({"ALL", "DISTINCT", "DISTINCTROW", "HIGH_PRIORITY", "STRAIGHT_JOIN",
                        "SQL_SMALL_RESULT", "SQL_BIG_RESULT", "SQL_BUFFER_RESULT", "SQL_CACHE",
                        "SQL_NO_CACHE", "SQL_CALC_FOUND_ROWS"})


def _lex(sql: str) -> list[Tok]:
    """Tokens minus whitespace and plain comments (/*! */ and /*+ */ stay: they mean something)."""
    toks = []
    for m in _TOKEN.finditer(sql):
        k = m.lastindex or _OP
        if k == _WS:
            continue
        if k == _COMMENT and not sql.startswith(("/*!", "/*+"), m.start()):
            continue
        toks.append((k, m.start(), m.end()))
    return toks


@dataclass
class _Layout:
    """Where the main SELECT's clauses start, by token index."""

    select: int
    items: int
    clauses: dict[str, int]
    end: int

    def clause_end(self, start: int) -> int:
        """The index after the last token of the clause starting at `start`."""
        after = [i for i in self.clauses.values() if i > start]
        return min(after) if after else self.end

    def first_after(self, start: int, names: frozenset[str]) -> int:
        """The first clause of `names` after `start`, or the statement end."""
        found = [i for n, i in self.clauses.items() if n in names and i > start]
        return min(found) if found else self.end


def _layout(sql: str, toks: list[Tok]) -> _Layout:
    depth = 0
    select = -1
    clauses: dict[str, int] = {}
    n = len(toks)
    for i, (k, s, e) in enumerate(toks):
        if k == _OP:
            c = sql[s]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            continue
        if k != _WORD or depth != 0:
            continue
        w = sql[s:e].upper()
        if w == "SELECT" and select < 0:
            select = i
        elif select >= 0 and w in _CLAUSES and w not in clauses:
            if w in _NEEDS_BY and not (i + 1 < n and sql[toks[i + 1][1]:toks[i + 1][2]].upper()
                                       == "BY"):
                continue
            clauses[w] = i
    end = n
    while end > 0 and toks[end - 1][0] == _OP and sql[toks[end - 1][1]] == ";":
        end -= 1
    items = select + 1
    while items < end and (toks[items][0] == _COMMENT or (
            toks[items][0] == _WORD and sql[toks[items][1]:toks[items][2]].upper() in _MODIFIERS)):
        items += 1
    return _Layout(select, items, clauses, end)


_PLAN_SENSITIVE = frozenset(_CLAUSES - {"FROM", "WHERE"})


def _shape_key(sql: str, toks: list[Tok], lay: _Layout) -> str:
    """The statement with the literals of FROM/WHERE masked: they never change the plan."""
    lo = lay.clauses.get("FROM", lay.end)
    hi = lay.first_after(lo, _PLAN_SENSITIVE) if lo < lay.end else lo
    parts = []
    for i, (k, s, e) in enumerate(toks):
        if lo <= i < hi and (k == _STR or k == _NUM):
            parts.append("\x00" + str(k))
        else:
            parts.append(sql[s:e])
    return "\x1f".join(parts)


Edit = tuple[int, int, str]  # replace tokens [a, b) with text; a == b inserts after token a-1


def _apply(sql: str, toks: list[Tok], edits: tuple[Edit, ...]) -> str:
    spans = []
    for a, b, text in edits:
        if a == b:
            p = toks[a - 1][2]
            spans.append((p, p, text))
        else:
            spans.append((toks[a][1], toks[b - 1][2], text))
    spans.sort(key=lambda t: (t[0], t[1]))
    return splice(sql, spans)


# --- the plan cache -------------------------------------------------------------------------

CACHE_SIZE = 4096
_cache: OrderedDict[str, tuple[tuple[Edit, ...], MergePlan] | str] = OrderedDict()
_cache_lock = threading.Lock()


def plan_scatter_select(sql: str) -> tuple[str, MergePlan]:
    """Parse a SELECT that runs on several nodes; return the SQL each node runs and how to merge."""
    toks = _lex(sql)
    lay = _layout(sql, toks)
    key = _shape_key(sql, toks, lay)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
    if hit is None:
        try:
            hit = _Builder(sql, toks, lay).build()
        except NotSupported as e:
            hit = e.message
        with _cache_lock:
            _cache[key] = hit
            if len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    if isinstance(hit, str):
        raise NotSupported(hit)
    edits, plan = hit
    return (_apply(sql, toks, edits) if edits else sql), plan


def clear_cache() -> None:
    """Forget cached plans (tests, or after a configuration reload)."""
    with _cache_lock:
        _cache.clear()


# --- building a plan ----------------------------------------------------------------------

_AGG_NAMES = frozenset({"COUNT", "SUM", "AVG", "MIN", "MAX", "GROUP_CONCAT", "BIT_AND", "BIT_OR",
                        "BIT_XOR", "STD", "STDDEV", "STDDEV_POP", "STDDEV_SAMP", "VARIANCE",
                        "VAR_POP", "VAR_SAMP", "JSON_ARRAYAGG", "JSON_OBJECTAGG", "ANY_VALUE",
                        "PERCENTILE_CONT", "PERCENTILE_DISC", "MEDIAN"})
_VOLATILE = frozenset({"RAND", "UUID", "UUID_SHORT", "SYSDATE"})
_SIMPLE_AGGS: dict[type, str] = {
    exp.Sum: SUM, exp.Avg: AVG, exp.Min: MIN, exp.Max: MAX, exp.BitwiseAndAgg: BIT_AND,
    exp.BitwiseOrAgg: BIT_OR, exp.BitwiseXorAgg: BIT_XOR, exp.AnyValue: ANY,
}
# sqlglot reads VAR_SAMP as VARIANCE (which is VAR_POP in MariaDB): the name is taken from the text
_VARIANCE_NODES = (exp.Stddev, exp.StddevPop, exp.StddevSamp, exp.Variance, exp.VariancePop)
_VARIANCE_NAMES = {"STD": STD_POP, "STDDEV": STD_POP, "STDDEV_POP": STD_POP, "STDDEV_SAMP": STD_SAMP,
                   "VARIANCE": VAR_POP, "VAR_POP": VAR_POP, "VAR_SAMP": VAR_SAMP}
_CMP_OPS: dict[type, str] = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=",
                             exp.GT: ">", exp.GTE: ">="}
_MAX_LIMIT = (1 << 64) - 1  # MySQL's largest LIMIT
_LABEL = {"order": "ORDER BY", "group": "GROUP BY", "having": "HAVING"}
_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

Ref = tuple[str, int]  # ("i", select item) | ("h", hidden column) | ("p", absolute column)


def _outer(e: exp.Expression):
    """Nodes of e outside subqueries: an aggregate inside a subquery is that subquery's business."""
    return e.walk(prune=lambda n: n is not e and isinstance(n, (exp.Subquery, exp.Select)))


def _is_agg(n: exp.Expression) -> bool:
    return isinstance(n, exp.AggFunc) or (isinstance(n, exp.Anonymous)
                                          and n.name.upper() in _AGG_NAMES)


def _has_agg(e: exp.Expression) -> bool:
    return any(_is_agg(n) for n in _outer(e))


def _func_name(n: exp.Expression) -> str:
    if isinstance(n, exp.Anonymous):
        return n.name.upper()
    return n.sql_name().upper() if isinstance(n, exp.Func) else ""


def _unparen(e: exp.Expression) -> exp.Expression:
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def _norm(e: exp.Expression) -> str:
    """Canonical text to match ORDER BY/GROUP BY terms to select items (names are case-blind)."""
    def low(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Identifier):
            return exp.Identifier(this=n.name.lower(), quoted=False)
        return n
    return _unparen(e).transform(low).sql(dialect="mysql")


def _sql(e: exp.Expression) -> str:
    return e.sql(dialect="mysql")


def _bare_column(e: exp.Expression) -> str | None:
    """The lower-cased name of an unqualified column reference, else None."""
    e = _unparen(e)
    if isinstance(e, exp.Column) and not e.table and isinstance(e.this, exp.Identifier):
        return e.name.lower()
    return None


def _position(e: exp.Expression) -> int | None:
    if isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
        return int(e.this)
    return None


def _is_constant(e: exp.Expression) -> bool:
    return not any(isinstance(n, (exp.Column, exp.Func, exp.Subquery, exp.Star))
                   for n in e.walk())


@dataclass
class _AggSpec:
    """An aggregate call as the planner sees it."""

    func: str
    node: exp.Expression
    distinct_args: tuple[exp.Expression, ...] = ()
    separator: bytes = b","
    element: exp.Expression | None = None                       # GROUP_CONCAT(x ORDER BY ...): x
    order: tuple[tuple[exp.Expression, bool], ...] = ()        # ... and its ORDER BY terms

    @property
    def distinct(self) -> bool:
        return bool(self.distinct_args)


def _agg_spec(n: exp.Expression) -> _AggSpec:
    """Classify an aggregate call, or say why it cannot be merged."""
    name = _func_name(n) or type(n).__name__.upper()
    arg = n.this if isinstance(n, exp.Func) else None
    inner = [a for a in n.args.values() if isinstance(a, exp.Expression)]
    if any(_has_agg(a) for a in inner):
        raise NotSupported(f"nested aggregates in {_sql(n)} cannot be merged across shardingNodes")
    if isinstance(n, exp.Count):
        if isinstance(arg, exp.Distinct):
            return _AggSpec(COUNT, n, tuple(arg.expressions))
        return _AggSpec(COUNT, n)
    if isinstance(n, exp.GroupConcat):
        sep = n.args.get("separator")
        if sep is not None and not (isinstance(sep, exp.Literal) and sep.is_string):
            raise NotSupported("GROUP_CONCAT with a computed SEPARATOR cannot be merged")
        sep_b = b"," if sep is None else sep.this.encode("utf-8")
        if isinstance(arg, exp.Order):
            return _ordered_group_concat(n, arg, sep_b)
        if n.find(exp.Order):
            raise NotSupported("this GROUP_CONCAT(... ORDER BY ...) cannot be merged across shardingNodes")
        if isinstance(arg, exp.Distinct):
            return _AggSpec(GROUP_CONCAT, n, tuple(arg.expressions), sep_b)
        return _AggSpec(GROUP_CONCAT, n, separator=sep_b)
    if isinstance(n, _VARIANCE_NODES) or (isinstance(n, exp.Anonymous) and name == "STD"):
        raise NotSupported(f"{name} can be merged across shardingNodes only as a selected column")
    func = _SIMPLE_AGGS.get(type(n))
    if func is None:
        raise NotSupported(f"the aggregate {name} cannot be merged from partial results of "
                           f"several shardingNodes")
    if isinstance(arg, exp.Distinct):
        if func in (MIN, MAX):
            return _AggSpec(func, n)  # DISTINCT changes nothing for MIN/MAX
        if func in (SUM, AVG) and len(arg.expressions) == 1:
            return _AggSpec(func, n, tuple(arg.expressions))
        raise NotSupported(f"{name}(DISTINCT ...) cannot be merged across shardingNodes")
    return _AggSpec(func, n)


_ARITH_AGGS = (exp.Count, exp.Sum, exp.Min, exp.Max)


def _arith_spec(u: exp.Expression) -> _AggSpec:
    """`COUNT(*) + 1`, `MAX(x) - MIN(x)`: + - * and unary minus over COUNT/SUM/MIN/MAX and number
    literals, computed in the proxy from the merged aggregates; anything else is refused."""
    why = (f"the expression {_sql(u)} over aggregates cannot be merged across shardingNodes; only + - * of "
           f"COUNT, SUM, MIN, MAX and numbers can")

    def check(e: exp.Expression) -> None:
        e = _unparen(e)
        if isinstance(e, exp.Neg):
            check(e.this)
        elif isinstance(e, (exp.Add, exp.Sub, exp.Mul)):
            check(e.this)
            check(e.expression)
        elif isinstance(e, exp.Literal):
            if e.is_string:
                raise NotSupported(why)
        elif isinstance(e, _ARITH_AGGS):
            spec = _agg_spec(e)
            if spec.distinct:
                raise NotSupported(why)
        else:
            raise NotSupported(why)
    check(u)
    return _AggSpec(ARITH, u)


def _ordered_group_concat(n: exp.Expression, order: exp.Order, sep: bytes) -> _AggSpec:
    """GROUP_CONCAT([DISTINCT] x ORDER BY keys): nodes send each (x, keys) with its count, the proxy
    sorts and joins them."""
    why = "cannot be merged across shardingNodes"
    arg = order.this
    terms = []
    for o in order.expressions:
        e = o.this if isinstance(o, exp.Ordered) else o
        if _position(e) is not None or _is_constant(e) or _has_agg(e):
            raise NotSupported(f"GROUP_CONCAT(... ORDER BY {_sql(e)}) {why}: order by a column or expression")
        terms.append((e, bool(o.args.get("desc")) if isinstance(o, exp.Ordered) else False))
    if isinstance(arg, exp.Distinct):
        if len(arg.expressions) != 1 or isinstance(arg.expressions[0], exp.Concat):
            raise NotSupported(f"GROUP_CONCAT(DISTINCT of several values ORDER BY ...) {why}")
        x = arg.expressions[0]
        if any(_norm(e) != _norm(x) for e, _ in terms):
            raise NotSupported(f"GROUP_CONCAT(DISTINCT x ORDER BY another expression) {why}: which row's "
                               f"order value counts is not determined")
        return _AggSpec(GROUP_CONCAT, n, (x,), sep, x, tuple(terms))
    return _AggSpec(GROUP_CONCAT, n, (), sep, arg, tuple(terms))


@dataclass
class _Item:
    """One select-list entry and where it sits in the token stream."""

    expr: exp.Expression
    alias: str | None
    span: tuple[int, int]
    star: bool
    norm: str
    agg: _AggSpec | None = None


@dataclass
class _HiddenAgg:
    """An aggregate the merge combines, selected or hidden, with the columns it reads."""

    spec: _AggSpec
    ref: Ref
    count_ref: Ref | None = None
    name: str | None = None
    moment_refs: tuple[Ref, Ref] | None = None
    order_refs: list[tuple[Ref, bool]] = field(default_factory=list)   # ordered GROUP_CONCAT
    element_ref: Ref | None = None
    count_rows_ref: Ref | None = None
    max_len_ref: Ref | None = None
    program: tuple | None = None   # ARITH: the expression over hidden aggregates
    distinct_refs: list[Ref] = field(default_factory=list)
    avg_ref: Ref | None = None     # a selected AVG: the nodes' AVG(x) (its column definition)


def _split(sql: str, toks: list[Tok], a: int, b: int) -> list[tuple[int, int]]:
    """Token ranges of a comma-separated list at parenthesis depth 0."""
    out = []
    depth = 0
    start = a
    for i in range(a, b):
        k, s, _ = toks[i]
        if k != _OP:
            continue
        c = sql[s]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            out.append((start, i))
            start = i + 1
    if start < b:
        out.append((start, b))
    return out


@dataclass
class _Builder:
    """Plans one statement shape; raises NotSupported with a sentence where merging is wrong."""

    sql: str
    toks: list[Tok]
    lay: _Layout
    items: list[_Item] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    aggs: list[_HiddenAgg] = field(default_factory=list)
    agg_by_norm: dict[str, Ref] = field(default_factory=dict)
    edits: list[Edit] = field(default_factory=list)
    rollup_at: int | None = None  # token index of GROUP BY ... WITH ROLLUP's WITH
    items_end: int = 0  # token index where the select list ends (hidden columns go there)
    pushed: bool = False  # whether the nodes keep a LIMIT

    # -- helpers
    def text(self, a: int, b: int) -> str:
        if a >= b:
            return ""
        return self.sql[self.toks[a][1]:self.toks[b - 1][2]]

    def word(self, i: int) -> str:
        k, s, e = self.toks[i]
        return self.sql[s:e].upper() if k == _WORD else ""

    def add_hidden(self, text: str) -> Ref:
        if text not in self.hidden:
            self.hidden.append(text)
        return ("h", self.hidden.index(text))

    def match_item(self, e: exp.Expression) -> int | None:
        """The select item an ORDER BY/GROUP BY/HAVING term names (alias first, like MySQL)."""
        bare = _bare_column(e)
        if bare is not None:
            for j, it in enumerate(self.items):
                if it.alias is not None and it.alias.lower() == bare:
                    return j
        n = _norm(e)
        for j, it in enumerate(self.items):
            if not it.star and it.norm == n:
                return j
        if bare is not None:
            named = [j for j, it in enumerate(self.items)
                     if isinstance(_unparen(it.expr), exp.Column)
                     and _unparen(it.expr).name.lower() == bare]
            if len(named) == 1:
                return named[0]
        return None

    def substitute_aliases(self, e: exp.Expression) -> exp.Expression:
        """Replace references to select aliases by their expressions, for a hidden column."""
        aliases = {it.alias.lower(): it.expr for it in self.items
                   if it.alias is not None and not it.star}

        def sub(n: exp.Expression) -> exp.Expression:
            name = _bare_column(n) if isinstance(n, exp.Column) else None
            if name is not None and name in aliases:
                return exp.Paren(this=aliases[name].copy())
            return n
        return e.transform(sub)

    def hidden_agg(self, n: exp.Expression) -> Ref:
        """A hidden column for an aggregate that is not in the select list (ORDER BY, HAVING)."""
        key = _norm(n)
        if key in self.agg_by_norm:
            return self.agg_by_norm[key]
        spec = _agg_spec(n)
        if spec.func == AVG:
            arg = _sql(spec.node.this)
            ref = self.add_hidden(f"SUM({arg})")
            cref = self.add_hidden(f"COUNT({arg})")
            self.aggs.append(_HiddenAgg(spec, ref, cref))
        else:
            ref = self.add_hidden(_sql(n))
            self.aggs.append(_HiddenAgg(spec, ref))
        self.agg_by_norm[key] = ref
        return ref

    def resolve(self, e: exp.Expression, span_text: str | None, grouped: bool,
                clause: str) -> Ref | None:
        """The column holding an ORDER BY/GROUP BY/HAVING operand; None for a constant."""
        pos = _position(e)
        if pos is not None and clause != "having":
            return self.positional(pos, clause)
        if any(_func_name(n) in _VOLATILE for n in _outer(e)):
            raise NotSupported(f"{_LABEL[clause]} {_sql(e)} cannot be merged across "
                               f"shardingNodes: the value is different each time it is computed")
        j = self.match_item(e)
        if j is not None:
            return ("i", j)
        if _is_constant(e):
            return None
        if any(isinstance(n, exp.Window) for n in _outer(e)):
            raise NotSupported(f"window functions in {_LABEL[clause]} cannot be merged across "
                               f"shardingNodes")
        if _has_agg(e):
            u = _unparen(e)
            if not grouped or clause == "group" or not _is_agg(u):
                raise NotSupported(f"the expression {_sql(e)} over aggregates in "
                                   f"{_LABEL[clause]} cannot be merged across shardingNodes")
            return self.hidden_agg(u)
        subst = self.substitute_aliases(e)
        if span_text is not None and subst == e:
            return self.add_hidden(span_text)
        return self.add_hidden(_sql(subst))

    def positional(self, pos: int, clause: str) -> Ref:
        stars = [j for j, it in enumerate(self.items) if it.star]
        if not stars:
            if not 1 <= pos <= len(self.items):
                where = "order clause" if clause == "order" else "group statement"
                raise ProxyError(f"Unknown column '{pos}' in '{where}'", 1054, "42S22")
            return ("i", pos - 1)
        if pos - 1 < stars[0]:
            return ("i", pos - 1)
        if clause == "group":
            raise NotSupported("GROUP BY a position inside SELECT * cannot be merged across "
                               "shardingNodes; name the column instead")
        return ("p", pos - 1)

    # -- the phases
    def build(self) -> tuple[tuple[Edit, ...], MergePlan]:
        tree = self.parse()
        self.check_features(tree)
        self.read_items(tree)
        grouped = bool(tree.args.get("group")) or any(it.agg for it in self.items) or any(
            _has_agg(x) for x in (tree.args.get("having"), tree.args.get("order")) if x)
        for j, it in enumerate(self.items):
            if it.agg is not None:
                self.rewrite_item_agg(j, it)
        group_refs = self.read_group(tree, grouped)
        having = self.read_having(tree, grouped)
        order_refs, order_null = self.read_order(tree, grouped)
        distinct = tree.args.get("distinct") is not None
        if distinct and any(ref[0] == "h" for ref, _ in order_refs):
            raise NotSupported("SELECT DISTINCT ... ORDER BY a column that is not selected "
                               "cannot be merged across shardingNodes")
        distinct_args = self.distinct_args()
        offset, limit = self.read_limit(tree)
        if tree.args.get("locks") and limit is not None:
            raise NotSupported("FOR UPDATE/LOCK IN SHARE MODE with LIMIT across shardingNodes "
                               "would lock rows outside the result")
        if self.rollup_at is not None:
            self.check_rollup(group_refs)
        self.node_order_and_limit(tree, grouped, group_refs, order_refs, order_null, having,
                                  bool(distinct_args) or self.rollup_at is not None, distinct, offset, limit)
        if grouped and not order_refs and not order_null:
            order_refs = [(r, False) for r in group_refs]
        compared = list(group_refs) + [r for r, _, _, _ in having] + [r for r, _ in order_refs]
        if distinct:
            compared += [("i", j) for j in range(len(self.items))]
        if grouped:
            compared += [a.ref for a in self.aggs if a.spec.func in (MIN, MAX)]
            compared += [r for a in self.aggs for r in a.distinct_refs]
            compared += [r for a in self.aggs for r, _ in a.order_refs]
        probes = self.collation_probes(compared)
        if self.hidden:
            self.edits.append((self.items_end, self.items_end, ", " + ", ".join(self.hidden)))
        plan = self.finish(grouped, group_refs, having, order_refs, distinct, offset, limit, probes)
        if grouped and self.pushed:
            plan = replace(plan, node_limit=min(offset + (limit or 0), _MAX_LIMIT))
        if self.rollup_at is not None:
            plan = replace(plan, rollup=True)
        return tuple(self.edits), plan

    def check_rollup(self, group_refs: list[Ref]) -> None:
        """Super-aggregate rows NULL the group keys and recompute the aggregates; any other selected
        value (an expression over a key, a column not grouped) could not be recomputed."""
        keys = set(group_refs)
        for j, it in enumerate(self.items):
            if it.star or (("i", j) not in keys and it.agg is None):
                raise NotSupported("GROUP BY ... WITH ROLLUP across shardingNodes is merged only when every "
                                   "selected value is a GROUP BY key or an aggregate")
        if any(r[0] != "i" for r in group_refs):
            raise NotSupported("GROUP BY ... WITH ROLLUP across shardingNodes is merged only when every "
                               "GROUP BY key is selected")

    def parse(self) -> exp.Select:
        if self.lay.select < 0:
            raise NotSupported("only SELECT statements can be merged across shardingNodes")
        try:
            tree = sqlglot.parse_one(self.sql, read="mysql")
        except SqlglotError as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise NotSupported(f"pydble cannot parse this SELECT to merge results from several "
                               f"shardingNodes ({first})") from None
        if not isinstance(tree, exp.Select):
            raise NotSupported(f"{type(tree).__name__.upper()} cannot be merged across "
                               f"shardingNodes; only a single SELECT can")
        return tree

    def check_features(self, tree: exp.Select) -> None:
        if tree.args.get("into"):
            raise NotSupported("SELECT ... INTO across shardingNodes is not supported")
        mods = {_sql(m).upper() for m in tree.args.get("operation_modifiers") or []}
        if "SQL_CALC_FOUND_ROWS" in mods:
            raise NotSupported("SQL_CALC_FOUND_ROWS across shardingNodes is not supported: "
                               "FOUND_ROWS() would count the rows of one node only")
        if tree.args.get("windows"):
            raise NotSupported("a WINDOW clause cannot be merged across shardingNodes")
        group = tree.args.get("group")
        if group is not None and any(group.args.get(k) for k in ("cube", "grouping_sets", "totals")):
            raise NotSupported("GROUP BY ... WITH CUBE / GROUPING SETS cannot be merged across shardingNodes")
        if group is not None and group.args.get("rollup"):
            self.find_rollup(tree)
        limit = tree.args.get("limit")
        if limit is not None and not isinstance(limit, exp.Limit):
            raise NotSupported("OFFSET ... FETCH across shardingNodes is not supported; use LIMIT")
        for x in tree.expressions:
            if any(isinstance(n, exp.Window) for n in _outer(x)):
                raise NotSupported("window functions cannot be evaluated per shardingNode: "
                                   "their partitions span several nodes")

    def find_rollup(self, tree: exp.Select) -> None:
        """GROUP BY ... WITH ROLLUP: the nodes group without it, the proxy adds the super-aggregate rows."""
        start = self.lay.clauses.get("GROUP")
        end = self.lay.clause_end(start) if start is not None else 0
        at = next((i for i in range(start + 2, end - 1) if self.word(i) == "WITH"
                   and self.word(i + 1) == "ROLLUP"), None) if start is not None else None
        if at is None or at + 2 != end:
            raise NotSupported("pydble could not find WITH ROLLUP in the statement text to merge it")
        if tree.args.get("order") is not None:
            raise ProxyError("Incorrect usage of CUBE/ROLLUP and ORDER BY", 1221, "HY000")
        if tree.args.get("distinct") is not None:
            raise NotSupported("SELECT DISTINCT ... WITH ROLLUP cannot be merged across shardingNodes")
        if any(self.word(i) in ("ASC", "DESC") for i in range(start + 2, at)):
            raise NotSupported("GROUP BY ... ASC/DESC WITH ROLLUP cannot be merged across shardingNodes")
        self.rollup_at = at
        self.edits.append((at, end, ""))

    def read_items(self, tree: exp.Select) -> None:
        lay = self.lay
        end = lay.clause_end(lay.select)
        self.items_end = end
        spans = _split(self.sql, self.toks, lay.items, end)
        if len(spans) != len(tree.expressions):
            raise NotSupported("pydble could not match the select list of this statement to its "
                               "text, so it cannot rewrite it for several shardingNodes")
        for (a, b), x in zip(spans, tree.expressions):
            alias = x.alias if isinstance(x, exp.Alias) else None
            inner = x.this if isinstance(x, exp.Alias) else x
            star = isinstance(inner, exp.Star) or (isinstance(inner, exp.Column)
                                                    and isinstance(inner.this, exp.Star))
            item = _Item(inner, alias, (a, b), star, "" if star else _norm(inner))
            if not star and _has_agg(inner):
                u = _unparen(inner)
                if not _is_agg(u):
                    item.agg = _arith_spec(u)
                    self.items.append(item)
                    continue
                item.agg = self.variance_spec(u, a, b) or _agg_spec(u)
                if item.agg.func in VARIANCES:
                    item.norm = item.agg.func + ":" + item.norm   # never matched by another spelling
            self.items.append(item)

    def program(self, e: exp.Expression) -> tuple:
        """The arithmetic over aggregates as a small tree whose leaves are hidden aggregate columns."""
        e = _unparen(e)
        if isinstance(e, exp.Neg):
            return ("neg", self.program(e.this))
        if isinstance(e, (exp.Add, exp.Sub, exp.Mul)):
            op = "+" if isinstance(e, exp.Add) else "-" if isinstance(e, exp.Sub) else "*"
            return (op, self.program(e.this), self.program(e.expression))
        if isinstance(e, exp.Literal):
            return ("lit", e.this)
        return ("ref", self.hidden_agg(e))

    def variance_spec(self, u: exp.Expression, a: int, b: int) -> _AggSpec | None:
        """STDDEV/VARIANCE and kin, named by the function word of the item's text."""
        if not (isinstance(u, _VARIANCE_NODES) or (isinstance(u, exp.Anonymous) and u.name.upper() == "STD")):
            return None
        i = a
        while i < b and self.toks[i][0] == _OP and self.sql[self.toks[i][1]] == "(":
            i += 1
        func = _VARIANCE_NAMES.get(self.word(i)) if i < b else None
        arg = u.this if not isinstance(u, exp.Anonymous) else (u.expressions[0] if len(u.expressions) == 1 else None)
        if func is None or arg is None or isinstance(arg, exp.Distinct):
            raise NotSupported(f"the aggregate {_sql(u)} cannot be merged across shardingNodes")
        return _AggSpec(func, u, (), b",")

    def rewrite_item_agg(self, j: int, it: _Item) -> None:
        """Register a selected aggregate; AVG(x) becomes SUM(x) plus a hidden COUNT(x)."""
        spec = it.agg
        assert spec is not None
        ref: Ref = ("i", j)
        self.agg_by_norm.setdefault(it.norm, ref)
        if spec.func == ARITH:
            self.aggs.append(_HiddenAgg(spec, ref, program=self.program(spec.node)))
            return
        if spec.func in VARIANCES:
            node = spec.node
            arg = _sql(node.this if not isinstance(node, exp.Anonymous) else node.expressions[0])
            cref = self.add_hidden(f"COUNT({arg})")
            moments = (self.add_hidden(f"SUM({arg})"), self.add_hidden(f"SUM(({arg}) * ({arg}))"))
            self.aggs.append(_HiddenAgg(spec, ref, cref, moment_refs=moments))
            return
        if spec.func != AVG:
            self.aggs.append(_HiddenAgg(spec, ref))
            return
        a, b = it.span
        i = next((i for i in range(a, b - 1) if self.word(i) == "AVG"
                  and self.sql[self.toks[i + 1][1]] == "("), None)
        if i is None:
            raise NotSupported("pydble could not find AVG in the statement text to rewrite it")
        depth, close = 0, None
        for k in range(i + 1, b):
            c = self.sql[self.toks[k][1]] if self.toks[k][0] == _OP else ""
            depth += (c == "(") - (c == ")")
            if depth == 0:
                close = k
                break
        if close is None:
            raise NotSupported("pydble could not find the end of AVG(...) to rewrite it")
        self.edits.append((i, i + 1, "SUM"))
        cref = self.add_hidden(f"COUNT({self.text(i + 2, close)})")
        aref = self.add_hidden(f"AVG({self.text(i + 2, close)})")
        name = it.alias if it.alias is not None else self.text(a, b)
        self.aggs.append(_HiddenAgg(spec, ref, cref, name, avg_ref=aref))

    def item_spans(self, clause: str, n: int) -> list[str | None]:
        """Source text of each ORDER BY/GROUP BY term (without ASC/DESC), when it can be found."""
        start = self.lay.clauses.get(clause)
        if start is None:
            return [None] * n
        end = self.lay.clause_end(start)
        if clause == "GROUP" and self.rollup_at is not None:
            end = self.rollup_at
        spans = _split(self.sql, self.toks, start + 2, end)
        if len(spans) != n:
            return [None] * n
        out: list[str | None] = []
        for a, b in spans:
            if b - 1 > a and self.word(b - 1) in ("ASC", "DESC"):
                b -= 1
            out.append(self.text(a, b))
        return out

    def read_group(self, tree: exp.Select, grouped: bool) -> list[Ref]:
        group = tree.args.get("group")
        if group is None:
            return []
        refs = []
        texts = self.item_spans("GROUP", len(group.expressions))
        for g, t in zip(group.expressions, texts):
            ref = self.resolve(g, t, grouped, "group")
            if ref is None:
                continue
            if ref[0] == "i" and self.items[ref[1]].agg is not None:
                raise NotSupported(f"GROUP BY the aggregate {_sql(g)} is not possible")
            if ref not in refs:
                refs.append(ref)
        return refs

    def read_having(self, tree: exp.Select, grouped: bool) -> list[tuple[Ref, str, str, bool]]:
        having = tree.args.get("having")
        start = self.lay.clauses.get("HAVING")
        if having is None or not grouped:
            return []  # without grouping, HAVING filters single rows: each node can do it
        if start is None:
            raise NotSupported("pydble could not find HAVING in the statement text to move it "
                               "after the merge")
        terms: list[tuple[Ref, str, str, bool]] = []
        self.having_terms(having.this, terms)
        if start is not None:
            self.edits.append((start, self.lay.clause_end(start), ""))
        return terms

    def having_terms(self, cond: exp.Expression, out: list[tuple[Ref, str, str, bool]]) -> None:
        cond = _unparen(cond)
        if isinstance(cond, exp.And):
            self.having_terms(cond.this, out)
            self.having_terms(cond.expression, out)
            return
        op = _CMP_OPS.get(type(cond))
        why = ("only comparisons of an aggregate or selected column with a literal, joined by "
               "AND, can be evaluated after merging")
        if op is None:
            raise NotSupported(f"HAVING {_sql(cond)} cannot be merged across shardingNodes: {why}")
        left, right = cond.this, cond.expression
        lit = _literal(right)
        if lit is None:
            lit = _literal(left)
            left = right
            op = _FLIP[op]
        if lit is None or _literal(left) is not None:
            raise NotSupported(f"HAVING {_sql(cond)} cannot be merged across shardingNodes: {why}")
        ref = self.resolve(left, None, True, "having")
        if ref is None:
            raise NotSupported(f"HAVING {_sql(cond)} cannot be merged across shardingNodes: {why}")
        out.append((ref, op, lit[0], lit[1]))

    def read_order(self, tree: exp.Select, grouped: bool) -> tuple[list[tuple[Ref, bool]], bool]:
        order = tree.args.get("order")
        if order is None or (grouped and tree.args.get("group") is None):
            return [], False  # an aggregate without GROUP BY returns one row: nothing to order
        refs: list[tuple[Ref, bool]] = []
        texts = self.item_spans("ORDER", len(order.expressions))
        only_null = True
        for o, t in zip(order.expressions, texts):
            e = o.this if isinstance(o, exp.Ordered) else o
            desc = bool(o.args.get("desc")) if isinstance(o, exp.Ordered) else False
            if not isinstance(e, exp.Null):
                only_null = False
            ref = self.resolve(e, t, grouped, "order")
            if ref is not None and all(r != ref for r, _ in refs):
                refs.append((ref, desc))
        return refs, only_null and not refs

    def distinct_args(self) -> list[Ref]:
        """Hidden argument columns of DISTINCT aggregates and of ordered GROUP_CONCATs (their values
        and order keys); nodes also group by all of them."""
        specs = [a for a in self.aggs if a.spec.distinct]
        by_norm: dict[str, Ref] = {}
        texts: list[str] = []
        for a in specs:
            for x in a.spec.distinct_args:
                n = _norm(x)
                if n not in by_norm:
                    texts.append(_sql(x))
                    by_norm[n] = self.add_hidden(texts[-1])
                a.distinct_refs.append(by_norm[n])
        for a in self.aggs:
            if a.spec.func != GROUP_CONCAT:
                continue
            a.max_len_ref = self.add_hidden("@@group_concat_max_len")
            if a.spec.element is None:
                continue
            elt = _sql(a.spec.element)
            if a.spec.distinct:
                a.element_ref = by_norm[_norm(a.spec.element)]
                a.order_refs = [(a.element_ref, d) for _, d in a.spec.order]
                continue
            for extra in (elt, f"CAST(({elt}) AS BINARY)"):   # 'a' and 'A' stay apart
                if extra not in texts:
                    texts.append(extra)
            a.element_ref = self.add_hidden(elt)
            for e, d in a.spec.order:
                kt = _sql(e)
                if kt not in texts:
                    texts.append(kt)
                a.order_refs.append((self.add_hidden(kt), d))
            a.count_rows_ref = self.add_hidden("COUNT(*)")
            by_norm.setdefault("\x00" + elt, a.element_ref)
        if not texts:
            return []
        start = self.lay.clauses.get("GROUP")
        if start is not None:
            end = self.lay.clause_end(start)
            self.edits.append((end, end, ", " + ", ".join(texts)))
        else:
            where = self.lay.clauses.get("WHERE", self.lay.clauses.get("FROM", self.lay.select))
            end = self.lay.first_after(where, _PLAN_SENSITIVE)
            self.edits.append((end, end, " GROUP BY " + ", ".join(texts)))
        return list(by_norm.values())

    def read_limit(self, tree: exp.Select) -> tuple[int, int | None]:
        limit = tree.args.get("limit")
        offset = tree.args.get("offset")
        n = None if limit is None else _int_literal(limit.expression, "LIMIT")
        m = 0 if offset is None else _int_literal(offset.expression, "OFFSET")
        return m, n

    def node_order_and_limit(self, tree: exp.Select, grouped: bool, group_refs: list[Ref],
                             order_refs: list[tuple[Ref, bool]], order_null: bool,
                             having: list, subgrouped: bool, distinct: bool, offset: int,
                             limit: int | None) -> None:
        """Decide the nodes' ORDER BY and LIMIT: a limit only where it cannot cut a group."""
        lay = self.lay
        order_at = lay.clauses.get("ORDER")
        limit_at = lay.clauses.get("LIMIT")
        if (limit is not None and limit_at is None) or (
                grouped and tree.args.get("order") is not None and order_at is None):
            raise NotSupported("pydble could not find the ORDER BY/LIMIT of this statement in its "
                               "text, so it cannot rewrite it for several shardingNodes")
        push = limit is not None
        if grouped:
            refs = {r for r, _ in order_refs}
            push = push and bool(group_refs) and not having and not subgrouped and not distinct
            if push and order_at is not None:
                push = not order_null and refs == set(group_refs)
            if push and order_at is None:
                group_at = lay.clauses["GROUP"]
                end = lay.clause_end(group_at)
                self.edits.append((end, end, " ORDER BY " + self.text(group_at + 2, end)))
            if order_at is not None and not push:
                self.edits.append((order_at, lay.clause_end(order_at), ""))
        self.pushed = push
        if limit_at is not None:
            end = lay.clause_end(limit_at)
            if limit == 0:   # no row wanted: with LIMIT 0 the nodes type the columns as one MariaDB does then
                self.edits.append((limit_at, end, "LIMIT 0"))
            elif not push:
                self.edits.append((limit_at, end, ""))
            elif offset:
                self.edits.append((limit_at, end, f"LIMIT {min(offset + limit, _MAX_LIMIT)}"))

    def collation_probes(self, compared: list[Ref]) -> list[tuple[Ref, Ref | None]]:
        """A hidden COLLATION(x) next to every value the merge compares.

        MariaDB labels every text column of a result with the connection's collation, not the
        one its values compare by (a utf8mb4_bin column arrives as utf8mb4_general_ci), so the
        nodes are asked: the merge then compares each column as its own collation does, or
        refuses one it cannot reproduce."""
        probes: list[tuple[Ref, Ref | None]] = []
        numeric = {a.ref for a in self.aggs if a.spec.func not in (MIN, MAX, ANY, GROUP_CONCAT)}
        numeric |= {r for a in self.aggs if a.program is not None for r in _refs_of(a.program)}
        # MIN(x)/MAX(x) has x's collation; COLLATION(x) is a constant to MariaDB (allowed beside GROUP BY even
        # under ONLY_FULL_GROUP_BY, not without it), COLLATION(MIN(x)) costs every node a third more time
        extreme = {}
        if "GROUP" in self.lay.clauses:
            extreme = {a.ref: _sql(_agg_arg(a.spec.node)) for a in self.aggs
                       if a.spec.func in (MIN, MAX) and _agg_arg(a.spec.node) is not None}
        for ref in dict.fromkeys(compared):
            if ref[0] == "p":      # a column inside `*`: no name to ask about
                probes.append((ref, None))
                continue
            if ref in numeric:
                continue
            if ref in extreme:
                text = extreme[ref]
            elif ref[0] == "i":
                it = self.items[ref[1]]
                if it.star:
                    continue
                text = _sql(it.expr)
            else:
                text = self.hidden[ref[1]]
            probes.append((ref, self.add_hidden(f"COLLATION({text})")))
        return probes

    def finish(self, grouped: bool, group_refs: list[Ref],
               having: list[tuple[Ref, str, str, bool]], order_refs: list[tuple[Ref, bool]],
               distinct: bool, offset: int, limit: int | None,
               probes: list[tuple[Ref, Ref | None]] = ()) -> MergePlan:
        n_items = len(self.items)
        n_hidden = len(self.hidden)
        stars = [j for j, it in enumerate(self.items) if it.star]
        first_star = stars[0] if stars else None

        def col(ref: Ref) -> int:
            kind, j = ref
            if kind == "p":
                return j
            if kind == "i":
                if first_star is None or j < first_star:
                    return j
                return -(n_items - j) - n_hidden
            return n_items + j if first_star is None else -(n_hidden - j)

        aggregates = tuple(
            Aggregate(column=col(a.ref), func=a.spec.func,
                      count_column=None if a.count_ref is None else col(a.count_ref),
                      distinct=a.spec.distinct,
                      distinct_columns=tuple(col(r) for r in a.distinct_refs),
                      separator=a.spec.separator, name=a.name,
                      sum_column=None if a.moment_refs is None else col(a.moment_refs[0]),
                      squares_column=None if a.moment_refs is None else col(a.moment_refs[1]),
                      order_columns=tuple((col(r), d) for r, d in a.order_refs),
                      element_column=None if a.element_ref is None else col(a.element_ref),
                      rows_column=None if a.count_rows_ref is None else col(a.count_rows_ref),
                      max_len_column=None if a.max_len_ref is None else col(a.max_len_ref),
                      avg_column=None if a.avg_ref is None else col(a.avg_ref),
                      program=None if a.program is None else _columns_of(a.program, col))
            for a in self.aggs) if grouped else ()
        return MergePlan(
            hidden=n_hidden,
            grouped=grouped,
            group_by=tuple(col(r) for r in group_refs),
            aggregates=aggregates,
            having=tuple(HavingTerm(col(r), op, lit, is_str) for r, op, lit, is_str in having),
            order_by=tuple(SortKey(col(r), d) for r, d in order_refs),
            distinct=distinct,
            offset=offset,
            limit=limit,
            collations=tuple((col(r), None if p is None else col(p)) for r, p in probes),
        )


def _agg_arg(n: exp.Expression) -> exp.Expression | None:
    """The one argument of MIN/MAX([DISTINCT] x), else None."""
    arg = n.this if isinstance(n, (exp.Min, exp.Max)) else None
    if isinstance(arg, exp.Distinct):
        arg = arg.expressions[0] if len(arg.expressions) == 1 else None
    return arg


def _refs_of(program: tuple) -> list:
    if program[0] == "ref":
        return [program[1]]
    if program[0] == "lit":
        return []
    return [r for p in program[1:] for r in _refs_of(p)]


def _columns_of(program: tuple, col) -> tuple:
    """An ARITH program with its hidden aggregate refs turned into node columns."""
    if program[0] == "ref":
        return ("col", col(program[1]))
    if program[0] == "lit":
        return program
    return (program[0],) + tuple(_columns_of(p, col) for p in program[1:])


def _literal(e: exp.Expression) -> tuple[str, bool] | None:
    """A literal's text and whether it is a string; negative numbers included."""
    e = _unparen(e)
    if isinstance(e, exp.Literal):
        return e.this, e.is_string
    if isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal) and not e.this.is_string:
        return "-" + e.this.this, False
    return None


def _int_literal(e: exp.Expression | None, what: str) -> int:
    if isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
        return int(e.this)
    raise NotSupported(f"{what} must be an integer literal to merge results from several "
                       f"shardingNodes")
