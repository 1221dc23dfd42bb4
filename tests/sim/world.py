"""The simulator's heart: one seeded RNG, a virtual clock, an event queue for the models and the
processes' event loops (tests/sim/aioloop.py), all stepped in one deterministic order (no real time)."""

from __future__ import annotations

import heapq
from asyncio import events
import random
from typing import Any, Callable


class Stop(Exception):
    """Raised by the checker (through World.fail) to end a schedule with a violation."""


class World:
    """Events run one at a time in (time, sequence) order; every choice comes from `rng`."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[..., Any], tuple]] = []
        self._seq = 0
        self.steps = 0
        self.after_step: list[Callable[[], None]] = []   # checker hooks, run after every event
        self.trace: list[str] | None = None              # set to a list to record what happened
        self.in_task = 0                                 # task steps running now (tasks.Task)
        self.errors: list[tuple[str, BaseException]] = []  # tasks that died of a simulator bug
        self.loops: list[Any] = []
        self.violation: BaseException | None = None        # a checker's verdict raised inside a task                       # the running processes' event loops (SimLoop)

    def at(self, delay: float, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn(*args) `delay` virtual seconds from now (ties keep their scheduling order)."""
        self._seq += 1
        heapq.heappush(self._queue, (self.now + max(0.0, delay), self._seq, fn, args))

    def soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn(*args) at the current instant, after what is already queued for it."""
        self.at(0.0, fn, *args)

    def log(self, what: str) -> None:
        if self.trace is not None:
            self.trace.append(f"{self.now:9.3f} {what}")

    def pending(self) -> int:
        return len(self._queue)

    def run(self, until: float, max_steps: int = 1_000_000) -> bool:
        """Run up to virtual time `until`: at each instant first every loop with something ready (in
        their fixed order), then the models' events; then the clock moves to the next timer or event.
        False if the step budget ran out first."""
        try:
            return self._run(until, max_steps)
        finally:
            events._set_running_loop(None)   # the loops stepped set it

    def _run(self, until: float, max_steps: int) -> bool:
        q = self._queue
        hooks = self.after_step
        inf = float("inf")
        while True:
            now = self.now
            nxt = q[0][0] if q else inf
            ran = False
            for lp in self.loops:
                due = lp.next_due()
                if due is None:
                    continue
                if due <= now:
                    lp.step()
                    ran = True
                elif due < nxt:
                    nxt = due
            if not ran and nxt <= now:
                _, _, fn, args = heapq.heappop(q)
                fn(*args)
                ran = True
            if ran:
                if self.violation is not None:
                    raise self.violation
                self.steps += 1
                for h in hooks:
                    h()
                if self.steps >= max_steps:
                    return False
                continue
            if nxt > until:
                break
            self.now = nxt
        self.now = max(self.now, until)
        return True

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def delay(self, lo: float, hi: float) -> float:
        return self.rng.uniform(lo, hi)
