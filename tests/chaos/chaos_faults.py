"""The fault schedule of a chaos run, drawn from a seeded RNG and run in the main thread.

Faults come in episodes: one fault, or (sometimes) two overlapping ones on different targets. Each
round of episodes starts with every basic kind once, in a seeded order, so even a short run sees
each of them. Every instance fault leaves at least one instance alive and unpaused.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from chaos_env import SESSION_TIMEOUT_S

log = logging.getLogger("chaos")

BASIC_KINDS = ("kill", "pause", "zk", "backend")
COMPOUND_P = 0.25


@dataclass
class FaultRecord:
    """One injected fault: what, on what, from when to when (monotonic and wall clock)."""

    kind: str
    target: str
    start: float
    end: float
    wall: str
    detail: str
    start_wall: float = 0.0
    end_wall: float = 0.0


@dataclass
class Fault:
    """A fault ready to run: begin() breaks something, heal() repairs it after `duration` seconds."""

    kind: str
    target: str
    duration: float
    begin: Callable[[], None]
    heal: Callable[[], None]
    detail: str = ""
    started: float = 0.0


class Faults:
    """Draws and injects faults until a deadline; records each one with timestamps."""

    def __init__(self, env: Any, seed: int, workload: Any, emit: Callable[[str], None]) -> None:
        self.env = env
        self.rng = random.Random(f"{seed}-faults")
        self.workload = workload
        self.emit = emit
        self.records: list[FaultRecord] = []
        self.counts: Counter = Counter()
        self.pauses: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(env.proxies))}
        self.down: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(env.proxies))}
        self.problems: list[str] = []
        self._busy: set[str] = set()
        self._round: list[str] = []

    # -- drawing ---------------------------------------------------------------------------------
    def _next_kind(self) -> str:
        if not self._round:
            self._round = list(BASIC_KINDS)
            self.rng.shuffle(self._round)
        return self._round.pop()

    def _free_instances(self) -> list[int]:
        return [i for i in range(len(self.env.proxies)) if f"instance:{i}" not in self._busy]

    def _draw(self, kind: str) -> Fault | None:
        """A fault of a kind on a target no other running fault uses (None when none fits)."""
        rng = self.rng
        env = self.env
        if kind in ("kill", "pause"):
            free = self._free_instances()
            if len(free) < 2:  # keep at least one instance alive and unpaused
                return None
            if kind == "pause" and rng.random() < 0.5:
                busy = [i for i in set(dict(self.workload.inflight_ddl).values()) if i in free]
                i = rng.choice(busy) if busy else rng.choice(free)
                detail = "during a DDL" if busy else "no DDL in flight"
            else:
                i = rng.choice(free)
                detail = ""
            p = env.proxies[i]
            if kind == "kill":
                return Fault("kill", f"instance:{i}", rng.uniform(0.2, 4.0), p.kill,
                             lambda p=p: p.start(90), detail or "kill -9, then restart")
            seconds = rng.uniform(0.3, 2 * SESSION_TIMEOUT_S + 2)
            return Fault("pause", f"instance:{i}", seconds, p.pause, p.resume,
                         f"{detail}; {'past' if seconds > SESSION_TIMEOUT_S else 'within'} the session timeout")
        if kind == "zk":
            if "zk" in self._busy:
                return None
            zk = env.zk
            hard = rng.random() < 0.3
            return Fault("zk", "zk", rng.uniform(0.5, 3 * SESSION_TIMEOUT_S), zk.kill if hard else zk.stop,
                         lambda: zk.start(60), "kill -9" if hard else "stop")
        if kind == "backend":
            free = [b for b in range(len(env.backends)) if f"backend:{b}" not in self._busy]
            if len(free) < len(env.backends):  # one backend at a time
                return None
            b = rng.choice(free)
            server = env.backends[b]
            return Fault("backend", f"backend:{b}", rng.uniform(0.5, 6.0), server.stop,
                         lambda: server.start(60), "stop")
        raise ValueError(kind)

    # -- running ---------------------------------------------------------------------------------
    def run(self, deadline: float) -> None:
        """Inject episodes until the deadline (monotonic)."""
        while time.monotonic() < deadline:
            first = self._draw(self._next_kind())
            if first is None:
                continue
            episode = [first]
            if self.rng.random() < COMPOUND_P:
                self._busy.add(first.target)
                second = self._draw(self.rng.choice(BASIC_KINDS))
                self._busy.discard(first.target)
                if second is not None and second.target != first.target:
                    episode.append(second)
            self._episode(episode)
            gap = self.rng.uniform(0.5, 3.0)
            time.sleep(max(0.0, min(gap, deadline - time.monotonic())))

    def _episode(self, faults: list[Fault]) -> None:
        """Begin the faults (the second at a random moment within the first), heal each in time."""
        events: list[tuple[float, int, str, Fault]] = []
        offset = 0.0
        for n, f in enumerate(faults):
            if n:
                offset = self.rng.uniform(0, faults[0].duration)
            events.append((offset, n, "begin", f))
            events.append((offset + f.duration, n, "heal", f))
        events.sort(key=lambda e: (e[0], e[2] == "begin"))
        if len(faults) > 1:
            self.counts["compound"] += 1
        t0 = time.monotonic()
        for at, _, what, f in events:
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            if what == "begin":
                self._begin(f)
            else:
                self._heal(f)

    def _begin(self, f: Fault) -> None:
        self._busy.add(f.target)
        self.emit(f"fault {f.kind} {f.target} for {f.duration:.1f}s ({f.detail})")
        f.started = time.monotonic()
        try:
            f.begin()
        except Exception as e:  # noqa: BLE001 - recorded; the heal still runs
            self.problems.append(f"could not inject {f.kind} on {f.target}: {e!r}")
        self.counts[f.kind] += 1
        if f.kind == "pause":
            self.counts["pause_past_session_timeout" if f.duration > SESSION_TIMEOUT_S else "pause_short"] += 1
            if f.detail.startswith("during a DDL"):
                self.counts["pause_during_ddl"] += 1
        if f.kind == "zk" and f.duration > SESSION_TIMEOUT_S:
            self.counts["zk_past_session_timeout"] += 1

    def _heal(self, f: Fault) -> None:
        for attempt in range(2):
            try:
                f.heal()
                break
            except Exception as e:  # noqa: BLE001 - a server that cannot come back is a finding
                msg = f"could not heal {f.kind} on {f.target} (attempt {attempt + 1}): {e!r}"
                self.emit(msg)
                self.problems.append(msg)  # even when the second attempt works: a restart must not fail
        end = time.monotonic()
        self._busy.discard(f.target)
        if f.target.startswith("instance:"):
            i = int(f.target.split(":")[1])
            (self.pauses if f.kind == "pause" else self.down)[i].append((f.started, end))
        now = time.time()
        began = now - (end - f.started)
        self.records.append(FaultRecord(f.kind, f.target, f.started, end,
                                        time.strftime("%H:%M:%S", time.localtime(began)), f.detail, began, now))
        self.emit(f"healed {f.kind} {f.target} after {end - f.started:.1f}s")
