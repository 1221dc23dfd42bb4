"""The subscriber side of cluster DDL: lock on INIT, refresh on SUCCESS/FAILED, always ack.

It is level-triggered: every pass reads the whole ddl/ folder and acts on what changed since the
last pass, so a missed or coalesced watch event (or a pause under SIGSTOP) cannot lose a step.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import structlog
from kazoo.exceptions import NoNodeError

from meta.errors import DdlInProgress

from .cluster import PassLoop
from .paths import parse_table_node
from .records import FAILED, INIT, SUCCESS, BadRecord, DdlRecord, HistoryEntry

if TYPE_CHECKING:
    from .cluster import Cluster

log = structlog.get_logger("pydble.cluster.listener")

LOCAL_LOCK_WAIT_S = 3.0   # how long INIT waits for a local DDL on the same table to give up
CATCH_UP_EVERY_S = 1.0    # ddl_history is read at most this often, unless a record vanished unseen


class DdlListener(PassLoop):
    """Follows other instances' DDL records and keeps this instance in step."""

    name = "ddl listener"

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster)
        self.handled: dict[tuple[str, int], str] = {}   # (record path, czxid) -> last status handled
        self.finished: dict[int, None] = {}             # czxids of records whose outcome we applied
        self.history_seen: str | None = None            # newest ddl_history entry looked at
        self.caught_up_at = 0.0                         # monotonic time of the last ddl_history read

    def start(self) -> None:
        """Start (or restart after a re-join) the follow loop."""
        self.history_seen = None  # a join has just reloaded everything
        super().start()

    async def pass_once(self) -> None:
        """Read every record and handle what is new."""
        c = self.cluster
        zk = c.zk
        assert zk is not None
        seen: set[tuple[str, int]] = set()
        paths = [c.paths.ddl_record(*parts) for parts in map(parse_table_node, await zk.children(
            c.paths.ddl, watch=self.wake)) if parts is not None]
        records = await asyncio.gather(*(zk.get_or_none(path, watch=self.wake) for path in paths))
        for path, got in zip(paths, records):
            if got is None:
                continue
            data, stat = got
            try:
                rec = DdlRecord.decode(data)
            except BadRecord as e:
                log.warning("unreadable ddl record", path=path, error=str(e))
                continue
            key = (path, stat.czxid)
            seen.add(key)
            if rec.instance == c.instance and not rec.reconciled_by:
                continue  # our own DDL: the originator handles it
            last = self.handled.get(key)
            if rec.status == last:
                continue
            await self.handle(rec, last)
            self.handled[key] = rec.status
            if rec.status in (SUCCESS, FAILED):
                self._finished(stat.czxid)
        gone = [k for k in self.handled if k not in seen]
        for key in gone:
            last = self.handled.pop(key)
            await self._record_gone(key[0], last)
            self._finished(key[1])
        # DDLs that began and ended while we were deaf leave no record, only a history entry; reading
        # the history on every pass would add a ZooKeeper call to each step of every DDL
        if self.history_seen is None or gone or time.monotonic() - self.caught_up_at >= CATCH_UP_EVERY_S:
            self.caught_up_at = time.monotonic()
            await self._catch_up()

    def _finished(self, czxid: int) -> None:
        self.finished[czxid] = None
        while len(self.finished) > 10_000:
            del self.finished[next(iter(self.finished))]

    async def _catch_up(self) -> None:
        """Refresh tables whose DDL finished while we were deaf (paused, lagging): ddl_history tells."""
        c = self.cluster
        zk = c.zk
        assert zk is not None
        names = sorted(await zk.children(c.paths.history))  # read on every pass; a watch would only add wake-ups
        if self.history_seen is None:
            self.history_seen = names[-1] if names else ""
            return
        for name in names:
            if name <= self.history_seen:
                continue
            got = await zk.get_or_none(f"{c.paths.history}/{name}")
            self.history_seen = name
            if got is None:
                continue
            try:
                entry = HistoryEntry.decode(got[0])
            except BadRecord:
                continue
            if entry.instance == c.instance or entry.record_czxid in self.finished:
                continue
            log.info("catching up on a ddl finished while this instance lagged", instance=c.instance,
                     table=f"{entry.schema}.{entry.table}", originator=entry.instance)
            self._finished(entry.record_czxid)
            lk = c.locks.get(entry.schema, entry.table)
            if lk is not None and lk.owner == f"instance:{entry.instance}":
                c.locks.release(entry.schema, entry.table, lk.owner)
            await c.refresh([(entry.schema, entry.table)])

    async def handle(self, rec: DdlRecord, last: str | None) -> None:
        """One step of someone else's DDL."""
        c = self.cluster
        schema, table = rec.schema, rec.table
        rlog = log.bind(instance=c.instance, table=f"{schema}.{table}", originator=rec.instance, phase=rec.status)
        owner = f"instance:{rec.instance}"
        if rec.status == INIT:
            ok, message = await self._lock(schema, table, rec.sql, owner, rec.instance)
            rlog.info("ddl INIT: table locked" if ok else "ddl INIT: could not lock", message=message or None)
            await self._ack(schema, table, INIT, ok, message)
            return
        if rec.status in (SUCCESS, FAILED):
            message = ""
            try:
                await c.refresh([(schema, table)])
            except Exception as e:  # noqa: BLE001 - reported in the ack
                message = f"refresh failed: {e}"
                rlog.warning("refresh after ddl failed", error=str(e))
            c.locks.release(schema, table, owner)
            if rec.reconciled_by:
                c.locks.release_owned_by(f"instance:{rec.instance}")
            rlog.info("ddl finished here: metadata refreshed, table unlocked", reconciled_by=rec.reconciled_by or None)
            await self._ack(schema, table, rec.status, not message, message)

    async def _lock(self, schema: str, table: str, sql: str, owner: str, instance: str) -> tuple[bool, str]:
        """Take the local lock for a peer's DDL, waiting briefly for a local DDL that is about to fail."""
        locks = self.cluster.locks
        held = locks.get(schema, table)
        if held is not None and held.owner == owner:
            return True, ""
        deadline = asyncio.get_running_loop().time() + LOCAL_LOCK_WAIT_S
        while True:
            try:
                lk = locks.acquire(schema, table, sql, owner, instance)
                lk.phase = INIT
                return True, ""
            except DdlInProgress as e:
                if asyncio.get_running_loop().time() > deadline:
                    return False, f"{self.cluster.instance}: {e.message}"
            await asyncio.sleep(0.05)

    async def _ack(self, schema: str, table: str, status: str, ok: bool, message: str) -> None:
        try:
            await self.cluster.ack(schema, table, status, ok, message)
        except NoNodeError:
            pass  # the record is already gone: nothing to acknowledge

    async def _record_gone(self, path: str, last: str) -> None:
        """A record vanished: if we never saw its outcome (paused, lagging), catch up now."""
        c = self.cluster
        parts = parse_table_node(path.rsplit("/", 1)[-1])
        if parts is None:
            return
        lk = c.locks.get(*parts)
        if lk is not None and lk.owner.startswith("instance:"):
            c.locks.release(*parts, lk.owner)
        if last not in (SUCCESS, FAILED):
            log.info("ddl record gone before its outcome reached us: refreshing", instance=c.instance,
                     table=f"{parts[0]}.{parts[1]}")
            await c.refresh([parts])
