"""asyncio on the simulator's virtual clock: one event loop per simulated process, stepped by the
World, so the production drivers (zk/originator.py, zk/listener.py, zk/recovery.py, ...) run their
very coroutines, timers and tasks here.

A loop never blocks and never reads real time: `time()` is the World's clock, and the World runs a
loop's ready callbacks and due timers only when it decides to (FIFO, loops in a fixed order), then
advances the clock to the next timer or model event. A paused process's loop is not stepped (its
timers and answers wait, as under SIGSTOP); a crashed one is never stepped again (kill -9).
"""

from __future__ import annotations

import asyncio
import heapq
import warnings
from asyncio import events
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .world import World


class _NoSelector:
    """Nothing to poll: the models hand their answers to the loop with call_soon."""

    def select(self, timeout: float | None) -> list:
        return []

    def close(self) -> None:
        pass


class SimLoop(asyncio.BaseEventLoop):
    """An event loop whose clock is the World's and which runs one iteration when stepped."""

    def __init__(self, world: World, name: str) -> None:
        super().__init__()
        self.world = world
        self.name = name
        self._selector = _NoSelector()
        self._clock_resolution = 1e-9
        self.failures: list[tuple[str, BaseException]] = []   # exceptions no task retrieved
        self.set_exception_handler(self._unhandled)

    def time(self) -> float:
        return self.world.now

    def _process_events(self, event_list: list) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def _unhandled(self, loop: Any, context: dict) -> None:
        exc = context.get("exception")
        if exc is not None and not isinstance(exc, asyncio.CancelledError):
            self.failures.append((context.get("message", ""), exc))

    # -- what the World asks --------------------------------------------------------------------
    def next_due(self) -> float | None:
        """When this loop has something to run: now if callbacks are ready, else its next timer."""
        if self._ready:
            return self.world.now
        sched = self._scheduled
        while sched and sched[0]._cancelled:
            self._timer_cancelled_count -= 1
            heapq.heappop(sched)._scheduled = False
        return sched[0]._when if sched else None

    def step(self) -> None:
        """One loop iteration, as BaseEventLoop._run_once without the selector: the timers due by now
        join the ready callbacks, then the callbacks ready at the start of the step run in order."""
        now = self.world.now
        sched = self._scheduled
        ready = self._ready
        while sched and sched[0]._when <= now:
            handle = heapq.heappop(sched)
            handle._scheduled = False
            if handle._cancelled:
                self._timer_cancelled_count -= 1
            else:
                ready.append(handle)
        if events._get_running_loop() is not self:
            events._set_running_loop(self)   # the World unsets it when it stops running
        for _ in range(len(ready)):
            handle = ready.popleft()
            if not handle._cancelled:
                handle._run()

    def abandon(self) -> None:
        """The process is gone: nothing of it runs again. Its coroutines are closed now (their finally
        blocks find every port dead), so none is left for the garbage collector to close later."""
        self._ready.clear()
        self._scheduled.clear()
        before = events._get_running_loop()
        events._set_running_loop(self)
        quiet = warnings.catch_warnings()   # a coroutine handed to a task that never started: never awaited
        quiet.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            closed: set = set()
            for _ in range(5):   # a finally block may start tasks of its own: those are closed too
                tasks = [t for t in asyncio.all_tasks(self) if t not in closed]
                if not tasks:
                    break
                for task in tasks:
                    closed.add(task)
                    _close(task.get_coro())
        finally:
            quiet.__exit__(None, None, None)
            events._set_running_loop(before)
        self._ready.clear()
        self._scheduled.clear()

    def spawn(self, coro: Any, name: str = "") -> asyncio.Task:
        """A task on this loop (created as its own code would, with this loop running); the loop that was
        running (a step of this one, when a delivered callback spawns) runs on: the handles after it in the
        same step must still find it (asyncio.gather, ensure_future ask for the running loop)."""
        before = events._get_running_loop()
        events._set_running_loop(self)
        try:
            return self.create_task(coro, name=name)
        finally:
            events._set_running_loop(before)


__all__ = ["SimLoop"]


def _close(coro: Any) -> None:
    """Close a dead process's coroutine for good, and every coroutine it awaits, innermost first: a finally
    that awaits makes close() raise "coroutine ignored GeneratorExit" and leaves that coroutine suspended, so
    each is closed again (bounded) until its frame is gone, rather than left for the garbage collector, which
    would print that error during some later schedule."""
    chain = []
    while coro is not None and hasattr(coro, "cr_frame") and len(chain) < 64:
        chain.append(coro)
        coro = coro.cr_await
    for c in reversed(chain):
        for _ in range(8):
            if c.cr_frame is None:
                break
            try:
                c.close()
            except BaseException:  # noqa: BLE001 - a finally that tried to wait: it is dead anyway
                pass
