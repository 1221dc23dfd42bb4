"""Cluster DDL with three real instances and a real ZooKeeper: agreement, exclusion, ops views."""

from __future__ import annotations

import json
import socket
import time

import pymysql
import pytest
from clusterkit import (ACK_TIMEOUT_S, TABLE, backend_structure, full_meta, lock_table_on_backend, run_async,
                        show_ddl, wait_for)


def test_ok_means_every_instance_serves_the_new_structure(cluster):
    p1, p2, p3 = cluster.start()
    p1.query(f"ALTER TABLE {TABLE} ADD COLUMN c_new INT DEFAULT 7")
    # right after OK, with no wait: DML using the new column and the metadata on the others
    for p in (p2, p3):
        p.query(f"INSERT INTO {TABLE} (id, v, c_new) VALUES ({10 + int(p.instance[-1])}, 1, 3)")
        row = full_meta(p)
        assert "`c_new`" in row[3]
        assert row[4:] == (1, 1), row
    assert all("`c_new`" in t for t in backend_structure(cluster.backends))


def test_create_on_one_instance_then_insert_on_the_others(cluster, backends):
    for server in backends:
        for db in ("db1", "db2"):
            server.query(f"DROP TABLE IF EXISTS `{TABLE}`", database=db)
    p1, p2, p3 = cluster.start()
    p1.query(f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, name VARCHAR(20))")
    p2.query(f"INSERT INTO {TABLE} VALUES (1, 'a'), (2, 'b')")
    p3.query(f"INSERT INTO {TABLE} VALUES (3, 'c'), (4, 'd')")
    assert full_meta(p3)[4:] == (1, 1)
    assert sorted(p2.query(f"SELECT id FROM {TABLE} ORDER BY id")) == [(1,), (2,), (3,), (4,)]


def test_second_ddl_on_the_same_table_from_another_instance_fails_at_once(cluster, backends):
    p1, p2, p3 = cluster.start()
    blocker = lock_table_on_backend(backends)
    try:
        t, out = run_async(p1, f"ALTER TABLE {TABLE} ADD COLUMN slow INT")
        wait_for(lambda: show_ddl(p2), 10, "the DDL to show up cluster-wide")
        rows = show_ddl(p3)
        assert rows and rows[0][0] == "schema1" and rows[0][1] == TABLE and rows[0][3] == "dble-1", rows
        started = time.monotonic()
        with pytest.raises(pymysql.MySQLError) as e:
            p2.query(f"ALTER TABLE {TABLE} ADD COLUMN other INT")
        assert time.monotonic() - started < 2
        # the same answer whether p2's own lock (taken for p1's DDL) or the cluster lock refuses it
        assert e.value.args == (4006, f"Found another instance doing ddl, due to table[schema1.{TABLE}]'s "
                                      "ddlLock is exists")
        # DML is not blocked by the cluster DDL lock on another instance
        p3.query(f"SELECT COUNT(*) FROM {TABLE} WHERE id = 2")
    finally:
        blocker.rollback()
        blocker.close()
    t.join(30)
    assert out.get("ok"), out
    assert not cluster.zk_children("ddl") and not cluster.zk_children("lock/ddl_lock")


