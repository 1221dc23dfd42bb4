"""Run many simulated schedules on demand:

    python -m tests.sim.run --schedules 1000000 --seed 7            # the production protocol
    python -m tests.sim.run --schedules 5000 --variant kill-live-holder   # a fix reverted: finds it?
    python -m tests.sim.run --replay 1234 [--variant NAME]           # one schedule, with its trace
    python -m tests.sim.run --schedules 20000 --partial-loads        # reloads that miss a node are partial

Schedule i runs seed `seed * 10**9 + i`, so a reported seed replays alone with --replay. Prints
schedules/s; exits 1 on the first violation (or after --keep-going, with every failing seed).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    __package__ = "tests.sim"

from .cluster import run_schedule  # noqa: E402
from .variants import BUGS, FIXED  # noqa: E402


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
    ap.add_argument("--every", type=float, default=10.0, help="progress line every N seconds")
    args = ap.parse_args(argv)
    variant = FIXED if args.variant == "fixed" else BUGS[args.variant]
    if args.partial_loads:
        variant = dataclasses.replace(variant, partial_loads=True)
    if args.replay is not None:
        o = run_schedule(args.replay, variant, trace=True)
        print("\n".join(o.trace or []))
        print(f"seed {o.seed}: {o.violation or 'no violation'}; answers {o.answers}; {o.steps} steps")
        return 1 if o.violation else 0
    t0 = last = time.perf_counter()
    failed: list[int] = []
    steps = oks = ddls = 0
    n = 0
    for i in range(args.schedules):
        seed = args.seed * 10**9 + i
        o = run_schedule(seed, variant)
        n += 1
        steps += o.steps
        oks += o.oks
        ddls += o.ddls
        if o.violation:
            failed.append(seed)
            print(f"VIOLATION {o.violation}", flush=True)
            if not args.keep_going:
                break
        now = time.perf_counter()
        if now - last >= args.every:
            last = now
            print(f"{n} schedules, {n / (now - t0):.1f}/s, {len(failed)} violations", flush=True)
    dt = time.perf_counter() - t0
    print(f"variant {args.variant}: {n} schedules in {dt:.1f}s ({n / dt:.1f} schedules/s, {steps / max(n, 1):.0f} "
          f"events each), {ddls} DDLs, {oks} OKs checked, {len(failed)} violations"
          + (f" (seeds {failed[:20]})" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
