"""zk/aio.py against a real ZooKeeper: answers, watches and session states as kazoo gives them, and a
session that survives a dropped connection, a frozen server, a frozen client and a server that talks
nonsense (a clear state or error each time, never a hang)."""

from __future__ import annotations

import asyncio
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

import pytest
from harness import ZooKeeperServer, free_port
from kazoo.exceptions import (BadVersionError, ConnectionClosedError, NodeExistsError, NoNodeError,
                              RolledBackError, SessionExpiredError)
from kazoo.protocol.serialization import Exists
from kazoo.protocol.states import EventType, KazooState

from zk.aio import Zk, ZkTimeout


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


async def until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.02)


@asynccontextmanager
async def session(hosts: str, session_timeout_s: float, states: list[str] | None = None,
                  remove: str | None = None, start_s: float = 10) -> AsyncIterator[Zk]:
    """A started client (its state changes appended to `states`); `remove` is deleted before it stops."""
    zk = Zk(hosts, session_timeout_s, asyncio.get_running_loop())
    if states is not None:
        zk.on_state(states.append)
    await zk.start(start_s)
    try:
        yield zk
    finally:
        if remove is not None:
            await zk.delete(remove, recursive=True)
        await zk.stop()


@pytest.fixture(scope="module")
def own_zookeeper() -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of this module's own: its tests stop and freeze it."""
    zk = ZooKeeperServer("zookeeper-aio")
    try:
        zk.start()
        yield zk
    finally:
        zk.cleanup()


def test_answers_are_kazoos(zookeeper: ZooKeeperServer) -> None:
    root = f"/aio-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with session(zookeeper.hosts, 10) as zk:
            assert zk.connected and zk.session_id
            assert await zk.create(f"{root}/a/b", b"v1") == f"{root}/a/b"        # parents made
            data, stat = await zk.get(f"{root}/a/b")
            assert data == b"v1" and stat.version == 0
            assert (await zk.set(f"{root}/a/b", b"v2", 0)).version == 1
            with pytest.raises(BadVersionError):
                await zk.set(f"{root}/a/b", b"v3", 0)
            assert await zk.exists(f"{root}/nope") is None
            assert await zk.get_or_none(f"{root}/nope") is None
            with pytest.raises(NoNodeError):
                await zk.get(f"{root}/nope")
            assert await zk.children(f"{root}/nope") == []
            seq = await zk.create(f"{root}/a/s-", b"", sequence=True)
            assert seq.startswith(f"{root}/a/s-") and len(seq) == len(f"{root}/a/s-") + 10
            eph = await zk.create(f"{root}/a/e", b"", ephemeral=True)
            assert (await zk.exists(eph)).ephemeralOwner == zk.session_id

            def tx_ok(tx: Any) -> None:
                tx.check(f"{root}/a/b", 1)
                tx.create(f"{root}/a/c", b"c")
                tx.set_data(f"{root}/a/c", b"c2")
                tx.delete(seq)
            ok = await zk.commit(tx_ok)
            assert ok[0] is True and ok[1] == f"{root}/a/c" and ok[2].version == 1 and ok[3] is True

            def tx_bad(tx: Any) -> None:
                tx.create(f"{root}/a/d", b"")
                tx.create(f"{root}/a/c", b"")     # exists: the whole transaction changes nothing
            bad = await zk.commit(tx_bad)
            assert isinstance(bad[0], RolledBackError) and isinstance(bad[1], NodeExistsError)
            assert await zk.exists(f"{root}/a/d") is None
            assert sorted(await zk.children(f"{root}/a")) == ["b", "c", "e"]
            await zk.ensure_path(f"{root}/x/y/z")
            await zk.ensure_path(f"{root}/x/y/z")
            assert await zk.delete(f"{root}/a", recursive=True) is True
            assert await zk.delete(f"{root}/a") is False
            with pytest.raises(TypeError):
                await zk.create(f"{root}/str", "not bytes")  # type: ignore[arg-type]
        assert not zk.connected and zk.state == KazooState.LOST
        # the session is closed, not left to expire: its ephemeral node is gone at once
        other = zookeeper.client()
        try:
            assert other.exists(f"{root}/a/e") is None and other.exists(f"{root}/x/y/z") is not None
        finally:
            other.stop()
            other.close()

    run(go())


