"""Byte-level tests of the binary protocol codec (proxy/wire/binary.py).

Expected bytes are written from the protocol documentation (COM_STMT_EXECUTE, binary result rows);
the integration tests in tests/proxy/test_prepared.py compare with MariaDB's own answers.
"""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire import constants as C
from proxy.wire.binary import (LONG_DATA, BinaryResultConverter, IntParams, ParamType, binary_value, encode_binary_row,
                                   limit_literal, limit_placeholders,
                                   parse_execute, parse_prepare_response, parse_send_long_data, placeholder_positions,
                                   prepare_ok, quote_string, sql_literal, stmt_id_of, substitute)
from proxy.wire.messages import ColumnDef, ResultSet, encode_resultset, eof_packet, err_packet, ok_packet
from proxy.wire.packets import PacketFramer, ProtocolError, frame, lenenc_str
from proxy.plan.sqltok import tokenize


def _exec_head(stmt_id: int = 7, flags: int = 0) -> bytes:
    return b"\x17" + struct.pack("<IBI", stmt_id, flags, 1)


# -- COM_STMT_EXECUTE ----------------------------------------------------------------------------

def test_zero_parameters_without_bitmap_as_sysbench_sends_them() -> None:
    req = parse_execute(_exec_head(3), 0, None)
    assert (req.stmt_id, req.types, req.values) == (3, None, ())


def test_zero_parameters_with_trailing_bytes_are_ignored() -> None:
    assert parse_execute(_exec_head(3) + b"\x01", 0, None).values == ()


def test_first_execute_binds_types_and_values() -> None:
    p = (_exec_head() + b"\x00" + b"\x01" + bytes((C.T_LONG, 0, C.T_STRING, 0))
         + struct.pack("<i", -5) + lenenc_str(b"abc"))
    req = parse_execute(p, 2, None)
    assert req.types == (ParamType(C.T_LONG), ParamType(C.T_STRING))
    assert req.values == (-5, b"abc")


def test_later_execute_reuses_remembered_types() -> None:
    types = (ParamType(C.T_LONGLONG), ParamType(C.T_VAR_STRING))
    p = _exec_head() + b"\x00" + b"\x00" + struct.pack("<q", 2 ** 40) + lenenc_str(b"x")
    req = parse_execute(p, 2, types)
    assert req.types is None
    assert req.values == (2 ** 40, b"x")


_INT_TYPES = st.sampled_from([(C.T_TINY, "b"), (C.T_SHORT, "h"), (C.T_YEAR, "h"), (C.T_LONG, "i"), (C.T_INT24, "i"),
                              (C.T_LONGLONG, "q")])


