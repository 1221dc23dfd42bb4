"""A wire checker on the client side of the proxy: every server packet pydble writes must be well-formed.

`WireChecker` is sans-I/O: it is fed the client's bytes (to know which command each answer
belongs to) and the server's bytes, and records violations: sequence ids, the layout and length of
OK / ERR / EOF / column definitions / PREPARE_OK, rows of a binary result, client-range error codes
(2000-2999, which libmariadb turns into "2027 Received malformed packet"), MORE_RESULTS only where
another result follows, and the AUTOCOMMIT / IN_TRANS flags changing only where the statements sent
allow it. `WireRelay` is the small TCP relay (a thread per direction) the test fixtures put in front
of each proxy's client port; `VIOLATIONS` collects what every relay found, and the conftest fails
the test during which one was found. Written from the protocol documentation, not from pydble's codec.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
from collections import deque
from dataclasses import dataclass, field

CLIENT_PROTOCOL_41 = 1 << 9
CLIENT_SSL = 1 << 11
CLIENT_DEPRECATE_EOF = 1 << 24
IN_TRANS, AUTOCOMMIT, MORE_RESULTS = 0x0001, 0x0002, 0x0008

COM_QUIT, COM_QUERY, COM_FIELD_LIST, COM_STATISTICS, COM_CHANGE_USER = 0x01, 0x03, 0x04, 0x09, 0x11
COM_STMT_PREPARE, COM_STMT_EXECUTE, COM_STMT_SEND_LONG_DATA, COM_STMT_CLOSE = 0x16, 0x17, 0x18, 0x19
COM_SET_OPTION, COM_RESET_CONNECTION = 0x1B, 0x1F
NO_ANSWER = {COM_QUIT, COM_STMT_SEND_LONG_DATA, COM_STMT_CLOSE}

VIOLATIONS: list[str] = []
_LOCK = threading.Lock()

# statements whose answer may switch IN_TRANS or AUTOCOMMIT
_TXN_WORDS = re.compile(r"\b(BEGIN|START|COMMIT|ROLLBACK|AUTOCOMMIT|XA)\b", re.I)
_DML = {"SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "SHOW", "WITH", "DO", "EXPLAIN", "DESC", "DESCRIBE",
        "SAVEPOINT", "RELEASE", "SET", "USE", "HELP", "(", "VALUES", "TABLE", ""}


def _first_word(sql: str) -> str:
    sql = re.sub(r"^(\s|/\*(?![!M]).*?\*/|--[^\n]*\n|#[^\n]*\n)*", "", sql, flags=re.S)
    m = re.match(r"[A-Za-z]+|\(", sql)
    return m.group(0).upper() if m else ""


class _Bad(Exception):
    """One violation, raised while reading a packet."""


def _lenenc(p: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(p):
        raise _Bad("truncated length-encoded integer")
    b = p[pos]
    if b < 0xFB:
        return b, pos + 1
    if b == 0xFB or b == 0xFF:
        raise _Bad(f"invalid length-encoded integer first byte {b:#x}")
    size = {0xFC: 2, 0xFD: 3, 0xFE: 8}[b]
    if pos + 1 + size > len(p):
        raise _Bad("truncated length-encoded integer")
    return int.from_bytes(p[pos + 1:pos + 1 + size], "little"), pos + 1 + size


@dataclass
class _Answer:
    """What the checker expects of the answer to one client command."""

    cmd: int
    text: str = ""
    state: str = "first"
    left: int = 0          # column definitions (or params) still to come
    cols: int = 0          # PREPARE: columns after the params
    cont: bool = False     # inside a packet of 16 MB or more
    statuses: list[int] = field(default_factory=list)


class WireChecker:
    """Checks one client connection's server->client stream against the commands the client sent."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.violations: list[str] = []
        self._cbuf = bytearray()
        self._sbuf = bytearray()
        self.phase = "greeting"    # greeting, auth, command, off (TLS or a client sending garbage)
        self.answers: deque[_Answer] = deque()
        self.caps = 0
        self.seq = 0               # the sequence id the next server packet must carry
        self.autocommit: bool | None = None
        self.in_trans = False
        self.after_error = False   # the last answer was an ERR (it may have ended a transaction)
        self.statements: dict[int, str] = {}   # prepared statement id -> its text
        self.packets = 0

    # -- feeding ------------------------------------------------------------------------------
    def client(self, data: bytes) -> None:
        """Bytes the client sent."""
        self._cbuf += data
        for seq, payload in self._split(self._cbuf):
            if self.phase != "off":
                self._client_packet(seq, payload)

    def server(self, data: bytes) -> None:
        """Bytes the server sent."""
        self._sbuf += data
        for seq, payload in self._split(self._sbuf):
            if self.phase == "off":
                continue
            self.packets += 1
            try:
                self._server_packet(seq, payload)
            except _Bad as e:
                self._violation(str(e), payload)

    @staticmethod
    def _split(buf: bytearray) -> list[tuple[int, bytes]]:
        out = []
        pos = 0
        while len(buf) - pos >= 4:
            n = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
            if len(buf) - pos < 4 + n:
                break
            out.append((buf[pos + 3], bytes(buf[pos + 4:pos + 4 + n])))
            pos += 4 + n
        del buf[:pos]
        return out

    def _violation(self, what: str, payload: bytes = b"") -> None:
        cmd = self.answers[0] if self.answers else None
        where = f" answering {cmd.cmd:#04x} {cmd.text[:80]!r}" if cmd else ""
        msg = f"{self.name}: {what}{where}; packet {payload[:40].hex()}"
        self.violations.append(msg)
        with _LOCK:
            VIOLATIONS.append(msg)

    # -- the client's side ----------------------------------------------------------------------
    def _client_packet(self, seq: int, payload: bytes) -> None:
        if self.phase in ("greeting", "auth"):
            if self.phase == "greeting" or len(payload) >= 32 and seq == 1:
                self.caps = int.from_bytes(payload[:4], "little") if len(payload) >= 4 else 0
                if self.caps & CLIENT_SSL and len(payload) == 32:
                    self.phase = "off"   # TLS follows: nothing readable any more
                    return
            self.phase = "auth"
            self.seq = (seq + 1) & 0xFF
            return
        if self.answers and self.answers[-1].state == "auth":   # COM_CHANGE_USER's auth switch reply
            self.seq = (seq + 1) & 0xFF
            return
        if seq != 0 or not payload:
            self.phase = "off"   # a client sending garbage (the bad-input tests): nothing to hold the proxy to
            return
        cmd = payload[0]
        if cmd in NO_ANSWER:
            if cmd == COM_STMT_CLOSE and len(payload) >= 5:
                self.statements.pop(int.from_bytes(payload[1:5], "little"), None)
            return
        text = ""
        if cmd in (COM_QUERY, COM_STMT_PREPARE):
            text = payload[1:2000].decode("utf-8", "replace")
        elif cmd == COM_STMT_EXECUTE and len(payload) >= 5:
            text = self.statements.get(int.from_bytes(payload[1:5], "little"), "")
        if not self.answers:
            self.seq = 1
        self.answers.append(_Answer(cmd, text, "fields" if cmd == COM_FIELD_LIST else "first"))

    # -- the server's side ----------------------------------------------------------------------
    def _server_packet(self, seq: int, p: bytes) -> None:
        if self.phase == "greeting" and self.packets > 1 and p[:1] == b"\xff":
            self._err(p)   # the client's first packet refused from its header (1153), before it was whole
            self.phase = "off"
            return
        if self.phase == "greeting":
            if seq != 0:
                raise _Bad(f"greeting with sequence id {seq}")
            if p[:1] == b"\xff":
                self._err(p)
                self.phase = "off"
                return
            if p[:1] != b"\x0a":
                raise _Bad("greeting is not protocol 10")
            end = p.index(b"\x00", 1)
            status = struct.unpack_from("<H", p, end + 1 + 4 + 8 + 1 + 2 + 1)[0]
            self.autocommit = bool(status & AUTOCOMMIT)
            self.seq = 1
            return
        if self.phase == "command" and not self.answers:
            raise _Bad("a packet no command asked for")
        expected, self.seq = self.seq, (seq + 1) & 0xFF
        if seq != expected:
            raise _Bad(f"sequence id {seq}, expected {expected}")
        if self.phase == "auth":
            if p[:1] == b"\x00":
                self._ok(p)
                self.phase = "command"
            elif p[:1] == b"\xff":
                self._err(p)
                self.phase = "off"
            elif p[:1] not in (b"\xfe", b"\x01"):
                raise _Bad("unexpected packet during authentication")
            return
        a = self.answers[0]
        if a.cont:
            a.cont = len(p) == 0xFFFFFF
            return
        a.cont = len(p) == 0xFFFFFF
        done = self._answer_packet(a, p)
        if done:
            self.answers.popleft()
            self.seq = 1   # a pipelined command's answer starts over
            self._flags(a)

    def _answer_packet(self, a: _Answer, p: bytes) -> bool:
        """Advance one answer by one packet; True when the answer is complete."""
        first = p[0] if p else -1
        deprecate = bool(self.caps & CLIENT_DEPRECATE_EOF)
        if a.state == "auth":   # COM_CHANGE_USER
            if first == 0x00:
                a.statuses.append(self._ok(p))
                return True
            if first == 0xFF:
                self._err(p)
                return True
            return False
        if a.state == "first":
            if first == 0xFF:
                self._err(p)
                return True
            if a.cmd == COM_CHANGE_USER:
                if first == 0x00:
                    a.statuses.append(self._ok(p))
                    return True
                a.state = "auth"
                return False
            if a.cmd == COM_STATISTICS:
                return True
            if a.cmd == COM_SET_OPTION:   # MariaDB: an EOF, an OK headed 0xFE under DEPRECATE_EOF
                a.statuses.append(self._end(p, deprecate))
                return True
            if a.cmd == COM_STMT_PREPARE:
                return self._prepare_ok(a, p)
            if first == 0x00:
                status = self._ok(p)
                a.statuses.append(status)
                return self._next_result(a, status)
            if first in (0xFB, 0xFE) or a.cmd not in (COM_QUERY, COM_STMT_EXECUTE):
                raise _Bad(f"unexpected first packet {first:#x}")
            a.left, _ = _lenenc(p, 0)
            if a.left == 0:
                raise _Bad("result set with 0 columns")
            a.state = "coldefs"
            return False
        if a.state in ("coldefs", "params"):
            self._coldef(p)
            a.left -= 1
            if a.left == 0:
                if not deprecate:
                    a.state = "eof-" + a.state
                    return False
                return self._after_defs(a)
            return False
        if a.state in ("eof-coldefs", "eof-params"):
            self._eof(p)
            return self._after_defs(a)
        if a.state == "fields":   # COM_FIELD_LIST: definitions until EOF
            if first == 0xFF:
                self._err(p)
                return True
            if first == 0xFE and len(p) < 9:
                a.statuses.append(self._end(p, deprecate))
                return True
            self._coldef(p)
            return False
        if a.state == "rows":
            if first == 0xFE and len(p) < (0xFFFFFF if deprecate else 9):
                status = self._end(p, deprecate)
                a.statuses.append(status)
                return self._next_result(a, status)
            if first == 0xFF:
                self._err(p)
                return True
            if a.cmd == COM_STMT_EXECUTE and first != 0x00:
                raise _Bad(f"binary row starting {first:#x}")
            return False
        raise _Bad(f"packet after the end of the answer (state {a.state})")

    def _after_defs(self, a: _Answer) -> bool:
        if a.cmd != COM_STMT_PREPARE:
            a.state = "rows"
            return False
        if a.state.endswith("params") and a.cols:   # PREPARE: the column definitions follow the params
            a.state, a.left, a.cols = "coldefs", a.cols, 0
            return False
        return True

    def _next_result(self, a: _Answer, status: int) -> bool:
        if status & MORE_RESULTS:
            if a.cmd not in (COM_QUERY, COM_STMT_EXECUTE):
                raise _Bad("MORE_RESULTS on an answer that has only one result")
            a.state = "first"
            return False
        return True

    def _prepare_ok(self, a: _Answer, p: bytes) -> bool:
        if p[:1] != b"\x00" or len(p) < 12:
            raise _Bad("PREPARE_OK must be 0x00 and 12 bytes")
        stmt_id, cols, params = struct.unpack_from("<IHH", p, 1)
        self.statements[stmt_id] = a.text
        if params:
            a.state, a.left, a.cols = "params", params, cols
            return False
        if cols:
            a.state, a.left = "coldefs", cols
            return False
        return True

    # -- layouts ------------------------------------------------------------------------------
    def _ok(self, p: bytes) -> int:
        _, pos = _lenenc(p, 1)
        _, pos = _lenenc(p, pos)
        if pos + 4 > len(p):
            raise _Bad("OK packet too short for status and warnings")
        return struct.unpack_from("<H", p, pos)[0]

    def _end(self, p: bytes, deprecate: bool) -> int:
        return self._ok(p) if deprecate else self._eof(p)

    def _eof(self, p: bytes) -> int:
        if p[:1] != b"\xfe" or len(p) != 5:
            raise _Bad(f"EOF packet must be 0xFE and 5 bytes, got {len(p)}")
        return struct.unpack_from("<H", p, 3)[0]

    def _err(self, p: bytes) -> None:
        self.after_error = True
        if len(p) < 3:
            raise _Bad("ERR packet too short")
        code = struct.unpack_from("<H", p, 1)[0]
        if 2000 <= code <= 2999 or code == 0:
            raise _Bad(f"ERR with client-library code {code} (libmariadb reports 2027 malformed packet)")
        if self.caps & CLIENT_PROTOCOL_41:
            if len(p) < 9 or p[3:4] != b"#" or not p[4:9].isalnum():
                raise _Bad("ERR without '#' and a 5-character SQLSTATE")

    @staticmethod
    def _coldef(p: bytes) -> None:
        pos = 0
        for _ in range(6):
            n, pos = _lenenc(p, pos)
            pos += n
        if pos + 13 > len(p) or p[pos] != 0x0C:
            raise _Bad("column definition without its 0x0c fixed-length fields")

    def _flags(self, a: _Answer) -> None:
        """AUTOCOMMIT and IN_TRANS may change only where the command allows it."""
        if not a.statuses:
            return
        status = a.statuses[-1]
        for s in a.statuses[:-1]:
            if not s & MORE_RESULTS:
                self._violation("a result without MORE_RESULTS followed by another")
        autocommit, in_trans = bool(status & AUTOCOMMIT), bool(status & IN_TRANS)
        free = a.cmd in (COM_RESET_CONNECTION, COM_CHANGE_USER) or bool(_TXN_WORDS.search(a.text))
        if self.autocommit is not None and autocommit != self.autocommit and not free:
            self._violation(f"AUTOCOMMIT turned {'on' if autocommit else 'off'} by a statement that does not set it")
        if in_trans and not self.in_trans and autocommit and not free and a.text:
            self._violation("IN_TRANS set in autocommit mode without BEGIN / START TRANSACTION")
        if (not in_trans and self.in_trans and not free and not self.after_error and a.text
                and a.cmd in (COM_QUERY, COM_STMT_EXECUTE) and _first_word(a.text) in _DML):
            self._violation("IN_TRANS cleared by a statement that does not end a transaction")
        self.autocommit, self.in_trans, self.after_error = autocommit, in_trans, False


