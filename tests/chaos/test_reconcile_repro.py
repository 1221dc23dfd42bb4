"""Reproduction of a chaos finding: an instance starting while someone else reconciles an orphan.

A starting instance reconciles orphaned ddl records in its join (recovery.drain_in_flight) without
the reconcile.lock that survivors take, so a survivor may finish and delete the same record while
the starting instance is reading the table from the backends. Its conditional write of the FAILED
decision then meets no record at all: NoNodeError, which only BadVersionError's handler was ready
for. At start that error escapes the join and the process exits (status 1) instead of serving.
The 30-minute chaos run (seed 20261122) hit it on a restart after kill -9.

Here the survivor's delete is done by hand, at the moment the starting instance is inside the
reconcile: one backend is frozen (SIGSTOP), so the starting instance's read of the table waits for
its connect timeout, which gives a window of seconds instead of milliseconds.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from harness import cluster_section

from zk.records import INIT, DdlRecord

TABLE = "sharding_4_t1"   # a 4-node sharding table of the harness config


def test_instance_starting_while_its_orphan_is_reconciled_elsewhere_still_starts(
        zookeeper: Any, zk_root: str, fresh_proxy: Callable[..., Any], backends: list[Any]) -> None:
    for server in backends:
        for db in ("db1", "db2"):
            server.execute_many([f"DROP TABLE IF EXISTS `{TABLE}`",
                                 f"CREATE TABLE `{TABLE}` (id INT PRIMARY KEY, v INT)"], database=db)
    base = f"{zk_root}/cluster-1"
    record = f"{base}/ddl/schema1.{TABLE}"
    kz = zookeeper.client()
    try:
        # an orphan: its originator dble-9 is not online
        orphan = DdlRecord("dble-9", "schema1", TABLE, "ALTER_TABLE", f"ALTER TABLE {TABLE} ADD COLUMN x INT", INIT)
        kz.create(record, orphan.encode(), makepath=True)
        kz.create(f"{record}/instance", b"")
        section = cluster_section(zookeeper, root=zk_root, session_timeout_s=3, ack_timeout_s=6)
        p1 = fresh_proxy(instance="dble-1", cluster=section, start=False)
        backends[1].pause()   # dble-1's read of the table from dn2/dn4 waits for the connect timeout
        try:
            p1.spawn()
            deadline = time.monotonic() + 30
            while kz.exists(f"{base}/lock/syncMeta.lock") is None:   # dble-1 is in its join
                assert time.monotonic() < deadline, "dble-1 never took syncMeta.lock"
                time.sleep(0.05)
            time.sleep(1.0)                                           # ... reading the table
            kz.delete(record, recursive=True)                         # a survivor finished the orphan
        finally:
            backends[1].resume()
        p1.wait_ready(60)   # fails with "exited (status 1)" while the NoNodeError escapes the join
        assert p1.query(f"SELECT COUNT(*) FROM {TABLE}")[0][0] >= 0
        assert kz.exists(record) is None
    finally:
        kz.stop()
        kz.close()
