"""Helpers for the proxy integration tests: a raw MySQL-protocol client and extended configs.

The raw client speaks just enough of the wire protocol (greeting, HandshakeResponse41 with
mysql_native_password, one command, its response packets) to send what drivers never send:
COM_FIELD_LIST, truncated packets, garbage. It is written from the protocol documentation, not
from the proxy's own codec, so a codec bug cannot hide itself.
"""

from __future__ import annotations

import copy
import hashlib
import socket
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from harness import ProxyProcess, free_port, proxy_config

HOST = "127.0.0.1"

CLIENT_LONG_PASSWORD = 1
CLIENT_FOUND_ROWS = 2
CLIENT_LONG_FLAG = 4
CLIENT_CONNECT_WITH_DB = 8
CLIENT_PROTOCOL_41 = 1 << 9
CLIENT_TRANSACTIONS = 1 << 13
CLIENT_SECURE_CONNECTION = 1 << 15
CLIENT_MULTI_STATEMENTS = 1 << 16
CLIENT_MULTI_RESULTS = 1 << 17
CLIENT_PLUGIN_AUTH = 1 << 19
CLIENT_DEPRECATE_EOF = 1 << 24

BASE_CAPS = (CLIENT_LONG_PASSWORD | CLIENT_LONG_FLAG | CLIENT_PROTOCOL_41 | CLIENT_TRANSACTIONS
             | CLIENT_SECURE_CONNECTION | CLIENT_MULTI_RESULTS | CLIENT_PLUGIN_AUTH)

SERVER_STATUS_IN_TRANS = 1
SERVER_STATUS_AUTOCOMMIT = 2
SERVER_MORE_RESULTS_EXISTS = 8


def scramble(password: str, salt: bytes) -> bytes:
    """mysql_native_password: SHA1(pw) XOR SHA1(salt + SHA1(SHA1(pw)))."""
    if not password:
        return b""
    s1 = hashlib.sha1(password.encode()).digest()
    s2 = hashlib.sha1(salt + hashlib.sha1(s1).digest()).digest()
    return bytes(a ^ b for a, b in zip(s1, s2))


def lenenc(buf: bytes, pos: int) -> tuple[int | None, int]:
    """Read a length-encoded integer (None for the NULL marker)."""
    b = buf[pos]
    if b < 251:
        return b, pos + 1
    if b == 251:
        return None, pos + 1
    size = {252: 2, 253: 3, 254: 8}[b]
    return int.from_bytes(buf[pos + 1:pos + 1 + size], "little"), pos + 1 + size


@dataclass
class Packet:
    """One received packet."""

    seq: int
    payload: bytes

    @property
    def kind(self) -> str:
        """'ok', 'err', 'eof' or 'data' from the first byte, as a client reads it."""
        p = self.payload
        if p[:1] == b"\x00":
            return "ok"
        if p[:1] == b"\xff":
            return "err"
        if p[:1] == b"\xfe" and len(p) < 9:
            return "eof"
        return "data"

    @property
    def err_code(self) -> int:
        """The MySQL error code of an ERR packet."""
        assert self.kind == "err", self.payload[:40]
        return struct.unpack_from("<H", self.payload, 1)[0]

    @property
    def err_message(self) -> str:
        """The message of an ERR packet (after the SQLSTATE)."""
        return self.payload[9:].decode("utf-8", "replace")

    @property
    def status(self) -> int:
        """Status flags of an OK or EOF packet."""
        p = self.payload
        if self.kind == "eof" and len(p) == 5:
            return struct.unpack_from("<H", p, 3)[0]
        _, pos = lenenc(p, 1)
        _, pos = lenenc(p, pos)
        return struct.unpack_from("<H", p, pos)[0]


@dataclass
class Greeting:
    """The parts of HandshakeV10 the tests look at."""

    version: str
    connection_id: int
    salt: bytes
    capabilities: int
    status: int


