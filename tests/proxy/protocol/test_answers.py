"""Where a small text answer ends (proxy/wire/answers.py): what it accepts is what the ResponseScanner
reads, and the backend relays several pipelined answers of one read each to its own client.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meta.config import DbGroupConfig
from proxy.backends.backend import BackendConnection, whole_text_answer
from proxy.wire import answers
from proxy.wire import constants as C
from proxy.wire.constants import STATUS_MORE_RESULTS
from proxy.wire.messages import ColumnDef, ResultSet, encode_resultset, err_packet, ok_packet
from proxy.wire.packets import frame, lenenc_int, lenenc_str
from proxy.wire.response import ResponseScanner


def _coldef(name: bytes) -> bytes:
    return (lenenc_str(b"def") + lenenc_str(b"db") + lenenc_str(b"t") + lenenc_str(b"t") + lenenc_str(name)
            + lenenc_str(name) + b"\x0c\x21\x00\xff\x00\x00\x00\xfd\x00\x00\x00\x00")


_status = st.integers(0, 0xFFFF)
_warnings = st.integers(0, 0xFFFF)


@st.composite
def _resultset(draw: st.DrawFn, deprecate_eof: bool) -> bytes:
    ncols = draw(st.integers(1, 3))
    rows = draw(st.lists(st.lists(st.one_of(st.none(), st.one_of(st.binary(max_size=30), st.just(b"z" * 260))), min_size=ncols,
                                  max_size=ncols), max_size=4))
    out = [frame(1, lenenc_int(ncols))] + [frame(2 + i, _coldef(b"c%d" % i)) for i in range(ncols)]
    if not deprecate_eof:
        out.append(frame(9, b"\xfe\x00\x00\x02\x00"))
    out += [frame(10, b"".join(b"\xfb" if v is None else lenenc_str(v) for v in row)) for row in rows]
    status, w = draw(_status).to_bytes(2, "little"), draw(_warnings).to_bytes(2, "little")
    out.append(frame(20, b"\xfe\x00\x00" + status + w if deprecate_eof else b"\xfe" + w + status))
    return b"".join(out)


@st.composite
def _ok(draw: st.DrawFn) -> bytes:
    return frame(1, b"\x00" + lenenc_int(draw(st.integers(0, 2 ** 40))) + lenenc_int(draw(st.integers(0, 2 ** 40)))
                 + draw(_status).to_bytes(2, "little") + draw(_warnings).to_bytes(2, "little")
                 + draw(st.binary(max_size=20)))


@st.composite
def _reads(draw: st.DrawFn) -> tuple[bytes, int, int, bool]:
    """Answers one after another (some cut, some garbage), a start and a stop offset."""
    de = draw(st.booleans())
    parts = draw(st.lists(st.one_of(_resultset(de), _ok(), st.just(frame(1, b"\xff\x15\x04#42000no")),
                                    st.binary(max_size=12)), min_size=1, max_size=4))
    data = b"".join(parts)
    data = data[:draw(st.one_of(st.just(len(data)), st.integers(0, len(data))))]
    pos = draw(st.one_of(st.just(0), st.integers(0, len(data))))
    stop = draw(st.one_of(st.just(len(data) + 1), st.integers(0, len(data) + 1)))
    return data, pos, stop, de


@settings(max_examples=300, deadline=None)
@given(_reads())
def test_what_is_accepted_is_one_whole_final_answer(case: tuple[bytes, int, int, bool]) -> None:
    data, pos, stop, de = case
    got = answers.text_answer_end(data, pos, stop, de)
    if got < 0:
        return
    end = got >> 32
    assert pos < end <= min(stop, len(data))
    sc = ResponseScanner(de)
    assert sc.scan(data[pos:end]) == end - pos and sc.done and sc.error is None
    assert got & 0xFFFF == sc.status and not got & STATUS_MORE_RESULTS and (got >> 16) & 0xFFFF == sc.warnings


@pytest.mark.parametrize("de", [False, True])
def test_common_answers_are_recognised_one_after_another(de: bool) -> None:
    impl = answers.text_answer_end
    rs = encode_resultset(ResultSet([ColumnDef("c")], [[b"x" * 120]]), 1, 0x0002, de)[0]
    ok = frame(1, ok_packet(1, 0, 0x0003, 2))
    data = rs + ok + frame(1, err_packet(1146, "42S02", "no table"))
    first = impl(data, 0, len(data), de)
    assert first >> 32 == len(rs) and first & 0xFFFFFFFF == 0x0002
    second = impl(data, len(rs), len(data), de)
    assert second >> 32 == len(rs) + len(ok) and second & 0xFFFF == 0x0003 and (second >> 16) & 0xFFFF == 2
    assert impl(data, len(rs) + len(ok), len(data), de) == -1            # an ERR: the scanner's business
    assert impl(data, 0, len(rs) - 1, de) == -1                          # not whole before stop
    assert whole_text_answer(rs, de) == 0x0002 and whole_text_answer(data, de) == -1


class _Sink:
    def __init__(self) -> None:
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(data)


class _Transport:
    def write(self, data: bytes) -> None:
        pass

    def abort(self) -> None:
        pass


@settings(max_examples=100, deadline=None)
@given(st.booleans(), st.lists(st.integers(0, 3), min_size=1, max_size=6), st.data())
def test_pipelined_answers_relayed_each_to_its_own_sink(de: bool, kinds: list[int], data: st.DataObject) -> None:
    """Answers of several pipelined reads, in any cut of reads, reach their own sinks byte for byte and
    complete in order; an ERR among them goes through the general scanner."""
    parts = []
    for i, k in enumerate(kinds):
        if k == 0:
            parts.append(encode_resultset(ResultSet([ColumnDef("c")], [[b"%d" % i]]), 1, 0x0002, de)[0])
        elif k == 1:
            parts.append(frame(1, ok_packet(i, 0, 0x0002, 0)))
        elif k == 2:
            parts.append(frame(1, err_packet(1146, "42S02", f"no table {i}")))
        else:
            parts.append(encode_resultset(ResultSet([ColumnDef("c")], [[b"y" * 200]] * (i + 1)), 1, 0x0002, de)[0])
    wire = b"".join(parts)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(wire) - 1), max_size=5)))

    async def run() -> tuple[list[_Sink], list[object]]:
        conn = BackendConnection(DbGroupConfig("g", "127.0.0.1", 1, "u", ""), C.DEPRECATE_EOF if de else 0)
        conn.flags = C.DEPRECATE_EOF if de else 0   # CLIENT_DEPRECATE_EOF or not
        conn.transport = _Transport()  # type: ignore[assignment]
        conn._framer = None
        conn.shared = True
        sinks = [_Sink() for _ in parts]
        done: list[object] = []
        for s in sinks:
            conn.pipe(frame(0, b"\x03SELECT 1"), s, lambda sc, exc, s=s: done.append((s, sc, exc)), 30.0)
        for a, b in zip([0, *cuts], [*cuts, len(wire)]):
            conn.data_received(wire[a:b])
        if conn._timer is not None:
            conn._timer.cancel()
        return sinks, done

    sinks, done = asyncio.run(run())
    assert [d[0] for d in done] == sinks                                   # completed in order
    assert all(exc is None and sc.done for _, sc, exc in done)            # type: ignore[attr-defined]
    assert [b"".join(s.out) for s in sinks] == parts                       # each its own answer, whole
