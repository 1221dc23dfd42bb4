"""One simulated cluster and one schedule: instances, ZooKeeper, backends, the peer channel, a client
workload and the faults, all drawn from the seed; `run_schedule(seed)` runs it under the checker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from zk.ddlcore import OriginatorCore, SubscriberCore
from zk.ddlcore import reconciler as rc
from zk.ddlcore.release import release_refusal, release_txn
from zk.paths import Paths
from zk.records import FAILED, BadRecord, DdlLockInfo, DdlRecord, HistoryEntry, OnlineInfo

from .backend import Backend, BackendError
from .checker import Checker, Violation
from .instance import SAFETY_POLL_S, Instance, Waker, ZkDown
from .net import PeerNet
from .originator import run_ddl
from .reconciler import ddl_running, drain_in_flight, recovery_loop
from .subscriber import listener_loop
from .world import World
from .zkmodel import ZkServer


class SimBug(RuntimeError):
    """The simulator itself failed (not the protocol)."""


@dataclass
class Variant:
    """Which protocol the simulated cluster runs: the production core as is ("fixed"), or with one fix
    reverted by the test (a broken subclass or function passed in, or a knob of this test-side adapter)."""

    name: str = "fixed"
    originator_core: type = OriginatorCore
    subscriber_core: type = SubscriberCore
    running_step: Callable[..., Any] = rc.running_step
    acks_without_identity: bool = False     # the adapter's ZooKeeper acks: unconditional, naming no record
    # the simulated `kill @@ddl_lock`: refused while the holder is online (proxy/server.py) or its DDL runs on a
    # node (release_refusal), and releasing exactly what it judged (release_txn); False: the old release
    kill_refuses_live_holder: bool = True
    # a node unreachable also fails metadata reads (a subscriber's reload, a catch-up); False: only new DDL
    # connections are refused (reads still answer)
    reload_failures: bool = True
    # a reload that cannot read a node publishes the old structure for it (meta.loader's partial load,
    # UNKNOWN), then says it is incomplete (RefreshIncomplete: not counted as applied, retried)
    partial_loads: bool = False
    # the drivers' share of the fixes since (False: reverted): a partial load raises RefreshIncomplete (not
    # counted as applied); the originator re-reads a table its refresh missed a node of (reload_later); a
    # catch-up/settle reload holds the table's local lock and waits for a DDL in flight on it
    partial_is_incomplete: bool = True
    originator_reloads_later: bool = True
    catch_up_takes_lock: bool = True


@dataclass
class Outcome:
    seed: int
    violation: str | None
    steps: int
    ddls: int
    oks: int
    answers: dict[str, int] = field(default_factory=dict)
    trace: list[str] | None = None


class SimCluster:
    def __init__(self, seed: int, variant: Variant | None = None, trace: bool = False) -> None:
        self.world = w = World(seed)
        if trace:
            w.trace = []
        self.variant = variant or Variant()
        self.paths = Paths("/pydble", "sim")
        self.schema = "db"
        r = w.rng
        self.session_timeout_s = 2.0
        self.ack_timeout_s = 2.0
        self.ddl_timeout_s = 0.0
        self.peer_on = r.random() < 0.8
        self.zk = ZkServer(w)
        for p in (self.paths.online, self.paths.ddl_locks, self.paths.ddl, self.paths.history):
            self.zk.ensure_path(p)
        self.tables = ["t1", "t2"][: r.choice((1, 2))]
        self.backends = {n: Backend(w, n, {t: ("id",) for t in self.tables}) for n in ("dn1", "dn2")}
        self.checker = Checker(self)
        self.zk.audit.append(self.checker.audit)
        for be in self.backends.values():
            be.on_start.append(self.checker.on_backend_start)
            be.on_end.append(self.checker.on_backend_end)
            be.ddl_time = (0.001, r.choice((0.02, 0.3, 1.5, 5.0)))   # up to a long copying ALTER
            be.reads_fail_when_down = self.variant.reload_failures
        self.net = PeerNet(w, drop_p=r.choice((0.0, 0.02, 0.1)), dup_p=r.choice((0.0, 0.02, 0.1)),
                           late_p=r.choice((0.0, 0.02)))
        self.instances = {n: Instance(self, n) for n in [f"i{k}" for k in range(1, r.choice((2, 3, 3)) + 1)]}
        for inst in self.instances.values():
            self.net.attach(inst.name, inst.on_peer)
        self.answers: dict[str, int] = {}
        self.ddls = 0

    def calm(self) -> bool:
        """Nothing in flight anywhere (no message, statement, DDL, record or task but the loops) and every
        instance equal to the backends: nothing can change any more."""
        if self.net.in_flight:
            return False
        if any(be.processlist for be in self.backends.values()):
            return False
        if any(p != self.paths.ddl for p in self.zk.tree(self.paths.ddl)) or \
                any(p != self.paths.ddl_locks for p in self.zk.tree(self.paths.ddl_locks)):
            return False
        if self.paths.sync_meta_lock in self.zk.nodes or self.paths.reconcile_lock in self.zk.nodes:
            return False
        truth = {t: {n: be.tables.get(t) for n, be in sorted(self.backends.items())} for t in self.tables}
        for inst in self.instances.values():
            if inst.state != "running" or not inst.ready or inst.locks or inst.inbox:
                return False
            if any(not t.name.endswith((":listener", ":recovery")) for t in inst.tasks):
                return False
            if any(inst.memory.get(t) != truth[t] for t in self.tables):
                return False
        return True

    def peer_names(self, inst: Instance) -> list[str]:
        """The instances we have peer links to (the live set): those online, as last read."""
        if not self.peer_on:
            return []
        return [n for n in self.instances if n != inst.name
                and self.paths.online_instance(n) in self.zk.nodes]

    # -- join -----------------------------------------------------------------------------------------------
    async def join(self, inst: Instance) -> None:
        """claim the name -> syncMeta.lock -> drain in-flight DDL -> load -> online -> loops (cluster._join)."""
        inst.joining = True
        try:
            while True:
                try:
                    await self._join_once(inst)
                    return
                except (ZkDown, BackendError):
                    await inst.sleep(1.0)
                    if inst.zk is None or not inst.zk.connected:
                        inst.new_session()
        finally:
            inst.joining = False

    async def _join_once(self, inst: Instance) -> None:
        p = self.paths
        waker = Waker(inst)
        me = p.online_instance(inst.name)
        began = inst.session
        while True:
            got = await inst.zget(me, waker)
            if got is None or got[1].ephemeralOwner == inst.session:
                break
            try:
                info = OnlineInfo.decode(got[0])
            except BadRecord:
                info = None
            if info is not None and info.incarnation == f"inc{inst.incarnation}":
                await inst.zwrite(("delete", me, got[1].version), "join")
                continue
            await waker.wait(SAFETY_POLL_S)
        sid = inst.session
        for name in await inst.zchildren(p.ddl_locks):
            got = await inst.zget(f"{p.ddl_locks}/{name}")
            if got is None:
                continue
            try:
                holder = DdlLockInfo.decode(got[0]).instance
            except BadRecord:
                continue
            if holder == inst.name and got[1].ephemeralOwner != sid:
                try:
                    await inst.zwrite(("delete", f"{p.ddl_locks}/{name}", -1), "join")
                except Exception:  # noqa: BLE001
                    pass
        while True:
            try:
                await inst.zwrite(("create", p.sync_meta_lock, inst.name.encode(), True, False), "join")
                break
            except ZkDown:
                raise
            except Exception:  # noqa: BLE001 - NodeExistsError
                stat = await inst.zexists(p.sync_meta_lock, waker)
                if stat is not None and stat.ephemeralOwner == inst.session:
                    break
                if stat is not None:
                    await waker.wait(SAFETY_POLL_S)
        try:
            self.world.log(f"{inst.tag} holds syncMeta.lock; draining")
            await drain_in_flight(inst)
            self.world.log(f"{inst.tag} drained; loading")
            history = await inst.zchildren(self.paths.history)   # membership._join: the position before the load
            await inst.load_all()
            self.world.log(f"{inst.tag} loaded {inst.memory}")
            while True:
                try:
                    await inst.zwrite(("create", me, inst.online_info(), True, False), "join")
                    break
                except ZkDown:
                    raise
                except Exception:  # noqa: BLE001 - NodeExistsError
                    got = await inst.zget(me)
                    if got is not None and got[1].ephemeralOwner == inst.session:
                        break
                    await waker.wait(SAFETY_POLL_S)
            inst.sub.restart(history)
            inst.catch_up_backoff = 0.0
            inst.spawn(listener_loop(inst), "listener")
            inst.spawn(recovery_loop(inst), "recovery")
        finally:
            try:
                await inst.zwrite(("delete", p.sync_meta_lock, -1), "join")
            except Exception:  # noqa: BLE001
                pass
        if inst.session != began or began is None:
            # membership (h1 1db44e3): a join that ends on another session than it began with does not make the
            # instance ready; it joins again on the new one
            raise ZkDown("the session changed during the join")
        inst.ready = True
        self.world.log(f"{inst.tag} joined")

    # -- the client and the operator --------------------------------------------------------------------------------
    def submit(self, name: str, table: str, column: str) -> None:
        inst = self.instances[name]
        if inst.state == "down":
            self.answers["refused-connection"] = self.answers.get("refused-connection", 0) + 1
            return
        self.ddls += 1
        no = self.ddls

        async def client() -> None:
            answer = await run_ddl(inst, table, column, no)
            kind = "ok" if answer.ok else ("refused" if answer.refused else
                                           "lost" if answer.extra.get("lost") else "failed")
            self.answers[kind] = self.answers.get(kind, 0) + 1
            self.world.log(f"{inst.tag} ddl {no} {table}.{column}: {kind} {answer.message} lag={answer.laggards}")
            self.checker.on_answer(inst, table, answer)
        inst.deliver_for(inst.incarnation)(lambda: inst.spawn(client(), f"ddl{no}"))

    def operator_kill(self, name: str, table: str, force: bool) -> None:
        """`kill @@ddl_lock where schema='db' and table='t' [force]` sent to instance `name`
        (proxy/server.kill_ddl_lock + cluster.release_table over zk/ddlcore/release.py)."""
        inst = self.instances[name]
        if inst.state != "running":
            return

        async def op() -> None:
            nonlocal table
            locked = [t for t in self.tables if self.paths.ddl_lock(self.schema, t) in self.zk.nodes]
            if locked and table not in locked:
                table = locked[0]   # an operator kills a lock that is there (show @@ddl first)
            key = (self.schema, table)
            try:
                online = await inst.online() | {inst.name}
                got = await inst.zget(self.paths.ddl_record(*key))   # the record first, as release_table reads
                lock = await inst.zget(self.paths.ddl_lock(*key))
                holders = set()
                if lock is not None:
                    holders.add(DdlLockInfo.decode(lock[0]).instance)
                rec = DdlRecord.decode(got[0]) if got is not None else None
                if rec is not None:
                    holders.add(rec.instance)
                lk = inst.locks.get(table)
                if lk is not None and lk.owner.startswith("session:"):
                    holders.add(inst.name)
                if holders & online and not force and self.variant.kill_refuses_live_holder:
                    self.world.log(f"operator kill of {table} refused: holder {holders & online} online")
                    return
                if got is None and lock is None:
                    inst.locks.pop(table, None)
                    return
                if self.variant.kill_refuses_live_holder:
                    if not force and rec is not None and rec.ddl_id:
                        why = release_refusal(rec, await ddl_running(inst, rec.marker, False), force)
                        if why is not None:
                            self.world.log(f"operator kill of {table} refused: {why}")
                            return
                    children = await inst.zchildren(self.paths.ddl_record(*key)) if got is not None else []
                    acks = await inst.zchildren(self.paths.ddl_acks(*key)) if "instance" in children else []
                    entry = None
                    if got is not None:
                        entry = HistoryEntry(self.schema, table, rec.instance if rec else "?", rec.sql if rec else "",
                                             FAILED, got[1].czxid, self.world.now, message="released by an operator")
                    results = await inst.zcommit(release_txn(self.paths, key, rec, got[1] if got else None, children,
                                                             acks, lock[1] if lock else None, entry))
                    if any(isinstance(r, BaseException) for r in results):
                        self.world.log(f"operator kill of {table}: changed meanwhile, nothing released")
                        return
                else:   # the bug: whatever is there by now goes, one node after another (the old release_table)
                    await self._delete_recursive(inst, self.paths.ddl_record(*key))
                    try:
                        await inst.zwrite(("delete", self.paths.ddl_lock(*key), -1), "operator")
                    except Exception:  # noqa: BLE001 - NoNodeError
                        pass
                self.world.log(f"operator kill of {table} (force={force}) released it; holders {holders}")
                if force:
                    self.checker.on_forced_release(table, rec.marker if rec else "")
                inst.locks.pop(table, None)
            except (ZkDown, BadRecord):
                return
        inst.spawn(op(), "operator")

    async def _delete_recursive(self, inst: Instance, path: str) -> None:
        """zk/aio.py's delete(recursive=True): children first, listed again when one came meanwhile."""
        for _ in range(10):
            for child in await inst.zchildren(path):
                await self._delete_recursive(inst, f"{path}/{child}")
            try:
                await inst.zwrite(("delete", path, -1), "operator")
                return
            except ZkDown:
                raise
            except Exception as e:  # noqa: BLE001 - NoNodeError: gone; NotEmptyError: list again
                if e.__class__.__name__ != "NotEmptyError":
                    return

    # -- the schedule -------------------------------------------------------------------------------------------
    def plan(self, window: float) -> None:
        """Draw the workload and the faults of this schedule from the seed (self.faults_over: when the
        last of them has ended)."""
        w = self.world
        r = w.rng
        self.faults_over = 0.0

        def at(t: float, lasts: float, fn: Callable[..., Any], *args: Any) -> None:
            w.at(t, fn, *args)
            self.faults_over = max(self.faults_over, t + lasts)
        names = sorted(self.instances)
        for n in names:
            at(r.uniform(0, 0.05), 0.0, self.instances[n].start)
        start = 0.5
        col = 0
        for _ in range(r.randint(2, 9)):
            col += 1
            column = f"c{col}" if r.random() > 0.1 else f"c{max(1, col - 1)}"
            at(start + r.uniform(0, window), 0.0, self.submit, r.choice(names), r.choice(self.tables), column)
        nodes = sorted(self.backends)
        for _ in range(r.randint(0, 3)):
            be = self.backends[r.choice(nodes)]
            secs = r.choice((0.5, 2.0, 5.0, 9.0))
            at(start + r.uniform(0, window), secs, be.hold_mdl, r.choice(self.tables), secs)
        if r.random() < 0.3:
            be = self.backends[r.choice(nodes)]
            secs = r.uniform(0.2, 3.0)
            at(start + r.uniform(0, window), secs, be.silence, secs)
        if r.random() < 0.2:
            be = self.backends[r.choice(nodes)]
            secs = r.uniform(0.2, 2.0)
            at(start + r.uniform(0, window), secs, be.go_down, secs)
        for _ in range(r.choice((0, 0, 1, 2))):
            inst = self.instances[r.choice(names)]
            secs = r.choice((r.uniform(0.05, 1.0), r.uniform(2.5, 6.0)))
            at(start + r.uniform(0, window), secs, inst.pause, secs)
        if r.random() < 0.3:
            inst = self.instances[r.choice(names)]
            t = start + r.uniform(0, window)
            at(t, 0.0, inst.crash)
            at(t + r.uniform(0.3, 4.0), 0.0, self._restart, inst.name)
        if r.random() < 0.2:
            inst = self.instances[r.choice(names)]
            secs = r.uniform(0.2, 3.0)
            at(start + r.uniform(0, window), secs, self._zk_slow, inst.name, secs)
        if r.random() < 0.25:
            force = r.random() < 0.3
            at(start + r.uniform(0, window), 0.0, self.operator_kill, r.choice(names), r.choice(self.tables), force)
            if r.random() < 0.5:   # and again a little later: operators retry
                at(start + r.uniform(0, window), 0.0, self.operator_kill, r.choice(names), r.choice(self.tables), force)

    def _restart(self, name: str) -> None:
        inst = self.instances[name]
        if inst.state == "down":
            inst.start()

    def _zk_slow(self, name: str, seconds: float) -> None:
        inst = self.instances[name]
        if inst.zk is not None:
            inst.zk.slow_until = self.world.now + seconds