def test_a_chroot_is_invisible_to_the_caller(zookeeper: ZooKeeperServer) -> None:
    chroot = f"/aio-chroot-{uuid.uuid4().hex[:8]}"
    other = zookeeper.client()
    other.ensure_path(chroot)

    async def go() -> None:
        events: list[Any] = []
        async with session(zookeeper.hosts + chroot, 10) as zk:
            assert await zk.create("/n", b"x") == "/n"
            assert await zk.commit(lambda tx: tx.create("/m", b"")) == ["/m"]
            await zk.children("/", watch=events.append)
            await asyncio.to_thread(other.delete, f"{chroot}/m")
            await until(lambda: events, 5, "the child watch")
            assert events[0].path == "/"

    try:
        run(go())
        assert other.get(f"{chroot}/n")[0] == b"x"
    finally:
        other.delete(chroot, recursive=True)
        other.stop()
        other.close()


def test_a_watch_fires_once_on_the_loop_with_its_event(zookeeper: ZooKeeperServer) -> None:
    root = f"/aio-w-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        data_events: list[Any] = []
        child_events: list[Any] = []
        async with session(zookeeper.hosts, 10, remove=root) as zk:
            await zk.create(f"{root}/n", b"1")
            await zk.get(f"{root}/n", watch=data_events.append)
            await zk.children(root, watch=child_events.append)
            await zk.exists(f"{root}/later", watch=data_events.append)
            await zk.set(f"{root}/n", b"2")
            await zk.set(f"{root}/n", b"3")          # a watch is one-shot: no second event
            await zk.create(f"{root}/later", b"")
            await until(lambda: len(data_events) >= 2 and child_events, 5, "the watches")
            await asyncio.sleep(0.1)
            assert [(e.type, e.path) for e in data_events] == [(EventType.CHANGED, f"{root}/n"),
                                                                (EventType.CREATED, f"{root}/later")]
            assert [(e.type, e.path) for e in child_events] == [(EventType.CHILD, root)]

    run(go())


def test_a_frozen_client_loses_its_session_and_gets_a_new_one(zookeeper: ZooKeeperServer) -> None:
    """The loop blocked past the session timeout (a GC pause, SIGSTOP): the server expires the
    session; the client says SUSPENDED, LOST, then CONNECTED with a new session, fires its watch once, and
    its ephemeral nodes are gone. A call made while SUSPENDED, under the old session, fails with
    SessionExpiredError and never runs under the new one."""
    root = f"/aio-x-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        states: list[str] = []
        fired: list[Any] = []
        queued: list[asyncio.Task] = []

        def on_state(state: str) -> None:
            if state == KazooState.SUSPENDED and not queued:
                queued.append(asyncio.ensure_future(zk.create(f"{root}/queued", b"")))

        async with session(zookeeper.hosts, 2, states, remove=root) as zk:
            zk.on_state(on_state)
            await zk.create(f"{root}/e", b"", ephemeral=True)
            await zk.exists(f"{root}/e", watch=fired.append)
            old = zk.session_id
            time.sleep(4.0)                     # the whole loop stands still, heartbeats included
            await until(lambda: zk.connected and zk.session_id != old, 15, "a new session")
            assert states == [KazooState.CONNECTED, KazooState.SUSPENDED, KazooState.LOST, KazooState.CONNECTED]
            # the server may get the node's deletion out before it closes the connection
            assert len(fired) == 1 and fired[0].type in (EventType.NONE, EventType.DELETED)
            assert await zk.exists(f"{root}/e") is None
            with pytest.raises(SessionExpiredError):
                await queued[0]
            assert await zk.exists(f"{root}/queued") is None

    run(go())


