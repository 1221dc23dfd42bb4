"""A sans-I/O reader for the response to one multi-statement text query.

A metadata load reads thousands of tiny result sets (one row of two strings each). A generic
driver spends most of its time building column descriptors and awaiting each packet; this parser
takes whatever bytes arrived, walks every complete packet in one synchronous loop, skips column
definitions unread, and keeps only the row values. It assumes the classic protocol the drivers
negotiate (CLIENT_PROTOCOL_41 without CLIENT_DEPRECATE_EOF: column definitions and rows each end
with an EOF packet).
"""

from __future__ import annotations

from typing import Any

SERVER_MORE_RESULTS_EXISTS = 0x0008
MAX_PAYLOAD = 0xFFFFFF

_HEADER, _COLUMNS, _ROWS = 0, 1, 2


class ProtocolError(Exception):
    """The bytes are not a well-formed response."""


def _lenenc(buf: Any, p: int) -> tuple[int | None, int]:
    """A length-encoded integer at p: (value or None for NULL, next position)."""
    b = buf[p]
    if b < 0xFB:
        return b, p + 1
    if b == 0xFB:
        return None, p + 1
    if b == 0xFC:
        return buf[p + 1] | buf[p + 2] << 8, p + 3
    if b == 0xFD:
        return buf[p + 1] | buf[p + 2] << 8 | buf[p + 3] << 16, p + 4
    return int.from_bytes(buf[p + 1:p + 9], "little"), p + 9


def com_query(sql: str) -> bytes:
    """The COM_QUERY command as wire packets (split at 16 MB like the protocol requires)."""
    payload = b"\x03" + sql.encode("utf-8", "surrogateescape")
    out = bytearray()
    seq = 0
    while True:
        chunk = payload[:MAX_PAYLOAD]
        payload = payload[MAX_PAYLOAD:]
        out += len(chunk).to_bytes(3, "little") + bytes((seq & 0xFF,)) + chunk
        seq += 1
        if len(chunk) < MAX_PAYLOAD:
            return bytes(out)


class MultiResultParser:
    """Feed it bytes; it collects each statement's rows until the last result or an error."""

    __slots__ = ("_buf", "_state", "_ncols", "_rows", "_long", "results", "error", "done")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._state = _HEADER
        self._ncols = 0
        self._rows: list[tuple[str | None, ...]] = []
        self._long: bytearray | None = None   # a payload split over several 16 MB packets
        self.results: list[list[tuple[str | None, ...]]] = []
        self.error: tuple[int, str] | None = None   # (code, message) of the statement that failed
        self.done = False

    def feed(self, data: bytes) -> None:
        """Consume bytes; sets `done` once the response is complete."""
        if self.done:
            if data:
                raise ProtocolError("bytes after the end of the response")
            return
        buf = self._buf
        buf += data
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            ln = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
            end = pos + 4 + ln
            if end > n:
                break
            start = pos + 4
            pos = end
            if ln == MAX_PAYLOAD or self._long is not None:
                if self._long is None:
                    self._long = bytearray()
                self._long += buf[start:end]
                if ln == MAX_PAYLOAD:
                    continue
                payload, self._long = bytes(self._long), None
                self._packet(payload, 0, len(payload))
            else:
                self._packet(buf, start, end)
            if self.done:
                break
        del buf[:pos]
        if self.done and buf:
            raise ProtocolError(f"{len(buf)} bytes after the end of the response")

    def _packet(self, buf: Any, start: int, end: int) -> None:
        first = buf[start] if end > start else -1
        if first == 0xFF:
            code = buf[start + 1] | buf[start + 2] << 8
            p = start + 3
            if p < end and buf[p] == 0x23:  # '#' + 5 bytes of SQLSTATE
                p += 6
            self.error = (code, bytes(buf[p:end]).decode("utf-8", "replace"))
            self.done = True
            return
        state = self._state
        if state == _ROWS:
            if first == 0xFE and end - start < 9:
                self._end_of_result(buf[start + 3] | buf[start + 4] << 8)
                return
            row = []
            p = start
            for _ in range(self._ncols):
                length, p = _lenenc(buf, p)
                if length is None:
                    row.append(None)
                else:
                    row.append(buf[p:p + length].decode("utf-8", "surrogateescape"))
                    p += length
            self._rows.append(tuple(row))
        elif state == _COLUMNS:
            if first == 0xFE and end - start < 9:
                self._state = _ROWS
        elif first == 0x00:  # OK: a statement without a result set
            _, p = _lenenc(buf, start + 1)
            _, p = _lenenc(buf, p)
            self._rows = []
            self._end_of_result(buf[p] | buf[p + 1] << 8)
        elif first == 0xFB:
            raise ProtocolError("LOCAL INFILE request in a metadata query")
        elif first < 0:
            raise ProtocolError("empty packet where a result set header was expected")
        else:
            ncols, _ = _lenenc(buf, start)
            self._ncols = ncols or 0
            self._rows = []
            self._state = _COLUMNS

    def _end_of_result(self, status: int) -> None:
        self.results.append(self._rows)
        self._rows = []
        self._state = _HEADER
        if not status & SERVER_MORE_RESULTS_EXISTS:
            self.done = True
