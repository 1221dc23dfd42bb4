"""A raw prepared-statement client for the tests: COM_STMT_* exactly as libmariadb/sysbench send them.

Written from the protocol documentation, independently of proxy/wire/binary.py, so the tests can
compare the proxy's answers byte for byte with what MariaDB itself sends for the same statement.
"""

from __future__ import annotations

import hashlib
import socket
import struct
from dataclasses import dataclass, field

HOST = "127.0.0.1"
CAPS = (1 | 4 | (1 << 9) | (1 << 13) | (1 << 15) | (1 << 16) | (1 << 17) | (1 << 18) | (1 << 19))
CONNECT_WITH_DB = 8
DEPRECATE_EOF = 1 << 24

T_TINY, T_SHORT, T_LONG, T_FLOAT, T_DOUBLE, T_NULL = 1, 2, 3, 4, 5, 6
T_LONGLONG, T_DATE, T_TIME, T_DATETIME, T_BLOB, T_VAR_STRING, T_STRING, T_NEWDECIMAL = 8, 10, 11, 12, 0xFC, 0xFD, 0xFE, 0xF6


def _scramble(password: str, salt: bytes) -> bytes:
    if not password:
        return b""
    s1 = hashlib.sha1(password.encode()).digest()
    s2 = hashlib.sha1(salt + hashlib.sha1(s1).digest()).digest()
    return bytes(a ^ b for a, b in zip(s1, s2))


def _lenenc(buf: bytes, pos: int) -> tuple[int | None, int]:
    b = buf[pos]
    if b < 251:
        return b, pos + 1
    if b == 251:
        return None, pos + 1
    size = {252: 2, 253: 3, 254: 8}[b]
    return int.from_bytes(buf[pos + 1:pos + 1 + size], "little"), pos + 1 + size


def lenenc_bytes(b: bytes) -> bytes:
    n = len(b)
    if n < 251:
        return bytes((n,)) + b
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little") + b
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little") + b
    return b"\xfe" + n.to_bytes(8, "little") + b


def column_type(coldef: bytes) -> tuple[str, int, int]:
    """(name, type, flags) of a column definition payload."""
    pos = 0
    vals = []
    for _ in range(6):
        n, pos = _lenenc(coldef, pos)
        vals.append(coldef[pos:pos + (n or 0)])
        pos += n or 0
    pos += 1
    _, _, typ, flags, _ = struct.unpack_from("<HIBHB", coldef, pos)
    return vals[4].decode(), typ, flags


@dataclass
class Prepared:
    stmt_id: int
    columns: int
    params: int
    param_defs: list[bytes] = field(default_factory=list)
    column_defs: list[bytes] = field(default_factory=list)


@dataclass
class Answer:
    """One answer: ok / err / a result set (column defs and raw row payloads)."""

    kind: str
    status: int = 0
    affected: int = 0
    err_code: int = 0
    err_message: str = ""
    column_defs: list[bytes] = field(default_factory=list)
    rows: list[bytes] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)