class RawClient:
    """A blocking socket speaking the MySQL protocol by hand."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self._buf = b""
        self._pos = 0            # read offset into _buf (no copying per packet)
        self.greeting: Greeting | None = None

    @property
    def buf(self) -> bytes:
        """Bytes received and not yet consumed."""
        return self._buf[self._pos:]

    @buf.setter
    def buf(self, value: bytes) -> None:
        self._buf, self._pos = value, 0

    # -- bytes --------------------------------------------------------------------------------
    def recv_exact(self, n: int) -> bytes:
        """Exactly n bytes, or EOFError if the server closed first."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < n:
            parts = [buf[pos:]]
            have = len(parts[0])
            while have < n:
                chunk = self.sock.recv(max(65536, n - have))
                if not chunk:
                    raise EOFError(f"server closed the connection ({have} of {n} bytes)")
                parts.append(chunk)
                have += len(chunk)
            buf, pos = b"".join(parts), 0
        self._buf, self._pos = buf, pos + n
        return buf[pos:pos + n]

    def read_packet(self) -> Packet:
        """One logical packet (16 MB continuations joined)."""
        parts = []
        first_seq = None
        while True:
            hdr = self.recv_exact(4)
            n = hdr[0] | hdr[1] << 8 | hdr[2] << 16
            if first_seq is None:
                first_seq = hdr[3]
            parts.append(self.recv_exact(n))
            if n < 0xFFFFFF:
                return Packet(first_seq, b"".join(parts))

    def send_raw(self, data: bytes) -> None:
        """Send bytes exactly as given."""
        self.sock.sendall(data)

    def send_packet(self, seq: int, payload: bytes) -> None:
        """Frame and send a payload (split at 16 MB as the protocol requires)."""
        out = []
        pos = 0
        while True:
            chunk = payload[pos:pos + 0xFFFFFF]
            out.append(struct.pack("<I", len(chunk) | (seq & 0xFF) << 24) + chunk)
            seq += 1
            pos += 0xFFFFFF
            if len(chunk) < 0xFFFFFF:
                break
        self.sock.sendall(b"".join(out))

    def closed_by_server(self, timeout: float = 5.0) -> bool:
        """True when the server closes (reads EOF or a reset) within timeout, buffered bytes aside."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf = self.buf + chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    # -- connection phase ---------------------------------------------------------------------
    def read_greeting(self) -> Greeting:
        """Parse the server's HandshakeV10."""
        p = self.read_packet().payload
        assert p[0] == 10, p[:20]
        end = p.index(b"\x00", 1)
        version = p[1:end].decode()
        pos = end + 1
        conn_id = struct.unpack_from("<I", p, pos)[0]
        salt1 = p[pos + 4:pos + 12]
        pos += 13
        caps_lo = struct.unpack_from("<H", p, pos)[0]
        status = struct.unpack_from("<H", p, pos + 3)[0]
        caps_hi = struct.unpack_from("<H", p, pos + 5)[0]
        auth_len = p[pos + 7]
        pos += 18
        salt2 = p[pos:pos + max(13, auth_len - 8)].rstrip(b"\x00")
        self.greeting = Greeting(version, conn_id, salt1 + salt2, caps_lo | caps_hi << 16, status)
        return self.greeting

    def handshake_response(self, user: str, password: str, database: str | None, caps: int) -> bytes:
        """A HandshakeResponse41 payload answering the greeting already read."""
        assert self.greeting is not None
        auth = scramble(password, self.greeting.salt[:20])
        if database:
            caps |= CLIENT_CONNECT_WITH_DB
        out = struct.pack("<IIB", caps, 1 << 24, 45) + b"\x00" * 23
        out += user.encode() + b"\x00" + bytes((len(auth),)) + auth
        if database:
            out += database.encode() + b"\x00"
        return out + b"mysql_native_password\x00"

    def login(self, user: str = "test", password: str = "111111", database: str | None = "schema1",
              caps: int = BASE_CAPS) -> Packet:
        """Greeting, response, and the server's verdict (OK or ERR)."""
        self.caps = caps
        self.read_greeting()
        self.send_packet(1, self.handshake_response(user, password, database, caps))
        return self.read_packet()

    # -- command phase ------------------------------------------------------------------------
    def command(self, payload: bytes) -> None:
        """Send a command packet (sequence id 0)."""
        self.send_packet(0, payload)

    def query(self, sql: str) -> None:
        """Send COM_QUERY."""
        self.command(b"\x03" + sql.encode())

    def field_list(self, table: str | bytes, wild: str | bytes = b"") -> tuple[list[Packet], Packet]:
        """COM_FIELD_LIST of table (with a wildcard): the column definition packets, and the packet that ended
        them (EOF or ERR)."""
        def raw(v: str | bytes) -> bytes:
            return v.encode() if isinstance(v, str) else v
        self.command(b"\x04" + raw(table) + b"\x00" + raw(wild))
        defs = []
        while True:
            pk = self.read_packet()
            if pk.kind in ("eof", "err"):
                return defs, pk
            defs.append(pk)

    def read_result(self) -> "Result":
        """Read one complete response (all results while MORE_RESULTS is set)."""
        res = Result()
        while True:
            p = self.read_packet()
            res.packets.append(p)
            if p.kind in ("ok", "err"):
                if p.kind == "ok":
                    res.oks.append(p)
                if p.kind == "err" or not p.status & SERVER_MORE_RESULTS_EXISTS:
                    return res
                continue
            ncols, _ = lenenc(p.payload, 0)
            deprecate_eof = bool(getattr(self, "caps", 0) & CLIENT_DEPRECATE_EOF)
            cols = [self.read_packet() for _ in range(ncols or 0)]
            res.packets.extend(cols)
            if not deprecate_eof:
                res.packets.append(self.read_packet())
            rows = []
            while True:
                r = self.read_packet()
                res.packets.append(r)
                if r.kind == "err":
                    return res
                if r.payload[:1] == b"\xfe" and (len(r.payload) < 9 or deprecate_eof):
                    break
                rows.append(self._row(r.payload, ncols or 0))
            res.sets.append((cols, rows))
            end = res.packets[-1]
            if not end.status & SERVER_MORE_RESULTS_EXISTS:
                return res

    @staticmethod
    def _row(p: bytes, n: int) -> list[bytes | None]:
        pos = 0
        out: list[bytes | None] = []
        for _ in range(n):
            ln, pos = lenenc(p, pos)
            if ln is None:
                out.append(None)
            else:
                out.append(p[pos:pos + ln])
                pos += ln
        return out

    def close(self) -> None:
        """Close the socket."""
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Result:
    """Everything one command answered."""

    packets: list[Packet] = field(default_factory=list)
    sets: list[tuple[list[Packet], list[list[bytes | None]]]] = field(default_factory=list)
    oks: list[Packet] = field(default_factory=list)

    @property
    def error(self) -> Packet | None:
        """The ERR packet that ended the response, if any."""
        last = self.packets[-1]
        return last if last.kind == "err" else None

    @property
    def seqs(self) -> list[int]:
        """Sequence ids of every packet, in order."""
        return [p.seq for p in self.packets]


