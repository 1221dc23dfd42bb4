"""The direct DDL channel between instances: the originator hands each step to its peers over TCP.

ZooKeeper stays the record of truth (locks, the ddl record and its decision, the acks an operator
sees), but a ZooKeeper watch, a read and an ack write per instance per step cost several round
trips through kazoo's threads. So the originator also sends each step straight to every peer
(`PeerLinks.ask`) and counts a peer's reply as its ack; the peer writes its ZooKeeper ack right
after replying. Anything that goes wrong here (no channel, a broken link, a silent peer) only
means the originator falls back to the ZooKeeper acks for that instance: the channel is a fast
path, never the only path.

Each instance listens on `[cluster] peer_port` (0: any free port) and advertises the port and a
random token in online/{instance}; a caller must present that token, so only those who can read
the cluster's znodes (digest ACLs when `[cluster] auth` is set) can use the channel.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import secrets
from typing import TYPE_CHECKING, Awaitable, Callable

import structlog
from kazoo.exceptions import KazooException

from . import wire
from .aio import ZkTimeout
from .records import BadRecord, DdlRecord, OnlineInfo

if TYPE_CHECKING:
    from .cluster import Cluster

log = structlog.get_logger("pydble.cluster.peers")

CONNECT_TIMEOUT_S = 1.0
HELLO_TIMEOUT_S = 5.0          # a connection that does not authenticate in time is dropped
MAX_STEPS_IN_FLIGHT = 256      # per connection; more is a misbehaving peer

StepHandler = Callable[[str, int, DdlRecord, "dict | None", bool], Awaitable[tuple["bool | None", str]]]
# a final step answered on the spot, without a task; None: it needs StepHandler
QuickHandler = Callable[[str, int, DdlRecord, "dict | None"], "tuple[bool, str] | None"]


class PeerUnavailable(Exception):
    """No usable channel to that instance: use its ZooKeeper ack instead."""


# --- the receiving side ------------------------------------------------------------------------


class _Inbound(asyncio.Protocol):
    """One authenticated caller: reads steps, runs them, writes replies (in any order, by id)."""

    def __init__(self, server: PeerServer) -> None:
        self.server = server
        self.decoder = wire.FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.caller: str | None = None
        self.tasks: set[asyncio.Task] = set()
        self._hello_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.inbound.add(self)
        self._hello_timer = asyncio.get_running_loop().call_later(HELLO_TIMEOUT_S, self._drop, "no hello in time")

    def data_received(self, data: bytes) -> None:
        try:
            msgs = self.decoder.feed(data)
        except wire.WireError as e:
            self._drop(str(e))
            return
        for msg in msgs:
            if self.caller is None:
                self._hello(msg)
            elif msg["t"] == wire.STEP:
                self._step(msg)
            else:
                self._drop(f"unexpected message {msg['t']!r}")
            if self.transport is None or self.transport.is_closing():
                return

    def _hello(self, msg: dict) -> None:
        srv = self.server
        token = msg.get("token")
        if (msg["t"] != wire.HELLO or msg.get("cluster") != srv.cluster_id or not isinstance(token, str)
                or not hmac.compare_digest(token.encode(), srv.token.encode())):
            self._drop("bad hello (wrong cluster or token)")
            return
        self.caller = str(msg.get("from", "?"))
        if self._hello_timer is not None:
            self._hello_timer.cancel()

    def _step(self, msg: dict) -> None:
        try:
            msg_id = int(msg["id"])
            path = str(msg["path"])
            czxid = int(msg["czxid"])
            rec = DdlRecord.decode(str(msg["record"]).encode())
            texts = msg.get("texts")
            if texts is not None and not _texts_ok(texts):
                raise ValueError("bad texts")
            final = msg.get("final", False) is True
        except (KeyError, TypeError, ValueError, BadRecord) as e:
            self._drop(f"bad step: {e}")
            return
        if len(self.tasks) >= MAX_STEPS_IN_FLIGHT:
            self._drop("too many steps in flight")
            return
        if final and self.server.quick is not None:
            try:
                answer = self.server.quick(path, czxid, rec, texts)
            except Exception:  # noqa: BLE001 - the usual path below tries again and reports
                log.exception("peer step failed on the spot", instance=self.server.instance, path=path)
                answer = None
            if answer is not None:
                self._reply(msg_id, *answer)
                return
        task = asyncio.get_running_loop().create_task(self._run(msg_id, path, czxid, rec, texts, final))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, msg_id: int, path: str, czxid: int, rec: DdlRecord, texts: dict | None,
                   final: bool) -> None:
        try:
            ok, message = await self.server.handler(path, czxid, rec, texts, final)
        except Exception as e:  # noqa: BLE001 - the caller falls back to ZooKeeper
            log.exception("peer step failed", instance=self.server.instance, caller=self.caller, path=path)
            ok, message = None, f"step failed here: {e.__class__.__name__}"
        self._reply(msg_id, ok, message)

    def _reply(self, msg_id: int, ok: bool | None, message: str) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(wire.encode(wire.reply(msg_id, ok, message, self.server.meta_version())))

    def _drop(self, why: str) -> None:
        if self.transport is not None and not self.transport.is_closing():
            log.warning("peer connection dropped", instance=self.server.instance, caller=self.caller, reason=why)
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        self.server.inbound.discard(self)
        self.transport = None  # running steps finish (and ack through ZooKeeper); their replies are dropped


def _texts_ok(texts: object) -> bool:
    """node -> table -> CREATE text or null."""
    return isinstance(texts, dict) and all(
        isinstance(n, str) and isinstance(tables, dict)
        and all(isinstance(t, str) and (v is None or isinstance(v, str)) for t, v in tables.items())
        for n, tables in texts.items())


class PeerServer:
    """Listens for peers' DDL steps and hands them to the ddl listener."""

    def __init__(self, instance: str, cluster_id: str, handler: StepHandler,
                 meta_version: Callable[[], int], quick: QuickHandler | None = None) -> None:
        self.instance = instance
        self.cluster_id = cluster_id
        self.handler = handler
        self.quick = quick
        self.meta_version = meta_version
        self.token = secrets.token_hex(16)
        self.port = 0
        self.inbound: set[_Inbound] = set()
        self._server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the port (a free one when port is 0)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Inbound(self), host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        """Stop listening and drop every connection; running steps are cancelled."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.inbound):
            for t in list(conn.tasks):
                t.cancel()
            if conn.transport is not None:
                conn.transport.close()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 2)
            except asyncio.TimeoutError:
                pass
            self._server = None


# --- the calling side --------------------------------------------------------------------------


class _Link(asyncio.Protocol):
    """One connection to a peer: steps out, replies matched to their futures by id."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self.decoder = wire.FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.pending: dict[int, asyncio.Future] = {}
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, msg_id: int, frame: bytes) -> asyncio.Future:
        """Write an encoded step (`msg_id` inside it); the future gives the peer's (ok, message)."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        if self.closed or self.transport is None:
            fut.set_exception(PeerUnavailable(f"link to {self.instance} is closed"))
            return fut
        self.pending[msg_id] = fut
        fut.add_done_callback(lambda _f: self.pending.pop(msg_id, None))
        self.transport.write(frame)
        return fut

    def data_received(self, data: bytes) -> None:
        try:
            msgs = self.decoder.feed(data)
        except wire.WireError as e:
            log.warning("bad data from peer; dropping the link", peer=self.instance, error=str(e))
            if self.transport is not None:
                self.transport.close()
            return
        for msg in msgs:
            fut = self.pending.pop(msg.get("id"), None) if isinstance(msg.get("id"), int) else None
            if fut is not None and not fut.done():
                ok = msg.get("ok")
                fut.set_result((ok if isinstance(ok, bool) else None, str(msg.get("message", ""))))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(PeerUnavailable(f"link to {self.instance} closed"))
        self.pending.clear()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class PeerLinks:
    """This instance's links to the others, opened on demand (or ahead of time) and kept."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.links: dict[str, _Link] = {}
        self._opening: dict[str, asyncio.Task] = {}
        self._ids = itertools.count(1)

    def live(self) -> set[str]:
        """Instances with an open link now."""
        return {name for name, link in self.links.items() if not link.closed}

    async def _open(self, instance: str) -> _Link:
        c = self.cluster
        zk = c.zk
        if zk is None or not zk.connected:
            raise PeerUnavailable("no ZooKeeper session to look the peer up")
        got = await zk.get_or_none(c.paths.online_instance(instance))
        if got is None:
            raise PeerUnavailable(f"{instance} is not online")
        try:
            info = OnlineInfo.decode(got[0])
        except BadRecord as e:
            raise PeerUnavailable(f"{instance}: {e}") from None
        if info.peer_port <= 0 or not info.peer_token:
            raise PeerUnavailable(f"{instance} has no peer channel")
        loop = asyncio.get_running_loop()
        try:
            _, link = await asyncio.wait_for(
                loop.create_connection(lambda: _Link(instance), info.host, info.peer_port), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as e:
            raise PeerUnavailable(f"cannot connect to {instance} at {info.host}:{info.peer_port}: {e}") from None
        assert link.transport is not None
        link.transport.write(wire.encode(wire.hello(c.cc.cluster_id, c.instance, info.peer_token)))
        old = self.links.get(instance)
        if old is not None:
            old.close()
        self.links[instance] = link
        return link

    async def link(self, instance: str) -> _Link:
        """An open link to the instance (one connect at a time per instance)."""
        link = self.links.get(instance)
        if link is not None and not link.closed:
            return link
        task = self._opening.get(instance)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._open(instance))
            self._opening[instance] = task
        try:
            return await asyncio.shield(task)
        finally:
            if task.done() and self._opening.get(instance) is task:
                del self._opening[instance]

    def prepare(self, instances: set[str]) -> None:
        """Open links ahead of the next DDL (best effort, in the background); close links to the gone."""
        for name in list(self.links):
            if name not in instances:
                self.links.pop(name).close()
        for name in instances - self.live():
            if name not in self._opening:
                self.cluster._spawn(self._quiet_open(name))

    async def _quiet_open(self, instance: str) -> None:
        try:
            await self.link(instance)
        except (PeerUnavailable, KazooException, ZkTimeout) as e:
            log.debug("peer link not opened", instance=self.cluster.instance, peer=instance, error=str(e))

    def step(self, path: str, czxid: int, record: str, texts: dict | None, final: bool = False) -> tuple[int, bytes]:
        """A step (`record`: the DdlRecord's JSON) encoded once for every peer it goes to: ids only
        need to be unique per link, so one id serves them all."""
        msg_id = next(self._ids)
        return msg_id, wire.encode(wire.step(msg_id, path, czxid, record, texts, final))

    async def ask(self, instance: str, step: tuple[int, bytes]) -> tuple[bool | None, str]:
        """Send a step (PeerLinks.step), opening the link first if need be; (ok, message) as the
        peer's ack, ok None when it wants the ZooKeeper path."""
        link = await self.link(instance)
        return await link.send(*step)

    def send_now(self, instance: str, step: tuple[int, bytes]) -> asyncio.Future | None:
        """Write a step at once on an open link (no task, no loop turn); None when there is none."""
        link = self.links.get(instance)
        if link is None or link.closed:
            return None
        return link.send(*step)

    def close(self) -> None:
        """Drop every link (the instance is leaving or re-joining)."""
        for task in self._opening.values():
            task.cancel()
        self._opening.clear()
        for link in self.links.values():
            link.close()
        self.links.clear()


__all__ = ["PeerLinks", "PeerServer", "PeerUnavailable"]
