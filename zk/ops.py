"""Synchronous, bounded reads and deletes of the cluster's znodes, for the operator tools (`pydble ddl`).

The proxy talks to ZooKeeper from asyncio (zk.aio); a one-shot command does not need a loop, so
this module wraps a plain KazooClient. Every call is bounded (kazoo's own synchronous calls wait
forever), and the paths and records are those of zk.paths and zk.records, never re-spelled here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import KazooRetry
from kazoo.security import make_digest_acl

from .paths import Paths, parse_table_node, table_node
from .records import FAILED, Ack, BadRecord, DdlLockInfo, DdlRecord, HistoryEntry, OnlineInfo

log = structlog.get_logger("pydble.zk.ops")

CONNECT_TIMEOUT_S = 10.0
OP_TIMEOUT_S = 10.0
SESSION_TIMEOUT_S = 10.0
DELETE_ATTEMPTS = 3


def make_client(hosts: str, session_timeout_s: float, auth: str | None = None) -> KazooClient:
    """A kazoo client for the CLI that retries connecting; with auth ("user:password") every node it
    creates is readable and writable by that digest identity only (as the proxy's)."""
    auth_data = None
    default_acl = None
    if auth:
        user, _, password = auth.partition(":")
        auth_data = [("digest", auth)]
        default_acl = [make_digest_acl(user, password, all=True)]
    return KazooClient(hosts=hosts, timeout=session_timeout_s,
                       connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=1.0),
                       auth_data=auth_data, default_acl=default_acl)

LOCKED, UNREADABLE = "LOCKED", "UNREADABLE"


class ZkUnreachable(Exception):
    """ZooKeeper could not be reached, or did not answer within the bound."""


@dataclass(frozen=True)
class NodeStat:
    """The parts of a znode's stat the tools show or check."""

    version: int
    czxid: int
    ctime: float          # seconds since the epoch, ZooKeeper's clock
    mtime: float
    ephemeral_owner: int  # session id, 0 for a persistent node

    @classmethod
    def of(cls, stat: ZnodeStat) -> NodeStat:
        return cls(stat.version, stat.czxid, stat.ctime / 1000.0, stat.mtime / 1000.0, stat.ephemeralOwner)


@dataclass(frozen=True)
class OnlineView:
    """online/{instance}: one live instance (info None when its data is unreadable)."""

    name: str
    info: OnlineInfo | None
    stat: NodeStat
    error: str = ""


@dataclass(frozen=True)
class HolderView:
    """A plain lock node whose data is the holder's instance name (syncMeta.lock, reconcile.lock)."""

    instance: str
    stat: NodeStat


@dataclass(frozen=True)
class AckView:
    """ddl/{table}/instance/{instance}: one instance's acknowledgement."""

    instance: str
    ack: Ack | None
    stat: NodeStat
    error: str = ""


