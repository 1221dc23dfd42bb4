"""Follow a server's response to one command packet by packet, without decoding rows.

The scanner is what lets single-node results be relayed byte for byte: it reads packet headers
and only the first byte of rows, so it knows where the response ends, the final status flags
(IN_TRANS, AUTOCOMMIT, MORE_RESULTS) and whether it ended in an error.
"""

from __future__ import annotations

from typing import Protocol

from proxy.wire.answers import after_lenencs
from proxy.wire.constants import STATUS_METADATA_CHANGED, STATUS_MORE_RESULTS
from proxy.wire.messages import ColumnDef, ErrInfo, OkInfo, ResultSet, decode_text_row, eof_status, parse_column_def, parse_err, parse_ok
from proxy.wire.packets import ProtocolError, read_lenenc_int, splice


class Renamer(Protocol):
    """Gives column definitions and ERR packets the client's names (proxy.backends.names.GroupNames)."""

    def coldef(self, p: bytes) -> bytes | None: ...

    def err(self, p: bytes) -> bytes | None: ...


class BudgetExceeded(Exception):
    """Collected rows went past the memory budget of the query that collects them."""


class Budget:
    """Bytes a query may hold while collecting rows to merge; shared by all its nodes' scanners."""

    __slots__ = ("limit", "remaining")

    ROW_OVERHEAD = 100  # decoded rows cost more than their bytes: Python objects per row and value

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.remaining = limit

    def take(self, payload_len: int) -> None:
        """Charge one collected packet; raise BudgetExceeded past the limit."""
        self.remaining -= 2 * payload_len + self.ROW_OVERHEAD
        if self.remaining < 0:
            raise BudgetExceeded(self.limit)


def _skip_rows(scanner: ResponseScanner, buf: bytes | bytearray | memoryview, pos: int, n: int) -> int:
    """The hot loop of a relayed result: step over whole ordinary row packets (nothing kept); stop before
    a partial one, a row over 16 MB, an end-of-rows or an ERR, which `scan` handles."""
    skipped = 0
    while n - pos >= 4:
        length = buf[pos] | (buf[pos + 1] << 8) | (buf[pos + 2] << 16)
        end = pos + 4 + length
        if end > n or length >= 0xFFFFFF or length == 0 or buf[pos + 4] >= 0xFE:
            break
        pos = end
        skipped += 1
    scanner.packets += skipped
    return pos


# states
_FIRST, _COLDEFS, _COLS_EOF, _ROWS, _PREP_PARAMS, _PREP_PARAMS_EOF, _PREP_COLS, _PREP_COLS_EOF, _DONE = range(9)


