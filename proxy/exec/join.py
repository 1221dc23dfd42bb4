"""A JOIN of two tables on different shardingNodes, done in the proxy as Vitess's join primitive does it.

`plan_join` reads `SELECT items FROM a [AS] x [INNER|LEFT [OUTER]] JOIN b [AS] y ON x.k = y.k [AND ...]
[WHERE ...] [ORDER BY ...] [LIMIT ...]` into two single-table SELECTs (each routed by the router as any
other read, its own WHERE pushed down); `run_join` reads the outer side, fetches the inner side's
matching rows in batches of `y.k IN (...)`, pairs them by the join key compared as MariaDB compares it,
projects, sorts and cuts in the proxy. Column definitions come from the nodes' answers to the same
select items. Anything it cannot reproduce exactly is refused with 1235 and a sentence.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from meta.errors import NotSupported, ProxyError

from proxy.exec.merge import (K_BIN, K_BYTES, K_CI, K_DEC, K_FLOAT, K_INT, collation_kind, column_kind,
                    MergePlan, merge_results, row_sort_key, value_key)
from proxy.wire.constants import (CHARSET_BINARY, ENUM_FLAG, NOT_NULL_FLAG, SET_FLAG, T_BLOB, T_ENUM,
                                 T_LONG_BLOB, T_MEDIUM_BLOB, T_SET, T_TINY_BLOB)
from proxy.wire.messages import ColumnDef, ResultSet
from proxy.wire.response import Budget, BudgetExceeded
from proxy.plan.sqltok import Token, tokenize, top_level

if TYPE_CHECKING:  # pragma: no cover
    from proxy.runtime import ExecContext
    from proxy.wire.reply import Reply

BATCH = 2000   # join-key values per inner-side lookup
ROUTED_KEYS = 64   # up to this many keys the lookup is routed (pruned to the nodes holding them)
TOP_ROWS = 10_000   # ORDER BY ... LIMIT up to this many rows keeps only those while joining

_AGGREGATES = frozenset({"COUNT", "SUM", "AVG", "MIN", "MAX", "GROUP_CONCAT", "STD", "STDDEV", "STDDEV_POP",
                         "STDDEV_SAMP", "VARIANCE", "VAR_POP", "VAR_SAMP", "BIT_AND", "BIT_OR", "BIT_XOR",
                         "JSON_ARRAYAGG", "JSON_OBJECTAGG", "ANY_VALUE"})
# reserved words that may stand in an expression (never an unquoted column name)
_EXPR_WORDS = frozenset({"AND", "OR", "NOT", "XOR", "IS", "NULL", "TRUE", "FALSE", "IN", "BETWEEN", "LIKE",
                         "ESCAPE", "CASE", "WHEN", "THEN", "ELSE", "END", "AS", "DIV", "MOD", "INTERVAL",
                         "BINARY", "REGEXP", "RLIKE", "UNSIGNED", "CHAR", "DECIMAL", "INTEGER", "INT", "DOUBLE"})
# words that are columns unless written where only a unit, type or literal prefix can be
# (INTERVAL 1 DAY, CAST(x AS DATE), DATE '2024-01-01'): `date` alone could be a column of either table
_UNIT_WORDS = frozenset({"DAY", "MONTH", "YEAR", "HOUR", "MINUTE", "SECOND", "WEEK", "QUARTER", "MICROSECOND",
                         "SIGNED", "DATE", "DATETIME", "TIME", "TIMESTAMP", "UNKNOWN"})
_REFUSE_WORDS = frozenset({"SELECT", "EXISTS", "OVER", "DISTINCT", "MATCH", "ROW", "DEFAULT", "VALUES"})
_END_FROM = frozenset({"WHERE", "ORDER", "LIMIT"})
_OTHER_CLAUSES = frozenset({"GROUP", "HAVING", "WINDOW", "FOR", "LOCK", "INTO", "UNION", "INTERSECT", "EXCEPT",
                            "PROCEDURE", "USING", "NATURAL", "STRAIGHT_JOIN", "RIGHT", "CROSS", "FULL", "JOIN",
                            "LEFT", "INNER", "OUTER", "ON", "USE", "IGNORE", "FORCE", "PARTITION", "RETURNING"})


def _refuse(why: str) -> NotSupported:
    return NotSupported(f"cross-node JOIN: {why}")


@dataclass
class Side:
    """One table of the join and what is asked of it."""

    table: str                 # the table as written (schema-qualified or not)
    alias: str
    items: list[str] = field(default_factory=list)     # select items as written (with their AS)
    stars: int = 0
    where: list[str] = field(default_factory=list)     # conjuncts pushed down
    keys: list[str] = field(default_factory=list)      # join-key expressions, pair i with the other side's i
    order: list[str] = field(default_factory=list)     # ORDER BY expressions read from this side
    post: list[str] = field(default_factory=list)      # WHERE conjuncts on a LEFT JOIN's inner side: after the join
    plain: bool = True                                 # items and ORDER BY only name columns (NULL when unmatched)


@dataclass
class JoinPlan:
    """Two single-table reads and how to pair, project, sort and cut their rows."""

    left: bool                                  # LEFT JOIN (else INNER)
    sides: tuple[Side, Side]
    projection: list[tuple[int, int]]           # per select item: (side, index among that side's items)
    order: list[tuple[int, int, bool]] = field(default_factory=list)   # (side, index in side.order, DESC)
    offset: int = 0
    limit: int | None = None


def _split(toks: list[Token], a: int, b: int, sep: Callable[[Token], bool]) -> list[tuple[int, int]]:
    """Token ranges in [a, b) between separators at parenthesis depth 0 (the AND of a BETWEEN is none)."""
    out, start, between = [], a, 0
    for i in top_level(toks, a, b):
        t = toks[i]
        if t[0] == "w" and t[1].upper() == "BETWEEN":
            between += 1
        elif between and t[0] == "w" and t[1].upper() == "AND":
            between -= 1
        elif sep(t):
            out.append((start, i))
            start = i + 1
    out.append((start, b))
    return out


def _find(toks: list[Token], a: int, b: int, words: frozenset[str]) -> int:
    """The first depth-0 word of `words` in [a, b), or b."""
    return next((i for i in top_level(toks, a, b) if toks[i][0] == "w" and toks[i][1].upper() in words), b)


def _ident(t: Token) -> str | None:
    if t[0] == "w":
        return t[1]
    if t[0] == "q":
        return t[1][1:-1].replace("``", "`")
    return None


Columns = tuple["frozenset[str] | None", ...]


def _aliases(toks: list[Token], a: int, b: int, names: tuple[str, ...], cols: Columns = (None, None),
             outputs: dict[str, int | None] | None = None) -> set[int] | None:
    """Which tables (of those named) an expression reads (qualified columns, or an unqualified one exactly
    one table has); None when it cannot be judged. `outputs`: select-item names an ORDER BY word would
    mean instead."""
    used: set[int] = set()
    low = tuple(n.lower() for n in names)
    i = a
    while i < b:
        t = toks[i]
        if t[0] in "pve" or t[0] == "h":
            return None
        if t[0] in "wq" and i + 2 < b + 1 and i + 1 < b and toks[i + 1][1] == "." and toks[i + 1][0] == "o":
            q = (_ident(t) or "").lower()
            if i + 3 < b and toks[i + 3][1] == ".":
                return None            # schema.table.column
            if q not in low or i + 2 >= b or (toks[i + 2][0] not in "wq" and toks[i + 2][1] != "*"):
                return None
            used.add(low.index(q))
            i += 3
            continue
        if t[0] == "w":
            up = t[1].upper()
            if up in _REFUSE_WORDS or up in _AGGREGATES:
                return None
            followed = i + 1 < b and toks[i + 1][1] == "("
            prev = toks[i - 1] if i > a else None
            unit = up in _UNIT_WORDS and ((prev is not None and (prev[0] in "ns" or prev[1].upper() in
                                                                 ("AS", "IS", "UNSIGNED")))
                                          or (i + 1 < b and toks[i + 1][0] == "s"))
            if not followed and up not in _EXPR_WORDS and not unit:
                # an unqualified column: the one table whose metadata has it (never a select-item name)
                low_name = t[1].lower()
                owners = [k for k in range(len(names)) if cols[k] is not None and low_name in cols[k]]  # type: ignore[operator]
                if len(owners) != 1 or any(c is None for c in cols) or (prev is not None and prev[1] == "."):
                    return None
                if outputs and low_name in outputs and outputs[low_name] != owners[0]:
                    return None   # ORDER BY names a select item that is not this column
                used.add(owners[0])
        elif t[0] == "q":
            return None
        i += 1
    return used


def plan_join(sql: str, columns: Callable[[str], frozenset[str] | None] | None = None) -> JoinPlan | None:
    """The join plan of a two-table SELECT of the handled shape; None for any other statement.
    columns: a table's column names (lower-case) as written in FROM, to place unqualified columns."""
    toks = tokenize(sql)
    while toks and toks[-1][0] == "o" and toks[-1][1] == ";":
        toks.pop()
    n = len(toks)
    if n < 8 or toks[0][0] != "w" or toks[0][1].upper() != "SELECT":
        return None
    if any(t[0] == "o" and t[1] == ";" for t in toks):
        return None
    frm = _find(toks, 1, n, frozenset({"FROM"}))
    if frm == n or frm == 1:
        return None
    if toks[1][0] == "w" and toks[1][1].upper() in ("DISTINCT", "DISTINCTROW", "ALL", "SQL_CALC_FOUND_ROWS",
                                                     "HIGH_PRIORITY", "STRAIGHT_JOIN", "SQL_NO_CACHE",
                                                     "SQL_CACHE", "SQL_BUFFER_RESULT"):
        return None
    up0 = [t[1].upper() if t[0] == "w" else None for t in toks]
    if any(w in ("UNION", "INTERSECT", "EXCEPT", "GROUP", "HAVING", "WINDOW", "INTO") for w in up0):
        return None
    i = frm + 1
    first = _table(toks, i, n)
    if first is None:
        return None
    t1, a1, i = first
    left = False
    up: list[str | None] = [t[1].upper() if t[0] == "w" else None for t in toks] + [None]
    if up[i] == "JOIN":
        i += 1
    elif up[i] == "INNER" and i + 1 < n and up[i + 1] == "JOIN":
        i += 2
    elif up[i] == "LEFT":
        i += 1
        if up[i] == "OUTER":
            i += 1
        if up[i] != "JOIN":
            return None
        i += 1
        left = True
    else:
        return None
    second = _table(toks, i, n)
    if second is None:
        return None
    t2, a2, i = second
    if up[i] != "ON" or a1.lower() == a2.lower():
        return None
    on_start = i + 1
    on_end = _find(toks, on_start, n, _END_FROM | _OTHER_CLAUSES - {"JOIN", "ON", "LEFT", "INNER", "OUTER",
                                                                     "USING"})
    if on_end < n and up[on_end] not in _END_FROM:
        return None
    names = (a1, a2)
    sides = (Side(t1, a1), Side(t2, a2))
    cols: Columns = (columns(t1), columns(t2)) if columns is not None else (None, None)
    ordinary: list[tuple[int, int, set[int]]] = []
    for a, b in _split(toks, on_start, on_end, _is_and):
        if b - a == 7 and toks[a + 3][1] == "=" and toks[a + 3][0] == "o":
            ua, ub = _aliases(toks, a, a + 3, names, cols), _aliases(toks, a + 4, b, names, cols)
            if ua and ub and len(ua) == 1 and len(ub) == 1 and ua != ub:
                x, y = (a, a + 4) if ua == {0} else (a + 4, a)
                sides[0].keys.append(_text(sql, toks, x, x + 3))
                sides[1].keys.append(_text(sql, toks, y, y + 3))
                continue
        used = _aliases(toks, a, b, names, cols)
        if used is None or b <= a:
            return None
        ordinary.append((a, b, used))
    if not sides[0].keys:
        raise _refuse("only joins with an equality of a column of each table in ON are supported")
    for a, b, used in ordinary:
        if used == {1}:
            sides[1].where.append(_text(sql, toks, a, b))
        elif used == {0} and not left:
            sides[0].where.append(_text(sql, toks, a, b))
        else:
            raise _refuse("an ON condition other than column equalities and conditions on the joined "
                          "table is not supported")
    where_end = _find(toks, on_end, n, frozenset({"ORDER", "LIMIT"}))
    if on_end < n and up[on_end] == "WHERE":
        for a, b in _split(toks, on_end + 1, where_end, _is_and):
            used = _aliases(toks, a, b, names, cols)
            if used is None or b <= a:
                return None
            if len(used) == 2:
                raise _refuse("a WHERE condition reading both tables is not supported")
            side = 1 if used == {1} else 0
            (sides[side].post if side == 1 and left else sides[side].where).append(_text(sql, toks, a, b))
    projection: list[tuple[int, int]] = []
    # the select items' names: an ORDER BY word naming one means that item (its side when it is that
    # very column, None when it is anything else)
    outputs: dict[str, int | None] = {}
    for a, b in _split(toks, 1, frm, lambda t: t[0] == "o" and t[1] == ","):
        if b > a and toks[b - 1][0] in "wq":
            name = (_ident(toks[b - 1]) or "").lower()
            col = (b - a == 1) or (b - a == 3 and toks[a + 1][1] == ".")
            as_self = b - a >= 3 and up[b - 2] == "AS" and (_ident(toks[b - 3]) or "").lower() == name
            side = _aliases(toks, a, b - 2 if as_self else b, names, cols) if col or as_self else None
            mine = next(iter(side)) if side and len(side) == 1 else None
            outputs[name] = mine if name not in outputs or outputs[name] == mine else None
        if b - a == 1 and toks[a][1] == "*":
            for s in (0, 1):
                projection.append((s, len(sides[s].items)))
                sides[s].items.append(f"{sides[s].alias}.*")
                sides[s].stars += 1
            continue
        body = b
        if b - a >= 3 and up[b - 2] == "AS":
            body = b - 2
        used = _aliases(toks, a, body, names, cols)
        if used is None or body <= a:
            return None
        if len(used) == 2:
            raise _refuse("a select item reading both tables is not supported")
        s = 1 if used == {1} else 0
        if s == 1 and not (body - a == 3 and toks[a + 1][1] == "."):
            sides[1].plain = False     # on a NULL-extended row its value is asked of a node
        if b - a == 3 and toks[a + 2][1] == "*":
            sides[s].stars += 1
        projection.append((s, len(sides[s].items)))
        sides[s].items.append(_text(sql, toks, a, b))
    plan = JoinPlan(left, sides, projection)
    i = where_end
    if i < n and up[i] == "ORDER":
        if i + 1 >= n or up[i + 1] != "BY":
            return None
        lim = _find(toks, i + 2, n, frozenset({"LIMIT"}))
        for a, b in _split(toks, i + 2, lim, lambda t: t[0] == "o" and t[1] == ","):
            desc = False
            if b - a >= 2 and up[b - 1] in ("ASC", "DESC"):
                desc = up[b - 1] == "DESC"
                b -= 1
            used = _aliases(toks, a, b, names, cols, outputs)
            if used is None or len(used) != 1 or b <= a:
                return None
            s = 1 if used == {1} else 0
            if s == 1 and not (b - a == 3 and toks[a + 1][1] == "."):
                sides[1].plain = False
            plan.order.append((s, len(sides[s].order), desc))
            sides[s].order.append(_text(sql, toks, a, b))
        i = lim
    if i < n and up[i] == "LIMIT":
        nums = [t for t in toks[i + 1:]]
        if len(nums) == 1 and nums[0][0] == "n" and nums[0][1].isdigit():
            plan.limit = int(nums[0][1])
        elif (len(nums) == 3 and nums[0][0] == nums[2][0] == "n" and nums[0][1].isdigit()
              and nums[2][1].isdigit() and (nums[1][1] == "," or up[i + 2] == "OFFSET")):
            x, y = int(nums[0][1]), int(nums[2][1])
            plan.offset, plan.limit = (x, y) if nums[1][1] == "," else (y, x)
        else:
            return None
    elif i < n:
        return None
    return plan


