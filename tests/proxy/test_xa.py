"""SET xa = on: two-phase commit over MariaDB XA, and recovery after a kill -9 of the proxy at each step.

What is committed is read on the backends directly; in-doubt branches with XA RECOVER.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any, Iterator

import pymysql
import pytest

from harness.proxy import REPO_ROOT
from wire import drop_after, hash_node, node_rows

FOUR = ("dn1", "dn2", "dn3", "dn4")
IDS = range(1, 9)   # two rows on each of the four nodes


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    yield from drop_after(proxy, "sharding_4_t1")


def _in_doubt(backends) -> list[str]:
    """pydble's prepared branches on the backends, as gtrid:bqual."""
    out = []
    for b in backends:
        for _fmt, glen, blen, data in b.query("XA RECOVER"):
            if data.startswith(b"pydble."):
                out.append(f"{data[:glen].decode()}:{data[glen:glen + blen].decode()}")
    return sorted(out)


@pytest.fixture
def table(proxy, backends) -> Iterator[str]:
    """sharding_4_t1 empty; afterwards no pydble branch is left prepared on the shared backends."""
    proxy.query("DROP TABLE IF EXISTS sharding_4_t1")
    proxy.query("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))")
    yield "sharding_4_t1"
    for b in backends:   # a failed test must not leave locks for the next ones
        for _fmt, glen, blen, data in b.query("XA RECOVER"):
            if data.startswith(b"pydble."):
                b.query(f"XA ROLLBACK X'{data[:glen].hex()}',X'{data[glen:glen + blen].hex()}'")


def _committed(backends, backend_rows) -> list[int]:
    return sorted(r[0] for n in FOUR for r in node_rows(backends, backend_rows, n, "SELECT id FROM sharding_4_t1"))


def _xa_txn(conn: Any, ids, end: str = "COMMIT", explicit: bool = True) -> None:
    """SET xa = on, then BEGIN, a multi-node INSERT, end (explicit) or the INSERT alone in autocommit."""
    with conn.cursor() as cur:
        cur.execute("SET xa = on")
        if explicit:
            cur.execute("BEGIN")
        cur.execute("INSERT INTO sharding_4_t1 VALUES " + ", ".join(f"({i}, 'n{i}')" for i in ids))
        if explicit:
            cur.execute(end)


def _error(conn: Any, sql: str) -> tuple[int, str]:
    with pytest.raises(pymysql.MySQLError) as ei:
        with conn.cursor() as cur:
            cur.execute(sql)
    return ei.value.args[0], ei.value.args[1]


def test_commit_rollback_and_one_node(proxy, table, backends, backend_rows) -> None:
    conn = proxy.connect()
    try:
        _xa_txn(conn, IDS, "ROLLBACK")
        assert _committed(backends, backend_rows) == []
        _xa_txn(conn, IDS)
        assert _committed(backends, backend_rows) == list(IDS)
        # autocommit: a write on two nodes failing on one (duplicate key) is rolled back on both
        assert _error(conn, "INSERT INTO sharding_4_t1 VALUES (30, 'x'), (1, 'dup')")[0] == 1062
        assert _committed(backends, backend_rows) == list(IDS)
        _xa_txn(conn, [20])   # one node: one phase
        assert _committed(backends, backend_rows) == [*IDS, 20]
        with conn.cursor() as cur:   # autocommit=0 as DBLE users write it; a read alone opens the branch too
            cur.execute("SET autocommit = 0")
            cur.execute("SELECT COUNT(*) FROM sharding_4_t1")
            assert cur.fetchone() == (9,)
            cur.execute("DELETE FROM sharding_4_t1 WHERE id > 4")
            cur.execute("COMMIT")
            cur.execute("SET autocommit = 1")
    finally:
        conn.close()
    assert _committed(backends, backend_rows) == [1, 2, 3, 4]
    assert _in_doubt(backends) == []
    assert proxy.manager_query("show @@xa") == []
    xa_dir = proxy.workdir / "data" / proxy.instance / "xa"
    _wait(lambda: not xa_dir.exists() or list(xa_dir.glob("*.json")) == [], 10,
          "the finished decisions to be forgotten")


