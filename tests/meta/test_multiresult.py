"""Multi-statement answers as the metadata loader reads them (proxy.wire.response.ResponseScanner, the
one result decoder, then proxy.backends.meta_link.multi_result), byte for byte."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meta.backend_query import MultiResult, NodeUnavailable
from meta.config import parse_config
from proxy.backends.meta_link import MetaLink, multi_result
from proxy.wire.constants import MAX_PACKET as MAX_PAYLOAD
from proxy.wire.packets import com_query
from proxy.wire.response import ResponseScanner

MORE = 0x0008


def lenenc(n: int) -> bytes:
    if n < 251:
        return bytes((n,))
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def lenstr(s: str | None) -> bytes:
    if s is None:
        return b"\xfb"
    b = s.encode()
    return lenenc(len(b)) + b


class Wire:
    """Builds server packets with running sequence numbers."""

    def __init__(self) -> None:
        self.seq = 1
        self.out = bytearray()

    def packet(self, payload: bytes) -> "Wire":
        self.out += len(payload).to_bytes(3, "little") + bytes((self.seq & 0xFF,)) + payload
        self.seq += 1
        return self

    def eof(self, status: int) -> "Wire":
        return self.packet(b"\xfe\x00\x00" + status.to_bytes(2, "little"))

    def result(self, rows: list[tuple[str | None, ...]], ncols: int, more: bool) -> "Wire":
        self.packet(lenenc(ncols))
        for i in range(ncols):
            self.packet(lenstr("def") + lenstr("") + lenstr("") + lenstr("") + lenstr(f"c{i}")
                        + lenstr("") + b"\x0c" + b"\x21\x00" + b"\x00\x01\x00\x00" + b"\xfd"
                        + b"\x00\x00" + b"\x00" + b"\x00\x00")
        self.eof(0x0002 | (MORE if more else 0))
        for r in rows:
            self.packet(b"".join(lenstr(v) for v in r))
        return self.eof(0x0002 | (MORE if more else 0))

    def err(self, code: int, msg: str) -> "Wire":
        return self.packet(b"\xff" + code.to_bytes(2, "little") + b"#42S02" + msg.encode())

    def ok(self, more: bool) -> "Wire":
        return self.packet(b"\x00\x00\x00" + (0x0002 | (MORE if more else 0)).to_bytes(2, "little")
                           + b"\x00\x00")


class Parsed:
    """The scanner fed in chunks as a connection's reads would: what it consumed and what it decoded."""

    def __init__(self) -> None:
        self.scanner = ResponseScanner(False, collect=True, coldefs=False)
        self.pending = b""
        self.consumed = 0

    def feed(self, data: bytes) -> None:
        buf = self.pending + data
        pos = self.scanner.scan(buf)
        self.consumed += pos
        self.pending = buf[pos:]

    @property
    def done(self) -> bool:
        return self.scanner.done

    @property
    def result(self) -> MultiResult:
        return multi_result(self.scanner)


def parse(data: bytes, chunk: int | None = None) -> Parsed:
    p = Parsed()
    step = chunk or len(data) or 1
    for i in range(0, len(data), step):
        p.feed(data[i:i + step])
    return p


CREATE = "CREATE TABLE `t` (\n  `id` int(11) NOT NULL\n) ENGINE=InnoDB " + "x" * 300


def batch() -> bytes:
    w = Wire()
    w.result([("t1", CREATE)], 2, True)
    w.result([("t2", "CREATE TABLE `t2` (é)")], 2, True)
    w.ok(True)
    w.result([("a", None), ("b", "")], 2, False)
    return bytes(w.out)


def test_reads_every_result_set_until_the_last() -> None:
    p = parse(batch())
    assert p.done and p.result.error is None
    assert p.result.results == [[("t1", CREATE)], [("t2", "CREATE TABLE `t2` (é)")], [],
                         [("a", None), ("b", "")]]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 64))
def test_any_split_of_the_bytes_gives_the_same_result(chunk: int) -> None:
    assert parse(batch(), chunk).result.results == parse(batch()).result.results


def test_error_stops_the_batch_and_names_the_statement() -> None:
    w = Wire().result([("t1", "x")], 2, True).err(1146, "Table 'db1.t2' doesn't exist")
    p = parse(bytes(w.out), 3)
    assert p.done and p.result.results == [[("t1", "x")]]
    err = p.result.error
    assert err is not None and (err.index, err.code, err.message) == (1, 1146, "Table 'db1.t2' doesn't exist")


def test_not_done_until_the_final_eof() -> None:
    data = batch()
    p = parse(data[:-1])
    assert not p.done
    p.feed(data[-1:])
    assert p.done


def test_bytes_after_the_end_are_left_unconsumed() -> None:
    # the connection fails a response followed by stray bytes ("sent bytes after the response")
    p = parse(batch() + b"\x01\x00\x00\x09\x00")
    assert p.done and p.consumed == len(batch()) and p.pending == b"\x01\x00\x00\x09\x00"


def test_payload_over_16mb_is_reassembled() -> None:
    big = "y" * (MAX_PAYLOAD + 10)
    row = lenstr("big") + lenstr(big)
    w = Wire()
    w.packet(lenenc(2))
    w.packet(b"\x03def\x00\x00\x00\x01a\x00\x0c\x21\x00\x00\x01\x00\x00\xfd\x00\x00\x00\x00\x00")
    w.packet(b"\x03def\x00\x00\x00\x01b\x00\x0c\x21\x00\x00\x01\x00\x00\xfd\x00\x00\x00\x00\x00")
    w.eof(2)
    w.packet(row[:MAX_PAYLOAD])
    w.packet(row[MAX_PAYLOAD:])
    w.eof(2)
    p = parse(bytes(w.out), 1 << 20)
    assert p.done and p.result.results[0][0][1] == big


def test_com_query_framing() -> None:
    assert com_query("SELECT 1") == b"\x09\x00\x00\x00\x03SELECT 1"
    long = com_query("x" * MAX_PAYLOAD)
    assert long[:4] == b"\xff\xff\xff\x00" and long[4] == 3
    assert long[4 + MAX_PAYLOAD:8 + MAX_PAYLOAD] == b"\x01\x00\x00\x01"


def test_a_server_that_accepts_and_never_greets_is_unreachable_within_the_timeout() -> None:
    async def go() -> NodeUnavailable:
        accepted = asyncio.Event()
        held: list[asyncio.StreamWriter] = []

        def frozen(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            held.append(w)   # TCP accepted, no greeting ever sent
            accepted.set()
        srv = await asyncio.start_server(frozen, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        cfg = parse_config({
            "users": [{"name": "test", "password": "x", "schemas": ["s1"]}],
            "manager_users": [{"name": "root", "password": "x"}],
            "db_groups": {"g1": {"host": "127.0.0.1", "port": port, "user": "root", "connect_timeout_s": 60}},
            "sharding_nodes": {"dn1": {"db_group": "g1", "database": "d1"}},
            "schemas": {"s1": {"default_node": "dn1"}},
        })
        try:
            with pytest.raises(NodeUnavailable) as e:
                await MetaLink().connect(cfg.sharding_nodes["dn1"], cfg.db_groups["g1"], timeout_s=0.2)
            assert accepted.is_set()
            return e.value
        finally:
            for w in held:
                w.close()
            srv.close()
    err = asyncio.run(go())
    assert err.unreachable and "timed out after 0.2s" in err.reason
