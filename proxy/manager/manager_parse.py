"""Parsing manager-port commands into records; anything else gets a usage error, never a guess."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from meta.errors import ProxyError


class ManagerSyntaxError(ProxyError):
    """A malformed manager command; the message carries the usage line."""

    code, sqlstate = 1064, "42000"


@dataclass(frozen=True)
class TableFilter:
    """Which tables a reload or check applies to (None everywhere = all)."""

    schema: str | None = None
    table: str | None = None
    tables: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True)
class ReloadMetadata:
    filter: TableFilter


@dataclass(frozen=True)
class CheckMetadata:
    pass


@dataclass(frozen=True)
class CheckFullMetadata:
    filter: TableFilter
    consistent_in_sharding_nodes: int | None = None
    consistent_in_memory: int | None = None
    reload_time_op: str | None = None     # '>=', '<=', '=', '>', '<', 'is null'
    reload_time: str | None = None        # as given, normalized to 'yyyy/MM/dd HH:mm:ss' (as shown)
    nodes: bool = False   # `check full @@metadata_nodes`: DBLE's six columns and pydble's differing_sharding_nodes


@dataclass(frozen=True)
class ShowDdl:
    pass


@dataclass(frozen=True)
class KillDdlLock:
    schema: str
    table: str
    force: bool = False   # release even though the holder is online (it then cannot publish its outcome)


@dataclass(frozen=True)
class RepairDdl:
    schema: str
    table: str


@dataclass(frozen=True)
class ShowCluster:
    pass


@dataclass(frozen=True)
class ShowHelp:
    pass


@dataclass(frozen=True)
class ShowDdlHistory:
    pass


@dataclass(frozen=True)
class ShowBackend:
    pass


@dataclass(frozen=True)
class ShowXa:
    pass


Command = (ReloadMetadata | CheckMetadata | CheckFullMetadata | ShowDdl | KillDdlLock | ShowCluster | ShowHelp
           | ShowBackend | ShowDdlHistory | RepairDdl | ShowXa)

HELP: list[tuple[str, str]] = [
    ("reload @@metadata [where schema='?' [and table='?'] | where table in ('schema.table',...)]",
     "Reload table metadata from the backends (all, one schema, one table or a list)"),
    ("check @@metadata", "Show when metadata was last loaded"),
    ("check full @@metadata [where schema='?' [and table='?'] | where reload_time [>=|<=|=] 'yyyy/MM/dd HH:mm:ss'"
     " | where reload_time is null | where consistent_in_sharding_nodes=0|1 | where consistent_in_memory=0|1]",
     "Show every table's metadata and whether it is consistent across nodes and with memory"),
    ("check full @@metadata_nodes [where ... as check full @@metadata]",
     "check full @@metadata's columns, then differing_sharding_nodes: the nodes whose structure differs"),
    ("show @@ddl", "Show the DDL statements in flight in the whole cluster"),
    ("kill @@ddl_lock where schema='?' and table='?' [force]",
     "Release a table's DDL lock here and in the cluster (refused while its holder is online unless force)"),
    ("repair @@ddl where schema='?' and table='?'",
     "Re-run a table's half-applied last DDL on the nodes where it failed (only where they kept the old structure)"),
    ("show @@cluster", "Show the online instances of the cluster"),
    ("show @@backend", "Show backend connection pool use per dbGroup"),
    ("show @@ddl_history", "Show the DDLs this instance ran (persistent, newest first)"),
    ("show @@xa", "Show pydble's XA transactions in doubt: prepared branches (XA RECOVER) and recorded decisions"),
    ("show @@help", "Show this help"),
]

_NAME = r"(?:'(?P<{0}q>[^']*)'|\"(?P<{0}d>[^\"]*)\"|`(?P<{0}b>[^`]*)`|(?P<{0}u>[\w$]+))"


def _name(group: str) -> str:
    return _NAME.format(group)


def _get(m: re.Match, group: str) -> str | None:
    for suffix in ("q", "d", "b", "u"):
        v = m.group(group + suffix)
        if v is not None:
            return v
    return None


_WHERE_SCHEMA_TABLE = re.compile(
    rf"^schema\s*=\s*{_name('s')}(?:\s+and\s+table\s*=\s*{_name('t')})?$", re.I)
_FORCE = re.compile(r"\s+force$", re.I)
_WHERE_TABLE_IN = re.compile(r"^table\s+in\s*\((?P<list>.*)\)$", re.I | re.S)
_LIST_ITEM = re.compile(rf"^\s*{_name('x')}\s*$")
# unquoted or backticked parts: schema1.t, `schema1`.`t`
_LIST_DOTTED = re.compile(r"^\s*(?:`(?P<sb>[^`]+)`|(?P<su>[\w$]+))\s*\.\s*(?:`(?P<tb>[^`]+)`|(?P<tu>[\w$]+))\s*$")
_WHERE_CONSISTENT = re.compile(r"^(?P<col>consistent_in_sharding_nodes|consistent_in_data_nodes|consistent_in_memory)"
                               r"\s*=\s*'?(?P<v>[01])'?$", re.I)
_WHERE_RELOAD_TIME = re.compile(r"^reload_time\s*(?P<op>>=|<=|=|>|<)\s*(?P<q>['\"])(?P<t>[^'\"]+)(?P=q)$", re.I)
_WHERE_RELOAD_NULL = re.compile(r"^reload_time\s+is\s+null$", re.I)
_TIME = re.compile(r"^(\d{4})[-/](\d{1,2})[-/](\d{1,2})(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2}))?)?$")


def _usage(cmd: str) -> ManagerSyntaxError:
    for usage, _ in HELP:
        if usage.split(" [")[0].split(" where")[0] == cmd:
            return ManagerSyntaxError(f"Syntax error, usage: {usage}")
    return ManagerSyntaxError("Unsupported statement, see: show @@help")


def _table_filter(where: str | None, cmd: str) -> TableFilter:
    if where is None:
        return TableFilter()
    m = _WHERE_SCHEMA_TABLE.match(where)
    if m:
        return TableFilter(_get(m, "s"), _get(m, "t"))
    m = _WHERE_TABLE_IN.match(where)
    if m:
        items = []
        for raw in m.group("list").split(","):
            dm = _LIST_DOTTED.match(raw)
            if dm:
                items.append((dm.group("sb") or dm.group("su"), dm.group("tb") or dm.group("tu")))
                continue
            im = _LIST_ITEM.match(raw)
            name = _get(im, "x") if im else None
            if not name or name.count(".") != 1 or not all(name.split(".")):
                raise _usage(cmd)
            s, t = name.split(".")
            items.append((s, t))
        return TableFilter(tables=tuple(items))
    raise _usage(cmd)


def normalize_time(text: str) -> str | None:
    """'2026/11/22 10:00' or '2026-11-22 10:00:05' as 'yyyy/MM/dd HH:mm:ss', the form `check full
    @@metadata` shows (so filters compare shown texts); None if not a time."""
    m = _TIME.match(text.strip())
    if not m:
        return None
    y, mo, d, h, mi, s = (int(x) if x else 0 for x in m.groups())
    return f"{y:04d}/{mo:02d}/{d:02d} {h:02d}:{mi:02d}:{s:02d}"


def _check_full(where: str | None, head: str) -> CheckFullMetadata:
    """`check full @@metadata[_nodes] [where ...]`: its filter."""
    if where is None:
        return CheckFullMetadata(TableFilter())
    m = _WHERE_CONSISTENT.match(where)
    if m:
        v = int(m.group("v"))
        if m.group("col").lower() == "consistent_in_memory":
            return CheckFullMetadata(TableFilter(), consistent_in_memory=v)
        return CheckFullMetadata(TableFilter(), consistent_in_sharding_nodes=v)
    m = _WHERE_RELOAD_TIME.match(where)
    if m:
        t = normalize_time(m.group("t"))
        if t is None:
            raise ManagerSyntaxError(f"bad time '{m.group('t')}', expected 'yyyy/MM/dd HH:mm:ss'")
        return CheckFullMetadata(TableFilter(), reload_time_op=m.group("op"), reload_time=t)
    if _WHERE_RELOAD_NULL.match(where):
        return CheckFullMetadata(TableFilter(), reload_time_op="is null")
    return CheckFullMetadata(_table_filter(where, head))


def parse_manager(sql: str) -> Command:
    """Parse one manager command (case-insensitive, trailing ';' allowed)."""
    text = " ".join(sql.strip().rstrip(";").split())
    low = text.lower()
    where: str | None = None
    head = low
    idx = low.find(" where ")
    if idx >= 0:
        head, where = low[:idx], text[idx + 7:].strip()
    if head == "reload @@metadata":
        return ReloadMetadata(_table_filter(where, head))
    if head == "check @@metadata":
        if where is not None:
            raise _usage(head)
        return CheckMetadata()
    if head in ("check full @@metadata", "check full @@metadata_nodes"):
        return replace(_check_full(where, head), nodes=head.endswith("_nodes"))
    if head in ("kill @@ddl_lock", "repair @@ddl"):
        force = _FORCE.search(where or "") if head == "kill @@ddl_lock" else None
        m = _WHERE_SCHEMA_TABLE.match((where or "")[:force.start()] if force else where or "")
        if not m or _get(m, "t") is None:
            raise _usage(head)
        if head == "repair @@ddl":
            return RepairDdl(_get(m, "s") or "", _get(m, "t") or "")
        return KillDdlLock(_get(m, "s") or "", _get(m, "t") or "", force is not None)
    if where is None:
        simple = {"show @@ddl": ShowDdl, "show @@cluster": ShowCluster, "show @@help": ShowHelp,
                  "show @@backend": ShowBackend, "show @@ddl_history": ShowDdlHistory, "show @@xa": ShowXa}
        if low in simple:
            return simple[low]()
    raise _usage(head)
