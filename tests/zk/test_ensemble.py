"""zk/aio.py against a real three-server ZooKeeper ensemble: when the server a session is connected
through dies, the session moves to another member within its timeout and stays the same session; what
was asked during the move goes out after it, in order; a watch fires once; a cluster DDL in flight
completes with its instance's session intact."""

from __future__ import annotations

import asyncio
import random
import socket
import time
import uuid
from typing import Any, Iterator

import pytest
from clusterkit import (TABLE, Cluster, backend_structure, full_meta, lock_table_on_backend, reset_table, run_async,
                        show_ddl, wait_for)
from harness import ZooKeeperEnsemble, free_port
from kazoo.protocol.states import EventType, KazooState

from test_aio import run, session, until

SESSION_S = 6.0   # what the members grant at most (maxSessionTimeout)


@pytest.fixture(scope="module")
def ensemble() -> Iterator[ZooKeeperEnsemble]:
    ens = ZooKeeperEnsemble("zk-ens", max_session_timeout_ms=int(SESSION_S * 1000))
    try:
        ens.start()
        yield ens
    finally:
        ens.cleanup()


@pytest.fixture
def whole(ensemble: ZooKeeperEnsemble) -> Iterator[ZooKeeperEnsemble]:
    """The ensemble with every member serving again after the test (tests kill members)."""
    yield ensemble
    for s in ensemble.servers:
        if not s.running:
            s.start()


def test_the_session_moves_to_another_member_when_its_server_dies(whole: ZooKeeperEnsemble) -> None:
    root = f"/ens-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        states: list[str] = []
        fired: list[Any] = []
        asked: list[asyncio.Future] = []
        connected_when_asked: list[bool] = []

        def on_state(state: str) -> None:
            if state == KazooState.SUSPENDED and not asked:
                # asked while no server is connected: they wait and go out in the order asked
                connected_when_asked.append(zk.connected)
                asked.extend(asyncio.ensure_future(zk.create(f"{root}/q/n-", str(i).encode(), sequence=True))
                             for i in range(20))

        async with session(whole.hosts, SESSION_S, states, remove=root) as zk:
            zk.on_state(on_state)
            await zk.create(f"{root}/e", b"", ephemeral=True)
            await zk.ensure_path(f"{root}/q")
            await zk.exists(f"{root}/w", watch=fired.append)
            sid, (_, port) = zk.session_id, zk.server
            victim = whole.serving(port)
            t0 = time.monotonic()
            await asyncio.to_thread(victim.kill)
            await until(lambda: asked, 5, "the dead server noticed")
            made = await asyncio.wait_for(asyncio.gather(*asked), SESSION_S)
            assert connected_when_asked == [False]
            moved_s = time.monotonic() - t0
            assert zk.session_id == sid and zk.server[1] != port
            assert moved_s < SESSION_S, f"the session took {moved_s:.1f}s to move"
            assert made == sorted(made) and len(set(made)) == 20
            assert [(await zk.get(p))[0] for p in made] == [str(i).encode() for i in range(20)]
            assert (await zk.exists(f"{root}/e")).ephemeralOwner == sid    # the same session: its node stays
            assert states == [KazooState.CONNECTED, KazooState.SUSPENDED, KazooState.CONNECTED]
            # the watch fired once, for the lost connection (as kazoo's); armed again, it fires once more
            await until(lambda: fired, 2, "the watch told of the lost connection")
            assert [e.type for e in fired] == [EventType.NONE]
            await zk.exists(f"{root}/w", watch=fired.append)
            await zk.create(f"{root}/w", b"")
            await zk.set(f"{root}/w", b"again")
            await until(lambda: len(fired) == 2, 5, "the watch fired")
            await asyncio.sleep(0.2)
            assert [(e.type, e.path) for e in fired[1:]] == [(EventType.CREATED, f"{root}/w")]

    run(go())


