"""Fuzzing the sans-I/O codec: on arbitrary bytes only ProtocolError may come out, never a crash.

Every decoder in proxy/wire/ sees bytes a client or a backend chose. An IndexError,
struct.error, UnicodeDecodeError, ValueError or OverflowError escaping from one of them would end a
session with a traceback instead of a clean "Malformed packet"; these properties check that it
cannot happen, and that what the encoders write the decoders read back.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzlib import PARAM_TYPES, count, execute_payloads, fuzz, handshake_responses, param_bytes
from proxy.wire import constants as C
from proxy.wire.binary import (BinaryResultConverter, ParamType, decode_param, parse_execute,
                                   parse_prepare_response, parse_send_long_data, prepare_ok, stmt_id_of)
from proxy.wire.handshake import (build_greeting, build_handshake_response, parse_auth_switch, parse_change_user,
                                      parse_greeting, parse_handshake_response)
from proxy.wire.messages import (ColumnDef, decode_text_row, encode_text_row, eof_packet, eof_status, err_packet,
                                     is_eof, ok_packet, parse_column_def, parse_err, parse_ok)
from proxy.wire.packets import (PacketFramer, ProtocolError, frame, lenenc_int, read_lenenc_int, read_lenenc_str,
                                    read_nul_str)
from proxy.wire.response import ResponseScanner

KINDS = ("query", "execute", "field_list", "prepare")


def only_protocol_errors(fn: Callable[..., Any], *args: Any) -> Any:
    """Call fn; a ProtocolError is an accepted answer to bad bytes, anything else fails the test."""
    try:
        return fn(*args)
    except ProtocolError:
        return None


# -- strategies ------------------------------------------------------------------------------------------

def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    """data split at the given (sorted, deduplicated) offsets."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in points:
        out.append(data[prev:p])
        prev = p
    out.append(data[prev:])
    return out


@st.composite
def framed_stream(draw: st.DrawFn, payloads: st.SearchStrategy[bytes]) -> bytes:
    """Well-framed packets with random payloads and sequence ids, maybe with a torn tail."""
    out = b"".join(frame(draw(st.integers(0, 255)), p) for p in draw(st.lists(payloads, max_size=8)))
    if draw(st.integers(0, 3)) == 0:
        out = out[:draw(st.integers(0, len(out)))]
    return out


column_defs = st.builds(
    ColumnDef, name=st.text(max_size=10), type=st.sampled_from(sorted({*C.NUMERIC_TYPES, C.T_VAR_STRING, C.T_BLOB,
                                                                        C.T_DATE, C.T_DATETIME, C.T_TIME, C.T_NULL,
                                                                        C.T_STRING, C.T_BIT, C.T_JSON})),
    charset=st.integers(0, 0xFFFF), length=st.integers(0, 2 ** 32 - 1), flags=st.integers(0, 0xFFFF),
    decimals=st.integers(0, 255), schema=st.text(max_size=6), table=st.text(max_size=6))
row_values = st.lists(st.one_of(st.none(), st.binary(max_size=20), st.binary(min_size=250, max_size=300)),
                      max_size=6)


@st.composite
def plausible_response(draw: st.DrawFn, deprecate_eof: bool) -> list[bytes]:
    """Payloads of a well-formed text response (OK, ERR or result sets, maybe several), before mutation."""
    out: list[bytes] = []
    n_results = draw(st.integers(1, 3))
    for i in range(n_results):
        more = C.STATUS_MORE_RESULTS if i < n_results - 1 else 0
        status = draw(st.integers(0, 0xFFFF)) & ~C.STATUS_MORE_RESULTS | more
        kind = draw(st.integers(0, 4))
        if kind == 0:
            out.append(ok_packet(draw(st.integers(0, 2 ** 64 - 1)), draw(st.integers(0, 2 ** 64 - 1)), status,
                                 draw(st.integers(0, 0xFFFF)), draw(st.binary(max_size=10))))
        elif kind == 1:
            out.append(err_packet(draw(st.integers(0, 0xFFFF)), draw(st.text(max_size=5)), draw(st.text(max_size=20))))
            break
        else:
            cols = draw(st.lists(column_defs, min_size=1, max_size=4))
            out.append(lenenc_int(len(cols)))
            out += [c.encode() for c in cols]
            if not deprecate_eof:
                out.append(eof_packet(0, status))
            for _ in range(draw(st.integers(0, 4))):
                vals = draw(st.lists(st.one_of(st.none(), st.binary(max_size=12)), min_size=len(cols),
                                     max_size=len(cols)))
                out.append(encode_text_row(vals))
            out.append(ok_packet(0, 0, status, 0, header=0xFE) if deprecate_eof else eof_packet(0, status))
    return out