def test_the_znodes_of_a_ddl_in_flight_have_the_designs_shape(cluster, backends):
    """What an operator (or a DBLE tool) reads in ZooKeeper while a DDL waits on a metadata lock: the
    paths, node kinds and JSON fields of DESIGN.md §6, and every instance's ack of INIT."""
    p1, p2, p3 = cluster.start()
    base = cluster.base()
    sql = f"ALTER TABLE {TABLE} ADD COLUMN shape INT"
    blocker = lock_table_on_backend(backends)
    zk = cluster.zk()
    try:
        t, out = run_async(p1, sql)
        record = f"{base}/ddl/schema1.{TABLE}"
        wait_for(lambda: zk.exists(f"{record}/instance") and len(zk.get_children(f"{record}/instance")) == 3,
                 10, "every instance's INIT ack in ZooKeeper")
        data, stat = zk.get(record)
        rec = json.loads(data)
        assert stat.ephemeralOwner == 0   # PERSISTENT: survives its originator for reconciliation
        assert {k: rec[k] for k in ("api_version", "instance", "schema", "table", "status")} == {
            "api_version": 1, "instance": "dble-1", "schema": "schema1", "table": TABLE, "status": "INIT"}
        assert rec["sql"] == sql and rec["type"] and isinstance(rec["created_at"], (int, float))
        for name in ("dble-1", "dble-2", "dble-3"):   # the originator acks its own INIT too, as DBLE's does
            data, stat = zk.get(f"{record}/instance/{name}")
            ack = json.loads(data)
            assert stat.ephemeralOwner != 0
            assert ack["ok"] is True and "message" in ack and isinstance(ack["meta_version"], int), ack
        data, stat = zk.get(f"{base}/lock/ddl_lock/schema1.{TABLE}")
        lock = json.loads(data)
        assert stat.ephemeralOwner != 0
        assert lock["instance"] == "dble-1" and lock["sql"] == sql and isinstance(lock["since"], (int, float))
        for p in (p1, p2, p3):
            data, stat = zk.get(f"{base}/online/{p.instance}")
            online = json.loads(data)
            assert stat.ephemeralOwner != 0
            assert online["host"] and online["port"] == p.proxy_port and online["manager_port"] == p.manager_port
            assert isinstance(online["started_at"], (int, float)) and isinstance(online["meta_version"], int)
    finally:
        blocker.rollback()
        blocker.close()
        zk.stop()
        zk.close()
    t.join(30)
    assert out.get("ok"), out
    assert "`shape`" in full_meta(p3)[3]
    assert not cluster.zk_children("ddl") and not cluster.zk_children("lock/ddl_lock")


def test_an_instance_starting_during_a_ddl_waits_for_it_and_serves_its_outcome(cluster, backends):
    """DESIGN.md §6's start-up: take syncMeta.lock, wait until no DDL is in flight, load, go online. An
    instance started while a DDL waits on a backend's metadata lock does not go online with the old
    structure; while it waits, DDL elsewhere is refused as DBLE refuses it; then it serves the new one."""
    p1, p2 = cluster.start(2)
    blocker = lock_table_on_backend(backends)
    try:
        t, out = run_async(p1, f"ALTER TABLE {TABLE} ADD COLUMN during_join INT")
        wait_for(lambda: show_ddl(p2), 10, "the DDL in flight")
        p3 = cluster.make(instance="dble-3", cluster=cluster.section, start=False)
        p3.spawn()
        wait_for(lambda: "syncMeta.lock" in cluster.zk_children("lock"), 20, "the new instance taking syncMeta.lock")
        time.sleep(1)   # longer than a join takes with no DDL in flight
        assert "dble-3" not in cluster.zk_children("online")
        with pytest.raises(pymysql.MySQLError) as e:
            p2.query("ALTER TABLE sharding_2_t1 ADD COLUMN refused INT")
        assert e.value.args[0] == 4006 and "initializing metadata" in e.value.args[1], e.value.args
    finally:
        blocker.rollback()
        blocker.close()
    t.join(30)
    assert out.get("ok"), out
    p3.wait_ready(30)
    assert "dble-3" in cluster.zk_children("online")
    assert "`during_join`" in full_meta(p3)[3]
    p3.query(f"INSERT INTO {TABLE} (id, v, during_join) VALUES (31, 1, 2)")