def test_statements_that_cannot_run_inside_xa_are_refused(proxy, table, backends, backend_rows) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET xa = on")
            cur.execute("BEGIN")
            cur.execute("INSERT INTO sharding_4_t1 VALUES (1, 'a'), (2, 'b')")
        assert _error(conn, "SET xa = off")[0] == 1568
        code, msg = _error(conn, "CREATE TABLE xa_other (id INT PRIMARY KEY)")
        assert code == 1399 and "XAER_RMFAIL" in msg, msg
        assert _error(conn, "LOCK TABLES sharding_4_t1 WRITE")[0] == 1399
        # a view statement commits implicitly too, however the view is kept
        assert _error(conn, "CREATE VIEW xa_v AS SELECT id FROM sharding_4_t1")[0] == 1399
        assert _error(conn, "CREATE VIEW xa_v AS SELECT 1")[0] == 1399
        with conn.cursor() as cur:   # the transaction is still whole: it commits on both nodes
            cur.execute("COMMIT")
        assert _error(conn, "SET xa = maybe")[0] == 1231
    finally:
        conn.close()
    assert _committed(backends, backend_rows) == [1, 2]
    assert proxy.query("SHOW FULL TABLES LIKE 'xa_v'") == []


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60)


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.parametrize("phase,outcome,explicit", [
    ("xa_after_prepare", "rolled back", True),      # prepared everywhere, no decision: nothing is committed
    ("xa_after_decision", "committed", True),       # decision logged, no XA COMMIT yet: everything is committed
    ("xa_after_first_commit", "committed", True),   # one branch committed: the others are committed too
    ("xa_after_decision", "committed", False),      # an autocommit write on several nodes is an XA transaction too
])
def test_kill_at_each_step_then_restart_finishes(fresh_proxy, table, backends, backend_rows, phase, outcome,
                                                 explicit) -> None:
    p = fresh_proxy(instance="xa-kill", env={"PYDBLE_TEST_PAUSE": phase, "PYDBLE_TEST_PAUSE_S": "600"})
    conn = p.connect(read_timeout=120)
    client = threading.Thread(target=lambda: _swallow(_xa_txn, conn, IDS, "COMMIT", explicit), daemon=True)
    client.start()
    _wait(lambda: "paused for test" in p.log_text() and phase in p.log_text(), 60, f"the proxy to pause at {phase}")
    branches = _in_doubt(backends)
    expected_prepared = 3 if phase == "xa_after_first_commit" else 4
    assert len(branches) == expected_prepared, branches
    if phase == "xa_after_decision":
        rows = p.manager_query("show @@xa")   # the live coordinator shows its own transaction in flight
        assert len(rows) == 1 and rows[0][1:4] == ("xa-kill", "commit", "in flight"), rows
    p.kill()   # kill -9: the branches stay prepared on the backends, holding their rows' locks
    client.join(30)
    first = [i for i in IDS if hash_node(i, FOUR) == "dn1"]   # branches commit in node order, dn1 first
    assert _committed(backends, backend_rows) == (first if phase == "xa_after_first_commit" else [])
    listed = _run_cli("xa", "list", "--config", str(p.config_path))
    assert listed.returncode == 0, listed.stderr
    assert ("commit" if outcome == "committed" else "none") in listed.stdout and "xa-kill" in listed.stdout
    p.extra_env = {}
    p.start()   # recovery runs before the client port opens
    assert _committed(backends, backend_rows) == (list(IDS) if outcome == "committed" else [])
    assert _in_doubt(backends) == []
    assert p.manager_query("show @@xa") == []
    assert _run_cli("xa", "list", "--config", str(p.config_path)).returncode == 1   # nothing in doubt
    assert "finishing an in-doubt XA transaction" in p.log_text()


def _swallow(fn, *args) -> None:
    try:
        fn(*args)
    except pymysql.MySQLError:
        pass   # the proxy was killed under this client


def test_a_deadlock_across_servers_rolls_back_the_victims_branches(proxy, table, backends, backend_rows) -> None:
    proxy.query("INSERT INTO sharding_4_t1 VALUES " + ", ".join(f"({i}, 'n{i}')" for i in IDS))
    ca, cb = proxy.connect(), proxy.connect()
    outs: list[dict[str, Any]] = [{}, {}]

    def bg(conn: Any, sql: str, out: dict[str, Any]) -> threading.Thread:
        def go() -> None:
            try:
                with conn.cursor() as cur:
                    cur.execute(sql)
                out["ok"] = True
            except pymysql.MySQLError as e:
                out["error"] = e.args[0]
        t = threading.Thread(target=go)
        t.start()
        return t

    try:
        for c, own in ((ca, 4), (cb, 1)):   # id 4 on dn1 (first server), id 1 on dn2 (second server)
            with c.cursor() as cur:
                cur.execute("SET xa = on")
                cur.execute("BEGIN")
                cur.execute(f"UPDATE sharding_4_t1 SET name = 'x' WHERE id = {own}")
        ta = bg(ca, "UPDATE sharding_4_t1 SET name = 'a' WHERE id = 1", outs[0])
        time.sleep(0.3)
        tb = bg(cb, "UPDATE sharding_4_t1 SET name = 'b' WHERE id = 4", outs[1])
        ta.join(30)
        tb.join(30)
        assert sorted(o.get("error", 0) for o in outs) == [0, 1213], outs   # one victim, found by pydble
        survivor = ca if "ok" in outs[0] else cb
        with survivor.cursor() as cur:
            cur.execute("COMMIT")   # two phases over both servers
    finally:
        ca.close()
        cb.close()
    names = dict(r for n in FOUR for r in node_rows(backends, backend_rows, n, "SELECT id, name FROM sharding_4_t1"))
    won = "a" if survivor is ca else "b"
    assert (names[1], names[4]) == ((won, "x") if won == "a" else ("x", won))
    assert _in_doubt(backends) == []


def test_a_failed_xa_commit_after_the_decision_is_finished_in_the_background(fresh_proxy, table, backends,
                                                                          backend_rows) -> None:
    p = fresh_proxy(instance="xa-retry", env={"PYDBLE_TEST_PAUSE": "xa_after_decision", "PYDBLE_TEST_PAUSE_S": "3"})
    conn = p.connect(read_timeout=120)
    outcome: dict[str, Any] = {}

    def go() -> None:
        try:
            _xa_txn(conn, IDS)
            outcome["ok"] = True
        except pymysql.MySQLError as e:
            outcome["error"] = e.args

    client = threading.Thread(target=go, daemon=True)
    client.start()
    _wait(lambda: "paused for test" in p.log_text(), 60, "the proxy to pause after the decision")
    # the second server drops the proxy's connections holding dn2's and dn4's prepared branches
    for (tid,) in backends[1].query("SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX"):
        backends[1].query(f"KILL {int(tid)}")
    client.join(60)
    code, msg = outcome["error"]
    assert code == 1105 and "COMMIT is decided" in msg and "background" in msg, outcome
    _wait(lambda: _committed(backends, backend_rows) == list(IDS), 30, "the background commit of dn2 and dn4")
    _wait(lambda: not _in_doubt(backends) and not p.manager_query("show @@xa"), 30, "nothing left in doubt")
