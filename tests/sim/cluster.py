"""One simulated cluster and one schedule: instances, ZooKeeper, backends, the peer channel, a client
workload and the faults, all drawn from the seed; `run_schedule(seed)` runs it under the checker."""

from __future__ import annotations

import gc
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import structlog

from zk.cluster import Cluster
from zk.ddlcore import OriginatorCore, SubscriberCore
from zk.paths import Paths
from zk.records import BadRecord, DdlRecord

from .backend import Backend, Ddl
from .checker import Checker, Violation
from .ddlpath import kill_ddl_lock, run_ddl
from .instance import Instance
from .net import PeerNet
from .world import World
from .zkmodel import ZkServer


class SimBug(RuntimeError):
    """The simulator itself failed (not the protocol)."""


@dataclass
class Variant:
    """Which protocol the simulated cluster runs: production's as is ("fixed"), or with one fix reverted by
    the test (a broken subclass of a core or driver class passed in, or a knob of the simulator's own
    stand-ins for proxy/ddl/ddl.py and meta.loader)."""

    name: str = "fixed"
    originator_core: type = OriginatorCore
    subscriber_core: type = SubscriberCore
    cluster_class: type = Cluster              # zk/cluster.py's (a subclass: acks without identity)
    listener_class: type | None = None         # zk/listener.py's DdlListener unless a subclass is given
    # DdlRunner.running as the reconciler and release_table ask it; False: finds nothing (reads at once)
    reconciler_looks: bool = True
    # `kill @@ddl_lock`: proxy/runtime.py's holder check and production's release_table; False: the old
    # release (whatever record and lock are there by then, deleted recursively)
    kill_refuses_live_holder: bool = True
    # a node unreachable also fails metadata reads (a subscriber's reload, a catch-up); False: only new DDL
    # connections are refused (reads still answer)
    reload_failures: bool = True
    # a reload that cannot read a node publishes the old structure for it (meta.loader's partial load,
    # UNKNOWN), then says it is incomplete (RefreshIncomplete: not counted as applied, retried)
    partial_loads: bool = False
    # the stand-ins' share of the fixes (False: reverted): a partial load raises RefreshIncomplete (not
    # counted as applied); the originator re-reads a table its refresh missed a node of (reload_later)
    partial_is_incomplete: bool = True
    originator_reloads_later: bool = True


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
        self.backends = {n: Backend(w, n, {t: ("id",) for t in self.tables})
                         for n in ("dn1", "dn2", "dn3")[: r.choice((2, 2, 3))]}
        self.checker = Checker(self)
        self.zk.audit.append(self.checker.audit)
        for be in self.backends.values():
            be.on_start.append(self.checker.on_backend_start)
            be.on_end.append(self.checker.on_backend_end)
            be.ddl_time = (0.001, r.choice((0.02, 0.3, 1.5, 5.0)))   # up to a long copying ALTER
            be.reads_fail_when_down = self.variant.reload_failures
        self.net = PeerNet(w, drop_p=r.choice((0.0, 0.02, 0.1)), dup_p=r.choice((0.0, 0.02, 0.1)),
                           late_p=r.choice((0.0, 0.02)))
        self.instances = {n: Instance(self, n) for n in [f"i{k}" for k in range(1, r.choice((2, 3, 3, 4)) + 1)]}
        for inst in self.instances.values():
            self.net.attach(inst.name, inst.on_peer)
        self.answers: dict[str, int] = {}
        self.ddls = 0

    def loops_changed(self) -> None:
        """The running processes' loops, in a fixed order, are what the World steps."""
        self.world.loops = [i.loop for _, i in sorted(self.instances.items()) if i.state == "running"]

    def calm(self) -> bool:
        """Nothing in flight anywhere (no message, statement, DDL, record or reload) and every instance
        equal to the backends: nothing can change any more."""
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
            if inst.state != "running" or not inst.ready or inst.locks or inst.reloads:
                return False
            if any(not t.done() for t in inst.ddl_tasks):
                return False
            if any(inst.memory.get(t) != truth[t] for t in self.tables):
                return False
        return True

    # -- the client and the operator --------------------------------------------------------------------------------
    def submit(self, name: str, table: str, ddl: Ddl) -> None:
        inst = self.instances[name]
        if inst.state == "down":
            self.answers["refused-connection"] = self.answers.get("refused-connection", 0) + 1
            return
        self.ddls += 1
        no = self.ddls

        async def client() -> None:
            if not inst.ready:
                answer = None
                kind = "refused"
            else:
                answer = await run_ddl(inst, table, ddl, no)
                kind = "ok" if answer.ok else ("refused" if answer.refused else
                                               "lost" if answer.extra.get("lost") else "failed")
            self.answers[kind] = self.answers.get(kind, 0) + 1
            if answer is not None:
                self.world.log(f"{inst.tag} ddl {no} {ddl.sql(table)}: {kind} {answer.message} "
                               f"lag={answer.laggards}")
                self.checker.on_answer(inst, table, answer)

        def go() -> None:
            task = inst.spawn(client(), f"ddl{no}")
            inst.ddl_tasks.add(task)
            task.add_done_callback(lambda t: self._client_done(inst, t))
        inst.deliver(go, inst.incarnation)

    def _client_done(self, inst: Instance, task: Any) -> None:
        inst.ddl_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if isinstance(exc, Violation):
                self.world.violation = exc
            else:
                self.world.errors.append((task.get_name(), exc))

    def operator_kill(self, name: str, table: str, force: bool) -> None:
        """`kill @@ddl_lock where schema='db' and table='t' [force]` sent to instance `name`."""
        inst = self.instances[name]
        if inst.state != "running" or not inst.ready:
            return

        async def op() -> None:
            nonlocal table
            locked = [t for t in self.tables if self.paths.ddl_lock(self.schema, t) in self.zk.nodes]
            if locked and table not in locked:
                table = locked[0]   # an operator kills a lock that is there (show @@ddl first)
            key = (self.schema, table)
            marker = ""
            got = self.zk.nodes.get(self.paths.ddl_record(*key))
            if got is not None:
                try:
                    marker = DdlRecord.decode(got.data).marker
                except BadRecord:
                    pass
            try:
                if self.variant.kill_refuses_live_holder:
                    what = await kill_ddl_lock(inst, table, force)
                else:   # the old release: whatever is there by the time it deletes, one node after another
                    zk = inst.cluster.zk
                    await zk.delete(self.paths.ddl_record(*key), recursive=True)
                    await zk.delete(self.paths.ddl_lock(*key))
                    inst.locks_.release(self.schema, table)
                    what = "released"
            except Exception as e:  # noqa: BLE001 - refused (DdlInProgress) or ZooKeeper failed: nothing released
                self.world.log(f"operator kill of {table} (force={force}): {e!r}")
                return
            self.world.log(f"operator kill of {table} (force={force}): {what}")
            if what == "released" and force:
                self.checker.on_forced_release(table, marker)
        inst.spawn(op(), "operator")

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
        nodes = sorted(self.backends)
        col = 0
        for _ in range(r.randint(2, 9)):
            col += 1
            ddl = self._draw_ddl(col, nodes)
            at(start + r.uniform(0, window), 0.0, self.submit, r.choice(names), r.choice(self.tables), ddl)
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

    def _draw_ddl(self, col: int, nodes: list[str]) -> Ddl:
        """The workload's DDL number `col`: mostly ADD COLUMN; also DROP COLUMN, ADD/DROP INDEX, DROP and
        CREATE TABLE and a copying ALTER slow on one node, on names that may or may not be there by then."""
        r = self.world.rng
        k = r.random()
        old = f"c{r.randint(1, col)}"   # a column this workload may have added (or not, or dropped)
        if k < 0.45:
            return Ddl("add", f"c{col}" if r.random() > 0.1 else f"c{max(1, col - 1)}")
        if k < 0.53:
            return Ddl("add_copy", f"c{col}", slow_on=r.choice(nodes))
        if k < 0.67:
            return Ddl("drop", old)
        if k < 0.80:
            c = r.choice((old, "id"))
            return Ddl("add_index", f"k_{c}", c)
        if k < 0.88:
            return Ddl("drop_index", f"k_{r.choice((old, 'id'))}")
        if k < 0.94:
            return Ddl("drop_table")
        return Ddl("create")

    def _restart(self, name: str) -> None:
        inst = self.instances[name]
        if inst.state == "down":
            inst.start()

    def _zk_slow(self, name: str, seconds: float) -> None:
        client = self.instances[name].zk_client
        if client is not None:
            client.slow_until = self.world.now + seconds