# -- configurations ---------------------------------------------------------------------------

def extended_config(backends: Sequence[Any], *, port: int | None = None, manager_port: int | None = None,
                    instance: str = "pydble-x", groups: Mapping[str, Mapping[str, Any]] | None = None,
                    server: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The DESIGN.md §2 config plus a stringhash table, a second global table and a 4-node hash table."""
    cfg = copy.deepcopy(proxy_config(backends, port or free_port(), manager_port or free_port(),
                                     instance=instance))
    cfg["functions"]["by-name"] = {"type": "stringhash", "partition_count": [4], "partition_length": [256],
                                   "hash_slice": "0:-1"}
    tables = cfg["schemas"]["schema1"]["tables"]
    tables["str_t"] = {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "by-name",
                       "column": "name"}
    tables["glob_t"] = {"type": "global", "nodes": ["dn1", "dn2", "dn3", "dn4"]}
    tables["h4_t"] = {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "hash-four",
                      "column": "id"}
    tables["h4_u"] = {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "hash-four",
                      "column": "id"}
    for name in ("m4_a", "m4_b"):   # the merge tests' own pair, co-sharded
        tables[name] = {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "hash-four",
                        "column": "id"}
    tables["h2_t"] = {"type": "sharding", "nodes": ["dn1", "dn2"], "function": "hash-two", "column": "id"}
    for name, extra in (groups or {}).items():
        cfg["db_groups"][name].update(extra)
    if server:
        cfg["server"].update(server)
    return cfg


# shardingNode -> (backend index, database), as proxy_config lays them out
NODES = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2"), "dn5": (0, "db3")}


def node_rows(backends: Sequence[Any], backend_rows: Any, node: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows of sql run directly on one shardingNode's database."""
    idx, db = NODES[node]
    return backend_rows(backends[idx], db, sql)


def start_proxy(config: Mapping[str, Any], name: str) -> ProxyProcess:
    """Start a private proxy process (the caller cleans it up)."""
    p = ProxyProcess(config, name=name, release_ports=True)
    try:
        p.start()
    except BaseException:
        p.cleanup()
        raise
    return p


def java_string_hash(s: str) -> int:
    """DBLE StringHash over the whole string: h = 31*h + c as a Java long (ASCII test values only)."""
    h = 0
    for ch in s.encode("ascii"):
        h = (h * 31 + ch) & 0xFFFFFFFFFFFFFFFF
    return h - (1 << 64) if h >> 63 else h


def stringhash_node(value: str, nodes: Sequence[str] = ("dn1", "dn2", "dn3", "dn4"), length: int = 256,
                    hash_slice: tuple[int, int] = (0, -1)) -> str:
    """The node DBLE's StringHash with partition_count=[n], partition_length=[length] picks.

    DBLE reads the slice "start:end" with a negative start as len+start and an end <= 0 as len+end,
    so "0:-1" hashes every character but the last.
    """
    start, end = hash_slice
    start = start if start >= 0 else len(value) + start
    end = end if end > 0 else len(value) + end
    slot = java_string_hash(value[start:end]) % (len(nodes) * length)   # Java: h % total, shifted up if < 0
    return nodes[slot // length]


def hash_node(value: int, nodes: Sequence[str]) -> str:
    """The node DBLE's Hash with partition_length=[1] picks: value mod the node count."""
    return nodes[value % len(nodes)]


def drop_after(p: Any, *tables: str, database: str = "schema1") -> Any:
    """A module fixture body: after the module, drop the tables it made on the shared backends.

    Other test modules share the physical tables of the configured names (sharding_4_t1...) and
    create them with IF NOT EXISTS in their own shape; leaving ours behind would break them."""
    yield
    for t in tables:
        try:
            p.query(f"DROP TABLE IF EXISTS {t}", database=database)
        except Exception:  # noqa: BLE001 - best effort; a dead proxy is reported by its own test
            pass
