"""The simulator's side of the production drivers' ports: a ZooKeeper client with zk/aio.py's API over
the ZooKeeper model (zkmodel.py), and the peer channel (zk/peers.py's PeerLinks and PeerServer) over the
lossy PeerNet. zk/cluster.py's Cluster takes them in place of the real client and sockets
(its `connect`, `peer_links` and `peer_server` parameters); nothing else of production is replaced.

Each answer reaches the process through its event loop (call_soon), so a paused process hears it
when it resumes and a crashed one never does."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable

from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import EventType, KazooState, KeeperState, WatchedEvent

from zk.peers import PeerLinks, PeerUnavailable
from zk.reads import read
from zk.records import BadRecord, DdlRecord, OnlineInfo
from zk.zklog import TxnOps

from .zkmodel import CHANGED, CHILD, CREATED, DELETED, Tx, ZkClient

if TYPE_CHECKING:
    from zk.cluster import Cluster

    from .instance import Instance

_EVENTS = {CREATED: EventType.CREATED, DELETED: EventType.DELETED, CHANGED: EventType.CHANGED,
           CHILD: EventType.CHILD}


class SimZk:
    """zk/aio.py's Zk (the part the drivers use) over the ZooKeeper model: one session per client; after
    it expired the client stays LOST (the Cluster starts a fresh one, as with the real client)."""

    def __init__(self, inst: Instance) -> None:
        self.inst = inst
        self.incarnation = inst.incarnation
        self.loop = inst.loop
        self.client: ZkClient | None = None
        self.state = KazooState.LOST
        self.auth_failed = None
        self._callbacks: list[Callable[[str], None]] = []
        self._wrapped: dict[Any, Callable[[str, str], None]] = {}   # one model watcher per production watcher

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self, timeout: float) -> None:
        inst = self.inst
        self.client = ZkClient(inst.world, inst.c.zk, inst.c.session_timeout_s, inst.deliver_for(self.incarnation),
                               self._lost)
        inst.world.log(f"{inst.tag} zk session {self.client.sid:#x} opened")
        self._set_state(KazooState.CONNECTED)

    async def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        self._set_state(KazooState.LOST)

    def _lost(self) -> None:
        """The model told us the session expired (delivered on our loop)."""
        self.inst.world.log(f"{self.inst.tag} lost its zk session")
        self._wrapped.clear()
        self._set_state(KazooState.LOST)

    def _set_state(self, state: str) -> None:
        if state == self.state:
            return
        self.state = state
        for fn in list(self._callbacks):
            self.loop.call_soon(fn, state)

    def on_state(self, fn: Callable[[str], None]) -> None:
        self._callbacks.append(fn)

    @property
    def connected(self) -> bool:
        """A dead process's client (its coroutines being closed) sends nothing."""
        return (self.client is not None and self.client.connected and self.state == KazooState.CONNECTED
                and self.inst.state != "down" and self.inst.incarnation == self.incarnation)

    @property
    def session_id(self) -> int | None:
        return self.client.sid if self.connected else None

    @property
    def session_timeout_s(self) -> float:
        return self.inst.c.session_timeout_s

    async def wait_connected(self, timeout: float) -> bool:
        return self.connected

    # -- requests -------------------------------------------------------------------------------
    def _watch(self, watch: Callable | None) -> Callable[[str, str], None] | None:
        if watch is None:
            return None
        w = self._wrapped.get(watch)
        if w is None:
            def w(path: str, kind: str, watch: Callable = watch) -> None:
                self._wrapped.pop(watch, None)
                watch(WatchedEvent(_EVENTS[kind], KeeperState.CONNECTED, path))
            self._wrapped[watch] = w
        return w

    def _request(self, method: str, *args: Any, **kw: Any) -> asyncio.Future:
        fut = self.loop.create_future()
        if not self.connected:
            fut.set_exception(ConnectionLoss("not connected to ZooKeeper"))
            return fut

        def answer(v: Any) -> None:
            if fut.done():
                return
            if isinstance(v, BaseException):
                fut.set_exception(v)
            else:
                fut.set_result(v)
        getattr(self.client, method)(*args, answer, **kw)
        return fut

    async def get(self, path: str, watch: Callable | None = None) -> tuple[bytes, Any]:
        return await self._request("get", path, watch=self._watch(watch))

    async def get_or_none(self, path: str, watch: Callable | None = None) -> tuple[bytes, Any] | None:
        try:
            return await self.get(path, watch)
        except NoNodeError:
            return None

    async def exists(self, path: str, watch: Callable | None = None) -> Any:
        return await self._request("exists", path, watch=self._watch(watch))

    async def children(self, path: str, watch: Callable | None = None) -> list[str]:
        try:
            return await self._request("children", path, watch=self._watch(watch))
        except NoNodeError:
            return []

    async def _single(self, op: tuple) -> Any:
        res = await self._request("multi", [op], tag=None)
        if isinstance(res[0], BaseException):
            raise res[0]
        return res[0]

    async def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
                     makepath: bool = True) -> str:
        try:
            return await self._single(("create", path, value, ephemeral, sequence))
        except NoNodeError:
            parent = path.rsplit("/", 1)[0]
            if not makepath or not parent:
                raise
        await self.ensure_path(parent)
        return await self._single(("create", path, value, ephemeral, sequence))

    async def set(self, path: str, value: bytes, version: int = -1) -> Any:
        return await self._single(("set", path, value, version))

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> bool:
        try:
            if recursive:
                for child in await self.children(path):
                    await self.delete(f"{path}/{child}", recursive=True)
            await self._single(("delete", path, version))
            return True
        except NoNodeError:
            return False
        except NotEmptyError:
            return await self.delete(path, version, recursive=True) if recursive else False

    async def ensure_path(self, path: str) -> None:
        if path in ("", "/"):
            return
        try:
            await self.create(path)
        except NodeExistsError:
            pass

    def commit_now(self, build: Callable[[Tx], None], timeout: float = 0.0) -> asyncio.Future:
        if not self.connected:
            raise ConnectionLoss("not connected to ZooKeeper")
        tx = Tx()
        build(tx)
        return self._request("multi", tx.ops, tag=build.txn if isinstance(build, TxnOps) else None)

    async def commit(self, build: Callable[[Tx], None]) -> list[Any]:
        if not self.connected:
            raise ConnectionLoss("not connected to ZooKeeper")
        return await self.commit_now(build)


