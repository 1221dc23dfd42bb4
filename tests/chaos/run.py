"""Run one chaos storm from the command line: `python tests/chaos/run.py --seed N --seconds 1800`."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (HERE.parents[1], HERE.parent, HERE):  # repo root (zk, meta), tests/ (harness), tests/chaos
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from chaos_run import run_chaos, seed_from_env  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the report; exit 1 on any violation."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=None, help="schedule seed (default: $PYDBLE_CHAOS_SEED or random)")
    ap.add_argument("--seconds", type=float, default=60.0, help="how long faults are injected")
    ap.add_argument("--workers", type=int, default=6, help="client threads")
    ap.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    ap.add_argument("--keep-logs", action="store_true", help="keep server logs even when the run passes")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("kazoo.client").setLevel(logging.ERROR)  # the harness's probes while ZooKeeper restarts
    seed = args.seed if args.seed is not None else seed_from_env()
    print(f"chaos: seed {seed}, {args.seconds:g}s of faults", flush=True)
    report = run_chaos(seed, args.seconds, args.workers, emit=lambda line: print(line, flush=True),
                       keep_logs=True if args.keep_logs else None)
    print(report.summary(), flush=True)
    print("operations by outcome:", json.dumps(report.ops_by_outcome, indent=1, sort_keys=True), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report.__dict__, indent=1, default=str))
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