def _is_and(t: Token) -> bool:
    return (t[0] == "w" and t[1].upper() == "AND") or (t[0] == "o" and t[1] == "&&")


def _text(sql: str, toks: list[Token], a: int, b: int) -> str:
    return sql[toks[a][2]:toks[b - 1][3]]


def _table(toks: list[Token], i: int, n: int) -> tuple[str, str, int] | None:
    """`[schema.]table [[AS] alias]` at i: (text, alias, next index)."""
    if i >= n or toks[i][0] not in "wq":
        return None
    name = _ident(toks[i])
    j = i + 1
    if j + 1 < n and toks[j][1] == "." and toks[j + 1][0] in "wq":
        name = _ident(toks[j + 1])
        j += 2
    text_end = j
    alias = name
    if j < n and toks[j][0] == "w" and toks[j][1].upper() == "AS":
        j += 1
        if j >= n or toks[j][0] not in "wq":
            return None
        alias = _ident(toks[j])
        j += 1
    elif j < n and toks[j][0] == "q" or (j < n and toks[j][0] == "w" and toks[j][1].upper() not in
                                          _END_FROM | _OTHER_CLAUSES):
        alias = _ident(toks[j])
        j += 1
    if j >= n or name is None or alias is None:
        return None
    text = " ".join(t[1] for t in toks[i:text_end])
    return text, alias, j


