"""The in-memory metadata of this instance, published copy-on-write.

Readers take the current immutable snapshot with one attribute read and never wait; writers
(a load, a DDL refresh, a drop) build a new snapshot under a writer lock and swap it in, so
queries keep flowing during `reload @@metadata` (DBLE stalls every query while it reloads).
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Callable, Iterable, Mapping

import structlog

from meta.config import Config
from meta.consistency import Consistency
from meta.errors import MetaLost, NoSuchTable, ProxyError
from meta.loader import LoadResult
from meta.model import KIND_DEFAULT, Key, TableMeta

log = structlog.get_logger("pydble.meta.registry")

CHECK_TIME_FORMAT = "%Y/%m/%d %H:%M:%S"  # `check @@metadata`: yyyy/MM/dd HH:mm:ss


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One published state: never mutated, safe to hold across awaits."""

    tables: Mapping[Key, TableMeta]
    by_schema: Mapping[str, tuple[str, ...]]   # schema -> sorted table names with a record
    version: int
    last_load_time: float | None


@dataclass(frozen=True, slots=True)
class MetaChange:
    """What a write changed, for listeners (cluster meta_version, caches keyed by table)."""

    version: int
    upserted: tuple[Key, ...]
    dropped: tuple[Key, ...]
    full: bool   # a whole reload: anything may have changed


Listener = Callable[[MetaChange], None]

_EMPTY = Snapshot(MappingProxyType({}), MappingProxyType({}), 0, None)


def format_check_time(ts: float | None) -> str | None:
    """Local time as `check @@metadata` shows it."""
    return None if ts is None else time.strftime(CHECK_TIME_FORMAT, time.localtime(ts))