@st.composite
def _int_params(draw: st.DrawFn) -> tuple[tuple[ParamType, ...], list[bytes]]:
    """Integer parameters as a client binds them: types and each value's bytes."""
    types, raws = [], []
    for typ, code in draw(st.lists(_INT_TYPES, min_size=1, max_size=10)):
        unsigned = draw(st.booleans())
        fmt = "<" + (code.upper() if unsigned else code)
        bits = 8 * struct.calcsize(fmt)
        lo, hi = (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        types.append(ParamType(typ, unsigned))
        raws.append(struct.pack(fmt, draw(st.integers(lo, hi))))
    return tuple(types), raws


@given(_int_params(), st.booleans())
def test_integer_binder_writes_the_text_the_general_path_writes(params: tuple[tuple[ParamType, ...], list[bytes]],
                                                                 resend_types: bool) -> None:
    types, raws = params
    n = len(types)
    sql = "SELECT c FROM t WHERE " + " AND ".join(f"k{i} = ?" for i in range(n)) + " /* 100% */"
    positions = placeholder_positions(tokenize(sql))
    flags = bytes((n + 7) // 8) + (b"\x01" + b"".join(bytes((t.type, 0x80 if t.unsigned else 0)) for t in types)
                                    if resend_types else b"\x00")
    payload = _exec_head() + flags + b"".join(raws)
    req = parse_execute(payload, n, types)
    want = substitute(sql, positions, [sql_literal(v) for v in req.values])
    binder = IntParams.of(sql, positions, types)
    assert binder is not None
    assert binder.bind(payload) == want


def test_integer_binder_leaves_other_executes_to_the_general_path() -> None:
    sql = "SELECT c FROM t WHERE a = ? AND b = ?"
    positions = placeholder_positions(tokenize(sql))
    types = (ParamType(C.T_LONG), ParamType(C.T_LONGLONG, True))
    binder = IntParams.of(sql, positions, types)
    assert binder is not None
    values = struct.pack("<iQ", -5, 2 ** 64 - 1)
    assert binder.bind(_exec_head() + b"\x00\x00" + values) == "SELECT c FROM t WHERE a = -5 AND b = 18446744073709551615"
    assert binder.bind(_exec_head() + b"\x02\x00" + values[:4]) is None          # b is NULL
    assert binder.bind(_exec_head() + b"\x00\x00" + values + b"\x00") is None   # a byte too many
    assert binder.bind(_exec_head() + b"\x00\x01" + bytes((C.T_LONGLONG, 0, C.T_LONGLONG, 0x80))
                       + struct.pack("<qQ", -5, 1)) is None                      # other types now
    assert IntParams.of(sql, positions, (ParamType(C.T_LONG), ParamType(C.T_STRING))) is None
    minus = "SELECT 1 - ?"   # substitute() writes `1 - -5`, never `1 --5`
    assert IntParams.of(minus, placeholder_positions(tokenize(minus)), (ParamType(C.T_LONG),)) is not None
    minus = "SELECT 1 -?"
    assert IntParams.of(minus, placeholder_positions(tokenize(minus)), (ParamType(C.T_LONG),)) is None


def test_execute_without_any_types_is_refused() -> None:
    with pytest.raises(ProtocolError):
        parse_execute(_exec_head() + b"\x00\x00" + struct.pack("<i", 1), 1, None)


def test_null_bitmap_skips_values() -> None:
    # params 0 and 2 NULL (bits 0 and 2), 1 and 3 set; 9 params need two bitmap bytes
    n = 9
    bitmap = bytes((0b0000_0101 | 0b1111_0000, 0b1))  # 0,2,4,5,6,7,8 NULL
    types = b"".join(bytes((C.T_TINY, 0)) for _ in range(n))
    p = _exec_head() + bitmap + b"\x01" + types + b"\x05" + b"\xff"
    req = parse_execute(p, n, None)
    assert req.values == (None, 5, None, -1, None, None, None, None, None)


def test_unsigned_flag() -> None:
    p = _exec_head() + b"\x00\x01" + bytes((C.T_LONGLONG, 0x80)) + struct.pack("<Q", 2 ** 64 - 1)
    assert parse_execute(p, 1, None).values == (2 ** 64 - 1,)
    p = _exec_head() + b"\x00\x01" + bytes((C.T_TINY, 0x80)) + b"\xff"
    assert parse_execute(p, 1, None).values == (255,)


def test_long_data_parameter_has_no_value_in_the_packet() -> None:
    p = _exec_head() + b"\x00\x01" + bytes((C.T_BLOB, 0, C.T_LONG, 0)) + struct.pack("<i", 9)
    req = parse_execute(p, 2, None, frozenset({0}))
    assert req.values == (LONG_DATA, 9)


@pytest.mark.parametrize("typ,raw,value", [
    (C.T_TINY, b"\x80", -128),
    (C.T_SHORT, struct.pack("<h", -300), -300),
    (C.T_YEAR, struct.pack("<h", 2024), 2024),
    (C.T_INT24, struct.pack("<i", 70000), 70000),
    (C.T_LONG, struct.pack("<i", -2 ** 31), -2 ** 31),
    (C.T_DOUBLE, struct.pack("<d", 1.25), 1.25),
    (C.T_FLOAT, struct.pack("<f", 0.5), 0.5),
    (C.T_NEWDECIMAL, lenenc_str(b"12.50"), Decimal("12.50")),
    (C.T_VAR_STRING, lenenc_str("ü".encode()), "ü".encode()),
    (C.T_BLOB, lenenc_str(b"\x00\xff"), b"\x00\xff"),
    (C.T_DATE, bytes((4,)) + struct.pack("<HBB", 2024, 2, 29), dt.date(2024, 2, 29)),
    (C.T_DATETIME, bytes((7,)) + struct.pack("<HBBBBB", 2024, 1, 2, 3, 4, 5), dt.datetime(2024, 1, 2, 3, 4, 5)),
    (C.T_TIMESTAMP, bytes((11,)) + struct.pack("<HBBBBBI", 2024, 1, 2, 3, 4, 5, 6),
     dt.datetime(2024, 1, 2, 3, 4, 5, 6)),
    (C.T_DATETIME, b"\x00", "0000-00-00 00:00:00"),
    (C.T_TIME, bytes((8,)) + struct.pack("<BIBBB", 1, 2, 3, 4, 5), -dt.timedelta(days=2, hours=3, minutes=4, seconds=5)),
    (C.T_TIME, bytes((12,)) + struct.pack("<BIBBBI", 0, 0, 1, 2, 3, 500), dt.timedelta(hours=1, minutes=2, seconds=3,
                                                                                   microseconds=500)),
    (C.T_TIME, b"\x00", dt.timedelta(0)),
])
def test_decode_each_type(typ: int, raw: bytes, value: object) -> None:
    p = _exec_head() + b"\x00\x01" + bytes((typ, 0)) + raw
    assert parse_execute(p, 1, None).values == (value,)


@pytest.mark.parametrize("typ", [0x10, 0x11, 0x12, 0x13, 0x14, 0x80, 0xF4, C.T_JSON, C.T_GEOMETRY])
def test_parameter_types_mariadb_does_not_read_are_refused(typ: int) -> None:
    """MariaDB 10.11 answers 1210 for them (BIT and GEOMETRY: bound as NULL, the next value read from their bytes)."""
    for bitmap in (b"\x00", b"\x01"):   # refused as NULL too
        with pytest.raises(ProtocolError):
            parse_execute(_exec_head() + bitmap + b"\x01" + bytes((typ, 0)) + lenenc_str(b"12"), 1, None)


def test_a_null_typed_parameter_must_be_null() -> None:
    head = _exec_head()
    assert parse_execute(head + b"\x01\x01" + bytes((C.T_NULL, 0)), 1, None).values == (None,)
    with pytest.raises(ProtocolError):   # MariaDB: 1210
        parse_execute(head + b"\x00\x01" + bytes((C.T_NULL, 0)) + lenenc_str(b"12"), 1, None)
    with pytest.raises(ProtocolError):   # with the types remembered from an earlier execute too
        parse_execute(head + b"\x00\x00" + lenenc_str(b"12"), 1, (ParamType(C.T_NULL),))


@pytest.mark.parametrize("text,ok", [
    (b"12.50", True), (b"-0.5", True), (b"+.5", True), (b"7.", True), (b" 3 ", True),
    (b"abc", False), (b"1_0", False), (b"NaN", False), (b"Infinity", False), (b"1e5", False), (b"", False),
])
def test_a_decimal_parameter_is_a_plain_number_or_refused(text: bytes, ok: bool) -> None:
    """MariaDB reads other text with a warning as the number it starts with (abc: 0, 1_0: 1); it was written in
    as the string 'abc', or as Python read it (1_0: 10, NaN: the word NaN in the statement)."""
    p = _exec_head() + b"\x00\x01" + bytes((C.T_NEWDECIMAL, 0)) + lenenc_str(text)
    if ok:
        assert parse_execute(p, 1, None).values == (Decimal(text.decode()),)
    else:
        with pytest.raises(ProtocolError):
            parse_execute(p, 1, None)


def test_truncated_values_raise() -> None:
    with pytest.raises(ProtocolError):
        parse_execute(_exec_head() + b"\x00\x01" + bytes((C.T_LONG, 0)) + b"\x01\x00", 1, None)
    with pytest.raises(ProtocolError):
        parse_execute(_exec_head() + b"\x00\x01" + bytes((C.T_STRING, 0)) + b"\x05ab", 1, None)
    with pytest.raises(ProtocolError):
        parse_execute(b"\x17\x01\x00", 0, None)


def test_other_statement_commands() -> None:
    assert stmt_id_of(b"\x19" + struct.pack("<I", 42)) == 42
    assert parse_send_long_data(b"\x18" + struct.pack("<IH", 5, 1) + b"data") == (5, 1, b"data")
    with pytest.raises(ProtocolError):
        parse_send_long_data(b"\x18\x00")


# -- literals -----------------------------------------------------------------------------------

@pytest.mark.parametrize("value,literal", [
    (None, "NULL"),
    (7, "7"),
    (-2 ** 63, str(-2 ** 63)),
    (2 ** 64 - 1, str(2 ** 64 - 1)),
    (1.5, "1.5e0"),         # a DOUBLE literal, as the parameter is (1.5 alone is a DECIMAL)
    (2.0, "2.0e0"),
    (1e300, "1e+300"),
    (Decimal("-0.10"), "-0.10"),
    (b"plain", "'plain'"),
    (b"it's", "'it\\'s'"),
    (b"back\\slash", "'back\\\\slash'"),
    (b"nul\x00 nl\n cr\r z\x1a", "'nul\\0 nl\\n cr\\r z\\Z'"),
    ("ü".encode(), "'ü'"),
    (b"\xff\x00\x01", "X'FF0001'"),
    (b"", "''"),
    (dt.date(2024, 2, 29), "'2024-02-29'"),
    (dt.datetime(2024, 1, 2, 3, 4, 5), "'2024-01-02 03:04:05'"),
    (dt.datetime(2024, 1, 2, 3, 4, 5, 60), "'2024-01-02 03:04:05.000060'"),
    (-dt.timedelta(days=1, hours=1, seconds=1), "'-25:00:01'"),
    (dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=1), "'838:59:59.000001'"),
])
def test_sql_literal(value: object, literal: str) -> None:
    assert sql_literal(value) == literal


