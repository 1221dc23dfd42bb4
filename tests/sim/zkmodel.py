"""A ZooKeeper model: znodes with czxid/version, sessions that expire, ephemeral nodes, one-shot
watches, multi-op transactions with version checks, and a FIFO channel per session.

The semantics follow ZooKeeper's (and kazoo's result shapes, so code written against kazoo reads
the answers unchanged): a multi applies all or nothing; its results are a path / True / ZnodeStat per
op, or on failure RolledBackError for the ops before the failing one, that op's error, and
RuntimeInconsistency after it. Replies and watch events of one session reach its client in the order
the server produced them (a watch event before the reply to any later request), each after a random
latency; a session expires when its client has been silent (paused, crashed) for its timeout, and its
ephemeral nodes go with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from kazoo.exceptions import (BadVersionError, ConnectionLoss, NoChildrenForEphemeralsError, NodeExistsError,
                              NoNodeError, NotEmptyError, RolledBackError, RuntimeInconsistency,
                              SessionExpiredError)
from kazoo.protocol.states import ZnodeStat

from .world import World

CREATED, DELETED, CHANGED, CHILD = "CREATED", "DELETED", "CHANGED", "CHILD"


@dataclass
class Node:
    data: bytes
    czxid: int
    mzxid: int
    ephemeral_owner: int = 0
    version: int = 0
    cversion: int = 0
    children: set[str] = field(default_factory=set)

    def stat(self) -> ZnodeStat:
        return ZnodeStat(self.czxid, self.mzxid, 0, 0, self.version, self.cversion, 0, self.ephemeral_owner,
                         len(self.data), len(self.children), self.mzxid)


class Tx:
    """The ops of one multi, built like kazoo's TransactionRequest (create/delete/set_data/check)."""

    def __init__(self) -> None:
        self.ops: list[tuple] = []

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False, sequence: bool = False) -> None:
        self.ops.append(("create", path, value, ephemeral, sequence))

    def delete(self, path: str, version: int = -1) -> None:
        self.ops.append(("delete", path, version))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self.ops.append(("set", path, value, version))

    def check(self, path: str, version: int) -> None:
        self.ops.append(("check", path, version))


