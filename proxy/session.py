"""One client connection: login, then commands in order, each answered before the next is read."""

from __future__ import annotations

import asyncio
import os
import struct
import time
from typing import TYPE_CHECKING

import structlog

from meta.errors import (AccessDenied, BackendError, BackendUnavailable, DbAccessDenied, NoDatabaseSelected,
                         NotSupported, ParseError, ProxyError, UnknownCommand)

from . import local
from .backend import BackendConnection
from .ddl import require_meta
from .executor import Executor, _com_query, _on_node as on_node
from .log import REQUEST_ID
from .prepared import COMMANDS as STMT_COMMANDS, PreparedStatements
from .protocol import constants as C
from .protocol.handshake import (build_auth_switch, build_greeting, parse_handshake_response, parse_stored_password,
                                 verify_native_password)
from .protocol.messages import ResultSet, eof_packet, err_packet
from .protocol.packets import PacketFramer, PacketTooBig, ProtocolError, frame
from .reply import Reply
from .sqltok import first_keyword, split_statements, tokenize

if TYPE_CHECKING:
    from .server import ProxyServer

log = structlog.get_logger("pydble.session")

CHARSETS = {8: "latin1", 28: "gbk", 33: "utf8", 45: "utf8mb4", 46: "utf8mb4", 63: "binary", 83: "utf8",
            192: "utf8", 224: "utf8mb4", 255: "utf8mb4"}
_SALT_CHARS = bytes(range(33, 127)).replace(b"$", b"")


def make_salt() -> bytes:
    """20 printable random bytes (no NUL, no '$'), as MySQL servers send."""
    return bytes(_SALT_CHARS[b % len(_SALT_CHARS)] for b in os.urandom(20))


