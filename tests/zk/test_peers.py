"""The direct DDL channel between instances (zk/peers.py): who may use it, what it carries, and that
the cluster still agrees over ZooKeeper alone when it is off or abused."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from typing import Any, Awaitable, Callable

import pytest
from clusterkit import TABLE, backend_structure, full_meta

from zk import peers, wire
from zk.records import INIT, SUCCESS, DdlRecord

# --- the receiving side, in-process: a real TCP server, a plain handler --------------------------


KEY = b"k" * 32
PATH = "/dble/cluster-1/ddl/schema1.t"


class _Handler:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, int, DdlRecord, Any]] = []
        self.callers: list[str] = []
        self.fail = fail

    async def __call__(self, caller: str, path: str, czxid: int, rec: DdlRecord, texts: Any,
                       final: bool = False) -> tuple[bool | None, str]:
        self.calls.append((path, czxid, rec, texts))
        self.callers.append(caller)
        if self.fail:
            raise RuntimeError("boom")
        return rec.status == INIT, "" if rec.status == INIT else "refresh failed: node down"


def _with_server(body: Callable[[peers.PeerServer, _Handler], Awaitable[None]], handler: _Handler | None = None,
                 quick: peers.QuickHandler | None = None) -> None:
    """Run body against a real PeerServer on a free port (stopped afterwards, whatever happens)."""
    h = handler or _Handler()

    async def go() -> None:
        server = peers.PeerServer("dble-2", "cluster-1", KEY, h, lambda: 41, quick)
        await server.start("127.0.0.1", 0)
        try:
            await body(server, h)
        finally:
            await server.stop()
    asyncio.run(go())


class _Caller:
    """A raw connection to a PeerServer: the challenge read, then what the test chooses to send."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, challenge: dict) -> None:
        self.reader, self.writer, self.challenge = reader, writer, challenge
        self.decoder = wire.FrameDecoder()
        self.sealer: wire.Sealer | None = None

    @classmethod
    async def connect(cls, port: int) -> _Caller:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        dec = wire.FrameDecoder()
        frames: list[bytes] = []
        while not frames:
            frames = dec.frames(await asyncio.wait_for(reader.read(65536), 5))
        return cls(reader, writer, wire.parse(frames[0]))

    def hello(self, key: bytes = KEY, cluster: str = "cluster-1", instance: str = "dble-1") -> bytes:
        msg, self.sealer = wire.hello(key, cluster, instance, self.challenge)
        return wire.encode(msg)

    def sealed(self, body: bytes) -> bytes:
        assert self.sealer is not None
        return self.sealer.seal(body)

    async def talk(self, *frames: bytes) -> tuple[list[dict], bool]:
        """Send frames; return the replies read (opened with our key) and whether the server closed."""
        for f in frames:
            self.writer.write(f)
        await self.writer.drain()
        got: list[dict] = []
        closed = False
        try:
            while True:
                data = await asyncio.wait_for(self.reader.read(65536), 1.5)
                if not data:
                    closed = True
                    break
                assert self.sealer is not None
                got += [self.sealer.open(f) for f in self.decoder.frames(data)]
        except asyncio.TimeoutError:
            pass
        except ConnectionResetError:
            closed = True
        self.writer.close()
        return got, closed


def _rec(status: str = INIT) -> DdlRecord:
    return DdlRecord("dble-1", "schema1", "t", "ALTER_TABLE", "ALTER TABLE t ADD c INT", status, created_at=1.5)


def _step(msg_id: int, status: str = INIT, texts: Any = None, final: bool = False) -> bytes:
    return wire.dump(wire.step(msg_id, PATH, 77, _rec(status).encode().decode(), texts, final))


def test_a_caller_with_the_key_gets_each_step_answered():
    async def body(server: peers.PeerServer, h: _Handler) -> None:
        texts = {"dn1": {"t": "CREATE TABLE `t` (`id` int)"}, "dn2": {"t": None}}
        c = await _Caller.connect(server.port)
        got, closed = await c.talk(c.hello(), c.sealed(_step(1)), c.sealed(_step(2, SUCCESS, texts)))
        assert not closed
        assert sorted(got, key=lambda m: m["id"]) == [
            {"t": "reply", "id": 1, "ok": True, "message": "", "meta_version": 41},
            {"t": "reply", "id": 2, "ok": False, "message": "refresh failed: node down", "meta_version": 41}]
        assert [(c[0], c[1], c[2].status, c[3]) for c in h.calls] == [
            (PATH, 77, INIT, None), (PATH, 77, SUCCESS, texts)]
        assert h.calls[0][2] == _rec() and h.callers == ["dble-1", "dble-1"]
    _with_server(body)


@pytest.mark.parametrize("attack", [
    "wrong key", "other cluster", "unsealed step", "step before any hello", "replayed hello", "replayed step",
    "tampered step", "old token hello"])
