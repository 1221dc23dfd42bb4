"""The fault schedule of a chaos run, drawn from a seeded RNG and run in the main thread.

Faults come in episodes: one fault, or (sometimes) two overlapping ones on different targets. Each
round of episodes starts with every basic kind once, in a seeded order, so even a short run sees
each of them. Every instance fault leaves at least one instance alive and unpaused.

Beyond crashes and outages: backend silence (a backend SIGSTOPped, its sockets open, then resumed),
a stale originator (an instance frozen past its ZooKeeper session while its DDL waits on a node's
metadata lock, the lock let go during or after the freeze) and an operator's `kill @@ddl_lock ...
force` while a DDL still waits on a node (after checking that the same kill without `force` is
refused), then a new DDL on the table.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import pymysql
from chaos_env import SCHEMA, SESSION_TIMEOUT_S

log = logging.getLogger("chaos")

BASIC_KINDS = ("kill", "pause", "zk", "backend", "silence", "stale", "force")
INSTANCE_PAUSES = ("pause", "stale")   # kinds that SIGSTOP the instance they target
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
        self.silences: list[tuple[float, float]] = []
        self.holders: list[Any] = []
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
        if kind in ("backend", "silence"):
            free = [b for b in range(len(env.backends)) if f"backend:{b}" not in self._busy]
            if len(free) < len(env.backends):  # one backend at a time
                return None
            b = rng.choice(free)
            server = env.backends[b]
            if kind == "silence":
                return Fault("silence", f"backend:{b}", rng.uniform(1.0, 12.0), server.pause, server.resume,
                             "SIGSTOP, sockets open")
            return Fault("backend", f"backend:{b}", rng.uniform(0.5, 6.0), server.stop,
                         lambda: server.start(60), "stop")
        if kind in ("stale", "force"):
            free = self._free_instances()
            if len(free) < 2:
                return None
            i = rng.choice(free)
            other = rng.choice([j for j in free if j != i])
            if kind == "stale":
                return self._stale(i, rng.uniform(SESSION_TIMEOUT_S + 1.5, 2 * SESSION_TIMEOUT_S + 4))
            return self._force(i, other, rng.uniform(1.0, 6.0))
        raise ValueError(kind)

    def _stale(self, i: int, seconds: float) -> Fault:
        """Instance i frozen past its session while its DDL waits on a node; the node's holder lets go
        at a random moment, during the freeze or after it."""
        p = self.env.proxies[i]
        release_after = self.rng.uniform(0.5, seconds + 4)
        f = Fault("stale", f"instance:{i}", seconds, lambda: None, p.resume)

        def begin() -> None:
            blocked = self.workload.blocked_ddl(self.rng, i, seconds + 20)
            p.pause()
            f.started = time.monotonic()   # the freeze, not the set-up, is what the pause window excuses
            if blocked is None:
                self.counts["stale_without_blocked_ddl"] += 1
                f.detail = "no DDL could be blocked; a plain pause past the session"
                return
            self.holders.append(blocked.holder)
            timer = threading.Timer(release_after, blocked.holder.release)
            timer.daemon = True
            timer.start()
            f.detail = (f"{blocked.sql!r} waits on a node; frozen past the session, the holder lets go "
                        f"after {release_after:.1f}s ({'during' if release_after < seconds else 'after'} the freeze)")
            self.counts["stale_blocked_ddl"] += 1

        f.begin = begin
        return f

    def _force(self, i: int, other: int, seconds: float) -> Fault:
        """A DDL through instance i waits on a node; the operator kills its lock from another instance
        (refused without force, done with force), a new DDL on the table follows, the holder lets go
        after `seconds`."""
        f = Fault("force", f"instance:{i}", seconds, lambda: None, lambda: None)
        kill = "kill @@ddl_lock where schema='{s}' and table='{t}'"

        def begin() -> None:
            blocked = self.workload.blocked_ddl(self.rng, i, seconds + 20)
            if blocked is None:
                self.counts["force_without_blocked_ddl"] += 1
                f.detail = "no DDL could be blocked"
                return
            self.holders.append(blocked.holder)
            f.heal = blocked.holder.release
            manager = self.env.proxies[other]
            sql = kill.format(s=SCHEMA, t=blocked.table)
            try:
                self.env.manager_rows(manager, sql)
                self.problems.append(f"{sql} (no force) while {blocked.sql!r} of online instance {i} waited "
                                     f"on a node was not refused")
            except pymysql.MySQLError as e:
                self.counts["kill_refused_without_force" if "force" in str(e.args) else "kill_failed"] += 1
            self.workload.forced.add(blocked.sql)
            try:
                self.env.manager_rows(manager, sql + " force")
                self.counts["kill_force_ok"] += 1
            except pymysql.MySQLError as e:
                self.counts["kill_force_failed"] += 1
                f.detail = f"kill force failed: {e.args!r}; "
            nxt = self.workload.side_ddl(self.rng, other, blocked.table)
            if nxt is not None:
                self.workload.forced.add(nxt[0])
            f.detail += (f"{blocked.sql!r} through instance {i} waits on a node; lock killed with force from "
                         f"instance {other}; next DDL {nxt[0] if nxt else None!r}")

        f.begin = begin
        return f

    def finish(self, timeout: float = 30.0) -> None:
        """Let every holder the faults opened go and wait (bounded) for their connections to close."""
        deadline = time.monotonic() + timeout
        for h in self.holders:
            h.join(max(0.1, deadline - time.monotonic()))

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
                took = time.monotonic()
                self._begin(f)
                t0 += time.monotonic() - took   # a fault that sets up a blocked DDL first lasts its full duration
            else:
                self._heal(f)

    def _begin(self, f: Fault) -> None:
        self._busy.add(f.target)
        f.started = time.monotonic()
        try:
            f.begin()
        except Exception as e:  # noqa: BLE001 - recorded; the heal still runs
            self.problems.append(f"could not inject {f.kind} on {f.target}: {e!r}")
        self.emit(f"fault {f.kind} {f.target} for {f.duration:.1f}s ({f.detail})")
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
        if f.kind in INSTANCE_PAUSES or f.kind == "kill":
            i = int(f.target.split(":")[1])
            (self.pauses if f.kind in INSTANCE_PAUSES else self.down)[i].append((f.started, end))
        if f.kind == "silence":
            self.silences.append((f.started, end))
        now = time.time()
        began = now - (end - f.started)
        self.records.append(FaultRecord(f.kind, f.target, f.started, end,
                                        time.strftime("%H:%M:%S", time.localtime(began)), f.detail, began, now))
        self.emit(f"healed {f.kind} {f.target} after {end - f.started:.1f}s")
