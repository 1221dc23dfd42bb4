"""The binary (prepared-statement) protocol, sans I/O: COM_STMT_* requests in, binary rows out.

pydble emulates server-side prepared statements the way DBLE does: parameters arrive in binary,
become SQL literals in the statement text, the text runs as COM_QUERY, and the text-protocol answer
is turned into binary-protocol rows by column type. Everything here is pure functions and one small
state machine (`BinaryResultConverter`), tested byte for byte.

Facts this follows (MySQL/MariaDB client-server protocol):
- COM_STMT_EXECUTE: 0x17, stmt_id u32, flags u8, iteration_count u32; then, only when the statement
  has parameters: NULL bitmap ((n+7)//8 bytes), new_params_bound_flag u8, when 1 the types
  (type u8, flags u8 with 0x80 = unsigned) of every parameter, then the non-NULL values. A statement
  without parameters may end right after iteration_count (libmariadb/sysbench send it so).
- Types are sent only when new_params_bound_flag is 1 (the first execute); later executes reuse them.
- A parameter fed with COM_STMT_SEND_LONG_DATA has no value in the execute packet.
- Binary row: 0x00, NULL bitmap of (ncols+7+2)//8 bytes with bit offset 2, then the non-NULL values:
  TINY 1, SHORT/YEAR 2, LONG/INT24 4, LONGLONG 8 bytes, FLOAT 4, DOUBLE 8 (little-endian),
  DATE/DATETIME/TIMESTAMP and TIME as a length byte plus fields, everything else length-encoded.
"""

from __future__ import annotations

import datetime as _dt
import re
import struct
from dataclasses import dataclass
from decimal import Decimal

from proxy.wire import constants as C
from proxy.wire.messages import decode_text_row, eof_status, parse_column_def, parse_ok
from proxy.wire.packets import (PacketFramer, ProtocolError, frame, lenenc_int, packets_seq_after, read_lenenc_int,
                      read_lenenc_str)

UNSIGNED_PARAM = 0x80
CURSOR_TYPE_READ_ONLY = 0x01
LAST_STATEMENT_ID = 0xFFFFFFFF  # MariaDB: "the statement prepared last" (execute-direct)

_INT_SIZES = {C.T_TINY: 1, C.T_SHORT: 2, C.T_YEAR: 2, C.T_LONG: 4, C.T_INT24: 4, C.T_LONGLONG: 8}
_DATE_TYPES = frozenset({C.T_DATE, C.T_DATETIME, C.T_TIMESTAMP, C.T_NEWDATE})
_BLOB_TYPES = frozenset({C.T_TINY_BLOB, C.T_MEDIUM_BLOB, C.T_LONG_BLOB, C.T_BLOB})
# The parameter types MariaDB reads a value of (10.11 refuses the others with 1210; NULL only for a NULL, and it
# binds BIT and GEOMETRY as NULL and reads the next parameter from their value's bytes: refused here too).
PARAM_TYPES = frozenset(range(0x00, 0x10)) - {C.T_BIT} | frozenset(range(0xF6, 0xFF))
_DECIMAL_TEXT = re.compile(rb" *[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+) *")


# ---------------------------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParamType:
    """The type a client bound a parameter with."""

    type: int
    unsigned: bool = False


@dataclass(frozen=True)
class ExecuteRequest:
    """A decoded COM_STMT_EXECUTE: values are Python objects (None = NULL, LONG_DATA = sent apart)."""

    stmt_id: int
    flags: int
    types: tuple[ParamType, ...] | None      # None when the client did not (re)bind types
    values: tuple[object, ...]


class _LongData:
    """Marker for a parameter whose value came through COM_STMT_SEND_LONG_DATA."""

    def __repr__(self) -> str:
        return "LONG_DATA"


LONG_DATA = _LongData()


def stmt_id_of(payload: bytes) -> int:
    """The statement id of a COM_STMT_EXECUTE/CLOSE/RESET/SEND_LONG_DATA/FETCH payload."""
    if len(payload) < 5:
        raise ProtocolError("statement command too short")
    return int.from_bytes(payload[1:5], "little")


