"""The listener of the simulated instances (zk/listener.py's driving, over SubscriberCore): a
level-triggered pass over ddl/, steps over the peer channel, conditional ZooKeeper acks, records that
vanish before their outcome, and catch-up from ddl_history."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dataclasses import replace

from kazoo.exceptions import NoNodeError

from zk.ddlcore import Check, Create, GoneAction, SetData, Step, Txn, may_release
from zk.ddlcore.subscriber import ack_txns
from zk.paths import parse_table_node
from zk.records import FAILED, INIT, SUCCESS, Ack, BadRecord, DdlRecord, HistoryEntry

from .backend import BackendError
from .instance import SAFETY_POLL_S, Waker, ZkDown

if TYPE_CHECKING:
    from .instance import Instance

LOCAL_LOCK_WAIT_S = 3.0
CATCH_UP_EVERY_S = 1.0
CATCH_UP_BACKOFF_MAX_S = 30.0
ACK_AFTER_REPLY_S = 0.05
GONE_GRACE_S = 0.5
ERRORS = (ZkDown, BackendError, NoNodeError)


async def listener_loop(inst: Instance) -> None:
    """Runs while the instance is in the cluster with this session; a pass at every watch and every
    SAFETY_POLL_S."""
    waker = Waker(inst)
    inst.listener_wake = waker
    session = inst.session
    caught_up_at = -1e9
    while inst.session == session and session is not None:
        try:
            due = await listener_pass(inst, waker, caught_up_at)
            if due:
                caught_up_at = inst.world.now
        except ERRORS:
            pass
        await waker.wait(SAFETY_POLL_S)


async def listener_pass(inst: Instance, waker: Waker, caught_up_at: float) -> bool:
    c = inst.c
    sub = inst.sub
    known = set(sub.handled)
    names = await inst.zchildren(c.paths.ddl, waker)
    seen = set()
    for name in names:
        parts = parse_table_node(name)
        if parts is None:
            continue
        path = c.paths.ddl_record(*parts)
        got = await inst.zget(path, waker)
        if got is None:
            continue
        data, stat = got
        try:
            rec = DdlRecord.decode(data)
        except BadRecord:
            continue
        key = (path, stat.czxid)
        seen.add(key)
        if rec.instance == inst.name and not rec.reconciled_by:
            continue
        inst.zk_records[key] = rec
        if sub.step_for(key, rec) is None:
            continue
        async with RecordLock(inst, path):
            step = sub.step_for(key, rec)
            if step is None:
                continue
            ok, message = await handle(inst, rec, step, stat.czxid)
            sub.on_handled(key, rec.status, ok, message)
            inst.world.log(f"{inst.tag} zk step {rec.status} of {key}: {ok} {message}")
            await ack(inst, rec, stat.czxid, ok, message)
    for gone in sorted(sub.on_pass(known, seen), key=lambda g: g.key):   # the core returns them in set order
        inst.world.log(f"{inst.tag} record {gone.key} gone: {gone.action.value}")
        inst.zk_records.pop(gone.key, None)
        if gone.action is GoneAction.RELEASE:
            release(inst, gone.table, gone.key[1])
        else:
            inst.spawn(settle_gone(inst, gone.key, gone.table), "settle")
    since = inst.world.now - caught_up_at
    if (sub.history_seen is None or inst.catch_up_due or since >= CATCH_UP_EVERY_S) \
            and since >= inst.catch_up_backoff:
        inst.catch_up_due = False
        await catch_up(inst)
        return True
    return False


class RecordLock:
    """One step of a record at a time, whichever way it arrived (listener.record_lock)."""

    def __init__(self, inst: Instance, path: str) -> None:
        self.inst = inst
        self.path = path

    async def __aenter__(self) -> None:
        held = self.inst.record_locks
        while self.path in held:
            await held[self.path]
        from .tasks import SimFuture
        held[self.path] = SimFuture()

    async def __aexit__(self, *exc: Any) -> None:
        fut = self.inst.record_locks.pop(self.path)
        fut.set(None)


async def handle(inst: Instance, rec: DdlRecord, step: Step, czxid: int, texts: dict | None = None) -> tuple[bool, str]:
    """One step of another instance's DDL: LOCK takes the local lock for it, REFRESH reloads the table."""
    owner = f"instance:{rec.instance}"
    if step is Step.LOCK:
        held = inst.locks.get(rec.table)
        if held is not None and held.owner == owner:
            held.record = czxid
            return True, ""
        deadline = inst.world.now + LOCAL_LOCK_WAIT_S
        while not inst.lock_local(rec.table, owner, czxid):
            if inst.world.now > deadline:
                return False, f"{inst.name}: table locked by a DDL here"
            await inst.sleep(0.05)
        return True, ""
    message = ""
    try:
        await inst.reload([rec.table], texts)
    except BackendError as e:
        message = f"refresh failed: {e}"
    release(inst, rec.table, czxid, owner)
    if rec.reconciled_by:
        inst.release_owned_by(owner)
    return not message, message


def release(inst: Instance, table: str, czxid: int, owner: str | None = None) -> None:
    lk = inst.locks.get(table)
    if lk is not None and may_release(lk.owner, lk.record, czxid, owner):
        del inst.locks[table]