def test_a_server_gone_and_back_keeps_the_session(own_zookeeper: ZooKeeperServer) -> None:
    """ZooKeeper restarted within the session timeout: SUSPENDED while it is down (DDL is refused on
    that), the same session CONNECTED again after, its ephemeral node still there; a call made while
    it was down goes out once it is back."""
    async def go() -> None:
        states: list[str] = []
        async with session(own_zookeeper.hosts, 20, states) as zk:
            await zk.create("/aio-restart", b"", ephemeral=True)
            sid = zk.session_id
            await asyncio.to_thread(own_zookeeper.stop)
            await until(lambda: not zk.connected, 10, "the drop noticed")
            assert states[-1] == KazooState.SUSPENDED
            # exists() as zk.exists sends it, with a bound a loaded box's java start fits in (OP_TIMEOUT_S
            # is 5 s: a restart slower than that failed the call, as it should in production)
            waiting = asyncio.get_running_loop().create_task(
                zk._call(Exists(zk._full("/aio-restart"), False), timeout=60))
            await asyncio.to_thread(own_zookeeper.start)
            assert (await waiting) is not None
            await until(lambda: zk.connected, 10, "connected again")
            assert zk.session_id == sid and states[-1] == KazooState.CONNECTED

    run(go())


def test_a_frozen_server_is_dropped_within_the_read_timeout(own_zookeeper: ZooKeeperServer) -> None:
    async def go() -> None:
        async with session(own_zookeeper.hosts, 3) as zk:
            own_zookeeper.pause()
            t0 = time.monotonic()
            try:
                await until(lambda: not zk.connected, 6, "the silence noticed")
                assert time.monotonic() - t0 < 3 * 2 / 3 + 1.0
                with pytest.raises(ZkTimeout):           # a call waits for the session, bounded
                    await asyncio.wait_for(zk.children("/"), 8)
            finally:
                own_zookeeper.resume()
            await until(lambda: zk.connected, 15, "connected again")
            assert await zk.children("/") is not None

    run(go())


def test_a_late_answer_to_a_call_that_timed_out_keeps_its_place(own_zookeeper: ZooKeeperServer) -> None:
    """A server frozen past a call's bound but within the read timeout: the call fails with ZkTimeout,
    its answer arrives late and is the one its place in line expects (not a protocol error), so the
    connection and the session stay, and the next call is answered."""
    async def go() -> None:
        states: list[str] = []
        async with session(own_zookeeper.hosts, 15, states) as zk:
            own_zookeeper.pause()
            try:
                with pytest.raises(ZkTimeout):
                    await zk.exists("/")                # bounded by OP_TIMEOUT_S, below the read timeout
            finally:
                own_zookeeper.resume()
            assert await zk.exists("/") is not None
            await asyncio.sleep(0.3)
            assert zk.connected and states == [KazooState.CONNECTED]

    run(go())