def test_a_caller_without_the_key_is_dropped_unheard(attack):
    """Nothing a caller without the key sends (or replays from a caller with it) reaches the handler."""
    async def body(server: peers.PeerServer, h: _Handler) -> None:
        c = await _Caller.connect(server.port)
        if attack == "wrong key":
            frames = [c.hello(b"x" * 32), c.sealed(_step(1))]
        elif attack == "other cluster":
            frames = [c.hello(cluster="cluster-2"), c.sealed(_step(1))]
        elif attack == "unsealed step":
            frames = [c.hello(), wire.encode(wire.step(1, PATH, 77, _rec().encode().decode(), None))]
        elif attack == "step before any hello":
            frames = [wire.encode(wire.step(1, PATH, 77, _rec().encode().decode(), None))]
        elif attack == "old token hello":   # what online/{instance} used to publish
            frames = [wire.encode({"t": "hello", "cluster": "cluster-1", "from": "x", "token": "f" * 32})]
        else:
            good = await _Caller.connect(server.port)
            recorded = [good.hello(), good.sealed(_step(1))]
            got, _ = await good.talk(*recorded)
            assert len(got) == 1 and len(h.calls) == 1
            h.calls.clear()
            if attack == "replayed hello":
                frames = recorded     # the same bytes on a new connection: another challenge
            elif attack == "replayed step":
                # a frame sealed on another connection: its key and counter are that connection's
                frames = [c.hello(), c.sealed(_step(1)), good.sealed(_step(2, SUCCESS))]
                got, closed = await c.talk(*frames)
                assert closed and [call[2].status for call in h.calls] == [INIT]
                return
            else:
                hello = c.hello()
                frames = [hello, c.sealed(_step(1, SUCCESS)).replace(b"SUCCESS", b"FAILED_")]
        got, closed = await c.talk(*frames)
        assert closed and got == [] and h.calls == []
    _with_server(body)


@pytest.mark.parametrize("garbage", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",        # a length of 1.2 GB: refused before reading it
    struct.pack(">I", 5) + b"\xff\xfe\xfd\xfc\xfb",
    struct.pack(">I", 2) + b"[]",
])
def test_garbage_drops_that_connection_and_the_server_keeps_serving(garbage):
    async def body(server: peers.PeerServer, h: _Handler) -> None:
        good = await _Caller.connect(server.port)
        good.writer.write(good.hello())
        bad = await _Caller.connect(server.port)
        got, closed = await bad.talk(garbage)
        assert closed and got == []
        got, closed = await good.talk(good.sealed(_step(5)))
        assert got and got[0]["id"] == 5 and got[0]["ok"] is True
    _with_server(body)


def test_a_malformed_step_drops_the_caller():
    async def body(server: peers.PeerServer, h: _Handler) -> None:
        bad_record = wire.dump({"t": "step", "id": 1, "path": "/p", "czxid": 1, "record": "{}", "texts": None})
        bad_texts = wire.dump(wire.step(2, "/p", 1, _rec(SUCCESS).encode().decode(), {"dn1": ["x"]}))
        for bad in (bad_record, bad_texts):
            c = await _Caller.connect(server.port)
            got, closed = await c.talk(c.hello(), c.sealed(bad))
            assert closed and got == []
        assert h.calls == []
    _with_server(body)


def test_a_silent_caller_is_dropped(monkeypatch):
    monkeypatch.setattr(peers, "HELLO_TIMEOUT_S", 0.2)

    async def body(server: peers.PeerServer, h: _Handler) -> None:
        c = await _Caller.connect(server.port)   # the challenge, then nothing from us
        assert await asyncio.wait_for(c.reader.read(10), 5) == b""  # closed by the server
        c.writer.close()
    _with_server(body)


def test_a_final_step_is_answered_on_the_spot_when_the_quick_handler_can():
    """The quick handler answers a final step without the step handler's task; when it declines (None)
    or fails, the step handler answers as before."""
    seen: list[tuple[str, str, int]] = []

    def quick(caller: str, path: str, czxid: int, rec: DdlRecord, texts: Any) -> tuple[bool, str] | None:
        seen.append((caller, rec.status, czxid))
        if texts == {"dn1": {"t": "boom"}}:
            raise RuntimeError("boom")
        return (True, "quick") if texts == {"dn1": {"t": "CREATE TABLE `t` (`id` int)"}} else None

    async def body(server: peers.PeerServer, h: _Handler) -> None:
        c = await _Caller.connect(server.port)
        got, closed = await c.talk(c.hello(), c.sealed(_step(1, INIT, None, True)),
                                   c.sealed(_step(2, SUCCESS, {"dn1": {"t": "CREATE TABLE `t` (`id` int)"}}, True)),
                                   c.sealed(_step(3, SUCCESS, {"dn1": {"t": None}}, True)),
                                   c.sealed(_step(4, SUCCESS, {"dn1": {"t": "boom"}}, True)))
        assert not closed
        assert {m["id"]: (m["ok"], m["message"]) for m in got} == {
            1: (True, ""), 2: (True, "quick"), 3: (False, "refresh failed: node down"),
            4: (False, "refresh failed: node down")}
        assert seen == [("dble-1", INIT, 77), ("dble-1", SUCCESS, 77), ("dble-1", SUCCESS, 77),
                        ("dble-1", SUCCESS, 77)]
        assert [(c[2].status, c[3]) for c in h.calls] == [
            (INIT, None), (SUCCESS, {"dn1": {"t": None}}), (SUCCESS, {"dn1": {"t": "boom"}})]
    _with_server(body, quick=quick)