# --- running ----------------------------------------------------------------------------------

def _side_sql(side: Side, extra: str | None) -> tuple[str, int]:
    """The single-table SELECT of a side and how many hidden columns it appends."""
    hidden = [*side.keys, *side.order]
    probes = [f"COLLATION({e})" for e in hidden]
    cols = side.items + [f"{e} AS `pydble_h{i}`" for i, e in enumerate(hidden + probes)]
    if not side.items:
        cols = ["1 AS `pydble_one`"] + cols
    if side.post:
        cols.append(f"{_conj(side.post)} IS TRUE AS `pydble_w`")
    where = list(side.where) + ([extra] if extra else [])
    sql = f"SELECT {', '.join(cols)} FROM {side.table} AS `{side.alias}`"
    if where:
        sql += " WHERE " + _conj(where)
    return sql, 2 * len(hidden) + bool(side.post)


def _conj(conds: list[str]) -> str:
    return "(" + " AND ".join(f"({w})" for w in conds) + ")"


async def _null_row(executor: ExecContext, side: Side, width: int, hidden: int, budget: Budget
                    ) -> list[bytes | None]:
    """A LEFT JOIN's NULL-extended inner row: its items, ORDER BY values and WHERE verdict as MariaDB
    computes them over NULL columns (COALESCE(b.x, 1) is 1 there, b.x IS NULL is true), asked of a node
    that evaluates them over a real NULL-extended row of the same table."""
    row: list[bytes | None] = [None] * width
    if side.plain and not side.post:
        return row
    plan = executor.runtime.router.route(f"SELECT * FROM {side.table} AS `{side.alias}`", executor.session.schema,
                                        executor.session.grants)
    node, phys = plan.targets[0].node, plan.targets[0].sql
    cols = side.items + [f"{e} AS `pydble_h{i}`" for i, e in enumerate(side.order)]
    if not side.items:
        cols = ["1 AS `pydble_one`"] + cols
    if side.post:
        cols.append(f"{_conj(side.post)} IS TRUE AS `pydble_w`")
    sql = (f"SELECT {', '.join(cols)} FROM (SELECT 1 AS `pydble_one`) AS `pydble_z` "
           f"LEFT JOIN ({phys}) AS `{side.alias}` ON FALSE")
    sc = (await executor._run_on([(node, sql)], budget=budget))[0]
    if sc.error is not None:
        raise ProxyError(sc.error.message, sc.error.code, sc.error.sqlstate)
    got = sc.results[0].rows[0]
    nk, no = len(side.keys), len(side.order)
    vis = width - hidden
    row[:vis] = got[:vis]
    base = vis + nk
    row[base:base + no] = got[vis:vis + no]
    if side.post:
        row[-1] = got[-1]
    return row