def run_schedule(seed: int, variant: Variant | None = None, trace: bool = False, window: float = 8.0,
                 settle: float = 40.0) -> Outcome:
    """One schedule: the workload and faults of `seed`, checked at every step and at quiescence.

    After the last fault has ended the cluster runs on until it is calm (nothing in flight anywhere and
    every instance equal to the backends, twice a second apart) or `settle` virtual seconds passed;
    the quiescence check then runs."""
    with quiet_logs():
        return _run(seed, variant, trace, window, settle)


@contextmanager
def quiet_logs() -> Iterator[None]:
    """The production drivers log through structlog: nothing of it is printed while schedules run."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
                        cache_logger_on_first_use=False)
    try:
        yield
    finally:
        structlog.configure(**saved)


def freeze_heap() -> None:
    """Before a run of schedules: the modules' ~60,000 objects leave the cyclic GC's reach (gc.freeze), so the
    collection before each schedule walks only the schedules' own (~1 ms, not 30-40 ms: half the CPU)."""
    gc.collect()
    gc.freeze()


def _run(seed: int, variant: Variant | None, trace: bool, window: float, settle: float) -> Outcome:
    # the earlier schedules' garbage goes now, with no loop running: a dead process's coroutine that would
    # not close (a finally that awaits) must not be finalized by the cyclic GC in the middle of this
    # schedule, its finally starting a task on whichever loop runs then (same seed, another trace); cheap
    # in a process that called freeze_heap first
    gc.collect()
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


__all__ = ["SimCluster", "Variant", "Outcome", "freeze_heap", "run_schedule"]