def test_a_step_that_fails_here_asks_the_originator_to_use_zookeeper():
    async def body(server: peers.PeerServer, h: _Handler) -> None:
        c = await _Caller.connect(server.port)
        got, closed = await c.talk(c.hello(), c.sealed(_step(9)))
        assert not closed
        assert got[0]["id"] == 9 and got[0]["ok"] is None and "RuntimeError" in got[0]["message"]
    _with_server(body, _Handler(fail=True))


# --- three real instances --------------------------------------------------------------------


def _finished_via(proxy: Any, expected: int = 1) -> list[str]:
    """How each DDL outcome reached this instance, from its log ('peer' or 'zookeeper'), once
    `expected` lines are there (they come a moment after the instance's answer: meta/later.py)."""
    deadline = time.monotonic() + 10
    while True:
        out = []
        for line in proxy.log_text().splitlines():
            if "ddl finished here" in line:
                out.append("peer" if "via=peer" in line else "zookeeper" if "via=zookeeper" in line else "?")
        if len(out) >= expected or time.monotonic() > deadline:
            return out
        time.sleep(0.01)


def _online_info(cluster: Any, instance: str) -> dict:
    return json.loads(cluster.zookeeper.read(f"{cluster.base()}/online/{instance}"))


def test_the_outcome_reaches_the_others_over_the_peer_channel(cluster):
    p1, p2, p3 = cluster.start()
    p1.query(f"ALTER TABLE {TABLE} ADD COLUMN via_peer INT")
    for p in (p2, p3):
        row = full_meta(p)
        assert "`via_peer`" in row[3] and row[4:] == (1, 1), row
        assert _finished_via(p) == ["peer"], p.log_text()[-3000:]
    info = _online_info(cluster, "dble-2")
    assert info["peer_port"] > 0 and "peer_token" not in info   # the key is in no znode
    assert not cluster.zk_children("ddl") and not cluster.zk_children("lock/ddl_lock")


def test_an_instance_with_the_channel_off_agrees_through_zookeeper(cluster):
    """peer_port = -1 on one instance: it neither listens nor asks; DDL from and to it still agree."""
    p1 = cluster.make(instance="dble-1", cluster=cluster.section)
    p2 = cluster.make(instance="dble-2", cluster=cluster.section)
    p3 = cluster.make(instance="dble-3", cluster={**cluster.section, "peer_port": -1})
    assert _online_info(cluster, "dble-3")["peer_port"] == 0
    p1.query(f"ALTER TABLE {TABLE} ADD COLUMN from_one INT")
    for p in (p2, p3):
        assert "`from_one`" in full_meta(p)[3]
    assert _finished_via(p2) == ["peer"] and _finished_via(p3) == ["zookeeper"]
    p3.query(f"ALTER TABLE {TABLE} ADD COLUMN from_three INT")   # the originator without a channel
    for p in (p1, p2):
        row = full_meta(p)
        assert "`from_three`" in row[3] and row[4:] == (1, 1), row
    assert all("`from_three`" in t for t in backend_structure(cluster.backends))


def test_abuse_of_the_peer_port_leaves_ddl_working(cluster):
    p1, p2, _ = cluster.start()
    port = _online_info(cluster, "dble-2")["peer_port"]
    for junk in (b"\x00" * 64, wire.encode({"t": "hello", "cluster": "cluster-1", "from": "mallory", "token": "f" * 32})
                 + wire.encode(wire.step(1, PATH, 77, _rec().encode().decode(), None)),
                 b"\x7f\xff\xff\xff" + b"x" * 100):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(junk)
            s.settimeout(5)
            heard = b""
            while chunk := s.recv(1000):
                heard += chunk
            assert [m["t"] for m in wire.FrameDecoder().feed(heard)] == ["challenge"]   # dropped, unanswered
    p1.query(f"ALTER TABLE {TABLE} ADD COLUMN after_abuse INT")
    row = full_meta(p2)
    assert "`after_abuse`" in row[3] and row[4:] == (1, 1), row
    assert "peer connection dropped" in p2.log_text()