def parse_send_long_data(payload: bytes) -> tuple[int, int, bytes]:
    """COM_STMT_SEND_LONG_DATA: (stmt_id, param_id, data)."""
    if len(payload) < 7:
        raise ProtocolError("COM_STMT_SEND_LONG_DATA too short")
    return (int.from_bytes(payload[1:5], "little"), int.from_bytes(payload[5:7], "little"),
            bytes(payload[7:]))


def parse_execute(payload: bytes, param_count: int, known_types: tuple[ParamType, ...] | None,
                  long_data: frozenset[int] = frozenset()) -> ExecuteRequest:
    """Decode COM_STMT_EXECUTE for a statement with param_count parameters.

    known_types are the types remembered from an earlier execute; long_data names the parameters
    fed by COM_STMT_SEND_LONG_DATA (their values are not in the packet).
    """
    if len(payload) < 10:
        raise ProtocolError("COM_STMT_EXECUTE too short")
    stmt_id = int.from_bytes(payload[1:5], "little")
    flags = payload[5]
    if param_count == 0:
        return ExecuteRequest(stmt_id, flags, None, ())
    pos = 10
    nb = (param_count + 7) // 8
    if pos + nb + 1 > len(payload):
        raise ProtocolError("COM_STMT_EXECUTE: missing NULL bitmap")
    bitmap = payload[pos:pos + nb]
    pos += nb
    bound = payload[pos]
    pos += 1
    types: tuple[ParamType, ...] | None = None
    if bound:
        end = pos + 2 * param_count
        if end > len(payload):
            raise ProtocolError("COM_STMT_EXECUTE: truncated parameter types")
        types = tuple(ParamType(payload[pos + 2 * i], bool(payload[pos + 2 * i + 1] & UNSIGNED_PARAM))
                      for i in range(param_count))
        for pt in types:
            if pt.type not in PARAM_TYPES:
                raise ProtocolError(f"parameter type {pt.type:#04x} is not one MariaDB reads")
        pos = end
        use = types
    elif known_types is None or len(known_types) != param_count:
        raise ProtocolError("COM_STMT_EXECUTE: parameters never bound with their types")
    else:
        use = known_types
    values: list[object] = []
    for i in range(param_count):
        if bitmap[i >> 3] & (1 << (i & 7)):
            values.append(None)
        elif use[i].type == C.T_NULL:
            raise ProtocolError("a parameter of type NULL with a value")
        elif i in long_data:
            values.append(LONG_DATA)
        else:
            v, pos = decode_param(payload, pos, use[i])
            values.append(v)
    return ExecuteRequest(stmt_id, flags, types, tuple(values))


_INT_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}


class IntParams:
    """The bind of a statement whose parameters are all bound as integers (a point read's key), for an
    execute that sends no new types and no NULL: the values unpacked by one struct and written into
    the text by one %-format, the same text substitute() writes."""

    __slots__ = ("types", "_at", "_size", "_flags", "_typed", "_unpack", "_template")

    def __init__(self, types: tuple[ParamType, ...], fmt: str, template: str) -> None:
        self.types = types
        nb = (len(types) + 7) // 8
        self._at = 10 + nb + 1        # the values follow the NULL bitmap and the new-params-bound flag
        self._flags = bytes(nb + 1)   # no NULL, no new types
        # no NULL, the same types sent again (a client may send them with every execute)
        self._typed = bytes(nb) + b"\x01" + b"".join(bytes((t.type, UNSIGNED_PARAM if t.unsigned else 0)) for t in types)
        packed = struct.Struct(fmt)
        self._size = self._at + packed.size
        self._unpack = packed.unpack_from
        self._template = template

    @classmethod
    def of(cls, sql: str, positions: tuple[tuple[int, int], ...], types: tuple[ParamType, ...]) -> IntParams | None:
        """The binder of this text and these types; None when a parameter is not an integer, or one follows a
        `-` (substitute() keeps those apart)."""
        fmt = ["<"]
        parts: list[str] = []
        pos = 0
        for (start, end), pt in zip(positions, types):
            size = _INT_SIZES.get(pt.type)
            if size is None or (start and sql[start - 1] == "-"):
                return None
            code = _INT_CODES[size]
            fmt.append(code.upper() if pt.unsigned else code)
            parts += (sql[pos:start].replace("%", "%%"), "%d")
            pos = end
        parts.append(sql[pos:].replace("%", "%%"))
        return cls(types, "".join(fmt), "".join(parts)) if len(positions) == len(types) else None

    @property
    def template(self) -> str:
        """The statement text with `%d` for each parameter (a `%` of the text written `%%`)."""
        return self._template

    def bind(self, payload: bytes) -> str | None:
        """The bound text, or None when this execute is not the plain case (the general path reads it)."""
        values = self.values(payload)
        return None if values is None else self._template % values

    def values(self, payload: bytes) -> tuple[int, ...] | None:
        """The parameters of this execute, or None when it is not the plain case."""
        n = len(payload)
        if n == self._size and payload[10:self._at] == self._flags:
            return self._unpack(payload, self._at)
        at = 10 + len(self._typed)
        if n == self._size + at - self._at and payload[10:at] == self._typed:
            return self._unpack(payload, at)
        return None