def _names_charset(executor: ExecContext) -> str:
    names = executor.session.vars.get("names") or ""
    words = names.split()
    return words[2] if len(words) > 2 and words[1].upper() == "NAMES" else "utf8mb4"


def _literal(v: bytes, col: ColumnDef, kind: int, charset: str) -> str:
    """A literal the inner side compares with its key column exactly as with the outer value."""
    if kind in (K_INT, K_DEC):
        return v.decode("ascii")
    if col.charset == CHARSET_BINARY or kind == K_BYTES and col.charset == CHARSET_BINARY:
        return f"X'{v.hex()}'"
    if kind in (K_CI, K_BIN):
        return f"_{charset} X'{v.hex()}'"
    return f"_{charset} X'{v.hex()}'"


def _pair_kind(ca: ColumnDef, cb: ColumnDef, pa: bytes | None, pb: bytes | None, what: str) -> int:
    """How two key columns compare, or a refusal where pydble would compare differently from MariaDB."""
    for c in (ca, cb):
        if c.type in (T_ENUM, T_SET) or c.flags & (ENUM_FLAG | SET_FLAG):
            raise _refuse(f"the join key {what} is an ENUM or SET column")
    ka, kb = column_kind(ca), column_kind(cb)
    if ka == K_FLOAT or kb == K_FLOAT:
        raise _refuse(f"the join key {what} is a FLOAT or DOUBLE, whose text values are not exact")
    if {ka, kb} <= {K_INT, K_DEC}:
        return K_DEC
    if ka in (K_CI, K_BIN) and kb in (K_CI, K_BIN):
        if pa is None or pb is None:
            return ka    # one side has no rows: nothing is compared
        if pa != pb:
            raise _refuse(f"the join key {what} compares strings of different collations")
        kind = collation_kind(pa, ka, what)
        if ca.charset != cb.charset:
            raise _refuse(f"the join key {what} compares strings of different character sets")
        return kind
    if ka == kb and ca.type == cb.type and ca.decimals == cb.decimals and ca.charset == cb.charset:
        return ka
    raise _refuse(f"the join key {what} compares values of different types, which MariaDB converts")


