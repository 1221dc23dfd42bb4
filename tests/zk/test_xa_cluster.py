"""XA in a cluster: the coordinator is killed (-9) mid-commit; a surviving instance finishes its transaction
from the decision in ZooKeeper (or rolls it back when there is none), with nobody restarting it."""

from __future__ import annotations

import subprocess
import sys
import threading

import pymysql
import pytest
from clusterkit import SESSION_TIMEOUT_S, TABLE, wait_for
from harness.proxy import REPO_ROOT

IDS = range(1, 9)   # two rows on each of dn1..dn4


def _rows(backends) -> list[int]:
    return sorted(r[0] for b in backends for db in ("db1", "db2") for r in b.query(f"SELECT id FROM {TABLE}", db))


def _in_doubt(backends) -> list[bytes]:
    return [row[3] for b in backends for row in b.query("XA RECOVER") if row[3].startswith(b"pydble.dble-1.")]


def _commit_in_thread(p) -> threading.Thread:
    def go() -> None:
        try:
            conn = p.connect(read_timeout=120)
            with conn.cursor() as cur:
                cur.execute("SET xa = on")
                cur.execute("BEGIN")
                cur.execute(f"INSERT INTO {TABLE} VALUES " + ", ".join(f"({i}, {i})" for i in IDS))
                cur.execute("COMMIT")
        except pymysql.MySQLError:
            pass   # its proxy is killed under it
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("phase,committed", [("xa_after_decision", True), ("xa_after_prepare", False)])
def test_survivor_finishes_the_dead_coordinators_transaction(cluster, phase, committed) -> None:
    p1, p2 = cluster.start(2, env={0: {"PYDBLE_TEST_PAUSE": phase, "PYDBLE_TEST_PAUSE_S": "600"}})
    t = _commit_in_thread(p1)
    wait_for(lambda: "paused for test" in p1.log_text() and phase in p1.log_text(), 60, f"dble-1 to pause at {phase}")
    assert len(_in_doubt(cluster.backends)) == 4
    assert len(cluster.zk_children("xa")) == (1 if committed else 0)   # the decision is in ZooKeeper first
    rows = p2.manager_query("show @@xa")   # another instance sees it too, and leaves it to its live owner
    assert [r[1:4] for r in rows] == [("dble-1", "commit" if committed else "none", "in doubt")], rows
    if committed:   # the CLI reads the decision from ZooKeeper and XA RECOVER from the backends
        listed = subprocess.run([sys.executable, "-m", "cli", "xa", "list", "--config", str(p2.config_path)],
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and "dble-1" in listed.stdout and "commit" in listed.stdout, listed
    p1.kill()
    t.join(30)
    # dble-1's ZooKeeper session expires, dble-2 sees it gone and finishes its transaction
    wait_for(lambda: not _in_doubt(cluster.backends), SESSION_TIMEOUT_S + 30, "dble-2 to finish dble-1's branches")
    assert _rows(cluster.backends) == (list(IDS) if committed else [])
    assert p2.query(f"SELECT COUNT(*) FROM {TABLE}") == [(len(IDS) if committed else 0,)]
    if committed:
        wait_for(lambda: not cluster.zk_children("xa"), 10, "the finished decision to be removed")
    else:   # a rollback tombstone: a coordinator wrongly taken for dead would read it and roll back too
        assert len(cluster.zk_children("xa")) == 1
    assert "finishing an in-doubt XA transaction" in p2.log_text()


def test_a_coordinator_taken_for_dead_does_not_commit(cluster) -> None:
    """dble-1 freezes (SIGSTOP) after its prepares until its session expires: dble-2 records a rollback for
    its transaction. Woken up, dble-1 must not commit: the client gets an error and nothing is written."""
    p1, p2 = cluster.start(2, env={0: {"PYDBLE_TEST_PAUSE": "xa_after_prepare", "PYDBLE_TEST_PAUSE_S": "1"}})
    outcome: dict[str, object] = {}

    def go() -> None:
        try:
            conn = p1.connect(read_timeout=120)
            with conn.cursor() as cur:
                cur.execute("SET xa = on")
                cur.execute("BEGIN")
                cur.execute(f"INSERT INTO {TABLE} VALUES " + ", ".join(f"({i}, {i})" for i in IDS))
                cur.execute("COMMIT")
            outcome["ok"] = True
        except pymysql.MySQLError as e:
            outcome["error"] = e.args[0]

    t = threading.Thread(target=go, daemon=True)
    t.start()
    wait_for(lambda: "paused for test" in p1.log_text(), 60, "dble-1 to pause after its prepares")
    p1.pause()
    try:   # its branches stay attached to its live connections: dble-2 can only record the rollback
        wait_for(lambda: cluster.zk_children("xa"), SESSION_TIMEOUT_S + 30, "dble-2 to record a rollback")
    finally:
        p1.resume()
    t.join(60)
    assert outcome.get("error") in (1402, 1105), outcome   # rolled back (or: outcome left to recovery)
    wait_for(lambda: not _in_doubt(cluster.backends), 60, "the branches to be rolled back")
    assert _rows(cluster.backends) == []
    assert len(cluster.zk_children("xa")) == 1   # dble-1 left dble-2's rollback decision in place
