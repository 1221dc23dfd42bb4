"""Session-level fuzzing against a real proxy process over real MariaDB backends.

Random handshakes, random command packets after a good login (any command byte, malformed
COM_STMT_* and COM_FIELD_LIST, truncated packets, wrong sequence ids, random SQL), and random
manager-port commands, each case on its own connection with socket timeouts. A case passes when
the proxy answers (or closes the connection, for bytes it cannot parse) within the timeout and its
log shows no crashed session; after each batch a normal client must still get SELECT 1 and a
sharded query answered. Generated SQL touches only this module's fz_* tables (see fuzzlib.Tables).
"""

from __future__ import annotations

import hashlib
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import fuzzlib
from fuzzlib import count, execute_payloads, handshake_responses, is_long
from proxy.wire import constants as C

TIMEOUT = 8.0            # a proxy that has not answered in this time is hung
FZ_TABLES = fuzzlib.tables_of(["fz_h4", "fz_h2", "fz_glob", "fz_sing", "fz_dflt"], ("schema1", "schema2", "nosuch"),
                              safe=True)
CHECK_ROWS = 8           # rows of fz_check, the sharded table of the health check (never fuzzed)
CRASH_MARKERS = ("session crashed", "Traceback (most recent call last)", "Exception in callback",
                 "Task exception was never retrieved")
CAPS = (C.LONG_PASSWORD | C.LONG_FLAG | C.PROTOCOL_41 | C.TRANSACTIONS | C.SECURE_CONNECTION | C.MULTI_RESULTS
        | C.PLUGIN_AUTH | C.PS_MULTI_RESULTS)


def session_settings(ci: int, long: int) -> settings:
    """Hypothesis settings for a batch against the server: no shrinking (a hang would cost TIMEOUT per step)."""
    long_run = is_long()
    return settings(settings.get_profile("long" if long_run else "ci"), max_examples=long if long_run else ci,
                    phases=(Phase.explicit, Phase.generate), database=None)


slow_if_long = pytest.mark.slow if is_long() else (lambda f: f)


def wire_bytes(text: str) -> bytes:
    """Text as a client would send it: UTF-8, lone surrogates as the bytes they stand for (or encode to)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate outside U+DC80..U+DCFF: send its (invalid) UTF-8 form
        return text.encode("utf-8", "surrogatepass")


# -- a raw client, written from the protocol documentation -------------------------------------------

class Closed(Exception):
    """The server closed the connection."""


class Hung(AssertionError):
    """The server neither answered nor closed within TIMEOUT."""


def scramble(password: str, salt: bytes) -> bytes:
    """mysql_native_password's auth response."""
    s1 = hashlib.sha1(password.encode()).digest()
    s2 = hashlib.sha1(salt + hashlib.sha1(s1).digest()).digest()
    return bytes(a ^ b for a, b in zip(s1, s2))


