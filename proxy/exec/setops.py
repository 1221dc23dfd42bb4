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
from proxy.plan.setplan import Expr, Leaf, Ordered, SetPlan, _compares, _duplicate_name, _leaves, probe_sql

if TYPE_CHECKING:  # pragma: no cover
    from proxy.runtime import ExecContext
    from proxy.wire.messages import ColumnDef, ErrInfo, ResultSet
    from proxy.wire.reply import Reply
    from proxy.plan.plan import Plan

Row = list[Union[bytes, None]]
_MAX_LIMIT = (1 << 64) - 1
_INT_RANK = {0x01: 0, 0x02: 1, 0x09: 2, 0x03: 3, 0x08: 4}   # TINYINT < SMALLINT < MEDIUMINT < INT < BIGINT


# --- running --------------------------------------------------------------------------------------

@dataclass
class _Result:
    """A branch's (or a sub-expression's) rows, with each column's collation (name, coercibility)."""

    columns: list["ColumnDef"]
    rows: list[Row]
    collations: list[tuple[bytes | None, int]]


async def run_set_operation(ex: "ExecContext", plan: "Plan", r: "Reply", more: bool) -> None:
    """Run every branch, combine them as MariaDB does and send the one result set."""
    from proxy.exec.merge import merge_results
    from proxy.wire.messages import ResultSet
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
    from proxy.exec.merge import K_BIN, K_CI, column_kind
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
    from proxy.exec.merge import K_BIN, K_CI, collation_kind, column_kind, value_key
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
    from proxy.exec.merge import row_sort_key
    from proxy.wire.constants import ENUM_FLAG, SET_FLAG, T_ENUM, T_SET
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
    from proxy.wire.constants import (BINARY_FLAG, ENUM_FLAG, NOT_NULL_FLAG, SET_FLAG, NUMERIC_TYPES, T_BLOB, T_LONG_BLOB,
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
