"""Many clients, few backend connections (issue 20 item 2): 100, 1,000 and 5,000 client connections on
a pydble whose dbGroup has max_con = 64, against 100 clients straight to MariaDB in the same invocation.

The set-up is bench/point_select.py's (a private MariaDB, sysbench's sbtest1 with --table-size rows,
sharded over four databases through the proxy, unsharded for the direct run), with the proxy's
max_connections raised above the largest level. At each level the clients are:
- `--active` of them in a closed loop: a point select (`SELECT c FROM sbtest1 WHERE id=N`), or with
  probability `--txn-share` a short transaction (BEGIN; point select; UPDATE ... SET k=k+1; COMMIT);
- all the others mostly idle: each sends one point select every `--idle-every` seconds (random phase).
Prints per level queries/s (statements), p50/p99 of point selects and of transactions, errors, the
proxy's VmRSS (and its peak, VmHWM) from /proc and its CPU per statement; then a burst: every client
at the level sends one point select at the same moment (pool waiters: p99, max, errors). Ratios:
proxy qps and p99 against direct at 100 clients, and p99 at each level against p99 at 100 through the
proxy (goals: RSS <= 1 GB at 5,000 clients, p99 at 5,000 <= 2 x p99 at 100), each of the --rounds
(levels ascending, then descending: the crowd leaves again) and their medians.

    .venv/bin/python bench/many_clients.py [--levels 100,1000,5000] [--time 10] [--rounds 3] [--active 32]
                                           [--txn-share 0.1] [--idle-every 20] [--mysql-port 3306]
                                           [--profile out.txt] [--baseline /tmp/base]

The clients are asyncio connections of the proxy's own backend protocol code (proxy/backends/backend.py), one
process, uvloop; RLIMIT_NOFILE is raised to its hard limit here (the proxy raises its own).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
for _p in (REPO_ROOT, REPO_ROOT / "tests", HERE):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from attack_rss import rss_mb  # noqa: E402 - after the path set-up
from meta.config import DbGroupConfig  # noqa: E402
from meta.errors import ProxyError  # noqa: E402
from point_select import DIRECT_DB, Bench, flat_profile, loadavg, user_sys  # noqa: E402
from proxy.backends.backend import BackendConnection, open_connection  # noqa: E402

GOAL_RSS_MB = 1024
GOAL_P99 = 2.0
TIMEOUT_S = 60.0


@dataclass
class Level:
    """What one level measured."""

    target: str
    clients: int
    round: int
    seconds: float
    statements: int
    select_ms: list[float] = field(default_factory=list)
    txn_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    rss_mb: float = 0.0
    hwm_mb: float = 0.0
    cpu_us: float = 0.0       # the proxy's user + sys per statement
    open_s: float = 0.0       # time to open the connections this level added
    burst_ms: list[float] = field(default_factory=list)
    burst_errors: int = 0
    load: str = ""

    @property
    def qps(self) -> float:
        return self.statements / self.seconds if self.seconds else 0.0


async def _stopped(stop: asyncio.Event, seconds: float) -> bool:
    """Wait up to seconds; True if stop was set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except asyncio.TimeoutError:
        return False
    return True


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank) of values, 0 when there are none."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


