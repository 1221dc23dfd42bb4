"""Packet framing and length-encoded values: bytes in, packets out, no I/O."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import TypeVar

_S = TypeVar("_S", str, bytes)

from proxy.wire.constants import MAX_PACKET


class ProtocolError(Exception):
    """Bytes that do not follow the MySQL protocol; the connection cannot go on."""


class PacketTooBig(ProtocolError):
    """A logical packet larger than the limit; the peer is told 1153 and disconnected."""

    def __init__(self, limit: int, seq: int) -> None:
        super().__init__(f"packet larger than {limit} bytes")
        self.answer_seq = (seq + 1) & 0xFF   # the refusal follows the header that announced too much, as MariaDB's

    def packet(self) -> bytes:
        """The framed 1153 the peer is told before the close."""
        return frame(self.answer_seq, b"\xff" + struct.pack("<H", 1153) + b"#08S01"
                     + b"Got a packet bigger than 'max_allowed_packet' bytes")


def splice(data: _S, spans: Iterable[tuple[int, int, _S]]) -> _S:
    """data with each (start, end) span, in order and not overlapping, replaced by its text."""
    out = []
    pos = 0
    for start, end, text in spans:
        out.append(data[pos:start])
        out.append(text)
        pos = end
    out.append(data[pos:])
    return data[:0].join(out)


def lenenc_int(n: int) -> bytes:
    """Encode a length-encoded integer."""
    if n < 251:
        return bytes((n,))
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def lenenc_str(b: bytes) -> bytes:
    """Encode a length-encoded string."""
    return lenenc_int(len(b)) + b


def read_lenenc_int(buf: bytes, pos: int) -> tuple[int | None, int]:
    """Decode a length-encoded integer at pos; None stands for the NULL marker 0xFB."""
    try:
        first = buf[pos]
    except IndexError:
        raise ProtocolError("truncated length-encoded integer") from None
    if first < 251:
        return first, pos + 1
    if first == 0xFB:
        return None, pos + 1
    size = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first)
    if size is None or pos + 1 + size > len(buf):
        raise ProtocolError("bad length-encoded integer")
    return int.from_bytes(buf[pos + 1:pos + 1 + size], "little"), pos + 1 + size


def read_lenenc_str(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    """Decode a length-encoded string at pos; None for SQL NULL."""
    n, pos = read_lenenc_int(buf, pos)
    if n is None:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise ProtocolError("truncated length-encoded string")
    return bytes(buf[pos:end]), end


def read_nul_str(buf: bytes, pos: int) -> tuple[bytes, int]:
    """Read a NUL-terminated string."""
    end = buf.find(b"\x00", pos)
    if end < 0:
        raise ProtocolError("missing NUL terminator")
    return bytes(buf[pos:end]), end + 1


def frame(seq: int, payload: bytes) -> bytes:
    """Wrap a payload into one or more packets, splitting at 16 MB as the protocol requires."""
    n = len(payload)
    if n < MAX_PACKET:
        return struct.pack("<I", n | ((seq & 0xFF) << 24)) + payload
    parts = []
    pos = 0
    while True:
        chunk = payload[pos:pos + MAX_PACKET]
        parts.append(struct.pack("<I", len(chunk) | ((seq & 0xFF) << 24)))
        parts.append(chunk)
        seq += 1
        pos += MAX_PACKET
        if len(chunk) < MAX_PACKET:
            break
    return b"".join(parts)


def com_query(sql: str) -> bytes:
    """A framed COM_QUERY: for a big statement one copy of its bytes, not three (encode, prefix, frame)."""
    body = sql.encode("utf-8", "surrogateescape")
    if len(body) + 1 < MAX_PACKET:
        return b"".join((struct.pack("<I", len(body) + 1), b"\x03", body))
    return frame(0, b"\x03" + body)


def packets_seq_after(seq: int, payload_len: int) -> int:
    """The sequence id that follows a payload framed starting at seq."""
    return (seq + payload_len // MAX_PACKET + 1) & 0xFF


class PacketFramer:
    """Turns a byte stream into logical packets (seq, payload), joining 16 MB continuations."""

    def __init__(self, max_payload: int = 64 << 20) -> None:
        self.max_payload = max_payload
        self._buf = bytearray()
        self._parts: list[bytes] = []
        self._parts_len = 0
        self._first_seq = 0

    def feed(self, data: bytes) -> None:
        """Add received bytes; PacketTooBig as soon as a header announces more than the limit."""
        buf = self._buf
        buf += data
        if len(buf) >= 4:
            length = buf[0] | (buf[1] << 8) | (buf[2] << 16)
            if length > self.max_payload or (self._parts and self._parts_len + length > self.max_payload):
                seq = buf[3]
                self.clear()
                raise PacketTooBig(self.max_payload, seq)

    def partial(self) -> bool:
        """A packet has started arriving and is not complete yet."""
        buf = self._buf
        if self._parts or 0 < len(buf) < 4:
            return True
        return len(buf) >= 4 and 4 + (buf[0] | (buf[1] << 8) | (buf[2] << 16)) > len(buf)

    def clear(self) -> None:
        """Drop everything buffered (the connection is gone or refused)."""
        self._buf = bytearray()
        self._parts = []
        self._parts_len = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as packets."""
        return len(self._buf) + self._parts_len

    def take_rest(self) -> bytes:
        """Remove and return the bytes received after the last whole packet (the start of a TLS
        handshake that followed an SSLRequest in the same read)."""
        if self._parts:
            raise ProtocolError("a packet split over 16 MB was cut short")
        rest, self._buf = bytes(self._buf), bytearray()
        return rest

    def packets(self) -> Iterator[tuple[int, bytes]]:
        """Yield every complete logical packet received so far."""
        buf = self._buf
        pos = 0
        try:
            while len(buf) - pos >= 4:
                length = buf[pos] | (buf[pos + 1] << 8) | (buf[pos + 2] << 16)
                if length == MAX_PACKET or self._parts:
                    if self._parts_len + length > self.max_payload:
                        raise PacketTooBig(self.max_payload, buf[pos + 3])
                elif length > self.max_payload:
                    raise PacketTooBig(self.max_payload, buf[pos + 3])
                end = pos + 4 + length
                if end > len(buf):
                    break
                seq = buf[pos + 3]
                with memoryview(buf) as view:
                    payload = bytes(view[pos + 4:end])  # one copy, not a bytearray slice and then bytes
                pos = end
                if length == MAX_PACKET:
                    if not self._parts:
                        self._first_seq = seq
                    self._parts.append(payload)
                    self._parts_len += length
                    continue
                if self._parts:
                    self._parts.append(payload)
                    payload = b"".join(self._parts)
                    seq = self._first_seq
                    self._parts = []
                    self._parts_len = 0
                yield seq, payload
        finally:
            if pos and pos == len(buf) and buf is self._buf:
                self._buf = bytearray()  # all taken: let go of the memory a big packet needed
            elif pos:
                del buf[:pos]
