"""Fencing: an instance without a live ZooKeeper session refuses DDL, keeps serving, and comes back."""

from __future__ import annotations

import time

import pymysql
import pytest
from clusterkit import SESSION_TIMEOUT_S, TABLE, Cluster, backend_structure, full_meta, reset_table, run_async, wait_for


@pytest.fixture
def own_zk_cluster(fresh_zookeeper, zk_root, fresh_proxy, backends):
    """A cluster on a ZooKeeper of its own, so the test may stop it."""
    reset_table(backends)
    return Cluster(fresh_proxy, fresh_zookeeper(), zk_root, backends)


def _ddl_error(proxy, sql: str) -> tuple:
    with pytest.raises(pymysql.MySQLError) as e:
        proxy.query(sql)
    return e.value.args


def test_zookeeper_down_refuses_ddl_keeps_dml_and_recovers(own_zk_cluster):
    p1, p2 = own_zk_cluster.start(2)
    own_zk_cluster.zookeeper.stop()
    wait_for(lambda: "suspended" in p1.log_text(), 10, "dble-1 to notice ZooKeeper is gone")
    code, message = _ddl_error(p1, f"ALTER TABLE {TABLE} ADD COLUMN during_outage INT")
    assert code == 4006 and "ZooKeeper is unreachable" in message and "refuses DDL" in message
    p1.query(f"INSERT INTO {TABLE} VALUES (1, 1)")          # DML goes on
    assert p2.query(f"SELECT v FROM {TABLE} WHERE id = 1") == [(1,)]
    time.sleep(4)  # longer than the session timeout: sessions expire when ZooKeeper comes back
    own_zk_cluster.zookeeper.start()

    def ddl_accepted() -> bool:
        p1.query(f"ALTER TABLE {TABLE} ADD COLUMN after_outage INT")
        return True

    wait_for(ddl_accepted, 20, "dble-1 to accept DDL again", interval=0.5)
    wait_for(lambda: "`after_outage`" in full_meta(p2)[3], 10, "dble-2 to see the DDL")
    assert full_meta(p2)[4:] == (1, 1)


def test_paused_past_the_session_timeout_rejoins_and_reloads(cluster):
    p1, p2, p3 = cluster.start()
    p3.pause()
    time.sleep(3 + 2)  # the session expires; the others see dble-3 go offline
    p1.query(f"ALTER TABLE {TABLE} ADD COLUMN while_paused INT")  # does not wait for dble-3
    p3.resume()
    wait_for(lambda: p3.log_text().count("joined the cluster") >= 2, 20, "dble-3 to re-join with a new session")
    assert "`while_paused`" in full_meta(p3)[3]
    p3.query(f"ALTER TABLE {TABLE} ADD COLUMN from_dble3 INT")
    assert "`from_dble3`" in full_meta(p1)[3]


def test_originator_that_lost_its_session_never_completes_the_ddl(cluster):
    p1, p2, p3 = cluster.start(env={0: {"PYDBLE_TEST_PAUSE": "after_execute", "PYDBLE_TEST_PAUSE_S": "1"}})
    t, out = run_async(p1, f"ALTER TABLE {TABLE} ADD COLUMN fenced INT")
    wait_for(lambda: "paused for test" in p1.log_text(), 20, "dble-1 to reach after_execute")
    p1.pause()
    time.sleep(3 + 2.5)  # session gone; a survivor reconciles the orphaned record meanwhile
    wait_for(lambda: not own_children(cluster), 10, "the orphan to be reconciled")
    p1.resume()
    t.join(30)
    assert "error" in out, out
    assert out["error"][0] == 4006
    assert "ZooKeeper" in out["error"][1] and "reconcile" in out["error"][1]
    # the ALTER did run on the backends: every instance ends with that truth
    for p in (p2, p3):
        row = full_meta(p)
        assert "`fenced`" in row[3] and row[4:] == (1, 1)
    wait_for(lambda: "`fenced`" in full_meta(p1)[3] and full_meta(p1)[5] == 1, 20, "dble-1 to reload")
    wait_for(lambda: _accepts_ddl(p1), 20, "dble-1 to accept DDL after re-joining", interval=0.5)