class WireRelay:
    """A TCP relay in front of a proxy's client port, checking every connection with a WireChecker."""

    def __init__(self, target_port: int, name: str = "proxy", host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self.name = name
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, 0))
        self._listener.listen(256)
        self.port: int = self._listener.getsockname()[1]
        self._closed = False
        self._conns = 0
        threading.Thread(target=self._accept, name=f"wirecheck-{name}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()   # the proxy is down: the client sees the connection close
                continue
            self._conns += 1
            checker = WireChecker(f"{self.name}#{self._conns}")
            lock = threading.Lock()
            ended: list[int] = []
            for src, dst, feed in ((client, upstream, checker.client), (upstream, client, checker.server)):
                threading.Thread(target=self._pump, args=(src, dst, feed, lock, ended), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, feed, lock: threading.Lock,  # noqa: ANN001
              ended: list[int]) -> None:
        """Copy one direction, feeding the checker first; the second direction to end closes both."""
        try:
            while True:
                data = src.recv(262144)
                if not data:
                    break
                with lock:
                    try:
                        feed(data)
                    except Exception as e:  # noqa: BLE001 - a checker bug is reported, never hangs a test
                        with _LOCK:
                            VIOLATIONS.append(f"wire checker failed: {e!r}")
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            with lock:
                ended.append(1)
                last = len(ended) == 2
            if last:
                src.close()
                dst.close()

    def close(self) -> None:
        """Stop accepting (connections already relayed end with their peers)."""
        self._closed = True
        try:
            self._listener.close()
        except OSError:
            pass


def take_violations() -> list[str]:
    """The violations found since the last call, emptying the list."""
    with _LOCK:
        out = list(VIOLATIONS)
        VIOLATIONS.clear()
    return out