async def _read(executor: ExecContext, sql: str, budget: Budget) -> ResultSet:
    """One side's rows, routed like any single-table SELECT (pruned by its WHERE)."""
    from proxy.ddl.ddl import require_meta
    plan = executor.runtime.router.route(sql, executor.session.schema, executor.session.grants)
    require_meta(executor.runtime, plan)
    return await _read_routed(executor, [(t.node, t.sql) for t in plan.targets], plan.merge, budget)


async def _read_inner(executor: ExecContext, inner: Side, lists: list[str], keys: int, budget: Budget
                      ) -> tuple[ResultSet, list[list[bytes | None]], int]:
    """The inner side's rows matching the outer keys, one `key IN (list)` read per batch. Past a few keys the
    side is routed once (its own WHERE) and each batch's IN appended to every node's SQL, as Vitess binds a
    routed plan's variables: routing a 500-value IN list costs about 20 ms of the proxy's CPU."""
    from proxy.ddl.ddl import require_meta
    isql, ihid = _side_sql(inner, None)
    plan = None
    if keys > ROUTED_KEYS:
        plan = executor.runtime.router.route(isql, executor.session.schema, executor.session.grants)
        m = plan.merge
        if (plan.kind != "select" or plan.setop is not None or not plan.targets
                or (len(plan.targets) > 1 and (m is None or not m.concat_only or m.limit is not None))):
            plan = None     # the router changed more than names: route every batch instead
        else:
            require_meta(executor.runtime, plan)
    joint = " AND " if inner.where else " WHERE "
    irs: ResultSet | None = None
    irows: list[list[bytes | None]] = []
    for lits in lists:
        cond = f"{inner.keys[0]} IN ({lits})"
        if plan is None:
            got = await _read(executor, _side_sql(inner, cond)[0], budget)
        else:
            got = await _read_routed(executor, [(t.node, f"{t.sql}{joint}({cond})") for t in plan.targets],
                                     plan.merge, budget)
        irs = irs or got
        irows.extend(got.rows)
    assert irs is not None
    return irs, irows, ihid