def test_float32_prints_the_shortest_text_that_reads_back() -> None:
    v = struct.unpack("<f", struct.pack("<f", 0.1))[0]
    p = _exec_head() + b"\x00\x01" + bytes((C.T_FLOAT, 0)) + struct.pack("<f", 0.1)
    (f,) = parse_execute(p, 1, None).values
    assert f == v and sql_literal(f) == "0.1e0"


@pytest.mark.parametrize("sql,limits", [
    ("SELECT * FROM t LIMIT ?", {0}),
    ("SELECT * FROM t WHERE a = ? LIMIT ?, ?", {1, 2}),
    ("SELECT * FROM t LIMIT 5, ?", {0}),
    ("SELECT * FROM t limit ? offset ?", {0, 1}),
    ("SELECT * FROM t ORDER BY a OFFSET ? ROWS FETCH FIRST ? ROWS ONLY", {0, 1}),
    ("SELECT ?, ? FROM t WHERE b IN (?, ?)", set()),
    ("SELECT * FROM t WHERE s = 'LIMIT ?' AND c = ?", set()),
])
def test_limit_placeholders(sql: str, limits: set[int]) -> None:
    assert limit_placeholders(tokenize(sql)) == limits


@pytest.mark.parametrize("value,literal", [
    (2, "2"), (2.0, "2"), (2.5, "2"), (2.7, "3"), (3.5, "4"), (None, "0"), (-1, str(2 ** 64 - 1)),
    (Decimal("4.00"), "4"), (b" 3", "3"), (True, "1"),
])
def test_limit_literal_reads_the_value_as_mariadb_does(value: object, literal: str) -> None:
    assert limit_literal(value) == literal