def test_a_silent_member_costs_a_share_of_the_granted_timeout(whole: ZooKeeperEnsemble,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The client asks for 60 s, the ensemble grants 6 s: after its server dies the client tries a
    host that accepts connections and never answers (a frozen server), gives up on it after 6 s / 3
    hosts (kazoo's connect timeout, from the granted timeout) and reaches the next member while the
    session lives. With 60 s / 3 it would wait 20 s there and find its session expired."""
    monkeypatch.setattr(random, "shuffle", lambda hosts: None)    # try the hosts in the order given
    follower = next(s for s in whole.servers if s.mode == "follower")
    other = next(s for s in whole.servers if s is not follower)
    silent = socket.socket()
    silent.bind(("127.0.0.1", free_port()))
    silent.listen(16)

    async def go() -> None:
        states: list[str] = []
        hosts = f"{follower.hosts},127.0.0.1:{silent.getsockname()[1]},{other.hosts}"
        async with session(hosts, 60, states) as zk:
            assert zk.session_timeout_s == SESSION_S and zk.server[1] == follower.port
            sid = zk.session_id
            await asyncio.to_thread(follower.kill)
            await until(lambda: zk.connected and zk.server[1] == other.port, SESSION_S, "the next member")
            assert zk.session_id == sid and KazooState.LOST not in states
            assert await zk.exists("/") is not None

    try:
        run(go())
    finally:
        silent.close()


def test_a_cluster_ddl_outlives_the_zookeeper_server_of_its_originator(whole: ZooKeeperEnsemble, zk_root: str,
                                                                       fresh_proxy: Any, backends: list[Any]) -> None:
    """An ALTER waits on a metadata lock on dn1 while the ZooKeeper server its instance is connected to
    dies: the instance keeps its session on another member, the ALTER completes, both instances serve
    the new structure, which is the backends' own, and no lock or record is left."""
    reset_table(backends)
    cluster = Cluster(fresh_proxy, whole, zk_root, backends, session_timeout_s=SESSION_S)
    p1, p2 = cluster.start(2)
    blocker = lock_table_on_backend(backends)
    try:
        t, out = run_async(p1, f"ALTER TABLE {TABLE} ADD COLUMN across_failover INT")
        wait_for(lambda: show_ddl(p2), 10, "the DDL in flight cluster-wide")
        whole.connected_to(p1.pid).kill()
        wait_for(lambda: "suspended" in p1.log_text(), 5, "dble-1 to lose its ZooKeeper server")
    finally:
        blocker.rollback()
        blocker.close()
    t.join(30)
    assert out.get("ok"), out
    for p in (p1, p2):
        wait_for(lambda: "`across_failover`" in full_meta(p)[3], 10, f"{p.instance} to serve the new column")
        assert full_meta(p)[4:] == (1, 1)
    assert all("`across_failover`" in text for text in backend_structure(backends))
    assert not cluster.zk_children("ddl") and not cluster.zk_children("lock/ddl_lock")
    assert p1.log_text().count("joined the cluster") == 1      # the same session all along: no re-join


def test_a_survivor_reconciles_after_its_zookeeper_server_died(whole: ZooKeeperEnsemble, zk_root: str,
                                                               fresh_proxy: Any, backends: list[Any]) -> None:
    """The originator dies (kill -9) after running its ALTER, and while its session is expiring the
    ZooKeeper server of the only other instance dies too: that instance moves to another member with
    its session (every watch fired once and gone), still sees the originator leave, reconciles the
    record from the backends and serves their structure, with no record or lock left."""
    reset_table(backends)
    cluster = Cluster(fresh_proxy, whole, zk_root, backends, session_timeout_s=SESSION_S)
    p1, p2 = cluster.start(2, env={0: {"PYDBLE_TEST_PAUSE": "after_execute"}})
    run_async(p1, f"ALTER TABLE {TABLE} ADD COLUMN orphaned INT")
    wait_for(lambda: "paused for test" in p1.log_text(), 20, "dble-1 to pause after executing")
    p1.kill()
    killed = time.monotonic()
    whole.connected_to(p2.pid).kill()
    wait_for(lambda: "suspended" in p2.log_text(), 5, "dble-2 to lose its ZooKeeper server")
    wait_for(lambda: "orphaned ddl reconciled" in p2.log_text(), SESSION_S + 10, "dble-2 to reconcile")
    assert time.monotonic() - killed < SESSION_S + 10
    wait_for(lambda: not cluster.zk_children("ddl") and not cluster.zk_children("lock/ddl_lock"), 5,
             "ddl records and locks to be gone")
    truth = backend_structure(backends)
    assert len(truth) == 1 and "`orphaned`" in next(iter(truth))
    row = full_meta(p2)
    assert row[4:] == (1, 1) and "`orphaned`" in row[3]
    assert p2.log_text().count("joined the cluster") == 1      # the same session all along
    p2.query(f"ALTER TABLE {TABLE} DROP COLUMN orphaned")      # the table is free again