async def _read_routed(executor: ExecContext, targets: list[tuple[str, str]], merge: MergePlan | None,
                       budget: Budget) -> ResultSet:
    """Rows of already routed per-node SQL, concatenated."""
    scanners = await executor._run_on(targets, budget=budget)
    for sc in scanners:
        if sc.error is not None:
            raise ProxyError(sc.error.message, sc.error.code, sc.error.sqlstate)
    sets = [sc.results[0] for sc in scanners if sc.results and sc.results[0].columns]
    if len(sets) != len(scanners):
        raise NotSupported("a scattered statement returned results of different shapes")
    if len(sets) == 1:
        return sets[0]
    assert merge is not None
    return merge_results(merge, sets)


def _over_budget(budget: Budget) -> ProxyError:
    return ProxyError(f"the rows this cross-node JOIN holds exceed the merge memory budget "
                      f"({budget.limit >> 20} MB, [server] merge_memory_mb); add a LIMIT or a narrower WHERE",
                      1038, "HY001")


async def run_join(executor: ExecContext, plan: JoinPlan, r: Reply, more: bool) -> None:
    """Run a join plan and send its one result set."""
    budget = Budget(executor.runtime.config.server.merge_memory_mb << 20)
    try:
        rs = await _run(executor, plan, budget)
    except BudgetExceeded:
        raise _over_budget(budget) from None
    r.resultset(rs, executor.session.status(), more, min(len(executor.session.warnings), 0xFFFF))


