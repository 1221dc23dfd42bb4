"""A proxy instance in the simulation: a process that pauses, crashes and restarts (losing its memory),
with its table structures, local DDL locks, ZooKeeper session, peer endpoint and background loops.

Its protocol steps are the production core's (zk/ddlcore); the code here and in originator.py,
subscriber.py and reconciler.py only runs their transactions and reads against the models and feeds
the results back, as zk/originator.py, zk/listener.py and zk/recovery.py do against the real parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Coroutine

from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError, SessionExpiredError

from zk.ddlcore import Check, Create, Delete, SetData, Txn
from zk.records import OnlineInfo

from .backend import BackendError, RefreshIncomplete
from .tasks import Cancelled, SimFuture, Task, first, gather

if TYPE_CHECKING:
    from .cluster import SimCluster

SAFETY_POLL_S = 2.0
RELOAD_RETRY_FIRST_S = 1.0   # proxy/ddl.py's
RELOAD_RETRY_MAX_S = 30.0


class ZkDown(Exception):
    """No usable ZooKeeper session (expired, closed, or none yet)."""


@dataclass
class LocalLock:
    """meta/locks.py's per-table lock: held by this instance's DDL or for a peer's (owner instance:X)."""

    owner: str
    record: int = 0


@dataclass
class Waker:
    """A watch-driven wake-up for a loop, bounded by a timeout (like zk/cluster.py's Waker)."""

    inst: Instance
    fut: SimFuture = field(default_factory=SimFuture)

    def __call__(self, *_: Any) -> None:
        self.fut.set(True)

    async def wait(self, timeout: float) -> bool:
        fut = self.fut
        self.inst.world.at(timeout, fut.set, False)
        fired = await fut
        self.fut = SimFuture()
        return bool(fired)


def _zk_error(v: Any) -> Any:
    """An expired session reads as ZkDown (the drivers' one "no usable session" error)."""
    return ZkDown(str(v) or "session expired") if isinstance(v, SessionExpiredError) else v


def to_model_ops(txn: Txn) -> list[tuple]:
    """The core's ops as the ZooKeeper model's tuples."""
    out = []
    for op in txn.ops:
        if isinstance(op, Create):
            out.append(("create", op.path, op.data, op.ephemeral, op.sequence))
        elif isinstance(op, Delete):
            out.append(("delete", op.path, op.version))
        elif isinstance(op, SetData):
            out.append(("set", op.path, op.data, op.version))
        elif isinstance(op, Check):
            out.append(("check", op.path, op.version))
        else:
            raise TypeError(op)
    return out