class Wire:
    """One TCP connection speaking the MySQL protocol by hand, every read bounded by TIMEOUT."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.buf = b""
        self.salt = b""

    def close(self) -> None:
        """Close the socket (a RST-free close)."""
        try:
            self.sock.close()
        except OSError:
            pass

    def _recv(self) -> None:
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            raise Hung(f"no answer within {TIMEOUT} s") from None
        except OSError:  # reset by the server
            raise Closed() from None
        if not chunk:
            raise Closed()
        self.buf += chunk

    def packet(self) -> tuple[int, bytes]:
        """The next packet (seq, payload)."""
        while len(self.buf) < 4 or len(self.buf) < 4 + int.from_bytes(self.buf[:3], "little"):
            self._recv()
        n = int.from_bytes(self.buf[:3], "little")
        seq, payload = self.buf[3], self.buf[4:4 + n]
        self.buf = self.buf[4 + n:]
        return seq, payload

    def send(self, data: bytes) -> None:
        """Send raw bytes; a server that already closed is Closed."""
        try:
            self.sock.sendall(data)
        except socket.timeout:
            raise Hung(f"the server stopped reading for {TIMEOUT} s") from None
        except OSError:  # the server closed (EPIPE, ECONNRESET, ENOTCONN)
            raise Closed() from None

    def send_packet(self, seq: int, payload: bytes) -> None:
        """Frame and send one payload (< 16 MB)."""
        self.send(struct.pack("<I", len(payload) | (seq & 0xFF) << 24) + payload)

    def greeting(self) -> None:
        """Read HandshakeV10 and keep the salt."""
        _, p = self.packet()
        assert p[:1] == b"\x0a", p[:20]
        pos = p.index(b"\x00", 1) + 1
        salt1 = p[pos + 4:pos + 12]
        auth_len = p[pos + 20]
        self.salt = salt1 + p[pos + 31:pos + 31 + max(13, auth_len - 8)].rstrip(b"\x00")

    def login(self, db: str | None = "schema1", caps: int = CAPS, user: str = "test", password: str = "111111") -> None:
        """Greeting, HandshakeResponse41, and an OK verdict."""
        self.greeting()
        if db:
            caps |= C.CONNECT_WITH_DB
        auth = scramble(password, self.salt[:20])
        body = struct.pack("<IIB", caps, 1 << 24, 45) + b"\x00" * 23 + user.encode() + b"\x00"
        body += bytes((len(auth),)) + auth + ((db.encode() + b"\x00") if db else b"") + b"mysql_native_password\x00"
        self.send_packet(1, body)
        _, verdict = self.packet()
        assert verdict[:1] == b"\x00", verdict

    def half_close(self) -> None:
        """Tell the server we are done sending; Closed if it already closed."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            raise Closed() from None

    def wait_closed(self) -> None:
        """Read (and drop) whatever comes until the server closes; Hung if it does not."""
        try:
            while True:
                self._recv()
        except Closed:
            return

    def sentinel(self, n: int) -> bool:
        """Ask SELECT 'fz-sentinel-n' and read until it comes back: True, or False if the server closed."""
        mark = f"fz-sentinel-{n}".encode()
        try:
            self.send_packet(0, b"\x03SELECT '" + mark + b"'")
            while mark not in self.buf:
                self._recv()
        except Closed:
            return False
        return True


# -- the server under test ----------------------------------------------------------------------------

@dataclass
class Target:
    """The proxy and what the checks need: log offset, crash findings, case counter."""

    proxy: Any
    log_pos: int = 0
    crashes: list[tuple[str, str]] = field(default_factory=list)
    n: int = 0

    def new_log(self) -> str:
        """Log text written since the last call (read from an offset: the log grows to megabytes)."""
        try:
            with open(self.proxy.log_path, "rb") as f:
                f.seek(self.log_pos)
                data = f.read()
        except OSError:
            return ""
        self.log_pos += len(data)
        return data.decode("utf-8", "replace")

    def after_case(self, what: str) -> None:
        """Record a crash if this case left a traceback in the log (the log is written before the close)."""
        self.n += 1
        text = self.new_log()
        if any(m in text for m in CRASH_MARKERS):
            self.crashes.append((what, text[-3000:]))

    def assert_no_crash(self) -> None:
        """Fail with the first few crashing inputs and their log excerpts."""
        time.sleep(0.2)
        self.after_case("(end of batch)")
        if self.crashes:
            lines = [f"{len(self.crashes)} case(s) crashed a session:"]
            for what, log in self.crashes[:3]:
                lines += [f"--- input: {what}", log]
            pytest.fail("\n".join(lines))


@pytest.fixture(scope="module")
def target(fuzz_proxy: Any) -> Iterator[Target]:
    """The module's proxy with its fz_* tables created and fz_check filled."""
    p = fuzz_proxy
    conn = p.connect()
    try:
        with conn.cursor() as cur:
            for t in ("fz_h4", "fz_h2", "fz_glob", "fz_dflt", "fz_check"):
                cur.execute(f"DROP TABLE IF EXISTS {t}")
                cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR(20), k INT, c TEXT, code "
                            f"VARCHAR(10), pad CHAR(60))")
            cur.execute("INSERT INTO fz_check (id, name) VALUES " + ", ".join(f"({i}, 'n{i}')"
                                                                              for i in range(1, CHECK_ROWS + 1)))
            cur.execute("USE schema2")
            cur.execute("DROP TABLE IF EXISTS fz_sing")
            cur.execute("CREATE TABLE fz_sing (id INT PRIMARY KEY, name VARCHAR(20), k INT, c TEXT)")
    finally:
        conn.close()
    t = Target(p)
    t.new_log()
    yield t
    drop_fuzz_tables(p)


def drop_fuzz_tables(p: Any) -> None:
    """Leave the shared backends as found: every fz_* table, wherever random DDL and hints put one."""
    names = ", ".join([*FZ_TABLES, "fz_check"])
    conn = p.connect()
    try:
        with conn.cursor() as cur:
            for node in ("dn1", "dn2", "dn3", "dn4", "dn5"):
                cur.execute(f"/*!pydble:shardingNode={node}*/ DROP TABLE IF EXISTS {names}")
    finally:
        conn.close()


