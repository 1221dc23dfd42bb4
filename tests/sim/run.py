"""Run many simulated schedules on demand:

    python -m tests.sim.run --schedules 1000000 --seed 7 --jobs 2   # the production protocol, on 2 processes
    python -m tests.sim.run --schedules 5000 --variant kill-live-holder   # a fix reverted: finds it?
    python -m tests.sim.run --replay 1234 [--variant NAME]           # one schedule, with its trace
    python -m tests.sim.run --schedules 20000 --partial-loads        # reloads that miss a node are partial

Schedule i runs seed `seed * 10**9 + i`, so a reported seed replays alone with --replay. With --jobs N,
process k runs the schedules i with i % N == k: the same seeds as one process, the same results. Prints
schedules/s and CPU per schedule; exits 1 on the first violation (the lowest seed, whatever N), or
after --keep-going with every failing seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import queue
import sys
import time
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    __package__ = "tests.sim"

from .cluster import Variant, freeze_heap, run_schedule  # noqa: E402
from .variants import BUGS, FIXED  # noqa: E402


def _variant(name: str, partial_loads: bool) -> Variant:
    variant = FIXED if name == "fixed" else BUGS[name]
    return dataclasses.replace(variant, partial_loads=True) if partial_loads else variant


def _worker(seeds: range, name: str, partial_loads: bool, keep_going: bool, every: float, report: Any,
            stop_at: Any) -> None:
    """Run `seeds` in order, reporting ("progress"|"done", first seed, counts) every `every` seconds and at
    the end and ("violation", seed, text) at once; without keep_going, stop before a seed above the lowest
    failing seed any process has found (`stop_at`): every seed below it still runs somewhere."""
    freeze_heap()
    variant = _variant(name, partial_loads)
    n = steps = oks = ddls = 0
    last = time.perf_counter()
    cpu0 = time.process_time()
    for seed in seeds:
        if not keep_going and seed > stop_at.value:
            break
        o = run_schedule(seed, variant)
        n += 1
        steps += o.steps
        oks += o.oks
        ddls += o.ddls
        if o.violation:
            report(("violation", seed, o.violation))
            if not keep_going:
                with stop_at.get_lock():
                    stop_at.value = min(stop_at.value, seed)
        now = time.perf_counter()
        if now - last >= every:
            last = now
            report(("progress", seeds.start, n, steps, oks, ddls, time.process_time() - cpu0))
    report(("done", seeds.start, n, steps, oks, ddls, time.process_time() - cpu0))


class _Totals:
    """What the processes reported: their latest counts, the violations; prints as it goes."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.t0 = time.perf_counter()
        self.counts: dict[int, tuple] = {}   # a process's first seed -> (schedules, steps, oks, ddls, CPU s)
        self.failed: dict[int, str] = {}
        self.done = 0

    def take(self, msg: tuple) -> None:
        if msg[0] == "violation":
            self.failed[msg[1]] = msg[2]
            print(f"VIOLATION {msg[2]}", flush=True)
            return
        self.counts[msg[1]] = msg[2:]
        if msg[0] == "done":
            self.done += 1
        elif msg[1] == self.first:   # a line per round of the first process's reports
            n = sum(c[0] for c in self.counts.values())
            print(f"{n} schedules, {n / (time.perf_counter() - self.t0):.1f}/s, {len(self.failed)} violations",
                  flush=True)


def run_many(first: int, count: int, name: str = "fixed", partial_loads: bool = False, keep_going: bool = False,
             jobs: int = 1, every: float = 10.0) -> int:
    """Schedules first..first+count-1 on `jobs` processes (1: this one); prints progress, every violation and
    the totals; 1 if any schedule broke a promise."""
    ctx = multiprocessing.get_context("spawn")
    stop_at = ctx.Value("q", first + count)   # the lowest failing seed found (none yet: past the last)
    parts = [range(first + k, first + count, jobs) for k in range(jobs)]
    totals = _Totals(first)
    if jobs == 1:
        _worker(parts[0], name, partial_loads, keep_going, every, totals.take, stop_at)
    else:
        out = ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(p, name, partial_loads, keep_going, every, out.put, stop_at),
                             daemon=True) for p in parts]
        for p in procs:
            p.start()
        while totals.done < jobs:
            try:
                totals.take(out.get(timeout=1.0))
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in procs):
                    print("a worker process died", file=sys.stderr)
                    return 2
        for p in procs:
            p.join(timeout=10)
    dt = time.perf_counter() - totals.t0
    n, steps, oks, ddls, cpu = (sum(c[i] for c in totals.counts.values()) for i in range(5))
    failed = totals.failed
    if failed and not keep_going:   # what one process would have run: up to the first failing seed
        failed = {min(failed): failed[min(failed)]}
    print(f"variant {name}: {n} schedules in {dt:.1f}s on {jobs} process(es) ({n / dt:.1f} schedules/s, "
          f"{1000 * cpu / max(n, 1):.1f} ms CPU and {steps / max(n, 1):.0f} events each), {ddls} DDLs, "
          f"{oks} OKs checked, {len(failed)} violations" + (f" (seeds {sorted(failed)})" if failed else ""))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sim.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schedules", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0, help="base seed (schedule i runs seed*10**9+i)")
    ap.add_argument("--variant", default="fixed", choices=["fixed", *BUGS])
    ap.add_argument("--replay", type=int, help="run this one seed and print its trace")
    ap.add_argument("--keep-going", action="store_true", help="count every violation instead of stopping")
    ap.add_argument("--partial-loads", action="store_true",
                    help="a reload that misses a node publishes a partial result and says so (meta.loader's way)")
    ap.add_argument("--jobs", type=int, default=1, help="processes to spread the schedules over")
    ap.add_argument("--every", type=float, default=10.0, help="progress line every N seconds")
    args = ap.parse_args(argv)
    if args.replay is not None:
        o = run_schedule(args.replay, _variant(args.variant, args.partial_loads), trace=True)
        print("\n".join(o.trace or []))
        print(f"seed {o.seed}: {o.violation or 'no violation'}; answers {o.answers}; {o.steps} steps")
        return 1 if o.violation else 0
    return run_many(args.seed * 10**9, args.schedules, args.variant, args.partial_loads, args.keep_going,
                    max(1, args.jobs), args.every)


if __name__ == "__main__":
    sys.exit(main())
