"""No stale actor decides (issue 17 item 3), with real ZooKeeper, MariaDB and proxies.

An originator whose lock an operator released (`kill @@ddl_lock ... force`) while it was paused must
not overwrite or delete the next DDL's record when it resumes; an ack of an earlier record on a table
does not count for the next one; a reconciler does not read a table while its orphaned DDL still runs.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import contextmanager
from typing import Any, Iterator

import pymysql
import pytest
from clusterkit import (SESSION_TIMEOUT_S, TABLE, backend_structure, full_meta, instance_and_other, run_async,
                        wait_for)
from kazoo.exceptions import NoNodeError

from zk.ddlcore.acks import AckTally
from zk.records import INIT, Ack, DdlRecord

PAUSE_S = 8
KILL = f"kill @@ddl_lock where schema='schema1' and table='{TABLE}'"


def _manager(proxy: Any, sql: str) -> None:
    conn = proxy.manager()
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def _show_ddl(proxy: Any) -> list[tuple[Any, ...]]:
    conn = proxy.manager()
    try:
        with conn.cursor() as cur:
            cur.execute("show @@ddl")
            return list(cur.fetchall())
    finally:
        conn.close()


def _hold_on_dn1(server: Any, database: str = "db1") -> Any:
    """A connection straight to a backend (dn1's by default) whose open transaction holds the table's
    metadata lock there."""
    conn = pymysql.connect(host=server.host, port=server.port, user="root", password="", database=database)
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute(f"SELECT * FROM {TABLE}")
    return conn


def _ddl_marked_on(server: Any) -> bool:
    """A statement carrying pydble's DDL marker waits for a metadata lock on that backend."""
    rows = server.query("SHOW PROCESSLIST")
    return any("metadata lock" in (r[6] or "") and "pydble-ddl:" in (r[7] or "") for r in rows)


@contextmanager
def _frozen_mid_alter(cluster: Any, sql: str, **server: Any) -> Iterator[tuple[Any, Any, Any, Any, dict]]:
    """Two instances; dble-1 runs `sql`, held on dn1 by an open transaction, and is then frozen
    (SIGSTOP). Yields (dble-1, dble-2, the blocking connection, dble-1's client thread and outcome);
    afterwards dble-1 is resumed and the transaction ended."""
    p1, p2 = cluster.start(2, server=server or None)
    b1 = cluster.backends[0]
    blocker = _hold_on_dn1(b1)
    try:
        thread, out = run_async(p1, sql)
        wait_for(lambda: _ddl_marked_on(b1), 10, "the ALTER to wait on dn1")
        p1.pause()
        try:
            yield p1, p2, blocker, thread, out
        finally:
            p1.resume()
    finally:
        _let_go(blocker)


def _let_go(blocker: Any) -> None:
    """End the blocking transaction (the DDL waiting behind it goes on) and close its connection."""
    try:
        with blocker.cursor() as cur:
            cur.execute("COMMIT")
    finally:
        blocker.close()


def _answered_ok(thread: Any, out: dict[str, Any]) -> None:
    thread.join(30)
    assert out.get("ok"), out


def _znode(cluster: Any, path: str) -> dict[str, Any] | None:
    zk = cluster.zk()
    try:
        got = zk.exists(f"{cluster.base()}/{path}") and zk.get(f"{cluster.base()}/{path}")
        return json.loads(got[0]) if got else None
    finally:
        zk.stop()
        zk.close()


def test_a_released_originator_resuming_cannot_touch_the_next_ddls_record(cluster: Any) -> None:
    p1, p2 = cluster.start(2, env={0: {"PYDBLE_TEST_PAUSE": "after_execute", "PYDBLE_TEST_PAUSE_S": str(PAUSE_S)}})
    t1, out1 = run_async(p1, f"ALTER TABLE {TABLE} ADD COLUMN s1 INT")
    wait_for(lambda: "paused for test" in p1.log_text(), 20, "dble-1 to pause after executing")

    # the holder is online: refused without force
    with pytest.raises(pymysql.MySQLError) as e:
        _manager(p2, KILL)
    assert e.value.args[0] == 1105 and "online instance(s) dble-1" in e.value.args[1]
    _manager(p2, KILL + " force")

    # the next DDL on the table, from dble-2, held on dn1 by an open transaction
    b1 = cluster.backends[0]
    blocker = _hold_on_dn1(b1)
    try:
        t2, out2 = run_async(p2, f"ALTER TABLE {TABLE} ADD COLUMN s2 INT")
        record = f"ddl/schema1.{TABLE}"
        wait_for(lambda: (_znode(cluster, record) or {}).get("instance") == "dble-2", 10, "dble-2's record")

        # dble-1 resumes: it cannot publish, and leaves dble-2's record and lock alone
        t1.join(PAUSE_S + 20)
        assert not t1.is_alive() and out1.get("error", (0,))[0] == 4006, out1
        rec = _znode(cluster, record)
        assert rec is not None and rec["instance"] == "dble-2" and rec["status"] == INIT and "s2" in rec["sql"]
        lock = _znode(cluster, f"lock/ddl_lock/schema1.{TABLE}")
        assert lock is not None and lock["instance"] == "dble-2"
        assert not out2, "dble-2's DDL ended while dn1 still held the table"
    finally:
        _let_go(blocker)
    _answered_ok(t2, out2)
    wait_for(lambda: not cluster.zk_children("ddl") and not cluster.zk_children("lock/ddl_lock"), 10,
             "ddl records and locks to be gone")
    truth = backend_structure(cluster.backends)
    assert len(truth) == 1 and "`s1`" in next(iter(truth)) and "`s2`" in next(iter(truth))
    for p in (p1, p2):
        wait_for(lambda p=p: full_meta(p)[4:] == (1, 1), 10, f"{p.instance} to equal the backends")


def test_a_late_ack_of_an_earlier_record_does_not_count_for_the_next(
        zookeeper: Any, zk_root: str, backends: list[Any]) -> None:
    """dble-3 acked the table's previous record; the next record (same path, version 0 again) must
    not take that ack for its own, and an ack written for the previous record once the next one is
    there is not written at all."""
    async def go() -> None:
        key = ("schema1", TABLE)
        async with instance_and_other(zookeeper, zk_root + "-lateack", backends, []) as (c, other):
            await other.create(c.paths.online_instance("dble-3"), b"{}", ephemeral=True)
            path = c.paths.ddl_record(*key)

            async def new_record(ddl_id: str) -> tuple[DdlRecord, int]:
                rec = DdlRecord("dble-1", *key, "ALTER_TABLE", "ALTER ...", INIT, marker=f"pydble-ddl:{ddl_id}")
                await c.zk.create(path, rec.encode())
                await c.zk.create(c.paths.ddl_owner(*key, ddl_id), b"")
                await c.zk.create(c.paths.ddl_acks(*key), b"")
                return rec, (await c.zk.exists(path)).czxid

            first, first_czxid = await new_record("first")
            await other.create(c.paths.ddl_ack(*key, "dble-3"), Ack(INIT, record=first_czxid).encode())
            got = await c.wait_acks(AckTally((key,), INIT, {key: first_czxid}, frozenset({"dble-3"})), 1.0)
            assert got.laggards == ()
            await c.zk.delete(path, recursive=True)

            second, second_czxid = await new_record("second")
            assert second_czxid != first_czxid
            await other.create(c.paths.ddl_ack(*key, "dble-3"), Ack(INIT, record=first_czxid).encode())
            got = await c.wait_acks(AckTally((key,), INIT, {key: second_czxid}, frozenset({"dble-3"})), 1.0)
            assert got.laggards == ("dble-3",), "an ack of the previous record counted for the next"
            await other.delete(c.paths.ddl_ack(*key, "dble-3"))

            # our own ack of the first record, written late: refused, nothing lands under the second
            with pytest.raises(NoNodeError):
                await c.ack(first, first_czxid)
            assert await c.zk.exists(c.paths.ddl_ack(*key, "dble-2")) is None
            await c.ack(second, second_czxid)
            data, _ = await c.zk.get(c.paths.ddl_ack(*key, "dble-2"))
            assert Ack.decode(data).record == second_czxid

    asyncio.run(go())


def test_a_reconcile_waits_until_the_orphaned_ddl_has_ended_on_the_backends(cluster: Any) -> None:
    """The originator of an ALTER held on dn1 by an open transaction is frozen (SIGSTOP) past its
    session: the survivor must not read the table while the ALTER still waits there (it would publish
    the old structure for good); once the transaction ends and the ALTER completes, it publishes the
    new one."""
    with _frozen_mid_alter(cluster, f"ALTER TABLE {TABLE} ADD COLUMN x INT FIRST") as (p1, p2, blocker, t1, out1):
        wait_for(lambda: "dble-1" not in cluster.zk_children("online"), SESSION_TIMEOUT_S + 10,
                 "dble-1's session to expire")
        time.sleep(3)   # a reconcile pass or more while the ALTER still waits
        assert cluster.zk_children("ddl"), "the record was reconciled while the ALTER still ran on dn1"
        (row,) = _show_ddl(p2)                     # still shown, the table still locked
        assert row[1] == TABLE and row[3] == "dble-1" and row[4] == "INIT (orphaned)", row
        with pytest.raises(pymysql.MySQLError) as e:
            p2.query(f"ALTER TABLE {TABLE} ADD COLUMN meanwhile INT")
        assert e.value.args[0] == 4006
        with blocker.cursor() as cur:
            cur.execute("COMMIT")
        wait_for(lambda: not cluster.zk_children("ddl"), 20, "the survivor to reconcile the record")
        truth = backend_structure(cluster.backends)
        assert len(truth) == 1 and "`x` int(11) DEFAULT NULL,\n  `id`" in next(iter(truth)), truth
        row = full_meta(p2)
        assert row[4:] == (1, 1), row
        assert "`x`" in row[3]
    t1.join(30)
    assert "error" in out1, out1   # dble-1 lost its session: it could not publish the outcome
    wait_for(lambda: full_meta(p1)[4:] == (1, 1), 30, "dble-1 to equal the backends once back")


def test_a_forced_release_stops_the_ddl_and_every_instance_equals_the_backends(cluster: Any) -> None:
    """An operator releases (force) a DDL still waiting on its nodes: the release first stops it there
    (KILL QUERY, waited for), so it cannot complete after dble-2 reloaded the table (dble-2 would serve
    the old structure for good); dble-1's client hears the interruption, and every instance equals the
    backends. (ZooKeeper only: over the peer channel the outcome reaches dble-2 before it is decided.)"""
    cluster.section["peer_port"] = -1
    p1, p2 = cluster.start(2)
    blockers = [_hold_on_dn1(b, db) for b in cluster.backends[:2] for db in ("db1", "db2")]   # all 4 nodes
    try:
        t1, out1 = run_async(p1, f"ALTER TABLE {TABLE} ADD COLUMN lost INT FIRST")
        wait_for(lambda: (_znode(cluster, f"ddl/schema1.{TABLE}") or {}).get("instance") == "dble-1", 10,
                 "dble-1's record")
        wait_for(lambda: _ddl_marked_on(cluster.backends[0]), 10, "the ALTER to wait on dn1")
        _manager(p2, KILL + " force")
        assert not any(_ddl_marked_on(b) for b in cluster.backends), "released while the ALTER still waited"
        for blocker in blockers:
            with blocker.cursor() as cur:
                cur.execute("COMMIT")
    finally:
        for blocker in blockers:
            blocker.close()
    t1.join(30)
    assert out1.get("error", (0,))[0] in (1317, 4006), out1
    truth = backend_structure(cluster.backends)
    assert len(truth) == 1 and "`lost`" not in next(iter(truth)), truth
    for p in (p1, p2):
        wait_for(lambda p=p: full_meta(p)[4:] == (1, 1), 10, f"{p.instance} to equal the backends")


def test_a_blocked_alter_outlasts_the_backend_timeout_with_the_cluster_locked(cluster: Any) -> None:
    """backend_timeout_s = 2 and an ALTER waiting on dn1's metadata lock: it keeps the table locked in
    the whole cluster (shown by `show @@ddl` on the other instance, a DDL there refused with 4006)
    until the transaction ends, then completes everywhere with every instance equal to the backends."""
    p1, p2 = cluster.start(2, server={"backend_timeout_s": 2})
    blocker = _hold_on_dn1(cluster.backends[0])
    try:
        t1, out1 = run_async(p1, f"ALTER TABLE {TABLE} ADD COLUMN x INT FIRST")
        wait_for(lambda: _show_ddl(p2), 10, "the ALTER to show on dble-2")
        time.sleep(3.5)   # past backend_timeout_s
        assert not out1, out1
        (row,) = _show_ddl(p2)
        assert row[1] == TABLE and row[3] == "dble-1" and "ADD COLUMN x" in row[2], row
        with pytest.raises(pymysql.MySQLError) as e:
            p2.query(f"ALTER TABLE {TABLE} ADD COLUMN y INT")
        assert e.value.args[0] == 4006
    finally:
        _let_go(blocker)
    _answered_ok(t1, out1)
    truth = backend_structure(cluster.backends)
    assert len(truth) == 1 and "`x` int(11) DEFAULT NULL,\n  `id`" in next(iter(truth)), truth
    for p in (p1, p2):
        assert full_meta(p)[4:] == (1, 1), p.instance


def test_a_reconcile_stops_an_orphaned_ddl_past_ddl_timeout(cluster: Any) -> None:
    """Past `[server] ddl_timeout_s`, the survivor does what the frozen originator would have done for
    a client gone: it stops the orphaned ALTER on dn1 (KILL QUERY) and reconciles from what the nodes
    have, while the transaction still holds the table."""
    with _frozen_mid_alter(cluster, f"ALTER TABLE {TABLE} ADD COLUMN k INT", ddl_timeout_s=4) as (_, p2, _b, t1, _o):
        wait_for(lambda: not cluster.zk_children("ddl"), SESSION_TIMEOUT_S + 20, "the survivor to reconcile")
        assert not _ddl_marked_on(cluster.backends[0]), "reconciled while the ALTER still waited on dn1"
        row = full_meta(p2)
        assert row[4] == 0                      # dn1 without the column, the other nodes with it
        assert row[3] in backend_structure(cluster.backends)
    t1.join(30)