def still_serves(t: Target) -> None:
    """A normal client gets SELECT 1, a sharded scatter query, a single-node query and the manager's help."""
    conn = t.proxy.connect(connect_timeout=TIMEOUT, read_timeout=TIMEOUT * 4)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchall() == ((1,),)
            cur.execute("SELECT COUNT(*), MIN(id), MAX(id) FROM fz_check")
            assert cur.fetchall() == ((CHECK_ROWS, 1, CHECK_ROWS),)
            cur.execute("SELECT name FROM fz_check WHERE id = 3")
            assert cur.fetchall() == (("n3",),)
    finally:
        conn.close()
    m = t.proxy.manager(connect_timeout=TIMEOUT, read_timeout=TIMEOUT * 4)
    try:
        with m.cursor() as cur:
            cur.execute("show @@help")
            assert len(cur.fetchall()) >= 5
    finally:
        m.close()
    t.assert_no_crash()


# -- handshake fuzz ----------------------------------------------------------------------------------------

@st.composite
def first_packets(draw: st.DrawFn) -> tuple[bytes, bytes | None]:
    """What a client sends after the greeting (raw bytes), and an answer to an auth switch if one comes."""
    form = draw(st.integers(0, 5))
    if form <= 2:
        payload = draw(handshake_responses())
        if form == 0:  # a real user name, so authentication and schema checks run too
            caps = draw(st.integers(0, 2 ** 32 - 1)) | C.PROTOCOL_41
            payload = struct.pack("<IIB", caps, 1 << 24, draw(st.integers(0, 255))) + b"\x00" * 23 + b"test\x00" \
                + draw(st.binary(max_size=40))
        data = struct.pack("<I", len(payload) | draw(st.integers(0, 255)) << 24) + payload
    elif form == 3:
        data = draw(st.binary(max_size=64))
    elif form == 4:  # a header that promises more than comes
        data = struct.pack("<I", draw(st.integers(1, 0xFFFFFF)) | 1 << 24) + draw(st.binary(max_size=8))
    else:
        data = b""
    switch = draw(st.one_of(st.none(), st.binary(max_size=30)))
    return data, switch


def complete(data: bytes) -> bool:
    """True when data holds at least one complete packet (so the server will act on it)."""
    return len(data) >= 4 and len(data) >= 4 + int.from_bytes(data[:3], "little")


def handshake_case(t: Target, data: bytes, switch: bytes | None) -> None:
    """One connection: greeting, the fuzzed first packet, then an answer or a close within TIMEOUT."""
    w = Wire(t.proxy.port)
    try:
        w.greeting()
        w.send(data)
        if not complete(data):
            try:
                w.half_close()  # the server must notice the end and close, not wait forever
                w.wait_closed()
            except Closed:
                pass
            return
        try:
            _, verdict = w.packet()
            if verdict[:1] == b"\xfe":  # auth switch: answer with fuzz too
                w.send_packet(3, switch or b"")
                _, verdict = w.packet()
            if verdict[:1] == b"\x00":
                assert w.sentinel(t.n), "logged in, then closed on a plain SELECT"
            else:
                w.wait_closed()
        except Closed:
            pass
    finally:
        w.close()
        t.after_case(f"handshake {data!r} switch={switch!r}")


@slow_if_long
def test_handshake_fuzz(target: Target) -> None:
    """A few hundred random first packets: every one refused or accepted cleanly, the server keeps serving."""
    @session_settings(ci=200, long=3_000)
    @given(case=first_packets())
    def run(case: tuple[bytes, bytes | None]) -> None:
        count("session: handshake")
        handshake_case(target, *case)

    run()
    still_serves(target)


# -- command fuzz after a good login -------------------------------------------------------------------

SQL = st.one_of(fuzzlib.sql_statement(FZ_TABLES, session=True), fuzzlib.mutated(fuzzlib.sql_statement(FZ_TABLES)),
                fuzzlib.token_soup(FZ_TABLES), st.text(max_size=80), fuzzlib.surrogate_text(80))
STMT_CMDS = (C.COM_STMT_PREPARE, C.COM_STMT_EXECUTE, C.COM_STMT_SEND_LONG_DATA, C.COM_STMT_CLOSE, C.COM_STMT_RESET,
             C.COM_STMT_FETCH)