class Clients:
    """The client connections of one target and the workload they run."""

    def __init__(self, target: str, host: str, port: int, user: str, password: str, db: str,
                 args: argparse.Namespace) -> None:
        self.target = target
        self.group = DbGroupConfig(name=target, host=host, port=port, user=user, password=password,
                                   max_con=1, connect_timeout_s=TIMEOUT_S)
        self.db = db
        self.args = args
        self.conns: list[BackendConnection] = []
        self.running = False
        self.statements = 0
        self.select_ms: list[float] = []
        self.txn_ms: list[float] = []
        self.errors: dict[str, int] = {}

    async def grow(self, n: int) -> float:
        """Open (or close) connections until there are n; the seconds it took."""
        started = time.monotonic()
        gate = asyncio.Semaphore(self.args.open_at_once)
        for c in self.conns[n:]:
            c.close()
        del self.conns[n:]

        async def one() -> None:
            async with gate:
                self.conns.append(await open_connection(self.group, 0, self.db))

        await asyncio.gather(*(one() for _ in range(n - len(self.conns))))
        return time.monotonic() - started

    def _error(self, e: BaseException) -> None:
        key = f"{e.code}" if isinstance(e, ProxyError) else type(e).__name__
        self.errors[key] = self.errors.get(key, 0) + 1

    async def _select(self, conn: BackendConnection) -> None:
        t0 = time.perf_counter()
        await conn.query(f"SELECT c FROM sbtest1 WHERE id={random.randint(1, self.args.table_size)}", TIMEOUT_S)
        if self.running:
            self.select_ms.append((time.perf_counter() - t0) * 1e3)
            self.statements += 1

    async def _txn(self, conn: BackendConnection) -> None:
        t0 = time.perf_counter()
        i = random.randint(1, self.args.table_size)
        try:
            await conn.query("BEGIN", TIMEOUT_S)
            await conn.query(f"SELECT c FROM sbtest1 WHERE id={i}", TIMEOUT_S)
            await conn.query(f"UPDATE sbtest1 SET k=k+1 WHERE id={i}", TIMEOUT_S)
            await conn.query("COMMIT", TIMEOUT_S)
        except ProxyError:
            if not conn.broken:
                await conn.query("ROLLBACK", TIMEOUT_S)
            raise
        if self.running:
            self.txn_ms.append((time.perf_counter() - t0) * 1e3)
            self.statements += 4

    async def _attempt(self, op: Any, conn: BackendConnection) -> bool:
        """One operation; its error counted. False once the connection is gone."""
        try:
            await op(conn)
        except ProxyError as e:
            self._error(e)
        return not conn.broken

    async def _active(self, conn: BackendConnection, stop: asyncio.Event) -> None:
        """A busy client: point selects and, one time in 1/--txn-share, a short transaction, back to back."""
        while not stop.is_set():
            if not await self._attempt(self._txn if random.random() < self.args.txn_share else self._select, conn):
                return

    async def _idle(self, conn: BackendConnection, stop: asyncio.Event) -> None:
        """A mostly idle client: one point select every --idle-every seconds, from a random phase."""
        wait = random.uniform(0, self.args.idle_every)
        while not await _stopped(stop, wait):
            wait = self.args.idle_every
            if not await self._attempt(self._select, conn):
                return

    async def run(self, seconds: float, warmup: float, pid: int | None) -> tuple[float, float]:
        """The workload over every open connection: warmup, then `seconds` measured. (seconds measured,
        the proxy's CPU seconds meanwhile)."""
        stop = asyncio.Event()
        active = min(self.args.active, len(self.conns))
        tasks = [asyncio.ensure_future(self._active(c, stop) if i < active else self._idle(c, stop))
                 for i, c in enumerate(self.conns)]
        await asyncio.sleep(warmup)
        self.statements, self.select_ms, self.txn_ms, self.errors = 0, [], [], {}
        cpu0 = sum(user_sys(pid)) if pid else 0.0
        spy = self._spy(pid)
        self.running = True
        started = time.monotonic()
        await asyncio.sleep(seconds)
        self.running = False
        elapsed = time.monotonic() - started
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
            Path(self.args.profile).write_text(flat_profile(Path(self.args.profile).with_suffix(".raw").read_text()))
            print(f"profile of the proxy at {len(self.conns)} clients written to {self.args.profile}")
        cpu = (sum(user_sys(pid)) - cpu0) if pid else 0.0
        stop.set()
        await asyncio.gather(*tasks)
        return elapsed, cpu

    def _spy(self, pid: int | None) -> subprocess.Popen | None:
        """py-spy recording the proxy during the measured run of the last level (--profile)."""
        if not (pid and self.args.profile and self.target == "proxy" and len(self.conns) == max(self.args.levels)):
            return None
        if shutil.which("py-spy") is None:
            print("py-spy not found; no profile")
            return None
        raw = Path(self.args.profile).with_suffix(".raw")
        return subprocess.Popen(["py-spy", "record", "-f", "raw", "-o", str(raw), "-r", "200", "--nonblocking",
                                 "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def burst(self) -> tuple[list[float], int]:
        """Every connection sends one point select at the same moment: their latencies and the errors."""
        self.running = False

        async def one(conn: BackendConnection) -> float | None:
            t0 = time.perf_counter()
            try:
                await conn.query(f"SELECT c FROM sbtest1 WHERE id={random.randint(1, self.args.table_size)}",
                                 TIMEOUT_S)
            except ProxyError:
                return None
            return (time.perf_counter() - t0) * 1e3

        got = await asyncio.gather(*(one(c) for c in self.conns))
        return [g for g in got if g is not None], sum(g is None for g in got)

    def close(self) -> None:
        for c in self.conns:
            c.close()
        self.conns = []


async def measure(clients: Clients, n: int, rnd: int, args: argparse.Namespace, pid: int | None) -> Level:
    """Grow (or shrink) to n connections, run the workload, then the burst."""
    open_s = await clients.grow(n)
    seconds, cpu = await clients.run(args.time, args.warmup, pid)
    lv = Level(clients.target, n, rnd, seconds, clients.statements, clients.select_ms, clients.txn_ms,
               dict(clients.errors), open_s=open_s, load=loadavg())
    if pid:
        lv.rss_mb, lv.hwm_mb = rss_mb(pid), rss_mb(pid, "VmHWM")
        lv.cpu_us = cpu / max(lv.statements, 1) * 1e6
    lv.burst_ms, lv.burst_errors = await clients.burst()
    return lv


def show(lv: Level) -> None:
    errs = ",".join(f"{k}x{v}" for k, v in sorted(lv.errors.items())) or "0"
    mem = f"{lv.rss_mb:7.1f} {lv.hwm_mb:7.1f}" if lv.rss_mb else f"{'-':>7} {'-':>7}"
    cpu = f"{lv.cpu_us:6.0f}" if lv.cpu_us else f"{'-':>6}"
    print(f"{lv.target:<6} {lv.clients:>6} {lv.qps:>8.0f} {pct(lv.select_ms, 50):>7.2f} {pct(lv.select_ms, 99):>7.2f} "
          f"{pct(lv.txn_ms, 50):>7.2f} {pct(lv.txn_ms, 99):>7.2f} {errs:>6} {mem} {cpu} {lv.open_s:>6.1f} "
          f"{pct(lv.burst_ms, 99):>8.1f} {max(lv.burst_ms, default=0):>8.1f} {lv.burst_errors:>4}  {lv.load}",
          flush=True)


HEADER = (f"{'target':<6} {'conns':>6} {'qps':>8} {'sel p50':>7} {'sel p99':>7} {'txn p50':>7} {'txn p99':>7} "
          f"{'errors':>6} {'RSS MB':>7} {'HWM MB':>7} {'µs/st':>6} {'open s':>6} {'burst99':>8} {'burstmax':>8} "
          f"{'err':>4}  load")


class ManyClientsBench(Bench):
    """point_select's servers and data, with max_connections above the largest level."""

    def _config(self, port: int, manager_port: int, instance: str) -> dict[str, Any]:
        cfg = super()._config(port, manager_port, instance)
        cfg["server"]["max_connections"] = max(self.args.levels) + 100
        return cfg


def raise_nofile() -> int:
    """The soft RLIMIT_NOFILE up to the hard limit: the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


async def run_all(b: ManyClientsBench, args: argparse.Namespace) -> list[Level]:
    """Each round: direct at the first level, then the proxy at every level (ascending in even rounds,
    descending in odd ones: the crowd leaves again)."""
    levels: list[Level] = []
    for rnd in range(args.rounds):
        direct = Clients("direct", "127.0.0.1", b.port, "root", args.mysql_password, DIRECT_DB, args)
        try:
            levels.append(await measure(direct, args.levels[0], rnd, args, None))
            show(levels[-1])
        finally:
            direct.close()
        for target in b.proxy_ports:   # "proxy", then "base" (--baseline)
            via = Clients(target, "127.0.0.1", b.proxy_ports[target], "sbtest", "sbtest", "sbtest", args)
            try:
                for n in args.levels if rnd % 2 == 0 else args.levels[::-1]:
                    levels.append(await measure(via, n, rnd, args, b.proxies[target][0].pid))
                    show(levels[-1])
            finally:
                via.close()
    return levels


def summary(levels: list[Level]) -> None:
    """Medians over the rounds, and the ratios of each round."""
    def of(target: str, n: int) -> list[Level]:
        return [lv for lv in levels if lv.target == target and lv.clients == n]

    first = levels[0].clients
    direct = of("direct", first)
    targets = [t for t in ("proxy", "base") if of(t, first)]
    counts = sorted({lv.clients for lv in levels if lv.target == "proxy"})
    med = statistics.median
    print(f"\nmedians over {len(direct)} round(s):")
    print(f"{'target':<6} {'conns':>6} {'qps':>8} {'sel p99':>8} {'txn p99':>8} {'RSS MB':>7} {'µs/st':>6}")
    for target, n in [("direct", first), *((t, n) for t in targets for n in counts)]:
        lvs = of(target, n)
        print(f"{target:<6} {n:>6} {med(lv.qps for lv in lvs):>8.0f} {med(pct(lv.select_ms, 99) for lv in lvs):>8.2f} "
              f"{med(pct(lv.txn_ms, 99) for lv in lvs):>8.2f} {max(lv.rss_mb for lv in lvs):>7.1f} "
              f"{med(lv.cpu_us for lv in lvs):>6.0f}")
    for target in targets:
        base = of(target, first)
        qr = [b.qps / d.qps for b, d in zip(base, direct)]
        pr = [pct(b.select_ms, 99) / max(pct(d.select_ms, 99), 1e-9) for b, d in zip(base, direct)]
        print(f"\n{target} at {first} vs direct at {first}: qps ratio {med(qr):.2f} (rounds: "
              f"{', '.join(f'{x:.2f}' for x in qr)}), select p99 ratio {med(pr):.2f}")
        for n in counts[1:]:
            lvs = of(target, n)
            r = [pct(lv.select_ms, 99) / max(pct(b.select_ms, 99), 1e-9) for lv, b in zip(lvs, base)]
            t = [pct(lv.txn_ms, 99) / max(pct(b.txn_ms, 99), 1e-9) for lv, b in zip(lvs, base) if b.txn_ms]
            q = [lv.qps / b.qps for lv, b in zip(lvs, base)]
            rss = max(lv.rss_mb for lv in lvs)
            up = [(lv, b) for lv, b in zip(lvs, base) if lv.round == 0]   # ascending: RSS stays at its peak after
            per = (up[0][0].rss_mb - up[0][1].rss_mb) * 1024 / max(n - first, 1) if up else 0.0
            print(f"{target} at {n}: select p99 {med(r):.2f} x p99 at {first} (goal <= {GOAL_P99:g}; rounds: "
                  f"{', '.join(f'{x:.2f}' for x in r)}), txn p99 {med(t) if t else 0:.2f} x, qps {med(q):.2f} x; "
                  f"RSS {rss:.0f} MB (goal <= {GOAL_RSS_MB}), {per:.1f} KB per added client (first round)")


def _csv(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", type=_csv, default=[100, 1000, 5000], help="client connections per level")
    ap.add_argument("--time", type=float, default=10.0, help="measured seconds per level")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every level, the order alternating")
    ap.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds per level first")
    ap.add_argument("--active", type=int, default=32, help="clients in a closed loop; the others are mostly idle")
    ap.add_argument("--txn-share", type=float, default=0.1, help="share of the active clients' operations that "
                    "are a transaction (BEGIN; select; UPDATE; COMMIT)")
    ap.add_argument("--idle-every", type=float, default=20.0, help="seconds between an idle client's selects")
    ap.add_argument("--open-at-once", type=int, default=256, help="logins in flight while a level's connections "
                    "are opened (5000: every client connects at the same moment, the accept backlog's test)")
    ap.add_argument("--table-size", type=int, default=10000)
    ap.add_argument("--mysql-port", type=int, help="use this MariaDB on 127.0.0.1 instead of a private one")
    ap.add_argument("--mysql-password", default="")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark databases on --mysql-port")
    ap.add_argument("--baseline", metavar="DIR", help="also run the proxy of another checkout (A/B in one "
                    "invocation), e.g. an export of main: git archive main | tar -x -C /tmp/base")
    ap.add_argument("--profile", metavar="FILE", help="record the proxy with py-spy during the largest level")
    args = ap.parse_args(argv)
    args.workers, args.baseline_workers = 1, 0   # what point_select's Bench reads
    limit = raise_nofile()
    if limit < max(args.levels) + 200:
        print(f"RLIMIT_NOFILE hard limit {limit} is too low for {max(args.levels)} clients", file=sys.stderr)
        return 2
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    b = ManyClientsBench(args)
    try:
        b.start()
        print(f"load average before: {loadavg()}; {os.cpu_count()} CPUs; active clients {args.active}, txn share "
              f"{args.txn_share}, idle clients select every {args.idle_every:g} s, {args.time:g} s per level")
        print(HEADER)
        levels = asyncio.run(run_all(b, args))
        summary(levels)
        print(f"load average after: {loadavg()}")
    finally:
        b.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
