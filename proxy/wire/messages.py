"""Encoders and decoders for OK, ERR, EOF, column definitions and text rows."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from meta.errors import wire_error

from proxy.wire.constants import CHARSET_UTF8MB4_GENERAL_CI, T_VAR_STRING
from proxy.wire.packets import ProtocolError, lenenc_int, lenenc_str, read_lenenc_int, read_lenenc_str


_COUNTS = re.compile(rb"^(Records|Rows matched): ([0-9]+)  (Duplicates|Changed): ([0-9]+)  Warnings: [0-9]+$")


@dataclass(frozen=True)
class OkInfo:
    affected_rows: int = 0
    last_insert_id: int = 0
    status: int = 0
    warnings: int = 0
    info: bytes = b""

    def counts(self) -> tuple[bytes, int, int] | None:
        """('Records', records, duplicates) or ('Rows matched', matched, changed) of MariaDB's info text,
        what a statement over several nodes sums: None without one."""
        m = _COUNTS.match(read_lenenc_str(self.info, 0)[0] or b"") if self.info else None
        return None if m is None else (m.group(1), int(m.group(2)), int(m.group(4)))


@dataclass(frozen=True)
class ErrInfo:
    code: int
    sqlstate: str
    message: str


def ok_packet(affected_rows: int = 0, last_insert_id: int = 0, status: int = 0,
              warnings: int = 0, info: bytes = b"", header: int = 0x00) -> bytes:
    """An OK payload (header 0xFE makes it the DEPRECATE_EOF end-of-rows marker)."""
    out = bytes((header,)) + lenenc_int(affected_rows) + lenenc_int(last_insert_id)
    out += struct.pack("<HH", status, warnings)
    if info:
        out += info
    return out


def err_packet(code: int, sqlstate: str, message: str) -> bytes:
    """An ERR payload with its SQLSTATE marker; every ERR pydble writes is built here, so a
    client-library code (2000-2999) raised anywhere is turned into a server code on the way out."""
    code, sqlstate = wire_error(code, sqlstate)
    state = (sqlstate or "HY000").encode("ascii", "replace")[:5].ljust(5, b"0")
    return b"\xff" + struct.pack("<H", code) + b"#" + state + message.encode("utf-8", "replace")


def eof_packet(warnings: int = 0, status: int = 0) -> bytes:
    """A classic EOF payload."""
    return b"\xfe" + struct.pack("<HH", warnings, status)


def end_packet(status: int, deprecate_eof: bool, warnings: int = 0) -> bytes:
    """The end-of-rows marker (and COM_SET_OPTION's answer): a classic EOF, or for a client that asked for
    DEPRECATE_EOF an OK headed 0xFE, as MariaDB sends them."""
    return ok_packet(0, 0, status, warnings, header=0xFE) if deprecate_eof else eof_packet(warnings, status)


def parse_ok(payload: bytes) -> OkInfo:
    """Decode an OK (0x00) or OK-as-EOF (0xFE) payload."""
    affected, pos = read_lenenc_int(payload, 1)
    insert_id, pos = read_lenenc_int(payload, pos)
    if pos + 4 > len(payload):
        raise ProtocolError("truncated OK packet")
    status, warnings = struct.unpack_from("<HH", payload, pos)
    return OkInfo(affected or 0, insert_id or 0, status, warnings, bytes(payload[pos + 4:]))


def parse_err(payload: bytes) -> ErrInfo:
    """Decode an ERR payload."""
    if len(payload) < 3 or payload[0] != 0xFF:
        raise ProtocolError("not an ERR packet")
    code = struct.unpack_from("<H", payload, 1)[0]
    if len(payload) >= 9 and payload[3] == 0x23:  # '#'
        return ErrInfo(code, payload[4:9].decode("ascii", "replace"),
                       payload[9:].decode("utf-8", "replace"))
    return ErrInfo(code, "HY000", payload[3:].decode("utf-8", "replace"))


def eof_status(payload: bytes) -> int:
    """Status flags of a classic EOF payload."""
    if len(payload) < 5:
        return 0
    return payload[3] | (payload[4] << 8)


def is_eof(payload: bytes) -> bool:
    """True for a classic EOF or the OK that replaces it (never a row: rows starting 0xFE are 9+ bytes)."""
    return len(payload) < 9 and payload[:1] == b"\xfe"


@dataclass(frozen=True)
class ColumnDef:
    """A Protocol::ColumnDefinition41, kept with its raw bytes so it can be re-sent unchanged."""

    name: str
    type: int = T_VAR_STRING
    charset: int = CHARSET_UTF8MB4_GENERAL_CI
    length: int = 255
    flags: int = 0
    decimals: int = 0
    schema: str = ""
    table: str = ""
    org_table: str = ""
    org_name: str = ""
    catalog: str = "def"
    raw: bytes | None = None

    def encode(self) -> bytes:
        """The column definition payload (the raw bytes when unchanged)."""
        if self.raw is not None:
            return self.raw
        def s(v: str) -> bytes:
            return lenenc_str(v.encode("utf-8"))
        return (s(self.catalog) + s(self.schema) + s(self.table) + s(self.org_table)
                + s(self.name) + s(self.org_name) + b"\x0c"
                + struct.pack("<HIBHB", self.charset, self.length, self.type, self.flags,
                              self.decimals) + b"\x00\x00")

    def renamed(self, name: str, **changes: int) -> ColumnDef:
        """A copy under another name (and optionally other type fields), re-encoded."""
        from dataclasses import replace
        return replace(self, name=name, org_name=name, raw=None, **changes)


def parse_column_def(payload: bytes) -> ColumnDef:
    """Decode a ColumnDefinition41 payload."""
    pos = 0
    vals = []
    for _ in range(6):
        v, pos = read_lenenc_str(payload, pos)
        vals.append((v or b"").decode("utf-8", "replace"))
    n, pos = read_lenenc_int(payload, pos)
    if n is None or pos + 10 > len(payload):
        raise ProtocolError("truncated column definition")
    charset, length, typ, flags, decimals = struct.unpack_from("<HIBHB", payload, pos)
    catalog, schema, table, org_table, name, org_name = vals
    return ColumnDef(name, typ, charset, length, flags, decimals, schema, table, org_table,
                     org_name, catalog, bytes(payload))


def decode_text_row(payload: bytes, ncols: int) -> list[bytes | None]:
    """Split a text-protocol row into its values (bytes, or None for NULL)."""
    out: list[bytes | None] = []
    pos = 0
    n = len(payload)
    for _ in range(ncols):
        if pos >= n:
            raise ProtocolError("truncated row")
        first = payload[pos]
        if first < 251:
            end = pos + 1 + first
            out.append(payload[pos + 1:end])
            pos = end
        elif first == 0xFB:
            out.append(None)
            pos += 1
        else:
            v, pos = read_lenenc_str(payload, pos)
            out.append(v)
    if pos > n:
        raise ProtocolError("truncated row")
    return out


def encode_text_row(values: list[bytes | None] | tuple[bytes | None, ...]) -> bytes:
    """Encode values (bytes or None) as a text-protocol row."""
    parts = []
    for v in values:
        if v is None:
            parts.append(b"\xfb")
        elif len(v) < 251:
            parts.append(bytes((len(v),)))
            parts.append(v)
        else:
            parts.append(lenenc_int(len(v)))
            parts.append(v)
    return b"".join(parts)


def to_text(v: object) -> bytes | None:
    """A Python value as text-protocol bytes."""
    if v is None:
        return None
    if isinstance(v, bytes):
        return v
    if isinstance(v, bool):
        return b"1" if v else b"0"
    return str(v).encode("utf-8")


@dataclass
class ResultSet:
    """A decoded result: column definitions and text rows (only used where nodes are merged)."""

    columns: list[ColumnDef]
    rows: list[list[bytes | None]]
    ok: OkInfo | None = None


def encode_resultset(rs: ResultSet, seq: int, status: int, deprecate_eof: bool,
                     warnings: int = 0) -> tuple[bytes, int]:
    """Frame a whole text result set starting at seq; return the bytes and the next seq."""
    from proxy.wire.packets import frame
    out = [frame(seq, lenenc_int(len(rs.columns)))]
    seq += 1
    for c in rs.columns:
        out.append(frame(seq, c.encode()))
        seq += 1
    if not deprecate_eof:
        out.append(frame(seq, eof_packet(warnings, status)))
        seq += 1
    for row in rs.rows:
        payload = encode_text_row(row)
        out.append(frame(seq, payload))
        seq += 1 + len(payload) // 0xFFFFFF
    out.append(frame(seq, end_packet(status, deprecate_eof, warnings)))
    return b"".join(out), (seq + 1) & 0xFF
