"""zk/aio.py against a real three-server ZooKeeper ensemble: when the server a session is connected
through dies, the session moves to another member within its timeout and stays the same session; what
was asked during the move goes out after it, in order; a watch fires once."""

from __future__ import annotations

import asyncio
import random
import socket
import time
import uuid
from typing import Any, Iterator

import pytest
from harness import ZooKeeperEnsemble, free_port
from kazoo.protocol.states import EventType, KazooState

from tests.zk.test_aio import run, session, until

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
        async with session(whole.hosts, SESSION_S, states, remove=root) as zk:
            await zk.create(f"{root}/e", b"", ephemeral=True)
            await zk.ensure_path(f"{root}/q")
            await zk.exists(f"{root}/w", watch=fired.append)
            sid, (_, port) = zk.session_id, zk.server
            victim = whole.serving(port)
            await asyncio.to_thread(victim.kill)
            t0 = time.monotonic()
            await until(lambda: not zk.connected, 5, "the dead server noticed")
            # asked while no server is connected: they wait and go out in the order asked
            asked = [asyncio.ensure_future(zk.create(f"{root}/q/n-", str(i).encode(), sequence=True))
                     for i in range(20)]
            made = await asyncio.wait_for(asyncio.gather(*asked), SESSION_S)
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
