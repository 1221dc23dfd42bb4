"""When an instance dies: release its locks here, and let one elected survivor reconcile its DDL.

Reconciling an orphaned ddl record means reading the table's real structure from every node,
publishing a FAILED decision marked `reconciled_by` (subscribers refresh from the backends on it),
waiting for the acks, and deleting the record — no operator needed (DBLE asks for one).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import structlog
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from .cluster import REMOVE_ATTEMPTS, SAFETY_POLL_S, ZK_ERRORS, PassLoop, Waker, went_through
from .paths import parse_table_node
from .records import FAILED, MARKER_PREFIX, BadRecord, DdlLockInfo, DdlRecord, HistoryEntry

if TYPE_CHECKING:
    from .cluster import Cluster

log = structlog.get_logger("pydble.cluster.recovery")

RUNNING_WAIT_S = 5.0    # how long one reconcile waits for an orphaned DDL to end on the backends
RUNNING_POLL_S = 0.25   # how often it looks meanwhile


class Recovery(PassLoop):
    """Watches online/ for departures and cleans up after them."""

    name = "recovery"

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster)
        self.known_online: set[str] | None = None

    async def pass_once(self) -> None:
        """Release locks of departed instances; reconcile orphaned records if elected."""
        c = self.cluster
        online = await c.online(watch=self.wake)
        if self.known_online is not None:
            for gone in sorted(self.known_online - online):
                released = c.locks.release_owned_by(f"instance:{gone}")
                log.warning("instance went offline", instance=c.instance, gone=gone,
                            released=[f"{lk.schema}.{lk.table}" for lk in released])
        self.known_online = online
        if c.peer_key is not None:
            c.peers.prepare(online - {c.instance})   # links ready before the next DDL needs them
        if c.ready:
            orphans = await self.orphans(online)
            if orphans:
                await self.reconcile_elected(orphans)

    async def orphans(self, online: set[str]) -> list[tuple[str, str]]:
        """Records whose originator is not online (and that this instance is not running itself)."""
        c = self.cluster
        zk = c.zk
        assert zk is not None
        out = []
        # no watch on ddl/: orphans appear when online/ changes (watched), the safety pass covers the rest
        for name in await zk.children(c.paths.ddl):
            parts = parse_table_node(name)
            if parts is None:
                continue
            path = c.paths.ddl_record(*parts)
            got = await zk.get_or_none(path)
            if got is None:
                continue
            try:
                rec = DdlRecord.decode(got[0])
            except BadRecord:
                out.append(parts)  # unreadable: nobody can finish it, reconcile from the backends
                continue
            if path in c.active_ddls:
                continue
            # an own record this instance is not running is left over from an earlier DDL or reconcile
            # (even one marked reconciled_by: a reconcile cut short after its decision would stay forever)
            if rec.instance not in online or rec.instance == c.instance:
                out.append(parts)
        return out

    async def reconcile_elected(self, orphans: list[tuple[str, str]]) -> None:
        """Only the survivor holding reconcile.lock reconciles; the others let it."""
        c = self.cluster
        zk = c.zk
        assert zk is not None
        try:
            await zk.create(c.paths.reconcile_lock, c.instance.encode(), ephemeral=True)
        except NodeExistsError:
            stat = await zk.exists(c.paths.reconcile_lock)
            if stat is None or stat.ephemeralOwner != zk.session_id:
                return   # another survivor reconciles (or just did: the next pass looks again)
            # ours: a reconcile that lost ZooKeeper for a moment could not release it, and a session
            # that survived the outage keeps it; nobody else may take it, so we carry on
            log.info("reconcile.lock left by our own interrupted reconcile; going on", instance=c.instance)
        try:
            for schema, table in orphans:
                await self.reconcile(schema, table)
        finally:
            try:
                await zk.delete(c.paths.reconcile_lock)
            except ZK_ERRORS as e:
                log.warning("could not release reconcile.lock; our next pass takes it up again",
                            instance=c.instance, error=str(e))

    async def reconcile(self, schema: str, table: str) -> None:
        """Bring one orphaned DDL to an end from the backends' real state."""
        c = self.cluster
        zk = c.zk
        assert zk is not None
        path = c.paths.ddl_record(schema, table)
        got = await zk.get_or_none(path)
        if got is None:
            return
        data, stat = got
        try:
            rec = DdlRecord.decode(data)
        except BadRecord:
            rec = DdlRecord("?", schema, table, "UNKNOWN", "", FAILED)
        rlog = log.bind(instance=c.instance, table=f"{schema}.{table}", originator=rec.instance, phase="RECONCILE")
        lock = await zk.get_or_none(c.paths.ddl_lock(schema, table))
        if lock is not None:
            try:
                holder = DdlLockInfo.decode(lock[0]).instance
            except BadRecord:
                holder = "?"
            if holder in await c.online() and holder != c.instance:
                return  # a live instance still holds the table: not an orphan after all
        started = time.monotonic()
        if not await self._ddl_ended(rec, rlog):
            return
        await c.refresh([(schema, table)])
        meta = c.registry.record(schema, table)
        verdict = meta.verdict().describe() if meta is not None else "no such table on any node"
        decision = rec.with_status(FAILED, f"originator {rec.instance} went away during {rec.status}; "
                                           f"reconciled from the backends: {verdict}", c.instance)
        owner = c.paths.ddl_owner(schema, table, rec.ddl_id) if rec.ddl_id else None

        def decide(tx: Any) -> None:
            if owner is not None:
                tx.check(owner, 0)   # still that DDL's record, not a later one on the table
            tx.set_data(path, decision.encode(), stat.version)

        results = await zk.commit(decide)
        if not went_through(results):  # another reconciler (or the originator) got there first
            rlog.info("record changed or gone while reconciling; leaving it to the next pass")
            return
        online = await c.online()
        outcome = await c.wait_acks([(schema, table)], FAILED, online - {c.instance, rec.instance},
                                    c.cc.ack_timeout_s, records={(schema, table): stat.czxid})
        entry = HistoryEntry(schema, table, rec.instance, rec.sql, FAILED, stat.czxid, message=decision.message)
        if not await self._remove(schema, table, results[-1].version, entry, lock):
            rlog.info("record changed while reconciling; leaving it to the next pass")
            return
        c.locks.release_owned_by(f"instance:{rec.instance}")
        rlog.warning("orphaned ddl reconciled", was=rec.status, sql=rec.sql, verdict=verdict,
                     laggards=list(outcome.laggards) or None, seconds=round(time.monotonic() - started, 3))

    async def _ddl_ended(self, rec: DdlRecord, rlog: structlog.stdlib.BoundLogger) -> bool:
        """Wait (bounded, re-checking) until the DDL runs on no backend any more (its marker gone from
        every processlist): reading the structure before would publish one the DDL is about to change.
        Past `[server] ddl_timeout_s` since the DDL began, its statements are stopped (KILL QUERY), as
        its originator would have. False: still running, the record is left for a later pass."""
        c = self.cluster
        if not rec.ddl_id or c.ddl_running is None:
            return True   # a record from before markers: nothing to look for
        limit = c.config.server.ddl_timeout_s
        deadline = time.monotonic() + min(c.cc.ack_timeout_s, RUNNING_WAIT_S)
        while True:
            give_up = limit > 0 and time.time() - rec.created_at > limit
            where = await c.ddl_running(MARKER_PREFIX + rec.ddl_id, kill=give_up)
            if not where:
                return True
            if time.monotonic() > deadline:
                rlog.info("orphaned ddl still running on the backends; reconciled once it has ended",
                          db_groups=where, killed=give_up)
                return False
            await asyncio.sleep(RUNNING_POLL_S)

    async def _remove(self, schema: str, table: str, version: int, entry: HistoryEntry, lock: Any) -> bool:
        """Record (at `version`), its children (acks, owner znode), the lock if it was created with the
        record, and the history entry, in one transaction (retried while acks come and go); False
        when the record is no longer the one reconciled."""
        c = self.cluster
        zk = c.zk
        assert zk is not None
        path = c.paths.ddl_record(schema, table)
        lock_path = c.paths.ddl_lock(schema, table)
        for _ in range(REMOVE_ATTEMPTS):
            try:
                children = await zk.children(path)
                acks = await zk.children(c.paths.ddl_acks(schema, table)) if "instance" in children else []
            except NoNodeError:
                return False

            def build(tx: Any, children: list[str] = children, acks: list[str] = acks) -> None:
                for name in acks:
                    tx.delete(c.paths.ddl_ack(schema, table, name))
                for child in children:
                    tx.delete(f"{path}/{child}")
                tx.delete(path, version)
                if lock is not None and lock[1].czxid == entry.record_czxid:
                    tx.delete(lock_path, lock[1].version)
                tx.create(c.paths.history_entry_prefix(entry.record_czxid), entry.encode(), sequence=True)

            results = await zk.commit(build)
            if went_through(results):
                c.spawn_quietly(c.prune_history(results[-1]))
                return True
            if any(isinstance(r, BadVersionError) for r in results):
                return False
        return False

    async def drain_in_flight(self, jlog: structlog.stdlib.BoundLogger) -> None:
        """At join (holding syncMeta.lock): wait for live originators' DDL, reconcile the orphans."""
        c = self.cluster
        zk = c.zk
        assert zk is not None
        deadline = time.monotonic() + 2 * c.cc.ack_timeout_s + c.cc.session_timeout_s
        wake = Waker()
        while True:
            online = await c.online(watch=wake)
            live = []
            for name in await zk.children(c.paths.ddl, watch=wake):
                parts = parse_table_node(name)
                if parts is None:
                    continue
                got = await zk.get_or_none(c.paths.ddl_record(*parts), watch=wake)
                if got is None:
                    continue
                try:
                    rec = DdlRecord.decode(got[0])
                except BadRecord:
                    rec = None
                if rec is not None and rec.instance in online and rec.instance != c.instance:
                    live.append(name)
                else:
                    await self.reconcile(*parts)
            if not live:
                return
            if time.monotonic() > deadline:
                jlog.warning("ddl still in flight at join; continuing, its outcome will reach our listener",
                             records=live)
                return
            jlog.info("waiting for ddl in flight", records=live)
            await wake.wait(SAFETY_POLL_S)