class ResponseScanner:
    """A state machine over one command's response (COM_QUERY, COM_STMT_EXECUTE, COM_FIELD_LIST, COM_STMT_PREPARE).

    Call `scan(buf)` with the bytes received so far; it consumes complete packets and returns how
    many bytes it consumed. `done` tells when the response is complete. With `collect=True` it also
    keeps decoded result sets (used where several nodes' answers must be merged).
    """

    __slots__ = ("deprecate_eof", "binary", "collect", "state", "done", "status", "error", "ok", "results",
                 "_cols_left", "_ncols", "_cur", "_cont", "budget", "_big", "_params_left", "prepare_ok", "packets",
                 "warnings", "names", "edits", "coldefs")

    def __init__(self, deprecate_eof: bool, *, kind: str = "query", collect: bool = False,
                 budget: Budget | None = None, names: Renamer | None = None, coldefs: bool = True) -> None:
        self.deprecate_eof = deprecate_eof
        self.coldefs = coldefs   # collected results keep their column definitions (metadata loading needs rows only)
        # A COM_STMT_EXECUTE's answer. The ones pydble relays are of the statements a shared connection keeps
        # (BackendConnection.statement), not the client's: their METADATA_CHANGED is cleared (_own_status).
        self.binary = kind == "execute"
        self.collect = collect
        self.state = _FIRST
        self.done = False
        self.status = 0
        self.error: ErrInfo | None = None
        self.ok: OkInfo | None = None
        self.warnings = 0  # the warning count of the response's last OK or EOF
        self.results: list[ResultSet] = []
        self.prepare_ok: bytes | None = None
        self.packets = 0
        self._cols_left = 0
        self._ncols = 0
        self._cur: ResultSet | None = None
        self._cont = False
        self.budget = budget
        self._big: list[bytes] | None = None  # chunks of a collected row over 16 MB
        self._params_left = 0
        self.names = names   # renames column definitions and ERR packets (physical → logical names)
        self.edits: list[tuple[int, int, bytes]] = []  # (start, end, new packet) in the bytes last scanned
        if kind == "field_list":
            self.state = _COLDEFS
            self._cols_left = -1  # until EOF
        elif kind == "prepare":
            self.state = _PREP_PARAMS
            self._cols_left = -2  # waiting for STMT_PREPARE_OK

    def scan(self, buf: bytes | bytearray | memoryview, start: int = 0) -> int:
        """Consume complete packets of buf from start; return the offset after the last one consumed."""
        pos = start
        n = len(buf)
        if self.state == _ROWS and not self.collect and not self._cont:
            pos = _skip_rows(self, buf, pos, n)
        while not self.done and n - pos >= 4:
            length = buf[pos] | (buf[pos + 1] << 8) | (buf[pos + 2] << 16)
            end = pos + 4 + length
            if end > n:
                break
            self.packets += 1
            if self._cont:
                self._cont = length == 0xFFFFFF
                if self._big is not None:
                    self._big.append(bytes(buf[pos + 4:end]))
                    if not self._cont:
                        self._row(b"".join(self._big))
                        self._big = None
                pos = end
                continue
            self._cont = length == 0xFFFFFF
            if self.state == _ROWS:
                first = buf[pos + 4] if length else 0
                if first == 0xFE and length < 0xFFFFFF and (self.deprecate_eof or length < 9):
                    p = bytes(buf[pos + 4:end])
                    self._end_of_rows(self._own_status(buf, pos, end, p) if self.binary else p)
                elif first == 0xFF and length < 0xFFFFFF:
                    p = bytes(buf[pos + 4:end])
                    if self.names is not None:
                        p = self._renamed(buf, pos, end, p)
                    self._err(p)
                elif self.collect:
                    if self._cont:
                        self._big = [bytes(buf[pos + 4:end])]
                    else:
                        self._row(bytes(buf[pos + 4:end]))
            elif (self.state == _COLDEFS and self._cols_left > 0 and self.names is None
                  and (self._cur is None or not self.coldefs)):
                self._cols_left -= 1   # a column definition nobody reads: not even copied
                if self._cols_left == 0:
                    self.state = _ROWS if self.deprecate_eof else _COLS_EOF
            else:
                p = bytes(buf[pos + 4:end])
                if self.names is not None:
                    p = self._renamed(buf, pos, end, p)
                if self.binary and (self.state == _COLS_EOF or self.state == _FIRST and p[:1] == b"\x00"):
                    p = self._own_status(buf, pos, end, p)
                self._packet(p)
            pos = end
        return pos

    def row_count(self) -> int | None:
        """ROW_COUNT() after this answer, as the server that sent it would give it: the affected rows of a
        lone OK, -1 after a result set or an error; None when it cannot tell (results and an OK, or not
        done). An answer the connection relayed whole (BackendConnection._relay_whole) has `ok` set when it
        was an OK and nothing else parsed: then it was a result set or an error."""
        if self.error is not None:
            return -1
        if self.ok is not None:
            return None if self._ncols else self.ok.affected_rows
        return -1 if self.done else None

    def _own_status(self, buf: bytes | bytearray | memoryview, pos: int, end: int, p: bytes) -> bytes:
        """p, an EOF or OK of a binary answer (else as it is), without METADATA_CHANGED: the backend's
        statement was prepared again, which says nothing of the client's (it may have been prepared since,
        and MariaDB would not flag its execute); the change is noted in `edits`."""
        if p[:1] == b"\xfe" and not self.deprecate_eof:
            at = 3   # EOF: header, warnings, status
        elif p[:1] in (b"\x00", b"\xfe"):
            at = after_lenencs(p, 1, 2, len(p))   # OK: header, affected rows, last insert id, status
        else:
            return p
        if len(p) < at + 2 or not p[at + 1] & STATUS_METADATA_CHANGED >> 8:
            return p
        q = p[:at + 1] + bytes((p[at + 1] & ~(STATUS_METADATA_CHANGED >> 8) & 0xFF,)) + p[at + 2:]
        self.edits.append((pos, end, bytes(buf[pos:pos + 4]) + q))
        return q

    def _renamed(self, buf: bytes | bytearray | memoryview, pos: int, end: int, p: bytes) -> bytes:
        """p with logical names when it is a column definition or an ERR naming a physical database;
        the change is noted in `edits` for whoever relays buf."""
        names = self.names
        assert names is not None
        if p[:1] == b"\xff":
            q = names.err(p)
        elif p[:1] == b"\xfe" and len(p) < 9:
            q = None
        elif self.state in (_COLDEFS, _PREP_COLS) or self.state == _PREP_PARAMS and self._cols_left != -2:
            q = names.coldef(p)
        else:
            q = None
        if q is None:
            return p
        self.edits.append((pos, end, len(q).to_bytes(3, "little") + bytes(buf[pos + 3:pos + 4]) + q))
        return q

    def take_edits(self, data: bytes) -> bytes:
        """data (the bytes last scanned, up to where the scan stopped) with the renamed packets in."""
        edits, self.edits = self.edits, []
        return splice(data, edits)

    # -- per-state handling of non-row packets ------------------------------------------------
    def _packet(self, p: bytes) -> None:
        st = self.state
        if st == _FIRST:
            first = p[0] if p else 0
            if first == 0x00:
                self._ok(p)
            elif first == 0xFF:
                self._err(p)
            elif first == 0xFB:
                raise ProtocolError("LOCAL INFILE is not supported")
            else:
                n, _ = read_lenenc_int(p, 0)
                if not n:
                    raise ProtocolError("bad column count")
                self._ncols = self._cols_left = n
                self.state = _COLDEFS
                if self.collect:
                    self._cur = ResultSet([], [])
        elif st == _COLDEFS:
            if self._cols_left == -1:  # COM_FIELD_LIST: column defs until EOF
                if p[:1] == b"\xfe" and len(p) < 9:
                    self._finish(eof_status(p) if len(p) >= 5 else parse_ok(p).status)
                elif p[:1] == b"\xff":
                    self._err(p)
                elif self.collect:   # each kept with its raw bytes (and the column's default after them)
                    if self._cur is None:
                        self._cur = ResultSet([], [])
                        self.results.append(self._cur)
                    self._cur.columns.append(parse_column_def(p))
                return
            if self._cur is not None:
                self._cur.columns.append(parse_column_def(p))
            self._cols_left -= 1
            if self._cols_left == 0:
                self.state = _ROWS if self.deprecate_eof else _COLS_EOF
        elif st == _COLS_EOF:
            if p[:1] != b"\xfe":
                raise ProtocolError("expected EOF after column definitions")
            self.state = _ROWS
        elif st == _PREP_PARAMS:
            self._prepare_packet(p)
        elif st in (_PREP_PARAMS_EOF, _PREP_COLS, _PREP_COLS_EOF):
            self._prepare_packet(p)
        else:
            raise ProtocolError("unexpected packet after the end of the response")

    def _prepare_packet(self, p: bytes) -> None:
        st = self.state
        if self._cols_left == -2:
            if p[:1] == b"\xff":
                self._err(p)
                return
            if p[:1] != b"\x00" or len(p) < 12:
                raise ProtocolError("bad COM_STMT_PREPARE response")
            self.prepare_ok = p
            self._ncols = self._cols_left = int.from_bytes(p[5:7], "little")
            self._params_left = int.from_bytes(p[7:9], "little")
            if self._params_left:
                self.state = _PREP_PARAMS
            elif self._ncols:
                self.state = _PREP_COLS
            else:
                self._finish(0)
            return
        if st == _PREP_PARAMS:
            self._params_left -= 1
            if self._params_left == 0:
                if not self.deprecate_eof:
                    self.state = _PREP_PARAMS_EOF
                elif self._ncols:
                    self.state = _PREP_COLS
                else:
                    self._finish(0)
        elif st == _PREP_PARAMS_EOF:
            if self._ncols:
                self.state = _PREP_COLS
            else:
                self._finish(0)
        elif st == _PREP_COLS:
            self._cols_left -= 1
            if self._cols_left == 0:
                if not self.deprecate_eof:
                    self.state = _PREP_COLS_EOF
                else:
                    self._finish(0)
        elif st == _PREP_COLS_EOF:
            self._finish(0)

    def _row(self, p: bytes) -> None:
        if self.budget is not None:
            self.budget.take(len(p))
        cur = self._cur
        if cur is not None:
            if self.binary:
                cur.rows.append([p])  # binary rows are kept raw; decoding needs the column types
            else:
                cur.rows.append(decode_text_row(p, self._ncols))

    def _ok(self, p: bytes) -> None:
        ok = parse_ok(p)
        self.ok = ok
        self.warnings = ok.warnings
        if self.collect:
            self.results.append(ResultSet([], [], ok))
        self._after(ok.status)

    def _end_of_rows(self, p: bytes) -> None:
        if self.deprecate_eof:
            end = parse_ok(p)
            status, self.warnings = end.status, end.warnings
        else:
            status, self.warnings = eof_status(p), (p[1] | p[2] << 8 if len(p) >= 5 else 0)
        if self._cur is not None:
            self.results.append(self._cur)
            self._cur = None
        self._after(status)

    def _err(self, p: bytes) -> None:
        self.error = parse_err(p)
        self._finish(self.status & ~STATUS_MORE_RESULTS)

    def _after(self, status: int) -> None:
        if status & STATUS_MORE_RESULTS:
            self.status = status
            self.state = _FIRST
        else:
            self._finish(status)

    def _finish(self, status: int) -> None:
        self.status = status
        self.state = _DONE
        self.done = True


__all__ = ["ResponseScanner", "ColumnDef"]
