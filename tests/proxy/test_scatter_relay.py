"""The streaming concatenation of scattered reads (proxy/exec/scatter_relay.py), byte for byte, without sockets."""

from __future__ import annotations

import pytest

from proxy.wire import constants as C
from proxy.wire.messages import (ColumnDef, ResultSet, decode_text_row, encode_resultset, err_packet,
                                     parse_column_def)
from proxy.wire.packets import PacketFramer, frame
from proxy.exec.scatter_relay import ConcatRelay

COLS = [ColumnDef("id", C.T_LONG, 63, 11), ColumnDef("name", C.T_VAR_STRING, 45, 80)]


class Out:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, b: bytes) -> None:
        self.data += b


def answer(rows: list[list[bytes | None]], deprecate_eof: bool, warnings: int = 0) -> bytes:
    data, _ = encode_resultset(ResultSet(COLS, rows), 1, C.STATUS_AUTOCOMMIT, deprecate_eof, warnings)
    return data


def physical(data: bytes) -> list[bytes]:
    """Split framed bytes into physical packets (what a backend connection hands its sink)."""
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 3], "little")
        out.append(data[pos:pos + 4 + n])
        pos += 4 + n
    return out


def parse(data: bytes, deprecate_eof: bool) -> tuple[list[int], int, list[list[bytes | None]], bytes]:
    """(seqs, column count, rows, last payload) of a relayed answer."""
    f = PacketFramer(max_payload=1 << 30)
    f.feed(bytes(data))
    pkts = list(f.packets())
    seqs, payloads = [s for s, _ in pkts], [p for _, p in pkts]
    ncols = payloads[0][0]
    for p in payloads[1:1 + ncols]:
        parse_column_def(p)
    start = 1 + ncols + (0 if deprecate_eof else 1)
    rows = [decode_text_row(p, ncols) for p in payloads[start:-1]]
    return seqs, ncols, rows, payloads[-1]


@pytest.mark.parametrize("deprecate_eof", [False, True])
def test_interleaved_nodes_make_one_answer(deprecate_eof: bool) -> None:
    out = Out()
    relay = ConcatRelay(out, deprecate_eof, None, lambda: C.STATUS_AUTOCOMMIT | C.STATUS_IN_TRANS)
    a, b = relay.node(), relay.node()
    pa = physical(answer([[b"1", b"a"], [b"3", b"c"]], deprecate_eof, warnings=1))
    pb = physical(answer([[b"2", b"b"], [b"4", None], [b"6", b"f"]], deprecate_eof, warnings=2))
    # b's header completes first; a's rows and b's rows interleave
    for chunk in pb[:4 if not deprecate_eof else 3]:
        b.write(chunk)
    for chunk in pa:
        a.write(chunk)
    for chunk in pb[4 if not deprecate_eof else 3:]:
        b.write(chunk)
    relay.finish(3)
    seqs, ncols, rows, last = parse(bytes(out.data), deprecate_eof)
    assert ncols == 2
    assert seqs == list(range(1, len(seqs) + 1))
    assert sorted(rows, key=lambda r: r[0]) == [[b"1", b"a"], [b"2", b"b"], [b"3", b"c"], [b"4", None], [b"6", b"f"]]
    assert last[0] == 0xFE
    assert int.from_bytes(last[3:5], "little") & C.STATUS_IN_TRANS  # EOF and OK-as-EOF: status at 3


def test_limit_stops_forwarding_rows() -> None:
    out = Out()
    relay = ConcatRelay(out, True, 3, lambda: 0)
    for rows in ([[b"1", b"x"], [b"2", b"y"]], [[b"3", b"z"], [b"4", b"w"]]):
        n = relay.node()
        for chunk in physical(answer(rows, True)):
            n.write(chunk)
    relay.finish(0)
    _, _, rows, _ = parse(bytes(out.data), True)
    assert len(rows) == 3


def test_error_after_rows_ends_the_answer() -> None:
    out = Out()
    relay = ConcatRelay(out, False, None, lambda: 0)
    a, b = relay.node(), relay.node()
    for chunk in physical(answer([[b"1", b"a"]], False)):
        a.write(chunk)
    b.write(frame(1, err_packet(1146, "42S02", "Table 'db2.t' doesn't exist")))
    relay.finish(0)
    f = PacketFramer()
    f.feed(bytes(out.data))
    pkts = [p for _, p in f.packets()]
    assert pkts[-1][:1] == b"\xff" and b"doesn't exist" in pkts[-1]
    assert sum(1 for p in pkts if p[:1] == b"\xfe") == 1  # the column EOF only; no end-of-rows after the ERR


def test_error_before_any_header_is_a_clean_err() -> None:
    out = Out()
    relay = ConcatRelay(out, True, None, lambda: 0)
    a, b = relay.node(), relay.node()
    a.write(frame(1, err_packet(1054, "42S22", "Unknown column 'x'")))
    for chunk in physical(answer([[b"1", b"a"]], True)):
        b.write(chunk)
    relay.finish(0)
    assert bytes(out.data) == frame(1, err_packet(1054, "42S22", "Unknown column 'x'"))


def test_rows_over_16_mb_keep_their_pieces_in_order() -> None:
    big = b"y" * (0xFFFFFF + 5)
    out = Out()
    relay = ConcatRelay(out, True, None, lambda: 0)
    a = relay.node()
    for chunk in physical(answer([[b"1", big], [b"2", b"s"]], True)):
        a.write(chunk)
    relay.finish(0)
    seqs, _, rows, _ = parse(bytes(out.data), True)
    assert rows == [[b"1", big], [b"2", b"s"]]
    f = PacketFramer(max_payload=1 << 30)
    f.feed(bytes(out.data))
    assert len(list(f.packets())) == 6


@pytest.mark.parametrize("deprecate_eof", [False, True])
@pytest.mark.parametrize("limit", [None, 0, 1, 299, 450, 601])
def test_whole_answers_in_one_write_keep_every_row_and_sequence(deprecate_eof: bool, limit: int | None) -> None:
    """A backend read holds hundreds of rows (sequence ids wrap past 255); the LIMIT may cut inside one read."""
    out = Out()
    relay = ConcatRelay(out, deprecate_eof, limit, lambda: 0)
    sent = []
    for base in (0, 1000):
        rows = [[str(base + i).encode(), None if i % 7 == 0 else b"v" * (i % 40)] for i in range(300)]
        sent += rows
        data = answer(rows, deprecate_eof)
        relay.node().write(data)
    relay.finish(0)
    f = PacketFramer(max_payload=1 << 30)
    f.feed(bytes(out.data))
    seqs = [s for s, _ in f.packets()]
    assert seqs == [(i + 1) & 0xFF for i in range(len(seqs))]
    _, _, rows, last = parse(bytes(out.data), deprecate_eof)
    assert rows == sent[:limit]
    assert last[0] == 0xFE
