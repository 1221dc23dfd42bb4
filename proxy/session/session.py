"""One client connection: login, then commands in order, each answered before the next is read."""

from __future__ import annotations

import asyncio
import re
import ssl
import struct
import time
from typing import TYPE_CHECKING, Any, Callable

import structlog

from meta.errors import (AccessDenied, BackendError, ConnectionKilled, DbAccessDenied, NoDatabaseSelected,
                         NotSupported, ParseError, ProxyError, QueryInterrupted, TransactionInProgress,
                         UnknownCommand)

from proxy.plan import local
from proxy.session import infoschema, show_where, sql_prepare, views
from proxy.backends.backend import Sink
from proxy.session.connection import login, native_auth, run_statements
from proxy.plan.analysis import ANY
from proxy.plan.analyzer import Grants
from proxy.exec.executor import Executor
from proxy.log import REQUEST_ID
from proxy.exec.planner import quick_route
from proxy.plan.router import one_statement
from proxy.session.prepared import COMMANDS as STMT_COMMANDS, PreparedStatements
from proxy.wire import constants as C
from proxy.wire.collations import ASCII_TAIL_CHARSETS, COLLATIONS, charset_of
from proxy.wire.handshake import parse_change_user, parse_stored_password, verify_native_password
from proxy.wire.messages import ResultSet, err_packet
from proxy.wire.packets import PacketFramer, PacketTooBig, ProtocolError, frame
from proxy.wire.reply import Reply
from proxy.plan.sqltok import first_keyword, tokenize, unquote_ident
from proxy.exec.user_locks import calls as user_lock_calls
from proxy.exec.xa import refuse_implicit_commit, xa_switch

if TYPE_CHECKING:
    from proxy.runtime import Runtime

log = structlog.get_logger("pydble.session")

LOGIN_PACKET_MAX = 8192  # a handshake response with every connection attribute a driver sends fits


# what may come between SET TRANSACTION and the transaction it is for (Session.before_next_txn): those that
# begin or end one, SHOW, and SELECT, DO and SET naming no table (local.names_no_table)
_NEXT_TXN_WORDS = frozenset({"BEGIN", "START", "COMMIT", "ROLLBACK", "SHOW"})
_NO_TABLE_WORDS = frozenset({"SELECT", "DO", "SET"})
# a byte of a multibyte character followed by an ASCII byte an ASCII_TAIL_CHARSETS character may end in
_ASCII_TAIL = re.compile(rb"[\x80-\xff][\x40-\x7e]")
_CHARSET_SET = re.compile(r"^SET (?:NAMES|CHARACTER SET|SESSION character_set_client =) ['\"`]?([A-Za-z][A-Za-z0-9_]*)['\"`]?"
                          r"(?: COLLATE \S+)?$", re.I)


def _charset_set(changes: list[Any]) -> str | None:
    """The client character set the last SET NAMES / CHARACTER SET / character_set_client of `changes` names
    plainly (its replayed text); None when it is DEFAULT or an expression, which only a node can tell."""
    last = next(a for a in reversed(changes) if a.key in ("names", "character_set_client"))
    m = _CHARSET_SET.match(last.sql)
    return None if m is None or m.group(1).lower() == "default" else m.group(1).lower()


_SHOW_COUNT = re.compile(r"^\s*SHOW\s+COUNT\s*\(\s*\*\s*\)\s+(WARNINGS|ERRORS)\s*;?\s*$", re.I)


def _feed(protocol: asyncio.BaseProtocol, data: bytes) -> None:
    """Give bytes to a (buffered) protocol as if its transport had read them."""
    if hasattr(protocol, "buffer_updated"):  # asyncio's and uvloop's TLS protocols are buffered
        view = memoryview(data)
        while view:
            buf = protocol.get_buffer(len(view))  # type: ignore[attr-defined]
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            protocol.buffer_updated(n)  # type: ignore[attr-defined]
            view = view[n:]
    else:
        protocol.data_received(data)  # type: ignore[attr-defined]


