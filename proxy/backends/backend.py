"""Connections to backend MariaDB/MySQL servers: login, run one command, relay or collect its response."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence

import structlog

from meta.config import DbGroupConfig
from meta.errors import BackendError, BackendUnavailable, ProxyError

from proxy.wire import constants as C
from proxy.wire.handshake import build_handshake_response, parse_auth_switch, parse_greeting, scramble_native_password
from proxy.wire.messages import err_packet, parse_err, parse_ok
from proxy.wire.answers import text_answer_end
from proxy.wire.packets import PacketFramer, ProtocolError, frame
from proxy.wire.response import Budget, BudgetExceeded, ResponseScanner

if TYPE_CHECKING:
    from proxy.backends.names import GroupNames

log = structlog.get_logger("pydble.backend")

# What pydble always asks backends for; FORMAT_FLAGS come from the client so bytes relay unchanged. Not
# IGNORE_SPACE: it would put IGNORE_SPACE into a new connection's sql_mode (until a reset took it out again),
# so `count (*)` would parse or not depending on the pooled connection a statement lands on.
BACKEND_CAPS = (C.LONG_PASSWORD | C.LONG_FLAG | C.PROTOCOL_41 | C.TRANSACTIONS | C.SECURE_CONNECTION
                | C.MULTI_STATEMENTS | C.MULTI_RESULTS | C.PS_MULTI_RESULTS | C.PLUGIN_AUTH
                | C.PLUGIN_AUTH_LENENC_CLIENT_DATA)


# Errors after which InnoDB has rolled back the whole transaction (deadlock, lock wait with
# innodb_rollback_on_timeout is per statement, so only deadlocks count here).
ER_LOCK_DEADLOCK = 1213
TXN_ROLLED_BACK = frozenset({ER_LOCK_DEADLOCK})
ER_QUERY_INTERRUPTED = 1317
DEADLOCK_ERR = err_packet(ER_LOCK_DEADLOCK, "40001", "Deadlock found when trying to get lock; try restarting transaction")


# Called when a command started with on_done ends: (scanner, None) or (None, the error).
OnDone = Callable[["ResponseScanner | None", "ProxyError | None"], None]
WATCH_STEPS = 4   # the silence watchdog looks this many times per timeout period
STATEMENTS_KEPT = 128   # backend statements one shared connection keeps (each counts in max_prepared_stmt_count)
PREPARE_RETRY_S = 10.0  # a statement the backend refused to prepare is tried again after this long


_QUICK_MAX = 16384   # answers up to this size, whole in a read, skip the packet-by-packet scanner
def whole_text_answer(data: bytes, deprecate_eof: bool) -> int:
    """The final status flags (low 16 bits) and warning count (shifted by 16) when data is exactly one whole
    answer that ends a COM_QUERY (one OK, or one text result set), else -1 and the general ResponseScanner
    decides."""
    r = text_answer_end(data, 0, len(data), deprecate_eof)
    return r & 0xFFFFFFFF if r >= 0 and r >> 32 == len(data) else -1


class Sink(Protocol):
    """Where relayed bytes go: the client's transport (or anything with write)."""

    def write(self, data: bytes) -> None: ...