def test_ddls_on_different_tables_run_in_parallel(cluster, backends):
    p1, p2, _ = cluster.start()
    blocker = lock_table_on_backend(backends)
    try:
        t, out = run_async(p1, f"ALTER TABLE {TABLE} ADD COLUMN slow INT")
        wait_for(lambda: show_ddl(p2), 10, "the first DDL in flight")
        started = time.monotonic()
        p2.query("CREATE TABLE IF NOT EXISTS sharding_2_t1 (id INT PRIMARY KEY)")
        p2.query("ALTER TABLE sharding_2_t1 ADD COLUMN x INT")
        assert time.monotonic() - started < ACK_TIMEOUT_S
    finally:
        blocker.rollback()
        blocker.close()
        p2.query("DROP TABLE IF EXISTS sharding_2_t1")
    t.join(30)
    assert out.get("ok"), out


def test_show_cluster_lists_every_online_instance(cluster):
    p1, p2, p3 = cluster.start()
    conn = p2.manager()
    with conn.cursor() as cur:
        cur.execute("show @@cluster")
        rows = cur.fetchall()
    conn.close()
    assert [r[0] for r in rows] == ["dble-1", "dble-2", "dble-3"]
    assert all(r[1].startswith("127.0.0.1:") for r in rows)


def test_restart_before_the_old_session_expires_rejoins(cluster):
    p1, p2, _ = cluster.start()
    p1.kill()
    p1.start()  # same name, old ephemeral nodes still there until the session times out
    p1.query(f"ALTER TABLE {TABLE} ADD COLUMN after_restart INT")
    assert "`after_restart`" in full_meta(p2)[3]
    assert "NodeExists" not in p1.log_text()


def test_ddl_is_refused_while_an_instance_loads_metadata(cluster):
    p1, _, _ = cluster.start()
    zk = cluster.zk()
    try:
        zk.create(f"{cluster.base()}/lock/syncMeta.lock", b"someone", ephemeral=True)
        with pytest.raises(pymysql.MySQLError) as e:
            p1.query(f"ALTER TABLE {TABLE} ADD COLUMN nope INT")
        assert e.value.args[0] == 4006
        assert "Found another instance initializing metadata. Please try later" in e.value.args[1]
    finally:
        zk.stop()
        zk.close()
    p1.query(f"ALTER TABLE {TABLE} ADD COLUMN yes INT")


def test_a_ddl_refused_from_memory_leaves_nothing_in_zookeeper(cluster):
    """CREATE of a table the instance knows fails with 1050 from memory: no INIT, record or lock is
    written, and the table is free for the next DDL."""
    p1, p2, _ = cluster.start()
    with pytest.raises(pymysql.MySQLError) as e:
        p1.query(f"CREATE TABLE {TABLE} (id INT PRIMARY KEY)")
    assert e.value.args[0] == 1050
    assert not cluster.zk_children("ddl") and not cluster.zk_children("lock/ddl_lock")
    p2.query(f"ALTER TABLE {TABLE} ADD COLUMN after_refusal INT")
    assert "`after_refusal`" in full_meta(p1)[3]


def test_a_ddl_that_fails_on_the_backends_is_failed_everywhere(cluster):
    p1, p2, _ = cluster.start()
    with pytest.raises(pymysql.MySQLError) as e:
        p1.query(f"ALTER TABLE {TABLE} DROP COLUMN no_such_column")
    assert e.value.args[0] == 1091
    assert full_meta(p2)[4:] == (1, 1)
    assert not cluster.zk_children("ddl")
    p2.query(f"ALTER TABLE {TABLE} ADD COLUMN fine INT")


def test_back_to_back_ddls_from_alternating_instances_find_the_table_free(cluster):
    """Right after OK the table is free on every instance: a subscriber whose safety pass read a record
    while its outcome came over the peer channel must not lock the table again for that finished DDL
    (chaos finding: the next DDL there got 4006 `is doing DDL`)."""
    procs = cluster.start()
    conns = [p.connect() for p in procs]
    try:
        for i in range(40):
            with conns[i % 3].cursor() as cur:
                cur.execute(f"ALTER TABLE {TABLE} ADD COLUMN b2b_{i} INT")
            with conns[(i + 1) % 3].cursor() as cur:
                cur.execute(f"ALTER TABLE {TABLE} DROP COLUMN b2b_{i}")
    finally:
        for c in conns:
            c.close()
    assert all("b2b_" not in full_meta(p)[3] and full_meta(p)[4:] == (1, 1) for p in procs)


