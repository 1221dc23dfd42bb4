"""Coverage-guided fuzzing of the sans-I/O codec with atheris (libFuzzer), on demand, not in CI.

    .venv/bin/pip install atheris
    .venv/bin/python tests/fuzz/atheris_codec.py -atheris_runs=100000

Every decoder gets the fuzzer's bytes; only ProtocolError may come out (the binary result converter
may also say ValueError/struct.error, which its caller handles). Any other exception is a crash:
libFuzzer prints it and writes the input as crash-<sha1> (in the current directory, or where
-artifact_prefix= says) to replay with `python tests/fuzz/atheris_codec.py crash-<sha1>`.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import atheris

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

with atheris.instrument_imports():
    from proxy.wire import constants as C
    from proxy.wire.binary import (BinaryResultConverter, ParamType, decode_param, parse_execute,
                                       parse_prepare_response, parse_send_long_data, stmt_id_of)
    from proxy.wire.handshake import parse_auth_switch, parse_greeting, parse_handshake_response
    from proxy.wire.messages import decode_text_row, parse_column_def, parse_err, parse_ok
    from proxy.wire.packets import PacketFramer, ProtocolError, read_lenenc_int, read_lenenc_str
    from proxy.wire.response import ResponseScanner

KINDS = ("query", "execute", "field_list", "prepare")
TYPES = (C.T_TINY, C.T_SHORT, C.T_LONG, C.T_LONGLONG, C.T_INT24, C.T_YEAR, C.T_FLOAT, C.T_DOUBLE, C.T_NULL,
         C.T_DATE, C.T_DATETIME, C.T_TIMESTAMP, C.T_TIME, C.T_NEWDECIMAL, C.T_VAR_STRING, C.T_BLOB, C.T_BIT)
TARGETS = 10


def _chunks(fdp: atheris.FuzzedDataProvider, data: bytes) -> list[bytes]:
    """data cut at up to three fuzzer-chosen points."""
    cuts = sorted(fdp.ConsumeIntInRange(0, len(data)) for _ in range(fdp.ConsumeIntInRange(0, 3)))
    out, prev = [], 0
    for c in cuts:
        out.append(data[prev:c])
        prev = c
    return out + [data[prev:]]


def _scan(sc: ResponseScanner, parts: list[bytes]) -> None:
    buf = bytearray()
    for part in parts:
        buf += part
        pos = sc.scan(buf)
        assert 0 <= pos <= len(buf)
        del buf[:pos]
        if sc.done:
            return


def one_input(data: bytes) -> None:
    """One fuzz case: the first bytes pick a decoder and its options, the rest is its input."""
    fdp = atheris.FuzzedDataProvider(data)
    target = fdp.ConsumeIntInRange(0, TARGETS - 1)
    flag = fdp.ConsumeBool()
    small = fdp.ConsumeIntInRange(0, 7)
    if target == 8:
        types = tuple(ParamType(TYPES[fdp.ConsumeIntInRange(0, len(TYPES) - 1)], fdp.ConsumeBool())
                      for _ in range(small))
    parts_src = fdp.ConsumeIntInRange(0, 1)
    rest = fdp.ConsumeBytes(fdp.remaining_bytes())
    try:
        if target == 0:
            f = PacketFramer(max_payload=(1 << small * 3) if flag else 64 << 20)
            for part in [rest[:len(rest) // 2], rest[len(rest) // 2:]] if parts_src else [rest]:
                f.feed(part)
                for seq, payload in f.packets():
                    assert 0 <= seq <= 255
        elif target == 1:
            sc = ResponseScanner(flag, kind=KINDS[small % 4], collect=bool(small & 4))
            _scan(sc, [rest[:len(rest) // 3], rest[len(rest) // 3:]] if parts_src else [rest])
        elif target == 2:
            r = parse_handshake_response(rest)
            assert isinstance(r.user, str)
        elif target == 3:
            parse_greeting(rest)
            parse_auth_switch(rest)
        elif target == 4:
            parse_ok(rest) if flag else parse_err(rest)
        elif target == 5:
            parse_column_def(rest)
        elif target == 6:
            row = decode_text_row(rest, small)
            assert len(row) == small
        elif target == 7:
            read_lenenc_str(rest, small) if flag else read_lenenc_int(rest, small)
            stmt_id_of(rest)
            parse_send_long_data(rest)
        elif target == 8:
            parse_execute(rest, small, types if flag else None, frozenset({1}) if parts_src else frozenset())
            decode_param(rest, 0, types[0] if types else ParamType(C.T_TIME))
        else:
            parse_prepare_response(rest, flag)
            try:
                conv = BinaryResultConverter(flag)
                conv.feed(rest[:len(rest) // 2])
                conv.feed(rest[len(rest) // 2:])
            except (ValueError, struct.error):
                pass  # "cannot convert this row": the EXECUTE relay closes the client (proxy/session/prepared.py)
    except ProtocolError:
        pass


def main() -> None:
    """Run libFuzzer with the given arguments (e.g. -atheris_runs=100000, a corpus directory)."""
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
