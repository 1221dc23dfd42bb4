"""One [server] instance name, one live process: a twin refuses to start, a restart after kill -9 joins."""

from __future__ import annotations

import json
import time
from typing import Any

from clusterkit import SESSION_TIMEOUT_S, TABLE, Cluster, full_meta, reset_table, wait_for


def _online_pid(cluster: Any, instance: str) -> int:
    return json.loads(cluster.zookeeper.read(f"{cluster.base()}/online/{instance}"))["pid"]


def test_a_live_twin_refuses_to_start_and_displaces_nobody(cluster):
    p1, p2 = cluster.start(2)
    twin = cluster.make(instance="dble-1", cluster=cluster.section, start=False, name="dble-1-twin")
    twin.spawn()
    assert twin._wait_exit(2 * SESSION_TIMEOUT_S + 15), "the twin did not give up"
    twin.stop()
    assert twin.returncode not in (0, None)
    refusals = [line for line in twin.log_text().splitlines() if line.startswith("pydble: ")]
    assert len(refusals) == 1 and "'dble-1'" in refusals[0] and "registered as instance" in refusals[0], \
        twin.log_text()[-2000:]
    # the first dble-1 kept its place and its DDL still reaches the others
    assert _online_pid(cluster, "dble-1") == p1.pid
    p1.query(f"ALTER TABLE {TABLE} ADD COLUMN after_twin INT")
    row = full_meta(p2)
    assert "`after_twin`" in row[3] and row[4:] == (1, 1), row


def test_a_restart_after_kill_9_joins_within_the_session_timeout(zookeeper, zk_root, fresh_proxy, backends):
    # a session timeout well above a loaded box's process start-up, so the old session is still there
    # when the new process first reads online/dble-1 (with 3 s it had sometimes expired already)
    timeout = 8
    reset_table(backends)
    cluster = Cluster(fresh_proxy, zookeeper, zk_root, backends, session_timeout_s=timeout)
    p1, p2 = cluster.start(2)
    old_pid = p1.pid
    p1.kill()
    killed = time.monotonic()
    p1.start()   # the old session still holds online/dble-1 for up to session_timeout_s
    joined = time.monotonic() - killed
    assert joined < timeout + 5, joined
    wait_for(lambda: _online_pid(cluster, "dble-1") == p1.pid != old_pid, 5, "online/dble-1 to name the new process")
    p1.query(f"ALTER TABLE {TABLE} ADD COLUMN after_restart INT")
    assert "`after_restart`" in full_meta(p2)[3]
    assert "waiting for it to expire" in p1.log_text()
