"""Byte-level tests of packet framing and length-encoded values (proxy/wire/packets.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire.constants import MAX_PACKET
from proxy.wire.packets import (
    PacketFramer,
    PacketTooBig,
    ProtocolError,
    frame,
    lenenc_int,
    lenenc_str,
    packets_seq_after,
    read_lenenc_int,
    read_lenenc_str,
    read_nul_str,
)


def _h(s: str) -> bytes:
    return bytes.fromhex(s)


def _headers(data: bytes) -> list[tuple[int, int]]:
    """(length, seq) of every physical packet in data, which must hold whole packets only."""
    out = []
    pos = 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 3], "little")
        out.append((n, data[pos + 3]))
        pos += 4 + n
    assert pos == len(data)
    return out


# -- length-encoded integers ---------------------------------------------------------------------

LENENC_INT_CASES = [
    (0, "00"),
    (1, "01"),
    (250, "fa"),
    (251, "fc fb 00"),
    (252, "fc fc 00"),
    (255, "fc ff 00"),
    (256, "fc 00 01"),
    (0xFFFF, "fc ff ff"),
    (0x10000, "fd 00 00 01"),
    (0x123456, "fd 56 34 12"),
    (0xFFFFFF, "fd ff ff ff"),
    (0x1000000, "fe 00 00 00 01 00 00 00 00"),
    (0x0102030405060708, "fe 08 07 06 05 04 03 02 01"),
    (2**64 - 1, "fe ff ff ff ff ff ff ff ff"),
]


@pytest.mark.parametrize("n,hexbytes", LENENC_INT_CASES)
def test_lenenc_int_encodes_each_boundary(n: int, hexbytes: str) -> None:
    assert lenenc_int(n) == _h(hexbytes)


@pytest.mark.parametrize("n,hexbytes", LENENC_INT_CASES)
def test_read_lenenc_int_decodes_each_boundary(n: int, hexbytes: str) -> None:
    raw = _h(hexbytes)
    assert read_lenenc_int(raw, 0) == (n, len(raw))
    # at an offset, with trailing bytes that must be left alone
    buf = b"\xaa\xbb" + raw + b"\xcc"
    assert read_lenenc_int(buf, 2) == (n, 2 + len(raw))


@pytest.mark.parametrize("n,hexbytes", LENENC_INT_CASES)
def test_read_lenenc_int_accepts_bytearray_and_memoryview(n: int, hexbytes: str) -> None:
    raw = _h(hexbytes)
    assert read_lenenc_int(bytearray(raw), 0) == (n, len(raw))
    assert read_lenenc_int(memoryview(raw), 0) == (n, len(raw))


def test_lenenc_int_sizes() -> None:
    assert [len(lenenc_int(n)) for n in (250, 251, 0xFFFF, 0x10000, 0xFFFFFF, 0x1000000)] == [1, 3, 3, 4, 4, 9]


def test_read_lenenc_int_null_marker() -> None:
    assert read_lenenc_int(b"\xfb", 0) == (None, 1)
    assert read_lenenc_int(b"\x01\xfb\x05", 1) == (None, 2)


def test_read_lenenc_int_rejects_0xff() -> None:
    # 0xFF is the ERR header, never the start of a length-encoded integer
    with pytest.raises(ProtocolError):
        read_lenenc_int(b"\xff\x00\x00\x00\x00\x00\x00\x00\x00", 0)


@pytest.mark.parametrize("n,hexbytes", [c for c in LENENC_INT_CASES if c[0] >= 251])
def test_read_lenenc_int_truncated(n: int, hexbytes: str) -> None:
    raw = _h(hexbytes)
    for cut in range(len(raw)):
        with pytest.raises(ProtocolError):
            read_lenenc_int(raw[:cut], 0)


def test_read_lenenc_int_past_the_end() -> None:
    with pytest.raises(ProtocolError):
        read_lenenc_int(b"\x05", 1)
    with pytest.raises(ProtocolError):
        read_lenenc_int(b"", 0)


# -- length-encoded strings ---------------------------------------------------------------------

@pytest.mark.parametrize("size,prefix", [
    (0, "00"),
    (1, "01"),
    (250, "fa"),
    (251, "fc fb 00"),
    (0xFFFF, "fc ff ff"),
    (0x10000, "fd 00 00 01"),
])
def test_lenenc_str_boundaries(size: int, prefix: str) -> None:
    value = bytes(i & 0xFF for i in range(size))
    enc = lenenc_str(value)
    assert enc == _h(prefix) + value
    assert read_lenenc_str(enc, 0) == (value, len(enc))
    assert read_lenenc_str(b"\x00" + enc + b"\x01", 1) == (value, 1 + len(enc))


def test_lenenc_str_16mb_boundary() -> None:
    value = b"v" * 0xFFFFFF
    enc = lenenc_str(value)
    assert enc[:4] == _h("fd ff ff ff") and len(enc) == 4 + 0xFFFFFF
    assert read_lenenc_str(enc, 0) == (value, len(enc))
    value = b"w" * 0x1000000
    enc = lenenc_str(value)
    assert enc[:9] == _h("fe 00 00 00 01 00 00 00 00") and len(enc) == 9 + 0x1000000
    assert read_lenenc_str(enc, 0) == (value, len(enc))


def test_read_lenenc_str_null() -> None:
    assert read_lenenc_str(b"\xfb", 0) == (None, 1)


def test_read_lenenc_str_returns_bytes_from_views() -> None:
    v, pos = read_lenenc_str(memoryview(b"\x03abcd"), 0)
    assert v == b"abc" and type(v) is bytes and pos == 4
    v, pos = read_lenenc_str(bytearray(b"\x03abcd"), 0)
    assert v == b"abc" and type(v) is bytes and pos == 4


def test_read_lenenc_str_truncated() -> None:
    enc = lenenc_str(b"x" * 300)
    for cut in range(len(enc)):
        with pytest.raises(ProtocolError):
            read_lenenc_str(enc[:cut], 0)
    with pytest.raises(ProtocolError):
        read_lenenc_str(b"\x05abcd", 0)


# -- NUL-terminated strings ----------------------------------------------------------------------

def test_read_nul_str() -> None:
    assert read_nul_str(b"root\x00rest", 0) == (b"root", 5)
    assert read_nul_str(b"xx\x00\x00", 2) == (b"", 3)
    v, pos = read_nul_str(bytearray(b"a\x00"), 0)
    assert v == b"a" and type(v) is bytes and pos == 2
    with pytest.raises(ProtocolError):
        read_nul_str(b"no terminator", 0)
    with pytest.raises(ProtocolError):
        read_nul_str(b"a\x00b", 2)


# -- frame() -------------------------------------------------------------------------------------

def test_frame_com_query_from_the_docs() -> None:
    # COM_QUERY "select @@version_comment limit 1", as in the MySQL protocol documentation
    assert frame(0, b"\x03select @@version_comment limit 1") == _h(
        "21 00 00 00 03 73 65 6c 65 63 74 20 40 40 76 65 72 73 69 6f 6e 5f 63 6f 6d 6d 65 6e 74"
        " 20 6c 69 6d 69 74 20 31")


def test_frame_ok_from_the_docs() -> None:
    assert frame(2, _h("00 00 00 02 00 00 00")) == _h("07 00 00 02 00 00 00 02 00 00 00")


def test_frame_header_bytes() -> None:
    assert frame(0, b"") == _h("00 00 00 00")
    assert frame(5, b"") == _h("00 00 00 05")
    assert frame(0xFF, b"a") == _h("01 00 00 ff 61")
    assert frame(0x100, b"a") == _h("01 00 00 00 61")  # the sequence id wraps
    assert frame(0x1FE, b"a") == _h("01 00 00 fe 61")
    assert frame(1, b"\x00" * 0x123456)[:4] == _h("56 34 12 01")


def test_frame_just_below_the_split() -> None:
    payload = b"p" * (MAX_PACKET - 1)
    out = frame(3, payload)
    assert out[:4] == _h("fe ff ff 03")
    assert out[4:] == payload
    assert _headers(out) == [(MAX_PACKET - 1, 3)]


def test_frame_exactly_max_is_followed_by_an_empty_packet() -> None:
    payload = bytes(range(256)) * (MAX_PACKET // 256) + b"\x01" * (MAX_PACKET % 256)
    assert len(payload) == MAX_PACKET
    out = frame(7, payload)
    assert out[:4] == _h("ff ff ff 07")
    assert out[4:4 + MAX_PACKET] == payload
    assert out[4 + MAX_PACKET:] == _h("00 00 00 08")
    assert len(out) == MAX_PACKET + 8


def test_frame_one_byte_over() -> None:
    payload = b"a" * MAX_PACKET + b"b"
    out = frame(0, payload)
    assert _headers(out) == [(MAX_PACKET, 0), (1, 1)]
    assert out[4 + MAX_PACKET:] == _h("01 00 00 01 62")


def test_frame_two_full_chunks_and_an_empty_one() -> None:
    payload = b"c" * (2 * MAX_PACKET)
    out = frame(0, payload)
    assert _headers(out) == [(MAX_PACKET, 0), (MAX_PACKET, 1), (0, 2)]


def test_frame_split_wraps_the_sequence_id() -> None:
    out = frame(0xFF, b"d" * (MAX_PACKET + 10))
    assert _headers(out) == [(MAX_PACKET, 0xFF), (10, 0x00)]


@pytest.mark.parametrize("size", [0, 1, MAX_PACKET - 1, MAX_PACKET, MAX_PACKET + 1, 2 * MAX_PACKET,
                                  2 * MAX_PACKET + 5])
@pytest.mark.parametrize("seq", [0, 1, 0xFE, 0xFF])
def test_packets_seq_after_matches_frame(size: int, seq: int) -> None:
    headers = [(size, seq)] if size < MAX_PACKET else None
    if headers is None:
        headers = _headers(frame(seq, bytes(size)))
    assert packets_seq_after(seq, size) == (headers[-1][1] + 1) & 0xFF
    assert packets_seq_after(seq, size) == (seq + len(headers)) & 0xFF


# -- PacketFramer --------------------------------------------------------------------------------

def _drain(f: PacketFramer) -> list[tuple[int, bytes]]:
    return list(f.packets())


def test_framer_single_packet() -> None:
    f = PacketFramer()
    f.feed(_h("07 00 00 02 00 00 00 02 00 00 00"))
    assert _drain(f) == [(2, _h("00 00 00 02 00 00 00"))]
    assert f.buffered == 0
    assert _drain(f) == []


def test_framer_empty_packet() -> None:
    f = PacketFramer()
    f.feed(_h("00 00 00 09"))
    assert _drain(f) == [(9, b"")]


def test_framer_byte_at_a_time() -> None:
    stream = frame(0, b"\x03SELECT 1") + frame(1, b"") + frame(2, b"x" * 300)
    f = PacketFramer()
    got = []
    for i in range(len(stream)):
        f.feed(stream[i:i + 1])
        got += _drain(f)
        assert f.buffered == (i + 1) - sum(4 + len(p) for _, p in got)
    assert got == [(0, b"\x03SELECT 1"), (1, b""), (2, b"x" * 300)]
    assert f.buffered == 0


def test_framer_several_packets_in_one_feed_and_a_partial_tail() -> None:
    stream = frame(1, b"one") + frame(2, b"two") + frame(3, b"three")
    f = PacketFramer()
    f.feed(stream + _h("05 00 00 04 ab"))
    assert _drain(f) == [(1, b"one"), (2, b"two"), (3, b"three")]
    assert f.buffered == 5
    f.feed(_h("cd ef"))
    assert _drain(f) == []
    f.feed(_h("01 02"))
    assert _drain(f) == [(4, _h("ab cd ef 01 02"))]
    assert f.buffered == 0


def test_framer_partial_header() -> None:
    f = PacketFramer()
    f.feed(b"\x03\x00")
    assert _drain(f) == []
    f.feed(b"\x00\x00abc")
    assert _drain(f) == [(0, b"abc")]


def test_framer_stopping_early_keeps_the_rest() -> None:
    f = PacketFramer()
    f.feed(frame(0, b"a") + frame(1, b"b") + frame(2, b"c"))
    it = f.packets()
    assert next(it) == (0, b"a")
    it.close()
    assert _drain(f) == [(1, b"b"), (2, b"c")]


def test_framer_feed_accepts_views() -> None:
    f = PacketFramer()
    f.feed(memoryview(frame(0, b"abc")))
    f.feed(bytearray(frame(1, b"d")))
    assert _drain(f) == [(0, b"abc"), (1, b"d")]


def test_framer_joins_exactly_max_payload() -> None:
    payload = b"\x5a" * MAX_PACKET
    f = PacketFramer()
    f.feed(frame(4, payload))
    got = _drain(f)
    assert len(got) == 1
    assert got[0][0] == 4 and got[0][1] == payload
    assert f.buffered == 0


def test_framer_joins_16mb_plus_and_reports_the_first_seq() -> None:
    payload = bytes(range(251)) * ((2 * MAX_PACKET + 1000) // 251)
    assert len(payload) > 2 * MAX_PACKET
    stream = frame(0xFE, payload) + frame(1, b"after")
    f = PacketFramer()
    got = []
    step = 1 << 20
    for i in range(0, len(stream), step):
        f.feed(stream[i:i + step])
        got += _drain(f)
    assert len(got) == 2
    assert got[0][0] == 0xFE and got[0][1] == payload
    assert got[1] == (1, b"after")
    assert f.buffered == 0


def test_framer_continuation_headers_byte_by_byte() -> None:
    payload = b"q" * (MAX_PACKET + 3)
    stream = frame(0, payload)
    f = PacketFramer()
    # first header and first chunk, then the second header and chunk byte by byte
    f.feed(stream[:4 + MAX_PACKET])
    assert _drain(f) == []
    assert f.buffered == MAX_PACKET
    for i in range(4 + MAX_PACKET, len(stream)):
        assert _drain(f) == []
        f.feed(stream[i:i + 1])
    assert _drain(f) == [(0, payload)]


def test_framer_max_payload_limit() -> None:
    f = PacketFramer(max_payload=100)
    f.feed(frame(0, b"x" * 100))
    assert _drain(f) == [(0, b"x" * 100)]
    with pytest.raises(PacketTooBig):
        f.feed(frame(1, b"x" * 101)[:4])  # the header alone is enough to refuse it, before the payload


def test_framer_packet_too_big_answers_after_the_header_that_announced_it() -> None:
    f = PacketFramer(max_payload=100)
    with pytest.raises(PacketTooBig) as ei:
        f.feed(frame(1, b"x" * 101)[:4])   # a login packet: the refusal is sequence 2
    assert ei.value.answer_seq == 2
    assert ei.value.packet() == frame(2, b"\xff\x81\x04#08S01Got a packet bigger than 'max_allowed_packet' bytes")
    f = PacketFramer(max_payload=MAX_PACKET + 10)
    f.feed(frame(0, b"y" * (MAX_PACKET + 11))[:4 + MAX_PACKET + 4])   # the continuation (sequence 1) goes over
    with pytest.raises(PacketTooBig) as ei:
        _drain(f)
    assert ei.value.answer_seq == 2
    with pytest.raises(PacketTooBig) as ei:
        PacketFramer(max_payload=10).feed(_h("0b 00 00 ff"))
    assert ei.value.answer_seq == 0


def test_framer_packet_too_big_is_a_protocol_error() -> None:
    assert issubclass(PacketTooBig, ProtocolError)


def test_framer_limit_applies_to_the_joined_packet() -> None:
    f = PacketFramer(max_payload=MAX_PACKET + 10)
    f.feed(frame(0, b"y" * (MAX_PACKET + 10)))
    assert _drain(f) == [(0, b"y" * (MAX_PACKET + 10))]
    f = PacketFramer(max_payload=MAX_PACKET + 10)
    stream = frame(0, b"y" * (MAX_PACKET + 11))
    f.feed(stream[:4 + MAX_PACKET + 4])  # the continuation header says 11: over the limit
    with pytest.raises(PacketTooBig):
        _drain(f)


def test_framer_limit_below_one_chunk() -> None:
    f = PacketFramer(max_payload=1000)
    with pytest.raises(PacketTooBig):
        f.feed(_h("ff ff ff 00"))


def test_framer_exact_max_payload_limit_for_a_full_chunk() -> None:
    f = PacketFramer(max_payload=MAX_PACKET)
    f.feed(frame(0, b"z" * MAX_PACKET))
    assert _drain(f) == [(0, b"z" * MAX_PACKET)]


# -- properties ----------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=600), max_size=12), st.integers(0, 255), st.data())
def test_framed_payloads_come_back_in_random_chunks(payloads: list[bytes], seq0: int,
                                                   data: st.DataObject) -> None:
    stream = b""
    expected = []
    seq = seq0
    for p in payloads:
        stream += frame(seq, p)
        expected.append((seq & 0xFF, p))
        seq = packets_seq_after(seq, len(p))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    f = PacketFramer()
    got = []
    last = 0
    for c in cuts + [len(stream)]:
        f.feed(stream[last:c])
        last = c
        got += _drain(f)
    assert got == expected
    assert f.buffered == 0


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**64 - 1))
def test_lenenc_int_round_trip(n: int) -> None:
    enc = lenenc_int(n)
    assert read_lenenc_int(enc + b"tail", 0) == (n, len(enc))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=70000))
def test_lenenc_str_round_trip(value: bytes) -> None:
    enc = lenenc_str(value)
    assert read_lenenc_str(enc, 0) == (value, len(enc))


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=40), st.integers(0, 40))
def test_readers_raise_only_protocol_error(buf: bytes, pos: int) -> None:
    for fn in (read_lenenc_int, read_lenenc_str, read_nul_str):
        try:
            fn(buf, pos)
        except ProtocolError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 300))
def test_framer_on_random_bytes_raises_only_packet_too_big(buf: bytes, limit: int) -> None:
    f = PacketFramer(max_payload=limit)
    try:
        f.feed(buf)
        for seq, payload in f.packets():
            assert 0 <= seq <= 255 and len(payload) <= limit
    except PacketTooBig:
        pass


def test_take_rest_hands_over_the_bytes_after_the_last_packet() -> None:
    f = PacketFramer()
    f.feed(frame(1, b"x" * 32) + b"\x16\x03\x01TLS")
    assert list(f.packets()) == [(1, b"x" * 32)]
    assert f.take_rest() == b"\x16\x03\x01TLS"
    assert f.buffered == 0 and f.take_rest() == b""