def test_ok_waits_for_a_subscriber_that_saw_the_record_removed_before_the_outcome(cluster):
    """A subscriber whose ZooKeeper watch saw the deciding removal before the final step reached it over
    the peer channel (held 0.3 s there: under GONE_GRACE_S, past the pass that sees the record gone)
    answers the step only once caught up, not "no such record": right after OK it serves the new
    structure and the table is free there (issue 17: the next DDL there got 4006)."""
    p1, p2 = cluster.start(2, env={1: {"PYDBLE_TEST_PAUSE": "peer_final_step", "PYDBLE_TEST_PAUSE_S": "0.3"}})
    for i in range(3):
        p1.query(f"ALTER TABLE {TABLE} ADD COLUMN late_{i} INT")
        assert f"`late_{i}`" in full_meta(p2)[3]
        p2.query(f"ALTER TABLE {TABLE} DROP COLUMN late_{i}")   # no 4006: the table is free on p2
        assert f"`late_{i}`" not in full_meta(p1)[3]
    assert all("late_" not in full_meta(p)[3] and full_meta(p)[4:] == (1, 1) for p in (p1, p2))
    assert not cluster.zk_children("ddl") and not show_ddl(p2)


def test_a_ddl_with_an_unreachable_node_is_refused_and_leaves_no_lock_anywhere(cluster, backends, request):
    """The nodes' pings run beside the INIT write: an unreachable node still refuses the DDL before any
    node runs it, and the record and locks it took are gone everywhere (the next try gets the same
    refusal, not 4006)."""
    from harness import free_port, proxy_config

    # dn6 hangs: a listener that never answers, so every read of it lasts its connect timeout
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)
    request.addfinalizer(hung.close)

    def config(name: str) -> dict:
        cfg = proxy_config(backends, free_port(), free_port(), instance=name, cluster=cluster.section)
        cfg["db_groups"]["ha_dead"] = {"host": "127.0.0.1", "port": hung.getsockname()[1], "user": "root",
                                       "password": "", "connect_timeout_s": 0.5}
        cfg["sharding_nodes"]["dn6"] = {"db_group": "ha_dead", "database": "db1"}
        cfg["schemas"]["schema1"]["tables"]["half_dead"] = {"type": "global", "nodes": ["dn1", "dn6"]}
        return cfg

    backends[0].query("DROP TABLE IF EXISTS half_dead", database="db1")
    p1, p2 = (cluster.make(config(f"dble-{i}"), instance=f"dble-{i}", cluster=cluster.section) for i in (1, 2))
    for p in (p1, p2, p1):
        with pytest.raises(pymysql.MySQLError) as e:
            p.query("CREATE TABLE half_dead (id INT PRIMARY KEY)")
        code, msg = e.value.args
        assert code == 1105 and "shardingNode[dn6]" in msg and "unreachable" in msg, e.value.args
    assert not backends[0].query("SHOW TABLES LIKE 'half_dead'", database="db1")   # not half-created
    assert not cluster.zk_children("ddl") and not cluster.zk_children("lock/ddl_lock")
    assert all(r[4] == "REFRESHING" for r in show_ddl(p2)), show_ddl(p2)   # no DDL, at most a re-read
    # p1 re-reads the table in the background until dn6 answers, holding its local lock for the read
    # (a connect timeout): a DDL meanwhile waits for that read, it is not told another DDL runs (4006)
    wait_for(lambda: any(r[1] == "half_dead" and r[4] == "REFRESHING" for r in show_ddl(p1)), 20,
             "p1's background re-read of half_dead")
    with pytest.raises(pymysql.MySQLError) as e:
        p1.query("CREATE TABLE half_dead (id INT PRIMARY KEY)")
    assert e.value.args[0] == 1105 and "unreachable" in e.value.args[1], e.value.args