async def _run(executor: ExecContext, plan: JoinPlan, budget: Budget) -> ResultSet:
    outer, inner = plan.sides
    osql, ohid = _side_sql(outer, None)
    ors = await _read(executor, osql, budget)
    nk = len(outer.keys)
    ow = len(ors.columns)
    okeys = list(range(ow - ohid, ow - ohid + nk))
    oprobe = [ow - ohid + nk + len(outer.order) + j for j in range(nk)]
    charset = _names_charset(executor)
    # the outer rows' distinct first-key values, in batches of IN lists
    first_kind = column_kind(ors.columns[okeys[0]])
    seen: dict[bytes, None] = {}   # by the exact bytes: values equal under the collation are sent each
    for row in ors.rows:
        v = row[okeys[0]]
        if v is not None and all(row[k] is not None for k in okeys):
            seen[v] = None
    values = list(seen)
    batches = [values[i:i + BATCH] for i in range(0, len(values), BATCH)] or [[]]
    lists = [", ".join(_literal(v, ors.columns[okeys[0]], first_kind, charset) for v in batch) or "NULL"
             for batch in batches]
    irs, irows, ihid = await _read_inner(executor, inner, lists, len(values), budget)
    iw = len(irs.columns)
    ikeys = list(range(iw - ihid, iw - ihid + nk))
    iprobe = [iw - ihid + nk + len(inner.order) + j for j in range(nk)]
    opr = ors.rows[0] if ors.rows else None
    ipr = irows[0] if irows else None
    keyfns = []
    for j in range(nk):
        what = f"{outer.keys[j]} = {inner.keys[j]}"
        kind = _pair_kind(ors.columns[okeys[j]], irs.columns[ikeys[j]], opr and opr[oprobe[j]],
                          ipr and ipr[iprobe[j]], what)
        keyfns.append((value_key(ors.columns[okeys[j]], kind), value_key(irs.columns[ikeys[j]], kind)))
    index: dict[tuple, list[list[bytes | None]]] = {}
    for row in irows:
        if any(row[k] is None for k in ikeys):
            continue
        index.setdefault(tuple(f[1](row[k]) for f, k in zip(keyfns, ikeys)), []).append(row)
    ocols, icols = _visible(outer, ors.columns, ohid), _visible(inner, irs.columns, ihid)
    columns: list[ColumnDef] = []
    spans = []
    for s, idx in plan.projection:
        cols = (ocols, icols)[s][idx]
        spans.append((s, cols))
        for c in cols:
            col = (ors, irs)[s].columns[c]
            if s == 1 and plan.left and col.flags & NOT_NULL_FLAG:
                col = replace(col, flags=col.flags & ~NOT_NULL_FLAG, raw=None)
            columns.append(col)
    width = len(columns)
    if plan.order and any(c.type in (T_TINY_BLOB, T_BLOB, T_LONG_BLOB, T_MEDIUM_BLOB) for c in columns):
        raise _refuse("ORDER BY with a TEXT, BLOB or JSON column is not supported: the type MariaDB "
                      "reports for it depends on whether it sorts the join through a temporary table")
    oord = [ow - ohid + nk + j for j in range(len(outer.order))]
    iord = [iw - ihid + nk + j for j in range(len(inner.order))]
    nulls = await _null_row(executor, inner, iw, ihid, budget) if plan.left else []
    key = None
    if plan.order:
        terms = []
        for n, (s, j, desc) in enumerate(plan.order):
            rs, rows, cols = (ors, ors.rows, oord) if s == 0 else (irs, irows, iord)
            col = rs.columns[cols[j]]
            kind = column_kind(col)
            if col.type in (T_ENUM, T_SET) or col.flags & (ENUM_FLAG | SET_FLAG):
                raise _refuse("ORDER BY an ENUM or SET column is not supported")
            if kind in (K_CI, K_BIN):
                probe = rows[0][cols[j] + len(plan.sides[s].keys) + len(plan.sides[s].order)] if rows else None
                kind = collation_kind(probe, kind, col.name)
            terms.append((width + n, desc, value_key(col, kind)))
        key = row_sort_key(terms)
    stop = None if plan.limit is None else plan.offset + plan.limit
    top = key is not None and stop is not None and stop <= TOP_ROWS

    def joined_rows() -> Iterator[list[bytes | None]]:
        for orow in ors.rows:
            if any(orow[k] is None for k in okeys):
                matches = []
            else:
                matches = index.get(tuple(f[0](orow[k]) for f, k in zip(keyfns, okeys)), [])
            if not matches and plan.left:
                matches = [nulls]
            if inner.post:   # WHERE after the LEFT JOIN: matched and NULL-extended rows alike
                matches = [m for m in matches if m[-1] == b"1"]
            for irow in matches:
                joined: list[bytes | None] = []
                for s, cols in spans:
                    src = orow if s == 0 else irow
                    joined.extend(src[c] for c in cols)
                for s, j, _ in plan.order:
                    joined.append(orow[oord[j]] if s == 0 else irow[iord[j]])
                if not top:   # (a top-k holds at most TOP_ROWS joined rows, whatever the join's size)
                    budget.take(sum(len(v) for v in joined if v is not None))
                yield joined

    if top:
        # ORDER BY ... LIMIT: only the first offset + limit rows in order are kept (nsmallest is sorted()[:n])
        out = heapq.nsmallest(stop, joined_rows(), key=key)
    else:
        out = list(joined_rows())
        if key is not None:
            out.sort(key=key)
    if plan.offset or stop is not None:
        out = out[plan.offset:stop]
    if plan.order:
        out = [row[:width] for row in out]
    return ResultSet(columns, out)


def _visible(side: Side, columns: list[ColumnDef], hidden: int) -> list[list[int]]:
    """The columns of each of a side's select items (a `*` spans all the table's columns)."""
    width = len(columns) - hidden
    if not side.items:
        return []
    single = len(side.items) - side.stars
    per_star = (width - single) // side.stars if side.stars else 0
    out, at = [], 0
    for item in side.items:
        k = per_star if item.endswith("*") else 1
        out.append(list(range(at, at + k)))
        at += k
    return out


__all__ = ["JoinPlan", "plan_join", "run_join"]