def decode_param(buf: bytes, pos: int, pt: ParamType) -> tuple[object, int]:
    """One binary parameter value at pos: an int, float, bytes, date/datetime or timedelta."""
    t = pt.type
    size = _INT_SIZES.get(t)
    try:
        if size is not None:
            end = pos + size
            if end > len(buf):
                raise ProtocolError("truncated parameter value")
            return int.from_bytes(buf[pos:end], "little", signed=not pt.unsigned), end
        if t == C.T_DOUBLE:
            return struct.unpack_from("<d", buf, pos)[0], pos + 8
        if t == C.T_FLOAT:
            return _Float32(struct.unpack_from("<f", buf, pos)[0]), pos + 4
        if t == C.T_NULL:
            return None, pos
        if t in _DATE_TYPES:
            n = buf[pos]
            return _decode_datetime(buf[pos + 1:pos + 1 + n], t == C.T_DATE), pos + 1 + n
        if t == C.T_TIME:
            n = buf[pos]
            return _decode_time(buf[pos + 1:pos + 1 + n]), pos + 1 + n
    except (struct.error, IndexError):
        raise ProtocolError("truncated parameter value") from None
    v, pos = read_lenenc_str(buf, pos)
    if v is None:
        raise ProtocolError("bad parameter value")
    if t in C.DECIMAL_TYPES:   # MariaDB reads other text (abc, 1_0, NaN) with a warning as the number it begins with
        if not _DECIMAL_TEXT.fullmatch(v):
            raise ProtocolError("a DECIMAL parameter that is not a plain number")
        return Decimal(v.decode("ascii")), pos
    return v, pos


class _Float32(float):
    """A FLOAT parameter: printed with the fewest digits that read back as the same float32."""


def _decode_datetime(b: bytes, date_only: bool) -> _dt.date | _dt.datetime | str:
    if len(b) not in (0, 4, 7, 11):
        raise ProtocolError("bad DATETIME parameter")
    y, mo, d = (struct.unpack_from("<HBB", b) if b else (0, 0, 0))
    h, mi, s = (b[4], b[5], b[6]) if len(b) >= 7 else (0, 0, 0)
    us = int.from_bytes(b[7:11], "little") if len(b) == 11 else 0
    try:
        if date_only:
            return _dt.date(y, mo, d)
        return _dt.datetime(y, mo, d, h, mi, s, us)
    except (ValueError, OverflowError):  # zero dates and other values Python cannot hold go as text
        text = f"{y:04d}-{mo:02d}-{d:02d}"
        if not date_only:
            text += f" {h:02d}:{mi:02d}:{s:02d}" + (f".{us:06d}" if us else "")
        return text


def _decode_time(b: bytes) -> _dt.timedelta:
    if len(b) not in (0, 8, 12):
        raise ProtocolError("bad TIME parameter")
    if not b:
        return _dt.timedelta(0)
    neg, days, h, mi, s = struct.unpack_from("<BIBBB", b)
    us = int.from_bytes(b[8:12], "little") if len(b) == 12 else 0
    try:
        td = _dt.timedelta(days=days, hours=h, minutes=mi, seconds=s, microseconds=us)
    except OverflowError:  # a day count beyond what timedelta holds (the wire allows 2**32 - 1)
        raise ProtocolError("bad TIME parameter") from None
    return -td if neg else td