@st.composite
def mutate_payloads(draw: st.DrawFn, payloads: list[bytes]) -> list[bytes]:
    """Flip, cut or insert bytes in a few payloads, or drop/duplicate a packet."""
    out = list(payloads)
    for _ in range(draw(st.integers(0, 3))):
        if not out:
            break
        i = draw(st.integers(0, len(out) - 1))
        p = out[i]
        op = draw(st.integers(0, 4))
        if op == 0 and p:
            j = draw(st.integers(0, len(p) - 1))
            out[i] = p[:j] + bytes((draw(st.integers(0, 255)),)) + p[j + 1:]
        elif op == 1:
            out[i] = p[:draw(st.integers(0, len(p)))]
        elif op == 2:
            j = draw(st.integers(0, len(p)))
            out[i] = p[:j] + draw(st.binary(min_size=1, max_size=4)) + p[j:]
        elif op == 3:
            del out[i]
        else:
            out.insert(i, p)
    return out


# -- packet framing --------------------------------------------------------------------------------------

@fuzz(ci=300, long=7_500)
@given(data=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=5),
       max_payload=st.sampled_from([0, 1, 16, 300, 64 << 20]))
def test_framer_takes_any_bytes_in_any_chunks(data: bytes, cuts: list[int], max_payload: int) -> None:
    """Arbitrary bytes, chunked anyhow: packets or PacketTooBig, never another exception."""
    count("framer: arbitrary bytes")
    f = PacketFramer(max_payload=max_payload)
    got = 0
    try:
        for part in chunks(data, cuts):
            f.feed(part)
            for seq, payload in f.packets():
                assert 0 <= seq <= 255 and len(payload) <= max_payload
                got += 4 + len(payload)
    except ProtocolError:
        return
    assert got + f.buffered == len(data)


@fuzz(ci=150, long=2_500)
@given(payloads=st.lists(st.tuples(st.integers(0, 255), st.binary(max_size=300)), max_size=6),
       cuts=st.lists(st.integers(0, 2000), max_size=6))
def test_framer_round_trips_what_frame_writes(payloads: list[tuple[int, bytes]], cuts: list[int]) -> None:
    """frame() then PacketFramer gives back the same (seq, payload) list, however the bytes arrive."""
    count("framer: round trip")
    data = b"".join(frame(s, p) for s, p in payloads)
    f = PacketFramer()
    out = []
    for part in chunks(data, cuts):
        f.feed(part)
        out.extend(f.packets())
    assert out == payloads and f.buffered == 0


@fuzz(ci=150, long=2_500)
@given(buf=st.binary(max_size=30), pos=st.integers(0, 35))
def test_lenenc_and_nul_readers(buf: bytes, pos: int) -> None:
    """The primitive readers fail with ProtocolError only, and never read past the buffer."""
    count("lenenc/nul readers")
    for fn in (read_lenenc_int, read_lenenc_str, read_nul_str):
        r = only_protocol_errors(fn, buf, pos)
        if r is not None:
            assert r[1] <= len(buf) + 1


