"""What the router knows about a statement once it is parsed: tables resolved against the config,
their occurrences (refs), the SELECT blocks they sit in (scopes), the per-shape analysis the router
caches, and the Python values of literals."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from meta.config import TableConfig
from meta.errors import NotSupported
from meta.sharding import ShardingFunction
from proxy.plan.sqltok import Token, hex_value, unquote_string


# words and table types the analyzer and the planner both judge statements by
SESSION_WORDS = frozenset({"SET", "USE", "BEGIN", "START", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE",
                           "KILL", "RESET", "PING"})
UNSUPPORTED = {
    "LOCK": "LOCK TABLES", "UNLOCK": "UNLOCK TABLES", "LOAD": "LOAD DATA", "HANDLER": "HANDLER",
    "CALL": "CALL (stored procedures)", "GRANT": "GRANT", "REVOKE": "REVOKE", "XA": "XA transactions",
    "PREPARE": "SQL-level PREPARE", "EXECUTE": "SQL-level EXECUTE", "DEALLOCATE": "DEALLOCATE PREPARE",
    "FLUSH": "FLUSH", "PURGE": "PURGE", "INSTALL": "INSTALL", "UNINSTALL": "UNINSTALL", "CHANGE": "CHANGE",
    "CACHE": "CACHE INDEX", "BINLOG": "BINLOG", "SHUTDOWN": "SHUTDOWN", "IMPORT": "IMPORT TABLE",
    "CLONE": "CLONE", "RESTART": "RESTART", "HELP": "HELP", "SIGNAL": "SIGNAL", "RESIGNAL": "RESIGNAL",
    "GET": "GET DIAGNOSTICS", "TABLE": "the TABLE statement", "VALUES": "the VALUES statement",
    "BACKUP": "BACKUP",
}
# schemas of the backend server that no logical schema maps: never reachable by a client (1044)
HIDDEN_SCHEMAS = frozenset({"mysql", "performance_schema", "sys"})
# DBLE's dml bits, in their order; ANY: some privilege on the table (SHOW/DESC), ALL: every one (DDL)
INSERT, UPDATE, SELECT, DELETE, ANY, ALL = 0, 1, 2, 3, -1, -2
LOCAL_TYPES = frozenset({"sharding", "single", "default"})   # tables whose rows live on some nodes only


@dataclass(frozen=True, eq=False)
class Table:
    """A table reference resolved against the configuration."""

    schema: str
    name: str
    type: str                      # sharding | global | single | default | system
    nodes: tuple[str, ...]
    column: str | None = None
    fn: ShardingFunction | None = None
    dist: tuple[Any, ...] | None = None   # equal dist = same nodes and same function: sharded alike
    cfg: TableConfig | None = None

    @property
    def full(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(eq=False)
class Ref:
    """One occurrence of a table in a FROM clause (or the target of a write)."""

    table: Table
    alias: str
    has_alias: bool
    scope: "Scope"
    span: tuple[int, int] = (-1, -1)   # token range of the name as written (views expand it)


@dataclass(eq=False)
class Query:
    """A query expression: one SELECT or the branches of a UNION."""

    parent: "Scope | None"
    branches: list["Scope"] = field(default_factory=list)
    union: bool = False
    has_ctes: bool = False


@dataclass(eq=False)
class Scope:
    """One SELECT block (or the table part of an UPDATE/DELETE): its tables, conditions, subqueries."""

    parent: "Scope | None"
    ctes: dict[str, Query]
    refs: list[Ref] = field(default_factory=list)
    derived: list[tuple[str, Query]] = field(default_factory=list)
    subs: dict[int, Query] = field(default_factory=dict)
    where: tuple[int, int] | None = None
    ons: list[tuple[int, int]] = field(default_factory=list)
    usings: list[tuple[list[Any], list[str], list[Any]]] = field(default_factory=list)
    outer: list[tuple[list[Any], list[Any]]] = field(default_factory=list)
    select_list: tuple[int, int] | None = None
    cond: Any = None
    simple: bool = True
    into: bool = False


@dataclass(eq=False)
class Analysis:
    """Everything about a statement that does not depend on its literal values (cached per shape)."""

    kind: str
    is_write: bool
    tables: tuple[tuple[str, str], ...]
    deletions: tuple[tuple[int, int], ...] = ()
    mode: str = "fixed"               # fixed | query | insert
    nodes: tuple[str, ...] = ()       # for mode fixed
    ddl: str | None = None
    if_exists: bool = False
    maintenance: bool = False            # ANALYZE/CHECK/CHECKSUM/OPTIMIZE/REPAIR TABLE: rows name db.table
    cacheable: bool = True
    # mode query
    top: Query | None = None
    refs: list[Ref] = field(default_factory=list)
    scopes: list[Scope] = field(default_factory=list)
    queries: list[Query] = field(default_factory=list)
    edges: list[tuple[Ref, Ref]] = field(default_factory=list)
    modified: list[Ref] | None = None    # writes: the tables written
    has_limit: bool = False
    returning: bool = False              # INSERT/REPLACE/DELETE ... RETURNING: rows come back from the write
    returning_rows: bool = False         # ... and the i-th row returned is the i-th row of VALUES (plain INSERT)
    set_checks: list[tuple[Ref, Any, list[Any]]] = field(default_factory=list)
    single: Ref | None = None            # the hot path: exactly one table, nothing else
    # mode insert
    target: Table | None = None
    rows: list[tuple[int, int, int]] = field(default_factory=list)   # token index of row start, '(' and ')'
    keys: list[Any] = field(default_factory=list)               # value ref of each row's sharding key
    sub: "Analysis | None" = None        # subqueries inside VALUES / INSERT ... SELECT
    # mode explain: the text before the explained statement, and that statement's SQL on its node
    explain: tuple[int, str] | None = None
    # what the statement needs of the user's grants: (command word, dml bit or ANY/ALL, schema, table)
    access: tuple[tuple[str, int, str, str], ...] = ()


def not_supported(msg: str) -> NotSupported:
    """ER_NOT_SUPPORTED_YET (1235) with a sentence saying why."""
    return NotSupported(msg)


def shard_update_error(r: Ref) -> NotSupported:
    """DBLE's refusal of an UPDATE that moves a row to another shard."""
    return not_supported(f"Sharding column can't be updated {r.table.name}->{(r.table.column or '').upper()}")


NULL_LITERAL = ("null",)


def literal_value(ref: Any, toks: list[Token]) -> Any:
    """The Python value of a literal reference: int, Decimal, str, bytes or None."""
    kind = ref[0]
    if kind == "n":
        text = toks[ref[1]][1]
        if text.isdigit() and len(text) <= 20:
            v: Any = int(text)
        else:
            try:
                v = Decimal(text)
            except InvalidOperation:  # pragma: no cover - the tokenizer only yields valid numbers
                v = text
        return -v if ref[2] else v
    if kind == "s":
        return unquote_string(toks[ref[1]][1])
    if kind == "x":
        return hex_value(toks[ref[1]][1])
    if kind == "null":
        return None
    return ref[1]


def same_literal(a: Any, b: Any) -> bool:
    """Equal literals of the same family (numbers compare by value, strings and bytes exactly)."""
    if isinstance(a, (int, Decimal)) and isinstance(b, (int, Decimal)):
        return a == b
    return type(a) is type(b) and a == b