class PsClient:
    """Just enough of a client: login, COM_QUERY, COM_STMT_PREPARE/EXECUTE/CLOSE/RESET/SEND_LONG_DATA."""

    def __init__(self, port: int, user: str = "test", password: str = "111111", database: str | None = "schema1",
                 deprecate_eof: bool = False, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.buf = b""
        self.deprecate_eof = deprecate_eof
        _, greeting = self.read()
        pos = 1
        pos = greeting.index(b"\x00", pos) + 1
        pos += 4
        salt = greeting[pos:pos + 8]
        pos += 8 + 1
        caps_lo = int.from_bytes(greeting[pos:pos + 2], "little")
        pos += 2 + 1 + 2
        caps_hi = int.from_bytes(greeting[pos:pos + 2], "little")
        pos += 2
        auth_len = greeting[pos]
        pos += 1 + 10
        salt += greeting[pos:pos + max(13, auth_len - 8) - 1]
        server_caps = caps_lo | (caps_hi << 16)
        caps = CAPS | (DEPRECATE_EOF if deprecate_eof else 0) | (CONNECT_WITH_DB if database else 0)
        caps &= server_caps | CONNECT_WITH_DB
        self.deprecate_eof = bool(caps & DEPRECATE_EOF)
        auth = _scramble(password, salt)
        resp = struct.pack("<IIB23x", caps, 1 << 24, 45) + user.encode() + b"\x00" + bytes((len(auth),)) + auth
        if database:
            resp += database.encode() + b"\x00"
        resp += b"mysql_native_password\x00"
        self.send(1, resp)
        _, p = self.read()
        if p[:1] == b"\xfe":  # auth switch
            salt2 = p[p.index(b"\x00", 1) + 1:].rstrip(b"\x00")
            self.send(3, _scramble(password, salt2))
            _, p = self.read()
        if p[:1] != b"\x00":
            raise RuntimeError(f"login failed: {p!r}")

    # -- packets -----------------------------------------------------------------------------
    def send(self, seq: int, payload: bytes) -> None:
        self.sock.sendall(struct.pack("<I", len(payload) | (seq << 24)) + payload)

    def _need(self, n: int) -> None:
        while len(self.buf) < n:
            d = self.sock.recv(1 << 16)
            if not d:
                raise ConnectionError("closed by server")
            self.buf += d

    def read(self) -> tuple[int, bytes]:
        out = b""
        while True:
            self._need(4)
            n = int.from_bytes(self.buf[:3], "little")
            seq = self.buf[3]
            self._need(4 + n)
            out += self.buf[4:4 + n]
            self.buf = self.buf[4 + n:]
            if n < 0xFFFFFF:
                return seq, out

    def answer(self) -> Answer:
        """Read one command's answer (the first result of a multi-result answer)."""
        seq, p = self.read()
        a = Answer("ok", seqs=[seq])
        if p[0] == 0x00:
            a.affected, pos = _lenenc(p, 1)
            _, pos = _lenenc(p, pos)
            a.status = int.from_bytes(p[pos:pos + 2], "little")
            return a
        if p[0] == 0xFF:
            a.kind = "err"
            a.err_code = int.from_bytes(p[1:3], "little")
            a.err_message = p[9:].decode("utf-8", "replace")
            return a
        a.kind = "rows"
        ncols, _ = _lenenc(p, 0)
        for _ in range(ncols or 0):
            seq, c = self.read()
            a.seqs.append(seq)
            a.column_defs.append(c)
        if not self.deprecate_eof:
            seq, _ = self.read()
            a.seqs.append(seq)
        while True:
            seq, p = self.read()
            a.seqs.append(seq)
            if p[:1] == b"\xfe" and len(p) < 0xFFFFFF and (self.deprecate_eof or len(p) < 9):
                if self.deprecate_eof:
                    _, pos = _lenenc(p, 1)
                    _, pos = _lenenc(p, pos)
                    a.status = int.from_bytes(p[pos:pos + 2], "little")
                else:
                    a.status = int.from_bytes(p[3:5], "little")
                return a
            if p[:1] == b"\xff":
                a.kind = "err"
                a.err_code = int.from_bytes(p[1:3], "little")
                a.err_message = p[9:].decode("utf-8", "replace")
                return a
            a.rows.append(p)

    # -- commands ----------------------------------------------------------------------------
    def query(self, sql: str) -> Answer:
        self.send(0, b"\x03" + sql.encode())
        return self.answer()

    def prepare(self, sql: str) -> Prepared | Answer:
        self.send(0, b"\x16" + sql.encode())
        _, p = self.read()
        if p[0] == 0xFF:
            return Answer("err", err_code=int.from_bytes(p[1:3], "little"), err_message=p[9:].decode())
        stmt_id, ncols, nparams = struct.unpack_from("<IHH", p, 1)
        st = Prepared(stmt_id, ncols, nparams)
        for defs, n in ((st.param_defs, nparams), (st.column_defs, ncols)):
            for _ in range(n):
                defs.append(self.read()[1])
            if n and not self.deprecate_eof:
                eof = self.read()[1]
                assert eof[:1] == b"\xfe", eof
        return st

    def execute_packet(self, stmt_id: int, params: list[tuple[int, bool, bytes | None]] | None,
                       send_types: bool = True, flags: int = 0) -> bytes:
        """COM_STMT_EXECUTE; params are (type, unsigned, encoded value or None for NULL)."""
        out = b"\x17" + struct.pack("<IBI", stmt_id, flags, 1)
        if params:
            bm = bytearray((len(params) + 7) // 8)
            for i, (_, _, v) in enumerate(params):
                if v is None:
                    bm[i >> 3] |= 1 << (i & 7)
            out += bytes(bm) + (b"\x01" if send_types else b"\x00")
            if send_types:
                out += b"".join(bytes((t, 0x80 if u else 0)) for t, u, _ in params)
            out += b"".join(v for _, _, v in params if v is not None)
        return out

    def execute(self, stmt_id: int, params: list[tuple[int, bool, bytes | None]] | None = None,
                send_types: bool = True) -> Answer:
        self.send(0, self.execute_packet(stmt_id, params, send_types))
        return self.answer()

    def send_long_data(self, stmt_id: int, param: int, data: bytes) -> None:
        self.send(0, b"\x18" + struct.pack("<IH", stmt_id, param) + data)

    def reset(self, stmt_id: int) -> Answer:
        self.send(0, b"\x1a" + struct.pack("<I", stmt_id))
        return self.answer()

    def close_stmt(self, stmt_id: int) -> None:
        self.send(0, b"\x19" + struct.pack("<I", stmt_id))

    def close(self) -> None:
        try:
            self.send(0, b"\x01")
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> "PsClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- encoding parameter values ----------------------------------------------------------------

def p_long(v: int) -> tuple[int, bool, bytes]:
    return (T_LONG, False, struct.pack("<i", v))


def p_longlong(v: int, unsigned: bool = False) -> tuple[int, bool, bytes]:
    return (T_LONGLONG, unsigned, struct.pack("<Q" if unsigned else "<q", v))


def p_str(v: str | bytes, typ: int = T_STRING) -> tuple[int, bool, bytes]:
    return (typ, False, lenenc_bytes(v.encode() if isinstance(v, str) else v))


def p_double(v: float) -> tuple[int, bool, bytes]:
    return (T_DOUBLE, False, struct.pack("<d", v))


def p_float(v: float) -> tuple[int, bool, bytes]:
    return (T_FLOAT, False, struct.pack("<f", v))


def p_null(typ: int = T_NULL) -> tuple[int, bool, None]:
    return (typ, False, None)


def p_datetime(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0, us: int = 0) -> tuple[int, bool, bytes]:
    if us:
        return (T_DATETIME, False, struct.pack("<BHBBBBBI", 11, y, mo, d, h, mi, s, us))
    return (T_DATETIME, False, struct.pack("<BHBBBBB", 7, y, mo, d, h, mi, s))


def p_time(neg: bool, days: int, h: int, mi: int, s: int, us: int = 0) -> tuple[int, bool, bytes]:
    if us:
        return (T_TIME, False, struct.pack("<BBIBBBI", 12, neg, days, h, mi, s, us))
    return (T_TIME, False, struct.pack("<BBIBBB", 8, neg, days, h, mi, s))