class BackendConnection(asyncio.Protocol):
    """One TCP connection to a backend, used by one session at a time."""

    def __init__(self, group: DbGroupConfig, flags: int) -> None:
        self.group = group
        self.flags = flags
        self.transport: asyncio.Transport | None = None
        self.database: str | None = None
        self.vars: dict[str, str] = {}
        self.relayed_any = False
        self.names: GroupNames | None = None  # physical → logical names in what is relayed or collected
        self.leased = False       # handed out by the pool and not given back yet
        self.held = False         # a session's temporary tables live on it: the pool never takes it back
        self.autocommit = True
        self.in_trans = False
        self.tainted = False      # a state SET failed halfway: the server's session state is not what vars says
        self.broken = False
        self.txn_rolled_back = False  # the last answer was an error that ended the transaction (1213)
        self.deadlock_victim = False  # its statement was interrupted to break a deadlock across nodes
        self.thread_id = 0
        self.server_version = ""
        self.last_used = time.monotonic()
        self._framer: PacketFramer | None = PacketFramer(max_payload=1 << 30)
        self._packet_waiter: asyncio.Future | None = None
        self._buf = bytearray()
        self._need = 0
        self._scanner: ResponseScanner | None = None
        self._sink: Sink | None = None
        self._done: asyncio.Future | None = None
        self._loop = asyncio.get_running_loop()
        self._closed = self._loop.create_future()
        self._on_done: OnDone | None = None
        self._rx = False          # bytes arrived since the watchdog last looked
        self._paused = False      # reading paused because the client is slow
        self._timer: asyncio.TimerHandle | None = None   # the watchdog; one per busy stretch, not per command
        self._timeout = 30.0
        self._cmd_seq = 0         # commands started so far
        self._watch_seq = 0       # the command the watchdog saw last
        self._silent = 0.0        # seconds the current command has gone without a byte
        # A shared connection (GroupPool.shared_conn) pipelines several sessions' point reads: the commands
        # behind the one being answered wait here in order, and the packets one loop turn sends go out in
        # one write.
        self.shared = False
        self._queue: deque[tuple[ResponseScanner, Sink | None, OnDone]] = deque()
        self._wbuf: list[bytes] = []
        # A shared connection's statements prepared on the backend, by text: 0 while its PREPARE is in flight
        # or when the backend refused it (the execute then goes as text).
        self.statements: OrderedDict[str, int] = OrderedDict()
        self._refused: dict[str, float] = {}   # those of them the backend refused, and when
        self.progress = 0.0   # monotonic time of its last answer, or of the read that found it idle

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._rx = True
        if self.deadlock_victim:
            data = self._victim_answer(data)
        scanner = self._scanner
        if scanner is None:
            if self._framer is not None:
                self._framer.feed(data)
                self._wake_packet_waiter()
            return
        if self._buf:
            self._buf += data
            if len(self._buf) < self._need:
                return  # still inside one large packet: wait for the rest before scanning
            data = bytes(self._buf)
            self._buf.clear()
        elif self._sink is not None and not scanner.packets and not scanner.collect:
            pos = self._relay_whole(data, scanner)
            if pos:
                if pos == len(data):
                    return
                scanner = self._scanner  # type: ignore[assignment]  # the next pipelined command's
                data = data[pos:]
        try:
            end = scanner.scan(data)
        except ProtocolError as e:
            self._fail(BackendUnavailable(f"dbGroup[{self.group.name}] sent a malformed response: {e}"))
            return
        except BudgetExceeded as e:
            self._fail(ProxyError(f"the rows this query must merge across shardingNodes exceed the merge memory "
                                  f"budget ({e.args[0] >> 20} MB, [server] merge_memory_mb); add a LIMIT or a "
                                  f"narrower WHERE", 1038, "HY001"))
            return
        if end:
            if self._sink is not None:
                out = data if end == len(data) else data[:end]
                self._sink.write(scanner.take_edits(out) if scanner.edits else out)
                self.relayed_any = True
            elif scanner.edits:
                scanner.edits = []
        if end < len(data):
            if scanner.done:
                if self._queue:   # pipelined: the next command's answer starts here
                    self._complete(scanner)
                    if self._scanner is not None:
                        self.data_received(data[end:])
                    return
                self._fail(BackendUnavailable(f"dbGroup[{self.group.name}] sent bytes after the response"))
                return
            self._buf += data[end:]
            b = self._buf
            self._need = 4 + (b[0] | (b[1] << 8) | (b[2] << 16)) if len(b) >= 4 else 4
        if scanner.done:
            self._complete(scanner)

    def _relay_whole(self, data: bytes, scanner: ResponseScanner) -> int:
        """Relay the small answers that lie whole in data, each as one slice, no packet-by-packet scan:
        the usual point read, and the pipelined ones' answers that one read brings together. Returns the
        offset where the general scanner takes over with the command now answered (0: at once), or
        len(data) when all is done (relayed, or the connection failed)."""
        pos = 0
        n = len(data)
        while True:
            sink = self._sink
            r = text_answer_end(data, pos, pos + _QUICK_MAX, scanner.deprecate_eof) if scanner.state == 0 else -1
            if r < 0 or sink is None or r & C.STATUS_METADATA_CHANGED and scanner.binary:
                return pos   # (the scanner clears that flag from a binary answer: ResponseScanner._own_status)
            end = r >> 32
            chunk = data if pos == 0 and end == n else data[pos:end]
            scanner.done = True
            scanner.status = r & 0xFFFF
            scanner.warnings = (r >> 16) & 0xFFFF
            if chunk[4] == 0:
                scanner.ok = parse_ok(chunk[4:])
            elif self.names is not None:
                chunk = self.names.answer(chunk)
            sink.write(chunk)
            self.relayed_any = True
            queued = bool(self._queue)
            self._complete(scanner)
            if end == n:
                return n
            if not queued:   # (a command the completion started since cannot have its answer here yet)
                if not self.broken:
                    self._fail(BackendUnavailable(f"dbGroup[{self.group.name}] sent bytes after the response"))
                return n
            nxt = self._scanner
            if nxt is None:   # the completion closed the connection; the commands behind have failed
                return n
            pos = end
            if nxt.packets or nxt.collect:
                return pos
            scanner = nxt

    def _victim_answer(self, data: bytes) -> bytes:
        """The deadlock detector interrupted this statement (KILL QUERY, 1317): answer 1213 instead, as
        InnoDB answers the victim of a deadlock it sees itself."""
        scanner = self._scanner
        if scanner is None or scanner.packets or self._buf or len(data) < 7 or data[4] != 0xFF:
            return data
        self.deadlock_victim = False
        end = 4 + (data[0] | data[1] << 8 | data[2] << 16)
        if data[5] | data[6] << 8 != ER_QUERY_INTERRUPTED or end > len(data):
            return data
        return frame(data[3], DEADLOCK_ERR) + data[end:]

    def _complete(self, scanner: ResponseScanner) -> None:
        """The answer is whole: note its final status and hand it to whoever waits for it."""
        self._scanner = None
        self._sink = None
        if scanner.error is None:
            self.deadlock_victim = False  # answered before the interruption landed
        self._note_status(scanner)
        if self._paused:  # the last write to a slow client may have paused us after the answer ended
            self.resume_reading()
        cb = self._on_done
        if cb is not None:
            self._on_done = None
            if self.shared:
                self.progress = time.monotonic()
            if self._queue:   # the next pipelined command's answer comes next
                self._scanner, self._sink, self._on_done = self._queue.popleft()
                self.relayed_any = False
            cb(scanner, None)
            return
        fut, self._done = self._done, None
        if fut is not None and not fut.done():
            fut.set_result(scanner)

    def _note_status(self, scanner: ResponseScanner) -> None:
        """Transaction and autocommit state from the final status flags of a complete answer."""
        self.txn_rolled_back = scanner.error is not None and scanner.error.code in TXN_ROLLED_BACK
        if self.txn_rolled_back:
            self.in_trans = False
        elif scanner.error is None or scanner.status:
            self.in_trans = bool(scanner.status & C.STATUS_IN_TRANS)
        # else: an ERR carries no status; the transaction (if any) goes on, as MariaDB keeps it
        if scanner.error is None:
            self.autocommit = bool(scanner.status & C.STATUS_AUTOCOMMIT) or scanner.status == 0 and self.autocommit

    def _fail(self, err: ProxyError) -> None:
        """The response cannot go on: the waiting command gets err and the connection is dropped."""
        fut, self._done = self._done, None
        cb, self._on_done = self._on_done, None
        self._scanner = None
        self._sink = None
        self.close()
        if fut is not None and not fut.done():
            fut.set_exception(err)
        if cb is not None:
            cb(None, err)
        self._fail_queued(err)

    def _fail_queued(self, err: ProxyError) -> None:
        """The pipelined commands still waiting get err (none of their answer was relayed)."""
        self.relayed_any = False
        while self._queue:
            self._queue.popleft()[2](None, err)

    def connection_lost(self, exc: Exception | None) -> None:
        self.broken = True
        if not self._closed.done():
            self._closed.set_result(None)
        err = BackendUnavailable(f"connection to dbGroup[{self.group.name}] "
                                 f"({self.group.host}:{self.group.port}) lost")
        for fut in (self._done, self._packet_waiter):
            if fut is not None and not fut.done():
                fut.set_exception(err)
        cb, self._on_done = self._on_done, None
        if cb is not None and self._scanner is not None:
            self._scanner = None
            self._sink = None
            cb(None, err)
        self._fail_queued(err)

    def pause_reading(self) -> None:
        """Stop reading from the backend (backpressure from a slow client)."""
        if self.transport is not None and not self.broken:
            self._paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Read again once the client has drained."""
        if self.transport is not None and not self.broken:
            self._paused = False
            self.transport.resume_reading()

    # -- connection phase ---------------------------------------------------------------------
    def _wake_packet_waiter(self) -> None:
        if self._packet_waiter is not None and not self._packet_waiter.done():
            self._packet_waiter.set_result(None)

    async def _read_packet(self) -> tuple[int, bytes]:
        assert self._framer is not None
        while True:
            for pkt in self._framer.packets():
                return pkt
            self._packet_waiter = asyncio.get_running_loop().create_future()
            await self._packet_waiter
            self._packet_waiter = None

    async def login(self, database: str | None) -> None:
        """Authenticate with mysql_native_password and select the database."""
        _, payload = await self._read_packet()
        if payload[:1] == b"\xff":
            e = parse_err(payload)
            raise BackendError(e.message, e.code, e.sqlstate)
        greeting = parse_greeting(payload)
        self.thread_id = greeting.connection_id
        self.server_version = greeting.version
        caps = (BACKEND_CAPS | self.flags) & (greeting.capabilities | C.PROTOCOL_41)
        self.flags = caps & C.FORMAT_FLAGS
        auth = scramble_native_password(self.group.password, greeting.salt)
        self._write(frame(1, build_handshake_response(caps, self.group.user, auth, database)))
        seq, payload = await self._read_packet()
        if payload[:1] == b"\xfe":  # auth switch
            plugin, salt = parse_auth_switch(payload)
            if plugin != C.NATIVE_PASSWORD:
                raise BackendUnavailable(f"dbGroup[{self.group.name}] asks for auth plugin {plugin}")
            self._write(frame(seq + 1, scramble_native_password(self.group.password, salt)))
            seq, payload = await self._read_packet()
        if payload[:1] == b"\xff":
            e = parse_err(payload)
            raise BackendError(e.message, e.code, e.sqlstate)
        if payload[:1] != b"\x00":
            raise BackendUnavailable(f"dbGroup[{self.group.name}] sent an unexpected login answer")
        self.database = database
        self._framer = None

    # -- commands -----------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        if self.transport is None or self.broken:
            raise BackendUnavailable(f"connection to dbGroup[{self.group.name}] is closed")
        self.transport.write(data)

    def start(self, packet: bytes, *, kind: str = "query", sink: Sink | None = None,
              collect: bool = False, budget: Budget | None = None, timeout: float | None = None,
              on_done: OnDone | None = None, coldefs: bool = True) -> asyncio.Future | None:
        """Send one framed command. Without on_done, the returned future resolves to the scanner when
        the answer is complete; with it, on_done is called from the data callback instead (no future,
        no task switch: the hot path). timeout arms the silence watchdog."""
        if self._scanner is not None:
            raise RuntimeError("backend connection already busy")
        if on_done is None:
            fut: asyncio.Future | None = self._loop.create_future()
            self._done = fut
        else:
            fut = None
            self._on_done = on_done
        self._scanner = ResponseScanner(bool(self.flags & C.DEPRECATE_EOF), kind=kind, collect=collect,
                                        budget=budget, names=self.names, coldefs=coldefs)
        self._sink = sink
        self.relayed_any = False
        self.last_used = time.monotonic()
        try:
            self._write(packet)
        except BaseException:
            self._scanner = None
            self._sink = None
            self._done = None
            self._on_done = None
            raise
        if timeout is not None:
            self._watch(timeout)
        elif self._timer is not None:   # unbounded (a DDL): the watchdog armed by an earlier command stops
            self._timer.cancel()
            self._timer = None
        return fut

    def pipe(self, packet: bytes, sink: Sink | None, on_done: OnDone, timeout: float, kind: str = "query") -> None:
        """Send a point read (or the PREPARE of one, sink None: statement) on a shared connection behind the
        commands in flight: on_done is called from the data callback once its answer is relayed; the packets
        of one loop turn go out in one write."""
        if self.transport is None or self.broken:
            raise BackendUnavailable(f"connection to dbGroup[{self.group.name}] is closed")
        scanner = ResponseScanner(bool(self.flags & C.DEPRECATE_EOF), kind=kind, names=self.names)
        now = time.monotonic()
        if self._scanner is None:
            self._scanner, self._sink, self._on_done = scanner, sink, on_done
            self.relayed_any = False
            self.progress = now
        else:
            self._queue.append((scanner, sink, on_done))
        self._send_soon(packet)
        self.last_used = now
        self._watch(timeout)

    def _send_soon(self, packet: bytes) -> None:
        """Queue packet for this loop turn's one write, behind the commands piped before it."""
        if not self._wbuf:
            self._loop.call_soon(self._flush)
        self._wbuf.append(packet)

    def statement(self, sql: str, timeout: float) -> int:
        """The backend's id of sql prepared on this shared connection, else 0: its PREPARE is then piped
        (once), and this execute goes as text. The least recently used statements beyond STATEMENTS_KEPT are
        closed."""
        sid = self.statements.get(sql)
        if sid:
            self.statements.move_to_end(sql)
            return sid
        if sid is not None:   # being prepared, or refused (a full max_prepared_stmt_count, a table not there yet)
            refused = self._refused.get(sql)
            if refused is None or time.monotonic() - refused < PREPARE_RETRY_S:
                return 0
            del self._refused[sql]
        self.statements[sql] = 0

        def prepared(sc: ResponseScanner | None, exc: ProxyError | None) -> None:
            if sc is None or sc.error is not None or sc.prepare_ok is None:
                if sc is not None and self.statements.get(sql) == 0:
                    self._refused[sql] = time.monotonic()   # text meanwhile; tried again later
                return
            new = int.from_bytes(sc.prepare_ok[1:5], "little")
            if sc.prepare_ok[7:9] != b"\x01\x00":   # execute_key binds exactly one parameter: text it is
                self.close_statement(new)
                return
            if self.statements.get(sql) != 0:   # dropped from the cache while it was being prepared (and
                self.close_statement(new)        # maybe prepared again since): this id is no one's
                return
            self.statements[sql] = new
            while len(self.statements) > STATEMENTS_KEPT:
                old, sid = self.statements.popitem(last=False)
                self._refused.pop(old, None)
                self.close_statement(sid)

        self.pipe(frame(0, bytes((C.COM_STMT_PREPARE,)) + sql.encode("utf-8", "surrogateescape")), None, prepared,
                  timeout, kind="prepare")
        return 0

    def close_statement(self, sid: int) -> None:
        """COM_STMT_CLOSE of a backend statement, behind the commands piped so far (an execute already piped
        with its id runs first); it has no answer: nothing waits for it."""
        if sid and not self.broken:
            self._send_soon(frame(0, bytes((C.COM_STMT_CLOSE,)) + sid.to_bytes(4, "little")))

    def _flush(self) -> None:
        data = b"".join(self._wbuf)
        self._wbuf.clear()
        if self.transport is not None and not self.broken:
            self.transport.write(data)

    @property
    def in_flight(self) -> int:
        """Commands sent (or about to be) and not answered yet."""
        return len(self._queue) + (self._scanner is not None)

    async def run(self, packet: bytes, timeout: float | None, *, kind: str = "query", sink: Sink | None = None,
                  collect: bool = False, budget: Budget | None = None,
                  sent: Callable[[], None] | None = None, coldefs: bool = True) -> ResponseScanner:
        """Send a command and wait for its whole response, bounded by `timeout` of silence (None: no
        bound, for a DDL); `sent` is called once it is written; coldefs=False collects rows only."""
        fut = self.start(packet, kind=kind, sink=sink, collect=collect, budget=budget, timeout=timeout,
                         coldefs=coldefs)
        assert fut is not None
        if sent is not None:
            sent()
        try:
            return await fut
        except BaseException:
            self.close()
            raise

    # -- the silence watchdog -----------------------------------------------------------------
    def _watch(self, timeout: float) -> None:
        """Bound the command just sent. One timer serves a run of commands (no timer per query): it
        looks WATCH_STEPS times per period and fails a command the backend has been silent on for a
        whole period. A long answer still flowing, or held back by a slow client, is never cut off."""
        self._timeout = timeout
        self._cmd_seq += 1
        if self._timer is None:
            self._silent = 0.0
            self._rx = False
            self._watch_seq = self._cmd_seq
            self._timer = self._loop.call_later(timeout / WATCH_STEPS, self._look)

    def _look(self) -> None:
        self._timer = None
        if self._scanner is None or self.broken:
            return  # idle: the watchdog sleeps until the next command
        step = self._timeout / WATCH_STEPS
        if self._rx or self._paused or (self._watch_seq != self._cmd_seq and not self.shared):
            self._silent = 0.0
        else:
            self._silent += step
            if self._silent >= self._timeout * 0.999:
                self._fail(BackendUnavailable(f"dbGroup[{self.group.name}] did not answer within "
                                              f"{self._timeout:g}s"))
                return
        self._rx = False
        self._watch_seq = self._cmd_seq
        self._timer = self._loop.call_later(step, self._look)

    async def query(self, sql: str, timeout: float, *, collect: bool = True) -> ResponseScanner:
        """Run SQL for pydble itself; raise BackendError if it fails."""
        sc = await self.run(frame(0, bytes((C.COM_QUERY,)) + sql.encode("utf-8")), timeout, collect=collect)
        if sc.error is not None:
            raise BackendError(sc.error.message, sc.error.code, sc.error.sqlstate)
        return sc

    async def use(self, database: str, timeout: float) -> None:
        """Switch the default database with COM_INIT_DB."""
        sc = await self.run(frame(0, bytes((C.COM_INIT_DB,)) + database.encode()), timeout)
        if sc.error is not None:
            raise BackendError(sc.error.message, sc.error.code, sc.error.sqlstate)
        self.database = database

    async def reset(self, timeout: float) -> None:
        """COM_RESET_CONNECTION: back to the server's defaults (session vars, autocommit, no transaction)."""
        sc = await self.run(frame(0, bytes((C.COM_RESET_CONNECTION,))), timeout)
        if sc.error is not None:
            raise BackendError(sc.error.message, sc.error.code, sc.error.sqlstate)
        self.vars = {}
        self.autocommit = True
        self.in_trans = False
        self.tainted = False

    def warnings_of(self, rows: Iterable[Sequence[bytes | None]]) -> list[tuple[str, int, str]]:
        """SHOW WARNINGS rows read here as (level, code, message): the message names the logical schema, as
        ERR packets do, and stays in the session's character set (its bytes kept: surrogateescape)."""
        out = []
        for lv, code, msg in rows:
            text = bytes(msg or b"").decode("utf-8", "surrogateescape")
            if self.names is not None:
                text = self.names.text(text)
            out.append((bytes(lv or b"").decode(), int(code or 0), text))
        return out

    @property
    def busy(self) -> bool:
        """True while a command's response is still coming."""
        return self._scanner is not None

    def close(self) -> None:
        """Drop the connection (it will not go back to the pool)."""
        self.broken = True
        if self.transport is not None:
            self.transport.abort()


async def open_connection(group: DbGroupConfig, flags: int, database: str | None,
                          timeout_s: float | None = None) -> BackendConnection:
    """Connect and log in to a dbGroup, bounded by timeout_s (default: its connect timeout), the greeting
    included: a frozen server that accepts TCP and never greets times out too."""
    loop = asyncio.get_running_loop()
    limit = group.connect_timeout_s if timeout_s is None else timeout_s

    async def _open() -> BackendConnection:
        _, conn = await loop.create_connection(lambda: BackendConnection(group, flags), group.host, group.port)
        try:
            await conn.login(database)
        except BaseException:
            conn.close()
            raise
        return conn

    try:
        return await asyncio.wait_for(_open(), limit)
    except asyncio.TimeoutError:
        raise BackendUnavailable(f"connect to dbGroup[{group.name}] ({group.host}:{group.port}) "
                                 f"timed out after {limit:g}s") from None
    except OSError as e:
        raise BackendUnavailable(f"cannot connect to dbGroup[{group.name}] ({group.host}:{group.port}): "
                                 f"{e.strerror or e}") from None
    except ProtocolError as e:
        raise BackendUnavailable(f"dbGroup[{group.name}] handshake failed: {e}") from None
