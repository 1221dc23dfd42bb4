"""The peer channel's framing (zk/wire.py), byte for byte, without sockets."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zk import wire


def test_a_frame_is_a_big_endian_length_then_compact_json():
    assert wire.encode({"t": "reply", "id": 7, "ok": True}) == b'\x00\x00\x00\x1e{"t":"reply","id":7,"ok":true}'


def test_non_ascii_travels_as_utf8():
    frame = wire.encode({"t": "x", "s": "é"})
    assert frame[4:] == '{"t":"x","s":"é"}'.encode()
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4


def test_messages_split_anywhere_come_out_whole_and_in_order():
    stream = wire.encode(wire.hello("c1", "dble-1", "tok")) + wire.encode(wire.reply(3, None, "later", 9))
    for cut in range(len(stream) + 1):
        d = wire.FrameDecoder()
        got = d.feed(stream[:cut]) + d.feed(stream[cut:])
        assert got == [{"t": "hello", "cluster": "c1", "from": "dble-1", "token": "tok"},
                       {"t": "reply", "id": 3, "ok": None, "message": "later", "meta_version": 9}]
        assert d.pending == 0


def test_byte_by_byte():
    msg = wire.step(1, "/dble/c/ddl/s.t", 42, '{"status":"INIT"}', {"dn1": {"t": "CREATE TABLE t (id int)"}})
    d = wire.FrameDecoder()
    out = []
    for b in wire.encode(msg):
        out += d.feed(bytes([b]))
    assert out == [msg]


def test_an_oversized_length_is_refused_before_any_body_arrives():
    d = wire.FrameDecoder(max_frame=100)
    with pytest.raises(wire.WireError, match="over the 100-byte limit"):
        d.feed(b"\x00\x00\x00\x65")


@pytest.mark.parametrize("body", [b"\xff\xfe", b"not json", b"[1,2]", b'{"no_type":1}', b'{"t":5}'])
def test_a_frame_that_is_not_a_typed_json_object_is_refused(body):
    with pytest.raises(wire.WireError):
        wire.FrameDecoder().feed(len(body).to_bytes(4, "big") + body)


def test_encode_refuses_what_the_peer_would_refuse():
    with pytest.raises(wire.WireError):
        wire.encode({"t": "x", "s": "a" * (wire.MAX_FRAME + 1)})


@given(st.lists(st.dictionaries(st.text(max_size=5), st.one_of(st.none(), st.integers(), st.text(max_size=20)),
                                max_size=4), max_size=5), st.integers(min_value=1, max_value=7))
def test_any_messages_round_trip_in_any_chunking(dicts, chunk):
    msgs = [{**d, "t": "m"} for d in dicts]
    stream = b"".join(wire.encode(m) for m in msgs)
    d = wire.FrameDecoder()
    out = []
    for i in range(0, len(stream), chunk):
        out += d.feed(stream[i:i + chunk])
    assert out == [json.loads(json.dumps(m)) for m in msgs]
