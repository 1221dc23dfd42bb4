"""`pydble serve --workers 2`: both workers serve one port, KILL crosses workers, a dead worker comes back,
SIGTERM stops them all and a killed parent leaves no worker behind (real processes, MariaDB, ZooKeeper)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pymysql
import pytest

from harness.ports import free_port, port_accepts, port_is_bindable, tcp_connections
from harness.proxy import REPO_ROOT, cluster_section, proxy_config
from proxy.workers import ID_SHIFT, WorkerInfo

WORKERS = 2
WAIT_S = 40.0   # bound on every wait below (a restarted worker waits out its predecessor's ZooKeeper session)


def _ports() -> tuple[int, int]:
    """A client port and a manager base port whose next port (worker 1's manager port) is free too."""
    while True:
        base = free_port()
        if port_is_bindable(base + 1):
            return free_port(), base


def _until(what: str, check: Any, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _children(pid: int) -> set[int]:
    try:
        text = open(f"/proc/{pid}/task/{pid}/children").read()
    except OSError:
        return set()
    return {int(x) for x in text.split()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def workers(fresh_proxy: Any, backends: Any, zookeeper: Any, zk_root: str) -> Any:
    """A `serve --workers 2` parent, both workers listening (each one's manager port accepts)."""
    port, manager = _ports()
    cfg = proxy_config(backends, port, manager, instance="wk",
                       cluster=cluster_section(zookeeper, root=zk_root, session_timeout_s=4))
    cfg["users"].append({"name": "other", "password": "222222", "schemas": ["schema1"]})
    p = fresh_proxy(cfg, argv=[sys.executable, "-m", "cli", "serve", "--config", "{config}", "--workers", str(WORKERS)])
    for i in range(WORKERS):
        _until(f"worker {i}'s manager port", lambda: port_accepts(manager + i))
    _until("both workers forked", lambda: len(_children(p.pid)) == WORKERS)
    return p


def _session(p: Any, user: str = "test", password: str = "111111") -> Any:
    c = p.connect(user=user, password=password, database="schema1")
    c.autocommit(True)
    return c


def _one(conn: Any, sql: str) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
    return row[0] if row else None


def _on_each_worker(p: Any, user: str = "test", password: str = "111111") -> dict[int, Any]:
    """One open session per worker (the kernel picks the worker; connect until each has one)."""
    got: dict[int, Any] = {}
    extra = []
    for _ in range(200):
        c = _session(p, user, password)
        w = _one(c, "SELECT CONNECTION_ID()") >> ID_SHIFT
        if w in got:
            extra.append(c)
        else:
            got[w] = c
        if len(got) == WORKERS:
            break
    for c in extra:
        c.close()
    assert sorted(got) == list(range(WORKERS)), f"connections reached workers {sorted(got)} only"
    return got


def test_two_workers_serve_one_port_with_ids_of_their_own(workers: Any) -> None:
    """Many connections on the one port land on both workers; each serves queries on sharded tables."""
    conns = [_session(workers) for _ in range(24)]
    try:
        ids = [_one(c, "SELECT CONNECTION_ID()") for c in conns]
        assert {i >> ID_SHIFT for i in ids} == {0, 1}, ids
        assert len(set(ids)) == len(ids)
        with conns[0].cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS sharding_4_t1")
            cur.execute("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, v INT)")
            cur.execute("INSERT INTO sharding_4_t1 VALUES (1, 10), (2, 20), (3, 30), (4, 40)")
        for c in conns:   # the DDL of one worker reached the other (they are cluster instances)
            assert _one(c, "SELECT SUM(v) FROM sharding_4_t1") == 100
    finally:
        for c in conns:
            c.close()


def test_kill_reaches_the_worker_owning_the_id(workers: Any) -> None:
    """KILL QUERY / KILL on worker 0 of worker 1's session interrupts it, then closes it; another user
    may not (1095); an id of worker 1 that no session holds is unknown (1094)."""
    by_worker = _on_each_worker(workers)
    a, b = by_worker[0], by_worker[1]
    b_id = _one(b, "SELECT CONNECTION_ID()")
    watcher = None
    got: list[Any] = []
    try:
        def sleep() -> None:
            try:
                got.append(_one(b, "SELECT SLEEP(30)"))   # 0 after 30 s unless interrupted
            except pymysql.MySQLError as e:
                got.append(e.args[0])

        t = threading.Thread(target=sleep)
        t.start()
        watcher = _on_each_worker(workers)   # worker 1's processlist shows b in its query
        for c in watcher.values():
            if c is not watcher[1]:
                c.close()

        def running() -> bool:
            with watcher[1].cursor() as cur:
                cur.execute("SHOW PROCESSLIST")
                return any(r[0] == b_id and r[4] == "Query" for r in cur.fetchall())
        _until("b's SLEEP to run", running)
        others = _on_each_worker(workers, "other", "222222")
        try:   # the owning worker checks the killer's rights: another user's session is not its to kill
            with pytest.raises(pymysql.MySQLError) as not_owner:
                _one(others[0], f"KILL QUERY {b_id}")
            assert not_owner.value.args[0] == 1095
        finally:
            for c in others.values():
                c.close()
        _one(a, f"KILL QUERY {b_id}")
        t.join(WAIT_S)
        assert got and got[0] in (1, 1317), got   # interrupted (MariaDB's SLEEP answers 1 when killed)
        assert _one(b, "SELECT 7") == 7            # the session lives on
        with pytest.raises(pymysql.MySQLError) as unknown:
            _one(a, f"KILL {(1 << ID_SHIFT) | 999999}")
        assert unknown.value.args[0] == 1094
        _one(a, f"KILL {b_id}")
        with pytest.raises(pymysql.MySQLError):
            _one(b, "SELECT 1")
    finally:
        for c in (a, b, *(watcher.values() if watcher else ())):
            if c.open:
                c.close()


def test_a_killed_worker_is_restarted(workers: Any) -> None:
    """kill -9 of one worker: the parent forks it again and clients reach it again."""
    before = _children(workers.pid)
    by_worker = _on_each_worker(workers)
    victim_id = _one(by_worker[1], "SELECT CONNECTION_ID()")
    for c in by_worker.values():
        c.close()
    victim = next(pid for pid in before
                  if (workers.manager_port + 1, 0, False) in tcp_connections(pid))   # listens on it
    os.kill(victim, signal.SIGKILL)
    _until("worker 1 to be forked again", lambda: len(_children(workers.pid) - before) == 1)
    _until("worker 1's manager port", lambda: port_accepts(workers.manager_port + 1))
    again = _on_each_worker(workers)
    try:
        assert _one(again[1], "SELECT CONNECTION_ID()") >> ID_SHIFT == victim_id >> ID_SHIFT == 1
    finally:
        for c in again.values():
            c.close()


def test_sigterm_stops_every_worker(workers: Any) -> None:
    """SIGTERM to the parent: every worker exits, then the parent."""
    kids = _children(workers.pid)
    os.kill(workers.pid, signal.SIGTERM)
    assert workers._proc.wait(timeout=WAIT_S) == 0
    _until("every worker to exit", lambda: not any(_alive(k) for k in kids))


def _kill_socket_dir(pid: int) -> str:
    """The folder of a worker's KILL socket (the Unix socket it listens on, from /proc/net/unix)."""
    inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] for fd in os.listdir(f"/proc/{pid}/fd")
              if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")}
    with open("/proc/net/unix") as f:
        for line in f.read().splitlines()[1:]:
            cols = line.split()
            if len(cols) == 8 and cols[6] in inodes and cols[7].endswith(".sock"):
                return os.path.dirname(cols[7])
    raise AssertionError(f"worker {pid} has no KILL socket")


def test_a_killed_parent_leaves_no_worker(workers: Any) -> None:
    """kill -9 of the parent: the workers get SIGTERM from the kernel and stop cleanly (no orphan, their
    KILL sockets removed)."""
    kids = _children(workers.pid)
    folder = _kill_socket_dir(next(iter(kids)))
    assert sorted(os.listdir(folder)) == [f"w{i}.sock" for i in range(WORKERS)]
    os.kill(workers.pid, signal.SIGKILL)
    _until("every worker to exit", lambda: not any(_alive(k) for k in kids))
    assert os.listdir(folder) == []   # each stopped as on SIGTERM, not killed
    os.rmdir(folder)                  # the parent, killed, could not remove it


def test_more_than_one_worker_needs_a_cluster(backends: Any, tmp_path: Any) -> None:
    """Without [cluster] the workers would each keep their own metadata: refused, exit 2, one line."""
    from harness.proxy import to_toml
    path = tmp_path / "pydble.toml"
    path.write_text(to_toml(proxy_config(backends, free_port(), free_port())))
    for n, words in (("2", "needs a [cluster] section"), ("0", "must be 1 to")):
        run = subprocess.run([sys.executable, "-m", "cli", "serve", "--config", str(path), "--workers", n],
                             capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        assert run.returncode == 2, run.stderr
        assert words in run.stderr


def test_connection_ids_wrap_within_their_worker_skipping_live_ones() -> None:
    """Past 2**24 - 1 ids a worker starts over in its own range and never hands out an id in use."""
    w = WorkerInfo(3, 4, "/nonexistent")
    assert w.conn_id(1, set) == (3 << ID_SHIFT) | 1
    last = (1 << ID_SHIFT) - 1
    assert w.conn_id(last, set) == (3 << ID_SHIFT) | last
    live = {(3 << ID_SHIFT) | 1, (3 << ID_SHIFT) | 2}
    assert w.conn_id(last + 1, lambda: live) == (3 << ID_SHIFT) | 3
    assert all(WorkerInfo.owner(w.conn_id(n, set)) == 3 for n in (1, last, last + 5))