class Registry:
    """Table metadata of every schema, read lock-free, replaced atomically."""

    def __init__(self, config: Config | None = None) -> None:
        self._snap = _EMPTY
        self._config = config
        self._write = threading.Lock()
        self._listeners: list[Listener] = []

    # --- reads: one attribute load, no lock ---

    @property
    def snapshot(self) -> Snapshot:
        """The current state; hold it to read several tables consistently."""
        return self._snap

    @property
    def version(self) -> int:
        """The instance's metadata version, bumped by every change."""
        return self._snap.version

    @property
    def last_load_time(self) -> float | None:
        """Epoch seconds of the last load applied (None before the first)."""
        return self._snap.last_load_time

    def last_load_time_text(self) -> str | None:
        """`check @@metadata`'s TIMESTAMP: yyyy/MM/dd HH:mm:ss."""
        return format_check_time(self._snap.last_load_time)

    def get(self, schema: str, table: str) -> TableMeta | None:
        """Metadata with a structure, or None (unknown table, or no structure: see `unusable`)."""
        m = self._snap.tables.get((schema, table.lower()))
        return m if m is not None and m.structure is not None else None

    def unusable(self, schema: str, table: str) -> ProxyError | None:
        """Why DML cannot route a configured table by memory, or None: 1146 when every node answered
        without it (what MySQL says, and what Spark's JDBC writer creates the table on), DBLE's 3009
        when some nodes lack it or its metadata could not be loaded."""
        m = self._snap.tables.get((schema, table.lower()))
        if m is not None and m.structure is not None and (
                m.consistency is Consistency.CONSISTENT or not m.missing_nodes):   # the hot path: one compare
            return None
        if m is not None and m.consistency is Consistency.LOST:
            return NoSuchTable(f"Table '{schema}.{table}' doesn't exist")
        return MetaLost(f"Table meta '{schema}.{table}' is lost,PLEASE reload @@metadata")

    def record(self, schema: str, table: str) -> TableMeta | None:
        """The record even without a structure (for `check full @@metadata`)."""
        return self._snap.tables.get((schema, table.lower()))

    def tables_of(self, schema: str) -> list[str]:
        """What SHOW TABLES lists: the tables found on some node of theirs, and those no node could
        answer about; a configured table that no node has is left out (it answers 1146)."""
        snap = self._snap
        names = set()
        for name in snap.by_schema.get(schema, ()):
            m = snap.tables[(schema, name)]
            if any(v is not None for v in m.node_sql.values()) or (m.unknown and not m.node_sql):
                names.add(name)
        cfg = self._config
        if cfg is not None and schema in cfg.schemas:  # configured, not loaded yet: nothing is known
            names.update(t for t in cfg.schemas[schema].tables if (schema, t) not in snap.tables)
        return sorted(names)

    def schemas(self) -> list[str]:
        """Schemas that have at least one record."""
        return sorted(self._snap.by_schema)

    # --- writes: copy, change, swap ---

    def set_config(self, config: Config) -> None:
        """A new configuration (reload @@config); the next load brings the tables in line."""
        self._config = config

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Call fn after every published change; returns a function that removes it."""
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn) if fn in self._listeners else None

    def apply(self, result: LoadResult, *, loaded: bool = True, base_version: int | None = None) -> int:
        """Publish a load: its scope's old entries are replaced by the fresh ones.

        `loaded=False` (a DDL's refresh) leaves `check @@metadata`'s last load time alone.
        `base_version` is the registry version when the load started: entries published since then
        (a DDL's refresh that finished during a long reload) are newer than the load and are kept.
        """
        scope = result.scope
        with self._write:
            old = self._snap
            version = old.version + 1
            newer: dict[Key, TableMeta] = {}
            if base_version is not None and old.version > base_version:
                newer = {k: m for k, m in old.tables.items() if m.version > base_version and scope.covers(k)}
            if scope.kind == "all":
                tables: dict[Key, TableMeta] = {}
            elif scope.kind == "tables":
                tables = dict(old.tables)
                for key in scope.tables:
                    tables.pop(key, None)
            else:
                tables = {k: v for k, v in old.tables.items() if k[0] != scope.schema}
            upserted: list[Key] = list(result.tables)
            old_tables = old.tables
            stamp = object.__setattr__
            unknown = Consistency.UNKNOWN
            for key, meta in result.tables.items():
                if meta.version == 0 and (meta.structure is not None or meta.consistency is not unknown):
                    stamp(meta, "version", version)   # fresh and unpublished: see _carry
                    tables[key] = meta
                else:
                    tables[key] = self._carry(old_tables.get(key), meta, version)
            # a default node that could not be listed: keep its tables, marked unknown
            if result.unlisted_defaults:
                for key, prev in old_tables.items():
                    if (key not in tables and prev.kind == KIND_DEFAULT
                            and key[0] in result.unlisted_defaults):
                        reason = result.unlisted_defaults[key[0]]
                        tables[key] = replace(prev, consistency=Consistency.UNKNOWN, version=version,
                                              unknown=MappingProxyType({prev.nodes[0]: reason}))
                        upserted.append(key)
            if newer:
                tables.update(newer)
                log.info("kept metadata published during the load", tables=len(newer), base_version=base_version)
            changed: list[Key] | None = None
            if scope.kind == "tables":
                dropped = tuple(k for k in scope.tables if k in old_tables and k not in tables)
                changed = [*dropped, *upserted]
            else:
                dropped = tuple(k for k in old_tables if k not in tables)
            loaded_at = (max(result.started_at, old.last_load_time or 0.0) if loaded
                         else old.last_load_time)
            snap = self._publish(old, tables, version, loaded_at, changed)
        # a DDL's refresh is logged by the DDL itself; whole or partial loads are worth a line of their own
        (log.debug if scope.kind == "tables" else log.info)(
            "metadata published", version=version, scope=scope.describe(), tables=len(result.tables),
            dropped=len(dropped))
        self._notify(MetaChange(snap.version, tuple(upserted), dropped, scope.kind == "all"))
        return snap.version

    def replace_tables(self, metas: Iterable[TableMeta], *, drop: Iterable[Key] = ()) -> int:
        """Publish refreshed tables (after a DDL) and drop others; returns the new version."""
        with self._write:
            old = self._snap
            tables = dict(old.tables)
            version = old.version + 1
            dropped = []
            for key in drop:
                key = (key[0], key[1].lower())
                if tables.pop(key, None) is not None:
                    dropped.append(key)
            upserted = []
            for meta in metas:
                tables[meta.key] = self._carry(old.tables.get(meta.key), meta, version)
                upserted.append(meta.key)
            snap = self._publish(old, tables, version, old.last_load_time, [*dropped, *upserted])
        self._notify(MetaChange(snap.version, tuple(upserted), tuple(dropped), False))
        return snap.version

    def drop(self, schema: str, table: str) -> int:
        """Forget a table (DROP TABLE succeeded on its nodes)."""
        return self.replace_tables((), drop=[(schema, table)])

    @staticmethod
    def _carry(prev: TableMeta | None, new: TableMeta, version: int) -> TableMeta:
        """Stamp the version; keep the old structure when the new fetch could not reach a node."""
        if (new.structure is None and new.consistency is Consistency.UNKNOWN
                and prev is not None and prev.structure is not None):
            return replace(new, structure=prev.structure, reload_time=prev.reload_time,
                           version=version)
        if new.version == 0:
            # a fresh, unpublished record (a load's own): stamping it in place costs a tenth of a
            # copy, which matters at tens of thousands of tables per reload
            object.__setattr__(new, "version", version)
            return new
        return replace(new, version=version)

    def _publish(self, old: Snapshot, tables: dict[Key, TableMeta], version: int,
                 loaded_at: float | None, changed: Iterable[Key] | None = None) -> Snapshot:
        """Swap in a new snapshot; `changed` (keys added or removed) limits the by-schema rebuild."""
        if changed is None:
            groups: dict[str, list[str]] = {}
            for s, t in tables:
                groups.setdefault(s, []).append(t)
            by_schema = {s: tuple(sorted(ts)) for s, ts in groups.items()}
        else:
            by_schema = dict(old.by_schema)
            per: dict[str, list[str]] = {}
            for s, t in changed:
                per.setdefault(s, []).append(t)
            for s, ts in per.items():
                names = list(by_schema.get(s, ()))
                if len(ts) <= 64:   # a DDL or a few tables: edit the sorted list in place
                    for t in ts:
                        i = bisect.bisect_left(names, t)
                        present = i < len(names) and names[i] == t
                        if (s, t) in tables and not present:
                            names.insert(i, t)
                        elif (s, t) not in tables and present:
                            del names[i]
                else:
                    keep = set(names)
                    keep.difference_update(t for t in ts if (s, t) not in tables)
                    keep.update(t for t in ts if (s, t) in tables)
                    names = sorted(keep)
                if names:
                    by_schema[s] = tuple(names)
                else:
                    by_schema.pop(s, None)
        snap = Snapshot(MappingProxyType(tables), MappingProxyType(by_schema), version, loaded_at)
        self._snap = snap  # the one atomic swap readers see
        return snap

    def _notify(self, change: MetaChange) -> None:
        for fn in list(self._listeners):
            try:
                fn(change)
            except Exception:
                log.exception("metadata listener failed", version=change.version)
