"""Conditions and co-location: which partitions of a table a WHERE/ON condition leaves, and which
table references a statement joins on their sharding columns. Pure functions over the parser's output."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Sequence

from meta.sharding import BadShardingValue, NoValidNode
from proxy.plan.analysis import NULL_LITERAL, Query, Ref, Scope, literal_value
from proxy.plan.parser import Parser
from proxy.plan.sqltok import Token


def names_shard_column(col: tuple[tuple[str, ...], str], ref: Ref) -> bool:
    """Whether a column reference names ref's sharding column."""
    quals, name = col
    if name != ref.table.column:
        return False
    if not quals:
        return True
    if len(quals) == 1:
        return quals[0] == ref.alias
    return not ref.has_alias and quals[1] == ref.table.name and quals[0] == ref.table.schema.lower()


def ref_partitions(c: Any, ref: Ref, toks: list[Token], outer: bool) -> frozenset[int] | None:
    """The partitions of ref that rows satisfying condition c can live on; None = all of them."""
    if c is None:
        return None
    op = c[0]
    if op == "and":
        acc: frozenset[int] | None = None
        for x in c[1]:
            r = ref_partitions(x, ref, toks, outer)
            if r is not None:
                acc = r if acc is None else acc & r
        return acc
    if op == "or":
        parts: set[int] = set()
        for x in c[1]:
            r = ref_partitions(x, ref, toks, outer)
            if r is None:
                return None
            parts |= r
        return frozenset(parts)
    if op == "lit":
        return frozenset() if literal_false(c, toks) else None
    if op in ("ceq", "insub") or not names_shard_column(c[1], ref):
        return None
    fn = ref.table.fn
    assert fn is not None
    try:
        if op == "eq":
            return frozenset((fn.partition(literal_value(c[2], toks)),))
        if op == "in":
            found = set()
            for v in c[2]:
                if v is NULL_LITERAL:
                    continue
                try:
                    found.add(fn.partition(literal_value(v, toks)))
                except NoValidNode:
                    pass
            return frozenset(found)
        if op == "range":
            lo = None if c[2] is None else literal_value(c[2], toks)
            hi = None if c[3] is None else literal_value(c[3], toks)
            r = fn.partitions_for_range(lo, hi)
            return None if r is None else frozenset(r)
        if op == "isnull":
            # A NULL-extended row of an outer join also satisfies IS NULL, wherever it comes from.
            return None if outer else frozenset((fn.partition(None),))
        if op == "empty":
            return frozenset()
    except NoValidNode:
        return frozenset()
    except BadShardingValue:
        return None  # MySQL casts such values; any node may hold a match
    return None


def literal_false(c: Any, toks: list[Token]) -> bool:
    """Whether a literal-only condition (1=0, 0, FALSE, NULL) is certainly not true; numbers only."""
    a = literal_value(c[2], toks)
    if c[1] == "truth":
        return a is None or (isinstance(a, (int, Decimal)) and a == 0)
    b = literal_value(c[3], toks)
    if a is None or b is None:
        return True
    if not (isinstance(a, (int, Decimal)) and isinstance(b, (int, Decimal))):
        return False
    return (a != b) if c[1] == "=" else (a == b)


def conjuncts(c: Any) -> list[Any]:
    if c is None:
        return []
    if c[0] == "and":
        out: list[Any] = []
        for x in c[1]:
            out.extend(conjuncts(x))
        return out
    return [c]


def resolve_col(col: tuple[tuple[str, ...], str], sc: Scope) -> Ref | None:
    """The sharding table whose sharding column col names, searching outwards for qualified names."""
    quals, name = col
    if not quals:
        cands = [r for r in sc.refs if r.table.type == "sharding" and r.table.column == name]
        return cands[0] if len(cands) == 1 else None
    s: Scope | None = sc
    while s is not None:
        cands = [r for r in s.refs if (len(quals) == 1 and r.alias == quals[0]) or
                 (len(quals) == 2 and not r.has_alias and r.table.name == quals[1]
                  and r.table.schema.lower() == quals[0])]
        if cands:
            r = cands[0]
            ok = len(cands) == 1 and r.table.type == "sharding" and r.table.column == name
            return r if ok else None
        if len(quals) == 1 and any(alias == quals[0] for alias, _ in s.derived):
            return None
        s = s.parent
    return None


def sub_column(q: Query, p: Parser) -> Ref | None:
    """For `x IN (SELECT col FROM ...)`: the sharding table whose sharding column the subquery selects."""
    if q.union or len(q.branches) != 1:
        return None
    sc = q.branches[0]
    if sc.select_list is None:
        return None
    a, b = sc.select_list
    if p.word(a, "DISTINCT"):
        a += 1
    col, k = p.colref(a, b)
    if col is None or k != b:
        return None
    return resolve_col(col, sc)


def join_edges(p: Parser) -> list[tuple[Ref, Ref]]:
    """Equalities between sharding columns that make two tables' rows meet on the same node."""
    out: list[tuple[Ref, Ref]] = []
    for sc in p.scopes:
        conds = [sc.cond] + [p.cond(a, b, sc) for a, b in sc.ons]
        for c in conds:
            for atom in conjuncts(c):
                if atom is None:
                    continue
                if atom[0] == "ceq":
                    x, y = resolve_col(atom[1], sc), resolve_col(atom[2], sc)
                elif atom[0] == "insub":
                    x, y = resolve_col(atom[1], sc), sub_column(atom[2], p)
                else:
                    continue
                if x is not None and y is not None and x is not y:
                    out.append((x, y))
        for right, cols, left in sc.usings:
            for col in cols:
                for r in right:
                    for lft in left:
                        if isinstance(r, Ref) and isinstance(lft, Ref) and r.table.column == col \
                                and lft.table.column == col and r.table.type == lft.table.type == "sharding":
                            out.append((lft, r))
    return out


def query_refs(q: Query, subs: bool = True) -> list[Ref]:
    """The tables a query reads; subs=False: only those its rows come from (FROM, derived tables), not
    those of subqueries in its conditions or select list."""
    out: list[Ref] = []
    seen: set[int] = set()

    def walk(qq: Query) -> None:
        if id(qq) in seen:
            return
        seen.add(id(qq))
        for sc in qq.branches:
            out.extend(sc.refs)
            for _, d in sc.derived:
                walk(d)
            if subs:
                for s in sc.subs.values():
                    walk(s)
    walk(q)
    return out


def has_sharding(items: list[Any], subs: bool = True) -> bool:
    """Whether tables or derived tables read a sharding table (subs=False: in their FROM only)."""
    for it in items:
        if isinstance(it, Ref):
            if it.table.type == "sharding":
                return True
        elif any(r.table.type == "sharding" for r in query_refs(it, subs)):
            return True
    return False


def table_names(refs: Sequence[Ref]) -> str:
    return " and ".join(dict.fromkeys(r.table.full for r in refs))