class ClientProtocol(asyncio.Protocol):
    """Thin asyncio adapter: bytes in to the session's framer, bytes out to the socket, with backpressure."""

    def __init__(self, runtime: Runtime, session_cls: Callable[[Runtime, ClientProtocol], Any] | None = None) -> None:
        self.runtime = runtime
        self.session_cls = session_cls or Session
        self.transport: asyncio.Transport | None = None
        self.framer = PacketFramer(max_payload=LOGIN_PACKET_MAX)  # raised to max_allowed_packet after login
        self.session: Any = None   # a Session, or the manager port's session
        self._wakeup: asyncio.Future | None = None
        self.busy = False        # a command served by the fast path is in flight
        self.pending: tuple[int, bytes] | None = None  # a packet the fast path took and handed back
        self.closed = False
        self.write_paused = False
        self._drain_waiters: list[asyncio.Future] = []
        self._rx = 0                      # feeds so far: progress of a partial packet
        self._stall: asyncio.TimerHandle | None = None
        self._read_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        limit = self.runtime.config.server.max_connections
        if self.session_cls is Session and self.runtime.client_sessions() >= limit:
            self.runtime.metrics.refused.inc()
            # like MySQL: an ERR instead of the greeting, then close; everyone else keeps going
            transport.write(frame(0, err_packet(1040, "08004", f"Too many connections (max_connections={limit})")))
            transport.close()
            self.closed = True
            return
        self._buffer_limits(transport)
        self.session = self.session_cls(self.runtime, self)
        self.runtime.track(self.session)
        self.runtime.metrics.connections.inc()

    def _buffer_limits(self, transport: asyncio.BaseTransport) -> None:
        """Past client_buffer_kb queued for the client, the backends streaming to it are paused."""
        buffer = self.runtime.config.server.client_buffer_kb << 10
        transport.set_write_buffer_limits(high=buffer, low=buffer // 4)  # type: ignore[attr-defined]

    def _feed(self, data: bytes) -> bool:
        """Buffer bytes; refuse (1153, close) a packet announced bigger than the limit before it arrives,
        stop reading a client that sends far ahead, watch a started packet for stalling."""
        framer = self.framer
        try:
            framer.feed(data)
        except PacketTooBig as e:
            self.write(e.packet())
            self.close()
            self.connection_lost(None)
            return False
        self._rx += 1
        if framer.buffered > framer.max_payload + 65536 and not self._read_paused and self.transport is not None:
            self._read_paused = True
            self.transport.pause_reading()
        if self._stall is None and framer.buffered:
            self._stall = asyncio.get_running_loop().call_later(self.runtime.config.server.packet_timeout_s,
                                                                self._check_stall, self._rx)
        return True

    def _check_stall(self, seen: int) -> None:
        """A packet started and nothing more came for packet_timeout_s: the client is gone or hostile."""
        self._stall = None
        if self.closed or not self.framer.partial():
            return
        if self._rx == seen and not self._read_paused:
            if self.session is not None:
                self.session.log.info("partial packet timed out, closing", buffered=self.framer.buffered)
            self.close()
            self.connection_lost(None)
            return
        self._stall = asyncio.get_running_loop().call_later(self.runtime.config.server.packet_timeout_s,
                                                            self._check_stall, self._rx)

    def _resume_reading(self) -> None:
        if self._read_paused and self.framer.buffered <= self.framer.max_payload and self.transport is not None:
            self._read_paused = False
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.busy:
            self._feed(data)
            return  # the fast command in flight looks at the rest when it ends
        w = self._wakeup
        if w is None or w.done():
            self._feed(data)
            return
        s = self.session
        if s is not None and s.ready and not self.write_paused:   # paused: the task waits for the client first
            n = len(data)
            if (n >= 5 and not self.framer.buffered and data[0] | data[1] << 8 | data[2] << 16 == n - 4
                    and n - 4 < min(0xFFFFFF, self.framer.max_payload)):
                # exactly one whole packet and nothing before it: hand the bytes over as they are
                if not s.fast_command(data):
                    w.set_result(None)  # the task takes it from `pending`
                return
            if not self._feed(data):
                return
            if s.fast_command():
                return
        else:
            self._feed(data)
        if not w.done():
            w.set_result(None)

    def kick(self) -> None:
        """A fast command ended: serve what the client sent meanwhile, fast or by waking the task."""
        self.busy = False
        if self._read_paused:
            self._resume_reading()
        w = self._wakeup
        if w is None or w.done():
            return
        if (not self.closed and self.framer.buffered and not self.write_paused and self.session is not None
                and self.session.fast_command()):
            return
        if self.closed or self.pending is not None or self.framer.buffered:
            w.set_result(None)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.framer.clear()  # the buffers go now, not at the next garbage collection
        self.pending = None
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        w = self._wakeup
        if w is not None and not w.done():
            w.set_result(None)
        for f in self._drain_waiters:
            if not f.done():
                f.set_result(None)
        if self.session is not None:
            self.session.on_client_lost()

    def pause_writing(self) -> None:
        self.write_paused = True
        if isinstance(self.session, Session):
            self.session.executor.pause_backends()

    def resume_writing(self) -> None:
        self.write_paused = False
        if isinstance(self.session, Session):
            self.session.executor.resume_backends()
        for f in self._drain_waiters:
            if not f.done():
                f.set_result(None)
        self._drain_waiters.clear()

    def write(self, data: bytes) -> None:
        """Send bytes to the client unless it has gone."""
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    async def drain(self) -> None:
        """Wait until the client has taken what we wrote (backpressure for locally built results)."""
        if self.write_paused and not self.closed:
            f = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(f)
            await f

    async def next_packet(self, timeout: float | None = None) -> tuple[int, bytes] | None:
        """The next complete packet from the client, or None when the client is gone; not before the client
        has taken most of what it was answered (a client that sends without reading grows no buffer here)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self.write_paused and not self.closed:
                await self.drain()
                continue
            if self.pending is not None:
                pkt, self.pending = self.pending, None
                return pkt
            for pkt in self.framer.packets():
                self._resume_reading()
                return pkt
            if self.closed:
                return None
            self._wakeup = loop.create_future()
            if deadline is None:
                await self._wakeup
            else:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                try:
                    await asyncio.wait_for(self._wakeup, remaining)
                except asyncio.TimeoutError:
                    return None
            self._wakeup = None

    async def start_tls(self, ctx: ssl.SSLContext, timeout: float) -> bool:
        """After the client's SSLRequest: the TLS handshake on this connection; False if it failed
        (the connection is then closed)."""
        loop = asyncio.get_running_loop()
        raw = self.transport
        assert raw is not None
        raw.pause_reading()  # nothing more reaches the framer: what comes next is TLS
        early = self.framer.take_rest()  # ClientHello bytes read with the SSLRequest, if any
        upgrade = loop.create_task(loop.start_tls(raw, self, ctx, server_side=True, ssl_handshake_timeout=timeout))
        if early:
            # start_tls puts its TLS protocol on the transport in its first step and schedules that
            # protocol's connection_made; hand it the early bytes right after, before any new ones
            while raw.get_protocol() is self and not upgrade.done():
                await asyncio.sleep(0)
            if raw.get_protocol() is not self:
                loop.call_soon(_feed, raw.get_protocol(), early)
        try:
            self.transport = await upgrade
            self._buffer_limits(self.transport)
        except (ssl.SSLError, OSError, asyncio.TimeoutError, ConnectionError) as e:
            log.info("TLS handshake failed, closing", error=str(e) or type(e).__name__)
            self.closed = True
            raw.close()
            return False
        return True

    def close(self) -> None:
        """Close the client socket."""
        if self.transport is not None and not self.closed:
            self.transport.close()


class Session:
    """The state of one client session and the dispatch of its commands."""

    def __init__(self, runtime: Runtime, client: ClientProtocol) -> None:
        self.runtime = runtime
        self.client = client
        self.conn_id = runtime.next_conn_id()
        self.user = ""
        self.schema: str | None = None
        self.schemas: tuple[str, ...] = ()
        self.salt = b""          # the handshake's scramble: COM_CHANGE_USER answers to it
        self.collation_id = C.CHARSET_UTF8MB4_GENERAL_CI  # the handshake's (or COM_CHANGE_USER's)
        self.read_only = False
        self.grants: Grants | None = None   # set at login: what this client may reach
        self.admin = False
        self.command, self.info, self.since = "Connect", None, time.perf_counter()  # for SHOW PROCESSLIST
        self.capabilities = 0
        self.format_flags = 0
        self.deprecate_eof = False
        self.autocommit = True
        self.explicit_txn = False
        self.xa = False          # SET xa = on: transactions over several nodes commit two-phase (proxy/exec/xa.py)
        self.ansi_quotes = False  # the session's sql_mode has ANSI_QUOTES: "x" is an identifier (refuse_misread)
        self.no_backslash_escapes = False   # ... NO_BACKSLASH_ESCAPES: 'a\' is a whole string (refuse_misread)
        self.ascii_tail = False   # the client's character set is one of ASCII_TAIL_CHARSETS (refuse_misread)
        self.brackets = False     # ... sql_mode MSSQL: [x] is a quoted identifier (refuse_misread)
        self.next_txn: dict[str, str] = {}   # SET TRANSACTION without SESSION: key -> statement, for the next one
        self.txn_chars: list[str] = []       # those the explicit transaction open now began with (Executor._sync)
        self.txn_snapshot = False            # while START TRANSACTION WITH CONSISTENT SNAPSHOT starts each node's part
        self.vars: dict[str, str] = {}
        self.last_insert_id = 0
        self.row_count: int | None = 0   # ROW_COUNT() as the client would read it now (None: pydble cannot tell)
        self.running: int | None = None  # while a statement runs: ROW_COUNT() as it was before it
        self.warnings: list[tuple[str, int, str]] = []  # pydble's own warnings for SHOW WARNINGS
        self.requests = 0        # COM_QUERYs so far: with conn_id, the request id in the logs
        self.killed = False      # a KILL QUERY interrupted the command running (Executor.run_single sends no more of it)
        self.ending = False      # the session closes once this command is answered (KILL of its own connection)
        self.route = "local"     # how the last statement was served: local | single | multi | ddl
        self.ready = False       # logged in: the fast path may serve commands from the data callback
        self.peer = "?"
        self.log = log.bind(session=self.conn_id)
        self.executor = Executor(self)
        self.prepared = PreparedStatements(self)
        self.task: asyncio.Task | None = asyncio.get_running_loop().create_task(self.run())

    # -- lifecycle ------------------------------------------------------------------------------
    def on_client_lost(self) -> None:
        """The client went away: drop pinned backends (their transactions roll back) and stop."""
        self.executor.abort_all()
        if self.task is not None and not self.task.done() and self.task is not asyncio.current_task():
            self.task.cancel()

    async def run(self) -> None:
        """Handshake, then serve commands until COM_QUIT or the client leaves."""
        try:
            peer = self.client.transport.get_extra_info("peername") if self.client.transport else None
            self.peer = peer[0] if peer else "?"
            answer_seq = 0
            if not await self.handshake():
                return
            self.ready = True   # the fast path may serve its commands from now on
            while True:
                pkt = await self.client.next_packet()
                if pkt is None:
                    break
                answer_seq, payload = pkt
                answer_seq += 1   # a malformed command is answered in the command's sequence, as any answer
                if not payload:
                    raise ProtocolError("empty command packet")
                if not await self.dispatch(payload) or self.ending:
                    break
        except asyncio.CancelledError:
            pass
        except PacketTooBig as e:
            self.client.write(e.packet())
        except ProtocolError as e:
            self.log.info("protocol error, closing", error=str(e))
            self.client.write(frame(answer_seq & 0xFF, b"\xff" + struct.pack("<H", 1047) + b"#08S01"
                                    + f"Malformed packet: {e}".encode()))
        except Exception:
            self.log.exception("session crashed")
        finally:
            self.executor.abort_all()
            self.prepared.close_all()  # long data included: freed now, not when the cycle is collected
            self.client.close()
            self.runtime.untrack(self)

    # -- the fast path --------------------------------------------------------------------------
    def fast_command(self, data: bytes | None = None) -> bool:
        """Serve the next command from the data callback if it is a plain statement for one node with a
        connection ready for it: no task switch, no future, no timer per query (the sysbench point
        select). False hands the packet to the task, which does everything else the slow, general way.
        Also True when no complete packet is there yet. data: the bytes just received when they are
        exactly one whole packet and nothing else is buffered (the common case skips the framer)."""
        client = self.client
        if data is not None:
            pkt: tuple[int, bytes] | None = (data[3], data[4:])
        else:
            pkt = None
            try:
                for pkt in client.framer.packets():
                    break
            except ProtocolError:
                return False  # the task reads it again and answers the error
            if pkt is None:
                return True
        payload = pkt[1]  # type: ignore[index]
        cmd = payload[:1]
        before, self.row_count = self.row_count, None   # Executor._single_end sets it when the statement ends
        if self.next_txn:
            started = False   # the task answers it (Session.before_next_txn)
        elif cmd == b"\x03":
            started = self._fast_query(payload, data)
        elif cmd == b"\x17":   # sysbench --db-ps-mode=auto
            started = self.prepared.fast_point(payload)
            if started is None:
                bound = self.prepared.fast_bind(payload)
                started = bound is not None and self._fast_query(payload, None, bound, self.prepared.binary_sink())
        else:
            started = False
        if not started:
            self.row_count = before   # nothing ran: the task serves it
            client.pending = pkt
            return False
        return True

    def _fast_query(self, payload: bytes, packet: bytes | None, sql: str | None = None,
                    sink: Sink | None = None) -> bool:
        """Start a statement from the data callback when its plan is a Route that needs nothing of the task
        (planner.quick_route, Route.start); packet: the framed bytes. sql and sink: the bound text of a
        COM_STMT_EXECUTE and the sink turning its answer binary."""
        if sql is None:
            sql = payload[1:].decode("utf-8", "surrogateescape")
        if self._may_be_misread(sql) or self.schema == infoschema.NAME:
            return False   # the task refuses it (refuse_misread, infoschema.refuse_as_current)
        route = quick_route(self.executor, sql)
        if route is None:
            return False
        if sink is None and route.sql == sql:   # the client's own packet goes on unchanged
            if packet is None or packet[3] != 0:
                packet = frame(0, payload)
        else:
            packet = None
        return route.start(self.executor, packet, sink, sql)

    # -- login ----------------------------------------------------------------------------------
    async def handshake(self) -> bool:
        """Greet, authenticate with mysql_native_password, pick the schema; False if refused."""
        got = await login(self.client, self.conn_id, self.runtime.version, self.runtime.tls,
                          self.runtime.login_timeout_s, self.authenticate, self.log)
        if got is None:
            return False
        self.salt = got.salt
        self.capabilities = got.capabilities
        self.deprecate_eof = bool(self.capabilities & C.DEPRECATE_EOF)
        self.format_flags = self.capabilities & C.FORMAT_FLAGS
        self.client_charset(got.charset)
        self.log = self.log.bind(user=self.user)
        self.client.framer.max_payload = self.runtime.max_packet
        self.command = "Sleep"
        r = Reply(self.deprecate_eof)
        r.seq = got.seq
        try:
            await self.client_modes()
        except ProxyError as e:
            r.proxy_error(e)
            self.client.write(r.bytes())
            return False
        r.ok(self.status())
        self.client.write(r.bytes())
        return True

    async def client_modes(self) -> None:
        """A client that asked for IGNORE_SPACE in its handshake has it in its sql_mode, as MariaDB gives it
        (after COM_RESET_CONNECTION and COM_CHANGE_USER too): `COUNT (*)` is then a function call."""
        if self.capabilities & C.IGNORE_SPACE:
            await self.do_set("SET sql_mode = CONCAT(@@sql_mode, ',IGNORE_SPACE')")

    async def _native_auth(self, plugin: str | None, auth: bytes, seq: int, caps: int) -> tuple[int, bytes] | None:
        return await native_auth(self.client, self.salt, plugin, auth, seq, caps, self.runtime.login_timeout_s)

    async def change_user(self, payload: bytes) -> bool:
        """COM_CHANGE_USER: log in again as another user (checked against the handshake's salt), then start
        afresh as COM_RESET_CONNECTION does, in the requested schema; a refusal ends the connection."""
        req = parse_change_user(payload, self.capabilities | C.PROTOCOL_41)
        switched = await self._native_auth(req.auth_plugin, req.auth_response, 1, self.capabilities)
        if switched is None:
            return False
        seq, auth = switched
        await self.reset_state()
        if self.user:  # the old login no longer counts against its user's max_con
            self.runtime.count_user(self.user, -1)
        self.user, self.schema = "", None
        r = Reply(self.deprecate_eof)
        r.seq = seq
        try:
            self.authenticate(req.user, auth, self.salt, req.database)
        except ProxyError as e:
            r.proxy_error(e)
            self.client.write(r.bytes())
            self.log.info("change user refused", user=req.user, code=e.code)
            return False
        if req.charset is not None:
            self.client_charset(req.charset)
        self.log = self.log.bind(user=self.user)
        r.ok(self.status())
        self.client.write(r.bytes())
        return True

    def client_charset(self, collation_id: int) -> None:
        """The collation a client names at login (the handshake's charset byte) is its session's, replayed
        on backend connections as SET NAMES ... COLLATE ...; an unknown id keeps the default."""
        self.collation_id = collation_id
        name = COLLATIONS.get(collation_id)
        if name is not None:
            self.set_var("names", f"SET NAMES {charset_of(name)} COLLATE {name}")
        self.ascii_tail = name is not None and charset_of(name) in ASCII_TAIL_CHARSETS

    def authenticate(self, user: str, auth: bytes, salt: bytes, database: str | None) -> None:
        """Check the user's password and schema grant, raising 1045/1044/1049 as MySQL does."""
        u = self.runtime.config.users.get(user)
        pw_note = "YES" if auth else "NO"
        # an unknown user costs the same check as a known one: the time does not tell which names exist
        stored = parse_stored_password(u.password if u is not None else "\x00")
        if not verify_native_password(auth, salt, stored) or u is None:
            raise AccessDenied(f"Access denied for user '{user}'@'{self.peer}' (using password: {pw_note})")
        if not self.runtime.user_may_connect(u):
            raise ProxyError(f"Too many connections for user '{user}'", 1203, "42000")
        if database and database not in u.schemas and database.lower() != infoschema.NAME:   # as use_schema
            raise DbAccessDenied(f"Access denied for user '{user}'@'{self.peer}' to database '{database}'")
        # the session is the user's only now: a refusal above must not count against (or for) its max_con
        self.user = user
        self.schemas = u.schemas
        self.read_only = u.read_only
        self.grants = Grants(u, self.peer, self.runtime.config)
        self.admin = u.admin
        if database:
            self.use_schema(database)
        self.runtime.count_user(u.name, +1)

    # -- state ----------------------------------------------------------------------------------
    def status(self) -> int:
        """The real status flags of this session."""
        st = C.STATUS_AUTOCOMMIT if self.autocommit else 0
        if self.explicit_txn or self.executor.in_trans():
            st |= C.STATUS_IN_TRANS
        return st

    async def reset_state(self) -> None:
        """COM_RESET_CONNECTION (and COM_CHANGE_USER): the transaction rolls back, statements and
        session variables are gone, autocommit is on again, the collation is the handshake's."""
        await self.executor.rollback_all()
        await self.executor.unlock_tables()
        await self.executor.user_locks.release()   # as MySQL's reset: the session's GET_LOCK locks go
        await self.executor.temp.release()         # and its temporary tables
        self.prepared.close_all()
        self.vars = {}
        self.client_charset(self.collation_id)  # MariaDB goes back to the handshake's collation too
        self.ansi_quotes = self.no_backslash_escapes = self.brackets = False
        await self.client_modes()
        self.autocommit = True
        self.explicit_txn = False
        self.xa = False
        self.next_txn, self.txn_chars = {}, []
        self.last_insert_id = 0
        self.row_count = 0
        self.warnings = []

    def set_var(self, key: str, sql: str) -> None:
        """Record a session variable to be replayed on every backend connection this session uses."""
        if key == "names" and sql.lower() in ("", "set names utf8mb4", "set names utf8mb4 collate utf8mb4_general_ci"):
            self.vars.pop(key, None)
        else:
            self.vars[key] = sql
        self.prepared.assigned.discard(key)  # a SET tells the variable's value again

    def use_schema(self, name: str) -> None:
        """USE / COM_INIT_DB: only granted, configured schemas, and information_schema (as MariaDB allows every
        user; pydble answers in it what infoschema.refuse_as_current lets through)."""
        if name.lower() == infoschema.NAME:
            self.schema = infoschema.NAME
            return
        if name not in self.schemas:
            raise DbAccessDenied(f"Access denied for user '{self.user}'@'{self.peer}' to database '{name}'")
        self.schema = name

    def local_values(self) -> dict[str, object]:
        """Values for the locally answered probes. DATABASE() and USER() are not among them: a node answers
        them (substitute_database puts the session's values in), so their columns are typed in the client's
        character set as MariaDB types them."""
        return {"connection_id": self.conn_id, "last_insert_id": self.last_insert_id,
                "version_comment": "pydble sharding proxy",
                "warning_count": len(self.warnings), "in_transaction": int(bool(self.status() & C.STATUS_IN_TRANS)),
                "error_count": sum(1 for w in self.warnings if w[0] == "Error")}

    # -- commands -------------------------------------------------------------------------------
    async def dispatch(self, payload: bytes) -> bool:
        """Answer one command; False when the session should end."""
        cmd = payload[0]
        r = Reply(self.deprecate_eof)
        self.killed = False
        await self.executor.settle()
        try:
            if cmd == C.COM_QUERY:
                sql = str(memoryview(payload)[1:], "utf-8", "surrogateescape")  # no copy of the bytes first
                await self.query(sql, r)
                return True
            if cmd == C.COM_QUIT:
                return False
            if cmd == C.COM_PING:
                r.ok(self.status())
            elif cmd == C.COM_INIT_DB:   # the name as is, as MariaDB reads it: `schema1` (quoted) is no schema
                if len(payload) == 1:
                    raise NoDatabaseSelected("No database selected")
                self.use_schema(payload[1:].decode("utf-8", "replace"))
                r.ok(self.status())
            elif cmd == C.COM_FIELD_LIST:
                if self.schema == infoschema.NAME:   # (no node holds its tables)
                    infoschema.refuse_as_current("COM_FIELD_LIST")
                if self.grants is not None and self.schema is not None:
                    name = payload[1:].split(b"\x00", 1)[0].decode("utf-8", "replace").lower()
                    self.grants.check((("SELECT", ANY, self.schema, name),))
                if await self.executor.field_list(payload, r):
                    return True
            elif cmd == C.COM_RESET_CONNECTION:
                await self.reset_state()
                r.ok(self.status())
            elif cmd == C.COM_CHANGE_USER:
                return await self.change_user(payload)
            elif cmd == C.COM_SET_OPTION:
                opt = struct.unpack_from("<H", payload, 1)[0] if len(payload) >= 3 else -1
                if opt == 0:
                    self.capabilities |= C.MULTI_STATEMENTS
                elif opt == 1:
                    self.capabilities &= ~C.MULTI_STATEMENTS
                else:
                    raise UnknownCommand("Unknown command")   # (MariaDB's words)
                r.eof(self.status())
            elif cmd == C.COM_PROCESS_KILL:   # libmariadb's mysql_kill(), mysqladmin kill: KILL CONNECTION id
                await self.kill(f"KILL CONNECTION {int.from_bytes(payload[1:5], 'little')}")
                r.ok(self.status())
            elif cmd == C.COM_STATISTICS:
                r.raw(frame(1, f"Uptime: {self.runtime.uptime():.0f}  Threads: {len(self.runtime.sessions)}".encode()))
            elif cmd in STMT_COMMANDS:
                if cmd == C.COM_STMT_EXECUTE:   # one that does not run through statement() leaves it unknown
                    self.running, self.row_count = self.row_count, None
                try:
                    await self.prepared.dispatch(payload)  # answers (or not) itself
                finally:
                    self.running = None
                return True
            else:
                raise UnknownCommand(f"Unknown command {cmd:#04x}")
        except ProxyError as e:
            r.proxy_error(e)
        self.client.write(r.bytes())
        return True

    async def query(self, sql: str, r: Reply) -> None:
        """COM_QUERY: one statement relayed as is where possible, several answered in order."""
        self.requests += 1
        REQUEST_ID.set(f"{self.conn_id}.{self.requests}")
        started = time.perf_counter()
        self.route = "local"
        self.command, self.info, self.since = "Query", sql, time.perf_counter()
        try:
            await self._query(sql, r)
        finally:
            self.runtime.metrics.observe(self.route, started)
            self.command, self.info, self.since = "Sleep", None, time.perf_counter()

    async def _query(self, sql: str, r: Reply) -> None:
        await run_statements(self.client, sql, r, bool(self.capabilities & C.MULTI_STATEMENTS), self.statement,
                             lambda: self.ending)

    async def statement(self, sql: str, r: Reply, more: bool, may_relay: bool) -> bool:
        """Run one statement; True if its answer was relayed straight to the client. ROW_COUNT() is
        the session's own: what this statement's answer says (a relaying path sets it), else unknown. The
        error it ends with, pydble's own too, is what SHOW WARNINGS lists next, as in MariaDB."""
        nested = self.running is not None   # EXECUTE's statement, or a COM_STMT_EXECUTE's
        before = self.running if nested else self.row_count
        self.running, self.row_count, r.row_count = before, None, None
        try:
            relayed = await self._statement(sql, r, more, may_relay, before)
        except ProxyError as e:
            self.row_count = -1   # the client hears an error: -1, as MariaDB answers
            self.warnings = [("Error", e.code, e.message)]
            raise
        finally:
            if not nested:
                self.running = None
        if self.row_count is None and not relayed:
            self.row_count = r.row_count
        return relayed

    async def _statement(self, sql: str, r: Reply, more: bool, may_relay: bool, row_count: int | None) -> bool:
        if ";" in sql:   # (the statements the session answers itself too: a SET's value runs on a backend)
            one_statement(sql, tokenize(sql))
        kw = first_keyword(sql)
        self.before_next_txn(sql, kw)
        self.refuse_misread(sql)
        if self.schema == infoschema.NAME:
            infoschema.refuse_as_current(kw)
        if kw == "CALL":
            sql_prepare.note_assignments(self, sql, kw)
        if kw == "SHOW" and not self.ansi_quotes:
            sql = local.show_single_quoted(sql)   # LIKE "t%" as LIKE 't%'
        if ((kw == "SHOW" and local.show_reads_tables(sql))
                or (kw in ("SELECT", "WITH") and infoschema.mentions(sql) and infoschema.find_refs(sql))):
            self.warnings = []   # as in MariaDB: a statement reading a table starts a fresh SHOW WARNINGS
        if kw == "SHOW":
            shown = local.show_over_infoschema(sql)
            if shown is not None:   # answered over the logical schemas, as MariaDB answers it from information_schema
                sql = shown.sql_for(self._show_schema(shown.schema) if shown.schema or shown.current else None)
        if infoschema.mentions(sql) and await infoschema.answer(self, sql, r, more):
            return False  # never sent to a backend as it is, in any statement kind (even SET @x = (SELECT ...))
        if kw == "SELECT":
            rs = local.local_select(sql, self.local_values())
            if rs is not None:
                r.resultset(rs, self.status(), more)
                return False
        if kw in ("SELECT", "WITH", "DO", "INSERT", "UPDATE", "DELETE", "REPLACE"):   # a backend would answer its own
            sql = local.substitute_database(sql, self.schema, self.conn_id, f"{self.user}@{self.peer}", row_count)
        if kw == "SET":
            await self.do_set(sql, row_count)
            r.ok(self.status(), more=more)
            return False
        elif kw == "USE":
            toks = [t for t in tokenize(sql) if not (t[0] == "o" and t[1] == ";")]   # comments, quotes as MySQL reads them
            if len(toks) != 2 or toks[1][0] not in "wq":
                raise ParseError(f"You have an error in your SQL syntax near '{sql.strip()[:40]}'")
            self.use_schema(unquote_ident(toks[1][1]))
            r.ok(self.status(), more=more)
            return False
        elif kw in ("BEGIN", "START"):
            if kw == "START" and "TRANSACTION" not in sql.upper():
                raise NotSupported(f"unsupported statement: {sql[:60]}")
            start = local.parse_start(sql)
            if start.snapshot and self.xa:
                raise NotSupported("START TRANSACTION WITH CONSISTENT SNAPSHOT is not supported by pydble with SET "
                                   "xa = on: XA START cannot take the snapshot; SET xa = off for this transaction")
            await self.executor.unlock_tables()  # as MySQL: a transaction starts by releasing table locks
            try:
                await self.executor.commit_all()
            except ProxyError:
                self.explicit_txn = False  # the old transaction ended (rolled back, as the error says)
                raise
            self.explicit_txn = True
            chars = list(self.next_txn.values()) + ([f"SET TRANSACTION {start.access}"] if start.access else [])
            self.txn_chars, self.next_txn = chars, {}   # each node's part begins with them
            if start.snapshot:
                await self.executor.snapshot(self.runtime.config.all_nodes_of_schemas(self.schemas))
            r.ok(self.status(), more=more)
            return False
        elif kw in ("COMMIT", "ROLLBACK"):
            if kw == "ROLLBACK" and " TO " in f" {sql.upper()} ":
                return await self.savepoint(sql, r, more)
            chain, release = local.parse_end(sql)
            chars = self.txn_chars if self.explicit_txn else []   # (those of an explicit transaction that ended before)
            try:
                if kw == "COMMIT":
                    await self.executor.commit_all()
                else:
                    await self.executor.rollback_all()
            finally:
                self.explicit_txn = False  # ended either way: committed, or rolled back as the error says
                self.next_txn = {}         # as MariaDB: a COMMIT or ROLLBACK uses up SET TRANSACTION's characteristics
            if chain:   # AND CHAIN: the next transaction begins now, with the characteristics of the one that ended
                await self.executor.unlock_tables()   # as MySQL: beginning it releases table locks (as START does)
                self.explicit_txn, self.txn_chars = True, chars
            self.ending = release   # RELEASE: MariaDB closes the connection after its OK
            r.ok(self.status(), more=more)
            return False
        elif kw in ("SAVEPOINT", "RELEASE"):
            return await self.savepoint(sql, r, more)
        elif kw == "SHOW":
            if (trg := local.parse_show_triggers(sql)) is not None:
                await infoschema.answer(self, local.show_triggers_query(self._show_schema(trg[0]), *trg[1:]), r, more)
                return False
            rs = await self.show(sql)
            if rs is not None:
                r.resultset(rs, self.status(), more)
                return False
        elif kw in ("LOCK", "UNLOCK") and _is_lock_tables(sql):
            if kw == "LOCK":
                if not self.autocommit:
                    raise NotSupported("LOCK TABLES with autocommit=0 is not supported by pydble: the locks are "
                                       "held outside the session's transactions; SET autocommit=1 first")
                refuse_implicit_commit(self.executor.xa, "LOCK TABLES")
                await self.executor.commit_all()  # as MySQL: LOCK TABLES commits the open transaction
                self.explicit_txn = False
                await self.executor.lock_tables(sql)
            else:
                await self.executor.unlock_tables()
            r.ok(self.status(), more=more)
            return False
        elif kw == "KILL":
            await self.kill(sql)
            r.ok(self.status(), more=more)
            return False
        elif sql_prepare.is_statement(kw, sql):
            return await sql_prepare.run(self, sql, r, more, may_relay)
        elif kw in ("LOCK", "UNLOCK", "LOAD", "HANDLER", "XA", "FLUSH", "GRANT", "REVOKE"):
            raise NotSupported(f"{kw} is not supported through the proxy")
        elif kw == "CREATE" and (db := local.create_database_if_not_exists(sql)) in self.schemas:
            # what a dump made with --databases starts with: the logical schema exists, as on MariaDB
            self.warnings = [("Note", 1007, f"Can't create database '{db}'; database exists")]
            r.ok(self.status(), warnings=1, more=more)
            return False
        elif kw == "" and not tokenize(sql):
            raise ProxyError("Query was empty", 1065, "42000")
        if kw in views.KEYWORDS and (view := views.parse(sql)) is not None:
            if view.op in ("CREATE", "ALTER") and view.select:
                self.executor.temp.refuse_in_view(view.select)   # MySQL's 1352
            if await self.runtime.views.run(self, view, r, more):
                return False
        return await self.executor.execute(sql, r, more, may_relay)

    def before_next_txn(self, sql: str, kw: str) -> None:
        """Refuse a statement that could open a transaction while SET TRANSACTION waits for the next one: pydble
        gives it to the one BEGIN or START TRANSACTION opens, never to a table's statement it cannot follow on
        the nodes. SHOW, and SELECT, DO or SET naming no table open none on MariaDB either: answered."""
        if not self.next_txn or kw in _NEXT_TXN_WORDS or (kw in _NO_TABLE_WORDS and local.names_no_table(sql)):
            return
        raise NotSupported("SET TRANSACTION without SESSION applies to the next transaction only, and pydble "
                           "gives it only to one that START TRANSACTION or BEGIN opens: start the transaction "
                           "first (or SET SESSION TRANSACTION for every transaction)")

    def refuse_misread(self, sql: str) -> None:
        """Refuse a statement that pydble's tokenizer (routing, rewriting, checking grants by it) would read
        otherwise than MariaDB under the session's sql_mode, never run it with another meaning."""
        if not self._may_be_misread(sql):
            return
        # big5, cp932, gbk, sjis: a character's second byte may be `\`, a backquote or a letter, which pydble
        # (reading UTF-8) would take for an escape, a quote or a word of the statement (no tokens needed)
        if self.ascii_tail and _ASCII_TAIL.search(sql.encode("utf-8", "surrogateescape")):
            raise NotSupported("a multibyte character whose second byte is an ASCII character (0x40-0x7E) is not "
                               "supported by pydble under a big5, cp932, gbk or sjis client character set: it reads "
                               "the statement as UTF-8; use utf8mb4 (SET NAMES utf8mb4)")
        toks = tokenize(sql)
        if self.brackets and any(t[0] == "o" and t[1] == "[" for t in toks):
            raise NotSupported("[...] under sql_mode MSSQL is not supported by pydble: it reads [ as an operator "
                               "and what follows as code; quote identifiers with backquotes (`x`)")
        if self.ansi_quotes and any(t[0] in "se" and t[1][0] == '"' for t in toks):
            raise NotSupported('"..." under sql_mode ANSI_QUOTES is not supported by pydble: it reads "..." as a '
                               "string; quote identifiers with backquotes (`x`) and strings with single quotes")
        # NO_BACKSLASH_ESCAPES: MariaDB ends 'a\' at its second quote where pydble reads on (so what follows
        # would pass unchecked): the two readings part only at a backslash in what pydble reads as quoted
        if self.no_backslash_escapes and any(t[0] in "sev" and "\\" in t[1] for t in toks):
            raise NotSupported("a backslash in a quoted string under sql_mode NO_BACKSLASH_ESCAPES is not supported "
                               "by pydble: it reads \\ as an escape; write the string without it (CHAR(92))")

    def _may_be_misread(self, sql: str) -> bool:
        """The cheap test before refuse_misread tokenizes: a character the session's sql_mode reads otherwise."""
        return ((self.ansi_quotes and '"' in sql) or (self.no_backslash_escapes and "\\" in sql)
                or (self.brackets and "[" in sql) or (self.ascii_tail and not sql.isascii()))

    async def savepoint(self, sql: str, r: Reply, more: bool) -> bool:
        """SAVEPOINT, ROLLBACK TO, RELEASE SAVEPOINT over every node of the transaction."""
        sp = local.parse_savepoint(sql)
        if sp is None:
            raise ParseError(f"You have an error in your SQL syntax near '{sql[:40]}'")
        await self.executor.savepoint(sp[0], sp[1], r, more)
        return False

    async def do_set(self, sql: str, row_count: int | None = None) -> None:
        """Apply a SET: autocommit here, everything else recorded and checked on a backend."""
        if user_lock_calls(sql):  # a SET is replayed on every backend connection: a lock would be taken on each
            raise NotSupported("GET_LOCK and the other user-lock functions are not supported by pydble in SET: "
                               "SELECT them")
        changes = local.parse_set(sql)
        if changes and changes[0].next_only:   # (SET TRANSACTION: its characteristics only)
            if self.explicit_txn or self.executor.in_trans():   # (not a node kept for autocommit=0 that
                raise TransactionInProgress()                  # has opened none: SELECT 1 opens none)
            self.next_txn.update((a.key, a.sql) for a in changes)
            return
        old_vars = dict(self.vars)
        new_autocommit = self.autocommit
        new_xa = self.xa
        plain: dict[str, str] = {}      # replayed as written
        computed: dict[str, str] = {}   # run once on a backend: key -> the variable read back, replayed by value
        parts: list[str] = []           # the SET as a backend runs it (pydble's own switches left out)
        for a in changes:
            if a.key == "autocommit":
                new_autocommit = a.value == "1"
                continue
            if a.key == "xa":
                new_xa = xa_switch(self, a.sql)
                continue
            stmt = a.sql
            if a.key.startswith("@"):   # a backend would answer its own DATABASE(), CONNECTION_ID(), USER()
                stmt = local.substitute_database(a.sql, self.schema, self.conn_id, f"{self.user}@{self.peer}",
                                                 row_count)
                computed[a.key] = a.key
            elif local.computed_value(a):
                computed[a.key] = f"@@session.{a.key}"
            else:
                plain[a.key] = a.sql
            if stmt:   # ('' is SET NAMES DEFAULT: pydble's own default, nothing to run)
                parts.append(stmt[4:] if stmt[:4].upper() == "SET " else stmt)
        values = await self.executor.run_set("SET " + ", ".join(parts), plain, computed) if computed else {}
        for a in changes:   # nothing is recorded when the SET failed on the backend
            if a.key in values:
                self.set_var(a.key, values[a.key])
            elif a.key in plain:
                self.set_var(a.key, plain[a.key])
            self.next_txn.pop(a.key, None)   # the session's value wins over one for the next transaction, as in MariaDB
        if not new_autocommit and self.autocommit and self.executor.locked:
            self.vars = old_vars
            raise NotSupported("SET autocommit=0 while LOCK TABLES is held is not supported by pydble: "
                               "UNLOCK TABLES first")
        if not computed and self.vars != old_vars:   # (a computed SET ran on a backend just now)
            try:
                await self.executor.check_session_state()
            except ProxyError:
                self.vars = old_vars
                raise
        if any(a.key == "sql_mode" for a in changes):
            modes = (await self.executor.session_variable("sql_mode")).split(",")
            self.ansi_quotes, self.no_backslash_escapes = "ANSI_QUOTES" in modes, "NO_BACKSLASH_ESCAPES" in modes
            self.brackets = "MSSQL" in modes
        if any(a.key in ("names", "character_set_client") for a in changes):
            cs = _charset_set(changes)   # read from a node only when the SET does not name it plainly
            if cs is None:
                cs = await self.executor.session_variable("character_set_client")
            self.ascii_tail = cs in ASCII_TAIL_CHARSETS
        self.xa = new_xa
        if new_autocommit != self.autocommit:
            if new_autocommit and (self.explicit_txn or self.executor.pinned):
                await self.executor.commit_all()
                self.explicit_txn = False
            self.autocommit = new_autocommit

    def sees(self, schema: str, table: str) -> bool:
        """Is schema.table listed to this session's user (Grants.sees)?"""
        return self.grants is None or self.grants.sees(schema, table)

    def _show_schema(self, named: str | None) -> str:
        """The schema a SHOW ... [FROM db] is about: named or current, and granted."""
        schema = named or self.schema
        if schema is None:
            raise NoDatabaseSelected("No database selected")
        if schema.lower() == infoschema.NAME:
            raise NotSupported("SHOW of information_schema's own tables is not supported by pydble: SELECT from "
                               "information_schema.<table>, which it answers for the logical schemas")
        if schema not in self.schemas:
            raise DbAccessDenied(f"Access denied for user '{self.user}'@'{self.peer}' to database '{schema}'")
        return schema

    def _sharded(self, schema: str, table: str) -> bool:
        """A sharding table: its nodes' rows add up to the table's."""
        t = self.runtime.config.table(schema, table)
        return t is not None and t.type == "sharding"

    async def _table_status(self, schema: str, like: str | None) -> ResultSet:
        """SHOW TABLE STATUS: the tables SHOW TABLES lists, each as one row under its logical name."""
        names = [t for t in await self.runtime.tables_of(schema)
                 if (like is None or local.like_match(like, t)) and self.sees(schema, t)]
        homes = {t: self.runtime.nodes_of_table(schema, t) for t in names}
        nodes = list(dict.fromkeys(n for ns in homes.values() for n in ns))
        if not nodes:
            nodes = [self.runtime.any_node(schema)]
        scanners = await self.executor._run_on([(n, "SHOW TABLE STATUS") for n in nodes])
        for sc in scanners:
            if sc.error is not None:
                raise BackendError(sc.error.message, sc.error.code, sc.error.sqlstate)
        by_node = {n: {bytes(r[0] or b"").decode().lower(): r for r in sc.results[0].rows}
                   for n, sc in zip(nodes, scanners)}
        rows = {t: [by_node[n][t] for n in homes[t] if t in by_node[n]][:None if self._sharded(schema, t) else 1]
                for t in names}   # a global table's copies hold the same rows: one stands for all
        columns = scanners[0].results[0].columns
        rows.update(self.runtime.views.status_rows(schema, like, columns))   # views: Comment 'VIEW', as MySQL
        return local.table_status_result(columns, {t: r for t, r in rows.items() if r})

    async def show(self, sql: str) -> ResultSet | None:
        """SHOW statements answered from the proxy's own knowledge, or None to route them."""
        dbs = local.show_databases(sql, list(self.schemas))
        if dbs is not None:
            return dbs[0] if dbs[1] is None else await show_where.where_filter(self, dbs[0], dbs[1])
        st = local.parse_show_tables(sql)
        if st is not None:
            schema = self._show_schema(st.schema)
            tables = [t for t in await self.runtime.tables_of(schema) if self.sees(schema, t)]
            views = [v for v in self.runtime.views.names_of(schema) if self.sees(schema, v)]
            rs = local.show_tables_result(st, schema, tables, views)
            return rs if st.where is None else await show_where.where_filter(self, rs, st.where)
        ts = local.parse_show_table_status(sql)
        if ts is not None:
            rs = await self._table_status(self._show_schema(ts[0]), ts[1])
            return rs if ts[2] is None else await show_where.where_filter(self, rs, ts[2])
        so = show_where.parse_show_open_tables(sql)
        if so is not None:
            schemas = [self._show_schema(so[0])] if so[0] else list(self.schemas)
            rs = await show_where.open_tables(self, schemas, so[1])
            return rs if so[2] is None else await show_where.where_filter(self, rs, so[2])
        up = " ".join(sql.upper().split()[:2])
        if up in ("SHOW WARNINGS", "SHOW ERRORS"):
            return self.executor.show_warnings(sql)
        m = _SHOW_COUNT.match(sql)
        if m is not None:
            return local.local_select(f"SELECT @@session.{m.group(1).lower()[:-1]}_count", self.local_values())
        up = " ".join(sql.upper().split()[:3])
        if up.startswith(("SHOW PROCESSLIST", "SHOW FULL PROCESSLIST")):
            full = "FULL" in up
            return local.show_processlist(local.processlist_rows(
                self.client_sessions(), self.user, self.admin, full, time.perf_counter()), full)
        who = local.parse_show_grants(sql)
        if who is not None:
            if who not in ("", self.user):  # as MySQL answers a user without access to the mysql database
                raise DbAccessDenied(f"Access denied for user '{self.user}'@'{self.peer}' to database 'mysql'")
            u = self.runtime.config.users[self.user]
            return local.show_grants(u.name, u.schemas, u.privileges, u.read_only)
        return None

    def client_sessions(self) -> list[Session]:
        """The client port's sessions (not the manager's): what the processlist and KILL speak of."""
        return [s for s in self.runtime.sessions if type(s) is Session]

    async def kill(self, sql: str) -> None:
        """KILL [CONNECTION | QUERY] id on pydble's own sessions (the user's own unless admin), never a
        backend's thread; an id of a sibling worker (`serve --workers N`) is killed by that worker."""
        parsed = local.parse_kill(sql)
        if parsed is None:
            raise ParseError(f"You have an error in your SQL syntax near '{sql.strip()[:40]}'")
        query_only, cid = parsed
        channel = self.runtime.kill_channel
        if channel is not None and channel.info.owner(cid) != channel.info.index:
            await channel.forward(cid, self.user, self.admin, query_only)
            return
        await kill_session(self.runtime, cid, self.user, self.admin, query_only, self)

    async def interrupt(self) -> None:
        """KILL QUERY: stop the statement on the backends running it for this session, and keep it from
        reaching one it has not been sent to yet (it may still be taking its connection)."""
        self.killed = True
        for conn in self.executor.running_conns():
            node = next((n for n, c in self.runtime.config.sharding_nodes.items() if c.db_group == conn.group.name), None)
            if node is None or not conn.thread_id:
                continue
            killer = await self.runtime.backends.acquire(node, 0)
            try:
                # taking the killer may have waited: the statement may have ended meanwhile and its connection
                # gone back to the pool, where another session's statement now runs; only this one's is killed
                if self.killed and conn in self.executor.running_conns():
                    await killer.query(f"KILL QUERY {int(conn.thread_id)}", self.runtime.backends.timeout_s)
            finally:
                self.runtime.backends.release(node, killer)


async def kill_session(runtime: Runtime, cid: int, user: str, admin: bool, query_only: bool,
                       caller: Session | None = None) -> None:
    """KILL [QUERY] cid in this process with `user`'s rights (the caller's session, or a sibling worker's)."""
    target = next((s for s in runtime.sessions if type(s) is Session and s.conn_id == cid and s.user), None)
    if target is None:
        raise ProxyError(f"Unknown thread id: {cid}", 1094, "HY000")
    if target.user != user and not admin:
        raise ProxyError(f"You are not owner of thread {cid}", 1095, "HY000")
    if target is caller:   # as MariaDB: the KILL itself is interrupted, or the connection ends after its 1927
        if query_only:
            raise QueryInterrupted()
        caller.ending = True
        raise ConnectionKilled()
    if not query_only:
        target.client.close()
        return
    if target.command != "Query":
        return
    await target.interrupt()


def _is_lock_tables(sql: str) -> bool:
    """LOCK TABLE[S] / UNLOCK TABLE[S] (not LOCK INSTANCE and the like)."""
    toks = tokenize(sql)
    return len(toks) >= 2 and toks[1][0] == "w" and toks[1][1].upper() in ("TABLE", "TABLES")


__all__ = ["ClientProtocol", "Session", "BackendError"]