@st.composite
def command(draw: st.DrawFn) -> tuple[str, Any]:
    """One fuzzed step of a session: ('packet', (seq, payload)), ('prepare+execute', ...), ('truncated', bytes)."""
    form = draw(st.integers(0, 9))
    seq = draw(st.one_of(st.just(0), st.integers(0, 255)))
    if form <= 2:
        sql = draw(SQL)
        return "packet", (seq, b"\x03" + wire_bytes(sql))
    if form == 3:
        return "packet", (seq, bytes((draw(st.integers(0, 255)),)) + draw(st.binary(max_size=40)))
    if form == 4:
        cmd = draw(st.sampled_from(STMT_CMDS))
        body = draw(st.one_of(st.binary(max_size=30),
                              st.builds(lambda i, b: struct.pack("<I", i) + b, st.integers(0, 4) |
                                        st.just(0xFFFFFFFF), st.binary(max_size=20))))
        return "packet", (seq, bytes((cmd,)) + body)
    if form == 5:
        table = draw(st.sampled_from(["fz_h4", "fz_sing", "fz_dflt", "nosuch", "", "fz_h4\x00", "`fz_h2`",
                                      "information_schema.tables"]) | st.text(max_size=10))
        wild = draw(st.sampled_from([b"", b"\x00", b"\x00%", b"\x00id", b"\x00\xff\xfe"]) | st.binary(max_size=6))
        return "packet", (seq, b"\x04" + wire_bytes(table) + wild)
    if form == 6:
        sql = draw(st.one_of(SQL, st.sampled_from(["SELECT * FROM fz_h4 WHERE id = ?", "SELECT ?, ?",
                                                   "INSERT INTO fz_dflt (id, name) VALUES (?, ?)",
                                                   "SELECT * FROM fz_h2 WHERE id IN (?, ?, ?) ORDER BY id",
                                                   "UPDATE fz_glob SET k = ? WHERE id = ?", "SELECT ?"])))
        nparams = sql.count("?")
        return "prepare+execute", (sql, draw(execute_payloads(max(nparams, draw(st.integers(0, 2))))),
                                   draw(st.sampled_from([0, 1, 2])))
    if form == 7:
        payload = draw(st.binary(min_size=1, max_size=40))
        declared = len(payload) + draw(st.integers(1, 0xFFFFFF - len(payload)))
        return "truncated", struct.pack("<I", declared)[:3] + bytes((seq,)) + payload
    if form == 8:
        return "packet", (seq, bytes((draw(st.sampled_from([C.COM_INIT_DB, C.COM_SET_OPTION, C.COM_PING,
                                                             C.COM_RESET_CONNECTION, C.COM_STATISTICS,
                                                             C.COM_CHANGE_USER, C.COM_PROCESS_KILL]
                                                            )),)) + draw(st.binary(max_size=6)))
    return "packet", (seq, b"")  # an empty command packet


def run_command(w: Wire, kind: str, arg: Any) -> bool:
    """Send one fuzzed step; False when the connection is over (closed, or truncated on purpose)."""
    if kind == "truncated":
        w.send(arg)
        w.half_close()
        w.wait_closed()
        return False
    if kind == "packet":
        seq, payload = arg
        w.send_packet(seq, payload)
        return True
    sql, execute, extra = arg
    w.send_packet(0, bytes((C.COM_STMT_PREPARE,)) + wire_bytes(sql))
    _, first = w.packet()
    if first[:1] == b"\x00" and len(first) >= 12:  # PREPARE_OK: aim the fuzzed EXECUTE at the real statement
        stmt_id = struct.unpack_from("<I", first, 1)[0]
        if len(execute) >= 5:
            execute = execute[:1] + struct.pack("<I", stmt_id) + execute[5:]
        if extra == 1:
            w.send_packet(0, bytes((C.COM_STMT_SEND_LONG_DATA,)) + struct.pack("<IH", stmt_id, 0) + b"long")
        elif extra == 2:
            w.send_packet(0, bytes((C.COM_STMT_RESET,)) + struct.pack("<I", stmt_id))
    w.send_packet(0, execute)
    return True


def command_case(t: Target, caps: int, db: str | None, steps: list[tuple[str, Any]]) -> None:
    """One connection: log in, run the steps, then a sentinel SELECT must come back (or the server closed)."""
    w = Wire(t.proxy.port)
    try:
        w.login(db, caps)
        try:
            for kind, arg in steps:
                if not run_command(w, kind, arg):
                    return
            w.sentinel(t.n)
        except Closed:
            pass
    finally:
        w.close()
        t.after_case(f"commands caps={caps:#x} db={db!r} steps={steps!r}")


