"""The cluster DDL protocol (zk/ddlcore, driven by the production drivers zk/originator.py, zk/listener.py,
zk/recovery.py and the rest of zk/cluster.py's Cluster, running on the simulator's virtual clock) under a
deterministic simulation: thousands of seeded schedules of DDLs, slow and blocked
ALTERs, silent and unreachable backends, paused, crashed and restarted instances, expiring sessions,
a lossy peer channel and operators killing locks, each checked after every step and at quiescence
(tests/sim/checker.py). With each of issue 17's fixes reverted (test-side, tests/sim/variants.py) the
simulator finds the bug on the seed named here."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from .cluster import freeze_heap, run_schedule
from .variants import BUGS, FIXED

SCHEDULES = 2000   # `make test` (half with partial loads); on demand: python -m tests.sim.run --schedules 1000000
WORKERS = 2        # processes the schedules are spread over (the box's cores)


def _run_chunk(seeds: list[int]) -> tuple[int, int, list[str]]:
    """Schedules in a worker process: seed s runs with partial loads when odd."""
    freeze_heap()
    partial = dataclasses.replace(FIXED, partial_loads=True)
    oks = ddls = 0
    failed = []
    for seed in seeds:
        o = run_schedule(seed, partial if seed % 2 else FIXED)
        oks += o.oks
        ddls += o.ddls
        if o.violation:
            failed.append(o.violation)
    return oks, ddls, failed


def test_thousands_of_schedules_keep_every_promise() -> None:
    t0 = time.perf_counter()
    seeds = [s for s in range(SCHEDULES) if s not in OPEN_SEEDS]   # an open hole: test_open_holes_still_found
    chunks = [seeds[i::WORKERS] for i in range(WORKERS)]
    with ProcessPoolExecutor(WORKERS, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_run_chunk, chunks))
    oks = sum(r[0] for r in results)
    ddls = sum(r[1] for r in results)
    failed = [v for r in results for v in r[2]]
    dt = time.perf_counter() - t0
    print(f"{len(seeds)} schedules in {dt:.1f}s ({len(seeds) / dt:.0f}/s on {WORKERS} processes), {ddls} DDLs, "
          f"{oks} OKs checked")
    assert not failed, f"{len(failed)} schedules broke a promise (replay: python -m tests.sim.run --replay SEED " \
                       f"[--partial-loads for an odd seed]):\n" + "\n".join(failed[:5])
    assert oks > SCHEDULES // 2 and ddls > 4 * SCHEDULES   # the workload really ran DDLs to the end


def test_a_seed_replays_exactly() -> None:
    a = run_schedule(38, FIXED, trace=True)
    b = run_schedule(38, FIXED, trace=True)
    assert a.trace == b.trace and a.steps == b.steps and len(a.trace) > 10
    assert run_schedule(39, FIXED, trace=True).trace != a.trace


@pytest.mark.parametrize("seed", [38, 454])
def test_a_seed_replays_exactly_in_another_process(seed: int) -> None:
    """Nothing depends on str hashing (set order) or the clock: --replay in a fresh interpreter with another
    hash seed prints the same trace (seed 454 did not while zk/acks.py re-sent steps in a set's order)."""
    root = Path(__file__).resolve().parents[2]
    outs = [subprocess.run([sys.executable, "-m", "tests.sim.run", "--replay", str(seed)], cwd=root,
                           capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONHASHSEED": h}).stdout
            for h in ("0", "8")]
    assert outs[0] == outs[1] and outs[0].count("\n") > 10


def test_jobs_run_the_same_seeds_as_one_process() -> None:
    """`python -m tests.sim.run --jobs N` splits the schedules over N processes: the same totals and failing
    seeds as one process, and without --keep-going the lowest failing seed, where one process stops."""
    root = Path(__file__).resolve().parents[2]

    def run(*args: str) -> tuple[int, str]:
        p = subprocess.run([sys.executable, "-m", "tests.sim.run", "--seed", "4", "--schedules", "21", "--variant",
                            "kill-live-holder", "--every", "600", *args], cwd=root, capture_output=True, text=True,
                           timeout=600)
        last = p.stdout.strip().splitlines()[-1]
        return p.returncode, re.sub(r" in [0-9.]+s on \d+ process\(es\) \([0-9.]+ schedules/s, [0-9.]+ ms CPU and", "",
                                    last)
    one = run("--keep-going")
    # with that fix reverted, --seed 4 fails on its schedules 6 and 20 (a change to the simulator may move them)
    assert one[0] == 1 and one[1].endswith("2 violations (seeds [4000000006, 4000000020])"), one
    assert run("--keep-going", "--jobs", "2") == one
    rc, first = run("--jobs", "3")
    assert rc == 1 and first.endswith("1 violations (seeds [4000000006])"), first


# (variant, seed, what the checker reports): each seed was found by `python -m tests.sim.run --variant NAME`.
# A change to the core or the simulator reshuffles schedules; the test then looks at the next seeds (and
# says which one found it, to be named here), and fails only when none of SEARCH does.
REVERTED = [
    # 1. the decision conditional on the lock's version only: after an operator's forced release and a new DDL
    #    on the table, the old originator's SUCCESS lands on the new DDL's record
    ("lock-version-only", 2817, "stale decide"),
    # 2. an ack without the record's identity, counted for whatever record is at the path and written by a
    #    subscriber that no longer checks the record's czxid before a delayed ack (both halves of the fix
    #    reverted; either alone is masked by the other): a late ack lands on the table's next DDL
    ("ack-without-identity", 209, "stale ack"),
    # 3. history_seen moved before the entry is applied: a subscriber whose reload failed (a node unreachable)
    #    never catches up and serves the old structure for good
    ("history-seen-before-applied", 992, " serves t"),
    # 4. kill @@ddl_lock releasing a live holder without `force` (and, as it did, whatever record and lock are
    #    there by the time it deletes, without looking at the processlist): a second DDL is admitted while the
    #    first still waits on a metadata lock
    ("kill-live-holder", 170, "two DDLs on table t1 at once"),
    # 5. the reconciler reading the structure while the orphaned ALTER is still queued on a node: a new DDL is
    #    admitted while it still runs
    ("reconcile-while-running", 293, "two DDLs on table t1"),
    # 6. a partial reload (a node unreachable, its old part carried over) counted as applied: the subscriber
    #    never reloads the table again
    ("partial-load-counted", 490, "but i2, online and not reported lagging, serves"),
    # 7. no background re-read after the originator's own refresh missed a node (DdlRunner.reload_later): a
    #    DDL that failed on a node that went down after the reachability check stays unread there
    ("no-reload-later", 1000003406, " serves t"),
    # 8. a ddl_history entry naming this instance skipped as its own: a restarted instance whose join read the
    #    table while its predecessor's ALTER still ran on a node never applies the reconciler's entry
    ("history-skips-own-name", 62000003446, " serves t"),
    # 9. a final step delayed on the peer channel past the table's next DDL applied with its own, older texts
    #    (a restarted instance answering its predecessor's step after the next DDL's outcome): the structure
    #    from before that next DDL is served for good, though the client heard OK
    ("stale-texts", 91000040171, "serves"),
]
SEARCH = 3000


@pytest.mark.parametrize("variant,seed,found", REVERTED, ids=[f"{v}-{s}" for v, s, _ in REVERTED])
def test_each_fix_reverted_is_found(variant: str, seed: int, found: str) -> None:
    broken = BUGS[variant]
    fixed = dataclasses.replace(FIXED, reload_failures=broken.reload_failures, partial_loads=broken.partial_loads)
    for s in range(seed, seed + SEARCH):
        o = run_schedule(s, broken)
        if o.violation is not None and found in o.violation:
            # the same schedule with the fix keeps every promise: the violation is that bug's
            if run_schedule(s, fixed).violation is None:
                if s != seed:
                    print(f"{variant}: found on seed {s} (name it in REVERTED instead of {seed})")
                return
    pytest.fail(f"with the fix '{variant}' reverted, no schedule of {seed}..{seed + SEARCH - 1} broke a promise")


# Protocol holes the simulator found after its first version, each closed since in production; their seeds
# stay as regressions. A hole found later goes here as a strict xfail until fixed.
CLOSED = [
    # a DDL that failed on a node that went down after the reachability check: the originator's refresh
    # cannot read that node; it now reads the table again in the background, backing off, until every node
    # answers (proxy/ddl/ddl.py DdlRunner.reload_later)
    ("originator-refresh", 1000003406, {}),
    # meta.loader's partial load (a node unreachable: its old structure carried over): the subscriber counted
    # the outcome as applied and never reloaded the table; now RefreshIncomplete -> ack ok=False -> retried
    ("partial-load", 490, {"partial_loads": True}),
    # a restarted instance (same name) whose join read a table while its crashed predecessor's ALTER still ran
    # on a node; a survivor reconciled it once it had ended, but the ddl_history entry named this instance
    # and the catch-up skipped it as "our own DDL" (zk/ddlcore/subscriber.py entry_applies): the node's old
    # structure stayed served. Now only an entry whose record this process applied (or ran) is skipped.
    # Found by a --partial-loads run; the old code fails both seeds without partial loads too.
    ("history-own-name", 62000003446, {"partial_loads": True}),
    ("history-own-name", 62000011133, {"partial_loads": True}),
    # a final step the peer channel delivered after the table's next DDL's outcome was applied here (the
    # originator's restarted peer got its predecessor's step late) put the older CREATE texts back; a step
    # of a record older than the newest outcome applied for its table now changes nothing
    # (zk/ddlcore/subscriber.py superseded), nor does one whose ddl_history entry the restarted process's join
    # read before loading the table (late_final_answer, from a review). Found by session 14's long run
    # (seed 91), both seeds.
    ("stale-texts", 91000040171, {}),
    ("stale-texts", 91000058712, {}),
    # The earlier holes' seeds (originator-refresh 1884 and 7000005245, catch-up-during-ddl 8000041602 and
    # 8000023281, history-after-join 13000014570) named schedules of the mirror drivers; with the production
    # drivers running here the same seeds draw other schedules. Their fixes stay covered where a variant
    # reverts them (REVERTED); the on-demand search for catch-up-without-lock is in bench/RESULTS.md.
    # Session 11's richer workload (DROP COLUMN, indexes, CREATE/DROP TABLE, a copying ALTER) moved the
    # seeds of both holes above (1000001652 and 111 before), found again by their REVERTED variants.
]
OPEN_SEEDS: set[int] = set()


@pytest.mark.parametrize("name,seed,knobs", CLOSED, ids=[f"{n}-{s}" for n, s, _ in CLOSED])
def test_closed_holes_stay_closed(name: str, seed: int, knobs: dict) -> None:
    o = run_schedule(seed, dataclasses.replace(FIXED, **knobs))
    assert o.violation is None, f"{name}: {o.violation}"
