"""Coroutines on the virtual clock: a future type and a task runner (no asyncio, no threads).

An instance's protocol code is written as plain `async def` functions awaiting SimFutures; each
resumption goes through the instance's inbox, so a paused instance runs nothing and a crashed one
never runs again.
"""

from __future__ import annotations

from typing import Any, Callable, Coroutine, Generator


class Cancelled(Exception):
    """The task was cancelled (its instance crashed or gave up on it)."""


class SimFuture:
    """A value that arrives later; awaiting it suspends the task until set."""

    __slots__ = ("done", "value", "_waiters")

    def __init__(self) -> None:
        self.done = False
        self.value: Any = None
        self._waiters: list[Callable[[Any], None]] = []

    def set(self, value: Any) -> None:
        if self.done:
            return
        self.done = True
        self.value = value
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            w(value)

    def then(self, fn: Callable[[Any], None]) -> None:
        if self.done:
            fn(self.value)
        else:
            self._waiters.append(fn)

    def __await__(self) -> Generator[SimFuture, Any, Any]:
        if not self.done:
            yield self
        v = self.value
        if isinstance(v, BaseException):
            raise v
        return v


class Task:
    """Runs one coroutine; every resumption goes through `deliver` (the instance's inbox)."""

    world: Any = None   # the World whose `in_task` counts the task steps running (set by the owner)

    def __init__(self, coro: Coroutine, deliver: Callable[[Callable[[], None]], None], name: str = "",
                 world: Any = None) -> None:
        self.world = world
        self.coro = coro
        self.deliver = deliver
        self.name = name
        self.finished = SimFuture()
        self.waiting: SimFuture | None = None
        self._cancel = False
        deliver(self._step)

    def _step(self) -> None:
        if self.finished.done:
            return
        world = self.world
        if world is not None:
            world.in_task += 1
        try:
            if self._cancel:
                self._cancel = False   # thrown once; the task may catch it and clean up
                fut = self.coro.throw(Cancelled())
            else:
                fut = self.coro.send(None)   # SimFuture.__await__ reads (or raises) the value itself
        except StopIteration as e:
            self.finished.set(("ok", e.value))
            return
        except Cancelled:
            self.finished.set(("cancelled", None))
            return
        except Exception as e:  # noqa: BLE001 - the owner decides what a task's failure means
            self.finished.set(("error", e))
            return
        finally:
            if world is not None:
                world.in_task -= 1
        assert isinstance(fut, SimFuture), f"task {self.name} awaited {fut!r}"
        self.waiting = fut
        fut.then(lambda _v, f=fut: self.deliver(lambda: self._wake(f)))

    def _wake(self, fut: SimFuture) -> None:
        if self.waiting is fut:
            self.waiting = None
            self._step()

    def cancel(self) -> None:
        """Throw Cancelled into the task where it waits (through the inbox, like any resumption)."""
        if not self.finished.done and not self._cancel:
            self._cancel = True
            self.waiting = None
            self.deliver(self._step)

    def kill(self) -> None:
        """The process died: the coroutine never runs again."""
        if not self.finished.done:
            self.waiting = None
            self.finished.set(("killed", None))
            try:   # finally blocks run on close; a dead instance's I/O fails at once (Instance._zk)
                self.coro.close()
            except (RuntimeError, Exception):  # noqa: BLE001 - one that tried to wait: it is dead anyway
                pass


def first(*futs: SimFuture) -> SimFuture:
    """A future set with (index, value) of the first of futs to be set."""
    out = SimFuture()
    for i, f in enumerate(futs):
        f.then(lambda v, i=i: out.set((i, v)))
    return out


def gather(futs: list[SimFuture]) -> SimFuture:
    """A future set with the list of every value (exceptions as values) once all are set."""
    out = SimFuture()
    if not futs:
        out.set([])
        return out
    values: list[Any] = [None] * len(futs)
    left = [len(futs)]

    def one(i: int, v: Any) -> None:
        values[i] = v
        left[0] -= 1
        if left[0] == 0:
            out.set(values)
    for i, f in enumerate(futs):
        f.then(lambda v, i=i: one(i, v))
    return out
