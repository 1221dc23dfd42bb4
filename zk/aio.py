"""kazoo from asyncio: every call is bounded, and kazoo's threads hand results back to the loop.

Results and watch events are handed to the loop straight from kazoo's connection thread (one
`call_soon_threadsafe`), not through kazoo's callback threads: one thread hop less per call, and
a watch event reaches the loop before the answer to any request sent after it, as ZooKeeper
orders them on the wire.
"""

from __future__ import annotations

import asyncio
import inspect
import select
import weakref
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NotEmptyError
from kazoo.handlers.threading import AsyncResult, SequentialThreadingHandler
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.retry import KazooRetry
from kazoo.security import make_digest_acl

OP_TIMEOUT_S = 5.0


class ZkTimeout(Exception):
    """A ZooKeeper call did not complete within its bound."""


class _InlineResult(AsyncResult):
    """Runs callbacks marked `inline` in the thread that sets the result (they only schedule work on
    the loop); any other callback goes through kazoo's completion thread as usual."""

    def _do_callbacks(self) -> None:
        for callback in self._callbacks:
            if getattr(callback, "inline", False) or not self._handler.running:
                callback(self)
            else:
                self._handler.completion_queue.put(lambda cb=callback: cb(self))


_READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR | select.POLLNVAL
_WRITABLE = select.POLLOUT | select.POLLHUP | select.POLLERR | select.POLLNVAL


def _fd(obj: Any) -> int:
    fd = obj if isinstance(obj, int) else obj.fileno()
    if fd < 0:
        raise ValueError(f"invalid file descriptor {fd}")
    return fd


def poll_select(rlist: list, wlist: list, xlist: list, timeout: float | None = None) -> tuple[list, list, list]:
    """select() for kazoo's connection thread with one poll() call, for any fd number.

    kazoo's default builds and closes an epoll selector for every call (four system calls), and its
    connection thread selects before every read and write: about a quarter of the CPU a ZooKeeper
    round trip costs here. Like kazoo's, exceptional conditions come back as readable/writable."""
    poller = select.poll()
    masks: dict[int, int] = {}
    for f in rlist:
        masks[_fd(f)] = masks.get(_fd(f), 0) | select.POLLIN | select.POLLPRI
    for f in wlist:
        masks[_fd(f)] = masks.get(_fd(f), 0) | select.POLLOUT
    for fd, mask in masks.items():
        poller.register(fd, mask)
    ready = dict(poller.poll(None if timeout is None else max(0.0, timeout) * 1000))
    readable = [f for f in rlist if ready.get(_fd(f), 0) & _READABLE]
    writable = [f for f in wlist if ready.get(_fd(f), 0) & _WRITABLE]
    return readable, writable, []


class _Handler(SequentialThreadingHandler):
    """kazoo's threading handler, with inline delivery for callbacks marked `inline` and a cheaper select."""

    def async_result(self) -> AsyncResult:
        return _InlineResult(self)

    def select(self, *args: Any, **kwargs: Any) -> tuple[list, list, list]:
        return poll_select(*args, **kwargs)

    def dispatch_callback(self, callback: Any) -> None:
        if getattr(callback.func, "inline", False):
            callback.func(*callback.args)
        else:
            super().dispatch_callback(callback)


def _inline(fn: Callable) -> Callable:
    """Mark a callback as safe to run in kazoo's connection thread (it must not block)."""
    fn.inline = True  # type: ignore[attr-defined]
    return fn