def parent_of(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


@dataclass
class Session:
    sid: int
    timeout: float
    client: ZkClient
    alive: bool = True


class ZkServer:
    """One ZooKeeper (the ensemble as a single linearizable log)."""

    def __init__(self, world: World, latency: tuple[float, float] = (0.0005, 0.004)) -> None:
        self.world = world
        self.latency = latency
        self.zxid = 0
        self.nodes: dict[str, Node] = {"/": Node(b"", 0, 0)}
        self.sessions: dict[int, Session] = {}
        self._next_sid = 0x1000
        self.data_watch: dict[str, set[int]] = {}
        self.child_watch: dict[str, set[int]] = {}
        # checker hooks: audit(sid, ops, tag) runs just before a transaction that goes through is applied
        self.audit: list[Callable[[int, list[tuple], Any], None]] = []
        self.committed = 0

    # -- sessions ---------------------------------------------------------------------------------
    def open_session(self, client: ZkClient, timeout: float) -> int:
        self._next_sid += 1
        sid = self._next_sid
        self.sessions[sid] = Session(sid, timeout, client)
        return sid

    def alive(self, sid: int | None) -> bool:
        s = self.sessions.get(sid or 0)
        return s is not None and s.alive

    def expire(self, sid: int, why: str = "expired") -> None:
        """The session ends: its ephemeral nodes go (each firing its watches), its client is told."""
        s = self.sessions.get(sid)
        if s is None or not s.alive:
            return
        s.alive = False
        self.world.log(f"zk session {sid:#x} {why}")
        doomed = sorted((p for p, n in self.nodes.items() if n.ephemeral_owner == sid), reverse=True)
        if doomed:
            self.zxid += 1
            for p in doomed:
                self._remove(p)
        for w in (self.data_watch, self.child_watch):
            for sids in w.values():
                sids.discard(sid)
        s.client._expired()

    # -- reads --------------------------------------------------------------------------------------
    def _watch(self, table: dict[str, set[int]], path: str, sid: int) -> None:
        table.setdefault(path, set()).add(sid)

    def read(self, sid: int, op: str, path: str, watch: bool) -> Any:
        if not self.alive(sid):
            raise SessionExpiredError()
        n = self.nodes.get(path)
        if op == "exists":
            if watch:
                self._watch(self.data_watch, path, sid)
            return n.stat() if n is not None else None
        if n is None:
            raise NoNodeError(path)
        if op == "get":
            if watch:
                self._watch(self.data_watch, path, sid)
            return n.data, n.stat()
        if op == "children":
            if watch:
                self._watch(self.child_watch, path, sid)
            return sorted(n.children)
        raise ValueError(op)

    # -- writes -------------------------------------------------------------------------------------
    def multi(self, sid: int, ops: list[tuple], tag: Any = None) -> list:
        """Apply ops all or nothing; kazoo-shaped results."""
        if not self.alive(sid):
            raise SessionExpiredError()
        staged: dict[str, Node | None] = {}   # path -> node after the ops so far (None: deleted)
        kids: dict[str, set[str]] = {}

        def node(p: str) -> Node | None:
            return staged[p] if p in staged else self.nodes.get(p)

        def children(p: str) -> set[str]:
            if p not in kids:
                n = node(p)
                kids[p] = set(n.children) if n is not None else set()
            return kids[p]

        results: list = []
        zxid = self.zxid + 1
        failed = -1
        seqs: dict[str, int] = {}
        for i, op in enumerate(ops):
            kind, path = op[0], op[1]
            try:
                n = node(path)
                if kind == "create":
                    _, _, data, ephemeral, sequence = op
                    parent = parent_of(path)
                    pn = node(parent)
                    if pn is None:
                        raise NoNodeError(parent)
                    if pn.ephemeral_owner:
                        raise NoChildrenForEphemeralsError(parent)
                    if sequence:
                        base = self.nodes[parent].cversion if parent in self.nodes else 0
                        seqs[parent] = seqs.get(parent, base) + 1
                        path = f"{path}{seqs[parent]:010d}"
                        n = node(path)
                    if n is not None:
                        raise NodeExistsError(path)
                    staged[path] = Node(data, zxid, zxid, sid if ephemeral else 0)
                    children(parent).add(path.rsplit("/", 1)[1])
                    results.append(path)
                elif kind == "delete":
                    version = op[2]
                    if n is None:
                        raise NoNodeError(path)
                    if version != -1 and n.version != version:
                        raise BadVersionError(path)
                    if children(path):
                        raise NotEmptyError(path)
                    staged[path] = None
                    children(parent_of(path)).discard(path.rsplit("/", 1)[1])
                    results.append(True)
                elif kind == "set":
                    _, _, data, version = op
                    if n is None:
                        raise NoNodeError(path)
                    if version != -1 and n.version != version:
                        raise BadVersionError(path)
                    new = Node(data, n.czxid, zxid, n.ephemeral_owner, n.version + 1, n.cversion, set(n.children))
                    staged[path] = new
                    results.append(new.stat())
                elif kind == "check":
                    version = op[2]
                    if n is None:
                        raise NoNodeError(path)
                    if version != -1 and n.version != version:
                        raise BadVersionError(path)
                    results.append(True)
                else:
                    raise ValueError(kind)
            except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError, NoChildrenForEphemeralsError) as e:
                failed = i
                results.append(e)
                break
        if failed >= 0:
            return ([RolledBackError() for _ in range(failed)] + [results[failed]]
                    + [RuntimeInconsistency() for _ in range(len(ops) - failed - 1)])
        for hook in self.audit:
            hook(sid, ops, tag)
        self.zxid = zxid
        self.committed += 1
        # apply in op order, with the real (sequential) paths
        for op, res in zip(ops, results):
            kind = op[0]
            if kind == "create":
                self._add(res, op[2], zxid, sid if op[3] else 0)
            elif kind == "delete":
                self._remove(op[1])
            elif kind == "set":
                n = self.nodes[op[1]]
                n.data, n.version, n.mzxid = op[2], n.version + 1, zxid
                self._fire(self.data_watch, op[1], CHANGED)
        return results

    def _add(self, path: str, data: bytes, zxid: int, owner: int) -> None:
        parent = parent_of(path)
        self.nodes[path] = Node(data, zxid, zxid, owner)
        p = self.nodes[parent]
        p.children.add(path.rsplit("/", 1)[1])
        p.cversion += 1
        self._fire(self.data_watch, path, CREATED)
        self._fire(self.child_watch, parent, CHILD)

    def _remove(self, path: str) -> None:
        parent = parent_of(path)
        self.nodes.pop(path, None)
        p = self.nodes.get(parent)
        if p is not None:
            p.children.discard(path.rsplit("/", 1)[1])
            p.cversion += 1
        self._fire(self.data_watch, path, DELETED)
        self._fire(self.child_watch, path, DELETED)
        self._fire(self.child_watch, parent, CHILD)

    def _fire(self, table: dict[str, set[int]], path: str, kind: str) -> None:
        sids = table.pop(path, None)
        if not sids:
            return
        which = "data" if table is self.data_watch else "child"
        for sid in sorted(sids):
            s = self.sessions.get(sid)
            if s is not None and s.alive:
                s.client._event(which, path, kind)

    def ensure_path(self, path: str) -> None:
        """Set-up only (not a client op): create path and its parents as persistent nodes."""
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            p = "/" + "/".join(parts[:i])
            if p not in self.nodes:
                self.zxid += 1
                self._add(p, b"", self.zxid, 0)

    def tree(self, under: str) -> list[str]:
        """Every path at or below `under` (for the checker)."""
        return sorted(p for p in self.nodes if p == under or p.startswith(under + "/"))


