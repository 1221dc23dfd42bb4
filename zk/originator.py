"""The originator side of cluster DDL (DESIGN.md §6), as an async context manager over the core.

    async with ClusterDdl(cluster, keys, sql, ddl_type) as cd:   # ddl_lock + INIT
        await cd.ensure_held()
        ...send the DDL to the backends, cd.announce()...        # peers told INIT, acks come in meanwhile
        ...refresh own metadata...
        await cd.complete(success, message, texts)               # INIT acks, then the outcome
    # record deleted, ddl_lock released

Every decision is the core's (zk/ddlcore/originator.py: which transaction each step writes, whether the
lock is still ours, which ack counts, how the outcome is published, what cleanup may touch); this module
runs its transactions on ZooKeeper, talks to the peers and feeds the results back.

The INIT acks are collected while the backends run the DDL, and the outcome goes out only once
every instance online at INIT has acked it (or timed out). When every one of them acked INIT over
the peer channel, the outcome goes to them over the channel while one conditional transaction
decides and removes the record, lock and acks and appends ddl_history (the fast end). Otherwise
(an instance that acks through ZooKeeper only) the decision is written as SUCCESS/FAILED, acked in
ZooKeeper, and then removed (the classic end).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING

import structlog
from kazoo.exceptions import ConnectionLoss

from meta.errors import DdlInProgress, ProxyError
from meta.locks import another_instance_ddl

from . import zklog
from .port import REMOVE_ATTEMPTS
from .ddlcore.acks import AckOutcome
from .ddlcore.originator import Cleanup, EndMode, Fence, InitResult, OriginatorCore, Phase, Removal
from .ddlcore.txn import Txn, failures, went_through
from .loops import ZK_ERRORS, clock, drop_tasks
from .records import FAILED, INIT, MARKER_PREFIX, SUCCESS

if TYPE_CHECKING:
    from .aio import Zk
    from .cluster import Cluster

log = structlog.get_logger("pydble.cluster.ddl")

# the phases a test may pause at (cli/pause.py); a fast end has no SUCCESS state in ZooKeeper, so there
# "after_success" and "during_final_acks" pause once the decision is removed
FENCE_READS = 3   # fencing reads of the locks tried while each answer comes too late to prove them ours
PAUSE_PHASES = ("before_init", "after_init", "after_execute", "after_init_acks", "after_success",
                "during_final_acks")


class LostDecision(ProxyError):
    """The DDL ran but this instance could not record the outcome (session or lock lost)."""

    code, sqlstate = 4006, "HY000"


def _publish_failed(e: Exception) -> LostDecision:
    """ZooKeeper failed us after the DDL ran: the outcome is left for reconciliation."""
    return LostDecision(f"ZooKeeper failed while publishing the outcome ({e.__class__.__name__}); "
                        f"another instance will reconcile it from the backends")


def _check_tx(results: list, what: str) -> None:
    if not went_through(results):
        failed = failures(results)
        why = failed[0].value if failed else "RolledBackError"
        raise LostDecision(f"could not {what}: {why} (this instance lost its ZooKeeper session or DDL lock)")


class ClusterDdl:
    """One DDL's life in ZooKeeper, seen from the instance that runs it."""

    def __init__(self, cluster: Cluster, keys: list[tuple[str, str]], sql: str, ddl_type: str,
                 marker: str = "") -> None:
        self.cluster = cluster
        self.keys = keys
        self.sql = sql
        # in the DDL text on the nodes (the reconciler looks for it in their processlist); its id names
        # the record's owner znode, which every later write of this DDL checks or deletes
        self.marker = marker or f"{MARKER_PREFIX}{uuid.uuid4().hex}"
        self.core = OriginatorCore(cluster.paths, cluster.instance, list(keys), sql, ddl_type, self.marker,
                                   created_at=time.time())
        self.ack_listing: dict[tuple[str, str], asyncio.Task] = {}   # ack names, read while peers apply
        self.init_acks: asyncio.Task | None = None   # the wait for INIT acks, running while the DDL runs
        self.init_asked: dict = {}                   # the INIT steps sent over the peer channel
        self.init_seen = False                       # the INIT acks' outcome has been taken in
        self.zk = cluster.zk           # the client (and below, the session) our INIT was written with
        self.details: dict = {}   # user, nodes, phases_ms, meta_version, started_at for ddl_history
        self.log = log.bind(instance=cluster.instance, tables=[f"{s}.{t}" for s, t in keys])

    # what proxy/ddl/ddl.py and the manager read
    @property
    def laggards(self) -> set[str]:
        return self.core.laggards

    @property
    def refusals(self) -> list[tuple[str, str]]:
        return self.core.refusals

    @property
    def status(self) -> str:
        return self.core.status

    @property
    def ran(self) -> bool:
        return self.core.ran

    async def __aenter__(self) -> ClusterDdl:
        try:
            await self._begin()
        except BaseException:
            await self._cleanup()
            raise
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if isinstance(exc, ProxyError) and not isinstance(exc, LostDecision) and self.core.refused_before_running():
            await self._tell_refusal(exc.message)
        await self._cleanup()
        if self.core.ran and isinstance(exc, LostDecision):
            # the record may have been reconciled (or released by an operator) while the DDL still
            # changed the table: once back, make every instance reload it from the backends
            self.cluster.reload_everywhere_later(self.keys, self.sql)

    async def _tell_refusal(self, message: str) -> None:
        """A DDL refused under its lock before any node ran it ends as a failed one does: the peers
        that locked the table at INIT let it go before the client hears the refusal, so the client's
        next DDL on the table, on any instance, does not meet a lock left behind (4006)."""
        try:
            await self.complete(False, message)
        except (ProxyError, *ZK_ERRORS) as e:
            self.log.warning("could not hand the refusal to the peers; the clean-up decides it", error=str(e))

    async def _begin(self) -> None:
        c = self.cluster
        c.check_ddl_allowed()
        core = self.core
        try:
            await c.paused("before_init")
            c.check_ddl_allowed()
            zk = self.zk = c.zk
            assert zk is not None
            while (key := core.next_to_lock()) is not None:
                txn = core.init_txn(key, zk.session_id, clock(), c.registry.version)
                result = core.on_init(key, await zklog.commit(zk, txn))
                if result is InitResult.SYNC_META_HELD:
                    raise DdlInProgress("Found another instance initializing metadata. Please try later")
                if result is InitResult.TABLE_BUSY:
                    raise another_instance_ddl(*key)
                if result is not InitResult.LOCKED:
                    raise LostDecision(f"could not write the INIT record of {key[0]}.{key[1]} (this instance "
                                       f"lost its ZooKeeper session)")
                c.active_ddls.add(c.paths.ddl_record(*key))
        except ProxyError:
            raise
        except ZK_ERRORS as e:
            raise DdlInProgress(f"ZooKeeper is unreachable ({e.__class__.__name__}): DDL is refused") from None
        await c.paused("after_init")

    def announce(self) -> None:
        """Hand INIT to the other instances (called once the DDL is on its way to the nodes: an INIT
        ack never decides whether it runs): those we have links to at once, the rest once `online` is
        read; their acks are collected in the background (init_acks). Idempotent."""
        if self.init_acks is not None or self.core.phase not in (Phase.INIT, Phase.RUNNING):
            return
        c = self.cluster
        steps = self.core.init_steps()
        self.init_asked = c.ask_peers(self.keys, steps, c.peers.live() - {c.instance})
        self.init_acks = asyncio.get_running_loop().create_task(self._collect_init_acks(steps))

    async def _collect_init_acks(self, steps: dict) -> AckOutcome:
        c = self.cluster
        # read after the INIT write: an instance that joins later drains this record before it goes
        # online, so this is exactly who must ack
        tally = self.core.init_tally(await c.online_now())
        asked = {inst for _, inst in self.init_asked}
        self.init_asked.update(c.ask_peers(self.keys, steps, set(tally.expected) - asked))
        return await c.wait_acks(tally, c.cc.ack_timeout_s, peer=self.init_asked)

    async def _init_outcome(self) -> AckOutcome:
        """The INIT acks (bounded by ack_timeout_s from the INIT write); logged the first time."""
        assert self.init_acks is not None
        outcome = await self.init_acks
        if not self.init_seen:
            self.init_seen = True
            self.core.on_init_acks(outcome)
            if outcome.laggards:
                self.log.warning("instances did not ack INIT in time; going on without them",
                                 laggards=list(outcome.laggards))
            if outcome.refusals:
                self.log.warning("instances could not lock the table at INIT", refusals=self.core.refusals)
            self.log.debug("ddl INIT acknowledged", phase=INIT)
        return outcome

    async def ensure_held(self) -> None:
        """Fencing before the backends are touched: our session is live and still owns every lock.

        An originator frozen (SIGSTOP, GC, swap) past its session timeout has lost its locks and a
        survivor may have reconciled its record; it must not run the DDL afterwards."""
        c = self.cluster
        core = self.core
        zk = c.zk
        if zk is None or not zk.connected:
            core.lost()
            raise LostDecision("this instance lost its ZooKeeper connection before running the DDL; "
                               "the DDL was not run")
        if not (zk is self.zk and core.lease_holds(zk.session_id, clock(), zk.session_timeout_s)):
            for _ in range(FENCE_READS):
                sent = clock()
                try:
                    stats = await asyncio.gather(*(zk.exists(c.paths.ddl_lock(*key)) for key in core.locked))
                except ZK_ERRORS as e:
                    raise LostDecision(f"cannot confirm the DDL lock ({e.__class__.__name__}); the DDL was not "
                                       f"run") from None
                fence = core.fence(zk.session_id, dict(zip(core.locked, stats)), sent, clock(),
                                   zk.session_timeout_s)
                if fence is Fence.RUN:
                    break
                if fence is Fence.LOST:
                    raise LostDecision("this instance lost its ZooKeeper session and DDL lock before running the "
                                       "DDL; the DDL was not run")
            else:
                raise LostDecision("ZooKeeper's answers came too late to prove this instance still holds the DDL "
                                   "lock; the DDL was not run")
        core.start_running()

    async def _own_session(self, status: str) -> Zk:
        """The ZooKeeper client of our INIT write, if its session is still ours and connected: a
        decision written on any other session could land on a record that is no longer ours. While
        that session moves to another member of the ensemble, wait for it (bounded by its timeout)."""
        zk = self.cluster.zk
        if zk is not None and zk is self.zk and zk.session_id == self.core.session and not zk.connected:
            await zk.wait_connected(zk.session_timeout_s)
        if zk is None or zk is not self.zk or not zk.connected or zk.session_id != self.core.session:
            self.core.lost()
            raise LostDecision(f"this instance lost the ZooKeeper session it started the DDL with: the outcome "
                               f"({status}) could not be published; another instance will reconcile it from the "
                               f"backends")
        return zk

    async def _decide(self, status: str, message: str) -> None:
        """Conditionally write SUCCESS/FAILED: only while our lock and the record are this DDL's."""
        core = self.core
        for key in list(core.locked):
            zk = await self._own_session(status)
            txn = core.decide_txn(key, status, message, self.cluster.registry.version)
            results = await zklog.commit(zk, txn)
            if not core.on_decided(key, status, message, results):
                _check_tx(results, f"publish {status} for {key[0]}.{key[1]}")

    async def complete(self, success: bool, message: str = "", texts: dict | None = None) -> None:
        """Publish the outcome once the INIT acks are in, and wait (bounded) until every instance
        online at INIT has applied it.

        The peers hear the outcome straight away, with `texts` (the CREATE texts this instance read
        back from the nodes: node -> table -> text or None) so they need not ask the backends."""
        c = self.cluster
        core = self.core
        await c.paused("after_execute")
        status = SUCCESS if success else FAILED
        self.announce()   # when no node was reached, nobody has been told yet
        try:
            init = await self._init_outcome()
        except ZK_ERRORS as e:
            raise LostDecision(f"ZooKeeper failed while the INIT acks were awaited ({e.__class__.__name__}); "
                               f"another instance will reconcile the DDL from the backends") from None
        await c.paused("after_init_acks")
        # those online at INIT (no instance can join while a record is in flight: a join drains
        # first) but not the INIT laggards, which never locked and will catch up from ddl_history:
        # a stuck instance costs the client one ack_timeout_s, not two; waits drop any that went
        # offline since
        steps = core.outcome_steps(status, message)
        if core.end_mode(c.cc.peer_port >= 0, init) is EndMode.FAST:
            outcome = await self._fast_end(status, message, steps, set(core.targets()), texts)
        else:
            outcome = await self._classic_end(status, message, steps, set(core.targets()), texts)
        core.on_outcome_acks(outcome)
        if outcome.refusals:
            self.log.warning("instances could not apply the outcome", refusals=list(outcome.refusals), phase=status)
        if outcome.laggards:
            self.log.warning("instances did not ack the outcome in time", laggards=list(outcome.laggards),
                             phase=status)
        core.message = message

    async def _fast_end(self, status: str, message: str, steps: dict, targets: set[str],
                        texts: dict | None) -> AckOutcome:
        """Every target took INIT over the peer channel: hand them the outcome there while one
        transaction per table decides and removes the record (no SUCCESS/FAILED state in ZooKeeper).
        The transactions go on the wire first: ZooKeeper's answer is the longer wait."""
        c = self.cluster
        core = self.core
        keys = list(core.locked)
        try:
            zk = await self._own_session(status)
            first = {key: zklog.commit_now(zk, self._removal(key, [c.instance], status, message,
                                                             core.versions[key])) for key in keys}
        except ZK_ERRORS as e:
            raise _publish_failed(e) from None
        sent = c.ask_peers(keys, steps, targets, texts, final=True)
        delivery = asyncio.get_running_loop().create_task(c.deliver(steps, texts, sent, c.cc.ack_timeout_s))
        try:
            for key, answer in first.items():
                await self._finish(key, status, message, answer)
            await c.paused("after_success")
            await c.paused("during_final_acks")
            return await delivery
        except ZK_ERRORS as e:
            raise _publish_failed(e) from None
        finally:
            if not delivery.done():
                delivery.cancel()
            for answer in first.values():
                if not answer.done():
                    answer.cancel()

    async def _finish(self, key: tuple[str, str], status: str, message: str, answer: asyncio.Future) -> None:
        """The answer to one table's deciding removal; if it failed only because peers' ZooKeeper acks
        (written only when the DDL outlasted their reply delay) are in the ack folder, again with their
        names (bounded)."""
        c = self.cluster
        core = self.core
        results = await answer
        version = core.versions[key]
        for _ in range(REMOVE_ATTEMPTS):
            if went_through(results):
                break
            zk = await self._own_session(status)
            names = await zk.children(c.paths.ddl_acks(*key))
            if core.on_removed(key, results, acks_now=names, status=status, message=message) is not Removal.RETRY:
                _check_tx(results, f"publish {status} for {key[0]}.{key[1]}")
            results = await zklog.commit(await self._own_session(status),
                                         self._removal(key, names, status, message, version))
        if core.on_removed(key, results, status=status, message=message) is not Removal.DONE:
            _check_tx(results, f"publish {status} for {key[0]}.{key[1]}")
        self._removed(key, results)
        c.active_ddls.discard(c.paths.ddl_record(*key))

    async def _classic_end(self, status: str, message: str, steps: dict, targets: set[str],
                           texts: dict | None) -> AckOutcome:
        """An instance acks through ZooKeeper only: SUCCESS/FAILED is written and acked there (the
        peers hear it over the channel too); __aexit__ removes the record afterwards."""
        c = self.cluster
        keys = list(self.core.locked)
        peer = c.ask_peers(keys, steps, targets, texts)
        zk = c.zk
        if zk is not None:
            loop = asyncio.get_running_loop()
            self.ack_listing = {key: loop.create_task(zk.children(c.paths.ddl_acks(*key))) for key in keys}
        try:
            await self._decide(status, message)
            await c.paused("after_success")
            outcome = await c.wait_acks(self.core.outcome_tally(status), c.cc.ack_timeout_s, peer=peer)
        except ZK_ERRORS as e:
            raise _publish_failed(e) from None
        finally:
            drop_tasks(peer)
        await c.paused("during_final_acks")
        return outcome

    async def _cleanup(self) -> None:
        """Remove our records and locks (only if still ours) with the history entry, in one transaction
        per table; never raises."""
        c = self.cluster
        core = self.core
        zk = c.zk
        if zk is None:
            return
        for key in list(core.locked):
            path = c.paths.ddl_record(*key)
            try:
                if await self._remove_decided(key):
                    c.active_ddls.discard(path)
                    continue
                lock, acks = await asyncio.gather(zk.exists(c.paths.ddl_lock(*key)),
                                                  zk.children(c.paths.ddl_acks(*key)))
                action = core.cleanup(key, lock, zk.session_id)
                if action is Cleanup.DECIDE_FAILED_THEN_REMOVE:
                    await self._decide(FAILED, "the originator gave up before running the DDL")
                if action is not Cleanup.LEAVE:
                    await self._remove(key, acks)
            except (ProxyError, *ZK_ERRORS) as e:
                self.log.warning("could not clean up ddl record; reconciliation will", error=str(e))
            c.active_ddls.discard(path)
        for key in list(core.locked):   # a record we could not remove: at least the lock, if still ours
            try:
                lock, owner = await asyncio.gather(zk.exists(c.paths.ddl_lock(*key)),
                                                   zk.exists(core.owner_path(key)))
                if core.cleanup(key, lock, zk.session_id, owner is not None) is Cleanup.DELETE_LOCK:
                    core.on_lock_released(key, await zklog.commit(zk, core.lock_release_txn(key, lock)))
            except ZK_ERRORS:
                pass
        drop_tasks(self.ack_listing)
        self.ack_listing = {}
        if self.init_acks is not None:
            drop_tasks({0: self.init_acks})
        drop_tasks(self.init_asked)

    async def _remove_decided(self, key: tuple[str, str]) -> bool:
        """The common end of a DDL: decided, the ack names read while the peers applied it, and one
        transaction that removes it all. Deleting our own ack in it proves the record is still ours;
        False (nothing changed) sends the caller down the careful path."""
        listing = self.ack_listing.pop(key, None)
        if self.core.phase is not Phase.DECIDED or listing is None:
            if listing is not None:
                listing.cancel()
            return False
        try:
            acks = await listing
        except (asyncio.CancelledError, *ZK_ERRORS):
            return False
        if self.cluster.instance not in acks:
            return False
        results = await self._remove_tx(key, acks)
        return self.core.on_removed(key, results) is Removal.DONE

    def _removal(self, key: tuple[str, str], acks: list[str], status: str | None = None, message: str = "",
                 version: int = -1) -> Txn:
        return self.core.removal_txn(key, acks, status, message, version, self.details, time.time())

    def _removed(self, key: tuple[str, str], results: list) -> None:
        """After a removal transaction that went through: our catch-up skips it, old history goes."""
        if went_through(results):
            c = self.cluster
            c.listener.ran_here(self.core.czxids.get(key, 0), c.paths.ddl_record(*key))
            c.spawn_quietly(c.prune_history(results[-1]))

    async def _remove_tx(self, key: tuple[str, str], acks: list[str]) -> list:
        """The removal, on whatever session we have (the caller checked the lock is ours), waiting
        (bounded) for a connection that is momentarily down."""
        zk = self.cluster.zk
        if zk is None:
            raise ConnectionLoss("no ZooKeeper client")
        results = await zklog.commit(zk, self._removal(key, acks))
        self._removed(key, results)
        return results

    async def _remove(self, key: tuple[str, str], acks: list[str]) -> None:
        """Record, acks, lock and a ddl_history entry, all in one transaction, conditional on the
        record being ours (its owner znode); an ack that came or went meanwhile: again, acks re-read."""
        c = self.cluster
        zk = c.zk
        assert zk is not None
        for _ in range(REMOVE_ATTEMPTS):
            results = await self._remove_tx(key, acks)
            if went_through(results):
                self.core.on_removed(key, results)
                return
            owner = await zk.exists(self.core.owner_path(key)) is not None
            if self.core.on_removed(key, results, owner_exists=owner) is not Removal.RETRY:
                return   # not ours any more (reconciled, or released by an operator): touch nothing
            acks = await zk.children(c.paths.ddl_acks(*key))
        raise LostDecision(f"could not remove the ddl record of {key[0]}.{key[1]} (acks kept changing)")

    def warning(self) -> str | None:
        """The note for the client when some instance lagged or could not lock the table at INIT."""
        notes = []
        if self.core.laggards:
            notes.append(f"instance(s) {', '.join(sorted(self.core.laggards))} did not acknowledge within "
                         f"{self.cluster.cc.ack_timeout_s:g}s; they will catch up when they recover")
        if self.core.refusals:
            who = "; ".join(f"{inst}: {msg}" for inst, msg in self.core.refusals)
            notes.append(f"instance(s) could not lock the table while the DDL ran ({who}); "
                         f"they refreshed its structure afterwards")
        if self.core.unapplied:
            who = "; ".join(f"{inst}: {msg}" for inst, msg in self.core.unapplied)
            notes.append(f"instance(s) could not reload the table's new structure ({who}); they retry from "
                         f"the backends on their own")
        return "; ".join(notes) or None


__all__ = ["ClusterDdl", "LostDecision", "PAUSE_PHASES"]