def _post(loop: asyncio.AbstractEventLoop, fn: Callable, *args: Any) -> None:
    """Schedule fn on the loop from a kazoo thread; a loop already closed (shutdown) is ignored."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass


def make_client(hosts: str, session_timeout_s: float, auth: str | None = None) -> KazooClient:
    """A kazoo client that retries connecting forever; with auth ("user:password") every node it
    creates is readable and writable by that digest identity only."""
    auth_data = None
    default_acl = None
    if auth:
        user, _, password = auth.partition(":")
        auth_data = [("digest", auth)]
        default_acl = [make_digest_acl(user, password, all=True)]
    return KazooClient(hosts=hosts, timeout=session_timeout_s, handler=_Handler(),
                       connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=1.0),
                       auth_data=auth_data, default_acl=default_acl)


class Zk:
    """A kazoo client with awaitable, bounded operations and loop-side state callbacks."""

    def __init__(self, hosts: str, session_timeout_s: float, loop: asyncio.AbstractEventLoop,
                 auth: str | None = None) -> None:
        self.loop = loop
        self.client = make_client(hosts, session_timeout_s, auth)
        self.state = KazooState.LOST
        self._state_callbacks: list[Callable[[str], None]] = []
        self._wrapped: weakref.WeakKeyDictionary[Callable, Callable] = weakref.WeakKeyDictionary()
        self.client.add_listener(self._on_state)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self, timeout: float) -> None:
        """Connect (bounded); raises ZkTimeout if ZooKeeper cannot be reached in time."""
        try:
            await asyncio.to_thread(self.client.start, timeout)
        except Exception as e:  # kazoo raises its own timeout type
            await asyncio.to_thread(self.client.stop)
            raise ZkTimeout(f"cannot connect to ZooKeeper {self.client.hosts}: {e}") from None
        self.state = self.client.state

    async def stop(self) -> None:
        """Close the session (its ephemeral nodes go at once) and stop kazoo's threads."""
        def _stop() -> None:
            try:
                self.client.stop()
            finally:
                self.client.close()
        await asyncio.to_thread(_stop)

    @property
    def session_id(self) -> int | None:
        """The current session id (ephemeral owner of our nodes)."""
        sid = self.client.client_id
        return sid[0] if sid else None

    def on_state(self, fn: Callable[[str], None]) -> None:
        """Call fn(state) on the loop whenever the connection state changes."""
        self._state_callbacks.append(fn)

    def _on_state(self, state: str) -> None:  # kazoo thread
        _post(self.loop, self._deliver_state, state)

    def _deliver_state(self, state: str) -> None:
        self.state = state
        for fn in list(self._state_callbacks):
            fn(state)

    @property
    def connected(self) -> bool:
        return self.state == KazooState.CONNECTED and self.client.connected

    # -- operations -----------------------------------------------------------------------------
    async def _await(self, async_result: Any, timeout: float = OP_TIMEOUT_S) -> Any:
        fut: asyncio.Future = self.loop.create_future()

        def settle() -> None:
            if fut.done():
                return
            try:
                fut.set_result(async_result.get_nowait())
            except Exception as e:  # noqa: BLE001 - handed to the awaiting coroutine
                fut.set_exception(e)

        async_result.rawlink(_inline(lambda _r: _post(self.loop, settle)))
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise ZkTimeout("ZooKeeper did not answer in time") from None

    async def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
                     makepath: bool = True) -> str:
        return await self._await(self.client.create_async(path, value, ephemeral=ephemeral, sequence=sequence,
                                                          makepath=makepath))

    async def get(self, path: str, watch: Callable | None = None) -> tuple[bytes, ZnodeStat]:
        return await self._await(self.client.get_async(path, watch=self._wrap(watch)))

    async def get_or_none(self, path: str, watch: Callable | None = None) -> tuple[bytes, ZnodeStat] | None:
        """get, or None when the node does not exist."""
        try:
            return await self.get(path, watch)
        except NoNodeError:
            return None

    async def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        return await self._await(self.client.set_async(path, value, version))

    async def exists(self, path: str, watch: Callable | None = None) -> ZnodeStat | None:
        return await self._await(self.client.exists_async(path, watch=self._wrap(watch)))

    async def children(self, path: str, watch: Callable | None = None) -> list[str]:
        """Children of a node ([] when it does not exist)."""
        try:
            return await self._await(self.client.get_children_async(path, watch=self._wrap(watch)))
        except NoNodeError:
            return []

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> bool:
        """Delete a node (and its children); False if it was not there."""
        try:
            if recursive:
                for child in await self.children(path):
                    await self.delete(f"{path}/{child}", recursive=True)
            await self._await(self.client.delete_async(path, version))
            return True
        except NoNodeError:
            return False
        except NotEmptyError:
            return await self.delete(path, version, recursive=True) if recursive else False

    async def ensure_path(self, path: str) -> None:
        await self._await(self.client.ensure_path_async(path))

    async def commit(self, build: Callable[[Any], None]) -> list[Any]:
        """Run a multi-op transaction; build(tx) adds the operations."""
        tx = self.client.transaction()
        build(tx)
        return await self._await(tx.commit_async())

    def _wrap(self, watch: Callable | None) -> Callable | None:
        """Watches fire in kazoo's thread; run them on the loop instead (one wrapper per callable,
        so re-arming a watch does not pile up callbacks in kazoo's watcher sets)."""
        if watch is None:
            return None
        wrapped = self._wrapped.get(watch)
        if wrapped is None:
            ref = weakref.WeakMethod(watch) if inspect.ismethod(watch) else weakref.ref(watch)
            loop = self.loop

            @_inline
            def wrapped(event: Any) -> None:  # holds the watch weakly, so the cache entry can die
                target = ref()
                if target is not None:
                    _post(loop, target, event)
            self._wrapped[watch] = wrapped
        return wrapped
