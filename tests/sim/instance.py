"""A proxy instance in the simulation: a process that pauses, crashes and restarts (losing its memory).

Its cluster side is production's: a zk/cluster.py Cluster (membership and join, zk/listener.py,
zk/recovery.py, zk/acks.py, zk/history.py, and zk/originator.py's ClusterDdl for its DDLs) running on
the process's own event loop on the virtual clock (aioloop.py), with the simulator's ZooKeeper client
and peer channel as its ports (ports.py). What stands in for the rest of the process is here, kept to
what the protocol sees of it:
- the metadata registry (a table's structure per node, and a version),
- meta.loader and DdlRunner.refresh/refresh_now/reload_later/running (reads and processlists of the
  simulated backends; a read that misses a node is partial, as meta.loader's), and
- the client DDL path of proxy/ddl/ddl.py around ClusterDdl (ddlpath.py).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Mapping

from meta.config import ClusterConfig, Config, ServerConfig
from meta.errors import ProxyError, RefreshIncomplete
from meta.locks import MetaLocks
from zk.cluster import Cluster
from zk.records import MARKER_PREFIX

from .aioloop import SimLoop
from .backend import BackendError
from .ports import SimPeerLinks, SimPeerServer, SimZk

if TYPE_CHECKING:
    from .cluster import SimCluster

RELOAD_RETRY_FIRST_S = 1.0   # proxy/ddl/ddl.py's
RELOAD_RETRY_MAX_S = 30.0
RESTART_AFTER_S = 1.0        # a process whose start failed is started again (its supervisor)


def to_text(cols: tuple | None) -> str | None:
    """A structure as the CREATE text the peer channel carries."""
    return None if cols is None else ",".join(cols)


def from_text(text: str | None) -> tuple | None:
    return None if text is None else tuple(text.split(","))


class _Verdict:
    def __init__(self, structure: Any) -> None:
        self.structure = structure

    def verdict(self) -> _Verdict:
        return self

    def describe(self) -> str:
        return f"as read: {self.structure}"


class SimRegistry:
    """meta/registry.py's part the drivers use: a version, listeners, and each table's structure per node."""

    def __init__(self) -> None:
        self.memory: dict[str, dict[str, tuple | None]] = {}
        self.version = 0
        self._listeners: list[Callable[[Any], None]] = []

    def add_listener(self, fn: Callable[[Any], None]) -> Callable[[], None]:
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn)

    def publish(self, table: str, structure: Mapping[str, tuple | None]) -> None:
        self.memory[table] = dict(structure)
        self.version += 1
        for fn in list(self._listeners):
            fn(None)

    def record(self, schema: str, table: str) -> _Verdict | None:
        got = self.memory.get(table)
        return None if got is None else _Verdict(got)

    def structure(self, schema: str, table: str) -> str | None:
        got = self.memory.get(table)
        return None if got is None else repr(got)


class Instance:
    """One pydble process (and its restarts)."""

    def __init__(self, cluster: SimCluster, name: str) -> None:
        self.c = cluster
        self.world = cluster.world
        self.name = name
        self.incarnation = 0
        self.state = "down"          # down | running | paused
        self.loop: SimLoop | None = None
        self.cluster: Cluster | None = None
        self.registry = SimRegistry()
        self.locks_ = MetaLocks(name)
        self.peer_server: SimPeerServer | None = None
        self.ddl_tasks: set[asyncio.Task] = set()
        self.reloads: dict[str, None] = {}
        self.reload_task: asyncio.Task | None = None

    # -- the process ---------------------------------------------------------------------------------
    @property
    def tag(self) -> str:
        return f"{self.name}#{self.incarnation}"

    @property
    def ready(self) -> bool:
        return self.state != "down" and self.cluster is not None and self.cluster.ready

    @property
    def memory(self) -> dict[str, dict[str, tuple | None]]:
        return self.registry.memory

    @property
    def locks(self) -> dict[str, Any]:
        """table -> the local lock held on it."""
        return {lk.table: lk for lk in self.locks_.all()}

    @property
    def session(self) -> int | None:
        zk = self.cluster.zk if self.cluster is not None else None
        return zk.client.sid if isinstance(zk, SimZk) and zk.client is not None and zk.connected else None

    @property
    def zk_client(self) -> Any:
        zk = self.cluster.zk if self.cluster is not None else None
        return zk.client if isinstance(zk, SimZk) else None

    def deliver(self, fn: Callable[[], None], incarnation: int | None = None) -> None:
        """Run fn on this process's loop (queued while it is paused; never once it is down or restarted)."""
        if self.state == "down" or (incarnation is not None and incarnation != self.incarnation):
            return
        self.loop.call_soon(fn)

    def deliver_for(self, incarnation: int) -> Callable[[Callable[[], None]], None]:
        return lambda fn: self.deliver(fn, incarnation)

    def spawn(self, coro: Any, name: str = "") -> asyncio.Task:
        return self.loop.spawn(coro, f"{self.tag}:{name}")

    def start(self) -> None:
        """A fresh process: empty memory, a new loop and session, then the production Cluster's start."""
        self.incarnation += 1
        self.state = "running"
        self.loop = SimLoop(self.world, self.tag)
        self.registry = SimRegistry()
        self.locks_ = MetaLocks(self.name)
        self.peer_server = None
        self.ddl_tasks = set()
        self.reloads = {}
        self.reload_task = None
        c = self.c
        cfg = Config(ServerConfig(instance=self.name, ddl_timeout_s=c.ddl_timeout_s),
                     ClusterConfig(zk="sim:2181", root=c.paths.root, cluster_id=c.paths.cluster_id,
                                   session_timeout_s=c.session_timeout_s, ack_timeout_s=c.ack_timeout_s,
                                   peer_port=0 if c.peer_on else -1, peer_secret="sim"),
                     {}, {}, {}, {}, {}, {})
        v = c.variant
        self.cluster = cl = v.cluster_class(
            cfg, self.registry, self.locks_, self.load_all, self.refresh, self.refresh_now, self.ddl_running,
            connect=lambda *_a: SimZk(self), peer_links=lambda cluster: SimPeerLinks(self, cluster),
            peer_server=lambda *a: SimPeerServer(self, *a))
        cl.listener.core = v.subscriber_core(cl.paths, self.name)
        if v.listener_class is not None:
            cl.listener = v.listener_class(cl)
        self.world.log(f"{self.tag} starts")
        c.loops_changed()
        inc = self.incarnation

        async def boot() -> None:
            try:
                await cl.start()
            except Exception as e:  # noqa: BLE001 - the process exits; its supervisor starts it again
                self.world.log(f"{self.tag} could not start: {e!r}")
                self.world.at(RESTART_AFTER_S, self._restart_failed, inc)
        self.spawn(boot(), "start")

    def _restart_failed(self, inc: int) -> None:
        if inc == self.incarnation and self.state != "down":
            self._die()
            self.start()

    def pause(self, seconds: float) -> None:
        if self.state != "running":
            return
        self.state = "paused"
        self.world.log(f"{self.tag} paused for {seconds:.2f}s")
        if self.zk_client is not None:
            self.zk_client.go_silent()
        self.c.loops_changed()
        self.world.at(seconds, self.resume, self.incarnation)

    def resume(self, inc: int) -> None:
        if inc != self.incarnation or self.state != "paused":
            return
        self.state = "running"
        self.world.log(f"{self.tag} resumes")
        if self.zk_client is not None:
            self.zk_client.speak()
        self.c.loops_changed()

    def _die(self) -> None:
        """The process is gone: its loop never runs again, its sessions go silent, its connections close."""
        self.state = "down"
        client = self.zk_client
        if client is not None:
            client.go_silent()
        self.c.loops_changed()
        if self.loop is not None:
            self.loop.abandon()
        for be in self.c.backends.values():
            be.client_gone(self.tag)
        for other in self.c.instances.values():
            if other is not self and other.cluster is not None and other.state != "down":
                other.cluster.peers.peer_gone(self.name)

    def crash(self) -> None:
        """kill -9: tasks gone, memory gone; the session expires later; its backend connections close."""
        if self.state == "down":
            return
        self.world.log(f"{self.tag} crashes")
        self._die()
        self.c.checker.on_crash(self)

    def shutdown(self) -> None:
        """End of the schedule: nothing runs any more."""
        if self.state != "down":
            self.state = "down"
            self.c.loops_changed()
            if self.loop is not None:
                self.loop.abandon()

    # -- the peer channel ------------------------------------------------------------------------------
    def on_peer(self, src: str, msg: Any) -> None:
        """A message off the net for this name: a step for the incarnation its link was opened to, or an
        answer to the incarnation that asked."""
        if msg[0] == "step":
            _, msg_id, caller, _caller_inc, to_inc, body = msg
            server = self.peer_server
            if to_inc != self.incarnation or server is None:
                return   # the connection was to a process that is gone
            self.deliver(lambda: server.on_step(src, msg_id, caller, body))
        else:
            _, msg_id, peer, to_inc, answer = msg
            cl = self.cluster
            if to_inc != self.incarnation or cl is None:
                return
            self.deliver(lambda: cl.peers.on_answer(peer, msg_id, answer))

    # -- the backends (meta.loader, DdlRunner.refresh / refresh_now / reload_later / running) --------------
    def _ask(self, call: Callable[..., Any], *args: Any) -> asyncio.Future:
        fut = self.loop.create_future()
        inc = self.incarnation

        def answer(v: Any) -> None:
            def settle() -> None:
                if not fut.done():
                    fut.set_result(v)
            self.deliver(settle, inc)
        call(*args, answer)
        return fut

    async def read_table(self, table: str) -> tuple[dict[str, tuple | None], dict[str, str]]:
        """SHOW CREATE TABLE on every node: the structures read, and the nodes missed (why)."""
        nodes = sorted(self.c.backends)
        values = await asyncio.gather(*(self._ask(self.c.backends[n].read, table) for n in nodes))
        out, missed = {}, {}
        for n, v in zip(nodes, values):
            if isinstance(v, BaseException):
                missed[n] = str(v)
            else:
                out[n] = v
        return out, missed

    async def load(self, tables: list[str]) -> None:
        """meta.loader for these tables: a node that does not answer keeps the structure memory had for it
        (published UNKNOWN) with `partial_loads`, else nothing is published; RefreshIncomplete either way
        (with the reverted fix `partial_is_incomplete` off: a partial load passes for complete)."""
        v = self.c.variant
        missed_all: dict[str, str] = {}
        for t in tables:
            got, missed = await self.read_table(t)
            if missed:
                before = self.memory.get(t, {})
                if v.partial_loads and all(n in before for n in missed):
                    self.registry.publish(t, {**got, **{n: before[n] for n in missed}})
                    if not v.partial_is_incomplete:
                        continue
                missed_all.update(missed)
                continue
            self.registry.publish(t, got)
        if missed_all:
            raise RefreshIncomplete("metadata refresh incomplete: " + "; ".join(
                f"{n}: {why}" for n, why in sorted(missed_all.items())), missed_all)

    async def load_all(self) -> None:
        """The join's load: every table, waiting (as a start does) until every node has answered."""
        while True:
            try:
                await self.load(list(self.c.tables))
                return
            except RefreshIncomplete:
                await asyncio.sleep(1.0)

    async def refresh(self, keys: list[tuple[str, str]], texts: Mapping | None = None) -> None:
        """DdlRunner.refresh: from the texts when they answer for every node, else loaded."""
        if keys and (texts is None or not self.refresh_now(keys, texts)):
            await self.load([t for _, t in keys])
        for _, t in keys:
            self.reloads.pop(t, None)

    def refresh_now(self, keys: list[tuple[str, str]], texts: Mapping) -> bool:
        """DdlRunner.refresh_now: False (nothing done) unless the texts answer for every node and table."""
        nodes = sorted(self.c.backends)
        if not all(n in texts and t in texts[n] for _, t in keys for n in nodes):
            return False
        for _, t in keys:
            self.registry.publish(t, {n: from_text(texts[n][t]) for n in nodes})
        return True

    def reload_later(self, tables: list[str]) -> None:
        """DdlRunner.reload_later: re-read these tables in the background until every node answers."""
        self.reloads.update(dict.fromkeys(tables))
        if self.reload_task is None or self.reload_task.done():
            self.reload_task = self.spawn(self._reload_until_complete(), "reload-later")

    async def _reload_until_complete(self) -> None:
        delay = RELOAD_RETRY_FIRST_S
        schema = self.c.schema
        while self.reloads:
            await asyncio.sleep(delay)
            tables = [t for t in self.reloads if self.locks_.get(schema, t) is None]
            if not tables:
                continue
            for t in tables:
                self.locks_.acquire(schema, t, "reload after a ddl missed nodes", "reload:later")
            try:
                await self.refresh([(schema, t) for t in tables])
                delay = RELOAD_RETRY_FIRST_S
            except RefreshIncomplete:
                delay = min(2 * delay, RELOAD_RETRY_MAX_S)
            finally:
                for t in tables:
                    self.locks_.release(schema, t, "reload:later")

    async def ddl_running(self, marker: str, kill: bool = False) -> list[str]:
        """DdlRunner.running: the nodes whose processlist shows the marker, or that cannot tell."""
        if not self.c.variant.reconciler_looks:
            return []   # the reverted fix: the reconciler reads the structure without looking
        nodes = sorted(self.c.backends)
        lists = await asyncio.gather(*(self._ask(self.c.backends[n].show_processlist) for n in nodes))
        out = []
        for n, rows in zip(nodes, lists):
            if isinstance(rows, BaseException):
                out.append(n)
                continue
            ids = [conn for conn, sql, _ in rows if f"{marker} */" in sql]
            if kill:
                for conn in ids:
                    await self._ask(self.c.backends[n].kill_query, conn)
            if ids:
                out.append(n)
        return out

    async def reach(self) -> str | None:
        """NodeWork.reach: every node answers before the DDL starts, or why not."""
        nodes = sorted(self.c.backends)
        values = await asyncio.gather(*(self._ask(self.c.backends[n].ping) for n in nodes))
        for v in values:
            if isinstance(v, BaseException):
                return str(v)
        return None


def is_marker(marker: str) -> bool:
    return marker.startswith(MARKER_PREFIX)


__all__ = ["BackendError", "Instance", "ProxyError", "SimRegistry", "from_text", "to_text"]