class ZkClient:
    """One instance's ZooKeeper client with one session: requests and answers travel a FIFO channel
    with random latency; nothing is delivered while the instance is paused (it reads it on resume)."""

    def __init__(self, world: World, server: ZkServer, timeout: float,
                 deliver: Callable[[Callable[[], None]], None], on_lost: Callable[[], None]) -> None:
        self.world = world
        self.server = server
        self.timeout = timeout
        self._deliver = deliver     # runs a callback in the instance (queued while it is paused)
        self._on_lost = on_lost
        self.sid = server.open_session(self, timeout)
        self.expired = False
        self.closed = False
        self.silent_since: float | None = None
        self._up = 0.0     # arrival time of the last request at the server (FIFO)
        self._down = 0.0   # arrival time of the last answer at the client (FIFO)
        self.watchers: dict[tuple[str, str], list[Callable[[str, str], None]]] = {}
        self.slow_until = 0.0   # a latency spike (a GC on the server, a slow network) until then

    @property
    def connected(self) -> bool:
        return not self.expired and not self.closed

    def _lat(self) -> float:
        lo, hi = self.server.latency
        d = self.world.rng.uniform(lo, hi)
        if self.world.now < self.slow_until:
            d += self.world.rng.uniform(0, self.slow_until - self.world.now)
        return d

    def _send(self, work: Callable[[], Any], cb: Callable[[Any], None] | None) -> None:
        """work() runs at the server on arrival; its value (or exception) comes back to cb."""
        if self.closed:
            return
        if self.expired:
            err = SessionExpiredError()
            self._answer(lambda: cb(err) if cb else None)
            return
        w = self.world
        self._up = max(w.now + self._lat(), self._up)

        def at_server() -> None:
            try:
                value = work()
            except Exception as e:  # noqa: BLE001 - the model's answers are exceptions too
                value = e
            if cb is not None:
                self._answer(lambda: cb(value))
        w.at(self._up - w.now, at_server)

    def _answer(self, fn: Callable[[], None]) -> None:
        w = self.world
        self._down = max(w.now + self._lat(), self._down)
        w.at(self._down - w.now, self._deliver, fn)

    def _event(self, which: str, path: str, kind: str) -> None:
        """A watch fired at the server: it reaches the client in channel order."""
        def fire() -> None:
            for fn in self.watchers.pop((which, path), []):
                fn(path, kind)
        self._answer(fire)

    def _expired(self) -> None:
        def lost() -> None:
            if not self.expired:
                self.expired = True
                self.watchers.clear()
                self._on_lost()
        self._answer(lost)

    # -- the API ------------------------------------------------------------------------------------
    def _add_watch(self, which: str, path: str, watch: Callable[[str, str], None] | None) -> None:
        lst = self.watchers.setdefault((which, path), [])
        if watch not in lst:
            lst.append(watch)

    def _read(self, op: str, which: str, path: str, cb: Callable[[Any], None],
              watch: Callable[[str, str], None] | None) -> None:
        """A read; its watcher joins the client's table when the successful reply arrives (zk/aio.py and
        kazoo do the same): an event the server produced before that reply (an older watch firing) does
        not consume it, so the watch this read set at the server still has its watcher."""
        def answered(value: Any) -> None:
            if watch is not None and not isinstance(value, BaseException):
                self._add_watch(which, path, watch)
            cb(value)
        self._send(lambda: self.server.read(self.sid, op, path, watch is not None), answered)

    def get(self, path: str, cb: Callable[[Any], None], watch: Callable | None = None) -> None:
        self._read("get", "data", path, cb, watch)

    def exists(self, path: str, cb: Callable[[Any], None], watch: Callable | None = None) -> None:
        self._read("exists", "data", path, cb, watch)

    def children(self, path: str, cb: Callable[[Any], None], watch: Callable | None = None) -> None:
        self._read("children", "child", path, cb, watch)

    def multi(self, ops: list[tuple], cb: Callable[[Any], None] | None, tag: Any = None) -> None:
        ops = list(ops)
        self._send(lambda: self.server.multi(self.sid, ops, tag), cb)

    def commit(self, build: Callable[[Tx], None], cb: Callable[[Any], None] | None, tag: Any = None) -> None:
        tx = Tx()
        build(tx)
        self.multi(tx.ops, cb, tag)

    def single(self, op: tuple, cb: Callable[[Any], None] | None, tag: Any = None) -> None:
        """One write, kazoo-style: its result, or its exception (not a list)."""
        def unwrap(res: Any) -> None:
            if cb is not None:
                cb(res[0] if isinstance(res, list) else res)
        self.multi([op], unwrap, tag)

    # -- liveness -----------------------------------------------------------------------------------
    def go_silent(self) -> None:
        """The instance stopped (paused or crashed): no pings; the server expires us after timeout."""
        if self.silent_since is None:
            self.silent_since = self.world.now
            since = self.silent_since
            self.world.at(self.timeout, self._maybe_expire, since)

    def _maybe_expire(self, since: float) -> None:
        if self.silent_since == since and not self.closed:
            self.server.expire(self.sid)

    def speak(self) -> None:
        """The instance runs again: pings resume (too late if the server already expired us)."""
        self.silent_since = None

    def close(self) -> None:
        """A clean close (shutdown): the server ends the session at once."""
        if not self.closed:
            self.server.expire(self.sid, "closed")
            self.closed = True


__all__ = ["ZkServer", "ZkClient", "Tx", "Node", "ConnectionLoss", "CREATED", "DELETED", "CHANGED", "CHILD"]
