"""Merge the result sets of a SELECT that ran on several shardingNodes into what one MySQL answers.

`proxy.plan.scatter` turns the client's SELECT into the SQL every node runs plus a `MergePlan`; this
module applies the plan to the decoded per-node rows. Rows stay text-protocol values
(`bytes | None`); values are converted only to compare them or to combine aggregates.
"""

from __future__ import annotations

import heapq
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from decimal import Context, Decimal, InvalidOperation
from itertools import chain, islice
from typing import Any

from meta.errors import NotSupported

from proxy.wire.constants import (
    CHARSET_BINARY,
    CHARSET_LATIN1,
    DECIMAL_TYPES,
    ENUM_FLAG,
    FLOAT_TYPES,
    INTEGER_TYPES,
    SET_FLAG,
    T_BIT,
    T_DOUBLE,
    T_ENUM,
    T_NEWDECIMAL,
    T_SET,
    T_TIME,
)
from proxy.plan.mergeplan import (ANY, ARITH, AVG, BIT_AND, BIT_OR, BIT_XOR, COUNT, GROUP_CONCAT, MAX, MIN, SUM, VARIANCES,
                        HavingTerm, MergePlan)
from proxy.wire.numfmt import format_double
from proxy.wire.messages import ColumnDef, ResultSet, decode_text_row
from proxy.exec.variance import add_moments, moment_columns, variance_result

Row = list[bytes | None]

MAX_SCALE = 38  # MariaDB's largest DECIMAL scale; AVG's scale never exceeds it
_EXACT = Context(prec=200)  # DECIMAL(65) sums must not round at Python's default 28 digits


# --- comparing text-protocol values -------------------------------------------------------

K_INT, K_DEC, K_FLOAT, K_TIME, K_BYTES, K_CI, K_BIN = range(7)
# utf8mb4_bin, latin1_bin, ascii_bin, utf8_bin, utf8mb4_0900_bin: code point order, not folded.
_BIN_COLLATIONS = frozenset({46, 47, 65, 83, 309})


def column_kind(col: ColumnDef) -> int:
    """How values of a column compare, from its type and collation."""
    t = col.type
    if t in INTEGER_TYPES:
        return K_INT
    if t in DECIMAL_TYPES:
        return K_DEC
    if t in FLOAT_TYPES:
        return K_FLOAT
    if t == T_TIME:
        return K_TIME
    if t == T_BIT or col.charset == CHARSET_BINARY:
        return K_BYTES  # dates and times are ISO text: byte order is their order
    if col.charset in _BIN_COLLATIONS:
        return K_BIN
    return K_CI


def _dec(v: bytes) -> Decimal:
    return Decimal(v.decode("ascii"))


