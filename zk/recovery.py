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
from kazoo.exceptions import NodeExistsError, NoNodeError

from meta.errors import RefreshIncomplete

from . import zklog
from .port import REMOVE_ATTEMPTS
from .ddlcore import reconciler as core
from .ddlcore.reconciler import RUNNING_POLL_S, RUNNING_WAIT_S, Orphan, Running, Verdict
from .ddlcore.txn import went_through
from .loops import SAFETY_POLL_S, ZK_ERRORS, PassLoop, Waker, clock
from .paths import parse_table_node
from .reads import read
from .records import FAILED, MARKER_PREFIX, DdlLockInfo, DdlRecord, HistoryEntry

if TYPE_CHECKING:
    from .port import ClusterPort

log = structlog.get_logger("pydble.cluster.recovery")


class Recovery(PassLoop):
    """Watches online/ for departures and cleans up after them."""

    name = "recovery"

    def __init__(self, cluster: ClusterPort) -> None:
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
        """Records the core calls orphans: originator not online, unreadable, or our own left over."""
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
            got = await read(zk, path, DdlRecord)
            if got is None:
                continue
            if core.classify(got.value, online, c.instance, path in c.active_ddls) is Verdict.RECONCILE:
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
        key = (schema, table)
        got = await read(zk, c.paths.ddl_record(schema, table), DdlRecord)
        if got is None:
            return
        rec = got.value if got.value is not None else DdlRecord("?", schema, table, "UNKNOWN", "", FAILED)
        orphan = Orphan(key, rec, got.stat.czxid, got.stat.version)
        rlog = log.bind(instance=c.instance, table=f"{schema}.{table}", originator=rec.instance, phase="RECONCILE")
        lock = await read(zk, c.paths.ddl_lock(schema, table), DdlLockInfo)
        if lock is not None:
            holder = lock.value.instance if lock.value is not None else "?"
            if core.holder_alive(holder, await c.online(), c.instance):
                return  # a live instance still holds the table: not an orphan after all
        started = clock()
        if not await self._ddl_ended(rec, rlog):
            return
        try:
            await c.refresh([key])
        except RefreshIncomplete as e:   # the verdict below says UNKNOWN for the nodes missed
            rlog.warning("refresh while reconciling missed nodes", error=e.message)
        meta = c.registry.record(schema, table)
        verdict = meta.verdict().describe() if meta is not None else "no such table on any node"
        decision = orphan.decision(c.instance, verdict)
        results = await zklog.commit(zk, core.decide_txn(c.paths, orphan, decision))
        if not went_through(results):  # another reconciler (or the originator) got there first
            rlog.info("record changed or gone while reconciling; leaving it to the next pass")
            return
        outcome = await c.wait_acks(core.outcome_tally(orphan, await c.online(), c.instance), c.cc.ack_timeout_s)
        entry = HistoryEntry(schema, table, rec.instance, rec.sql, FAILED, orphan.czxid, message=decision.message)
        if not await self._remove(orphan, results[-1].version, entry, lock.stat if lock is not None else None):
            rlog.info("record changed while reconciling; leaving it to the next pass")
            return
        c.locks.release_owned_by(f"instance:{rec.instance}")
        rlog.warning("orphaned ddl reconciled", was=rec.status, sql=rec.sql, verdict=verdict,
                     laggards=list(outcome.laggards) or None, seconds=round(clock() - started, 3))

    async def _ddl_ended(self, rec: DdlRecord, rlog: structlog.stdlib.BoundLogger) -> bool:
        """Wait (bounded, re-checking) until the DDL runs on no backend any more (its marker gone from
        every processlist): reading the structure before would publish one the DDL is about to change.
        Past `[server] ddl_timeout_s` since the DDL began, its statements are stopped (KILL QUERY), as
        its originator would have. False: still running, the record is left for a later pass."""
        c = self.cluster
        if not rec.ddl_id or c.ddl_running is None:
            return True   # a record from before markers: nothing to look for
        limit = c.config.server.ddl_timeout_s
        deadline = clock() + min(c.cc.ack_timeout_s, RUNNING_WAIT_S)
        while True:
            kill = core.should_kill(rec.created_at, time.time(), limit)
            where = await c.ddl_running(MARKER_PREFIX + rec.ddl_id, kill=kill)
            step = core.running_step(where, rec.created_at, time.time(), limit, clock() > deadline)
            if step is Running.ENDED:
                return True
            if step is Running.LATER:
                rlog.info("orphaned ddl still running on the backends; reconciled once it has ended",
                          db_groups=where, killed=kill)
                return False
            await asyncio.sleep(RUNNING_POLL_S)

    async def _remove(self, orphan: Orphan, version: int, entry: HistoryEntry, lock: Any) -> bool:
        """Record (at `version`), its children (acks, owner znode), the lock if it was created with the
        record, and the history entry, in one transaction (retried while acks come and go); False
        when the record is no longer the one reconciled."""
        c = self.cluster
        zk = c.zk
        assert zk is not None
        path = c.paths.ddl_record(*orphan.key)
        for _ in range(REMOVE_ATTEMPTS):
            try:
                children = await zk.children(path)
                acks = await zk.children(c.paths.ddl_acks(*orphan.key)) if "instance" in children else []
            except NoNodeError:
                return False
            txn = core.removal_txn(c.paths, orphan, version, children, acks, lock, entry)
            results = await zklog.commit(zk, txn)
            done = core.removal_retry(results)
            if done:
                c.spawn_quietly(c.prune_history(results[-1]))
                return True
            if done is False:
                return False
        return False

    async def drain_in_flight(self, jlog: structlog.stdlib.BoundLogger) -> None:
        """At join (holding syncMeta.lock): wait for live originators' DDL, reconcile the orphans."""
        c = self.cluster
        zk = c.zk
        assert zk is not None
        deadline = clock() + 2 * c.cc.ack_timeout_s + c.cc.session_timeout_s
        wake = Waker()
        while True:
            online = await c.online(watch=wake)
            live = []
            for name in await zk.children(c.paths.ddl, watch=wake):
                parts = parse_table_node(name)
                if parts is None:
                    continue
                got = await read(zk, c.paths.ddl_record(*parts), DdlRecord, watch=wake)
                if got is None:
                    continue
                rec = got.value
                if rec is not None and rec.instance in online and rec.instance != c.instance:
                    live.append(name)
                else:
                    await self.reconcile(*parts)
            if not live:
                return
            if clock() > deadline:
                jlog.warning("ddl still in flight at join; continuing, its outcome will reach our listener",
                             records=live)
                return
            jlog.info("waiting for ddl in flight", records=live)
            await wake.wait(SAFETY_POLL_S)