# ---------------------------------------------------------------------------------------------
# Parameters as SQL literals
# ---------------------------------------------------------------------------------------------

_BACKSLASH_ESCAPES = {"\\": "\\\\", "'": "\\'", "\0": "\\0", "\n": "\\n", "\r": "\\r", "\x1a": "\\Z"}
_NEEDS_ESCAPE = re.compile(r"[\\'\0\n\r\x1a]")


def quote_string(text: str, backslash_escapes: bool = True) -> str:
    """A '...' literal for text; with NO_BACKSLASH_ESCAPES only quotes are doubled."""
    if not backslash_escapes:
        return "'" + text.replace("'", "''") + "'"
    if _NEEDS_ESCAPE.search(text) is None:
        return "'" + text + "'"
    return "'" + _NEEDS_ESCAPE.sub(lambda m: _BACKSLASH_ESCAPES[m.group(0)], text) + "'"


def _format_float32(x: float) -> str:
    for digits in range(6, 10):
        s = f"{x:.{digits}g}"
        if struct.unpack("<f", struct.pack("<f", float(s)))[0] == x:
            return s
    return repr(x)


def _format_timedelta(td: _dt.timedelta) -> str:
    neg = td < _dt.timedelta(0)
    td = -td if neg else td
    total_us = (td.days * 86400 + td.seconds) * 1_000_000 + td.microseconds
    secs, us = divmod(total_us, 1_000_000)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    out = f"{'-' if neg else ''}{h:02d}:{m:02d}:{s:02d}"
    return out + (f".{us:06d}" if us else "")


def sql_literal(value: object, backslash_escapes: bool = True) -> str:
    """A parameter value as the SQL literal that stands in for its `?`.

    Text that is valid UTF-8 becomes a quoted string (so a string sharding key still routes);
    other bytes become X'..' so nothing depends on the connection charset.
    """
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("FLOAT/DOUBLE parameter is not a finite number")
        text = _format_float32(value) if isinstance(value, _Float32) else repr(value)
        # an exponent makes it a DOUBLE literal, as the bound parameter is (2.0 alone would be a DECIMAL)
        return text if "e" in text else text + "e0"
    if isinstance(value, (bytes, bytearray, memoryview)):
        b = bytes(value)
        try:
            text = b.decode("utf-8")
        except UnicodeDecodeError:
            return "X'" + b.hex().upper() + "'" if b else "''"
        return quote_string(text, backslash_escapes)
    if isinstance(value, _dt.datetime):
        s = value.strftime("%Y-%m-%d %H:%M:%S")
        return f"'{s}.{value.microsecond:06d}'" if value.microsecond else f"'{s}'"
    if isinstance(value, _dt.date):
        return f"'{value.isoformat()}'"
    if isinstance(value, _dt.timedelta):
        return f"'{_format_timedelta(value)}'"
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, str):
        return quote_string(value, backslash_escapes)
    raise TypeError(f"cannot write {type(value).__name__} as an SQL literal")


_LIMIT_WORDS = frozenset({"LIMIT", "OFFSET"})
_U64 = (1 << 64) - 1


def limit_placeholders(tokens: list[tuple[str, str, int, int]]) -> frozenset[int]:
    """Which placeholders (by their order) stand for a LIMIT row count or offset: `LIMIT ?`,
    `LIMIT ?, ?` (also after a number), `OFFSET ?`, `FETCH FIRST|NEXT ?`."""
    out: set[int] = set()
    k = -1
    for i, t in enumerate(tokens):
        if t[0] != "p":
            continue
        k += 1
        prev = tokens[i - 1] if i else None
        if prev is None:
            continue
        if prev[0] == "w" and prev[1].upper() in _LIMIT_WORDS:
            out.add(k)
        elif (prev[1] == "," and i >= 3 and tokens[i - 2][0] in "pn" and tokens[i - 3][0] == "w"
              and tokens[i - 3][1].upper() == "LIMIT"):
            out.add(k)
        elif (prev[0] == "w" and prev[1].upper() in ("FIRST", "NEXT") and i >= 2 and tokens[i - 2][0] == "w"
              and tokens[i - 2][1].upper() == "FETCH"):
            out.add(k)
    return frozenset(out)


