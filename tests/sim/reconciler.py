"""Recovery in the simulated instances (zk/recovery.py's driving, over zk/ddlcore/reconciler.py): release
the local locks of departed instances; the survivor holding reconcile.lock ends each orphaned record
from the backends, only once its DDL runs on no node; a joiner drains the records in flight."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zk.ddlcore import Orphan, Running, Txn, Verdict
from zk.ddlcore import reconciler as rc
from zk.paths import parse_table_node
from zk.records import FAILED, BadRecord, DdlLockInfo, DdlRecord, HistoryEntry

from .backend import BackendError
from .instance import SAFETY_POLL_S, Waker, ZkDown
from .originator import wait_acks
from .tasks import SimFuture, gather

if TYPE_CHECKING:
    from .instance import Instance


async def recovery_loop(inst: Instance) -> None:
    waker = Waker(inst)
    session = inst.session
    known: set[str] | None = None
    while inst.session == session and session is not None:
        try:
            online = await inst.online(waker)
            if known is not None:
                for gone in sorted(known - online):
                    inst.release_owned_by(f"instance:{gone}")
            known = online
            if inst.ready:
                orphans = await find_orphans(inst, online)
                if orphans:
                    await reconcile_elected(inst, orphans)
        except (ZkDown, BackendError):
            pass
        await waker.wait(SAFETY_POLL_S)


async def find_orphans(inst: Instance, online: set[str]) -> list[tuple[str, str]]:
    c = inst.c
    out = []
    for name in await inst.zchildren(c.paths.ddl):
        parts = parse_table_node(name)
        if parts is None:
            continue
        path = c.paths.ddl_record(*parts)
        got = await inst.zget(path)
        if got is None:
            continue
        try:
            rec = DdlRecord.decode(got[0])
        except BadRecord:
            rec = None
        if rc.classify(rec, online, inst.name, path in inst.active) is Verdict.RECONCILE:
            out.append(parts)
    return out


async def reconcile_elected(inst: Instance, orphans: list[tuple[str, str]]) -> None:
    c = inst.c
    path = c.paths.reconcile_lock
    try:
        await inst.zwrite(("create", path, inst.name.encode(), True, False), "reconcile.lock")
    except Exception as e:  # noqa: BLE001 - NodeExistsError: someone else (or our earlier pass)
        if isinstance(e, ZkDown):
            raise
        stat = await inst.zexists(path)
        if stat is None or stat.ephemeralOwner != inst.session:
            return
    try:
        for key in orphans:
            await reconcile(inst, key)
    finally:
        try:
            await inst.zwrite(("delete", path, -1), "reconcile.lock")
        except Exception:  # noqa: BLE001
            pass


async def ddl_running(inst: Instance, marker: str, kill: bool) -> list[str]:
    """proxy/ddl.py running(): the nodes whose processlist shows the marker (or cannot be asked)."""
    futs = []
    names = sorted(inst.c.backends)
    for node in names:
        f = SimFuture()
        inst.c.backends[node].show_processlist(f.set)
        futs.append(f)
    values = await gather(futs)
    out = []
    for node, v in zip(names, values):
        if isinstance(v, BaseException):
            out.append(node)
            continue
        ids = [conn for conn, sql, _ in v if f"{marker} */" in sql]
        if kill:
            for conn in ids:
                inst.c.backends[node].kill_query(conn)
        if ids:
            out.append(node)
    return out


async def reconcile(inst: Instance, key: tuple[str, str]) -> None:
    c = inst.c
    path = c.paths.ddl_record(*key)
    got = await inst.zget(path)
    if got is None:
        return
    data, stat = got
    try:
        rec = DdlRecord.decode(data)
    except BadRecord:
        rec = DdlRecord("?", key[0], key[1], "UNKNOWN", "", FAILED)
    lock = await inst.zget(c.paths.ddl_lock(*key))
    if lock is not None:
        try:
            holder = DdlLockInfo.decode(lock[0]).instance
        except BadRecord:
            holder = None
        if rc.holder_alive(holder, await inst.online(), inst.name):
            return
    # only once the DDL runs on no node: reading the structure before would publish one it is about to change
    if rec.ddl_id:
        deadline = inst.world.now + min(c.ack_timeout_s, rc.RUNNING_WAIT_S)
        while True:
            kill = rc.should_kill(rec.created_at, inst.world.now, c.ddl_timeout_s)
            where = await ddl_running(inst, rec.marker, kill)
            step = c.variant.running_step(where, rec.created_at, inst.world.now, c.ddl_timeout_s,
                                          inst.world.now > deadline)
            if step is Running.ENDED:
                break
            if step is Running.LATER:
                return
            await inst.sleep(rc.RUNNING_POLL_S)
    await inst.reload([key[1]])
    orphan = Orphan(key, rec, stat.czxid, stat.version)
    decision = orphan.decision(inst.name, "reconciled")
    results = await inst.zcommit(rc.decide_txn(c.paths, orphan, decision))
    if any(isinstance(r, BaseException) for r in results):
        return
    c.checker.on_reconciled(inst, key, stat.czxid)
    online = await inst.online()
    tally = rc.outcome_tally(orphan, online, inst.name)
    await wait_acks(inst, tally, key, {}, c.ack_timeout_s)
    entry = HistoryEntry(key[0], key[1], rec.instance, rec.sql, FAILED, stat.czxid, inst.world.now,
                         message=decision.message)
    version = results[-1].version
    for _ in range(5):
        children = await inst.zchildren(path)
        acks = await inst.zchildren(c.paths.ddl_acks(*key)) if "instance" in children else []
        lock_stat = await inst.zexists(c.paths.ddl_lock(*key))
        results = await inst.zcommit(rc.removal_txn(c.paths, orphan, version, children, acks, lock_stat, entry))
        r = rc.removal_retry(results)
        if r is True:
            inst.release_owned_by(f"instance:{rec.instance}")
            inst.sub.mark_finished(stat.czxid)
            return
        if r is False:
            return


async def drain_in_flight(inst: Instance) -> None:
    """At join, holding syncMeta.lock: wait for live originators' DDL, reconcile the orphans (bounded)."""
    c = inst.c
    deadline = inst.world.now + 2 * c.ack_timeout_s + c.session_timeout_s
    waker = Waker(inst)
    while True:
        online = await inst.online(waker)
        live = []
        for name in await inst.zchildren(c.paths.ddl, waker):
            parts = parse_table_node(name)
            if parts is None:
                continue
            got = await inst.zget(c.paths.ddl_record(*parts), waker)
            if got is None:
                continue
            try:
                rec = DdlRecord.decode(got[0])
            except BadRecord:
                rec = None
            if rec is not None and rec.instance in online and rec.instance != inst.name:
                live.append(name)
            else:
                await reconcile(inst, parts)
        if not live or inst.world.now > deadline:
            return
        await waker.wait(SAFETY_POLL_S)


__all__ = ["recovery_loop", "reconcile", "drain_in_flight", "ddl_running", "Txn"]
