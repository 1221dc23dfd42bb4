"""What the chaos run found, now fixed: an originator frozen between the INIT acks and the backends.

An originator frozen there (SIGSTOP, a VM pause) past the session timeout loses its lock; a survivor
reconciles and deletes the record and the table is free for the next DDL. When the originator thaws
it must not run its ALTER: ClusterDdl.ensure_held() checks, right before the backends are touched,
that the session is live and still owns the lock.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pymysql
from harness import cluster_section

TABLE = "sharding_4_t1"   # a 4-node sharding table of the harness config
NODES = (("db1", 0), ("db1", 1), ("db2", 0), ("db2", 1))
SESSION_TIMEOUT_S = 3


def _reset(backends: list[Any]) -> None:
    for db, bi in NODES:
        backends[bi].execute_many([f"DROP TABLE IF EXISTS `{TABLE}`",
                                   f"CREATE TABLE `{TABLE}` (id INT PRIMARY KEY, v INT)"], database=db)


def _columns(backends: list[Any]) -> list[set[str]]:
    """The column names of TABLE on each of its four nodes."""
    return [{r[0] for r in backends[bi].query(f"SHOW COLUMNS FROM `{TABLE}`", database=db)} for db, bi in NODES]


def _meta(proxy: Any) -> tuple[str, int, int]:
    """(structure, consistent_in_sharding_nodes, consistent_in_memory) of TABLE on an instance."""
    conn = proxy.manager()
    try:
        with conn.cursor() as cur:
            cur.execute(f"check full @@metadata where schema='schema1' and table='{TABLE}'")
            row = cur.fetchall()[0]
    finally:
        conn.close()
    return str(row[3]), int(row[4]), int(row[5])


def _wait(cond: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except Exception:  # noqa: BLE001 - retried until the deadline
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_originator_that_lost_its_lock_before_executing_never_runs_the_ddl(
        zookeeper: Any, zk_root: str, fresh_proxy: Callable[..., Any], backends: list[Any]) -> None:
    _reset(backends)
    section = cluster_section(zookeeper, root=zk_root, session_timeout_s=SESSION_TIMEOUT_S, ack_timeout_s=6)
    p1 = fresh_proxy(instance="dble-1", cluster=section,
                     env={"PYDBLE_TEST_PAUSE": "after_init", "PYDBLE_TEST_PAUSE_S": "1"})
    p2 = fresh_proxy(instance="dble-2", cluster=section)
    out: dict[str, Any] = {}

    def originate() -> None:
        try:
            p1.query(f"ALTER TABLE {TABLE} ADD COLUMN fenced INT")
            out["ok"] = True
        except pymysql.MySQLError as e:
            out["error"] = e.args

    t = threading.Thread(target=originate, daemon=True)
    t.start()
    _wait(lambda: "paused for test" in p1.log_text(), 20, "dble-1 to hold its INIT-written DDL")
    p1.pause()   # frozen between the INIT write and the backends, past its session timeout
    client = zookeeper.client()
    try:
        _wait(lambda: not client.get_children(f"{zk_root}/cluster-1/ddl"), 20,
              "dble-2 to reconcile the orphaned record")
    finally:
        client.stop()
        client.close()
    # the table is free again once dble-2's reconcile has reloaded it and let go of its local lock (4006 until then)
    deadline = time.monotonic() + 20
    while True:
        try:
            p2.query(f"ALTER TABLE {TABLE} ADD COLUMN next_ddl INT")
            break
        except pymysql.MySQLError as e:
            if e.args[0] != 4006 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    p1.resume()
    t.join(30)
    assert "error" in out, out   # it lost its lock: it cannot have answered OK
    time.sleep(1)
    cols = _columns(backends)
    # what must hold: a DDL whose originator lost its lock before running it never reaches a backend
    assert all("fenced" not in c for c in cols), (out, cols)
    # and in any case every instance keeps agreeing with the backends
    _wait(lambda: _meta(p2)[1:] == (1, 1), 10, "dble-2's metadata to match the backends")