@slow_if_long
def test_command_fuzz(target: Target) -> None:
    """A few hundred sessions of random commands after a good login; the server keeps serving."""
    @session_settings(ci=300, long=5_000)
    @given(caps=st.sampled_from([CAPS, CAPS | C.DEPRECATE_EOF, CAPS | C.MULTI_STATEMENTS,
                                 CAPS | C.MULTI_STATEMENTS | C.DEPRECATE_EOF | C.FOUND_ROWS]),
           db=st.sampled_from(["schema1", "schema1", "schema2", None]),
           steps=st.lists(command(), min_size=1, max_size=3))
    def run(caps: int, db: str | None, steps: list[tuple[str, Any]]) -> None:
        count("session: commands")
        command_case(target, caps, db, steps)

    run()
    still_serves(target)


def test_known_nasty_commands(target: Target) -> None:
    """Inputs that once crashed sessions or are easy to get wrong, each checked explicitly."""
    cases: list[list[tuple[str, Any]]] = [
        [("packet", (0, b"\x03USE ;"))],
        [("packet", (0, b"\x03USE"))],
        [("packet", (0, b"\x03/*!pydble:shardingNode=dn1*/"))],
        [("packet", (0, b"\x1b"))],
        [("packet", (0, b"\x04"))],
        [("packet", (0, b"\x19"))],
        [("packet", (0, b"\x17\xff\xff\xff\xff"))],
        # TIME parameter whose day count overflows timedelta; DATETIME whose microseconds overflow datetime
        [("prepare+execute", ("SELECT ?", b"\x17\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x01"
                              + bytes((C.T_TIME, 0)) + struct.pack("<BBIBBB", 8, 0, 0xFFFFFFFF, 1, 2, 3), 0))],
        [("prepare+execute", ("SELECT ?", b"\x17\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x01"
                              + bytes((C.T_DATETIME, 0)) + struct.pack("<BHBBBBBI", 11, 2024, 1, 2, 3, 4, 5,
                                                                        0x80000000), 0))],
        [("truncated", b"\xff\xff\xff\x00abc")],
        # a hinted CREATE TABLE of a table the node has already: the DDL's failure names no configured table
        [("packet", (0, b"\x03USE schema2")),
         ("packet", (0, b"\x03/*!pydble:shardingNode=dn1*/ CREATE TABLE fz_nasty_twice (id INT)")),
         ("packet", (0, b"\x03/*!pydble:shardingNode=dn1*/ CREATE TABLE fz_nasty_twice (id INT)"))],
    ]
    for steps in cases:
        for caps in (CAPS, CAPS | C.MULTI_STATEMENTS | C.DEPRECATE_EOF):
            count("session: known nasty")
            command_case(target, caps, "schema1", steps)
    still_serves(target)


# -- the manager port -------------------------------------------------------------------------------------

def manager_case(t: Target, text: str, raw: bytes | None) -> None:
    """One manager connection: a command text (or raw command packet), then an answer or a close."""
    w = Wire(t.proxy.manager_port)
    try:
        w.login(None, CAPS, user="root")
        try:
            if raw is not None:
                w.send_packet(0, raw)
            else:
                w.send_packet(0, b"\x03" + wire_bytes(text))
            w.send_packet(0, b"\x0e")  # COM_PING: its OK proves the command before it was answered
            while True:
                _, p = w.packet()
                if p[:1] == b"\x00" and len(p) == 7 and p[1:3] == b"\x00\x00":
                    break
        except Closed:
            pass
    finally:
        w.close()
        t.after_case(f"manager text={text!r} raw={raw!r}")


@slow_if_long
def test_manager_port_fuzz(target: Target) -> None:
    """Random manager commands (real ones with random filters, near misses, junk); the server keeps serving."""
    @session_settings(ci=120, long=2_000)
    @given(text=st.one_of(fuzzlib.manager_command(), fuzzlib.mutated(fuzzlib.manager_command()), st.text(max_size=60),
                          st.sampled_from(["SELECT @@version_comment LIMIT 1", "SET autocommit=1", "select 1",
                                           "show @@backend", "check full @@metadata where schema='schema1'"])),
           raw=st.one_of(st.none(), st.none(), st.binary(min_size=1, max_size=20)))
    def run(text: str, raw: bytes | None) -> None:
        count("session: manager")
        manager_case(target, text, raw)

    run()
    still_serves(target)