async def ack(inst: Instance, rec: DdlRecord, czxid: int, ok: bool, message: str) -> None:
    """Our ack of the record with that czxid: the core's ack_txns (conditional on the record still being
    that DDL's, naming it), tried in order (cluster.ack). The broken adapter of bug 2 writes them
    without the owner check and without the record's identity."""
    c = inst.c
    txns = ack_txns(c.paths, inst.name, rec, czxid, ok, message, inst.meta_version)
    if c.variant.acks_without_identity:
        data = Ack(rec.status, ok, message, inst.meta_version, 0).encode()
        txns = [Txn(t.what, tuple(_anonymous(op, data) for op in t.ops if not isinstance(op, Check)), t.czxid, t.ddl_id)
                for t in txns]
    for txn in txns:
        try:
            results = await inst.zcommit(txn)
        except ZkDown:
            return
        if not any(isinstance(r, BaseException) for r in results):
            return
        if isinstance(txn.ops[0], Check) and isinstance(results[0], NoNodeError):
            return   # the record is gone or another DDL's: nothing to acknowledge


def _anonymous(op: Any, data: bytes) -> Any:
    return replace(op, data=data) if isinstance(op, (Create, SetData)) else op


async def on_peer_step(inst: Instance, caller: str, step: dict) -> tuple[bool | None, str]:
    """listener.on_peer_step: check the step against ZooKeeper's record, apply it, answer, ack later."""
    path, czxid, rec, texts, final = step["path"], step["czxid"], step["rec"], step["texts"], step["final"]
    sub = inst.sub
    if not sub.takes_peer_steps(rec, inst.ready):
        return None, "not ready"
    key = (path, czxid)
    live = inst.zk_records.get(key)
    if live is None:
        try:
            got = await inst.zget(path)
        except ZkDown:
            return None, "no session"
        if got is not None and got[1].czxid == czxid:
            try:
                live = DdlRecord.decode(got[0])
            except BadRecord:
                live = None
    why = sub.peer_mismatch(caller, path, rec, live)
    if why is not None:
        return None, why
    inst.zk_records.setdefault(key, live)
    async with RecordLock(inst, path):
        seen = sub.seen_answer(key, rec)
        if seen is not None:
            return seen
        st = Step.LOCK if rec.status == INIT else Step.REFRESH
        ok, message = await handle(inst, rec, st, czxid, texts)
        sub.on_handled(key, rec.status, ok, message)
        inst.world.log(f"{inst.tag} peer step {rec.status} of {key} from {caller}: {ok} {message}")
    if not final:
        inst.spawn(ack_after_reply(inst, key, rec, ok, message), "late-ack")
    return ok, message


async def ack_after_reply(inst: Instance, key: tuple[str, int], rec: DdlRecord, ok: bool, message: str) -> None:
    await inst.sleep(ACK_AFTER_REPLY_S)
    async with RecordLock(inst, key[0]):
        try:
            if inst.c.variant.acks_without_identity:
                if inst.sub.handled.get(key) != rec.status:
                    return
            else:
                stat = await inst.zexists(key[0])
                if not inst.sub.ack_due(key, rec.status, stat.czxid if stat is not None else None):
                    return
            await ack(inst, rec, key[1], ok, message)
        except ERRORS:
            pass


async def settle_gone(inst: Instance, key: tuple[str, int], table: str) -> None:
    await inst.sleep(GONE_GRACE_S)
    async with RecordLock(inst, key[0]):
        release(inst, table, key[1])
        if not inst.sub.settle(key[1]):
            return
        try:
            await reload_unless_busy(inst, table, key[1])
            inst.sub.mark_finished(key[1])
        except (BackendError, TableBusy):
            pass   # ddl_history's entry applies it again
    inst.catch_up_due = True
    waker = getattr(inst, "listener_wake", None)
    if waker is not None:
        waker()


async def catch_up(inst: Instance) -> None:
    """Refresh tables whose DDL finished while we were deaf: ddl_history tells (listener._catch_up). An
    entry whose reload missed a node, or whose table a DDL here holds now, stays unseen: tried again later
    (backing off only while nodes are missed)."""
    c = inst.c
    sub = inst.sub
    names = await inst.zchildren(c.paths.history)
    stuck = missed = False
    for name in sub.history_todo(names):
        entry = None
        if sub.needs_apply(name):
            got = await inst.zget(f"{c.paths.history}/{name}")
            if got is not None:
                try:
                    entry = HistoryEntry.decode(got[0])
                except BadRecord:
                    entry = None
            if entry is not None and sub.entry_applies(entry):
                owner = f"instance:{entry.instance}"
                try:
                    await reload_unless_busy(inst, entry.table, entry.record_czxid, owner)
                except TableBusy:
                    stuck = True
                    continue
                except BackendError:
                    stuck = missed = True
                    continue
                finally:
                    release(inst, entry.table, entry.record_czxid, owner)
        if not stuck:
            sub.on_history_applied(name, entry)
        elif entry is not None:
            sub.mark_finished(entry.record_czxid)
    inst.catch_up_backoff = min(max(2 * inst.catch_up_backoff, 2 * CATCH_UP_EVERY_S),
                                CATCH_UP_BACKOFF_MAX_S) if missed else 0.0


class TableBusy(Exception):
    """listener.TableBusy: a catch-up reload put off while a DDL on the table is in flight here."""


async def reload_unless_busy(inst: Instance, table: str, czxid: int, owner: str | None = None) -> None:
    """listener._refresh_unless_busy: reload under the table's local lock (that record's, or one taken
    for the reload), so no DDL starts on it while we read; TableBusy while another DDL holds it."""
    if not inst.c.variant.catch_up_takes_lock:
        await inst.reload([table])
        return
    held = inst.locks.get(table)
    if held is not None:
        if not may_release(held.owner, held.record, czxid, owner):
            raise TableBusy(table)
        await inst.reload([table])
        return
    mine = f"reload:{czxid}"
    inst.lock_local(table, mine)
    try:
        await inst.reload([table])
    finally:
        inst.unlock_local(table, mine)


__all__ = ["listener_loop", "on_peer_step", "handle", "ack", "release", "catch_up", "FAILED", "SUCCESS"]