@pytest.mark.parametrize("value", [Decimal("1.5"), b"3x", b"abc", dt.date(2024, 1, 1), float("inf"), 2 ** 64])
def test_limit_literal_refuses_what_it_cannot_read_as_mariadb_does(value: object) -> None:
    with pytest.raises(ValueError):
        limit_literal(value)


def test_non_finite_floats_are_refused() -> None:
    with pytest.raises(ValueError):
        sql_literal(float("nan"))


def test_no_backslash_escapes_mode_doubles_quotes_only() -> None:
    assert quote_string("a'b\\c", backslash_escapes=False) == "'a''b\\c'"


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_quoted_strings_tokenize_as_one_string(text: str) -> None:
    lit = quote_string(text)
    toks = tokenize(f"SELECT {lit} FROM t")
    assert [t[0] for t in toks] == ["w", "s", "w", "w"]


# -- substitution --------------------------------------------------------------------------------

def test_placeholders_in_strings_and_comments_are_not_parameters() -> None:
    sql = "SELECT '?', `?`, ? /* ? */ FROM t WHERE a = ? -- ?\n"
    pos = placeholder_positions(tokenize(sql))
    assert len(pos) == 2
    assert substitute(sql, pos, ["1", "'x'"]) == "SELECT '?', `?`, 1 /* ? */ FROM t WHERE a = 'x' -- ?\n"


