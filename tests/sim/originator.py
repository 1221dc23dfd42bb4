"""A DDL from a client, run by a simulated instance: proxy/ddl.py's path (local lock, every node
reachable, the DDL on every node without a time limit, refresh from what the nodes answer) around
zk/originator.py's driving of OriginatorCore (INIT, fencing, INIT acks overlapping the run, the fast
or classic end, cleanup, and a reload everywhere after a lost decision)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zk.ddlcore import Cleanup, EndMode, Fence, InitResult, Phase, Removal
from zk.records import FAILED, MARKER_PREFIX, SUCCESS, HistoryEntry

from .backend import BackendError
from .instance import SAFETY_POLL_S, Waker, ZkDown, wait_first
from .tasks import SimFuture, gather

if TYPE_CHECKING:
    from .instance import Instance

PEER_GRACE_S = 0.2
FENCE_READS = 3
REMOVE_ATTEMPTS = 5
LOST_DECISION_RETRY_S = 300.0


class LostDecision(Exception):
    """The DDL may have run but this instance could not publish its outcome."""


@dataclass
class Answer:
    """What the client hears."""

    ok: bool
    message: str = ""
    laggards: tuple[str, ...] = ()
    core: Any = None
    texts: dict | None = None
    refused: bool = False          # nothing ran
    extra: dict = field(default_factory=dict)


async def run_ddl(inst: Instance, table: str, column: str, ddl_no: int) -> Answer:
    if not inst.ready:
        return Answer(False, "not in the cluster: DDL refused", refused=True)
    owner = f"session:{ddl_no}"
    if not inst.lock_local(table, owner):
        return Answer(False, "table locked here", refused=True)
    try:
        return await _locked(inst, table, column, ddl_no)
    finally:
        inst.unlock_local(table, owner)


async def _reach(inst: Instance) -> str | None:
    futs = []
    for node, be in sorted(inst.c.backends.items()):
        f = SimFuture()
        be.ping(f.set)
        futs.append(f)
    values = await gather(futs)
    for v in values:
        if isinstance(v, BaseException):
            return str(v)
    return None


async def _locked(inst: Instance, table: str, column: str, ddl_no: int) -> Answer:
    c = inst.c
    why = await _reach(inst)
    if why is not None:
        return Answer(False, f"DDL refused: {why}", refused=True)
    marker = f"{MARKER_PREFIX}{ddl_no:08d}x{inst.world.rng.getrandbits(32):08x}"
    key = (c.schema, table)
    sql = f"ALTER TABLE {table} ADD COLUMN {column}"
    core = c.variant.originator_core(c.paths, inst.name, [key], sql, "ALTER", marker, created_at=inst.world.now)
    record_path = c.paths.ddl_record(*key)
    # -- INIT --------------------------------------------------------------------------------------------
    if not inst.ready:
        return Answer(False, "not in the cluster: DDL refused", refused=True)
    session = inst.session
    try:
        results = await inst.zcommit(core.init_txn(key, session, inst.world.now, inst.meta_version))
    except ZkDown:
        return Answer(False, "zookeeper unreachable: DDL refused", refused=True)
    got = core.on_init(key, results)
    if got is not InitResult.LOCKED:
        return Answer(False, f"DDL refused: {got.value}", refused=True)
    inst.active.add(record_path)
    inst.world.log(f"{inst.tag} ddl {ddl_no} INIT {table} czxid={core.czxids[key]} marker={marker[-8:]}")
    c.checker.on_init(inst, core)
    ran = False
    try:
        # -- fencing ----------------------------------------------------------------------------------
        if not core.lease_holds(inst.session, inst.world.now, c.session_timeout_s):
            for _ in range(FENCE_READS):
                sent = inst.world.now
                try:
                    stat = await inst.zexists(c.paths.ddl_lock(*key))
                except ZkDown:
                    stat = None
                fence = core.fence(inst.session, {key: stat}, sent, inst.world.now, c.session_timeout_s)
                if fence is Fence.RUN:
                    break
                if fence is Fence.LOST:
                    raise LostDecision("lost the session and lock before running: not run")
            else:
                raise LostDecision("the fencing reads' answers came too late: not run")
        core.start_running()
        ran = True
        c.checker.on_send(inst, core, key)
        # -- the backends, with the INIT acks collected meanwhile ---------------------------------------------
        node_futs = []
        sent_to = {}
        for node, be in sorted(c.backends.items()):
            f = SimFuture()
            sent_to[node] = be.alter(inst.tag, table, column, marker, f.set)
            node_futs.append((node, f))
        init_steps = core.init_steps()
        asked = {peer: inst.peer_ask(peer, _step(c, key, init_steps[key], None, False))
                 for peer in sorted(c.peer_names(inst))}
        init_acks = inst.spawn(_init_acks(inst, core, key, asked), "init-acks")
        values = await gather([f for _, f in node_futs])
        failed = [(n, v) for (n, _), v in zip(node_futs, values) if isinstance(v, BaseException)]
        success = not failed
        message = "; ".join(f"{n}: {v}" for n, v in failed)
        # -- refresh our own memory: from what each node's connection read back right after the DDL when
        #    every node answered cleanly (proxy/ddl.py), else loaded from the backends ---------------------
        structure = None
        if success:
            structure = {node: sent_to[node].after for node in sorted(sent_to)}
            inst.publish(table, structure)
            inst.reloads.pop(table, None)
        else:
            try:
                structure = await inst.read_table(table)
                inst.publish(table, structure)
                inst.reloads.pop(table, None)
            except BackendError:
                # a node unreachable now (a partial load is published): read again in the background
                # until every node answers (DdlRunner.reload_later); the peers load for themselves
                structure = None
                if c.variant.originator_reloads_later:
                    inst.reload_later([table])
        texts = {table: structure} if structure is not None else None
        # -- INIT acks, then the outcome ------------------------------------------------------------------
        v = await init_acks.finished
        if v[0] != "ok" or isinstance(v[1], BaseException):
            raise LostDecision("zookeeper failed during the INIT acks")
        init = v[1]
        core.on_init_acks(init)
        status = SUCCESS if success else FAILED
        mode = core.end_mode(c.peer_on, init)
        inst.world.log(f"{inst.tag} ddl {ddl_no} ran ({status}); INIT acks by peer {sorted(init.by_peer)}, "
                       f"laggards {list(init.laggards)}, refusals {list(init.refusals)}; {mode.value} end")
        if mode is EndMode.FAST:
            outcome = await _fast_end(inst, core, key, status, message, texts)
        else:
            outcome = await _classic_end(inst, core, key, status, message, texts)
        core.on_outcome_acks(outcome)
        inst.active.discard(record_path)
        lag = tuple(sorted(core.laggards | {name for name, _ in core.unapplied}))   # the client's warning
        return Answer(success, message, lag, core, texts)
    except (LostDecision, ZkDown) as e:
        inst.world.log(f"{inst.tag} ddl {ddl_no} lost its decision in phase {core.phase.value}: {e}")
        core.lost()
        if ran:
            inst.spawn(reload_everywhere_later(inst, table, sql), "reload-later")
        return Answer(False, f"lost decision: {e}", core=core, extra={"lost": True, "ran": ran})
    finally:
        await _cleanup(inst, core, key)
        inst.active.discard(record_path)


def _step(c: Any, key: tuple[str, str], rec_czxid: tuple, texts: dict | None, final: bool) -> dict:
    rec, czxid = rec_czxid
    return {"path": c.paths.ddl_record(*key), "czxid": czxid, "rec": rec, "texts": texts, "final": final}


async def _init_acks(inst: Instance, core: Any, key: tuple[str, str], asked: dict[str, SimFuture]) -> Any:
    c = inst.c
    online = await inst.online()
    tally = core.init_tally(frozenset(online))
    for peer in sorted(tally.expected - set(asked)):
        asked[peer] = inst.peer_ask(peer, _step(c, key, core.init_steps()[key], None, False))
    return await wait_acks(inst, tally, key, asked, c.ack_timeout_s)


async def wait_acks(inst: Instance, tally: Any, key: tuple[str, str], peer: dict[str, SimFuture],
                    timeout: float) -> Any:
    """cluster.wait_acks over AckTally: answers on the peer channel count, ZooKeeper acks only when
    they name the record (the tally decides); bounded by `timeout`, dropping instances gone offline."""
    c = inst.c
    deadline = inst.world.now + timeout
    waker = Waker(inst)
    from zk.records import Ack, BadRecord

    def absorb() -> None:
        for name, fut in list(peer.items()):
            if fut.done:
                del peer[name]
                ok, msg = fut.value
                tally.on_peer_answer(key, name, ok, msg)
    if peer:
        wanted = [f for n, f in peer.items() if n in tally.expected]
        if wanted:
            await wait_first(inst, [gather(wanted)], min(PEER_GRACE_S, timeout))
        absorb()
        for fut in peer.values():
            fut.then(waker)
    while True:
        absorb()
        online = await inst.online(waker)
        names = await inst.zchildren(c.paths.ddl_acks(*key), waker) if tally.open_keys() else []
        absorb()
        for name in names:
            if name not in tally.waiting(online):
                continue
            got = await inst.zget(c.paths.ddl_ack(key[0], key[1], name), waker)
            if got is None:
                continue
            try:
                tally.on_ack(key, name, Ack.decode(got[0]))
            except BadRecord:
                continue
        if tally.complete(online):
            return tally.outcome()
        if inst.world.now >= deadline:
            return tally.outcome(online)
        await waker.wait(min(deadline - inst.world.now, SAFETY_POLL_S))


async def _own_session(inst: Instance, core: Any) -> None:
    if inst.session is None or inst.session != core.session:
        core.lost()
        raise LostDecision("lost the session the DDL started with")


async def _fast_end(inst: Instance, core: Any, key: tuple[str, str], status: str, message: str,
                    texts: dict | None) -> Any:
    """Every target took INIT over the peer channel: the outcome goes there while one transaction decides
    and removes the record."""
    c = inst.c
    await _own_session(inst, core)
    steps = core.outcome_steps(status, message)
    session = core.session
    acks = [inst.name]
    remove = inst.spawn(_commit(inst, core.removal_txn(key, acks, status, message, core.versions[key],
                                                        finished_at=inst.world.now), session), "remove")
    targets = core.targets()
    sent = {peer: inst.peer_ask(peer, _step(c, key, steps[key], texts, True)) for peer in sorted(targets)}
    delivery = inst.spawn(deliver(inst, core, key, steps, texts, sent, c.ack_timeout_s), "deliver")
    results = await _result(remove)
    for _ in range(REMOVE_ATTEMPTS):
        owner_exists = None
        acks_now = None
        if not _through(results):
            try:
                acks_now = await inst.zchildren(c.paths.ddl_acks(*key))
                owner_exists = await inst.zexists(core.owner_path(key)) is not None
            except ZkDown:
                pass
        r = core.on_removed(key, results, acks_now, owner_exists, status, message)
        if r is Removal.DONE:
            inst.sub.mark_finished(core.czxids[key])
            break
        if r is not Removal.RETRY:
            delivery.cancel()
            raise LostDecision(f"removal: {r.value}")
        await _own_session(inst, core)
        results = await _commit_now(inst, core.removal_txn(key, acks_now or acks, status, message,
                                                           core.versions[key], finished_at=inst.world.now), session)
    else:
        delivery.cancel()
        raise LostDecision("removal kept failing")
    v = await delivery.finished
    if v[0] != "ok":
        from zk.ddlcore import AckOutcome
        return AckOutcome(tuple(sorted(targets)))
    return v[1]


async def _commit(inst: Instance, txn: Any, session: int | None) -> list:
    return await inst.zcommit(txn, session)


async def _commit_now(inst: Instance, txn: Any, session: int | None) -> list:
    try:
        return await inst.zcommit(txn, session)
    except ZkDown as e:
        raise LostDecision(str(e)) from None


async def _result(task: Any) -> list:
    v = await task.finished
    if v[0] != "ok":
        raise LostDecision("removal did not finish")
    return v[1]


def _through(results: list) -> bool:
    return not any(isinstance(r, BaseException) for r in results)


async def deliver(inst: Instance, core: Any, key: tuple[str, str], steps: dict, texts: dict | None,
                  sent: dict[str, SimFuture], timeout: float) -> Any:
    """cluster.deliver: the final step over the peer channel alone, re-sent on a lost answer, bounded."""
    from zk.ddlcore import AckOutcome
    c = inst.c
    deadline = inst.world.now + timeout
    refusals: list = []
    pending = dict(sent)
    while pending and inst.world.now < deadline:
        idx = await wait_first(inst, list(pending.values()), min(0.3, deadline - inst.world.now))
        try:
            online = await inst.online()
        except ZkDown:
            online = set(pending)
        retry = []
        for name, fut in list(pending.items()):
            if name not in online:
                del pending[name]
            elif fut.done:
                del pending[name]
                ok, msg = fut.value
                if ok is None:
                    retry.append(name)
                elif not ok:
                    refusals.append((name, msg))
            elif idx is None:
                retry.append(name)   # no answer yet: the step or its answer may be lost, send again
        for name in retry:
            pending[name] = inst.peer_ask(name, _step(c, key, steps[key], texts, True))
    return AckOutcome(tuple(sorted(pending)), tuple(refusals))


async def _classic_end(inst: Instance, core: Any, key: tuple[str, str], status: str, message: str,
                       texts: dict | None) -> Any:
    """SUCCESS/FAILED written and acked in ZooKeeper (the peers hear it over the channel too), then removed."""
    c = inst.c
    steps = core.outcome_steps(status, message)
    peer = {p: inst.peer_ask(p, _step(c, key, steps[key], texts, False)) for p in sorted(core.targets())}
    await _own_session(inst, core)
    try:
        results = await inst.zcommit(core.decide_txn(key, status, message, inst.meta_version), core.session)
    except ZkDown as e:
        raise LostDecision(str(e)) from None
    if not core.on_decided(key, status, message, results):
        raise LostDecision("decide failed: the lock or record is not ours")
    c.checker.on_decided(inst, core, key)
    try:
        outcome = await wait_acks(inst, core.outcome_tally(status), key, peer, c.ack_timeout_s)
    except ZkDown as e:
        raise LostDecision(str(e)) from None
    # the removal with the acks read now (retried while they come and go)
    for _ in range(REMOVE_ATTEMPTS):
        try:
            acks = await inst.zchildren(c.paths.ddl_acks(*key))
            results = await inst.zcommit(core.removal_txn(key, acks, version=core.versions[key],
                                                          finished_at=inst.world.now), core.session)
            owner_exists = None if _through(results) else (await inst.zexists(core.owner_path(key)) is not None)
            acks_now = None if _through(results) else await inst.zchildren(c.paths.ddl_acks(*key))
        except ZkDown as e:
            raise LostDecision(str(e)) from None
        r = core.on_removed(key, results, acks_now, owner_exists)
        if r is Removal.DONE:
            inst.sub.mark_finished(core.czxids[key])
            return outcome
        if r is not Removal.RETRY:
            raise LostDecision(f"removal: {r.value}")
    raise LostDecision("removal kept failing")


async def _cleanup(inst: Instance, core: Any, key: tuple[str, str]) -> None:
    """What an ending originator may still touch: only what is provably this DDL's (originator._cleanup)."""
    c = inst.c
    if core.phase in (Phase.DONE, Phase.REFUSED) or key not in core.locked:
        return
    try:
        lock = await inst.zexists(c.paths.ddl_lock(*key))
        what = core.cleanup(key, lock, inst.session)
        if what is Cleanup.DECIDE_FAILED_THEN_REMOVE:
            results = await inst.zcommit(core.decide_txn(key, FAILED, "the originator gave up before running the DDL"),
                                         core.session)
            core.on_decided(key, FAILED, "gave up", results)
        if what is not Cleanup.LEAVE:
            for _ in range(REMOVE_ATTEMPTS):
                acks = await inst.zchildren(c.paths.ddl_acks(*key))
                results = await inst.zcommit(core.removal_txn(key, acks, finished_at=inst.world.now), core.session)
                if _through(results):
                    core.on_removed(key, results)
                    inst.sub.mark_finished(core.czxids[key])
                    return
                if await inst.zexists(core.owner_path(key)) is None:
                    break
        if key in core.locked:   # a record we could not remove: at least the lock, if still ours
            lock = await inst.zexists(c.paths.ddl_lock(*key))
            owner = await inst.zexists(core.owner_path(key))
            if core.cleanup(key, lock, inst.session, owner is not None) is Cleanup.DELETE_LOCK:
                core.on_lock_released(key, await inst.zcommit(core.lock_release_txn(key, lock), core.session))
    except ZkDown:
        return


async def reload_everywhere_later(inst: Instance, table: str, sql: str) -> None:
    """After a lost decision: once back in the cluster, a history entry naming no record (czxid 0) makes
    every instance reload the table (cluster.reload_everywhere_later)."""
    c = inst.c
    deadline = inst.world.now + LOST_DECISION_RETRY_S
    while inst.world.now < deadline:
        if inst.ready and inst.session is not None:
            try:
                entry = HistoryEntry(c.schema, table, inst.name, sql, FAILED, 0, inst.world.now,
                                     message="the originator lost its decision: reload from the backends")
                await inst.zwrite(("create", c.paths.history_entry_prefix(0), entry.encode(), False, True), "reload")
                return
            except ZkDown:
                pass
        await inst.sleep(1.0)


__all__ = ["Answer", "LostDecision", "run_ddl", "wait_acks"]
