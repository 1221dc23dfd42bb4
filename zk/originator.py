"""The originator side of cluster DDL (DESIGN.md §6), as an async context manager.

    async with ClusterDdl(cluster, keys, sql, ddl_type) as cd:   # ddl_lock + INIT
        await cd.ensure_held()
        ...send the DDL to the backends, cd.announce()...        # peers told INIT, acks come in meanwhile
        ...refresh own metadata...
        await cd.complete(success, message, texts)               # INIT acks, then the outcome
    # record deleted, ddl_lock released

The INIT acks are collected while the backends run the DDL, and the outcome goes out only once
every instance online at INIT has acked it (or timed out). When every one of them acked INIT over
the peer channel, the outcome goes to them over the channel while one conditional transaction
decides and removes the record, lock and acks and appends ddl_history (the fast end). Otherwise
(an instance that acks through ZooKeeper only) the decision is written as SUCCESS/FAILED, acked in
ZooKeeper, and then removed (the classic end). Every write that decides checks that this instance
still holds the ZooKeeper session of its INIT write and that the lock and record are still there,
so an instance that lost its session (and so its lock) can never decide.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

import structlog
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NotEmptyError, RolledBackError

from meta.errors import DdlInProgress, ProxyError
from meta.locks import another_instance_ddl

from .cluster import REMOVE_ATTEMPTS, ZK_ERRORS, AckOutcome, drop_tasks, went_through
from .records import FAILED, INIT, MARKER_PREFIX, SUCCESS, DdlLockInfo, DdlRecord, HistoryEntry

if TYPE_CHECKING:
    from .aio import Zk
    from .cluster import Cluster

log = structlog.get_logger("pydble.cluster.ddl")

PAUSE_ENV = "PYDBLE_TEST_PAUSE"
# test hooks: each only pauses (the path taken is production's); a fast end has no SUCCESS state in
# ZooKeeper, so there "after_success" and "during_final_acks" pause once the decision is removed
PAUSE_PHASES = ("before_init", "after_init", "after_execute", "after_init_acks", "after_success",
                "during_final_acks")
PAUSE_SECONDS_ENV = "PYDBLE_TEST_PAUSE_S"   # how long the pause lasts (default 600 s)
LEASE_MAX_S = 1.0   # an answer from ZooKeeper this recent proves our session (and its locks) alive


class LostDecision(ProxyError):
    """The DDL ran but this instance could not record the outcome (session or lock lost)."""

    code, sqlstate = 4006, "HY000"


def _failures(results: list) -> list[Exception]:
    """The operations that made a transaction fail (the others only say they were rolled back)."""
    return [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]


def _publish_failed(e: Exception) -> LostDecision:
    """ZooKeeper failed us after the DDL ran: the outcome is left for reconciliation."""
    return LostDecision(f"ZooKeeper failed while publishing the outcome ({e.__class__.__name__}); "
                        f"another instance will reconcile it from the backends")


async def test_pause(phase: str) -> None:
    """Test-only: stop at a named phase (PYDBLE_TEST_PAUSE) so a test can kill -9 this process there."""
    if os.environ.get(PAUSE_ENV) == phase:
        seconds = float(os.environ.get(PAUSE_SECONDS_ENV, "600"))
        log.warning("paused for test", phase=phase, pid=os.getpid(), seconds=seconds)
        await asyncio.sleep(seconds)
        log.warning("pause over", phase=phase)


class ClusterDdl:
    """One DDL's life in ZooKeeper, seen from the instance that runs it."""

    def __init__(self, cluster: Cluster, keys: list[tuple[str, str]], sql: str, ddl_type: str,
                 marker: str = "") -> None:
        self.cluster = cluster
        self.keys = keys
        self.sql = sql
        self.ddl_type = ddl_type
        # in the DDL text on the nodes (the reconciler looks for it in their processlist); its id names
        # the record's owner znode, which every later write of this DDL checks or deletes
        self.marker = marker or f"{MARKER_PREFIX}{uuid.uuid4().hex}"
        self.locked: list[tuple[str, str]] = []
        self.records: dict[tuple[str, str], tuple[DdlRecord, int]] = {}
        self.laggards: set[str] = set()
        self.expected: set[str] = set()   # the other instances online at INIT: they ack every step
        self.czxids: dict[tuple[str, str], int] = {}   # each record's czxid (its lock's too: one transaction)
        self.ack_listing: dict[tuple[str, str], asyncio.Task] = {}   # ack names, read while peers apply
        self.init_acks: asyncio.Task | None = None   # the wait for INIT acks, running while the DDL runs
        self.init_asked: dict = {}                   # the INIT steps sent over the peer channel
        self.init_seen = False                       # the INIT acks' outcome has been taken in
        self.refusals: list[tuple[str, str]] = []    # instances that could not lock the table at INIT
        self.lease_from = 0.0          # monotonic time our INIT write was sent
        self.zk = cluster.zk           # the client (and below, the session) our INIT was written with
        self.session: int | None = None
        self.message = ""
        self.details: dict = {}   # user, nodes, phases_ms, meta_version, started_at for ddl_history
        self.status = "LOCKING"
        self.ran = False   # the DDL went to the nodes (complete() was reached)
        self.log = log.bind(instance=cluster.instance, tables=[f"{s}.{t}" for s, t in keys])

    async def __aenter__(self) -> ClusterDdl:
        try:
            await self._begin()
        except BaseException:
            await self._cleanup()
            raise
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self._cleanup()
        if self.ran and isinstance(exc, LostDecision):
            # the record may have been reconciled (or released by an operator) while the DDL still
            # changed the table: once back, make every instance reload it from the backends
            self.cluster.reload_everywhere_later(self.keys, self.sql)

    async def _begin(self) -> None:
        c = self.cluster
        c.check_ddl_allowed()
        zk = c.zk
        assert zk is not None
        try:
            await test_pause("before_init")
            c.check_ddl_allowed()
            zk = self.zk = c.zk
            assert zk is not None
            self.lease_from = time.monotonic()
            self.session = zk.session_id
            for schema, table in self.keys:
                rec = DdlRecord(c.instance, schema, table, self.ddl_type, self.sql, INIT, marker=self.marker)
                path = c.paths.ddl_record(schema, table)
                lock = DdlLockInfo(c.instance, self.sql).encode()
                ack_path, ack = c.own_ack(schema, table, INIT)

                def build(tx, path=path, rec=rec, lock=lock, ack_path=ack_path, ack=ack, schema=schema, table=table):
                    # "no instance is loading metadata" checked atomically with the write: creating and
                    # deleting syncMeta.lock fails (and so does everything) while a joiner holds it
                    tx.create(c.paths.sync_meta_lock, b"", ephemeral=True)
                    tx.delete(c.paths.sync_meta_lock)
                    tx.create(c.paths.ddl_lock(schema, table), lock, ephemeral=True)  # fails fast if held
                    tx.create(path, rec.encode())
                    tx.create(c.paths.ddl_owner(schema, table, rec.ddl_id), b"")
                    tx.create(c.paths.ddl_acks(schema, table), b"")
                    tx.create(ack_path, ack, ephemeral=True)
                    tx.set_data(ack_path, ack)  # its stat carries the transaction's zxid: the record's czxid

                results = await zk.commit(build)
                if isinstance(results[0], NodeExistsError):
                    raise DdlInProgress("Found another instance initializing metadata. Please try later")
                if isinstance(results[2], NodeExistsError) or isinstance(results[3], NodeExistsError):
                    raise another_instance_ddl(schema, table)
                self._check_tx(results, f"write the INIT record of {schema}.{table}")
                self.locked.append((schema, table))
                self.records[(schema, table)] = (rec, 0)
                self.czxids[(schema, table)] = results[-1].czxid
                c.active_ddls.add(path)
            self.status = INIT
        except ProxyError:
            raise
        except ZK_ERRORS as e:
            raise DdlInProgress(f"ZooKeeper is unreachable ({e.__class__.__name__}): DDL is refused") from None
        await test_pause("after_init")

    def announce(self) -> None:
        """Hand INIT to the other instances (called once the DDL is on its way to the nodes: an INIT
        ack never decides whether it runs): those we have links to at once, the rest once `online` is
        read; their acks are collected in the background (init_acks). Idempotent."""
        if self.init_acks is not None or self.status != INIT:
            return
        c = self.cluster
        steps = {key: (rec, self.czxids[key]) for key, (rec, _) in self.records.items()}
        self.init_asked = c.ask_peers(self.keys, steps, c.peers.live() - {c.instance})
        self.init_acks = asyncio.get_running_loop().create_task(self._collect_init_acks(steps))

    async def _collect_init_acks(self, steps: dict) -> AckOutcome:
        c = self.cluster
        # read after the INIT write: an instance that joins later drains this record before it goes
        # online, so this is exactly who must ack
        self.expected = await c.online_now() - {c.instance}
        self.init_asked.update(c.ask_peers(self.keys, steps, self.expected - {inst for _, inst in self.init_asked}))
        return await c.wait_acks(self.keys, INIT, self.expected, c.cc.ack_timeout_s, peer=self.init_asked,
                                 records=self.czxids)

    async def _init_outcome(self) -> AckOutcome:
        """The INIT acks (bounded by ack_timeout_s from the INIT write); logged the first time."""
        assert self.init_acks is not None
        outcome = await self.init_acks
        if not self.init_seen:
            self.init_seen = True
            self.laggards |= set(outcome.laggards)
            self.refusals = list(outcome.refusals)
            if outcome.laggards:
                self.log.warning("instances did not ack INIT in time; going on without them",
                                 laggards=list(outcome.laggards))
            if outcome.refusals:
                self.log.warning("instances could not lock the table at INIT", refusals=self.refusals)
            self.log.debug("ddl INIT acknowledged", phase=INIT)
        return outcome

    async def ensure_held(self) -> None:
        """Fencing before the backends are touched: our session is live and still owns every lock.

        An originator frozen (SIGSTOP, GC, swap) past its session timeout has lost its locks and a
        survivor may have reconciled its record; it must not run the DDL afterwards."""
        c = self.cluster
        zk = c.zk
        if zk is None or not zk.connected:
            raise LostDecision("this instance lost its ZooKeeper connection before running the DDL; "
                               "the DDL was not run")
        # a lease: ZooKeeper expires a session only after the timeout it granted (which may be shorter
        # than the configured one) without hearing from it, and it heard our INIT write (sent at
        # lease_from) on this very session
        lease = min(zk.session_timeout_s / 3, LEASE_MAX_S)
        if zk is self.zk and zk.session_id == self.session and time.monotonic() - self.lease_from < lease:
            return
        try:
            stats = await asyncio.gather(*(zk.exists(c.paths.ddl_lock(*key)) for key in self.locked))
        except ZK_ERRORS as e:
            raise LostDecision(f"cannot confirm the DDL lock ({e.__class__.__name__}); the DDL was not run") from None
        sid = zk.session_id
        if any(st is None or st.ephemeralOwner != sid for st in stats):
            raise LostDecision("this instance lost its ZooKeeper session and DDL lock before running the DDL; "
                               "the DDL was not run")

    def _check_tx(self, results: list, what: str) -> None:
        if not went_through(results):
            failed = _failures(results)
            why = failed[0].__class__.__name__ if failed else "RolledBackError"
            raise LostDecision(f"could not {what}: {why} (this instance lost its ZooKeeper session or DDL lock)")

    async def _own_session(self, status: str) -> Zk:
        """The ZooKeeper client of our INIT write, if its session is still ours and connected: a
        decision written on any other session could land on a record that is no longer ours. While
        that session moves to another member of the ensemble, wait for it (bounded by its timeout)."""
        zk = self.cluster.zk
        if zk is not None and zk is self.zk and zk.session_id == self.session and not zk.connected:
            await zk.wait_connected(zk.session_timeout_s)
        if zk is None or zk is not self.zk or not zk.connected or zk.session_id != self.session:
            raise LostDecision(f"this instance lost the ZooKeeper session it started the DDL with: the outcome "
                               f"({status}) could not be published; another instance will reconcile it from the "
                               f"backends")
        return zk

    async def _decide(self, status: str, message: str) -> None:
        """Conditionally write SUCCESS/FAILED: only while our lock and the record's version are ours."""
        c = self.cluster
        for key, (rec, version) in list(self.records.items()):
            zk = await self._own_session(status)
            new = rec.with_status(status, message)
            path = c.paths.ddl_record(*key)
            lock_path = c.paths.ddl_lock(*key)
            ack_path, own_ack = c.own_ack(key[0], key[1], status, record=self.czxids[key])
            owner = c.paths.ddl_owner(key[0], key[1], rec.ddl_id)

            def build(tx, path=path, new=new, version=version, lock_path=lock_path, own_ack=own_ack,
                      ack_path=ack_path, owner=owner):
                tx.check(lock_path, 0)
                tx.check(owner, 0)   # the record is still this DDL's (version 0 alone says any new one)
                tx.set_data(path, new.encode(), version)
                tx.set_data(ack_path, own_ack)  # our own ack (created with INIT) in the same write

            results = await zk.commit(build)
            self._check_tx(results, f"publish {status} for {key[0]}.{key[1]}")
            self.records[key] = (new, version + 1)
        self.status = status

    async def complete(self, success: bool, message: str = "", texts: dict | None = None) -> None:
        """Publish the outcome once the INIT acks are in, and wait (bounded) until every instance
        online at INIT has applied it.

        The peers hear the outcome straight away, with `texts` (the CREATE texts this instance read
        back from the nodes: node -> table -> text or None) so they need not ask the backends."""
        c = self.cluster
        self.ran = True
        await test_pause("after_execute")
        status = SUCCESS if success else FAILED
        self.announce()   # when no node was reached, nobody has been told yet
        try:
            init = await self._init_outcome()
        except ZK_ERRORS as e:
            raise LostDecision(f"ZooKeeper failed while the INIT acks were awaited ({e.__class__.__name__}); "
                               f"another instance will reconcile the DDL from the backends") from None
        await test_pause("after_init_acks")
        # those online at INIT (no instance can join while a record is in flight: a join drains
        # first) but not the INIT laggards, which never locked and will catch up from ddl_history:
        # a stuck instance costs the client one ack_timeout_s, not two; waits drop any that went
        # offline since
        targets = self.expected - self.laggards
        steps = {key: (rec.with_status(status, message), self.czxids[key]) for key, (rec, _) in self.records.items()}
        if c.cc.peer_port >= 0 and targets <= init.by_peer:
            outcome = await self._fast_end(status, message, steps, targets, texts)
        else:
            outcome = await self._classic_end(status, message, steps, targets, texts)
        self.laggards |= set(outcome.laggards)
        if outcome.laggards:
            self.log.warning("instances did not ack the outcome in time", laggards=list(outcome.laggards),
                             phase=status)
        self.message = message

    async def _fast_end(self, status: str, message: str, steps: dict, targets: set[str],
                        texts: dict | None) -> AckOutcome:
        """Every target took INIT over the peer channel: hand them the outcome there while one
        transaction per table decides and removes the record (no SUCCESS/FAILED state in ZooKeeper).
        The transactions go on the wire first: ZooKeeper's answer is the longer wait."""
        c = self.cluster
        try:
            zk = await self._own_session(status)
            first = {key: self._send_remove(key, steps[key][0], [c.instance], self.records[key][1], zk)
                     for key in self.records}
        except ZK_ERRORS as e:
            raise _publish_failed(e) from None
        sent = c.ask_peers(list(self.records), steps, targets, texts, final=True)
        delivery = asyncio.get_running_loop().create_task(c.deliver(steps, texts, sent, c.cc.ack_timeout_s))
        try:
            for key, answer in first.items():
                await self._finish(key, steps[key][0], answer)
            self.status = status
            await test_pause("after_success")
            await test_pause("during_final_acks")
            return await delivery
        except ZK_ERRORS as e:
            raise _publish_failed(e) from None
        finally:
            if not delivery.done():
                delivery.cancel()
            for answer in first.values():
                if not answer.done():
                    answer.cancel()

    async def _finish(self, key: tuple[str, str], decided: DdlRecord, answer: asyncio.Future) -> None:
        """The answer to one table's removal transaction (_send_remove); if it failed only because
        peers' ZooKeeper acks (written only when the DDL outlasted their reply delay) are in the ack
        folder, again with their names (bounded)."""
        c = self.cluster
        results = await answer
        for _ in range(REMOVE_ATTEMPTS):
            failed = _failures(results)
            if went_through(results) or not failed or not isinstance(failed[0], NotEmptyError):
                break
            zk = await self._own_session(decided.status)
            names = await zk.children(c.paths.ddl_acks(*key))
            if c.instance not in names:
                break
            results = await self._send_remove(key, decided, names, self.records[key][1],
                                              await self._own_session(decided.status))
        self._check_tx(results, f"publish {decided.status} for {key[0]}.{key[1]}")
        self._removed(key, results)
        self.records.pop(key)
        self.locked.remove(key)
        c.active_ddls.discard(c.paths.ddl_record(*key))

    async def _classic_end(self, status: str, message: str, steps: dict, targets: set[str],
                           texts: dict | None) -> AckOutcome:
        """An instance acks through ZooKeeper only: SUCCESS/FAILED is written and acked there (the
        peers hear it over the channel too); __aexit__ removes the record afterwards."""
        c = self.cluster
        peer = c.ask_peers(list(self.records), steps, targets, texts)
        zk = c.zk
        if zk is not None:
            loop = asyncio.get_running_loop()
            self.ack_listing = {key: loop.create_task(zk.children(c.paths.ddl_acks(*key))) for key in self.records}
        try:
            await self._decide(status, message)
            await test_pause("after_success")
            outcome = await c.wait_acks(list(self.records), status, targets, c.cc.ack_timeout_s, peer=peer,
                                        records=self.czxids)
        except ZK_ERRORS as e:
            raise _publish_failed(e) from None
        finally:
            drop_tasks(peer)
        await test_pause("during_final_acks")
        return outcome

    async def _cleanup(self) -> None:
        """Delete our records and locks (only if still ours) with the history entry, in one transaction
        per table; never raises."""
        c = self.cluster
        zk = c.zk
        if zk is None:
            return
        for key in list(self.records):
            path = c.paths.ddl_record(*key)
            try:
                if await self._remove_decided(key):
                    self.locked.remove(key)
                    c.active_ddls.discard(path)
                    continue
                lock, acks = await asyncio.gather(zk.exists(c.paths.ddl_lock(*key)),
                                                  zk.children(c.paths.ddl_acks(*key)))
                if self._ours(key, lock):
                    if self.status == INIT:
                        await self._decide(FAILED, "the originator gave up before running the DDL")
                    await self._remove(key, self.records[key][0].with_status(self.status, self.message), acks)
                    self.locked.remove(key)
            except (ProxyError, *ZK_ERRORS) as e:
                self.log.warning("could not clean up ddl record; reconciliation will", error=str(e))
            c.active_ddls.discard(path)
        for key in self.locked:
            try:
                lock = await zk.exists(c.paths.ddl_lock(*key))
                if self._ours(key, lock):
                    await zk.delete(c.paths.ddl_lock(*key), lock.version)
            except ZK_ERRORS:
                pass
        self.locked = []
        self.records = {}
        drop_tasks(self.ack_listing)
        self.ack_listing = {}
        if self.init_acks is not None:
            drop_tasks({0: self.init_acks})
        drop_tasks(self.init_asked)

    def _ours(self, key: tuple[str, str], lock: Any) -> bool:
        """A lock's stat is this DDL's lock: our session's, and created with our record (same czxid),
        not a later DDL's on the table (ours released by an operator, then taken again)."""
        zk = self.cluster.zk
        return (lock is not None and zk is not None and lock.ephemeralOwner == zk.session_id
                and lock.czxid == self.czxids.get(key))

    async def _remove_decided(self, key: tuple[str, str]) -> bool:
        """The common end of a DDL: decided, the ack names read while the peers applied it, and one
        transaction that removes it all. Deleting our own ack in it proves the record is still ours;
        False (nothing changed) sends the caller down the careful path."""
        listing = self.ack_listing.pop(key, None)
        if self.status not in (SUCCESS, FAILED) or listing is None:
            if listing is not None:
                listing.cancel()
            return False
        try:
            acks = await listing
        except (asyncio.CancelledError, *ZK_ERRORS):
            return False
        if self.cluster.instance not in acks:
            return False
        results = await self._remove_tx(key, self.records[key][0].with_status(self.status, self.message), acks)
        return went_through(results)

    def _history_entry(self, key: tuple[str, str], rec: DdlRecord) -> HistoryEntry:
        d = self.details
        return HistoryEntry(key[0], key[1], self.cluster.instance, self.sql, rec.status, self.czxids.get(key, 0),
                            message=rec.message, user=d.get("user", ""), nodes=tuple(d.get("nodes", ())),
                            phases_ms=d.get("phases_ms", {}), meta_version=d.get("meta_version", 0),
                            started_at=d.get("started_at", 0.0))

    def _removal(self, key: tuple[str, str], rec: DdlRecord, acks: list[str],
                 version: int = -1) -> Callable[[Any], None]:
        """The transaction that removes the record (at `version`, -1 any), its acks and the lock and
        appends a ddl_history entry (a failure changes nothing)."""
        c = self.cluster
        entry = self._history_entry(key, rec)

        def build(tx: Any) -> None:
            for name in acks:
                tx.delete(c.paths.ddl_ack(key[0], key[1], name))
            tx.delete(c.paths.ddl_acks(*key))
            tx.delete(c.paths.ddl_owner(key[0], key[1], rec.ddl_id))   # fails unless the record is ours
            tx.delete(c.paths.ddl_record(*key), version)
            tx.delete(c.paths.ddl_lock(*key))
            tx.create(c.paths.history_entry_prefix(entry.record_czxid), entry.encode(), sequence=True)
        return build

    def _send_remove(self, key: tuple[str, str], rec: DdlRecord, acks: list[str], version: int,
                     zk: Zk) -> asyncio.Future:
        """_removal written now, on `zk` (ConnectionLoss if it is not connected); the future gives its results."""
        return zk.commit_now(self._removal(key, rec, acks, version))

    def _removed(self, key: tuple[str, str], results: list) -> None:
        """After a removal transaction that went through: our catch-up skips it, old history goes."""
        if went_through(results):
            c = self.cluster
            c.listener.ran_here(self.czxids.get(key, 0))
            c.spawn_quietly(c.prune_history(results[-1]))

    async def _remove_tx(self, key: tuple[str, str], rec: DdlRecord, acks: list[str]) -> list:
        """_removal, on whatever session we have (the caller checked the lock is ours), waiting
        (bounded) for a connection that is momentarily down."""
        zk = self.cluster.zk
        if zk is None:
            raise ConnectionLoss("no ZooKeeper client")
        results = await zk.commit(self._removal(key, rec, acks))
        self._removed(key, results)
        return results

    async def _remove(self, key: tuple[str, str], rec: DdlRecord, acks: list[str]) -> None:
        """Record, acks, lock and a ddl_history entry, all in one transaction, conditional on the
        record being ours (its owner znode); an ack that came or went meanwhile: again, acks re-read."""
        c = self.cluster
        zk = c.zk
        assert zk is not None
        for _ in range(REMOVE_ATTEMPTS):
            results = await self._remove_tx(key, rec, acks)
            if went_through(results):
                return
            if not await zk.exists(c.paths.ddl_owner(key[0], key[1], rec.ddl_id)):
                return   # not ours any more (reconciled, or released by an operator): touch nothing
            acks = await zk.children(c.paths.ddl_acks(*key))
        raise LostDecision(f"could not remove the ddl record of {key[0]}.{key[1]} (acks kept changing)")

    def warning(self) -> str | None:
        """The note for the client when some instance lagged or could not lock the table at INIT."""
        notes = []
        if self.laggards:
            notes.append(f"instance(s) {', '.join(sorted(self.laggards))} did not acknowledge within "
                         f"{self.cluster.cc.ack_timeout_s:g}s; they will catch up when they recover")
        if self.refusals:
            who = "; ".join(f"{inst}: {msg}" for inst, msg in self.refusals)
            notes.append(f"instance(s) could not lock the table while the DDL ran ({who}); "
                         f"they refreshed its structure afterwards")
        return "; ".join(notes) or None


__all__ = ["ClusterDdl", "LostDecision", "PAUSE_PHASES"]
