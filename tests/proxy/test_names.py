"""Physical → logical names in column definitions and ERR packets, byte for byte (no I/O)."""

from __future__ import annotations

import pytest
from harness import proxy_config
from hypothesis import given, settings
from hypothesis import strategies as st

from meta.config import parse_config
from proxy.backends.backend import whole_text_answer
from proxy.backends.names import GroupNames, group_names
from proxy.wire.messages import (ColumnDef, ResultSet, encode_resultset, err_packet, parse_column_def,
                                     parse_err)
from proxy.wire.packets import frame
from proxy.wire.response import ResponseScanner


class _B:
    def __init__(self, port: int) -> None:
        self.host, self.port = "127.0.0.1", port


@pytest.fixture(scope="module")
def names() -> dict[str, GroupNames]:
    return group_names(parse_config(proxy_config([_B(1), _B(2)], 3, 4)))


def _answer(db: str = "db1", table: str = "sharding_4_t1", deof: bool = False) -> bytes:
    cols = [ColumnDef("id", 3, 63, 11, 0, 0, db, "a", table, "id"),
            ColumnDef("expr", 8, 63, 21, 0, 0, "", "", "", "")]
    return encode_resultset(ResultSet(cols, [[b"1", b"2"], [b"3", None]]), 1, 2, deof)[0]


def test_config_names_each_physical_table(names: dict[str, GroupNames]) -> None:
    g1 = names["ha_group1"]
    assert g1.schema_of("db1", "sharding_4_t1") == "schema1"
    assert g1.schema_of("db1", "SING") == "schema2"           # db1 on ha_group1 holds both schemas' tables
    assert g1.schema_of("db3", "anything") == "schema1"       # schema1's default node
    assert g1.schema_of("db1", "unknown") is None             # two schemas use db1: no guess
    assert names["ha_group2"].schema_of("db2", "x") == "schema1"


@pytest.mark.parametrize("deof", [False, True])
def test_whole_answer_renamed_rows_untouched(names: dict[str, GroupNames], deof: bool) -> None:
    data = _answer(deof=deof)
    out = names["ha_group1"].answer(data)
    assert whole_text_answer(out, deof) == whole_text_answer(data, deof) >= 0
    sc = ResponseScanner(deof, collect=True)
    sc.scan(out)
    cols = sc.results[0].columns
    assert [c.schema for c in cols] == ["schema1", ""]
    assert [(c.table, c.org_table, c.name, c.type, c.length) for c in cols] == [
        ("a", "sharding_4_t1", "id", 3, 11), ("", "", "expr", 8, 21)]
    assert out.endswith(data[-40:])                           # the rows and the end marker as they were
    assert names["ha_group1"].answer(data) == out             # cached header, same answer
    plain = _answer("information_schema", "TABLES", deof)
    assert names["ha_group1"].answer(plain) is plain          # nothing to rename: the same bytes object


def test_error_messages(names: dict[str, GroupNames]) -> None:
    g = names["ha_group1"]

    def msg(text: str) -> str:
        q = g.err(err_packet(1146, "42S02", text))
        return text if q is None else parse_err(q).message

    assert msg("Table 'db3.t' doesn't exist") == "Table 'schema1.t' doesn't exist"
    assert msg("Table 'db1.sing' doesn't exist") == "Table 'schema2.sing' doesn't exist"
    assert msg("Unknown column 'db1.sharding_4_t1.x' in 'where clause'") == \
        "Unknown column 'schema1.sharding_4_t1.x' in 'where clause'"
    assert msg("near '`db3`.`t` SET'") == "near '`schema1`.`t` SET'"
    assert msg("Table 'xdb3.t' and mydb1.t stay") == "Table 'xdb3.t' and mydb1.t stay"
    assert parse_err(g.err(err_packet(1146, "42S02", "Table 'db3.t' doesn't exist"))).sqlstate == "42S02"


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=6), deof=st.booleans())
def test_relay_in_any_chunks_renames_only_definitions(names: dict[str, GroupNames], cuts: list[int],
                                                      deof: bool) -> None:
    """The scanner renames column definitions and the ERR however the bytes arrive; what it relays
    is the renamed answer, packet for packet."""
    data, seq = _without_end(_answer(deof=deof))  # an ERR ends this answer instead
    data += frame(seq, err_packet(1146, "42S02", "Table 'db3.t' doesn't exist"))
    g = names["ha_group1"]
    expected = _relay(g, data, [len(data)], deof)
    pieces = sorted({c % len(data) for c in cuts if c % len(data)}) + [len(data)]
    assert _relay(g, data, pieces, deof) == expected
    sc = ResponseScanner(deof, collect=True)
    sc.scan(expected)
    assert sc.results == [] and sc.error is not None and sc.error.message == "Table 'schema1.t' doesn't exist"
    at = expected.index(b"\x03def")
    assert parse_column_def(expected[at:at + expected[at - 4]]).schema == "schema1"


def _without_end(data: bytes) -> tuple[bytes, int]:
    """The answer without its last packet, and that packet's sequence id."""
    pos = last = 0
    while pos < len(data):
        last = pos
        pos += 4 + (data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16)
    return data[:last], data[last + 3]


def _relay(g: GroupNames, data: bytes, ends: list[int], deof: bool) -> bytes:
    """What BackendConnection.data_received writes to the client for data arriving cut at ends."""
    sc = ResponseScanner(deof, names=g)
    out = b""
    buf = b""
    start = 0
    for end in ends:
        buf += data[start:end]
        start = end
        used = sc.scan(buf)
        if used:
            chunk = buf[:used]
            out += sc.take_edits(chunk) if sc.edits else chunk
        buf = buf[used:]
    assert sc.done and not buf
    return out


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=80))
def test_garbage_never_raises(names: dict[str, GroupNames], payload: bytes) -> None:
    """A malformed packet from a backend is left as it is (the scanner reports it), never a crash here."""
    g = names["ha_group1"]
    for p in (payload, b"\x03def\x03db1" + payload, b"\xff" + payload):
        q = g.coldef(p)
        assert q is None or isinstance(q, bytes)
        q = g.err(p)
        assert q is None or q[:3] == p[:3]