@fuzz(ci=100, long=3_000)
@given(n=st.one_of(st.integers(0, 300), st.integers(0, 2 ** 64 - 1)), tail=st.binary(max_size=3))
def test_lenenc_int_round_trip(n: int, tail: bytes) -> None:
    """read_lenenc_int(lenenc_int(n)) == n, for every size class."""
    count("lenenc round trip")
    enc = lenenc_int(n)
    assert read_lenenc_int(enc + tail, 0) == (n, len(enc))


# -- connection phase ------------------------------------------------------------------------------------

@fuzz(ci=300, long=6_000)
@given(payload=st.one_of(st.binary(max_size=200), handshake_responses()))
def test_parse_handshake_response(payload: bytes) -> None:
    """A client's first packet: ProtocolError or a decoded response with a str user, never a crash."""
    count("parse_handshake_response")
    r = only_protocol_errors(parse_handshake_response, payload)
    if r is not None:
        assert isinstance(r.user, str) and isinstance(r.auth_response, bytes)


@fuzz(ci=300, long=6_000)
@given(payload=st.one_of(st.binary(max_size=200).map(lambda b: b"\x11" + b),
                         handshake_responses().map(lambda b: b"\x11" + b[32:])),
       caps=st.integers(0, 2 ** 32 - 1))
def test_parse_change_user(payload: bytes, caps: int) -> None:
    """COM_CHANGE_USER under any capabilities: ProtocolError or a decoded request, never a crash."""
    count("parse_change_user")
    r = only_protocol_errors(parse_change_user, payload, caps)
    if r is not None:
        assert isinstance(r.user, str) and isinstance(r.auth_response, bytes)


@fuzz(ci=100, long=3_000)
@given(user=st.text(max_size=10).filter(lambda s: "\x00" not in s), auth=st.binary(max_size=40),
       db=st.one_of(st.none(), st.text(min_size=1, max_size=8).filter(lambda s: "\x00" not in s)),
       caps=st.integers(0, 2 ** 32 - 1))
def test_handshake_response_round_trip(user: str, auth: bytes, db: str | None, caps: int) -> None:
    """What build_handshake_response writes, parse_handshake_response reads back."""
    count("handshake round trip")
    r = parse_handshake_response(build_handshake_response(caps, user, auth, db))
    assert (r.user, r.auth_response, r.database) == (user, auth, db)


@fuzz(ci=200, long=4_000)
@given(payload=st.one_of(
    st.binary(max_size=120),
    st.builds(lambda v, cid, salt, caps, cut: build_greeting(cid, v, salt, caps)[:cut],
              st.text(max_size=10).filter(lambda s: "\x00" not in s), st.integers(0, 2 ** 32 - 1),
              st.binary(min_size=20, max_size=20), st.integers(0, 2 ** 32 - 1), st.integers(0, 120))))
def test_parse_greeting_and_auth_switch(payload: bytes) -> None:
    """A backend's greeting and auth switch: ProtocolError at worst."""
    count("parse_greeting/auth_switch")
    only_protocol_errors(parse_greeting, payload)
    only_protocol_errors(parse_auth_switch, payload)


# -- OK / ERR / EOF / column definitions / text rows ------------------------------------------------------

@fuzz(ci=300, long=6_000)
@given(payload=st.one_of(st.binary(max_size=80), st.builds(lambda h, b: bytes((h,)) + b,
                                                            st.sampled_from([0x00, 0xFE, 0xFF, 0xFB]),
                                                            st.binary(max_size=40))),
       ncols=st.integers(0, 12))
def test_message_decoders(payload: bytes, ncols: int) -> None:
    """parse_ok/err/column_def and decode_text_row on arbitrary payloads: ProtocolError at worst."""
    count("message decoders")
    only_protocol_errors(parse_ok, payload)
    only_protocol_errors(parse_err, payload)
    only_protocol_errors(parse_column_def, payload)
    row = only_protocol_errors(decode_text_row, payload, ncols)
    if row is not None:
        assert len(row) == ncols
    eof_status(payload)
    is_eof(payload)


