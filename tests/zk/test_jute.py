"""ZooKeeper's wire format byte for byte: frames in any pieces, the handshake, request and reply headers,
watch events, and what a reply turns into (a value, None, or kazoo's exception)."""

from __future__ import annotations

import struct

import pytest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.protocol.serialization import Create, Delete, Exists, GetChildren, GetData, Transaction
from kazoo.security import OPEN_ACL_UNSAFE

from zk import jute

STAT = struct.pack("!qqqqiiiqiiq", 7, 8, 1000, 2000, 3, 0, 0, 0x55, 5, 0, 9)


def test_frames_come_out_whole_whatever_pieces_they_arrive_in() -> None:
    wire = jute.frame(b"hello") + jute.frame(b"") + jute.frame(b"x" * 300)
    for cut in range(len(wire) + 1):
        f = jute.Framer()
        got = f.feed(wire[:cut]) + f.feed(wire[cut:])
        assert got == [b"hello", b"", b"x" * 300]
    f = jute.Framer()
    assert [p for b in wire for p in f.feed(bytes([b]))] == [b"hello", b"", b"x" * 300]


def test_a_length_no_zookeeper_would_send_is_refused() -> None:
    with pytest.raises(jute.FrameError):
        jute.Framer().feed(struct.pack("!i", -5))
    with pytest.raises(jute.FrameError):
        jute.Framer().feed(struct.pack("!i", jute.MAX_FRAME + 1))


def test_connect_request_bytes() -> None:
    wire = jute.connect_request(last_zxid=0x11, timeout_ms=10000, session_id=0x22, passwd=b"p" * 16)
    body = struct.pack("!iqiq", 0, 0x11, 10000, 0x22) + struct.pack("!i", 16) + b"p" * 16 + b"\x00"
    assert wire == struct.pack("!i", len(body)) + body


def test_handshake_reply_with_and_without_the_read_only_byte() -> None:
    base = struct.pack("!iiq", 0, 6000, 0x1234) + struct.pack("!i", 16) + b"s" * 16
    assert jute.parse_handshake(base) == jute.Handshake(6000, 0x1234, b"s" * 16, False)
    assert jute.parse_handshake(base + b"\x01") == jute.Handshake(6000, 0x1234, b"s" * 16, True)
    expired = struct.pack("!iiq", 0, 0, 0) + struct.pack("!i", 16) + b"\x00" * 16
    assert jute.parse_handshake(expired).timeout_ms == 0
    with pytest.raises(jute.FrameError):
        jute.parse_handshake(b"\x00\x01")


def test_request_ping_close_and_auth_bytes() -> None:
    assert jute.request(9, GetChildren("/a", True)) == (struct.pack("!iii", 4 + 4 + 4 + 2 + 1, 9, 8)
                                                        + struct.pack("!i", 2) + b"/a" + b"\x01")
    assert jute.request(10, Delete("/a", 3)) == struct.pack("!iii", 18, 10, 2) + struct.pack("!i", 2) + b"/a" + \
        struct.pack("!i", 3)
    assert jute.ping() == struct.pack("!iii", 8, -2, 11)
    assert jute.close(5) == struct.pack("!iii", 8, 5, -11)
    auth = jute.auth("digest", "u:p")
    assert auth == struct.pack("!iii", 8 + 4 + 4 + 6 + 4 + 3, -4, 100) + struct.pack("!i", 0) + \
        struct.pack("!i", 6) + b"digest" + struct.pack("!i", 3) + b"u:p"


def test_reply_header_and_values() -> None:
    payload = struct.pack("!iqi", 3, 0x99, 0) + STAT
    header, offset = jute.parse_reply(payload)
    assert (header.xid, header.zxid, header.err, offset) == (3, 0x99, 0, 16)
    stat = jute.reply_value(Exists("/a", False), 0, payload, offset)
    assert (stat.czxid, stat.version, stat.ephemeralOwner) == (7, 3, 0x55)
    data = struct.pack("!iqi", 4, 0, 0) + struct.pack("!i", 3) + b"abc" + STAT
    value, stat = jute.reply_value(GetData("/a", False), 0, data, 16)
    assert value == b"abc" and stat.mzxid == 8
    with pytest.raises(jute.FrameError):
        jute.parse_reply(b"\x00" * 15)


def test_errors_become_kazoos_exceptions_and_a_missing_node_is_none_for_exists() -> None:
    assert jute.reply_value(Exists("/a", True), NoNodeError.code, b"", 16) is None
    assert isinstance(jute.reply_value(GetData("/a", False), NoNodeError.code, b"", 16), NoNodeError)
    assert isinstance(jute.reply_value(Create("/a", b"", OPEN_ACL_UNSAFE, 0), NodeExistsError.code, b"", 16),
                      NodeExistsError)
    with pytest.raises(jute.FrameError):
        jute.reply_value(GetData("/a", False), 0, b"\x00" * 17, 16)


def test_a_transaction_answers_per_operation() -> None:
    ok = (struct.pack("!iBi", 1, 0, 0) + struct.pack("!i", 2) + b"/a"
          + struct.pack("!iBi", 2, 0, 0)
          + struct.pack("!iBi", -1, 1, -1))
    tx = Transaction([Create("/a", b"", OPEN_ACL_UNSAFE, 0), Delete("/b", -1)])
    assert jute.reply_value(tx, 0, ok, 0) == ["/a", True]
    failed = (struct.pack("!iBi", -1, 0, 0) + struct.pack("!i", 0)
              + struct.pack("!iBi", -1, 0, BadVersionError.code) + struct.pack("!i", BadVersionError.code)
              + struct.pack("!iBi", -1, 1, -1))
    first, second = jute.reply_value(tx, 0, failed, 0)
    assert isinstance(first, RolledBackError) and isinstance(second, BadVersionError)
    assert jute.is_transaction(tx) and not jute.is_transaction(Delete("/b", -1))


def test_watch_event() -> None:
    payload = struct.pack("!iqi", -1, -1, 0) + struct.pack("!ii", 4, 3) + struct.pack("!i", 4) + b"/a/b"
    header, offset = jute.parse_reply(payload)
    assert header.xid == jute.WATCH_XID
    w = jute.parse_watch(payload, offset)
    assert (w.type, w.state, w.path) == (4, 3, "/a/b")
    with pytest.raises(jute.FrameError):
        jute.parse_watch(payload[:-2], offset)
