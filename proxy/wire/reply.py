"""Writing one command's answer to the client: sequence ids, status flags, MORE_RESULTS."""

from __future__ import annotations

from meta.errors import ProxyError

from proxy.wire.constants import STATUS_MORE_RESULTS
from proxy.wire.messages import ErrInfo, OkInfo, ResultSet, encode_resultset, end_packet, err_packet, ok_packet
from proxy.wire.packets import frame, lenenc_str


class Reply:
    """Accumulates the packets answering one client command, numbering them from seq 1."""

    __slots__ = ("out", "seq", "deprecate_eof", "row_count")

    def __init__(self, deprecate_eof: bool) -> None:
        self.out: list[bytes] = []
        self.seq = 1
        self.deprecate_eof = deprecate_eof
        self.row_count: int | None = None   # ROW_COUNT() after the last answer added (None: not known)

    def ok(self, status: int, affected_rows: int = 0, last_insert_id: int = 0, warnings: int = 0,
           info: bytes = b"", more: bool = False) -> None:
        """Add an OK packet; info is plain text (sent length-prefixed, as MariaDB does)."""
        if more:
            status |= STATUS_MORE_RESULTS
        self.row_count = affected_rows
        self.out.append(frame(self.seq, ok_packet(affected_rows, last_insert_id, status, warnings,
                                                  lenenc_str(info) if info else b"")))
        self.seq = (self.seq + 1) & 0xFF

    def ok_info(self, ok: OkInfo, status: int, more: bool = False) -> None:
        """Re-send a backend's OK (its info already length-prefixed) with the session's status flags."""
        if more:
            status |= STATUS_MORE_RESULTS
        self.row_count = ok.affected_rows
        self.out.append(frame(self.seq, ok_packet(ok.affected_rows, ok.last_insert_id, status, ok.warnings,
                                                  ok.info)))
        self.seq = (self.seq + 1) & 0xFF

    def eof(self, status: int) -> None:
        """Add the end marker that answers COM_SET_OPTION (an EOF, or an OK headed 0xFE under DEPRECATE_EOF)."""
        self.out.append(frame(self.seq, end_packet(status, self.deprecate_eof)))
        self.seq = (self.seq + 1) & 0xFF

    def error(self, code: int, sqlstate: str, message: str) -> None:
        """Add an ERR packet (it ends the answer)."""
        self.row_count = -1
        self.out.append(frame(self.seq, err_packet(code, sqlstate, message)))
        self.seq = (self.seq + 1) & 0xFF

    def proxy_error(self, e: ProxyError) -> None:
        """Add the ERR packet of a ProxyError."""
        self.error(e.code, e.sqlstate, e.message)

    def err_info(self, e: ErrInfo) -> None:
        """Pass a backend's ERR on."""
        self.error(e.code, e.sqlstate, e.message)

    def resultset(self, rs: ResultSet, status: int, more: bool = False, warnings: int = 0) -> None:
        """Add a whole text result set."""
        if more:
            status |= STATUS_MORE_RESULTS
        self.row_count = -1
        data, self.seq = encode_resultset(rs, self.seq, status, self.deprecate_eof, warnings)
        self.out.append(data)

    def raw(self, data: bytes) -> None:
        """Add packets already framed with the right sequence ids."""
        self.row_count = None
        self.out.append(data)

    def bytes(self) -> bytes:
        """Everything added so far."""
        return b"".join(self.out)
