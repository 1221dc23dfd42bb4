"""kill -9 of a DDL originator paused at each phase: survivors heal the cluster with no manual step."""

from __future__ import annotations

import time

import pytest
from clusterkit import SESSION_TIMEOUT_S, TABLE, backend_structure, full_meta, run_async, wait_for

from zk.originator import PAUSE_PHASES

PHASES = list(PAUSE_PHASES)


@pytest.mark.parametrize("phase", PHASES)
def test_originator_killed_at_phase(cluster, phase):
    p1, p2, p3 = cluster.start(env={0: {"PYDBLE_TEST_PAUSE": phase}})
    t, out = run_async(p1, f"ALTER TABLE {TABLE} ADD COLUMN c_{phase} INT")
    wait_for(lambda: "paused for test" in p1.log_text() and phase in p1.log_text(), 20,
             f"dble-1 to pause at {phase}")
    p1.kill()
    killed = time.monotonic()

    # survivors never hang: DML answers while the dead instance's session is expiring
    for p in (p2, p3):
        p.query(f"SELECT COUNT(*) FROM {TABLE}")

    # the next DDL on the table works on a survivor within session_timeout + 2 s (+ the DDL itself)
    def next_ddl_works() -> bool:
        p2.query(f"ALTER TABLE {TABLE} ADD COLUMN after_{phase} INT")
        return True

    wait_for(next_ddl_works, SESSION_TIMEOUT_S + 2 + 3, "a survivor to accept DDL on the table", interval=0.3)
    assert time.monotonic() - killed < SESSION_TIMEOUT_S + 2 + 3

    # no record or lock left, every survivor agrees with the backends
    wait_for(lambda: not cluster.zk_children("ddl") and not cluster.zk_children("lock/ddl_lock"), 5,
             "ddl records and locks to be gone")
    truth = backend_structure(cluster.backends)
    assert len(truth) == 1, f"backends disagree after {phase}: {truth}"
    for p in (p2, p3):
        row = full_meta(p)
        assert row[4:] == (1, 1), (p.instance, row)
        assert f"`after_{phase}`" in row[3]
        assert (f"`c_{phase}`" in row[3]) == (f"`c_{phase}`" in next(iter(truth)))

    # the crashed instance rejoins cleanly and serves the same structure
    p1.extra_env = {}
    p1.start()
    row = full_meta(p1)
    assert row[4:] == (1, 1) and f"`after_{phase}`" in row[3]
    p1.query(f"ALTER TABLE {TABLE} DROP COLUMN after_{phase}")
    assert f"`after_{phase}`" not in full_meta(p3)[3]
    t.join(1)