def test_an_originator_that_lost_its_decision_makes_every_instance_reload(cluster):
    """dble-1 runs an ALTER, stops after the nodes ran it and before its decision (the pause hook), and is
    frozen (SIGSTOP) past its session; dble-2 reconciles the orphan. The table then changes on the
    backends behind the reconcile's back (as a DDL still running on a node it could not see would).
    Once dble-1 is back it cannot decide (4006) and asks every instance to reload: all three end equal to
    the backends, `check @@metadata` consistent, no record or lock left."""
    p1, p2, p3 = cluster.start(env={0: {"PYDBLE_TEST_PAUSE": "after_execute", "PYDBLE_TEST_PAUSE_S": "1"}})
    t, out = run_async(p1, f"ALTER TABLE {TABLE} ADD COLUMN undecided INT")
    wait_for(lambda: "paused for test" in p1.log_text(), 20, "dble-1 to stop after the nodes ran the ALTER")
    p1.pause()
    try:
        wait_for(lambda: "dble-1" not in cluster.zk_children("online"), SESSION_TIMEOUT_S + 10,
                 "dble-1's session to expire")
        wait_for(lambda: not own_children(cluster), 20, "a survivor to reconcile the orphaned record")
        for server in cluster.backends:
            for db in ("db1", "db2"):
                server.query(f"ALTER TABLE {TABLE} ADD COLUMN behind INT", database=db)
        for p in (p2, p3):
            row = full_meta(p)
            assert "`undecided`" in row[3] and "`behind`" not in row[3] and row[4:] == (1, 0), (p.instance, row)
    finally:
        p1.resume()
    t.join(30)
    assert out.get("error", (0,))[0] == 4006, out
    truth = backend_structure(cluster.backends)
    assert len(truth) == 1 and "`behind`" in next(iter(truth)), truth
    for p in (p1, p2, p3):
        wait_for(lambda p=p: full_meta(p)[4:] == (1, 1), 30, f"{p.instance} to reload the table")
        assert "`behind`" in full_meta(p)[3]
    assert "asked every instance to reload after a lost decision" in p1.log_text()
    assert not own_children(cluster) and not cluster.zk_children("lock/ddl_lock")


def own_children(cluster) -> list[str]:
    return cluster.zk_children("ddl")


def _accepts_ddl(proxy) -> bool:
    proxy.query(f"ALTER TABLE {TABLE} ADD COLUMN rejoined INT")
    return True


def test_a_laggard_is_named_and_catches_up(zookeeper, zk_root, fresh_proxy, backends):
    reset_table(backends)
    cl = Cluster(fresh_proxy, zookeeper, zk_root, backends, session_timeout_s=8, ack_timeout_s=1.5)
    p1, p2, p3 = cl.start()
    p3.pause()  # online (its session outlives the pause) but deaf
    try:
        started = time.monotonic()
        conn = p1.connect()
        with conn.cursor() as cur:
            cur.execute(f"ALTER TABLE {TABLE} ADD COLUMN lag INT")
            assert cur._result.warning_count == 1  # the OK packet says there is a warning
            cur.execute("SHOW WARNINGS")
            warnings = cur.fetchall()
        conn.close()
        assert time.monotonic() - started < 1.5 + 2  # one ack_timeout_s: the INIT laggard is not awaited again
        assert any("dble-3" in w[2] and "catch up" in w[2] for w in warnings), warnings
        assert "`lag`" in full_meta(p2)[3]
    finally:
        p3.resume()
    wait_for(lambda: "`lag`" in full_meta(p3)[3], 10, "dble-3 to catch up")


def test_the_ddl_runs_while_the_init_acks_come_in(zookeeper, zk_root, fresh_proxy, backends):
    """INIT acks are collected while the backends run the DDL (they never gate it: a laggard does not
    stop a DDL), and the outcome goes out only once they are in: a deaf instance delays the answer by
    one ack_timeout_s, not the change on the backends."""
    reset_table(backends)
    cl = Cluster(fresh_proxy, zookeeper, zk_root, backends, session_timeout_s=8, ack_timeout_s=3)
    p1, p2, p3 = cl.start()
    p3.pause()
    try:
        started = time.monotonic()
        t, out = run_async(p1, f"ALTER TABLE {TABLE} ADD COLUMN early INT")
        wait_for(lambda: all("`early`" in text for text in backend_structure(backends)), 2,
                 "the backends to have the column while dble-3 has not acked INIT")
        assert time.monotonic() - started < 2.5 and "ok" not in out   # still waiting for dble-3's INIT ack
        t.join(10)
        assert out.get("ok"), out
        assert time.monotonic() - started >= 3
        assert "`early`" in full_meta(p2)[3]
    finally:
        p3.resume()
    wait_for(lambda: "`early`" in full_meta(p3)[3], 10, "dble-3 to catch up")