# -- the peer channel ---------------------------------------------------------------------------------
class _SimLink:
    """One open link to a peer process (an incarnation): answers matched by id; it breaks (every
    pending ask fails) when the net drops a message on it or the peer process is gone."""

    def __init__(self, links: SimPeerLinks, instance: str, incarnation: int) -> None:
        self.links = links
        self.instance = instance
        self.incarnation = incarnation
        self.closed = False
        self.pending: dict[int, asyncio.Future] = {}

    def send(self, msg_id: int, body: Any) -> asyncio.Future:
        me = self.links.inst
        fut = me.loop.create_future()
        if self.closed:
            fut.set_exception(PeerUnavailable(f"link to {self.instance} closed"))
            return fut
        self.pending[msg_id] = fut
        me.c.net.send(me.tag, self.instance, ("step", msg_id, me.name, me.incarnation, self.incarnation, body),
                      on_drop=self.break_)
        return fut

    def answer(self, msg_id: int, answer: tuple[bool | None, str]) -> None:
        fut = self.pending.pop(msg_id, None)
        if fut is not None and not fut.done():
            fut.set_result(answer)

    def break_(self) -> None:
        """The connection ended (a lost message means a broken TCP connection)."""
        if self.closed or self.links.inst.loop is None or self.links.inst.loop.is_closed():
            return
        self.closed = True
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(PeerUnavailable(f"link to {self.instance} lost"))

    def close(self) -> None:
        self.break_()