def test_a_server_that_talks_nonsense_is_a_failed_start_not_a_crash() -> None:
    async def go() -> None:
        async def nonsense(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(100)
            writer.write(b"\xff\xff\xff\xf0garbage")
            await writer.drain()
            await asyncio.sleep(0.5)
            writer.close()

        port = free_port()
        server = await asyncio.start_server(nonsense, "127.0.0.1", port)
        try:
            zk = Zk(f"127.0.0.1:{port}", 2, asyncio.get_running_loop())
            t0 = time.monotonic()
            with pytest.raises(ZkTimeout):
                await zk.start(1.5)
            assert time.monotonic() - t0 < 3 and not zk.connected
            with pytest.raises(ConnectionClosedError):
                await zk.children("/")          # a stopped client refuses at once
        finally:
            server.close()
            await server.wait_closed()

    run(go())


def test_a_reply_that_cannot_be_read_fails_its_call_and_drops_the_connection() -> None:
    """A server that completes the handshake, then answers a read with a truncated value: the call
    gets ConnectionLoss at once (not a hang, not a wrong value) and the session is SUSPENDED."""
    import struct

    from kazoo.exceptions import ConnectionLoss

    async def go() -> None:
        async def truncating(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readexactly(4 + 45)     # the connect request
            hs = struct.pack("!iiq", 0, 4000, 0x42) + struct.pack("!i", 16) + b"p" * 16 + b"\x00"
            writer.write(struct.pack("!i", len(hs)) + hs)
            (n,) = struct.unpack("!i", await reader.readexactly(4))
            (xid,) = struct.unpack("!i", (await reader.readexactly(n))[:4])
            bad = struct.pack("!iqi", xid, 5, 0) + struct.pack("!i", 100) + b"short"
            writer.write(struct.pack("!i", len(bad)) + bad)
            await writer.drain()
            await asyncio.sleep(5)

        port = free_port()
        server = await asyncio.start_server(truncating, "127.0.0.1", port)
        states: list[str] = []
        try:
            async with session(f"127.0.0.1:{port}", 4, states, start_s=5) as zk:
                with pytest.raises(ConnectionLoss):
                    await asyncio.wait_for(zk.get("/x"), 3)
                await until(lambda: KazooState.SUSPENDED in states, 2, "the connection dropped")
        finally:
            server.close()
            await server.wait_closed()

    run(go())


def test_a_crash_inside_a_connection_attempt_does_not_end_reconnecting(zookeeper: ZooKeeperServer,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever goes wrong in one attempt (here: building the connect request fails twice), the client
    keeps trying and connects once it works again."""
    from zk import jute

    real = jute.connect_request
    calls = {"n": 0}

    def flaky(*args: Any) -> bytes:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise RuntimeError("a bug in one attempt")
        return real(*args)

    monkeypatch.setattr(jute, "connect_request", flaky)

    async def go() -> None:
        async with session(zookeeper.hosts, 10) as zk:
            assert calls["n"] == 3 and zk.connected
            assert await zk.exists("/") is not None

    run(go())


def test_a_reply_out_of_order_drops_the_connection() -> None:
    """ZooKeeper answers one connection in the order of its requests: a server that answers the second
    request before the first breaks that, so both calls get ConnectionLoss (never each other's answer)
    and the session is SUSPENDED."""
    import struct

    from kazoo.exceptions import ConnectionLoss

    async def go() -> None:
        async def swapping(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readexactly(4 + 45)     # the connect request
            hs = struct.pack("!iiq", 0, 4000, 0x42) + struct.pack("!i", 16) + b"p" * 16 + b"\x00"
            writer.write(struct.pack("!i", len(hs)) + hs)
            xids = []
            while len(xids) < 2:
                (n,) = struct.unpack("!i", await reader.readexactly(4))
                (xid, op) = struct.unpack("!ii", (await reader.readexactly(n))[:8])
                if op == 3:                      # exists (pings are not answered)
                    xids.append(xid)
            for xid in reversed(xids):           # no node: an exists() answer without a body
                writer.write(struct.pack("!i", 16) + struct.pack("!iqi", xid, 5, NoNodeError.code))
            await writer.drain()
            await asyncio.sleep(5)

        port = free_port()
        server = await asyncio.start_server(swapping, "127.0.0.1", port)
        states: list[str] = []
        try:
            async with session(f"127.0.0.1:{port}", 4, states, start_s=5) as zk:
                first = asyncio.ensure_future(zk.exists("/a"))
                second = asyncio.ensure_future(zk.exists("/b"))
                done = await asyncio.wait_for(asyncio.gather(first, second, return_exceptions=True), 3)
                assert [type(r) for r in done] == [ConnectionLoss, ConnectionLoss]
                await until(lambda: KazooState.SUSPENDED in states, 2, "the connection dropped")
        finally:
            server.close()
            await server.wait_closed()

    run(go())