def _time_key(v: bytes) -> int:
    """TIME as signed microseconds: '-01:00:00' and '100:00:00' do not sort as text."""
    s = v.decode("ascii")
    neg = s.startswith("-")
    body, _, frac = s.lstrip("-").partition(".")
    parts = [int(p) for p in body.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, sec = parts[-3:]
    micros = ((h * 60 + m) * 60 + sec) * 1_000_000 + int((frac + "000000")[:6])
    return -micros if neg else micros


def _fold(s: str) -> str:
    """Accent- and case-insensitive weight, like utf8mb4_general_ci (trailing spaces ignored)."""
    s = unicodedata.normalize("NFD", s.rstrip(" ").replace("ß", "s"))
    return "".join(c for c in s if not unicodedata.combining(c)).upper()


def _ci_key(charset: int) -> Callable[[bytes], str]:
    encoding = "latin-1" if charset == CHARSET_LATIN1 else "utf-8"

    def key(v: bytes) -> str:
        if v.isascii():
            return v.rstrip(b" ").upper().decode("ascii")
        return _fold(v.decode(encoding, "replace"))
    return key


def _bin_key(v: bytes) -> bytes:
    return v.rstrip(b" ")


def value_key(col: ColumnDef, kind: int | None = None) -> Callable[[bytes], Any]:
    """A function mapping a non-NULL text value to something that orders and compares like MySQL."""
    kind = column_kind(col) if kind is None else kind
    if kind == K_INT:
        return int
    if kind == K_DEC:
        return _dec
    if kind == K_FLOAT:
        return float
    if kind == K_TIME:
        return _time_key
    if kind == K_BIN:
        return _bin_key
    if kind == K_CI:
        return _ci_key(col.charset)
    return bytes


class _Desc:
    """Inverts the order of a key so mixed ASC/DESC terms fit in one tuple."""

    __slots__ = ("k",)

    def __init__(self, k: Any) -> None:
        self.k = k

    def __lt__(self, other: _Desc) -> bool:
        return other.k < self.k

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.k == other.k

    def __hash__(self) -> int:
        return hash(self.k)


_NULL_KEY = (0,)


def row_sort_key(terms: list[tuple[int, bool, Callable[[bytes], Any]]]) -> Callable[[Row], tuple]:
    """A sort key over whole rows: NULL first for ASC (last for DESC), as MySQL sorts."""

    def term_key(v: bytes | None, f: Callable[[bytes], Any]) -> tuple:
        return _NULL_KEY if v is None else (1, f(v))

    if len(terms) == 1 and not terms[0][1]:
        i, _, f = terms[0]
        return lambda row: ((0,),) if row[i] is None else ((1, f(row[i])),)

    def key(row: Row) -> tuple:
        return tuple(_Desc(term_key(row[i], f)) if desc else term_key(row[i], f)
                     for i, desc, f in terms)
    return key


# --- formatting like MySQL ----------------------------------------------------------------

def format_decimal(d: Decimal) -> bytes:
    """A Decimal in plain notation, as DECIMAL columns are sent."""
    return format(d, "f").encode("ascii")


def avg_decimal(total: Decimal, count: int, scale: int) -> Decimal:
    """total/count rounded half away from zero at `scale` digits, exactly like MySQL's AVG."""
    n = int(_EXACT.scaleb(total, scale))  # exact: total's own scale is at most `scale`
    q, r = divmod(abs(n), count)
    if 2 * r >= count:
        q += 1
    return _EXACT.scaleb(Decimal(-q if n < 0 else q), -scale)


_NUM_PREFIX = re.compile(rb"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _to_number(v: bytes) -> Decimal:
    """MySQL's string-to-number conversion: the leading numeric part, else 0."""
    m = _NUM_PREFIX.match(v)
    if not m:
        return Decimal(0)
    try:
        return Decimal(m.group(0).decode("ascii").strip())
    except InvalidOperation:
        return Decimal(0)


# --- aggregate accumulators ---------------------------------------------------------------

_UINT64_MAX = (1 << 64) - 1
_UNSIGNED = 32
_BLOB_TYPES = frozenset({0xF9, 0xFA, 0xFB, 0xFC})   # TINY/MEDIUM/LONG/BLOB (TEXT and JSON are sent as these)


class _Acc:
    """State of one aggregate for one group."""

    __slots__ = ("v", "n", "seen")

    def __init__(self) -> None:
        self.v: Any = None
        self.n = 0
        self.seen: set | None = None


@dataclass
class _AggRuntime:
    """An Aggregate resolved against the node columns: absolute indexes and value converters."""

    col: int
    func: str
    count_col: int | None
    distinct_cols: tuple[int, ...]
    distinct_keys: tuple[Callable[[bytes], Any], ...]
    sum_kind: int
    scale: int
    key: Callable[[bytes], Any]
    separator: bytes
    moments: tuple[int, int] | None = None   # STDDEV/VARIANCE: columns of SUM(x), SUM(x*x)
    decimals: int = 31
    element: int | None = None               # ordered GROUP_CONCAT: the value, its order key, its count
    order_key: Callable[[Row], tuple] | None = None
    rows_col: int | None = None
    max_len_col: int | None = None
    max_len: int | None = None
    program: tuple | None = None
    out_type: ColumnDef | None = None

    def add(self, acc: _Acc, row: Row) -> None:
        """Fold one node row's partial into the group's accumulator."""
        if self.distinct_cols:
            dk = tuple(None if row[c] is None else k(row[c])
                       for c, k in zip(self.distinct_cols, self.distinct_keys))
            if acc.seen is None:
                acc.seen = set()
            if dk in acc.seen:
                return
            acc.seen.add(dk)
        v = row[self.col]
        f = self.func
        if self.moments is not None:
            add_moments(acc, row, self.count_col, self.moments)
            return
        if f == ARITH:
            return
        if f == COUNT:
            if v is not None:
                acc.n += int(v)
        elif f in (SUM, AVG):
            if v is not None:
                x = self._num(v)
                if acc.v is None:
                    acc.v = x
                elif self.sum_kind == K_DEC:
                    acc.v = _EXACT.add(acc.v, x)
                else:
                    acc.v += x
            if f == AVG and self.count_col is not None:
                c = row[self.count_col]
                if c is not None:
                    acc.n += int(c)
        elif f in (MIN, MAX):
            if v is not None:
                k = self.key(v)
                if acc.v is None or (k < acc.v[0] if f == MIN else acc.v[0] < k):
                    acc.v = (k, v)
        elif f == GROUP_CONCAT and self.order_key is not None:
            if self.max_len_col is not None and self.max_len is None and row[self.max_len_col] is not None:
                self.max_len = int(row[self.max_len_col])
            e = row[self.element] if self.element is not None else None
            if e is not None:
                n = 1 if self.rows_col is None or row[self.rows_col] is None else int(row[self.rows_col])
                if acc.v is None:
                    acc.v = []
                acc.v.append((self.order_key(row), e, n))
        elif f == GROUP_CONCAT:
            if self.max_len_col is not None and self.max_len is None and row[self.max_len_col] is not None:
                self.max_len = int(row[self.max_len_col])
            if v is not None:
                if acc.v is None:
                    acc.v = [v]
                else:
                    acc.v.append(v)
        elif f in (BIT_AND, BIT_OR, BIT_XOR):
            if v is not None:
                x = int(v)
                if acc.v is None:
                    acc.v = x
                elif f == BIT_AND:
                    acc.v &= x
                elif f == BIT_OR:
                    acc.v |= x
                else:
                    acc.v ^= x
        elif f == ANY:
            if acc.v is None and v is not None:
                acc.v = v

    def _num(self, v: bytes) -> Any:
        if self.sum_kind == K_FLOAT:
            return float(v)
        if self.sum_kind == K_INT:
            return int(v)
        return _dec(v)

    def result(self, acc: _Acc) -> bytes | None:
        """The merged value as MySQL would send it."""
        f = self.func
        if self.moments is not None:
            return variance_result(f, acc, self.decimals)
        if f == COUNT:
            return str(acc.n).encode("ascii")
        if f == SUM:
            if acc.v is None:
                return None
            return self._fmt(acc.v)
        if f == AVG:
            if acc.v is None or acc.n == 0:
                return None
            return format_decimal(avg_decimal(Decimal(acc.v), acc.n, self.scale))
        if f in (MIN, MAX):
            return None if acc.v is None else acc.v[1]
        if f == GROUP_CONCAT:
            if acc.v is None:
                return None
            if self.order_key is not None:
                parts = [e for _, e, n in sorted(acc.v, key=lambda t: t[0]) for _ in range(n)]
            else:
                parts = acc.v
            out = self.separator.join(parts)
            if self.max_len is not None and len(out) > self.max_len:
                raise NotSupported(f"a GROUP_CONCAT result is longer than group_concat_max_len "
                                   f"({self.max_len}): MariaDB would cut it with a warning that pydble does "
                                   f"not reproduce across shardingNodes")
            return out
        if f in (BIT_AND, BIT_OR, BIT_XOR):
            if acc.v is None:
                return str(_UINT64_MAX if f == BIT_AND else 0).encode("ascii")
            return str(acc.v).encode("ascii")
        return acc.v  # ANY

    def _fmt(self, x: Any) -> bytes:
        if self.sum_kind == K_FLOAT:
            return format_double(x)
        if self.sum_kind == K_INT:
            return str(x).encode("ascii")
        return format_decimal(x)


# --- the merge ----------------------------------------------------------------------------

@dataclass
class _Resolved:
    """A plan bound to the actual node columns (absolute indexes, merged column kinds)."""

    width: int
    visible: int
    kinds: list[int]
    keys: list[Callable[[bytes], Any]]
    aggs: list[_AggRuntime]
    blob_keys: list[bool]


def _abs(i: int, width: int) -> int:
    j = i + width if i < 0 else i
    if not 0 <= j < width:
        raise NotSupported(f"the merge plan refers to column {i}, but the shardingNodes "
                           f"returned {width} columns")
    return j


# Collations whose comparison value_key reproduces: the general_ci family (K_CI), *_bin (K_BIN).
_CI_COLLATIONS = frozenset({b"utf8mb4_general_ci", b"utf8mb3_general_ci", b"utf8_general_ci",
                            b"latin1_swedish_ci", b"ascii_general_ci"})


def collation_kind(name: bytes | None, kind: int, column: str) -> int:
    """The kind of a text column from the collation its values compare by (COLLATION(x))."""
    if name is None or kind not in (K_CI, K_BIN) or name == b"binary":
        return kind
    if name in _CI_COLLATIONS:
        return K_CI
    if name.endswith(b"_bin") and b"nopad" not in name:
        return K_BIN
    raise NotSupported(f"the values of {column} compare by the collation {name.decode('ascii', 'replace')}, "
                       f"which pydble does not reproduce when it merges rows of several shardingNodes")


def _peek_collations(plan: MergePlan, columns: list[ColumnDef], streams: Iterable[Iterable[Row]]
                     ) -> tuple[dict[int, int], list[Iterable[Row]]]:
    """Read the COLLATION() probes from the first row any node sent; the streams are kept whole."""
    out: list[Iterable[Row]] = []
    first = None
    for s in streams:
        it = iter(s)
        row = next(it, None)
        if row is not None:
            first = first if first is not None else row
            out.append(chain((row,), it))
    if first is None:
        return {}, out
    width = len(columns)
    kinds = {}
    for c, p in plan.collations:
        i = _abs(c, width)
        kind = column_kind(columns[i])
        if p is None:
            if kind in (K_CI, K_BIN):
                raise NotSupported(f"the text column {columns[i].name} is sorted by its position inside "
                                   f"SELECT *, so pydble cannot ask the shardingNodes which collation "
                                   f"it compares by; name the column instead")
            continue
        kinds[i] = collation_kind(first[_abs(p, width)], kind, columns[i].name)
    return kinds, out


def _resolve(plan: MergePlan, columns: list[ColumnDef], collated: dict[int, int] | None = None
             ) -> _Resolved:
    width = len(columns)
    visible = width - plan.hidden
    if visible < 0:
        raise NotSupported("the shardingNodes returned fewer columns than the merge needs")
    kinds = [column_kind(c) for c in columns]
    for i, k in (collated or {}).items():
        kinds[i] = k
    aggs = []
    for a in plan.aggregates:
        col = _abs(a.column, width)
        cnt = None if a.count_column is None else _abs(a.count_column, width)
        dcols = tuple(_abs(c, width) for c in a.distinct_columns)
        sum_kind = kinds[col] if kinds[col] in (K_INT, K_DEC, K_FLOAT) else K_DEC
        if columns[col].type in FLOAT_TYPES:
            sum_kind = K_FLOAT
        if sum_kind == K_FLOAT and a.func in (SUM, AVG):
            raise NotSupported(f"{a.func} of a floating-point value cannot be merged across shardingNodes exactly: "
                               f"MariaDB adds the doubles row by row in its own order, and the digits depend on it")
        scale = min(columns[col].decimals + 4, MAX_SCALE) if sum_kind != K_FLOAT else 0
        moments = None
        if a.func in VARIANCES:
            moments = moment_columns(a, columns, width, _abs)
        rt = _AggRuntime(col, a.func, cnt, dcols,
                         tuple(value_key(columns[c], kinds[c]) for c in dcols), sum_kind,
                         scale, value_key(columns[col], kinds[col]), a.separator, moments,
                         columns[col].decimals)
        if a.func == ARITH:
            rt.program = _absolute_program(a.program, width, columns)
            rt.out_type = columns[col]
            _exact_number(columns[col], a.name or columns[col].name)
        if a.func == GROUP_CONCAT:
            rt.max_len_col = None if a.max_len_column is None else _abs(a.max_len_column, width)
        if a.func == GROUP_CONCAT and a.element_column is not None:
            rt.element = _abs(a.element_column, width)
            if columns[rt.element].type in FLOAT_TYPES:
                raise NotSupported("GROUP_CONCAT(... ORDER BY ...) of a FLOAT or DOUBLE value cannot be merged "
                                   "across shardingNodes: its text form in the list may differ")
            rt.rows_col = None if a.rows_column is None else _abs(a.rows_column, width)
            oterms = []
            for c, d in a.order_columns:
                i = _abs(c, width)
                if columns[i].type in (T_ENUM, T_SET) or columns[i].flags & (ENUM_FLAG | SET_FLAG):
                    raise NotSupported("GROUP_CONCAT(... ORDER BY an ENUM or SET) cannot be merged across "
                                       "shardingNodes")
                oterms.append((i, d, value_key(columns[i], kinds[i])))
            rt.order_key = row_sort_key(oterms)
        aggs.append(rt)
        if a.func == AVG:
            kinds[col] = K_FLOAT if sum_kind == K_FLOAT else K_DEC
        elif a.func in (COUNT, BIT_AND, BIT_OR, BIT_XOR):
            kinds[col] = K_INT
    keys = [value_key(c, k) for c, k in zip(columns, kinds)]
    return _Resolved(width, visible, kinds, keys, aggs, [c.type in _BLOB_TYPES for c in columns])


def merged_columns(plan: MergePlan, columns: list[ColumnDef]) -> list[ColumnDef]:
    """The columns the client sees: the first node's, hidden ones dropped, AVG retyped."""
    out = list(columns)
    width = len(out)
    for a in plan.aggregates:
        if a.func != AVG:
            continue
        col = _abs(a.column, width)
        c = out[col]
        name = a.name or c.name
        if a.avg_column is not None:   # the nodes' own AVG(x): typed as MariaDB types it over all rows
            out[col] = out[_abs(a.avg_column, width)].renamed(name)
        elif c.type in FLOAT_TYPES:
            out[col] = c.renamed(name, type=T_DOUBLE, decimals=31)
        else:
            scale = min(c.decimals + 4, MAX_SCALE)
            out[col] = c.renamed(name, type=T_NEWDECIMAL, decimals=scale,
                                 length=c.length - c.decimals + scale)
    return out[:width - plan.hidden]


def _sort_terms(plan: MergePlan, r: _Resolved, columns: list[ColumnDef]
                ) -> list[tuple[int, bool, Callable[[bytes], Any]]]:
    terms = []
    for s in plan.order_by:
        i = _abs(s.column, r.width)
        if columns[i].type in (T_ENUM, T_SET) or columns[i].flags & (ENUM_FLAG | SET_FLAG):
            raise NotSupported("ORDER BY an ENUM or SET column cannot be merged across "
                               "shardingNodes: MySQL sorts it by member index, which the proxy "
                               "does not know")
        terms.append((i, s.descending, r.keys[i]))
    return terms


def _having_ok(v: bytes | None, kind: int, key: Callable[[bytes], Any], t: HavingTerm) -> bool:
    if v is None:
        return False
    lit = t.literal.encode("utf-8")
    if kind in (K_INT, K_DEC, K_FLOAT) or not t.literal_is_string:
        a: Any = _to_number(v) if kind not in (K_INT, K_DEC, K_FLOAT) else _dec(v)
        b: Any = _to_number(lit)
    else:
        a, b = key(v), key(lit)
    op = t.op
    if op == "=":
        return a == b
    if op == "<>":
        return a != b
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    return a >= b


def _dedupe(rows: Iterable[Row], keys: list[Callable[[bytes], Any]], visible: int
            ) -> Iterator[Row]:
    seen: set[tuple] = set()
    for row in rows:
        k = tuple(None if row[i] is None else keys[i](row[i]) for i in range(visible))
        if k not in seen:
            seen.add(k)
            yield row


def _aggregate(plan: MergePlan, r: _Resolved, streams: Iterable[Iterable[Row]]) -> list[Row]:
    """Combine partial groups from all nodes; memory grows with the number of groups."""
    gcols = [_abs(i, r.width) for i in plan.group_by]
    gkeys = [r.keys[i] for i in gcols]
    agg_cols = ({a.col for a in r.aggs} | {a.count_col for a in r.aggs if a.count_col is not None}
                | {c for a in r.aggs if a.moments for c in a.moments})
    for a in r.aggs:   # (the planner's hidden helper columns never reach the client)
        agg_cols |= {c for c in (a.element, a.rows_col, a.max_len_col) if c is not None}
    plain = [i for i in range(r.width) if i not in agg_cols and i not in gcols]
    groups: dict[tuple, tuple[Row, list[_Acc]]] = {}
    aggs = r.aggs
    for row in chain.from_iterable(streams):
        k = tuple(None if row[i] is None else f(row[i]) for i, f in zip(gcols, gkeys))
        g = groups.get(k)
        if g is None:
            g = (list(row), [_Acc() for _ in aggs])
            groups[k] = g
        else:
            first = g[0]
            for i in plain:  # "any value" of a non-aggregated column: prefer a real one
                if first[i] is None and row[i] is not None:
                    first[i] = row[i]
        for a, acc in zip(aggs, g[1]):
            a.add(acc, row)
    if not groups and not gcols:
        groups[()] = ([None] * r.width, [_Acc() for _ in aggs])
    out = []
    for first, accs in groups.values():
        for a, acc in zip(aggs, accs):
            if a.func != ARITH:
                first[a.col] = a.result(acc)
        for a in aggs:   # after the aggregates they read
            if a.func == ARITH:
                first[a.col] = arith_result(a.program, a.out_type, first)
        out.append(first)
    return out


def _exact_number(c: ColumnDef, what: str) -> None:
    if c.type not in INTEGER_TYPES | DECIMAL_TYPES or c.flags & _UNSIGNED:
        raise NotSupported(f"{what} is not a signed integer or DECIMAL, so the expression over aggregates it is "
                           f"part of cannot be computed across shardingNodes exactly")


def _absolute_program(p: tuple | None, width: int, columns: list[ColumnDef]) -> tuple:
    if p is None:
        raise NotSupported("the merge plan of an expression over aggregates lacks its program")
    if p[0] == "col":
        i = _abs(p[1], width)
        _exact_number(columns[i], columns[i].name)
        return ("col", i)
    if p[0] == "lit":
        return ("lit", Decimal(p[1]) if not p[1].isdigit() else int(p[1]))
    return (p[0],) + tuple(_absolute_program(q, width, columns) for q in p[1:])


def _run_program(p: tuple, row: Row) -> Any:
    op = p[0]
    if op == "col":
        v = row[p[1]]
        if v is None:
            return None
        text = v.decode("ascii")
        return int(text) if text.lstrip("-").isdigit() else Decimal(text)
    if op == "lit":
        return p[1]
    args = [_run_program(q, row) for q in p[1:]]
    if any(a is None for a in args):
        return None
    if op == "neg":
        return -args[0]
    a, b = args
    if op == "+":
        return _EXACT.add(a, b) if isinstance(a, Decimal) or isinstance(b, Decimal) else a + b
    if op == "-":
        return _EXACT.subtract(a, b) if isinstance(a, Decimal) or isinstance(b, Decimal) else a - b
    return _EXACT.multiply(a, b) if isinstance(a, Decimal) or isinstance(b, Decimal) else a * b


def arith_result(program: tuple | None, out: ColumnDef | None, row: Row) -> bytes | None:
    """An expression over merged aggregates, exactly, printed as its column (BIGINT or DECIMAL) is."""
    assert program is not None and out is not None
    v = _run_program(program, row)
    if v is None:
        return None
    if out.type in INTEGER_TYPES:
        if v != int(v) or not -(1 << 63) <= int(v) < (1 << 63):
            raise NotSupported(f"the value of {out.name} is out of the BIGINT range across shardingNodes")
        return str(int(v)).encode("ascii")
    q = _EXACT.quantize(Decimal(v), Decimal(1).scaleb(-out.decimals))
    if q != v:
        raise NotSupported(f"the value of {out.name} would be rounded: pydble does not reproduce that")
    return format_decimal(q)


def _rollup(plan: MergePlan, r: _Resolved, streams: Iterable[Iterable[Row]]) -> list[Row]:
    """The groups, then for each shorter prefix of the GROUP BY keys its super-aggregate rows (keys
    past the prefix NULL), in MariaDB's order: by the keys, a super-aggregate row after its groups."""
    nodes_rows = list(chain.from_iterable(streams))
    gcols = [_abs(i, r.width) for i in plan.group_by]
    if any(r.blob_keys[c] for c in gcols):
        raise NotSupported("GROUP BY a TEXT, BLOB or JSON value WITH ROLLUP cannot be merged across "
                           "shardingNodes: MariaDB retypes that column of the result")
    if not nodes_rows:
        return []
    levels: list[tuple[int, Row]] = []
    for n in range(len(gcols), -1, -1):
        for row in _aggregate(replace(plan, group_by=plan.group_by[:n]), r, [nodes_rows]):
            for c in gcols[n:]:
                row[c] = None
            levels.append((n, row))
    keys = [r.keys[c] for c in gcols]

    def order(item: tuple[int, Row]) -> tuple:
        n, row = item
        return tuple((0, _NULL_KEY if row[c] is None else (1, f(row[c]))) if i < n else (1,)
                     for i, (c, f) in enumerate(zip(gcols, keys)))
    return [row for _, row in sorted(levels, key=order)]


_ORDER_MISMATCH = ("the shardingNodes sorted {what} by a collation rule pydble does not "
                   "reproduce, so their rows cannot be merged in order; sort on a binary or "
                   "numeric expression instead")


def _merge_sorted(streams: Iterable[Iterable[Row]], key: Callable[[Row], tuple]) -> Iterator[Row]:
    """heapq-merge sorted node streams, refusing a stream that is not sorted the way we compare."""
    its = [iter(s) for s in streams]
    heap = []
    for i, it in enumerate(its):
        for row in it:
            heap.append((key(row), i, row))
            break
    heapq.heapify(heap)
    while heap:
        k, i, row = heap[0]
        yield row
        nxt = next(its[i], None)
        if nxt is None:
            heapq.heappop(heap)
            continue
        nk = key(nxt)
        if nk < k:
            raise NotSupported(_ORDER_MISMATCH.format(what="the ORDER BY values"))
        heapq.heapreplace(heap, (nk, i, nxt))


def _watched(stream: Iterable[Row], key: Callable[[Row], tuple]) -> Iterator[Row]:
    """Pass a node's rows through, refusing them if they are not sorted the way we compare."""
    last = None
    for row in stream:
        k = key(row)
        if last is not None and k < last:
            raise NotSupported(_ORDER_MISMATCH.format(what="the GROUP BY keys"))
        last = k
        yield row


def merge_streams(plan: MergePlan, columns: list[ColumnDef],
                  streams: Iterable[Iterable[Row]]) -> Iterator[Row]:
    """Merge per-node row iterators lazily; only grouping and DISTINCT keep state."""
    collated = None
    if plan.collations:
        collated, streams = _peek_collations(plan, columns, streams)
    r = _resolve(plan, columns, collated)
    terms = _sort_terms(plan, r, columns)
    rows: Iterable[Row]
    if plan.grouped and plan.rollup:
        rows = _rollup(plan, r, streams)
        for t in plan.having:
            i = _abs(t.column, r.width)
            rows = [row for row in rows if _having_ok(row[i], r.kinds[i], r.keys[i], t)]
    elif plan.grouped:
        key = row_sort_key(terms) if terms else None
        if plan.node_limit is not None and key is not None:
            # Nodes cut their groups at a LIMIT in their own order; ours must agree, or a group
            # past one node's cut could be missing that node's rows.
            streams = [_watched(s, key) for s in streams]
        rows = _aggregate(plan, r, streams)
        for t in plan.having:
            i = _abs(t.column, r.width)
            rows = [row for row in rows if _having_ok(row[i], r.kinds[i], r.keys[i], t)]
        if plan.distinct:
            rows = _dedupe(rows, r.keys, r.visible)
        if key is not None:
            rows = sorted(rows, key=key)
    else:
        if terms:
            rows = _merge_sorted(streams, row_sort_key(terms))
        else:
            rows = chain.from_iterable(streams)
        if plan.distinct:
            rows = _dedupe(rows, r.keys, r.visible)
    if plan.offset or plan.limit is not None:
        stop = None if plan.limit is None else plan.offset + plan.limit
        rows = islice(rows, plan.offset, stop)
    if plan.hidden:
        v = r.visible
        return (row[:v] for row in rows)
    return iter(rows)


def decoded(payloads: Iterable[bytes], ncols: int) -> Iterator[Row]:
    """Decode text-row payloads lazily, so rows are split only when the merge reads them."""
    return (decode_text_row(p, ncols) for p in payloads)


def merge_results(plan: MergePlan, results: list[ResultSet]) -> ResultSet:
    """Merge per-node results (same columns) into the single result a client expects."""
    if not results:
        return ResultSet([], [])
    columns = results[0].columns
    for rs in results[1:]:
        if len(rs.columns) != len(columns):
            raise NotSupported("the shardingNodes returned different numbers of columns for "
                               "the same SELECT, so their results cannot be merged")
    rows = list(merge_streams(plan, columns, [rs.rows for rs in results]))
    return ResultSet(merged_columns(plan, columns), rows)
