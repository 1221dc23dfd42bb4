"""What a scattered SELECT's merge does, as plain data: `proxy.plan.scatter` builds it, `proxy.exec.merge` applies it."""

from __future__ import annotations

from dataclasses import dataclass

# Aggregate names a MergePlan uses (ANY is ANY_VALUE).
COUNT, SUM, MIN, MAX, AVG = "COUNT", "SUM", "MIN", "MAX", "AVG"
GROUP_CONCAT, BIT_AND, BIT_OR, BIT_XOR, ANY = "GROUP_CONCAT", "BIT_AND", "BIT_OR", "BIT_XOR", "ANY"
# STDDEV/VARIANCE and kin, merged from per-node COUNT(x), SUM(x) and SUM(x*x) (see proxy.exec.variance)
VAR_POP, VAR_SAMP, STD_POP, STD_SAMP = "VAR_POP", "VAR_SAMP", "STDDEV_POP", "STDDEV_SAMP"
VARIANCES = frozenset({VAR_POP, VAR_SAMP, STD_POP, STD_SAMP})
ARITH = "ARITH"   # + - * over other merged aggregates (COUNT(*) + 1, MAX(x) - MIN(x))


@dataclass(frozen=True)
class SortKey:
    """One ORDER BY term: a node-row column (negative: from the row's end) and its direction."""

    column: int
    descending: bool = False


@dataclass(frozen=True)
class Aggregate:
    """How to combine one column of per-node partial aggregates into the final value.

    `column` holds the node's partial (for AVG: its SUM). `count_column` is AVG's hidden COUNT.
    `distinct` marks COUNT/SUM/AVG/GROUP_CONCAT(DISTINCT ...): nodes then group by the argument
    columns `distinct_columns` too, and each distinct argument value contributes once.
    """

    column: int
    func: str
    count_column: int | None = None
    distinct: bool = False
    distinct_columns: tuple[int, ...] = ()
    separator: bytes = b","
    name: str | None = None
    sum_column: int | None = None      # STDDEV/VARIANCE: the hidden SUM(x) and SUM(x*x)
    squares_column: int | None = None
    # GROUP_CONCAT(x ORDER BY ...): the order keys, x, its row count, and @@group_concat_max_len
    order_columns: tuple[tuple[int, bool], ...] = ()
    element_column: int | None = None
    rows_column: int | None = None
    max_len_column: int | None = None
    program: tuple | None = None       # ARITH: ("+"|"-"|"*", a, b) | ("neg", a) | ("col", i) | ("lit", text)
    avg_column: int | None = None      # a selected AVG: the nodes' own AVG(x), for how MariaDB describes it


@dataclass(frozen=True)
class HavingTerm:
    """`column op literal`, re-evaluated on merged groups because nodes only see partial groups."""

    column: int
    op: str
    literal: str
    literal_is_string: bool = False


@dataclass(frozen=True)
class MergePlan:
    """What to do with per-node rows; plain data so one plan serves every SQL of the same shape.

    Column numbers index the node row (visible columns, then `hidden` helper columns);
    a negative number counts from the row's end, which is needed after a `*`.
    """

    hidden: int = 0
    grouped: bool = False
    group_by: tuple[int, ...] = ()
    aggregates: tuple[Aggregate, ...] = ()
    having: tuple[HavingTerm, ...] = ()
    order_by: tuple[SortKey, ...] = ()
    distinct: bool = False
    offset: int = 0
    limit: int | None = None
    node_limit: int | None = None  # the LIMIT grouped nodes ran with (ordered by the group keys)
    collations: tuple[tuple[int, int | None], ...] = ()  # (column, hidden COLLATION(column) or None)
    rollup: bool = False  # GROUP BY ... WITH ROLLUP: super-aggregate rows added after each group

    @property
    def concat_only(self) -> bool:
        """True when node rows can be relayed undecoded (only `limit` has to be counted)."""
        return not (self.grouped or self.order_by or self.distinct or self.hidden or self.offset)
