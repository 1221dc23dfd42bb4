"""The loop helpers of the cluster layer: watch-driven waits with a bound, level-triggered passes,
and the handling of background tasks a step left behind."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Awaitable, Callable

import structlog
from kazoo.exceptions import KazooException

from .aio import ZkTimeout

if TYPE_CHECKING:
    from .port import ClusterPort

log = structlog.get_logger("pydble.cluster")

ZK_ERRORS = (KazooException, ZkTimeout)
SAFETY_POLL_S = 2.0   # level-triggered loops re-read state at least this often, watches or not


def clock() -> float:
    """The event loop's clock, for deadlines and leases: monotonic time in production, the virtual
    time of the deterministic simulator's loop in tests/sim."""
    return asyncio.get_running_loop().time()


def drop_tasks(tasks: dict) -> None:
    """Cancel peer asks still running; a finished one's failure (a broken link) is expected, not news."""
    for task in tasks.values():
        if not task.done():
            task.cancel()
        elif not task.cancelled():
            task.exception()


class Waker:
    """A flag that ZooKeeper watches set; loops wait on it with a bound (a future and a timer, no task
    per wait)."""

    def __init__(self) -> None:
        self._fired = False
        self._waiters: list[asyncio.Future] = []

    def __call__(self, _event: object = None) -> None:
        self._fired = True
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def wait(self, timeout: float) -> bool:
        """Wait for a watch to fire, at most timeout seconds; then re-arm. True if one fired."""
        if not self._fired:
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            self._waiters.append(waiter)
            timer = loop.call_later(max(0.0, timeout), _wake_up, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        fired = self._fired
        self._fired = False
        return fired


def _wake_up(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


class PassLoop:
    """A level-triggered follower: pass_once() runs whenever a watch fires, and at least every
    SAFETY_POLL_S, so a missed or coalesced event (or a SIGSTOP) can never lose a step."""

    name = "loop"
    settle_s = 0.0   # after a watch fires, wait this long so a burst of events costs one pass

    def __init__(self, cluster: ClusterPort) -> None:
        self.cluster = cluster
        self.wake = Waker()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Start the loop (or just wake it if it runs); called at every join."""
        if self._task is None or self._task.done():
            self._task = self.cluster._spawn(self._loop())
        self.wake()

    async def _loop(self) -> None:
        c = self.cluster
        while not c._stopping:
            try:
                if c.zk is not None and c.zk.connected:
                    await self.pass_once()
            except ZK_ERRORS as e:
                log.debug(f"{self.name} pass failed, will retry", instance=c.instance, error=str(e))
            except Exception:  # noqa: BLE001 - the loop must survive anything
                log.exception(f"{self.name} pass crashed, will retry", instance=c.instance)
            if await self.wake.wait(SAFETY_POLL_S) and self.settle_s:
                await asyncio.sleep(self.settle_s)

    async def pass_once(self) -> None:
        """Read the state and act on what changed."""
        raise NotImplementedError



async def retry(attempt: Callable[[], Awaitable[bool]], interval: float, stopped: Callable[[], bool],
                timeout: float | None = None, what: str = "attempt") -> bool:
    """Run attempt() until it returns True, `interval` seconds apart, until stopped() or `timeout`
    seconds have passed (None: no bound but stopped()); a ZooKeeper error is one failed attempt.
    True if an attempt succeeded."""
    deadline = None if timeout is None else clock() + timeout
    while not stopped() and (deadline is None or clock() < deadline):
        try:
            if await attempt():
                return True
        except ZK_ERRORS as e:
            log.debug(f"{what} failed, will retry", error=str(e))
        await asyncio.sleep(interval)
    return False


__all__ = ["PassLoop", "SAFETY_POLL_S", "Waker", "ZK_ERRORS", "clock", "drop_tasks", "retry"]
