"""The direct DDL channel between instances: the originator hands each step to its peers over TCP.

ZooKeeper stays the record of truth (locks, the ddl record and its decision, the acks an operator
sees), but a ZooKeeper watch, a read and an ack write per instance per step cost several round
trips through kazoo's threads. So the originator also sends each step straight to every peer
(`PeerLinks.ask`) and counts a peer's reply as its ack; the peer writes its ZooKeeper ack right
after replying. Anything that goes wrong here (no channel, a broken link, a silent peer) only
means the originator falls back to the ZooKeeper acks for that instance: the channel is a fast
path, never the only path.

Each instance listens on `[cluster] peer_port` (0: any free port) and advertises the port in
online/{instance}. Both ends prove they hold the channel key (`[cluster] peer_secret`, or `auth`),
which no znode holds, and every frame is sealed with it (zk/wire.py); without a key the channel
stays off. What a step carries is then checked against the ZooKeeper record it names before it
is applied (zk/listener.py), and `caller` (the authenticated hello's name) must be its originator.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING, Awaitable, Callable

import structlog
from kazoo.exceptions import KazooException

from . import wire
from .aio import ZkTimeout
from .reads import read
from .records import BadRecord, DdlRecord, OnlineInfo

if TYPE_CHECKING:
    from .port import ClusterPort

log = structlog.get_logger("pydble.cluster.peers")

CONNECT_TIMEOUT_S = 1.0
HELLO_TIMEOUT_S = 5.0          # a connection that does not authenticate in time is dropped
MAX_STEPS_IN_FLIGHT = 256      # per connection; more is a misbehaving peer

# (caller, path, czxid, record, texts, final)
StepHandler = Callable[[str, str, int, DdlRecord, "dict | None", bool], Awaitable[tuple["bool | None", str]]]
# a final step answered on the spot, without a task; None: it needs StepHandler
QuickHandler = Callable[[str, str, int, DdlRecord, "dict | None"], "tuple[bool, str] | None"]


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
        self.sealer: wire.Sealer | None = None
        self.challenge = wire.challenge()
        self.tasks: set[asyncio.Task] = set()
        self._hello_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.inbound.add(self)
        self._hello_timer = asyncio.get_running_loop().call_later(HELLO_TIMEOUT_S, self._drop, "no hello in time")
        self.transport.write(wire.encode(self.challenge))

    def data_received(self, data: bytes) -> None:
        try:
            for frame in self.decoder.frames(data):
                if self.sealer is None:
                    self._hello(wire.parse(frame))
                else:
                    msg = self.sealer.open(frame)
                    if msg["t"] != wire.STEP:
                        raise wire.WireError(f"unexpected message {msg['t']!r}")
                    self._step(msg)
                if self.transport is None or self.transport.is_closing():
                    return
        except wire.WireError as e:
            self._drop(str(e))

    def _hello(self, msg: dict) -> None:
        srv = self.server
        self.sealer = wire.check_hello(srv.key, srv.cluster_id, self.challenge, msg)
        if self.sealer is None:
            self._drop("bad hello (wrong cluster or key)")
            return
        self.caller = str(msg["from"])
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
        if final and self.server.pause is not None:   # tests only: the step arrives late, then goes its way
            self._spawn(self._late(msg_id, path, czxid, rec, texts))
            return
        self._dispatch(msg_id, path, czxid, rec, texts, final)

    def _dispatch(self, msg_id: int, path: str, czxid: int, rec: DdlRecord, texts: dict | None,
                  final: bool) -> None:
        if final and self.server.quick is not None:
            try:
                answer = self.server.quick(self.caller or "", path, czxid, rec, texts)
            except Exception:  # noqa: BLE001 - the usual path below tries again and reports
                log.exception("peer step failed on the spot", instance=self.server.instance, path=path)
                answer = None
            if answer is not None:
                self._reply(msg_id, *answer)
                return
        self._spawn(self._run(msg_id, path, czxid, rec, texts, final))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _late(self, msg_id: int, path: str, czxid: int, rec: DdlRecord, texts: dict | None) -> None:
        assert self.server.pause is not None
        await self.server.pause("peer_final_step")
        self._dispatch(msg_id, path, czxid, rec, texts, True)

    async def _run(self, msg_id: int, path: str, czxid: int, rec: DdlRecord, texts: dict | None,
                   final: bool) -> None:
        try:
            ok, message = await self.server.handler(self.caller or "", path, czxid, rec, texts, final)
        except Exception as e:  # noqa: BLE001 - the caller falls back to ZooKeeper
            log.exception("peer step failed", instance=self.server.instance, caller=self.caller, path=path)
            ok, message = None, f"step failed here: {e.__class__.__name__}"
        self._reply(msg_id, ok, message)

    def _reply(self, msg_id: int, ok: bool | None, message: str) -> None:
        if self.transport is not None and not self.transport.is_closing() and self.sealer is not None:
            reply = wire.reply(msg_id, ok, message, self.server.meta_version())
            self.transport.write(self.sealer.seal(wire.dump(reply)))

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

    def __init__(self, instance: str, cluster_id: str, key: bytes, handler: StepHandler,
                 meta_version: Callable[[], int], quick: QuickHandler | None = None,
                 pause: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.instance = instance
        self.pause = pause   # tests only (cli/pause.py): a final step is handled this much late
        self.cluster_id = cluster_id
        self.key = key
        self.handler = handler
        self.quick = quick
        self.meta_version = meta_version
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

    def __init__(self, instance: str, key: bytes, cluster_id: str, me: str) -> None:
        self.instance = instance
        self._hello = (key, cluster_id, me)
        self.decoder = wire.FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.sealer: wire.Sealer | None = None
        self.ready: asyncio.Future = asyncio.get_running_loop().create_future()   # the hello is sent
        self.pending: dict[int, asyncio.Future] = {}
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, msg_id: int, body: bytes) -> asyncio.Future:
        """Seal and write a step (wire.dump(), `msg_id` inside it); the future gives the peer's (ok, message)."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        if self.closed or self.transport is None or self.sealer is None:
            fut.set_exception(PeerUnavailable(f"link to {self.instance} is closed"))
            return fut
        self.pending[msg_id] = fut
        fut.add_done_callback(lambda _f: self.pending.pop(msg_id, None))
        self.transport.write(self.sealer.seal(body))
        return fut

    def data_received(self, data: bytes) -> None:
        try:
            for frame in self.decoder.frames(data):
                if self.sealer is None:
                    self._answer_challenge(wire.parse(frame))
                else:
                    self._reply(self.sealer.open(frame))
        except wire.WireError as e:
            log.warning("bad data from peer; dropping the link", peer=self.instance, error=str(e))
            if self.transport is not None:
                self.transport.close()

    def _answer_challenge(self, msg: dict) -> None:
        if msg["t"] != wire.CHALLENGE or not isinstance(msg.get("nonce"), str):
            raise wire.WireError(f"expected a challenge, got {msg['t']!r}")
        hello, self.sealer = wire.hello(*self._hello, msg)
        assert self.transport is not None
        self.transport.write(wire.encode(hello))
        if not self.ready.done():
            self.ready.set_result(None)

    def _reply(self, msg: dict) -> None:
        fut = self.pending.pop(msg.get("id"), None) if isinstance(msg.get("id"), int) else None
        if fut is not None and not fut.done():
            ok = msg.get("ok")
            fut.set_result((ok if isinstance(ok, bool) else None, str(msg.get("message", ""))))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.ready.done():
            self.ready.set_exception(PeerUnavailable(f"link to {self.instance} closed before its challenge"))
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(PeerUnavailable(f"link to {self.instance} closed"))
        self.pending.clear()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class PeerLinks:
    """This instance's links to the others, opened on demand (or ahead of time) and kept."""

    def __init__(self, cluster: ClusterPort) -> None:
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
        got = await read(zk, c.paths.online_instance(instance), OnlineInfo)
        if got is None:
            raise PeerUnavailable(f"{instance} is not online")
        if got.value is None:
            raise PeerUnavailable(f"{instance}: {got.error}")
        info = got.value
        key = c.peer_key
        if info.peer_port <= 0 or key is None:
            raise PeerUnavailable(f"{instance} has no peer channel")
        loop = asyncio.get_running_loop()
        try:
            _, link = await asyncio.wait_for(loop.create_connection(
                lambda: _Link(instance, key, c.cc.cluster_id, c.instance), info.host, info.peer_port),
                CONNECT_TIMEOUT_S)
            await asyncio.wait_for(asyncio.shield(link.ready), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as e:
            raise PeerUnavailable(f"cannot connect to {instance} at {info.host}:{info.peer_port}: {e}") from None
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
        for name in sorted(instances - self.live()):   # in name order: a run replays exactly
            if name not in self._opening:
                self.cluster._spawn(self._quiet_open(name))

    async def _quiet_open(self, instance: str) -> None:
        try:
            await self.link(instance)
        except (PeerUnavailable, KazooException, ZkTimeout) as e:
            log.debug("peer link not opened", instance=self.cluster.instance, peer=instance, error=str(e))

    def step(self, path: str, czxid: int, record: str, texts: dict | None, final: bool = False) -> tuple[int, bytes]:
        """A step (`record`: the DdlRecord's JSON) encoded once for every peer it goes to (each link
        seals it with its own key): ids only need to be unique per link, so one id serves them all."""
        msg_id = next(self._ids)
        return msg_id, wire.dump(wire.step(msg_id, path, czxid, record, texts, final))

    async def ask(self, instance: str, step: tuple[int, bytes]) -> tuple[bool | None, str]:
        """Send a step (PeerLinks.step), opening the link first if need be; (ok, message) as the
        peer's ack, ok None when it wants the ZooKeeper path."""
        link = await self.link(instance)
        return await link.send(*step)

    def send_now(self, instance: str, step: tuple[int, bytes]) -> asyncio.Future | None:
        """Write a step at once on an open link (no task, no loop turn); None when there is none."""
        link = self.links.get(instance)
        if link is None or link.closed or link.sealer is None:
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