class SimPeerLinks(PeerLinks):
    """zk/peers.py's PeerLinks itself (on-demand links, prepare(), ask, close); only the transport is the
    simulated net: a link is opened after reading the peer's online node, as the real one does."""

    def __init__(self, inst: Instance, cluster: Cluster) -> None:
        super().__init__(cluster)
        self.inst = inst

    async def _open(self, instance: str) -> _SimLink:
        c = self.cluster
        zk = c.zk
        if zk is None or not zk.connected:
            raise PeerUnavailable("no ZooKeeper session to look the peer up")
        got = await read(zk, c.paths.online_instance(instance), OnlineInfo)
        if got is None or got.value is None or got.value.peer_port <= 0:
            raise PeerUnavailable(f"{instance} is not online or has no peer channel")
        other = self.inst.c.instances.get(instance)
        # the connect: a round trip on the net; it reaches whichever process of that name listens now
        await asyncio.sleep(self.inst.world.rng.uniform(*self.inst.c.net.delay) * 2)
        if other is None or other.state == "down" or other.peer_server is None:
            raise PeerUnavailable(f"cannot connect to {instance}")
        link = _SimLink(self, instance, other.incarnation)
        old = self.links.get(instance)
        if old is not None:
            old.close()
        self.links[instance] = link
        return link

    async def _quiet_open(self, instance: str) -> None:
        try:
            await self.link(instance)
        except Exception:  # noqa: BLE001 - as PeerLinks._quiet_open: best effort
            pass

    def step(self, path: str, czxid: int, record: str, texts: dict | None, final: bool = False) -> tuple[int, Any]:
        msg_id = next(self._ids)
        return msg_id, (path, czxid, record, texts, final)

    def send_now(self, instance: str, step: tuple[int, Any]) -> asyncio.Future | None:
        link = self.links.get(instance)
        if link is None or link.closed:
            return None
        return link.send(*step)

    def on_answer(self, src: str, msg_id: int, answer: tuple[bool | None, str]) -> None:
        link = self.links.get(src)
        if link is not None:
            link.answer(msg_id, answer)

    def peer_gone(self, name: str) -> None:
        """The process at the other end died or restarted: its connection is reset."""
        link = self.links.get(name)
        if link is not None:
            link.break_()


class SimPeerServer:
    """zk/peers.py's PeerServer: steps in, handed to the listener (on the spot for a final step the
    `quick` handler can answer, else as a task, as _Inbound does); the answer goes back on the net."""

    def __init__(self, inst: Instance, instance: str, cluster_id: str, key: bytes, handler: Callable,
                 meta_version: Callable, quick: Callable | None = None, pause: Callable | None = None) -> None:
        self.inst = inst   # `pause` (the real server's test hook) is not used: the net delays steps here
        self.instance = instance
        self.handler = handler
        self.quick = quick
        self.meta_version = meta_version
        self.port = 0
        self.tasks: set[asyncio.Task] = set()

    async def start(self, host: str, port: int) -> int:
        self.inst.peer_server = self
        self.port = 7000
        return self.port

    async def stop(self) -> None:
        for t in list(self.tasks):
            t.cancel()
        if self.inst.peer_server is self:
            self.inst.peer_server = None

    def on_step(self, src_tag: str, msg_id: int, caller: str, body: Any) -> None:
        """A step arrived (on our loop): answer it (SimNet carries the answer back to the caller's link)."""
        path, czxid, record, texts, final = body
        try:
            rec = DdlRecord.decode(record.encode())
        except BadRecord:
            return
        if final and self.quick is not None:
            answer = self.quick(caller, path, czxid, rec, texts)
            if answer is not None:
                self._reply(src_tag, msg_id, answer)
                return

        async def run() -> None:
            try:
                answer = await self.handler(caller, path, czxid, rec, texts, final)
            except Exception as e:  # noqa: BLE001 - as _Inbound._run: the caller falls back to ZooKeeper
                answer = (None, f"step failed here: {e.__class__.__name__}")
            self._reply(src_tag, msg_id, answer)
        task = asyncio.get_running_loop().create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _reply(self, src_tag: str, msg_id: int, answer: tuple) -> None:
        inst = self.inst
        name, inc = src_tag.split("#")
        inst.c.net.send(inst.tag, name, ("answer", msg_id, inst.name, int(inc), tuple(answer)))


__all__ = ["SimPeerLinks", "SimPeerServer", "SimZk"]