def test_negative_number_after_minus_does_not_become_a_comment() -> None:
    sql = "SELECT 5-?"
    out = substitute(sql, placeholder_positions(tokenize(sql)), ["-3"])
    assert out == "SELECT 5- -3"


# -- binary rows ---------------------------------------------------------------------------------

def test_binary_row_from_the_protocol_documentation() -> None:
    # MySQL docs: a row of (VARCHAR 'foo', NULL, INT 3)... here built field by field
    row = encode_binary_row([b"foo", None, b"3"], [(C.T_VAR_STRING, False), (C.T_LONG, False),
                                                     (C.T_LONG, False)])
    # header, bitmap: column 1 NULL -> bit 1+2 = 3 -> 0x08
    assert row == b"\x00\x08" + b"\x03foo" + b"\x03\x00\x00\x00"


def test_bitmap_offset_spans_bytes() -> None:
    vals: list[bytes | None] = [None] * 7
    row = encode_binary_row(vals, [(C.T_LONG, False)] * 7)
    assert row == b"\x00\xfc\x01"


@pytest.mark.parametrize("typ,unsigned,text,raw", [
    (C.T_TINY, False, b"-1", b"\xff"),
    (C.T_TINY, True, b"255", b"\xff"),
    (C.T_SHORT, False, b"-2", struct.pack("<h", -2)),
    (C.T_YEAR, True, b"2024", struct.pack("<H", 2024)),
    (C.T_INT24, False, b"-70000", struct.pack("<i", -70000)),
    (C.T_LONG, True, b"4294967295", b"\xff\xff\xff\xff"),
    (C.T_LONGLONG, True, b"18446744073709551615", b"\xff" * 8),
    (C.T_LONGLONG, False, b"-9223372036854775808", struct.pack("<q", -2 ** 63)),
    (C.T_FLOAT, False, b"1.1", struct.pack("<f", 1.1)),
    (C.T_DOUBLE, False, b"-1.5e-10", struct.pack("<d", -1.5e-10)),
    (C.T_NEWDECIMAL, False, b"12.30", b"\x0512.30"),
    (C.T_DATE, False, b"2024-02-29", b"\x04" + struct.pack("<HBB", 2024, 2, 29)),
    (C.T_DATE, False, b"0000-00-00", b"\x00"),
    (C.T_DATETIME, False, b"2024-01-02 00:00:00", b"\x04" + struct.pack("<HBB", 2024, 1, 2)),
    (C.T_DATETIME, False, b"2024-01-02 03:04:05", b"\x07" + struct.pack("<HBBBBB", 2024, 1, 2, 3, 4, 5)),
    (C.T_TIMESTAMP, False, b"2024-01-02 03:04:05.123400",
     b"\x0b" + struct.pack("<HBBBBBI", 2024, 1, 2, 3, 4, 5, 123400)),
    (C.T_DATETIME, False, b"2024-01-02 03:04:05.000", b"\x07" + struct.pack("<HBBBBB", 2024, 1, 2, 3, 4, 5)),
    (C.T_TIME, False, b"00:00:00", b"\x00"),
    (C.T_TIME, False, b"-838:59:59", b"\x08" + struct.pack("<BIBBB", 1, 34, 22, 59, 59)),
    (C.T_TIME, False, b"01:02:03.5", b"\x0c" + struct.pack("<BIBBBI", 0, 0, 1, 2, 3, 500000)),
    (C.T_BLOB, False, b"x" * 300, b"\xfc\x2c\x01" + b"x" * 300),
    (C.T_BIT, True, b"\x01", b"\x01\x01"),
])
def test_binary_value(typ: int, unsigned: bool, text: bytes, raw: bytes) -> None:
    assert binary_value(text, typ, unsigned) == raw


