"""One chaos run end to end: start the world, storm it, heal it, check it, report (seed first)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from chaos_check import Checker
from chaos_env import ACK_TIMEOUT_S, SESSION_TIMEOUT_S, TABLES, ChaosEnv
from chaos_faults import Faults
from chaos_workload import DDL_READ_TIMEOUT_S, Workload

CALM_S = 5.0   # after healing, clients keep going this long on a whole cluster before they stop


@dataclass
class ChaosReport:
    """What a run did and found."""

    seed: int
    seconds: float
    operations: int = 0
    ops_by_outcome: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    fault_log: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    artifacts: str = ""

    def repro(self) -> str:
        """One line that runs the same schedule again."""
        return f".venv/bin/python tests/chaos/run.py --seed {self.seed} --seconds {self.seconds:g}"

    def summary(self) -> str:
        """A few lines for humans."""
        ok = sum(n for k, n in self.ops_by_outcome.items() if ":ok" in k)
        lines = [f"chaos seed={self.seed} seconds={self.seconds:g} wall={self.wall_s:.0f}s "
                 f"operations={self.operations} (ok {ok}) violations={len(self.violations)}",
                 "faults: " + ", ".join(f"{k}={v}" for k, v in sorted(self.faults.items())),
                 "notes: " + json.dumps(self.notes, sort_keys=True, default=str)]
        lines += [f"VIOLATION: {v}" for v in self.violations]
        if self.violations:
            lines.append(f"reproduce: {self.repro()}   (seed {self.seed})")
        if self.artifacts:
            lines.append(f"logs: {self.artifacts}")
        return "\n".join(lines)


def run_chaos(seed: int, seconds: float, workers: int = 6, emit: Callable[[str], None] | None = None,
              keep_logs: bool | None = None) -> ChaosReport:
    """Run the storm for `seconds`, then the checks; never raises for a violation (they are reported)."""
    began = time.monotonic()
    t0 = time.monotonic()
    lines: list[str] = []

    def say(msg: str) -> None:
        line = f"[{time.monotonic() - t0:7.1f}s {time.strftime('%H:%M:%S')}] {msg}"
        lines.append(line)
        if emit is not None:
            emit(line)

    report = ChaosReport(seed, seconds)
    env = ChaosEnv(str(seed))
    checker: Checker | None = None
    workload: Workload | None = None
    faults: Faults | None = None
    try:
        say(f"seed {seed}: starting 2 backends, ZooKeeper, 3 instances (root {env.root})")
        env.start()
        workload = Workload(env, seed, workers)
        faults = Faults(env, seed, workload, say)
        checker = Checker(env, workload, faults, say)
        workload.start()
        say(f"{workers} clients running; faults for {seconds:g}s")
        faults.run(time.monotonic() + seconds)
        faults.finish()
        restarted = env.wait_all_running()
        if restarted:
            checker.fail(f"servers down after the schedule healed everything: {restarted}")
        say(f"all faults healed; clients go on for {CALM_S:g}s on a whole cluster")
        time.sleep(CALM_S)
        stuck = workload.stop(DDL_READ_TIMEOUT_S + 15)
        if stuck:
            checker.fail(f"client threads still stuck after the stop: {stuck}")
        say(f"clients stopped after {workload.ops} operations; settling")
        for p in faults.problems:
            checker.fail(p)
        if checker.settle(60 + 3 * SESSION_TIMEOUT_S + 4 * ACK_TIMEOUT_S):
            checker.zk_clean("after settling")
            divergent = checker.structure_vs_clients()
            calm = [t for t in TABLES if t not in divergent]
            checker.metadata(calm, "after settling (tables the same on every node)")
            checker.metadata_vs_clients()
            say(f"structure checked; tables differing across nodes after failed DDLs: {sorted(divergent)}")
            checker.half_applied(divergent)
            checker.repair(divergent)
            checker.probe()
            checker.zk_clean("after the post-heal DDLs")
            checker.metadata(list(TABLES), "at the end", expect_names=True)
        checker.rows()
        checker.overlaps()
        checker.bounds()
        for v in workload.violations:
            checker.fail(v)
    except Exception as e:  # noqa: BLE001 - the harness failing is reported like a violation
        import traceback
        say(traceback.format_exc())
        report.violations.append(f"chaos run aborted: {e!r}")
    finally:
        if workload is not None:
            workload.stop_event.set()
        if checker is not None:
            report.violations[:0] = checker.violations
            report.notes = checker.notes
        if workload is not None:
            report.operations = workload.ops
            report.ops_by_outcome = dict(sorted(workload.stats.items()))
        if faults is not None:
            report.faults = dict(faults.counts)
            report.fault_log = [f"{r.wall} {r.kind} {r.target} {r.end - r.start:.1f}s {r.detail}" for r in faults.records]
        report.wall_s = time.monotonic() - began
        if keep_logs if keep_logs is not None else bool(report.violations):
            dest = Path(os.environ.get("PYDBLE_CHAOS_ARTIFACTS") or tempfile.gettempdir()) / \
                f"pydble-chaos-{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
            env.keep_logs(dest)
            (dest / "chaos.log").write_text("\n".join(lines) + "\n")
            (dest / "report.json").write_text(json.dumps(report.__dict__, indent=1, default=str))
            report.artifacts = str(dest)
        env.cleanup()
    return report


def seed_from_env() -> int:
    """PYDBLE_CHAOS_SEED, or a fresh random seed (printed with every report)."""
    raw = os.environ.get("PYDBLE_CHAOS_SEED")
    return int(raw) if raw else int.from_bytes(os.urandom(4), "big")


if __name__ == "__main__":  # pragma: no cover - use run.py
    sys.exit("use tests/chaos/run.py")