class ClientProtocol(asyncio.Protocol):
    """Thin asyncio adapter: bytes in to the session's framer, bytes out to the socket, with backpressure."""

    def __init__(self, server: ProxyServer, session_cls: type[Session] | None = None) -> None:
        self.server = server
        self.session_cls = session_cls or Session
        self.transport: asyncio.Transport | None = None
        self.framer = PacketFramer(max_payload=server.max_packet)
        self.session: Session | None = None
        self._wakeup: asyncio.Future | None = None
        self.busy = False        # a command served by the fast path is in flight
        self.pending: tuple[int, bytes] | None = None  # a packet the fast path took and handed back
        self.closed = False
        self.write_paused = False
        self._drain_waiters: list[asyncio.Future] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        limit = self.server.config.server.max_connections
        if self.session_cls is Session and self.server.client_sessions() >= limit:
            self.server.metrics.refused.inc()
            # like MySQL: an ERR instead of the greeting, then close; everyone else keeps going
            transport.write(frame(0, err_packet(1040, "08004", f"Too many connections (max_connections={limit})")))
            transport.close()
            self.closed = True
            return
        buffer = self.server.config.server.client_buffer_kb << 10
        transport.set_write_buffer_limits(high=buffer, low=buffer // 4)  # past it: backends are paused
        self.session = self.session_cls(self.server, self)
        self.server.track(self.session)
        self.server.metrics.connections.inc()

    def data_received(self, data: bytes) -> None:
        if self.busy:
            self.framer.feed(data)
            return  # the fast command in flight looks at the rest when it ends
        w = self._wakeup
        if w is None or w.done():
            self.framer.feed(data)
            return
        s = self.session
        if s is not None and s.ready:
            n = len(data)
            if (n >= 5 and not self.framer.buffered and data[0] | data[1] << 8 | data[2] << 16 == n - 4
                    and n - 4 < min(0xFFFFFF, self.framer.max_payload)):
                # exactly one whole packet and nothing before it: hand the bytes over as they are
                if not s.fast_command(data):
                    w.set_result(None)  # the task takes it from `pending`
                return
            self.framer.feed(data)
            if s.fast_command():
                return
        else:
            self.framer.feed(data)
        w.set_result(None)

    def kick(self) -> None:
        """A fast command ended: serve what the client sent meanwhile, fast or by waking the task."""
        self.busy = False
        w = self._wakeup
        if w is None or w.done():
            return
        if not self.closed and self.framer.buffered and self.session is not None and self.session.fast_command():
            return
        if self.closed or self.pending is not None or self.framer.buffered:
            w.set_result(None)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
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
        if self.session is not None:
            self.session.executor.pause_backends()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.session is not None:
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
        """The next complete packet from the client, or None when the client is gone."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self.pending is not None:
                pkt, self.pending = self.pending, None
                return pkt
            for pkt in self.framer.packets():
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

    def close(self) -> None:
        """Close the client socket."""
        if self.transport is not None and not self.closed:
            self.transport.close()


class Session:
    """The state of one client session and the dispatch of its commands."""

    def __init__(self, server: ProxyServer, client: ClientProtocol) -> None:
        self.server = server
        self.client = client
        self.conn_id = server.next_conn_id()
        self.user = ""
        self.schema: str | None = None
        self.schemas: tuple[str, ...] = ()
        self.read_only = False
        self.capabilities = 0
        self.format_flags = 0
        self.deprecate_eof = False
        self.autocommit = True
        self.explicit_txn = False
        self.vars: dict[str, str] = {}
        self.last_insert_id = 0
        self.warnings: list[tuple[str, int, str]] = []  # pydble's own warnings for SHOW WARNINGS
        self.requests = 0        # COM_QUERYs so far: with conn_id, the request id in the logs
        self.route = "local"     # how the last statement was served: local | single | multi | ddl
        self.ready = False       # logged in: the fast path may serve commands from the data callback
        self._fast_conn: BackendConnection | None = None
        self._fast_node = ""
        self._fast_started = 0.0
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
            if not await self.handshake():
                return
            self.ready = type(self) is Session  # subclasses (the manager port) dispatch their own way
            while True:
                pkt = await self.client.next_packet()
                if pkt is None:
                    break
                _, payload = pkt
                if not payload:
                    raise ProtocolError("empty command packet")
                if not await self.dispatch(payload):
                    break
        except asyncio.CancelledError:
            pass
        except PacketTooBig:
            self.client.write(frame(0, b"\xff" + struct.pack("<H", 1153) + b"#08S01"
                                    + b"Got a packet bigger than 'max_allowed_packet' bytes"))
        except ProtocolError as e:
            self.log.info("protocol error, closing", error=str(e))
            self.client.write(frame(0, b"\xff" + struct.pack("<H", 1047) + b"#08S01"
                                    + f"Malformed packet: {e}".encode()))
        except Exception:
            self.log.exception("session crashed")
        finally:
            self.executor.abort_all()
            self.client.close()
            self.server.untrack(self)

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
        if payload[:1] != b"\x03" or not self._fast_query(payload, data):
            client.pending = pkt
            return False
        return True

    def _fast_query(self, payload: bytes, packet: bytes | None) -> bool:
        """Start a COM_QUERY on its node if nothing about it needs the task; packet: the framed bytes."""
        sql = payload[1:].decode("utf-8", "surrogateescape")
        if ";" in sql:
            return False
        server = self.server
        point = server.router.point_read(sql, self.schema)
        any_db = point is not None
        if point is not None:
            node, (schema, table), at = point
            if server.config.table(schema, table) is not None and server.registry.get(schema, table) is None:
                return False  # no metadata: the task answers 3009
            # Name the node's database in the statement: any pooled connection to the dbGroup can then
            # run it, so a few hot backend connections serve all shardingNodes of a server instead of
            # one set per database, each waking up cold.
            packet = _com_query(f"{sql[:at]}`{server.backends.database_of(node)}`.{sql[at:]}")
        else:
            head = sql[:6].upper()
            kw = head if head in ("SELECT", "INSERT", "UPDATE", "DELETE") else first_keyword(sql)
            if kw == "SELECT":
                low = sql.lower()
                # local probes (no FROM) and DATABASE() substitution are the task's business
                if " from " not in low or "database" in low or "schema(" in low:
                    return False
            elif kw not in ("INSERT", "UPDATE", "DELETE", "REPLACE"):
                return False
            try:
                plan = server.router.route(sql, self.schema)
                if len(plan.targets) != 1 or plan.kind == "ddl" or (self.read_only and plan.is_write):
                    return False
                if not plan.hint and plan.kind in ("select", "insert", "replace", "update", "delete"):
                    require_meta(server, plan)
            except ProxyError:
                return False  # the task plans it again and answers the error
            node = plan.targets[0].node
            if plan.targets[0].sql != sql:
                packet = _com_query(plan.targets[0].sql)
        ex = self.executor
        conn = ex.fast_conn(node, any_db)
        if conn is None:
            return False
        self.warnings = []
        self.requests += 1
        self.route = "single"
        self._fast_started = time.perf_counter()
        self._fast_conn = conn
        self._fast_node = node
        ex.last_node = node
        ex.streaming.add(conn)
        client = self.client
        if client.write_paused:
            conn.pause_reading()
        client.busy = True
        # the client's own packet goes on unchanged when the router did not rewrite the statement
        if packet is None or packet[3] != 0:
            packet = frame(0, payload)
        try:
            conn.start(packet, sink=client, timeout=server.backends.timeout_s, on_done=self._fast_done)
        except ProxyError:
            client.busy = False
            ex.streaming.discard(conn)
            self._fast_conn = None
            ex._done_with(node, conn)
            return False
        return True

    def _fast_done(self, sc: object, exc: ProxyError | None) -> None:
        """The backend's answer has been relayed (or failed): release, count, go on with the client."""
        conn, node = self._fast_conn, self._fast_node
        self._fast_conn = None
        client = self.client
        try:
            ex = self.executor
            if conn is not None:
                ex.streaming.discard(conn)
                ex._done_with(node, conn)
            if exc is not None:
                if conn is not None and conn.relayed_any:
                    client.close()  # half an answer was sent; the client must not trust it
                else:
                    e = on_node(node, exc) if isinstance(exc, BackendUnavailable) else exc
                    client.write(frame(1, err_packet(e.code, e.sqlstate, e.message)))
            else:
                ok = sc.ok  # type: ignore[attr-defined]
                if ok is not None and ok.last_insert_id:
                    self.last_insert_id = ok.last_insert_id
            self.server.metrics.observe("single", self._fast_started)
        except Exception:  # noqa: BLE001 - never leave the client waiting on a bug here
            self.log.exception("fast path completion failed")
            client.close()
        finally:
            client.kick()

    # -- login ----------------------------------------------------------------------------------
    async def handshake(self) -> bool:
        """Greet, authenticate with mysql_native_password, pick the schema; False if refused."""
        salt = make_salt()
        status = C.STATUS_AUTOCOMMIT
        self.client.write(frame(0, build_greeting(self.conn_id, self.server.version, salt, status=status)))
        pkt = await self.client.next_packet(timeout=self.server.login_timeout_s)
        if pkt is None:
            return False
        seq, payload = pkt
        try:
            resp = parse_handshake_response(payload)
        except ProtocolError as e:
            self.client.write(frame(seq + 1, b"\xff" + struct.pack("<H", 1043) + b"#08S01"
                                    + f"Bad handshake: {e}".encode()))
            return False
        seq += 1
        auth = resp.auth_response
        if resp.auth_plugin and resp.auth_plugin != C.NATIVE_PASSWORD and resp.capabilities & C.PLUGIN_AUTH:
            self.client.write(frame(seq, build_auth_switch(C.NATIVE_PASSWORD, salt)))
            pkt = await self.client.next_packet(timeout=self.server.login_timeout_s)
            if pkt is None:
                return False
            seq, auth = pkt
            seq += 1
        self.capabilities = resp.capabilities & C.SERVER_CAPABILITIES
        self.deprecate_eof = bool(self.capabilities & C.DEPRECATE_EOF)
        self.format_flags = self.capabilities & C.FORMAT_FLAGS
        try:
            self.authenticate(resp.user, auth, salt, resp.database)
        except ProxyError as e:
            r = Reply(self.deprecate_eof)
            r.seq = seq
            r.proxy_error(e)
            self.client.write(r.bytes())
            self.log.info("login refused", user=resp.user, code=e.code)
            return False
        cs = CHARSETS.get(resp.charset, "utf8mb4")
        if cs != "utf8mb4":
            self.set_var("names", f"SET NAMES {cs}")
        self.log = self.log.bind(user=self.user)
        r = Reply(self.deprecate_eof)
        r.seq = seq
        r.ok(self.status())
        self.client.write(r.bytes())
        return True

    def authenticate(self, user: str, auth: bytes, salt: bytes, database: str | None) -> None:
        """Check the user's password and schema grant, raising 1045/1044/1049 as MySQL does."""
        u = self.server.config.users.get(user)
        pw_note = "YES" if auth else "NO"
        if u is None or not verify_native_password(auth, salt, parse_stored_password(u.password)):
            raise AccessDenied(f"Access denied for user '{user}'@'{self.peer}' (using password: {pw_note})")
        if not self.server.user_may_connect(u):
            raise ProxyError(f"Too many connections for user '{user}'", 1203, "42000")
        self.user = user
        self.schemas = u.schemas
        self.read_only = u.read_only
        if database:
            if database not in u.schemas:
                raise DbAccessDenied(f"Access denied for user '{user}'@'{self.peer}' to database '{database}'")
            self.schema = database
        self.server.count_user(u.name, +1)

    # -- state ----------------------------------------------------------------------------------
    def status(self) -> int:
        """The real status flags of this session."""
        st = C.STATUS_AUTOCOMMIT if self.autocommit else 0
        if self.explicit_txn or self.executor.in_trans():
            st |= C.STATUS_IN_TRANS
        return st

    def set_var(self, key: str, sql: str) -> None:
        """Record a session variable to be replayed on every backend connection this session uses."""
        if key == "names" and sql.lower() in ("", "set names utf8mb4", "set names utf8mb4 collate utf8mb4_general_ci"):
            self.vars.pop(key, None)
        else:
            self.vars[key] = sql

    def use_schema(self, name: str) -> None:
        """USE / COM_INIT_DB: only granted, configured schemas."""
        if name not in self.schemas:
            raise DbAccessDenied(f"Access denied for user '{self.user}'@'{self.peer}' to database '{name}'")
        self.schema = name

    def local_values(self) -> dict[str, object]:
        """Values for the locally answered probes."""
        return {"database": self.schema, "connection_id": self.conn_id, "last_insert_id": self.last_insert_id,
                "user": f"{self.user}@{self.peer}", "version_comment": "pydble sharding proxy"}

    # -- commands -------------------------------------------------------------------------------
    async def dispatch(self, payload: bytes) -> bool:
        """Answer one command; False when the session should end."""
        cmd = payload[0]
        r = Reply(self.deprecate_eof)
        await self.executor.settle()
        try:
            if cmd == C.COM_QUERY:
                sql = payload[1:].decode("utf-8", "surrogateescape")
                await self.query(sql, r)
                return True
            if cmd == C.COM_QUIT:
                return False
            if cmd == C.COM_PING:
                r.ok(self.status())
            elif cmd == C.COM_INIT_DB:
                self.use_schema(payload[1:].decode("utf-8", "replace").strip("`"))
                r.ok(self.status())
            elif cmd == C.COM_FIELD_LIST:
                if await self.executor.field_list(payload, r):
                    return True
            elif cmd == C.COM_RESET_CONNECTION:
                await self.executor.rollback_all()
                self.prepared.close_all()
                self.vars = {}
                self.autocommit = True
                self.explicit_txn = False
                self.last_insert_id = 0
                r.ok(self.status())
            elif cmd == C.COM_SET_OPTION:
                opt = struct.unpack_from("<H", payload, 1)[0] if len(payload) >= 3 else -1
                if opt == 0:
                    self.capabilities |= C.MULTI_STATEMENTS
                elif opt == 1:
                    self.capabilities &= ~C.MULTI_STATEMENTS
                else:
                    raise UnknownCommand("Unknown COM_SET_OPTION value")
                r.raw(frame(1, eof_packet(0, self.status())))
            elif cmd == C.COM_STATISTICS:
                r.raw(frame(1, f"Uptime: {self.server.uptime():.0f}  Threads: {len(self.server.sessions)}".encode()))
            elif cmd in STMT_COMMANDS:
                await self.prepared.dispatch(payload)  # answers (or not) itself
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
        try:
            await self._query(sql, r)
        finally:
            self.server.metrics.observe(self.route, started)

    async def _query(self, sql: str, r: Reply) -> None:
        stmts = [sql]
        if self.capabilities & C.MULTI_STATEMENTS and ";" in sql:
            stmts = split_statements(sql) or [sql]
        if len(stmts) == 1:
            try:
                relayed = await self.statement(stmts[0], r, more=False, may_relay=True)
            except ProxyError as e:
                r.proxy_error(e)
                relayed = False
            if not relayed:
                self.client.write(r.bytes())
            return
        for i, stmt in enumerate(stmts):
            more = i < len(stmts) - 1
            before = len(r.out)
            try:
                await self.statement(stmt, r, more=more, may_relay=False)
            except ProxyError as e:
                del r.out[before:]
                r.proxy_error(e)
                break
            if r.out and r.out[-1][4:5] == b"\xff":
                break
        self.client.write(r.bytes())

    async def statement(self, sql: str, r: Reply, more: bool, may_relay: bool) -> bool:
        """Run one statement; True if its answer was relayed straight to the client."""
        kw = first_keyword(sql)
        if kw != "SHOW":
            self.warnings = []
        if kw == "SELECT":
            rs = local.local_select(sql, self.local_values())
            if rs is not None:
                r.resultset(rs, self.status(), more)
                return False
            sql = local.substitute_database(sql, self.schema)
        elif kw == "SET":
            await self.do_set(sql)
            r.ok(self.status(), more=more)
            return False
        elif kw == "USE":
            parts = sql.strip().rstrip(";").split(None, 1)  # "USE ;" has no name: refused, not a crash
            name = parts[1].strip().strip("`") if len(parts) > 1 else ""
            self.use_schema(name)
            r.ok(self.status(), more=more)
            return False
        elif kw in ("BEGIN", "START"):
            if kw == "START" and "TRANSACTION" not in sql.upper():
                raise NotSupported(f"unsupported statement: {sql[:60]}")
            try:
                await self.executor.commit_all()
            except ProxyError:
                self.explicit_txn = False  # the old transaction ended (rolled back, as the error says)
                raise
            self.explicit_txn = True
            r.ok(self.status(), more=more)
            return False
        elif kw in ("COMMIT", "ROLLBACK"):
            if kw == "ROLLBACK" and " TO " in f" {sql.upper()} ":
                return await self.savepoint(sql, r, more)
            try:
                if kw == "COMMIT":
                    await self.executor.commit_all()
                else:
                    await self.executor.rollback_all()
            finally:
                self.explicit_txn = False  # ended either way: committed, or rolled back as the error says
            r.ok(self.status(), more=more)
            return False
        elif kw in ("SAVEPOINT", "RELEASE"):
            return await self.savepoint(sql, r, more)
        elif kw == "SHOW":
            rs = await self.show(sql)
            if rs is not None:
                r.resultset(rs, self.status(), more)
                return False
        elif kw in ("LOCK", "UNLOCK", "LOAD", "HANDLER", "KILL", "XA", "FLUSH", "GRANT", "REVOKE"):
            raise NotSupported(f"{kw} is not supported through the proxy")
        elif kw == "" and not tokenize(sql):
            raise ProxyError("Query was empty", 1065, "42000")
        return await self.executor.execute(sql, r, more, may_relay)

    async def savepoint(self, sql: str, r: Reply, more: bool) -> bool:
        """SAVEPOINT, ROLLBACK TO, RELEASE SAVEPOINT over every node of the transaction."""
        sp = local.parse_savepoint(sql)
        if sp is None:
            raise ParseError(f"You have an error in your SQL syntax near '{sql[:40]}'")
        await self.executor.savepoint(sp[0], sp[1], r, more)
        return False

    async def do_set(self, sql: str) -> None:
        """Apply a SET: autocommit here, everything else recorded and checked on a backend."""
        changes = local.parse_set(sql)
        old_vars = dict(self.vars)
        new_autocommit = self.autocommit
        for a in changes:
            if a.key == "autocommit":
                new_autocommit = a.value == "1"
            else:
                self.set_var(a.key, a.sql)
        if self.vars != old_vars:
            try:
                await self.executor.check_session_state()
            except ProxyError:
                self.vars = old_vars
                raise
        if new_autocommit != self.autocommit:
            if new_autocommit and (self.explicit_txn or self.executor.pinned):
                await self.executor.commit_all()
                self.explicit_txn = False
            self.autocommit = new_autocommit

    async def show(self, sql: str) -> ResultSet | None:
        """SHOW statements answered from the proxy's own knowledge, or None to route them."""
        rs = local.show_databases(sql, list(self.schemas))
        if rs is not None:
            return rs
        st = local.parse_show_tables(sql)
        if st is not None:
            schema = st.schema or self.schema
            if schema is None:
                raise NoDatabaseSelected("No database selected")
            if schema not in self.schemas:
                raise DbAccessDenied(f"Access denied for user '{self.user}'@'{self.peer}' to database '{schema}'")
            tables = await self.server.tables_of(schema)
            return local.show_tables_result(st, schema, tables)
        up = " ".join(sql.upper().split()[:2])
        if up in ("SHOW WARNINGS", "SHOW ERRORS"):
            return await self.executor.show_warnings(sql)
        return None


__all__ = ["ClientProtocol", "Session", "BackendError"]
