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
    stream = wire.encode({"t": "challenge", "nonce": "ab"}) + wire.encode(wire.reply(3, None, "later", 9))
    for cut in range(len(stream) + 1):
        d = wire.FrameDecoder()
        got = d.feed(stream[:cut]) + d.feed(stream[cut:])
        assert got == [{"t": "challenge", "nonce": "ab"},
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


# --- authentication: challenge, hello, sealed frames ----------------------------------------------

KEY = b"k" * 32


def _pair(key: bytes = KEY) -> tuple[wire.Sealer, wire.Sealer | None]:
    challenge = wire.challenge()
    hello, caller = wire.hello(key, "c1", "dble-1", challenge)
    return caller, wire.check_hello(KEY, "c1", challenge, hello)


def test_sealed_frames_open_in_order_both_ways():
    caller, server = _pair()
    assert server is not None
    d = wire.FrameDecoder()
    for i in range(3):
        assert server.open(d.frames(caller.seal(wire.dump(wire.step(i, "/p", 7, "{}", None))))[0])["id"] == i
        assert caller.open(d.frames(server.seal(wire.dump(wire.reply(i, True))))[0])["id"] == i


def test_a_hello_with_another_key_another_cluster_or_another_challenge_is_refused():
    assert _pair(b"x" * 32)[1] is None
    challenge = wire.challenge()
    hello, _ = wire.hello(KEY, "c1", "dble-1", challenge)
    assert wire.check_hello(KEY, "c2", challenge, {**hello, "cluster": "c2"}) is None
    assert wire.check_hello(KEY, "c1", wire.challenge(), hello) is None   # replayed on a new connection
    assert wire.check_hello(KEY, "c1", challenge, {**hello, "from": "dble-2"}) is None
    assert wire.check_hello(KEY, "c1", challenge, hello) is not None


@pytest.mark.parametrize("attack", ["tamper", "replay", "reflect", "short"])
def test_a_frame_altered_replayed_or_reflected_fails_authentication(attack):
    caller, server = _pair()
    assert server is not None
    d = wire.FrameDecoder()
    frame = d.frames(caller.seal(wire.dump(wire.step(1, "/p", 7, "{}", None))))[0]
    if attack == "tamper":
        frame = frame[:-3] + b"8" + frame[-2:]
    elif attack == "replay":
        server.open(frame)
    elif attack == "reflect":   # the caller's own frame sent back to it as if from the server
        with pytest.raises(wire.WireError, match="authentication"):
            caller.open(frame)
        return
    else:
        frame = frame[:10]
    with pytest.raises(wire.WireError, match="authentication"):
        server.open(frame)