def test_null_typed_column_is_always_null() -> None:
    assert encode_binary_row([None], [(C.T_NULL, False)]) == b"\x00\x04"


# -- the response converter ------------------------------------------------------------------------

def _cols() -> list[ColumnDef]:
    return [ColumnDef("id", C.T_LONG, 63, 11, C.NOT_NULL_FLAG | C.PRI_KEY_FLAG),
            ColumnDef("c", C.T_STRING, 45, 480)]


def _text_response(deprecate_eof: bool, rows: list[list[bytes | None]]) -> bytes:
    data, _ = encode_resultset(ResultSet(_cols(), rows), 1, C.STATUS_AUTOCOMMIT, deprecate_eof)
    return data


def _expected_binary(deprecate_eof: bool, rows: list[list[bytes | None]]) -> bytes:
    types = [(C.T_LONG, False), (C.T_STRING, False)]
    out = [frame(1, b"\x02")] + [frame(2 + i, c.encode()) for i, c in enumerate(_cols())]
    seq = 4
    if not deprecate_eof:
        out.append(frame(seq, eof_packet(0, C.STATUS_AUTOCOMMIT)))
        seq += 1
    for r in rows:
        out.append(frame(seq, encode_binary_row(r, types)))
        seq += 1
    if deprecate_eof:
        out.append(frame(seq, ok_packet(0, 0, C.STATUS_AUTOCOMMIT, 0, header=0xFE)))
    else:
        out.append(frame(seq, eof_packet(0, C.STATUS_AUTOCOMMIT)))
    return b"".join(out)


@pytest.mark.parametrize("deprecate_eof", [False, True])
def test_converter_turns_text_rows_into_binary_rows(deprecate_eof: bool) -> None:
    rows = [[b"1", b"a"], [b"2", None], [b"-3", b"\xfe" * 10]]
    conv = BinaryResultConverter(deprecate_eof)
    assert conv.feed(_text_response(deprecate_eof, rows)) == _expected_binary(deprecate_eof, rows)
    assert conv.done and conv.rows == 3


@pytest.mark.parametrize("deprecate_eof", [False, True])
def test_converter_streams_byte_by_byte(deprecate_eof: bool) -> None:
    rows = [[str(i).encode(), b"row %d" % i] for i in range(20)]
    conv = BinaryResultConverter(deprecate_eof)
    data = _text_response(deprecate_eof, rows)
    out = b"".join(conv.feed(data[i:i + 1]) for i in range(len(data)))
    assert out == _expected_binary(deprecate_eof, rows)


def test_converter_passes_ok_and_err() -> None:
    ok = frame(1, ok_packet(3, 9, C.STATUS_IN_TRANS))
    conv = BinaryResultConverter(False)
    assert conv.feed(ok) == ok and conv.done
    err = frame(1, err_packet(1146, "42S02", "Table 'x' doesn't exist"))
    conv = BinaryResultConverter(False)
    assert conv.feed(err) == err and conv.done


def test_converter_follows_more_results() -> None:
    first = frame(1, ok_packet(1, 0, C.STATUS_MORE_RESULTS))
    data, _ = encode_resultset(ResultSet(_cols(), [[b"5", b"x"]]), 2, 0, False)
    conv = BinaryResultConverter(False)
    out = conv.feed(first + data)
    assert not conv.done or conv.rows == 1
    assert out.startswith(first)
    assert encode_binary_row([b"5", b"x"], [(C.T_LONG, False), (C.T_STRING, False)]) in out