@dataclass(frozen=True)
class RecordView:
    """ddl/{table}: a DDL record (None when unreadable) with its acks."""

    record: DdlRecord | None
    stat: NodeStat
    acks: tuple[AckView, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class LockView:
    """lock/ddl_lock/{table}: a table's cluster DDL lock (info None when unreadable)."""

    info: DdlLockInfo | None
    stat: NodeStat
    error: str = ""


@dataclass(frozen=True)
class TableDdl:
    """Everything ZooKeeper holds about one table's DDL: its record and/or its lock."""

    schema: str
    table: str
    record: RecordView | None = None
    lock: LockView | None = None

    @property
    def name(self) -> str:
        return table_node(self.schema, self.table)

    @property
    def exists(self) -> bool:
        return self.record is not None or self.lock is not None

    @property
    def phase(self) -> str:
        """The record's status, LOCKED for a lock without a record, UNREADABLE for bad data."""
        if self.record is not None:
            return self.record.record.status if self.record.record is not None else UNREADABLE
        return LOCKED

    @property
    def owner(self) -> str:
        """The originator: the record's instance, else the lock holder ('?' when unreadable)."""
        if self.record is not None and self.record.record is not None:
            return self.record.record.instance
        if self.lock is not None and self.lock.info is not None:
            return self.lock.info.instance
        return "?"

    @property
    def owners(self) -> frozenset[str]:
        """Every instance that may still be acting on this table's DDL."""
        out: set[str] = set()
        if self.record is not None and self.record.record is not None:
            rec = self.record.record
            out.add(rec.instance)
            if rec.reconciled_by:
                out.add(rec.reconciled_by)
        if self.lock is not None and self.lock.info is not None:
            out.add(self.lock.info.instance)
        return frozenset(out)

    def owner_online(self, online: Iterable[str]) -> bool:
        """Whether any instance that may still act on it is online (unreadable owners count as offline)."""
        return bool(self.owners & set(online))

    @property
    def sql(self) -> str:
        if self.record is not None and self.record.record is not None:
            return self.record.record.sql
        if self.lock is not None and self.lock.info is not None:
            return self.lock.info.sql
        return ""

    @property
    def since(self) -> float:
        """When the DDL started: the record's or lock's own timestamp, else the znode's ctime."""
        times = []
        if self.record is not None:
            rec = self.record.record
            times.append(rec.created_at if rec is not None and rec.created_at > 0 else self.record.stat.ctime)
        if self.lock is not None:
            info = self.lock.info
            times.append(info.since if info is not None and info.since > 0 else self.lock.stat.ctime)
        return min(times) if times else 0.0


@dataclass
class DeleteOutcome:
    """What a delete of a table's record and lock did."""

    record_deleted: bool = False
    lock_deleted: bool = False
    changed: bool = False     # a newer DDL replaced what was seen: left alone
    notes: list[str] = field(default_factory=list)


class ZkOps:
    """One short ZooKeeper session for an operator command; use as a context manager."""

    def __init__(self, hosts: str, paths: Paths, *, connect_timeout: float = CONNECT_TIMEOUT_S,
                 op_timeout: float = OP_TIMEOUT_S, auth: str | None = None) -> None:
        self.hosts = hosts
        self.auth = auth
        self.paths = paths
        self.connect_timeout = connect_timeout
        self.op_timeout = op_timeout
        self.client: KazooClient | None = None

    # -- session ------------------------------------------------------------------------------
    def connect(self) -> None:
        """Open the session, bounded by connect_timeout."""
        client = make_client(self.hosts, SESSION_TIMEOUT_S, self.auth)
        try:
            client.start(timeout=self.connect_timeout)
        except Exception as e:  # kazoo's timeout type depends on its handler
            self._close(client)
            raise ZkUnreachable(f"cannot reach ZooKeeper at {self.hosts} within {self.connect_timeout:g}s"
                                f" ({e.__class__.__name__})") from None
        self.client = client
        log.debug("connected", hosts=self.hosts, base=self.paths.base)

    def close(self) -> None:
        """Close the session and stop kazoo's threads."""
        if self.client is not None:
            self._close(self.client)
            self.client = None

    @staticmethod
    def _close(client: KazooClient) -> None:
        try:
            client.stop()
        finally:
            client.close()

    def __enter__(self) -> ZkOps:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- bounded primitives -------------------------------------------------------------------
    def _wait(self, async_result: Any, what: str) -> Any:
        try:
            return async_result.get(timeout=self.op_timeout)
        except KazooException:
            raise
        except Exception as e:
            if e.__class__.__name__.endswith("TimeoutError"):
                raise ZkUnreachable(f"ZooKeeper at {self.hosts} did not answer {what} within "
                                    f"{self.op_timeout:g}s") from None
            raise

    def _zk(self) -> KazooClient:
        if self.client is None:
            raise ZkUnreachable("not connected to ZooKeeper")
        return self.client

    def get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        """Data and stat of a node, None if absent."""
        try:
            return self._wait(self._zk().get_async(path), f"get {path}")
        except NoNodeError:
            return None

    def children(self, path: str) -> list[str]:
        """Sorted children of a node, [] if absent."""
        try:
            return sorted(self._wait(self._zk().get_children_async(path), f"children of {path}"))
        except NoNodeError:
            return []

    def ensure_path(self, path: str) -> None:
        """Create a persistent path (and its parents) if missing."""
        self._wait(self._zk().ensure_path_async(path), f"ensure {path}")

    def commit(self, ops: list[tuple[str, str, Any]]) -> list[Any]:
        """A multi-op of ("delete", path, version), ("check", path, version) and
        ("append", path_prefix, data) (a persistent sequential node); returns per-op results."""
        tx = self._zk().transaction()
        for kind, path, arg in ops:
            if kind == "delete":
                tx.delete(path, arg)
            elif kind == "check":
                tx.check(path, arg)
            elif kind == "append":
                tx.create(path, arg, sequence=True)
            else:
                raise ValueError(f"unknown op {kind}")
        return self._wait(tx.commit_async(), "a transaction")

    # -- cluster reads ------------------------------------------------------------------------
    def online(self) -> dict[str, OnlineView]:
        """Every online instance by name."""
        out: dict[str, OnlineView] = {}
        for name in self.children(self.paths.online):
            got = self.get(self.paths.online_instance(name))
            if got is None:
                continue
            try:
                out[name] = OnlineView(name, OnlineInfo.decode(got[0]), NodeStat.of(got[1]))
            except BadRecord as e:
                out[name] = OnlineView(name, None, NodeStat.of(got[1]), str(e))
        return out

    def _holder(self, path: str) -> HolderView | None:
        got = self.get(path)
        if got is None:
            return None
        return HolderView(got[0].decode("utf-8", errors="replace"), NodeStat.of(got[1]))

    def sync_meta_holder(self) -> HolderView | None:
        """Who holds syncMeta.lock (an instance loading metadata at start), if anyone."""
        return self._holder(self.paths.sync_meta_lock)

    def reconcile_holder(self) -> HolderView | None:
        """Which survivor is reconciling orphaned DDL records now, if any."""
        return self._holder(self.paths.reconcile_lock)

    def _record(self, schema: str, table: str) -> RecordView | None:
        got = self.get(self.paths.ddl_record(schema, table))
        if got is None:
            return None
        acks = []
        for inst in self.children(self.paths.ddl_acks(schema, table)):
            a = self.get(self.paths.ddl_ack(schema, table, inst))
            if a is None:
                continue
            try:
                acks.append(AckView(inst, Ack.decode(a[0]), NodeStat.of(a[1])))
            except BadRecord as e:
                acks.append(AckView(inst, None, NodeStat.of(a[1]), str(e)))
        try:
            return RecordView(DdlRecord.decode(got[0]), NodeStat.of(got[1]), tuple(acks))
        except BadRecord as e:
            return RecordView(None, NodeStat.of(got[1]), tuple(acks), str(e))

    def _lock(self, schema: str, table: str) -> LockView | None:
        got = self.get(self.paths.ddl_lock(schema, table))
        if got is None:
            return None
        try:
            return LockView(DdlLockInfo.decode(got[0]), NodeStat.of(got[1]))
        except BadRecord as e:
            return LockView(None, NodeStat.of(got[1]), str(e))

    def table(self, schema: str, table: str) -> TableDdl:
        """The record (with acks) and lock of one table; both None when there is no DDL."""
        return TableDdl(schema, table.lower(), self._record(schema, table), self._lock(schema, table))

    def tables(self) -> list[TableDdl]:
        """Every table with a ddl record or a ddl lock, sorted by name."""
        names = set(self.children(self.paths.ddl)) | set(self.children(self.paths.ddl_locks))
        out = []
        for name in sorted(names):
            parts = parse_table_node(name)
            if parts is None:
                log.warning("ignoring a znode that is not schema.table", name=name)
                continue
            t = self.table(*parts)
            if t.exists:
                out.append(t)
        return out

    # -- deletes --------------------------------------------------------------------------------
    def delete_table(self, seen: TableDdl, why: str = "") -> DeleteOutcome:
        """Delete the record (with its acks) and the lock exactly as seen, atomically; never a changed one.

        A deleted record also gets a ddl_history entry in the same transaction, as recovery writes
        one, so an instance that never saw the record (paused, lagging) still refreshes the table.
        """
        schema, table = seen.schema, seen.table
        out = DeleteOutcome()
        if seen.record is not None:
            self.ensure_path(self.paths.history)
        for attempt in range(DELETE_ATTEMPTS):
            now = self.table(schema, table)
            ops: list[tuple[str, str, int]] = []
            rec_ok = self._same(seen.record, now.record, "record", out)
            lock_ok = self._same(seen.lock, now.lock, "lock", out)
            if out.changed:
                return out  # the table moved on since it was judged: touch nothing
            if rec_ok and now.record is not None:
                for a in now.record.acks:
                    ops.append(("delete", self.paths.ddl_ack(schema, table, a.instance), -1))
                record_path = self.paths.ddl_record(schema, table)
                for child in self.children(record_path):   # the ack folder, the DDL's owner znode
                    if child != "instance":
                        ops.append(("delete", f"{record_path}/{child}", -1))
                if self.get(self.paths.ddl_acks(schema, table)) is not None:
                    ops.append(("delete", self.paths.ddl_acks(schema, table), -1))
                ops.append(("delete", self.paths.ddl_record(schema, table), now.record.stat.version))
                entry = self._history(now, why)
                ops.append(("append", self.paths.history_entry_prefix(entry.record_czxid), entry.encode()))
            if lock_ok and now.lock is not None:
                ops.append(("delete", self.paths.ddl_lock(schema, table), now.lock.stat.version))
            if not ops:
                return out
            results = self.commit(ops)
            if not any(isinstance(r, Exception) for r in results):
                out.record_deleted = rec_ok and now.record is not None
                out.lock_deleted = lock_ok and now.lock is not None
                log.info("ddl znodes deleted", table=seen.name, record=out.record_deleted,
                         lock=out.lock_deleted)
                return out
            log.debug("delete raced with a change, retrying", table=seen.name, attempt=attempt,
                      errors=[r.__class__.__name__ for r in results if isinstance(r, Exception)])
            out.notes.clear()
        out.notes.append(f"{seen.name} kept changing; nothing deleted after {DELETE_ATTEMPTS} attempts")
        return out

    @staticmethod
    def _history(t: TableDdl, why: str) -> HistoryEntry:
        """The ddl_history entry of a record removed by an operator (refresh from the backends)."""
        assert t.record is not None
        rec = t.record.record
        return HistoryEntry(t.schema, t.table, rec.instance if rec is not None else "?",
                            rec.sql if rec is not None else "", FAILED, t.record.stat.czxid,
                            message=f"removed by an operator: {why}" if why else "removed by an operator")

    @staticmethod
    def _same(seen: RecordView | LockView | None, now: RecordView | LockView | None, what: str,
              out: DeleteOutcome) -> bool:
        """Is the node still the one that was seen (same creation)? Notes why not."""
        if seen is None:
            if now is not None:
                out.notes.append(f"a new {what} appeared meanwhile: left alone")
                out.changed = True
            return False
        if now is None:
            out.notes.append(f"the {what} was already gone")
            return False
        if now.stat.czxid != seen.stat.czxid:
            out.notes.append(f"the {what} was replaced by a newer DDL's: left alone")
            out.changed = True
            return False
        if now.stat.version != seen.stat.version:
            out.notes.append(f"the {what} changed since it was read: left alone, run the command again")
            out.changed = True
            return False
        return True


def age(since: float, now: float | None = None) -> float:
    """Seconds since a timestamp (never negative)."""
    return max(0.0, (time.time() if now is None else now) - since)


__all__ = ["AckView", "DeleteOutcome", "HolderView", "LockView", "NodeStat", "OnlineView", "RecordView",
           "TableDdl", "ZkOps", "ZkUnreachable", "age", "LOCKED", "UNREADABLE"]