@fuzz(ci=150, long=2_500)
@given(values=row_values, col=column_defs)
def test_rows_and_column_defs_round_trip(values: list[bytes | None], col: ColumnDef) -> None:
    """Encoders and decoders agree: text rows and column definitions read back unchanged."""
    count("rows/coldefs round trip")
    assert decode_text_row(encode_text_row(values), len(values)) == values
    back = parse_column_def(col.encode())
    assert (back.name, back.type, back.charset, back.length, back.flags, back.decimals) == \
        (col.name, col.type, col.charset, col.length, col.flags, col.decimals)


# -- the response scanner ---------------------------------------------------------------------------------

def scan_all(sc: ResponseScanner, parts: list[bytes]) -> int:
    """Feed parts to the scanner as a receive loop does; return bytes consumed."""
    buf = bytearray()
    consumed = 0
    for part in parts:
        buf += part
        pos = sc.scan(buf)
        assert 0 <= pos <= len(buf)
        consumed += pos
        del buf[:pos]
        if sc.done:
            break
    return consumed


@fuzz(ci=400, long=7_500)
@given(data=st.one_of(st.binary(max_size=300), framed_stream(st.binary(max_size=40))),
       cuts=st.lists(st.integers(0, 300), max_size=4), kind=st.sampled_from(KINDS), deprecate_eof=st.booleans(),
       collect=st.booleans())
def test_scanner_on_arbitrary_bytes(data: bytes, cuts: list[int], kind: str, deprecate_eof: bool,
                                    collect: bool) -> None:
    """ResponseScanner of every kind and EOF mode: ProtocolError at worst on arbitrary bytes."""
    count("scanner: arbitrary bytes")
    sc = ResponseScanner(deprecate_eof, kind=kind, collect=collect)
    only_protocol_errors(scan_all, sc, chunks(data, cuts))


@fuzz(ci=300, long=6_000)
@given(data=st.data(), deprecate_eof=st.booleans(), collect=st.booleans(), kind=st.sampled_from(("query", "execute")),
       cuts=st.lists(st.integers(0, 3000), max_size=4))
def test_scanner_on_mutated_responses(data: st.DataObject, deprecate_eof: bool, collect: bool, kind: str,
                                      cuts: list[int]) -> None:
    """Well-formed responses, then bit flips, cuts and dropped packets: ProtocolError at worst.

    Unmutated responses are consumed whole and end in the last result's status."""
    count("scanner: mutated responses")
    payloads = data.draw(plausible_response(deprecate_eof))
    mutated = data.draw(mutate_payloads(payloads))
    stream = b"".join(frame(i & 0xFF, p) for i, p in enumerate(mutated))
    sc = ResponseScanner(deprecate_eof, kind=kind, collect=collect)
    consumed = only_protocol_errors(scan_all, sc, chunks(stream, cuts))
    if mutated == payloads:
        assert sc.done and consumed == len(stream)


@st.composite
def prepare_responses(draw: st.DrawFn) -> list[bytes]:
    """COM_STMT_PREPARE answers: PREPARE_OK with random counts, then definitions and EOFs, maybe mutated."""
    ncols, nparams = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    out = [prepare_ok(draw(st.integers(0, 2 ** 32 - 1)), ncols, nparams, draw(st.integers(0, 0xFFFF)))]
    eofs = draw(st.booleans())
    for n in (nparams, ncols):
        if n:
            out += [draw(column_defs).encode() for _ in range(n)]
            if eofs:
                out.append(eof_packet())
    return draw(mutate_payloads(out))


@fuzz(ci=200, long=4_000)
@given(payloads=st.one_of(prepare_responses(), st.lists(st.binary(max_size=30), max_size=6)),
       deprecate_eof=st.booleans())
