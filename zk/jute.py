"""ZooKeeper's client wire format, sans I/O: frames, the session handshake, request and reply headers,
watch events. Request bodies and reply values are kazoo's codec (kazoo.protocol.serialization).

Every message is a 4-byte big-endian length and a payload. A request payload is `xid, type` and the
body; a reply payload is `xid, zxid, err` and the value. Special xids: -1 a watch event, -2 a ping
answer, -4 an auth answer. The handshake (first message each way) has no header at all.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import EXCEPTIONS, NoNodeError
from kazoo.protocol.serialization import Auth, Connect, Exists, Transaction, Watch

WATCH_XID, PING_XID, AUTH_XID = -1, -2, -4
PING_TYPE, CLOSE_TYPE = 11, -11
MAX_FRAME = 64 * 1024 * 1024   # far above ZooKeeper's jute.maxbuffer: anything larger is garbage
_LEN = struct.Struct("!i")
_HEADER = struct.Struct("!ii")
_REPLY = struct.Struct("!iqi")


class FrameError(Exception):
    """The server sent something that is not a ZooKeeper frame."""


class Framer:
    """Bytes from the socket in, whole payloads out (a frame may arrive in any number of pieces)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos = 0
        while len(buf) - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if n < 0 or n > MAX_FRAME:
                raise FrameError(f"frame length {n} out of range")
            if len(buf) - pos - 4 < n:
                break
            out.append(bytes(buf[pos + 4:pos + 4 + n]))
            pos += 4 + n
        if pos:
            del buf[:pos]
        return out


def frame(payload: bytes) -> bytes:
    """A payload with its length in front."""
    return _LEN.pack(len(payload)) + payload


@dataclass(frozen=True)
class Handshake:
    """The server's answer to a connect request; timeout_ms <= 0 means the session has expired."""

    timeout_ms: int
    session_id: int
    passwd: bytes
    read_only: bool


def connect_request(last_zxid: int, timeout_ms: int, session_id: int, passwd: bytes) -> bytes:
    """The first frame of a connection: a new session (id 0) or the resumption of ours."""
    return frame(bytes(Connect(0, last_zxid, timeout_ms, session_id, passwd, False).serialize()))


def parse_handshake(payload: bytes) -> Handshake:
    """The first frame the server sends back."""
    try:
        c, _ = Connect.deserialize(payload, 0)
    except (struct.error, TypeError) as e:
        raise FrameError(f"bad connect answer: {e}") from None
    return Handshake(c.time_out, c.session_id, bytes(c.passwd or b""), c.read_only)


def request(xid: int, req: Any) -> bytes:
    """A framed request: header and kazoo's serialized body."""
    return frame(_HEADER.pack(xid, req.type) + bytes(req.serialize()))


def ping() -> bytes:
    """A heartbeat (the server answers with xid -2)."""
    return frame(_HEADER.pack(PING_XID, PING_TYPE))


def close(xid: int) -> bytes:
    """End the session now (its ephemeral nodes go at once)."""
    return frame(_HEADER.pack(xid, CLOSE_TYPE))


def auth(scheme: str, credential: str) -> bytes:
    """Add an identity to the connection (digest "user:password")."""
    body = Auth(0, scheme, credential)
    return frame(_HEADER.pack(AUTH_XID, body.type) + bytes(body.serialize()))


@dataclass(frozen=True)
class ReplyHeader:
    xid: int
    zxid: int
    err: int


def parse_reply(payload: bytes) -> tuple[ReplyHeader, int]:
    """The reply header and where the value starts."""
    if len(payload) < _REPLY.size:
        raise FrameError(f"reply of {len(payload)} bytes is shorter than its header")
    return ReplyHeader(*_REPLY.unpack_from(payload, 0)), _REPLY.size


def parse_watch(payload: bytes, offset: int) -> Watch:
    """A watch event (xid -1): numeric type and state, the full path."""
    try:
        watch, end = Watch.deserialize(payload, offset)
    except (struct.error, UnicodeDecodeError) as e:
        raise FrameError(f"bad watch event: {e}") from None
    if end > len(payload):
        raise FrameError("watch event shorter than its path")
    return watch


def reply_value(req: Any, err: int, payload: bytes, offset: int) -> Any:
    """The request's result, or the exception instance it failed with (an exists() on a missing
    node is not a failure: None); FrameError when the value cannot be read."""
    if err:
        if err == NoNodeError.code and req.type == Exists.type:
            return None
        cls = EXCEPTIONS[err]
        return cls()
    try:
        return req.deserialize(payload, offset)
    except (struct.error, UnicodeDecodeError, KeyError) as e:
        raise FrameError(f"bad answer to a {type(req).__name__}: {e}") from None


def is_transaction(req: Any) -> bool:
    return req.type == Transaction.type
