"""CPU per simulated schedule (tests/sim): this tree against a baseline tree (e.g. a `git archive` of main),
back to back in alternating rounds, so the load of a shared box falls on both alike.

    python bench/sim_cost.py --base /tmp/main-copy --schedules 300 --rounds 3

Each round runs the same seeds in a fresh interpreter per tree, the way that tree's runner does
(`freeze_heap()` first where the tree has it), and times the schedules alone with process_time (not the
imports). Prints ms of CPU per schedule per round, the medians and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import sys, time
sys.path.insert(0, {tree!r})
from tests.sim import cluster
if hasattr(cluster, "freeze_heap"):
    cluster.freeze_heap()
t0 = time.process_time()
steps = 0
for seed in range({first}, {first} + {n}):
    steps += cluster.run_schedule(seed).steps
print(time.process_time() - t0, steps)
"""


def cpu_per_schedule(tree: Path, first: int, n: int) -> tuple[float, int]:
    """ms of CPU per schedule of seeds first..first+n-1 in `tree`, and the events they took."""
    out = subprocess.run([sys.executable, "-c", CHILD.format(tree=str(tree), first=first, n=n)], cwd=tree,
                         capture_output=True, text=True, check=True, timeout=3600).stdout.split()
    return 1000 * float(out[0]) / n, int(out[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True, help="the baseline tree (a checkout or git archive)")
    ap.add_argument("--schedules", type=int, default=300)
    ap.add_argument("--first", type=int, default=0, help="first seed")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    here = Path(__file__).resolve().parents[1]
    got: dict[str, list[float]] = {"base": [], "this": []}
    for r in range(args.rounds):
        order = [("base", args.base), ("this", here)]
        for name, tree in order if r % 2 == 0 else order[::-1]:
            ms, steps = cpu_per_schedule(tree, args.first, args.schedules)
            got[name].append(ms)
            print(f"round {r + 1} {name}: {ms:.1f} ms CPU per schedule ({steps} events)", flush=True)
    base, this = statistics.median(got["base"]), statistics.median(got["this"])
    print(f"median: base {base:.1f} ms, this {this:.1f} ms per schedule: {base / this:.2f}x")


if __name__ == "__main__":
    main()