def limit_literal(value: object) -> str:
    """A parameter bound in LIMIT/OFFSET, as the unsigned integer MariaDB reads it there whatever its
    type: a DOUBLE rounded half to even (2.5 -> 2, 2.7 -> 3), NULL as 0, a negative integer wrapped
    to 64 bits. Values MariaDB would read some other way (fractional decimals, text that is not a
    whole number, dates) raise ValueError."""
    if value is None:
        return "0"
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("LIMIT parameter is not a finite number")
        value = round(value)
    elif isinstance(value, Decimal):
        if value != value.to_integral_value():
            raise ValueError(f"LIMIT parameter {value} is not a whole number")
        value = int(value)
    elif isinstance(value, (bytes, bytearray)):
        text = bytes(value).strip()
        if not re.fullmatch(rb"[+-]?[0-9]{1,20}", text):
            raise ValueError(f"LIMIT parameter {bytes(value)[:40]!r} is not a whole number")
        value = int(text)
    if not isinstance(value, int) or not -(1 << 63) <= value <= _U64:
        raise ValueError(f"LIMIT parameter {value!r} is not a 64-bit whole number")
    return str(value & _U64)


def placeholder_positions(tokens: list[tuple[str, str, int, int]]) -> tuple[tuple[int, int], ...]:
    """(start, end) of every `?` placeholder token, in order."""
    return tuple((t[2], t[3]) for t in tokens if t[0] == "p")


def substitute(sql: str, positions: tuple[tuple[int, int], ...], literals: list[str]) -> str:
    """The statement text with each placeholder replaced by its literal."""
    if len(positions) != len(literals):
        raise ValueError("one literal per placeholder")
    out: list[str] = []
    pos = 0
    for (s, e), lit in zip(positions, literals):
        out.append(sql[pos:s])
        # keep tokens apart: `id=?` -> `id=5`, but `a-?` with -5 must not become `a--5` (a comment)
        if lit[:1] == "-" and s and sql[s - 1] == "-":
            out.append(" ")
        out.append(lit)
        pos = e
    out.append(sql[pos:])
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Responses
# ---------------------------------------------------------------------------------------------

_KEY_EXECUTE = struct.Struct("<IBIBBBBq")   # id, flags, iterations, NULL bitmap, types bound, type, sign, value
_KEY_EXECUTE_HEAD = b"\x16\x00\x00\x00\x17"    # a 22-byte payload, sequence 0, COM_STMT_EXECUTE


def execute_key(stmt_id: int, key: int) -> bytes:
    """A framed COM_STMT_EXECUTE of a backend statement with one BIGINT parameter: a prepared point read
    forwarded with its key (the type always sent: the statement may be new on the connection)."""
    return _KEY_EXECUTE_HEAD + _KEY_EXECUTE.pack(stmt_id, 0, 1, 0, 1, C.T_LONGLONG, 0, key)


def prepare_ok(stmt_id: int, columns: int, params: int, warnings: int = 0) -> bytes:
    """The COM_STMT_PREPARE_OK payload."""
    return b"\x00" + struct.pack("<IHHBH", stmt_id, columns, params, 0, warnings)


@dataclass(frozen=True)
class PrepareOk:
    """A decoded COM_STMT_PREPARE_OK with the raw definition payloads that followed it."""

    stmt_id: int
    columns: int
    params: int
    warnings: int
    param_defs: tuple[bytes, ...]
    column_defs: tuple[bytes, ...]


def parse_prepare_response(data: bytes, deprecate_eof: bool) -> PrepareOk:
    """Decode a whole framed COM_STMT_PREPARE answer (the caller checked it is not an ERR)."""
    f = PacketFramer(max_payload=1 << 30)
    f.feed(data)
    pkts = [p for _, p in f.packets()]
    if not pkts or pkts[0][:1] != b"\x00" or len(pkts[0]) < 12:
        raise ProtocolError("bad COM_STMT_PREPARE response")
    stmt_id, ncols, nparams, _, warnings = struct.unpack_from("<IHHBH", pkts[0], 1)
    pos = 1
    params = tuple(pkts[pos:pos + nparams])
    pos += nparams
    if nparams and not deprecate_eof:
        pos += 1
    cols = tuple(pkts[pos:pos + ncols])
    if len(params) != nparams or len(cols) != ncols:
        raise ProtocolError("truncated COM_STMT_PREPARE response")
    return PrepareOk(stmt_id, ncols, nparams, warnings, params, cols)