def test_prepare_response_decoders(payloads: list[bytes], deprecate_eof: bool) -> None:
    """A backend's COM_STMT_PREPARE answer through the scanner and parse_prepare_response."""
    count("prepare response")
    stream = b"".join(frame(i + 1, p) for i, p in enumerate(payloads))
    only_protocol_errors(scan_all, ResponseScanner(deprecate_eof, kind="prepare"), [stream])
    only_protocol_errors(parse_prepare_response, stream, deprecate_eof)


# -- the binary protocol -------------------------------------------------------------------------------

@fuzz(ci=400, long=7_500)
@given(data=st.data(), nparams=st.integers(0, 4), known=st.booleans(), long_data=st.frozensets(st.integers(0, 3)))
def test_parse_execute(data: st.DataObject, nparams: int, known: bool, long_data: frozenset[int]) -> None:
    """COM_STMT_EXECUTE from a client: ProtocolError at worst, whatever the bitmap, types and values."""
    count("parse_execute")
    payload = data.draw(st.one_of(execute_payloads(nparams), st.binary(max_size=60)))
    types = tuple(ParamType(data.draw(st.sampled_from(PARAM_TYPES)), data.draw(st.booleans()))
                  for _ in range(nparams)) if known else None
    only_protocol_errors(parse_execute, payload, nparams, types, long_data)
    only_protocol_errors(stmt_id_of, payload)
    only_protocol_errors(parse_send_long_data, payload)


@fuzz(ci=300, long=5_000)
@given(buf=param_bytes, pos=st.one_of(st.just(0), st.integers(0, 16)), typ=st.sampled_from(PARAM_TYPES),
       unsigned=st.booleans())
def test_decode_param(buf: bytes, pos: int, typ: int, unsigned: bool) -> None:
    """One binary parameter of any type on arbitrary bytes: ProtocolError at worst."""
    count("decode_param")
    only_protocol_errors(decode_param, buf, pos, ParamType(typ, unsigned))


@fuzz(ci=200, long=4_000)
@given(data=st.data(), deprecate_eof=st.booleans(), cuts=st.lists(st.integers(0, 3000), max_size=3))
def test_binary_converter_on_mutated_backend_answers(data: st.DataObject, deprecate_eof: bool,
                                                     cuts: list[int]) -> None:
    """BinaryResultConverter on text responses, mutated or not: ProtocolError at worst, never a crash.

    Its caller (the EXECUTE relay, proxy/session/prepared.py _BinarySink) treats ProtocolError, ValueError and
    struct.error as "this row cannot be converted" and closes the client; anything else (IndexError,
    OverflowError, TypeError...) would end the session with a traceback."""
    count("binary converter")
    payloads = data.draw(st.one_of(plausible_response(deprecate_eof),
                                   st.lists(st.binary(max_size=40), max_size=6)))
    stream = b"".join(frame(i & 0xFF, p) for i, p in enumerate(data.draw(mutate_payloads(payloads))))
    conv = BinaryResultConverter(deprecate_eof)
    try:
        for part in chunks(stream, cuts):
            conv.feed(part)
    except (ProtocolError, ValueError, struct.error):
        pass


@pytest.mark.parametrize("kind", KINDS)
def test_scanner_each_kind_survives_a_fixed_corpus(kind: str) -> None:
    """Hand-picked nasty inputs for every scanner kind (empty packets, 0xFB, 16 MB marker headers)."""
    corpus = [b"", b"\x00\x00\x00\x00", b"\x01\x00\x00\x00\xfb", b"\x01\x00\x00\x00\xfe", b"\x01\x00\x00\x00\xff",
              b"\xff\xff\xff\x00", b"\x01\x00\x00\x01\x00" * 3, b"\x01\x00\x00\x00\x05" + b"\x00\x00\x00\x01" * 6,
              frame(1, b"\x0c" + b"\x00" * 11) + frame(2, b"") + frame(3, b"\xfe")]
    for deprecate_eof in (False, True):
        for data in corpus:
            only_protocol_errors(scan_all, ResponseScanner(deprecate_eof, kind=kind, collect=True), [data])
