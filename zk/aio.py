"""A ZooKeeper session driven by the event loop itself: kazoo's codec and types, no kazoo thread.

kazoo's client runs its connection in a thread of its own, so every call crosses two thread hops
and the GIL each way: 0.8-1.2 ms per round trip here against 0.15-0.7 ms for the same bytes written
from the loop (bench/RESULTS.md, session 5), and a cluster DDL has two such writes on its critical
path. This client writes each request on the loop's own transport and settles its future straight
from `data_received`; the wire format is zk/jute.py plus kazoo's serializers, and callers see
kazoo's states, stats and exceptions, so it behaves like the KazooClient it replaces:

- states go LOST → CONNECTED; a dropped connection is SUSPENDED (requests wait for it, bounded);
  the same session back is CONNECTED again; an expired one is LOST, then a new session CONNECTED;
- a dropped connection fails the requests in flight with ConnectionLoss and fires every watch with
  a NONE event (watches are one-shot and gone: the owner re-arms them), as kazoo does;
- replies come back in the order of the requests (ZooKeeper answers one connection in order): a reply
  that is not to the oldest request still waiting is a protocol error that drops the connection;
- a request made while disconnected waits (bounded) and goes out, in the order made, once the same
  session is back; a request made under one session never goes out under the next (SessionExpiredError);
- the connect and read timeouts come from the session timeout the server negotiated (kazoo's
  session/len(hosts) and 2/3 of it), and `session_timeout_s` says what it was;
- every call is bounded (OP_TIMEOUT_S), and a connection that hears nothing for two thirds of the
  session timeout is dropped (a ping goes out after a third of it without a request);
- with credentials, a connection serves requests only once ZooKeeper has accepted them; when it
  refuses them (AUTH_FAILED) the client stops for good, as kazoo's does: LOST, every call failing with
  AuthFailedError (`auth_failed` says why), and no reconnect loop.

Watch events and answers reach their callers in the order ZooKeeper sent them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any, Callable

import structlog
from kazoo.exceptions import (AuthFailedError, ConnectionClosedError, ConnectionDropped, ConnectionLoss,
                              NodeExistsError, NoNodeError, NotEmptyError, SessionExpiredError)
from kazoo.hosts import collect_hosts
from kazoo.protocol.serialization import (CheckVersion, Create, Delete, Exists, GetChildren, GetData, SetData,
                                          Transaction)
from kazoo.protocol.states import EVENT_TYPE_MAP, EventType, KazooState, KeeperState, WatchedEvent, ZnodeStat
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from . import jute

OP_TIMEOUT_S = 5.0
RETRY_DELAY_S, RETRY_MAX_S = 0.2, 1.0   # between rounds of connection attempts
CLOSE_WAIT_S = 1.0                       # how long stop() waits for ZooKeeper to confirm the close

log = structlog.get_logger("pydble.zk")


class ZkTimeout(Exception):
    """A ZooKeeper call did not complete within its bound."""


class _Link(asyncio.Protocol):
    """One TCP connection to a server: whole frames to the session, its end reported once."""

    def __init__(self, on_frame: Callable[[_Link, bytes], None], on_end: Callable[[_Link, Exception], None]) -> None:
        self.framer = jute.Framer()
        self.on_frame = on_frame
        self.on_end = on_end
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.ended: asyncio.Future = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.framer.feed(data)
        except jute.FrameError as e:
            self.abort(ConnectionDropped(str(e)))
            return
        for payload in frames:
            if self.closed:
                return
            try:
                self.on_frame(self, payload)
            except jute.FrameError as e:
                self.abort(ConnectionDropped(str(e)))
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(ConnectionDropped(f"connection closed: {exc}" if exc else "connection closed by the server"))

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def abort(self, why: Exception) -> None:
        if self.transport is not None:
            self.transport.abort()
        self._end(why)

    def _end(self, why: Exception) -> None:
        if not self.closed:
            self.closed = True
            if not self.ended.done():
                self.ended.set_result(why)
            self.on_end(self, why)


@dataclass
class _Pending:
    request: Any
    future: asyncio.Future
    watcher: Callable | None


@dataclass
class _Queued:
    """A request made while disconnected: sent once the session it began under is back."""

    request: Any
    future: asyncio.Future
    watcher: Callable | None
    session_id: int | None


class Tx:
    """The operations of one multi-op transaction (kazoo's TransactionRequest methods)."""

    def __init__(self, zk: Zk) -> None:
        self.zk = zk
        self.ops: list[Any] = []

    def create(self, path: str, value: bytes = b"", acl: list | None = None, ephemeral: bool = False,
               sequence: bool = False) -> None:
        self.ops.append(self.zk._create_op(path, value, acl, ephemeral, sequence))

    def delete(self, path: str, version: int = -1) -> None:
        self.ops.append(Delete(self.zk._full(path), version))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self.ops.append(SetData(self.zk._full(path), _bytes(value), version))

    def check(self, path: str, version: int) -> None:
        self.ops.append(CheckVersion(self.zk._full(path), version))


def _bytes(value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"a znode's value must be bytes, not {type(value).__name__}")
    return value


class Zk:
    """One ZooKeeper session, kept alive and reconnected by a task on the loop."""

    def __init__(self, hosts: str, session_timeout_s: float, loop: asyncio.AbstractEventLoop,
                 auth: str | None = None) -> None:
        self.loop = loop
        self.hosts = hosts
        self._servers, self._chroot = collect_hosts(hosts)
        self._timeout_ms = int(session_timeout_s * 1000)
        self._negotiated_ms: int | None = None
        self._auth: list[tuple[str, str]] = [("digest", auth)] if auth else []
        self._auth_reply: asyncio.Future | None = None   # ZooKeeper's verdict on our credentials
        self.auth_failed: AuthFailedError | None = None   # set once ZooKeeper refused them: the client is done
        if auth:
            user, _, password = auth.partition(":")
            self.acl = [make_digest_acl(user, password, all=True)]
        else:
            user, self.acl = "", OPEN_ACL_UNSAFE
        self._auth_user = user
        self.state = KazooState.LOST
        self._state_callbacks: list[Callable[[str], None]] = []
        self._session_id: int | None = None
        self._passwd = b"\x00" * 16
        self._last_zxid = 0
        self._link: _Link | None = None
        self._live = asyncio.Event()       # a connection with a session, ready for requests
        self._handshake: asyncio.Future | None = None
        self._xid = 0
        self._pending: dict[int, _Pending] = {}   # in the order sent: replies come back in it
        self._queue: deque[_Queued] = deque()      # made while disconnected, in the order made
        self._data_watchers: defaultdict[str, set[Callable]] = defaultdict(set)
        self._child_watchers: defaultdict[str, set[Callable]] = defaultdict(set)
        self._read_timeout = session_timeout_s * 2 / 3
        self._last_recv = self._last_send = 0.0
        self._runner: asyncio.Task | None = None
        self._stopped = False
        self.log = log.bind(zk=hosts)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self, timeout: float) -> None:
        """Connect (bounded); raises ZkTimeout if ZooKeeper cannot be reached in time, AuthFailedError
        if it refuses our credentials."""
        self._runner = self.loop.create_task(self._run())
        live = self.loop.create_task(self._live.wait())
        try:
            await asyncio.wait({live, self._runner}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            live.cancel()
        if self.auth_failed is not None:
            await self.stop()
            raise self.auth_failed
        if not self._live.is_set():
            await self.stop()
            raise ZkTimeout(f"cannot connect to ZooKeeper {self.hosts} within {timeout:g}s")

    async def stop(self) -> None:
        """Close the session (its ephemeral nodes go at once) and stop reconnecting."""
        self._stopped = True
        link = self._link
        if link is not None and self._live.is_set():
            xid = self._next_xid()
            fut = self.loop.create_future()
            self._pending[xid] = _Pending(_Close, fut, None)
            link.write(jute.close(xid))
            try:
                await asyncio.wait_for(asyncio.shield(fut), CLOSE_WAIT_S)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - closing anyway
                pass
        if link is not None:
            link.abort(ConnectionClosedError("the ZooKeeper client was stopped"))
        if self._runner is not None:
            self._runner.cancel()
            try:
                await self._runner
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - the runner's end is not news
                pass
        self._fail_pending(ConnectionClosedError("the ZooKeeper client was stopped"))
        self._fail_queued(ConnectionClosedError("the ZooKeeper client was stopped"))
        self._fire_watchers(KeeperState.CLOSED)
        self._session_id = None
        self._set_state(KazooState.LOST)

    @property
    def session_id(self) -> int | None:
        """The current session id (ephemeral owner of our nodes)."""
        return self._session_id

    @property
    def server(self) -> tuple[str, int] | None:
        """(host, port) of the server this session is connected through; None while disconnected."""
        link = self._link
        if link is None or link.transport is None or not self._live.is_set():
            return None
        return link.transport.get_extra_info("peername")[:2]

    @property
    def session_timeout_s(self) -> float:
        """The session timeout the server granted (the configured one until a server has answered)."""
        return (self._negotiated_ms or self._timeout_ms) / 1000

    def on_state(self, fn: Callable[[str], None]) -> None:
        """Call fn(state) on the loop whenever the connection state changes."""
        self._state_callbacks.append(fn)

    @property
    def connected(self) -> bool:
        return self.state == KazooState.CONNECTED and self._live.is_set()

    async def wait_connected(self, timeout: float) -> bool:
        """Wait (bounded) until a connection is live again, e.g. while the session moves to another
        member of the ensemble; whether it is."""
        if not self._live.is_set() and not self._stopped:
            try:
                await asyncio.wait_for(self._live.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        return self.connected

    def _set_state(self, state: str) -> None:
        if state == self.state:
            return
        self.state = state
        for fn in list(self._state_callbacks):
            self.loop.call_soon(fn, state)

    # -- the connection loop --------------------------------------------------------------------
    async def _run(self) -> None:
        delay = RETRY_DELAY_S
        while not self._stopped:
            servers = list(self._servers)
            random.shuffle(servers)
            reached = False
            for host, port in servers:
                if self._stopped:
                    return
                began = time.monotonic()
                try:
                    if await self._connection(host, port, len(servers)):
                        reached = True
                        if time.monotonic() - began < RETRY_DELAY_S:
                            await asyncio.sleep(RETRY_DELAY_S)   # a connection that ends at once: no spin
                except SessionExpiredError:
                    self._expired()
                    reached = True   # a new session at once
                except AuthFailedError as e:
                    self._refused(e)
                    return
                except (OSError, asyncio.TimeoutError, ConnectionDropped) as e:
                    self.log.debug("zookeeper connection attempt failed", server=f"{host}:{port}",
                                   error=f"{e.__class__.__name__}: {e}")
                except Exception:  # noqa: BLE001 - whatever it was, the session must keep being retried
                    self.log.exception("zookeeper connection attempt crashed", server=f"{host}:{port}")
                    if self._link is not None:
                        self._link.abort(ConnectionDropped("connection attempt crashed"))
            if reached:
                delay = RETRY_DELAY_S
                continue
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, RETRY_MAX_S)

    async def _connection(self, host: str, port: int, n_servers: int) -> bool:
        """One connection: handshake, then heartbeats until it ends. True if the handshake succeeded."""
        connect_timeout = max(self.session_timeout_s / n_servers, 0.5)
        _, link = await asyncio.wait_for(
            self.loop.create_connection(lambda: _Link(self._on_frame, self._on_end), host, port), connect_timeout)
        self._link = link
        self._handshake = self.loop.create_future()
        try:
            link.write(jute.connect_request(self._last_zxid, self._timeout_ms, self._session_id or 0, self._passwd))
            done, _ = await asyncio.wait({self._handshake, link.ended}, timeout=connect_timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
            if self._handshake not in done:
                link.abort(ConnectionDropped("no handshake from ZooKeeper"))
                return False
            hs: jute.Handshake = self._handshake.result()
        finally:
            self._handshake = None
        if hs.timeout_ms <= 0:
            link.abort(ConnectionDropped("session expired"))
            raise SessionExpiredError("session expired")
        self._session_id, self._passwd = hs.session_id, hs.passwd
        if hs.timeout_ms != self._negotiated_ms and hs.timeout_ms != self._timeout_ms:
            self.log.info("zookeeper granted another session timeout than the configured one",
                          configured_ms=self._timeout_ms, granted_ms=hs.timeout_ms)
        self._negotiated_ms = hs.timeout_ms
        self._read_timeout = hs.timeout_ms / 1000 * 2 / 3
        if self._auth:
            await self._authenticate(link, connect_timeout)
        self._last_recv = self._last_send = time.monotonic()
        self._live.set()
        self._flush_queued()
        self.log.debug("zookeeper session connected", server=f"{host}:{port}", session=hex(hs.session_id),
                       timeout_ms=hs.timeout_ms)
        self._set_state(KazooState.CONNECTED)
        await self._heartbeat(link)
        return True

    async def _authenticate(self, link: _Link, timeout: float) -> None:
        """Send our credentials and wait for ZooKeeper's verdict (one round trip per connection)."""
        self._auth_reply = self.loop.create_future()
        try:
            for scheme, credential in self._auth:
                link.write(jute.auth(scheme, credential))
            done, _ = await asyncio.wait({self._auth_reply, link.ended}, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
            if self._auth_reply not in done:
                link.abort(ConnectionDropped("no answer to our credentials"))
                raise ConnectionDropped("no answer to our credentials")
            err = self._auth_reply.result()
        finally:
            self._auth_reply = None
        if err:
            link.abort(ConnectionDropped("credentials refused"))
            raise AuthFailedError(f"ZooKeeper {self.hosts} refused the configured auth "
                                  f"(digest user '{self._auth_user}')")

    def _refused(self, e: AuthFailedError) -> None:
        """ZooKeeper refused our credentials: stop for good (no reconnect loop), as kazoo does."""
        self.log.error("zookeeper refused our credentials: the client stops", error=str(e))
        self.auth_failed = e
        self._stopped = True
        self._session_id = None
        self._fail_pending(e)
        self._fail_queued(e)
        self._fire_watchers(KeeperState.AUTH_FAILED)
        if self.state == KazooState.LOST:   # an expired session before: the owner must still hear of this
            for fn in list(self._state_callbacks):
                self.loop.call_soon(fn, KazooState.LOST)
        self._set_state(KazooState.LOST)

    async def _heartbeat(self, link: _Link) -> None:
        """Ping after a third of the session timeout without a request; drop the connection after
        two thirds without hearing from the server."""
        rt = self._read_timeout
        while not link.closed:
            now = time.monotonic()
            if now - self._last_recv >= rt:
                link.abort(ConnectionDropped(f"no answer from ZooKeeper for {rt:.1f}s"))
                break
            if now - self._last_send >= rt / 2:
                link.write(jute.ping())
                self._last_send = now
            wait = min(self._last_send + rt / 2, self._last_recv + rt) - now
            await asyncio.wait({link.ended}, timeout=max(wait, 0.01))

    def _expired(self) -> None:
        """The server says our session is gone: everything tied to it goes too."""
        self.log.warning("zookeeper session expired", session=hex(self._session_id or 0))
        self._session_id = None
        self._passwd = b"\x00" * 16
        self._last_zxid = 0
        self._fail_pending(SessionExpiredError("the ZooKeeper session expired"))
        self._fail_queued(SessionExpiredError("the ZooKeeper session this call began under expired"),
                          keep_sessionless=True)
        self._fire_watchers(KeeperState.EXPIRED_SESSION)
        self._set_state(KazooState.LOST)

    def _on_end(self, link: _Link, why: Exception) -> None:
        if link is not self._link:
            return
        self._link = None
        was_live = self._live.is_set()
        self._live.clear()
        self._fail_pending(ConnectionLoss(str(why)))
        if was_live:
            if not self._stopped:
                self.log.debug("zookeeper connection lost", error=str(why))
            self._fire_watchers(KeeperState.CONNECTING)
            if not self._stopped:
                self._set_state(KazooState.SUSPENDED)

    def _fail_pending(self, exc: Exception) -> None:
        pending, self._pending = self._pending, {}
        for p in pending.values():
            if not p.future.done():
                p.future.set_exception(exc)

    def _fail_queued(self, exc: Exception, keep_sessionless: bool = False) -> None:
        """Fail the requests waiting for a connection (those made before any session may stay)."""
        queue, self._queue = self._queue, deque()
        for q in queue:
            if keep_sessionless and q.session_id is None:
                self._queue.append(q)
            elif not q.future.done():
                q.future.set_exception(exc)

    def _flush_queued(self) -> None:
        """The connection is live: what waited for it goes out now, in the order it was made."""
        queue, self._queue = self._queue, deque()
        for q in queue:
            if q.future.done():
                continue   # its caller gave up
            if q.session_id is not None and q.session_id != self._session_id:
                q.future.set_exception(SessionExpiredError("the ZooKeeper session this call began under expired"))
                continue
            self._write(q.request, q.watcher, q.future)

    def _fire_watchers(self, state: str) -> None:
        """As kazoo: a connection's end fires every watch once with a NONE event and forgets it."""
        watchers = [w for ws in self._data_watchers.values() for w in ws]
        watchers += [w for ws in self._child_watchers.values() for w in ws]
        self._data_watchers.clear()
        self._child_watchers.clear()
        event = WatchedEvent(EventType.NONE, state, None)
        for w in watchers:
            self.loop.call_soon(w, event)

    # -- frames from the server -----------------------------------------------------------------
    def _on_frame(self, link: _Link, payload: bytes) -> None:
        self._last_recv = time.monotonic()
        if self._handshake is not None:
            if not self._handshake.done():
                self._handshake.set_result(jute.parse_handshake(payload))
            return
        header, offset = jute.parse_reply(payload)
        if header.zxid > 0:
            self._last_zxid = header.zxid
        xid = header.xid
        if xid == jute.PING_XID:
            return
        if xid == jute.AUTH_XID:
            if self._auth_reply is not None and not self._auth_reply.done():
                self._auth_reply.set_result(header.err)
            elif header.err:   # not an answer we wait for: the connection cannot be trusted
                link.abort(ConnectionDropped("credentials refused"))
            return
        if xid == jute.WATCH_XID:
            self._on_watch(jute.parse_watch(payload, offset))
            return
        oldest = next(iter(self._pending), None)
        if xid != oldest:
            self.log.warning("zookeeper answered out of order: dropping the connection", xid=xid, expected=oldest)
            raise jute.FrameError(f"ZooKeeper answered xid {xid} while the oldest request waiting is xid {oldest}")
        p = self._pending.pop(xid)
        if p.future.done():
            return   # its caller gave up (timed out or cancelled)
        if p.request is _Close:
            p.future.set_result(True)
            return
        try:
            value = jute.reply_value(p.request, header.err, payload, offset)
        except jute.FrameError as e:
            p.future.set_exception(ConnectionLoss(str(e)))
            raise   # the connection is dropped: nothing after this frame can be trusted
        if isinstance(value, BaseException):
            p.future.set_exception(value)
            return
        if p.watcher is not None:
            table = self._child_watchers if isinstance(p.request, GetChildren) else self._data_watchers
            table[p.request.path].add(p.watcher)
        if jute.is_transaction(p.request):
            value = [self._unchroot(v) if isinstance(v, str) else v for v in value]
        elif isinstance(p.request, Create):
            value = self._unchroot(value)
        p.future.set_result(value)

    def _on_watch(self, watch: Any) -> None:
        if watch.type in (1, 3):        # created, changed
            fns = self._data_watchers.pop(watch.path, set())
        elif watch.type == 2:           # deleted
            fns = self._data_watchers.pop(watch.path, set()) | self._child_watchers.pop(watch.path, set())
        elif watch.type == 4:           # children
            fns = self._child_watchers.pop(watch.path, set())
        else:
            return
        event = WatchedEvent(EVENT_TYPE_MAP[watch.type], KeeperState.CONNECTED, self._unchroot(watch.path))
        for fn in fns:
            self.loop.call_soon(fn, event)

    # -- requests -------------------------------------------------------------------------------
    def _next_xid(self) -> int:
        self._xid = self._xid % 2147483647 + 1
        return self._xid

    def _full(self, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"a ZooKeeper path starts with '/': {path!r}")
        if self._chroot:
            return self._chroot + path if path != "/" else self._chroot
        return path

    def _create_op(self, path: str, value: bytes, acl: list | None, ephemeral: bool, sequence: bool) -> Create:
        """A create request (ACL: ours unless given)."""
        flags = (1 if ephemeral else 0) | (2 if sequence else 0)
        return Create(self._full(path), _bytes(value), acl or self.acl, flags)

    def _unchroot(self, path: str) -> str:
        if self._chroot and path.startswith(self._chroot):
            return path[len(self._chroot):] or "/"
        return path

    async def _call(self, req: Any, watcher: Callable | None = None, timeout: float = OP_TIMEOUT_S) -> Any:
        """Send one request on the session this call began under and await its answer (bounded);
        while disconnected it waits in line for that session to be back."""
        deadline = self.loop.time() + timeout
        if self._live.is_set():
            return await self._send(req, watcher, deadline)
        if self.auth_failed is not None:
            raise self.auth_failed
        if self._stopped:
            raise ConnectionClosedError("the ZooKeeper client is stopped")
        fut = self._bounded_future(deadline)
        self._queue.append(_Queued(req, fut, watcher, self._session_id))
        return await fut

    def _send(self, req: Any, watcher: Callable | None, deadline: float) -> asyncio.Future:
        """Write a request now; its answer (or ZkTimeout at `deadline`) settles the future."""
        if self._link is None or not self._live.is_set():
            raise ConnectionLoss("not connected to ZooKeeper")
        fut = self._bounded_future(deadline)
        self._write(req, watcher, fut)
        return fut

    def _write(self, req: Any, watcher: Callable | None, fut: asyncio.Future) -> None:
        """Put a request on the live connection; its reply settles `fut`."""
        assert self._link is not None
        xid = self._next_xid()
        self._pending[xid] = _Pending(req, fut, watcher)
        self._link.write(jute.request(xid, req))
        self._last_send = time.monotonic()

    def _bounded_future(self, deadline: float) -> asyncio.Future:
        """A future that fails with ZkTimeout at `deadline` unless settled before (a timed-out
        request stays in line: its late reply is still the one its place expects)."""
        fut = self.loop.create_future()
        timer = self.loop.call_at(deadline, _time_out, fut)
        fut.add_done_callback(lambda _f: timer.cancel())
        return fut

    async def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
                     makepath: bool = True) -> str:
        req = self._create_op(path, value, None, ephemeral, sequence)
        try:
            return await self._call(req)
        except NoNodeError:
            parent = path.rsplit("/", 1)[0]
            if not makepath or not parent:
                raise
        await self.ensure_path(parent)
        return await self._call(req)

    async def get(self, path: str, watch: Callable | None = None) -> tuple[bytes, ZnodeStat]:
        return await self._call(GetData(self._full(path), watch is not None), watch)

    async def get_or_none(self, path: str, watch: Callable | None = None) -> tuple[bytes, ZnodeStat] | None:
        """get, or None when the node does not exist."""
        try:
            return await self.get(path, watch)
        except NoNodeError:
            return None

    async def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        return await self._call(SetData(self._full(path), _bytes(value), version))

    async def exists(self, path: str, watch: Callable | None = None) -> ZnodeStat | None:
        return await self._call(Exists(self._full(path), watch is not None), watch)

    async def children(self, path: str, watch: Callable | None = None) -> list[str]:
        """Children of a node ([] when it does not exist)."""
        try:
            return await self._call(GetChildren(self._full(path), watch is not None), watch)
        except NoNodeError:
            return []

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> bool:
        """Delete a node (and its children); False if it was not there."""
        try:
            if recursive:
                for child in await self.children(path):
                    await self.delete(f"{path}/{child}", recursive=True)
            await self._call(Delete(self._full(path), version))
            return True
        except NoNodeError:
            return False
        except NotEmptyError:
            return await self.delete(path, version, recursive=True) if recursive else False

    async def ensure_path(self, path: str) -> None:
        """Create the node and any missing parents (empty values)."""
        if path in ("", "/"):
            return
        try:
            await self.create(path)   # its parents first when they are missing
        except NodeExistsError:
            pass

    async def commit(self, build: Callable[[Tx], None]) -> list[Any]:
        """Run a multi-op transaction; build(tx) adds the operations. The results are kazoo's: the
        created path, True, or a stat per operation, or exception instances when it failed."""
        tx = Tx(self)
        build(tx)
        return await self._call(Transaction(tx.ops))

    def commit_now(self, build: Callable[[Tx], None], timeout: float = OP_TIMEOUT_S) -> asyncio.Future:
        """commit, written before this returns (ConnectionLoss if not connected): a caller that has
        more to send can put this one on the wire first."""
        tx = Tx(self)
        build(tx)
        return self._send(Transaction(tx.ops), None, self.loop.time() + timeout)


def _time_out(fut: asyncio.Future) -> None:
    """A call's bound has passed: its caller hears ZkTimeout (its request, if sent, keeps its place)."""
    if not fut.done():
        fut.set_exception(ZkTimeout("ZooKeeper did not answer in time"))


class _CloseRequest:
    type = jute.CLOSE_TYPE


_Close = _CloseRequest()

__all__ = ["OP_TIMEOUT_S", "Tx", "Zk", "ZkTimeout"]