def test_converter_renumbers_when_a_row_spans_packets() -> None:
    big = b"y" * (0xFFFFFF + 10)  # a text row over 16 MB arrives as two packets
    conv = BinaryResultConverter(True)
    data = _text_response(True, [[b"1", big], [b"2", b"z"]])
    out = conv.feed(data)
    f = PacketFramer(max_payload=1 << 30)
    f.feed(out)
    pkts = list(f.packets())
    assert len(pkts) == 1 + 2 + 2 + 1  # count, 2 defs, 2 rows, end
    assert pkts[3][1][-10:] == b"y" * 10
    seqs = [s for s, _ in pkts]
    assert seqs[:4] == [1, 2, 3, 4] and seqs[4] == 6 and seqs[5] == 7


_COLUMN_TYPES = [C.T_STRING, C.T_VAR_STRING, C.T_BLOB, C.T_NEWDECIMAL, C.T_LONG, C.T_LONGLONG, C.T_DOUBLE]


def _text_value(typ: int) -> st.SearchStrategy[bytes | None]:
    if typ in (C.T_LONG, C.T_LONGLONG):
        value: st.SearchStrategy[bytes] = st.integers(-(1 << 31), (1 << 31) - 1).map(lambda i: str(i).encode())
    elif typ == C.T_DOUBLE:
        value = st.floats(allow_nan=False, allow_infinity=False).map(lambda f: repr(f).encode())
    else:
        value = st.binary(max_size=300)   # past 250 bytes a value's length takes three bytes
    return st.none() | value


@st.composite
def _result(draw: st.DrawFn) -> tuple[list[ColumnDef], list[list[bytes | None]]]:
    types = draw(st.lists(st.sampled_from(_COLUMN_TYPES), min_size=1, max_size=6))
    cols = [ColumnDef(f"c{i}", t, 63, 20) for i, t in enumerate(types)]
    rows = draw(st.lists(st.tuples(*[_text_value(t) for t in types]).map(list), max_size=5))
    return cols, rows


@settings(max_examples=300)
@given(_result(), st.booleans())
def test_a_whole_answer_converts_as_it_does_packet_by_packet(result: tuple[list[ColumnDef], list[list[bytes | None]]],
                                                            deprecate_eof: bool) -> None:
    cols, rows = result
    data, _ = encode_resultset(ResultSet(cols, rows), 1, C.STATUS_AUTOCOMMIT, deprecate_eof)
    whole = BinaryResultConverter(deprecate_eof)
    got = whole.feed(data)
    streamed = BinaryResultConverter(deprecate_eof)
    assert got == b"".join(streamed.feed(data[i:i + 1]) for i in range(len(data)))
    assert whole.done and whole.rows == len(rows)


def test_converter_refuses_packets_after_the_end() -> None:
    conv = BinaryResultConverter(False)
    conv.feed(frame(1, ok_packet()))
    with pytest.raises(ProtocolError):
        conv.feed(frame(2, ok_packet()))


# -- COM_STMT_PREPARE answers ------------------------------------------------------------------------

@pytest.mark.parametrize("deprecate_eof", [False, True])
def test_parse_prepare_response(deprecate_eof: bool) -> None:
    pdef = ColumnDef("?", C.T_VAR_STRING, 63, 0).encode()
    cdefs = [c.encode() for c in _cols()]
    parts = [frame(1, prepare_ok(9, 2, 1)), frame(2, pdef)]
    seq = 3
    if not deprecate_eof:
        parts.append(frame(seq, eof_packet()))
        seq += 1
    for c in cdefs:
        parts.append(frame(seq, c))
        seq += 1
    if not deprecate_eof:
        parts.append(frame(seq, eof_packet()))
    ok = parse_prepare_response(b"".join(parts), deprecate_eof)
    assert (ok.stmt_id, ok.columns, ok.params) == (9, 2, 1)
    assert ok.param_defs == (pdef,) and ok.column_defs == tuple(cdefs)


def test_prepare_ok_layout() -> None:
    assert prepare_ok(1, 2, 3) == b"\x00\x01\x00\x00\x00\x02\x00\x03\x00\x00\x00\x00"