class Instance:
    """One pydble process (and its restarts)."""

    def __init__(self, cluster: SimCluster, name: str) -> None:
        self.c = cluster
        self.world = cluster.world
        self.name = name
        self.incarnation = 0
        self.state = "down"          # down | running | paused
        self.inbox: list[Callable[[], None]] = []
        self.tasks: dict[Task, None] = {}   # in creation order (a set's order would vary from run to run)
        self.zk = None
        self.ready = False
        self.memory: dict[str, dict[str, tuple | None]] = {}   # table -> node -> columns (None: absent)
        self.meta_version = 0
        self.locks: dict[str, LocalLock] = {}
        self.active: set[str] = set()   # record paths this instance originates now
        self.sub = None                 # the subscriber core (per incarnation)
        self.joining = False
        self.peer_waiters: dict[int, SimFuture] = {}
        self._req = 0

    # -- the process ---------------------------------------------------------------------------------
    @property
    def tag(self) -> str:
        return f"{self.name}#{self.incarnation}"

    def deliver_for(self, incarnation: int) -> Callable[[Callable[[], None]], None]:
        def deliver(fn: Callable[[], None]) -> None:
            if self.incarnation != incarnation or self.state == "down":
                return
            if self.state == "paused":
                self.inbox.append(fn)
            else:
                fn()
        return deliver

    def spawn(self, coro: Coroutine, name: str = "") -> Task:
        deliver = self.deliver_for(self.incarnation)
        world = self.world
        soon = world.soon

        def resume(fn: Callable[[], None]) -> None:
            # a future set inside a task's step resumes its waiter as a new event: no task ever runs
            # inside another's step; one set by a model's event (an answer, a timer) resumes it at once
            if world.in_task:
                soon(deliver, fn)
            else:
                deliver(fn)
        t = Task(coro, resume, f"{self.tag}:{name}", world)
        self.tasks[t] = None
        t.finished.then(lambda _v: self.tasks.pop(t, None))
        t.finished.then(lambda v: self._task_died(t, v))
        return t

    def _task_died(self, t: Task, v: Any) -> None:
        """A task that failed on anything but a lost session or a backend error is a simulator bug."""
        from .backend import BackendError
        if v[0] == "error" and not isinstance(v[1], (ZkDown, BackendError)):
            self.world.errors.append((t.name, v[1]))

    def start(self) -> None:
        """A fresh process: empty memory, a new session, then join."""
        self.incarnation += 1
        self.state = "running"
        self.inbox = []
        self.memory, self.locks, self.active = {}, {}, set()
        self.meta_version = 0
        self.ready = False
        self.peer_waiters = {}
        self.zk_records: dict = {}          # others' records as read from ZooKeeper (listener.zk_records)
        self.record_locks: dict = {}        # record path -> the step being handled (listener.record_lock)
        self.catch_up_due = False
        self.catch_up_backoff = 0.0
        self.reloads: dict[str, None] = {}  # DdlRunner.reloads: tables whose refresh after our DDL missed a node
        self.reload_task: Task | None = None
        self.sub = self.c.variant.subscriber_core(self.c.paths, self.name)
        self.world.log(f"{self.tag} starts")
        self.new_session()
        self.spawn(self.c.join(self), "join")

    def new_session(self) -> None:
        from .zkmodel import ZkClient
        inc = self.incarnation
        deliver = self.deliver_for(inc)
        self.zk = ZkClient(self.world, self.c.zk, self.c.session_timeout_s, deliver,
                           lambda: self._session_lost(inc))

    def _session_lost(self, inc: int) -> None:
        if inc != self.incarnation:
            return
        self.world.log(f"{self.tag} lost its zk session")
        self.ready = False
        if not self.joining:
            self.new_session()
            self.spawn(self.c.join(self), "rejoin")

    def pause(self, seconds: float) -> None:
        if self.state != "running":
            return
        self.state = "paused"
        self.world.log(f"{self.tag} paused for {seconds:.2f}s")
        self.zk.go_silent()
        self.world.at(seconds, self.resume, self.incarnation)

    def resume(self, inc: int) -> None:
        if inc != self.incarnation or self.state != "paused":
            return
        self.state = "running"
        self.world.log(f"{self.tag} resumes")
        self.zk.speak()
        while self.inbox and self.state == "running":
            fn = self.inbox.pop(0)
            fn()

    def shutdown(self) -> None:
        """End of the schedule: stop every task without running anything more."""
        self.state = "down"
        for t in list(self.tasks):
            t.kill()
        self.tasks.clear()

    def crash(self) -> None:
        """kill -9: tasks gone, memory gone; the session expires later; its backend connections close."""
        if self.state == "down":
            return
        self.world.log(f"{self.tag} crashes")
        self.state = "down"
        for t in list(self.tasks):
            t.kill()
        self.tasks.clear()
        self.inbox = []
        self.zk.go_silent()
        self.ready = False
        for be in self.c.backends.values():
            be.client_gone(self.tag)
        self.c.checker.on_crash(self)

    # -- waiting -------------------------------------------------------------------------------------
    def sleep(self, seconds: float) -> SimFuture:
        fut = SimFuture()
        self.world.at(seconds, fut.set, None)
        return fut

    def timeout(self, fut: SimFuture, seconds: float) -> SimFuture:
        """(True, value) when fut is set within `seconds`, else (False, None)."""
        out = SimFuture()
        fut.then(lambda v: out.set((True, v)))
        self.world.at(seconds, out.set, (False, None))
        return out

    # -- ZooKeeper -----------------------------------------------------------------------------------
    def _zk(self) -> Any:
        z = self.zk
        if z is None or not z.connected or self.state == "down":
            raise ZkDown(f"{self.name}: no zookeeper session")
        return z

    def _call(self, method: str, *args: Any, **kw: Any) -> SimFuture:
        fut = SimFuture()
        z = self.zk
        if z is None or not z.connected or self.state == "down":
            fut.set(ZkDown(f"{self.name}: no zookeeper session"))
            return fut
        getattr(z, method)(*args, lambda v: fut.set(_zk_error(v)), **kw)
        return fut

    async def zget(self, path: str, watch: Callable | None = None) -> tuple[bytes, Any] | None:
        try:
            return await self._call("get", path, watch=watch)
        except NoNodeError:
            return None

    async def zexists(self, path: str, watch: Callable | None = None) -> Any:
        return await self._call("exists", path, watch=watch)

    async def zchildren(self, path: str, watch: Callable | None = None) -> list[str]:
        try:
            return await self._call("children", path, watch=watch)
        except NoNodeError:
            return []

    async def zcommit(self, txn: Txn, session: int | None = None) -> list:
        """One core transaction on our session (on `session` only: ZkDown if that is not ours now)."""
        z = self._zk()
        if session is not None and z.sid != session:
            raise ZkDown("not the session this write belongs to")
        fut = SimFuture()
        z.multi(to_model_ops(txn), lambda v: fut.set(_zk_error(v)), txn)
        return await fut

    async def zwrite(self, op: tuple, tag: Any = None) -> Any:
        fut = SimFuture()
        self._zk().single(op, lambda v: fut.set(_zk_error(v)), tag)
        return await fut

    @property
    def session(self) -> int | None:
        z = self.zk
        return z.sid if z is not None and z.connected else None

    async def online(self, watch: Callable | None = None) -> set[str]:
        return set(await self.zchildren(self.c.paths.online, watch))

    # -- metadata ------------------------------------------------------------------------------------
    async def read_table(self, table: str) -> dict[str, tuple | None]:
        """SHOW CREATE TABLE on every node. A node that cannot be read raises its error, or, with the
        variant's `partial_loads` (what meta.loader does), keeps the structure memory had for it (registry
        _carry: published as UNKNOWN), then RefreshIncomplete once published (proxy/ddl.py)."""
        futs = []
        for node, be in sorted(self.c.backends.items()):
            f = SimFuture()
            be.read(table, f.set)
            futs.append((node, f))
        values = await gather([f for _, f in futs])
        out = {}
        missed = []
        before = self.memory.get(table, {})
        for (node, _), v in zip(futs, values):
            if isinstance(v, BaseException):
                if not self.c.variant.partial_loads or node not in before:
                    raise v
                v = before[node]
                missed.append(f"{node}: {v}")
            out[node] = v
        if missed and self.c.variant.partial_is_incomplete:
            self.publish(table, out)
            raise RefreshIncomplete(2003, "metadata refresh incomplete: " + "; ".join(missed))
        return out

    async def reload(self, tables: list[str], texts: dict | None = None) -> None:
        """Refresh from the texts the originator read back, or from the backends (DdlRunner.refresh: a
        table read completely needs no retry of reload_later)."""
        for t in tables:
            if texts is not None and t in texts:
                self.publish(t, dict(texts[t]))
            else:
                self.publish(t, await self.read_table(t))
            self.reloads.pop(t, None)

    def reload_later(self, tables: list[str]) -> None:
        """DdlRunner.reload_later: re-read these tables in the background until every node answers."""
        self.reloads.update(dict.fromkeys(tables))
        if self.reload_task is None or self.reload_task.finished.done:
            self.reload_task = self.spawn(self._reload_until_complete(), "reload-later")

    async def _reload_until_complete(self) -> None:
        """DdlRunner._reload_until_complete: backing off while a node stays down, each read under the
        tables' local locks (skipping a table a DDL holds: that DDL refreshes it)."""
        delay = RELOAD_RETRY_FIRST_S
        while self.reloads:
            await self.sleep(delay)
            tables = [t for t in self.reloads if t not in self.locks]
            if not tables:
                continue
            for t in tables:
                self.lock_local(t, "reload:later")
            try:
                await self.reload(tables)
                delay = RELOAD_RETRY_FIRST_S
            except BackendError:
                delay = min(2 * delay, RELOAD_RETRY_MAX_S)
            finally:
                for t in tables:
                    self.unlock_local(t, "reload:later")

    def publish(self, table: str, structure: dict[str, tuple | None]) -> None:
        self.memory[table] = structure
        self.meta_version += 1

    async def load_all(self) -> None:
        for t in self.c.tables:
            self.publish(t, await self.read_table(t))

    # -- local locks (meta/locks.py) -----------------------------------------------------------------
    def lock_local(self, table: str, owner: str, record: int = 0) -> bool:
        held = self.locks.get(table)
        if held is not None and held.owner != owner:
            return False
        self.locks[table] = LocalLock(owner, record)
        return True

    def unlock_local(self, table: str, owner: str) -> None:
        held = self.locks.get(table)
        if held is not None and held.owner == owner:
            del self.locks[table]

    def release_owned_by(self, owner: str) -> None:
        for t, lk in list(self.locks.items()):
            if lk.owner == owner:
                del self.locks[t]

    # -- the peer channel ----------------------------------------------------------------------------
    def peer_ask(self, dst: str, step: dict) -> SimFuture:
        """Send a step to dst; the future gets its (ok, message) answer, or is never set (lost)."""
        self._req += 1
        rid = self._req
        fut = SimFuture()
        self.peer_waiters[rid] = fut
        self.c.net.send(self.tag, dst, ("step", rid, self.name, step))
        return fut

    def on_peer(self, src: str, msg: Any) -> None:
        """A message from the channel: steps go to the subscriber, answers to their waiters."""
        kind = msg[0]
        if kind == "answer":
            _, rid, answer, to_inc = msg
            if to_inc != self.incarnation:
                return
            fut = self.peer_waiters.pop(rid, None)
            if fut is not None:
                fut.set(answer)
            return
        _, rid, caller, step = msg
        inc = self.incarnation

        async def handle() -> None:
            from .subscriber import on_peer_step
            answer = await on_peer_step(self, caller, step)
            self.c.net.send(self.tag, src.split("#")[0], ("answer", rid, answer, int(src.split("#")[1])))
        self.deliver_for(inc)(lambda: self.spawn(handle(), "peer-step"))

    def online_info(self) -> bytes:
        return OnlineInfo("sim", 0, 0, 0.0, self.meta_version, 0, 1, f"inc{self.incarnation}").encode()


async def wait_first(inst: Instance, futs: list[SimFuture], seconds: float) -> int | None:
    """Index of the first future set within `seconds`, None on timeout."""
    if not futs:
        return None
    t = SimFuture()
    inst.world.at(seconds, t.set, None)
    i, _ = await first(t, *futs)
    return None if i == 0 else i - 1


__all__ = ["Instance", "LocalLock", "Waker", "ZkDown", "to_model_ops", "wait_first", "Cancelled",
           "ConnectionLoss", "NodeExistsError", "SAFETY_POLL_S"]
