"""Table metadata records: small, immutable, and parsed only when someone asks for columns.

A proxy may hold tens of thousands of table-node entries, so records use slots, CREATE texts are
shared between nodes (the loader interns them), and sqlglot runs lazily, once per distinct
normalized text.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import sqlglot
import structlog
from sqlglot import exp

from meta.consistency import Consistency, Verdict, judge, normalize_create

log = structlog.get_logger("pydble.meta.model")

Key = tuple[str, str]  # (schema, table name in lower case)

EMPTY: Mapping[str, str] = MappingProxyType({})

KIND_DEFAULT = "default"  # an unconfigured table found on its schema's default node


@dataclass(frozen=True, slots=True)
class ColumnMeta:
    """One column, as much as routing and INSERT rewriting need."""

    name: str
    data_type: str
    nullable: bool = True
    default: str | None = None
    auto_increment: bool = False
    primary_key: bool = False


@dataclass(frozen=True, slots=True)
class TableStructure:
    """The parsed form of a CREATE TABLE text, shared by every table with the same text."""

    columns: tuple[ColumnMeta, ...]
    primary_key: tuple[str, ...] = ()
    unique_keys: tuple[tuple[str, ...], ...] = ()
    parsed_by: str = "sqlglot"  # or "lines" when sqlglot could not read the text

    @property
    def column_names(self) -> tuple[str, ...]:
        """Column names in table order."""
        return tuple(c.name for c in self.columns)

    @property
    def auto_increment(self) -> str | None:
        """The AUTO_INCREMENT column, if any."""
        return next((c.name for c in self.columns if c.auto_increment), None)

    def column(self, name: str) -> ColumnMeta | None:
        """Find a column case-insensitively, as MySQL does."""
        low = name.lower()
        return next((c for c in self.columns if c.name.lower() == low), None)

    def index_of(self, name: str) -> int:
        """Position of a column (for INSERT without a column list), -1 if absent."""
        low = name.lower()
        return next((i for i, c in enumerate(self.columns) if c.name.lower() == low), -1)


@dataclass(frozen=True, slots=True)
class TableMeta:
    """What this instance knows about one logical table, as of one load."""

    schema: str
    table: str                               # lower case, the registry key
    kind: str                                # sharding | global | single | default
    nodes: tuple[str, ...]                   # the shardingNodes that must hold it, config order
    node_sql: Mapping[str, str | None]       # answered nodes: CREATE text, None if not there
    structure: str | None                    # the text memory uses (most nodes' variant)
    consistency: Consistency
    reload_time: float | None = None         # epoch seconds of the fetch that produced it
    version: int = 0                         # the registry version that published it
    unknown: Mapping[str, str] = field(default_factory=lambda: EMPTY)  # unanswered node -> why

    @property
    def key(self) -> Key:
        """The registry key."""
        return (self.schema, self.table)

    @property
    def has_meta(self) -> bool:
        """Whether a structure is known (DML on a table without one gets error 3009)."""
        return self.structure is not None

    @property
    def missing_nodes(self) -> tuple[str, ...]:
        """Nodes that answered and do not have the table."""
        return tuple(n for n in self.nodes if n in self.node_sql and self.node_sql[n] is None)

    @property
    def parsed(self) -> TableStructure | None:
        """Columns and keys, parsed on first use and shared by identical texts."""
        return parse_create(self.structure) if self.structure is not None else None

    @property
    def columns(self) -> tuple[ColumnMeta, ...]:
        """The columns (empty without metadata)."""
        p = self.parsed
        return p.columns if p else ()

    def verdict(self) -> Verdict:
        """The full comparison across nodes (variants and which nodes hold them), for reports."""
        return judge(self.nodes, self.node_sql, self.unknown)


def parse_create(sql: str) -> TableStructure:
    """Parse a SHOW CREATE TABLE text; identical normalized texts are parsed once."""
    return _parse_normalized(normalize_create(sql))


@functools.lru_cache(maxsize=4096)
def _parse_normalized(sql: str) -> TableStructure:
    try:
        return _parse_sqlglot(sql)
    except Exception as e:  # sqlglot gaps must not make a table unusable: read the lines instead
        log.debug("sqlglot could not parse CREATE TABLE, reading lines", error=str(e)[:200])
        return _parse_lines(sql)


def _definitions_only(sql: str) -> str:
    """Cut partitioning and anything after the table options line (sqlglot lacks that syntax)."""
    start = sql.find("\n)")
    if start < 0:
        return sql
    end = sql.find("\n", start + 2)
    return sql if end < 0 else sql[:end]


def _parse_sqlglot(sql: str) -> TableStructure:
    tree = sqlglot.parse_one(_definitions_only(sql), read="mysql")
    if not isinstance(tree, exp.Create) or not isinstance(tree.this, exp.Schema):
        raise ValueError(f"not a CREATE TABLE: {type(tree).__name__}")
    columns: list[ColumnMeta] = []
    pk: tuple[str, ...] = ()
    uniques: list[tuple[str, ...]] = []
    for node in tree.this.expressions:
        if isinstance(node, exp.ColumnDef):
            columns.append(_column(node))
        elif isinstance(node, exp.PrimaryKey):
            pk = tuple(_ident(e) for e in node.expressions)
        elif isinstance(node, exp.UniqueColumnConstraint) or (
                isinstance(node, exp.Constraint) and node.find(exp.UniqueColumnConstraint)):
            u = node.find(exp.UniqueColumnConstraint)
            cols = u.this.expressions if u is not None and isinstance(u.this, exp.Schema) else []
            uniques.append(tuple(_ident(c) for c in cols))
    inline_pk = tuple(c.name for c in columns if c.primary_key)
    pk = pk or inline_pk
    if pk:
        columns = [c if c.primary_key or c.name not in pk else
                   ColumnMeta(c.name, c.data_type, False, c.default, c.auto_increment, True)
                   for c in columns]
    return TableStructure(tuple(columns), pk, tuple(uniques))


def _ident(e: exp.Expression) -> str:
    while not isinstance(e, exp.Identifier) and e.this is not None and isinstance(e.this, exp.Expression):
        e = e.this
    return e.name


def _column(cd: exp.ColumnDef) -> ColumnMeta:
    kind = cd.args.get("kind")
    nullable, default, auto, primary = True, None, False, False
    for c in cd.constraints:
        k = c.args.get("kind")
        if isinstance(k, exp.NotNullColumnConstraint):
            nullable = bool(k.args.get("allow_null"))
        elif isinstance(k, exp.DefaultColumnConstraint):
            default = None if isinstance(k.this, exp.Null) else k.this.sql("mysql")
        elif isinstance(k, exp.AutoIncrementColumnConstraint):
            auto = True
        elif isinstance(k, exp.PrimaryKeyColumnConstraint):
            primary, nullable = True, False
    return ColumnMeta(cd.name, kind.sql("mysql") if kind is not None else "", nullable, default,
                      auto, primary)


_COLUMN_LINE = re.compile(r"^  `((?:[^`]|``)+)` (\S+)(.*?),?$")
_KEY_LINE = re.compile(r"^  (PRIMARY KEY|UNIQUE KEY `(?:[^`]|``)+`) \((.*)\)")


def _parse_lines(sql: str) -> TableStructure:
    """SHOW CREATE TABLE puts one definition per line; enough for names, types and keys."""
    columns: list[ColumnMeta] = []
    pk: tuple[str, ...] = ()
    uniques: list[tuple[str, ...]] = []
    for line in sql.split("\n")[1:]:
        if line.startswith(")"):
            break
        m = _KEY_LINE.match(line)
        if m:
            cols = tuple(c.strip().strip("`").split("`")[0] for c in m.group(2).split(","))
            if m.group(1) == "PRIMARY KEY":
                pk = cols
            else:
                uniques.append(cols)
            continue
        m = _COLUMN_LINE.match(line)
        if m:
            rest = m.group(3)
            columns.append(ColumnMeta(m.group(1).replace("``", "`"), m.group(2),
                                      "NOT NULL" not in rest, None, "AUTO_INCREMENT" in rest))
    if pk:
        columns = [ColumnMeta(c.name, c.data_type, False, c.default, c.auto_increment, True)
                   if c.name in pk else c for c in columns]
    return TableStructure(tuple(columns), pk, tuple(uniques), parsed_by="lines")
