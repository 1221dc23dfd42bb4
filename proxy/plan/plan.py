"""A statement's route as the router decides it: the nodes, the SQL each runs, and how answers combine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from proxy.plan.mergeplan import MergePlan


@dataclass(frozen=True)
class Target:
    node: str      # shardingNode name
    sql: str       # the exact SQL to send to that node (physical: schema qualifiers stripped)


@dataclass(frozen=True)
class Plan:
    kind: str                      # 'select' | 'insert' | 'replace' | 'update' | 'delete' | 'ddl' | 'other'
    targets: tuple[Target, ...]
    is_write: bool
    tables: tuple[tuple[str, str], ...]   # (schema, table) referenced, table lower-cased
    merge: "MergePlan | None" = None      # set for a read on 2+ targets
    ddl: str | None = None         # CREATE_TABLE, DROP_TABLE, ALTER_TABLE, TRUNCATE_TABLE, CREATE_INDEX, ...
    if_exists: bool = False        # DROP TABLE IF EXISTS / CREATE TABLE IF NOT EXISTS
    hint: bool = False             # came from a shardingNode hint
    row_order: tuple[tuple[int, ...], ...] | None = None  # INSERT ... RETURNING: each target's VALUES rows
    returning_copies: bool = False  # ... RETURNING on a global table: every node must return the same rows
    setop: Any = None              # a UNION/INTERSECT/EXCEPT combined in the proxy (proxy.exec.setops.SetPlan)
    row_groups: tuple[Sequence[int], ...] | None = None  # INSERT on several nodes: each target's rows (0-based)
    maintenance: bool = False      # ANALYZE/CHECK/CHECKSUM/OPTIMIZE/REPAIR TABLE: its rows name each node's db.table