def _null_bitmap(values: list[bytes | None], offset: int) -> bytearray:
    bm = bytearray((len(values) + 7 + offset) // 8)
    for i, v in enumerate(values):
        if v is None:
            j = i + offset
            bm[j >> 3] |= 1 << (j & 7)
    return bm


def _datetime_bytes(text: bytes) -> bytes:
    """DATE/DATETIME/TIMESTAMP text as its binary form (length byte first)."""
    s = text.decode("ascii")
    date, _, time = s.partition(" ")
    parts = date.split("-")
    if len(parts) != 3:
        raise ValueError(f"bad date value {s!r}")
    y, mo, d = (int(p) for p in parts)
    h = mi = sec = us = 0
    if time:
        hms, _, frac = time.partition(".")
        h, mi, sec = (int(p) for p in hms.split(":"))
        us = int((frac + "000000")[:6]) if frac else 0
    if us:
        return struct.pack("<BHBBBBBI", 11, y, mo, d, h, mi, sec, us)
    if h or mi or sec:
        return struct.pack("<BHBBBBB", 7, y, mo, d, h, mi, sec)
    if y or mo or d:
        return struct.pack("<BHBB", 4, y, mo, d)
    return b"\x00"


def _time_bytes(text: bytes) -> bytes:
    """TIME text ([-]HHH:MM:SS[.ffffff]) as its binary form (length byte first)."""
    s = text.decode("ascii")
    neg = s.startswith("-")
    if neg:
        s = s[1:]
    hms, _, frac = s.partition(".")
    parts = hms.split(":")
    if len(parts) != 3:
        raise ValueError(f"bad time value {text!r}")
    h, mi, sec = (int(p) for p in parts)
    us = int((frac + "000000")[:6]) if frac else 0
    days, h = divmod(h, 24)
    if us:
        return struct.pack("<BBIBBBI", 12, neg, days, h, mi, sec, us)
    if days or h or mi or sec:
        return struct.pack("<BBIBBB", 8, neg, days, h, mi, sec)
    return b"\x00"


def binary_value(v: bytes, typ: int, unsigned: bool) -> bytes:
    """One non-NULL text-protocol value as its binary-protocol encoding for a column type."""
    size = _INT_SIZES.get(typ)
    if size is not None:
        return (int(v) & ((1 << (8 * size)) - 1)).to_bytes(size, "little")  # two's complement or unsigned
    if typ == C.T_DOUBLE:
        return struct.pack("<d", float(v))
    if typ == C.T_FLOAT:
        return struct.pack("<f", float(v))
    if typ in _DATE_TYPES:
        return _datetime_bytes(v)
    if typ == C.T_TIME:
        return _time_bytes(v)
    return lenenc_int(len(v)) + v


def encode_binary_row(values: list[bytes | None], types: list[tuple[int, bool]]) -> bytes:
    """A binary-protocol row payload from text values and (type, unsigned) per column."""
    out = bytearray(b"\x00")
    out += _null_bitmap(values, 2)
    for v, (typ, unsigned) in zip(values, types):
        if v is not None and typ != C.T_NULL:
            out += binary_value(v, typ, unsigned)
    return bytes(out)


_FIRST, _COLDEFS, _COLS_EOF, _ROWS, _DONE = range(5)


_COLTYPES: dict[bytes, tuple[int, bool]] = {}  # column definition bytes -> (type, unsigned), bounded


def column_type(coldef: bytes) -> tuple[int, bool]:
    """(type, unsigned) of a column definition payload, remembered (the same definitions repeat)."""
    t = _COLTYPES.get(coldef)
    if t is None:
        c = parse_column_def(coldef)
        t = (c.type, bool(c.flags & C.UNSIGNED_FLAG))
        if len(_COLTYPES) >= 4096:
            _COLTYPES.clear()
        _COLTYPES[coldef] = t
    return t


# Column types whose binary value is the text one (a length-encoded string) in both protocols.
_RECODED = frozenset({*_INT_SIZES, C.T_DOUBLE, C.T_FLOAT, C.T_TIME, C.T_NULL, *_DATE_TYPES})
_WHOLE_MAX = 65536   # larger answers stream through the converter (they rarely come whole in one read)
# result head bytes -> (types, the lead of a row without NULL when every column is such a string), bounded
_HEADS: dict[bytes, tuple[list[tuple[int, bool]], bytes | None]] = {}


def _head_kinds(head: bytes, ncols: int) -> tuple[list[tuple[int, bool]], bytes | None]:
    """(type, unsigned) of each column of a framed result head, and when every one is a string in both
    protocols, what a binary row without NULL starts with (0x00 and an empty NULL bitmap)."""
    types = []
    pos = 4 + (head[0] | head[1] << 8 | head[2] << 16)
    for _ in range(ncols):
        end = pos + 4 + (head[pos] | head[pos + 1] << 8 | head[pos + 2] << 16)
        types.append(column_type(bytes(head[pos + 4:end])))
        pos = end
    return types, None if any(t in _RECODED for t, _ in types) else bytes(1 + (ncols + 9) // 8)


def _no_null(data: bytes, pos: int, end: int, ncols: int) -> bool:
    """Whether the text row payload data[pos:end] is ncols non-NULL values filling it exactly."""
    for _ in range(ncols):
        if pos >= end:
            return False
        c = data[pos]
        if c < 0xFB:
            pos += 1 + c
        elif c == 0xFC:
            pos += 3 + (data[pos + 1] | data[pos + 2] << 8)
        elif c == 0xFD:
            pos += 4 + (data[pos + 1] | data[pos + 2] << 8 | data[pos + 3] << 16)
        else:
            return False  # NULL (0xFB), or a value of 16 MB or more: the general path
    return pos == end


def binary_answer(data: bytes, deprecate_eof: bool) -> tuple[bytes, int] | None:
    """(binary answer, rows) when data is exactly one whole text result set that ends the answer (the usual
    point read, relayed whole): the head and the end pass as they are and each row is re-encoded in place,
    a row of columns that are length-encoded strings in both protocols only gaining its NULL bitmap; else
    None, and BinaryResultConverter goes packet by packet (and raises what is wrong)."""
    n = len(data)
    if n < 5 or n > _WHOLE_MAX:
        return None
    ncols = data[4]
    if not 0 < ncols < 0xFB:
        return None   # an OK, an ERR, a column count past 250
    pos = 4 + (data[0] | data[1] << 8 | data[2] << 16)
    for _ in range(ncols if deprecate_eof else ncols + 1):  # column definitions (and their EOF)
        if pos + 4 > n:
            return None
        pos += 4 + (data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16)
    if pos > n:
        return None
    head = data[:pos]
    kinds = _HEADS.get(head)
    if kinds is None:
        kinds = _head_kinds(head, ncols)
        if len(_HEADS) >= 1024:
            _HEADS.clear()
        _HEADS[head] = kinds
    types, lead = kinds
    out = [head]
    rows = 0
    while pos + 4 < n:
        length = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
        end = pos + 4 + length
        if length >= 0xFFFFFF or end > n:
            return None
        b = data[pos + 4]
        if b == 0xFE and (length < 9 or deprecate_eof):   # the EOF (or OK) after the rows
            if end != n:
                return None
            status = (parse_ok(data[pos + 4:end]).status if deprecate_eof and length >= 7
                      else eof_status(data[pos + 4:end]))
            if status & C.STATUS_MORE_RESULTS:
                return None
            out.append(data[pos:end])
            return b"".join(out), rows
        if b == 0xFF:
            return None
        if lead is not None and _no_null(data, pos + 4, end, ncols):
            row = lead + data[pos + 4:end]
        else:
            row = encode_binary_row(decode_text_row(data[pos + 4:end], ncols), types)
        if len(row) >= 0xFFFFFF:
            return None
        out.append((len(row) | data[pos + 3] << 24).to_bytes(4, "little") + row)
        rows += 1
        pos = end
    return None


class BinaryResultConverter:
    """Turns a framed text-protocol response into the binary-protocol response of COM_STMT_EXECUTE.

    Feed it the bytes of a text response in order (any chunking); it returns the converted framed
    packets as soon as each input packet is complete, so a large result streams through holding one
    row at a time. OK, ERR and column definitions pass unchanged; only rows are re-encoded, and the
    sequence ids are renumbered from the first packet's.
    """

    def __init__(self, deprecate_eof: bool) -> None:
        self.deprecate_eof = deprecate_eof
        self.state = _FIRST
        self.done = False
        self.rows = 0
        self._buf = b""
        self._parts: list[bytes] = []
        self._seq: int | None = None
        self._ncols = 0
        self._left = 0
        self._types: list[tuple[int, bool]] = []

    def feed(self, data: bytes) -> bytes:
        """Consume bytes of the text response; return the binary-protocol bytes ready so far."""
        if self.state == _FIRST and self._seq is None and not self._buf:
            whole = binary_answer(data, self.deprecate_eof)
            if whole is not None:
                self.rows = whole[1]
                self._finish()
                return whole[0]
        if self._buf:
            data = self._buf + bytes(data)
            self._buf = b""
        out: list[bytes] = []
        pos = 0
        n = len(data)
        while n - pos >= 4:
            length = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
            end = pos + 4 + length
            if end > n:
                break
            if self._seq is None:
                self._seq = data[pos + 3]
            payload = bytes(data[pos + 4:end])
            pos = end
            if length == 0xFFFFFF or self._parts:  # a packet over 16 MB arrives in pieces: join them
                self._parts.append(payload)
                if length == 0xFFFFFF:
                    continue
                payload = b"".join(self._parts)
                self._parts = []
            out.append(self._emit(self._convert(payload)))
        if pos < n:
            self._buf = bytes(data[pos:])
        return b"".join(out)

    def _emit(self, payload: bytes) -> bytes:
        seq = self._seq or 0
        if len(payload) < 0xFFFFFF:
            self._seq = (seq + 1) & 0xFF
            return struct.pack("<I", len(payload) | (seq << 24)) + payload
        data = frame(seq, payload)
        self._seq = packets_seq_after(seq, len(payload))
        return data

    def _convert(self, p: bytes) -> bytes:
        st = self.state
        if st == _ROWS:
            first = p[0] if p else 0
            if first == 0xFE and len(p) < 0xFFFFFF:
                self._after(parse_ok(p).status if self.deprecate_eof and len(p) >= 7 else eof_status(p))
                return p
            if first == 0xFF:
                self._finish()
                return p
            self.rows += 1
            return encode_binary_row(decode_text_row(p, self._ncols), self._types)
        if st == _FIRST:
            first = p[0] if p else 0
            if first == 0x00:
                self._after(parse_ok(p).status)
            elif first == 0xFF:
                self._finish()
            elif first == 0xFB:
                raise ProtocolError("LOCAL INFILE is not supported")
            else:
                n, _ = _read_count(p)
                self._ncols = self._left = n
                self._types = []
                self.state = _COLDEFS
            return p
        if st == _COLDEFS:
            self._types.append(column_type(p))
            self._left -= 1
            if self._left == 0:
                self.state = _ROWS if self.deprecate_eof else _COLS_EOF
            return p
        if st == _COLS_EOF:
            self.state = _ROWS
            return p
        raise ProtocolError("packet after the end of the response")

    def _after(self, status: int) -> None:
        if status & C.STATUS_MORE_RESULTS:
            self.state = _FIRST
        else:
            self._finish()

    def _finish(self) -> None:
        self.state = _DONE
        self.done = True


def _read_count(p: bytes) -> tuple[int, int]:
    n, pos = read_lenenc_int(p, 0)
    if not n:
        raise ProtocolError("bad column count")
    return n, pos


__all__ = [
    "BinaryResultConverter", "ExecuteRequest", "IntParams", "binary_answer", "LONG_DATA", "LAST_STATEMENT_ID", "ParamType", "PrepareOk",
    "binary_value", "decode_param", "encode_binary_row", "execute_key", "limit_literal", "limit_placeholders", "parse_execute",
    "parse_prepare_response",
    "parse_send_long_data", "placeholder_positions", "prepare_ok", "quote_string", "sql_literal",
    "stmt_id_of", "substitute",
]