def run_schedule(seed: int, variant: Variant | None = None, trace: bool = False, window: float = 8.0,
                 settle: float = 40.0) -> Outcome:
    """One schedule: the workload and faults of `seed`, checked at every step and at quiescence.

    After the last fault has ended the cluster runs on until it is calm (nothing in flight anywhere and
    every instance equal to the backends, twice a second apart) or `settle` virtual seconds passed;
    the quiescence check then runs."""
    c = SimCluster(seed, variant, trace)
    c.plan(window)
    w = c.world
    faults_over = c.faults_over
    violation = None
    try:
        w.run(faults_over)
        deadline = faults_over + settle
        calm = 0
        while w.now < deadline and not w.errors:
            w.run(w.now + 1.0)
            calm = calm + 1 if c.calm() else 0
            if calm >= 2:
                break
        if not w.errors:
            c.checker.at_quiescence()
    except Violation as e:
        violation = str(e)
    finally:
        for inst in c.instances.values():
            inst.shutdown()
    if w.errors:
        name, err = w.errors[0]
        if trace:
            import traceback
            w.trace.extend(traceback.format_exception(err))
        violation = f"SIMULATOR BUG: seed {seed}: task {name} died: {err!r}"
    return Outcome(seed, violation, w.steps, c.ddls, c.checker.oks, dict(c.answers), w.trace)


__all__ = ["SimCluster", "Variant", "Outcome", "run_schedule"]
