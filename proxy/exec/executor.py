"""The context plans run in: a session's backend connections (relay one node, gather several, pin
transactions, LOCK TABLES, savepoints); proxy/exec/planner.py builds the plan, proxy/exec/primitives.py runs it."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

import structlog

from meta import scratch
from meta.errors import BackendUnavailable, NoSuchTable, NotSupported, ProxyError, QueryInterrupted

from proxy.backends.backend import BackendConnection, Sink
from proxy.exec.planner import build, explained
from proxy.exec.primitives import explain_result
from proxy.wire import constants as C
from proxy.wire.binary import execute_key
from proxy.wire.collations import charset_of
from proxy.wire.messages import ColumnDef, OkInfo, ResultSet, err_packet
from proxy.wire.packets import com_query as _com_query, frame
from proxy.wire.response import Budget, ResponseScanner
from proxy.wire.reply import Reply
from proxy.exec.temp_tables import TempTables
from proxy.exec.user_locks import UserLocks, sets_insert_id as _sets_insert_id
from proxy.exec.xa import XaBranches

if TYPE_CHECKING:
    from proxy.plan.plan import Plan
    from proxy.runtime import SessionPort

log = structlog.get_logger("pydble.executor")


STMT_SAVEPOINT = "`pydble_statement`"   # taken with each write on several nodes inside a transaction

# as MariaDB describes them: NOT NULL, the strings with decimals 39 (NOT_FIXED_DEC)
WARNING_COLUMNS = (ColumnDef("Level", C.T_VAR_STRING, 45, 28, C.NOT_NULL_FLAG, 39),
                   ColumnDef("Code", C.T_LONG, 63, 4, 0xA1),
                   ColumnDef("Message", C.T_VAR_STRING, 45, 2048, C.NOT_NULL_FLAG, 39))


_SHOW_LIMIT = re.compile(r"\bLIMIT\s+(\d+)(?:\s*,\s*(\d+))?\s*;?\s*$", re.I)


def _on_node(node: str, e: BackendUnavailable) -> BackendUnavailable:
    """The same failure, saying which shardingNode it hit (unless it already does)."""
    if "shardingNode[" in e.message:
        return e
    return BackendUnavailable(f"shardingNode[{node}]: {e.message}", e.code, e.sqlstate)


def _statement_only(scanners: list[ResponseScanner]) -> list[ResponseScanner]:
    """The answers of a write sent behind a prefix (SAVEPOINT, START TRANSACTION, SET autocommit=0 and
    the statement in one multi-statement), without the prefix's own OK: what the statement alone gives."""
    for sc in scanners:
        if len(sc.results) > 1 and not sc.results[0].columns:
            del sc.results[0]
    return scanners


async def _apply_state(conn: BackendConnection, stmts: list[str], timeout: float) -> None:
    """Run a session's state statements on a connection in one round trip. They run one after the other:
    when one fails, those before it have changed the connection, so it is tainted and never pooled again
    (another session taking it would see this one's half-applied SET)."""
    try:
        await conn.query(";".join(stmts), timeout)
    except BaseException:
        conn.tainted = True
        raise


def variable_literal(name: str, col: ColumnDef, value: bytes | None, collation: bytes | None,
                     hexed: bytes | None) -> str:
    """A variable's value as SQL that gives it back with its type: an integer or decimal as written,
    a double with an exponent (shortest round-trip text, so the same double), a string by its bytes in
    its own character set and collation (HEX() is NULL when those exceed max_allowed_packet: refused)."""
    if value is None:
        return "NULL"
    if col.type in C.INTEGER_TYPES or col.type in C.DECIMAL_TYPES:
        return value.decode("ascii")
    if col.type in C.FLOAT_TYPES:
        text = value.decode("ascii")
        return text if "e" in text.lower() else f"{text}e0"
    if hexed is None:
        raise NotSupported(f"the value of {name} ({len(value)} bytes) is too large for pydble to keep: it sets "
                           f"it again on each backend connection the session uses, within max_allowed_packet")
    collation_name = (collation or b"binary").decode("ascii")
    raw = hexed.decode("ascii")
    if collation_name == "binary":
        return f"_binary X'{raw}'"
    return f"_{charset_of(collation_name)} X'{raw}' COLLATE {collation_name}"


class Executor:
    """Owns the backend connections a session holds and runs its statements on them."""

    def __init__(self, session: SessionPort) -> None:
        self.session = session
        self.runtime = session.runtime
        self.pinned: dict[str, BackendConnection] = {}
        self.streaming: set[BackendConnection] = set()
        self.gathering: set[BackendConnection] = set()   # running a statement whose answers pydble collects (_run_on)
        self.node_warnings: list[list[tuple[str, int, str]]] = []   # keep_warnings': each node's, in its order
        self.last_node: str | None = None
        self.savepoints: list[str] = []   # of the open transaction, oldest first (lower-cased names)
        self.broken_txn: str | None = None  # why the open transaction can only be rolled back now
        self._rolling_back: asyncio.Task | None = None  # the rest of a transaction a deadlock ended
        self._aborted: list[BackendConnection] = []     # the connections that rollback ends
        self._committing = False
        self.relay_sink: Sink | None = None  # set by a prepared EXECUTE: relayed rows go through it
        self.insert_id = 0   # while an INSERT whose increment column pydble filled runs: its first value
        # LOCK TABLES: the connection holding the session's locks on each node, and the tables locked
        self.locked: dict[str, BackendConnection] = {}
        self.locked_tables: frozenset[tuple[str, str]] = frozenset()
        self.xa = XaBranches(self.runtime.xa)   # the open XA transaction's branches (SET xa = on)
        self.user_locks = UserLocks(self)      # GET_LOCK and kin: the connection holding them (proxy/exec/user_locks.py)
        self.temp = TempTables(self)           # temporary tables: the connections holding them (proxy/exec/temp_tables.py)
        # a command started from the data callback (start_single) while its answer is relayed
        self.relaying: BackendConnection | None = None
        self._single_node = ""
        self._single_packet = b""
        self._single_started = 0.0
        self._warn_task: asyncio.Task | None = None

    # -- transaction state ----------------------------------------------------------------------
    def in_trans(self) -> bool:
        """True while any pinned backend connection is inside a transaction."""
        return any(c.in_trans for c in self.pinned.values())

    def _pinning(self) -> bool:
        s = self.session
        return s.explicit_txn or not s.autocommit

    async def _sync(self, conn: BackendConnection, joining: bool = False, node: str | None = None) -> None:
        """Make a backend connection's session state match the client session's, in one round trip.

        A connection joining an open transaction also gets the transaction's savepoints, so a later
        ROLLBACK TO undoes on it everything done since it joined."""
        s = self.session
        stmts: list[str] = []
        if conn.vars != s.vars:
            gone = [k for k in conn.vars if k not in s.vars]
            if gone and (conn in self.locked.values() or conn.held):  # a reset would drop its locks or tables
                if gone != ["names"]:
                    raise NotSupported("this change of session state while LOCK TABLES is held is not "
                                       "supported by pydble: UNLOCK TABLES first")
                stmts.append("SET NAMES utf8mb4")   # what the session's dropped 'names' stands for
            elif gone and not conn.in_trans:
                await conn.reset(self.runtime.backends.timeout_s)
            stmts += [sql for k, sql in s.vars.items() if conn.vars.get(k) != sql and sql]
        if conn.autocommit != s.autocommit:
            stmts.append(f"SET autocommit={1 if s.autocommit else 0}")
        if node is not None and s.xa and self._pinning() and node not in self.xa.nodes:
            if s.explicit_txn:
                stmts += s.txn_chars   # SET TRANSACTION's, for this transaction only
            stmts.append(self.xa.start_sql(node))   # the branch begins before any statement of the transaction
            joining = True
        elif s.explicit_txn and not conn.in_trans and node not in self.xa.nodes:
            stmts += s.txn_chars
            stmts.append("START TRANSACTION WITH CONSISTENT SNAPSHOT" if s.txn_snapshot else "START TRANSACTION")
            joining = True
        if joining and self.savepoints:
            stmts.extend(f"SAVEPOINT `{name}`" for name in self.savepoints)
        if stmts:
            await _apply_state(conn, stmts, self.runtime.backends.timeout_s)
            conn.vars = dict(s.vars)
            conn.autocommit = s.autocommit

    def running_conns(self) -> set[BackendConnection]:
        """The backend connections the session's statement holds now (KILL QUERY's targets)."""
        fast = self.relaying
        conns = set(self.streaming) | set(self.gathering) | set(self.pinned.values())
        conns |= {fast} if fast and not fast.shared else set()
        conns |= set(self.locked.values()) | ({self.user_locks.conn} if self.user_locks.conn is not None else set())
        return conns | set(self.temp.conns.values())

    async def snapshot(self, nodes: tuple[str, ...]) -> None:
        """START TRANSACTION WITH CONSISTENT SNAPSHOT: MariaDB's snapshot is of the moment the statement runs,
        so each node's part of the transaction starts now, on every node the session may read, not as the node
        joins (it would see what other sessions commit meanwhile). (Each node's snapshot is its own: a write
        another session commits on several nodes at that very moment may be in some and not others.)"""
        s = self.session
        s.txn_snapshot = True
        try:
            got = await self._get_all(list(nodes))
            failed = next((g for g in got if isinstance(g, BaseException)), None)
            if failed is not None:
                raise failed
        except BaseException:
            s.explicit_txn = False
            await self.rollback_all()
            raise
        finally:
            s.txn_snapshot = False

    async def _get(self, node: str) -> BackendConnection:
        """The connection this session uses for a node: its pinned one, or a pooled one made ready."""
        s = self.session
        conn = self.locked.get(node)
        if conn is not None:
            if conn.broken:
                raise BackendUnavailable(f"shardingNode[{node}]: the connection holding this session's table "
                                         f"locks was lost; UNLOCK TABLES")
            if conn.vars != s.vars:
                await self._sync(conn)
            return conn
        conn = self.pinned.get(node)
        if self.broken_txn is not None and self._pinning():
            raise BackendUnavailable(f"{self.broken_txn}; the transaction must be rolled back")
        if conn is not None and not conn.broken:
            if conn.vars != s.vars or conn.autocommit != s.autocommit or (s.explicit_txn and not conn.in_trans):
                await self._sync(conn, node=node)
            return conn
        if conn is not None:
            del self.pinned[node]
            self.runtime.backends.release(node, conn)
            self.broken_txn = f"shardingNode[{node}] connection was lost in the middle of a transaction"
            raise BackendUnavailable(self.broken_txn)
        conn = self.temp.conn(node) or await self.runtime.backends.acquire(node, s.format_flags)
        pinning = self._pinning()
        try:
            await self._sync(conn, joining=pinning, node=node)
        except BaseException:
            self.runtime.backends.release(node, conn)
            self.xa.not_joined(node)
            raise
        if pinning:
            self.pinned[node] = conn
        return conn

    async def _get_all(self, nodes: list[str]) -> list[BackendConnection | BaseException]:
        """The connections of a statement on several nodes (_get each, at once), or the exception of each
        that failed. Taking pooled connections one by one, two such statements could each hold part of
        what they need and wait for the rest until the acquire timeout (max_con=2, two scattered reads on
        two nodes of one dbGroup): one that needs more than one takes its pools' gates first, in name
        order, so only one at a time gathers several connections of a pool; single statements never wait
        while holding one."""
        pools: dict[str, asyncio.Lock] = {}
        fresh = 0
        for node in nodes:
            if node not in self.locked and node not in self.pinned and node not in self.temp.conns:
                pool = self.runtime.backends.pool_of(node)
                pools[pool.group.name] = pool.gathering
                fresh += 1
        async with contextlib.AsyncExitStack() as stack:
            if fresh > 1:
                for name in sorted(pools):
                    await stack.enter_async_context(pools[name])
            return await asyncio.gather(*(self._get(node) for node in nodes), return_exceptions=True)

    def _done_with(self, node: str, conn: BackendConnection) -> None:
        """After a statement: unpinned connections go back; pinned ones stay until COMMIT or ROLLBACK.

        With autocommit=0 a read alone opens a transaction (its snapshot) without MariaDB flagging
        IN_TRANS, so the connection stays with the session until the transaction really ends."""
        if self.locked.get(node) is conn or conn.shared:
            return  # holds the session's table locks until UNLOCK TABLES; a shared one stays shared
        if self.pinned.get(node) is conn:
            if conn.broken or not self._pinning():
                del self.pinned[node]
                self.runtime.backends.release(node, conn)
                if conn.broken and self._pinning():
                    self.broken_txn = f"shardingNode[{node}] connection was lost in the middle of a transaction"
        elif self._rolling_back is None or conn not in self._aborted:  # those the rollback releases itself
            self.runtime.backends.release(node, conn)
        if conn.txn_rolled_back and self.pinned:
            self._abort_txn()

    def _abort_txn(self) -> None:
        """A node rolled the transaction back (InnoDB does on a deadlock): roll back its part on every
        other node at once, releasing their locks, and end it, as one MariaDB would have."""
        pinned, self.pinned = self.pinned, {}
        self.savepoints = []
        self.broken_txn = None
        self.session.explicit_txn = False
        self._aborted = list(pinned.values())
        self._rolling_back = asyncio.get_running_loop().create_task(self._ending(pinned, "ROLLBACK"))

    def _ending(self, pinned: dict[str, BackendConnection], sql: str):  # noqa: ANN202 - a coroutine
        """COMMIT or ROLLBACK of the transaction's connections: XA's when it is an XA transaction."""
        if self.xa.gtrid is not None:
            return self.xa.finish(pinned, sql)
        return self._finish(pinned, sql)

    async def _finish(self, pinned: dict[str, BackendConnection], sql: str) -> list[BaseException]:
        """Run COMMIT or ROLLBACK on the given connections at once and release them; the failures."""
        errors: list[BaseException] = []

        async def one(node: str, conn: BackendConnection) -> None:
            try:
                if not conn.broken:  # also ends a read-only snapshot MariaDB does not flag as IN_TRANS
                    await conn.query(sql, self.runtime.backends.timeout_s)
            except BaseException as e:  # noqa: BLE001 - reported by the caller
                conn.close()  # its transaction ends with the connection
                errors.append(e)
            finally:
                self.runtime.backends.release(node, conn)

        await asyncio.gather(*(one(n, c) for n, c in pinned.items()))
        return errors

    async def _end_all(self, sql: str) -> None:
        """COMMIT or ROLLBACK every node of the transaction (a COMMIT rolls back if a node was lost)."""
        pinned, self.pinned = self.pinned, {}
        self.savepoints = []
        broken, self.broken_txn = self.broken_txn, None
        if broken is None and sql == "COMMIT":
            lost = next((n for n, c in pinned.items() if c.broken), None)  # e.g. killed while idle
            if lost is not None:
                broken = f"shardingNode[{lost}] connection was lost in the middle of a transaction"
        if broken is not None and sql == "COMMIT":
            sql = "ROLLBACK"  # part of the transaction is gone: committing the rest would tear it
        errors = await self._ending(pinned, sql)
        if broken is not None and self._committing:
            raise BackendUnavailable(f"COMMIT failed: {broken}; the transaction was rolled back on every "
                                     f"shardingNode, nothing was committed")
        for e in errors:
            if isinstance(e, ProxyError):
                raise e
            raise BackendUnavailable(f"{sql} failed: {e}")

    def fast_conn(self, node: str, any_db: bool = False, shared: bool = False) -> BackendConnection | None:
        """A connection for node that can take a command right now with no round trip first (the
        transaction's pinned one, or an idle pooled one already in the session's state), else None.
        any_db: the statement names its database, so a connection of the node's dbGroup on another
        database will do. shared: a point read, which may go on a pipelined shared connection."""
        s = self.session
        if self.locked or self.temp.tables:
            return None   # (a statement may name a temporary table: the task plans it)
        if self._rolling_back is not None:
            return None  # the task waits for the rollback a deadlock started first
        if s.explicit_txn or not s.autocommit:
            conn = self.pinned.get(node)
            if (conn is None or conn.broken or self.broken_txn is not None or conn.vars != s.vars
                    or conn.autocommit != s.autocommit or (s.explicit_txn and not conn.in_trans)):
                return None
            return conn
        if shared:
            conn = self.runtime.backends.shared_conn(node, s.format_flags, s.vars)
            if conn is not None:
                return conn
        conn = self.runtime.backends.take_idle(node, s.format_flags, any_db)
        if conn is not None and (conn.vars != s.vars or not conn.autocommit):
            self.runtime.backends.release(node, conn)
            return None
        return conn

    # -- one node, from the data callback (Route.start) -----------------------------------------------
    def start_single(self, node: str, packet: bytes, sink: Sink | None, any_db: bool, shared: bool, shown: str,
                     key_execute: tuple[str, int] | None = None) -> bool:
        """Send a command to one node now, from the client connection's data callback, if a connection can
        take it with no round trip first: its answer is relayed to sink (the client when None) by the
        connection's own callbacks, with no task, future or timer per query; _single_done then releases,
        counts and lets the client connection go on. False: nothing was sent (run_single does it on the task).
        key_execute: (the node's text with `?`, the key) of a prepared point read, which a shared connection
        runs as its own prepared statement, its binary answer relayed to the client as it comes."""
        s = self.session
        client = s.client
        conn = self.fast_conn(node, any_db, shared and not client.write_paused)
        if conn is None:
            return False
        s.warnings = []
        s.requests += 1
        s.route = "single"
        self._single_started = s.since = time.perf_counter()
        s.command, s.info = "Query", shown
        self.relaying = conn
        self._single_node = node
        self.last_node = node
        if not conn.shared:
            self.streaming.add(conn)
            if client.write_paused:
                conn.pause_reading()
        client.busy = True
        try:
            if conn.shared:
                self._single_packet = packet   # run again alone if it has warnings (_single_warnings)
                timeout = self.runtime.backends.timeout_s
                if key_execute is not None and (sid := conn.statement(key_execute[0], timeout)):
                    conn.pipe(execute_key(sid, key_execute[1]), client, self._single_done, timeout, kind="execute")
                else:
                    conn.pipe(packet, client if sink is None else sink, self._single_done, timeout)
            else:
                conn.start(packet, sink=client if sink is None else sink, timeout=self.runtime.backends.timeout_s,
                           on_done=self._single_done)
        except ProxyError:
            client.busy = False
            self.streaming.discard(conn)
            self.relaying = None
            self._done_with(node, conn)
            return False
        return True

    def _single_done(self, sc: object, exc: ProxyError | None) -> None:
        """The backend's answer has been relayed (or failed): release, count, go on with the client; when
        the backend reported warnings or an error, SHOW WARNINGS learns them first, on a task (the client
        waits meanwhile)."""
        scanner: ResponseScanner = sc  # type: ignore[assignment]
        if exc is None and (scanner.warnings or scanner.error is not None) and self.relaying is not None:
            self._warn_task = asyncio.get_running_loop().create_task(self._single_warnings(scanner))  # referenced
            return
        self._single_end(scanner, exc)

    async def _single_warnings(self, sc: ResponseScanner) -> None:
        try:
            conn = self.relaying
            if conn is not None and conn.shared and sc.warnings:
                # SHOW WARNINGS there would follow other sessions' reads: the read runs again alone first
                own = await self._get(self._single_node)
                try:
                    again = await own.run(self._single_packet, self.runtime.backends.timeout_s, collect=True)
                    await self.keep_warnings([(own, again)])
                finally:
                    self._done_with(self._single_node, own)
            else:
                await self.keep_warnings([(conn, sc)])  # type: ignore[list-item]
        except ProxyError as e:
            self.session.log.info("cannot fetch a point read's warnings", error=e.message)
        finally:
            self._single_end(sc, None)

    def _single_end(self, sc: ResponseScanner, exc: ProxyError | None) -> None:
        conn, node = self.relaying, self._single_node
        self.relaying = None
        s = self.session
        s.command, s.info = "Sleep", None
        client = s.client
        try:
            if conn is not None:
                self.streaming.discard(conn)
                self._done_with(node, conn)
            if exc is not None:
                if conn is not None and conn.relayed_any:
                    client.close()  # half an answer was sent; the client must not trust it
                else:
                    e = _on_node(node, exc) if isinstance(exc, BackendUnavailable) else exc
                    client.write(frame(1, err_packet(e.code, e.sqlstate, e.message)))
            else:
                self._note_ok(sc)
            self.runtime.metrics.observe("single", self._single_started)
        except Exception:  # noqa: BLE001 - never leave the client waiting on a bug here
            s.log.exception("fast path completion failed")
            client.close()
        finally:
            client.kick()

    async def commit_all(self) -> None:
        """COMMIT on every node this transaction touched (each node commits on its own)."""
        self._committing = True
        try:
            await self._end_all("COMMIT")
        finally:
            self._committing = False

    async def rollback_all(self) -> None:
        """ROLLBACK on every node this transaction touched."""
        await self._end_all("ROLLBACK")

    async def settle(self) -> None:
        """Before the next command: wait for the rollback a deadlock started (its failures only closed
        the connections concerned, whose transactions end with them)."""
        task, self._rolling_back = self._rolling_back, None
        if task is not None:
            await task
            self._aborted = []

    def abort_all(self) -> None:
        """The client is gone: close pinned connections so their transactions roll back."""
        pinned, self.pinned = self.pinned, {}
        self.savepoints = []
        self.broken_txn = None
        self.xa.gtrid, self.xa.nodes = None, set()   # unprepared branches end with their connections
        locked, self.locked, self.locked_tables = self.locked, {}, frozenset()
        for node, conn in [*pinned.items(), *locked.items()]:
            conn.close()
            self.runtime.backends.release(node, conn)
        for conn in self.streaming:
            conn.close()
        self.user_locks.drop()
        self.temp.drop_all()

    def pause_backends(self) -> None:
        """The client is slow: stop reading from the backends streaming to it."""
        for conn in self.streaming:
            conn.pause_reading()

    def resume_backends(self) -> None:
        """The client caught up."""
        for conn in self.streaming:
            conn.resume_reading()

    # -- LOCK TABLES ----------------------------------------------------------------------------
    async def lock_tables(self, sql: str) -> None:
        """LOCK TABLES: a connection of this session on every node of the tables takes their locks
        there and serves the session's statements on that node until UNLOCK TABLES (or BEGIN,
        COM_RESET_CONNECTION, a new LOCK TABLES, the end of the session)."""
        if self.temp.tables:
            raise NotSupported("LOCK TABLES while the session has temporary tables is not supported by pydble: "
                               "DROP TEMPORARY TABLE first")
        per_node, tables = self.runtime.router.lock_plan(sql, self.session.schema, self.session.grants)
        await self.unlock_tables()
        timeout = self.runtime.backends.timeout_s
        got: dict[str, BackendConnection] = {}

        async def one(node: str, stmt: str) -> None:
            conn = await self.runtime.backends.acquire(node, self.session.format_flags)
            got[node] = conn
            await self._sync(conn)
            try:
                await conn.query(stmt, timeout)
            except BackendUnavailable as e:
                raise _on_node(node, e) from None

        try:
            for node in sorted(per_node):  # one order for every session: two LOCK TABLES never deadlock
                await one(node, per_node[node])
        except BaseException:
            for node, conn in got.items():
                conn.close()  # whatever it locked goes with it
                self.runtime.backends.release(node, conn)
            raise
        self.locked, self.locked_tables = got, tables

    async def unlock_tables(self) -> None:
        """UNLOCK TABLES on every node holding the session's locks; their connections go back."""
        locked, self.locked, self.locked_tables = self.locked, {}, frozenset()

        async def one(node: str, conn: BackendConnection) -> None:
            try:
                if not conn.broken:
                    await conn.query("UNLOCK TABLES", self.runtime.backends.timeout_s)
            except BaseException:  # noqa: BLE001 - a connection that may still hold locks is dropped
                conn.close()
            finally:
                self.runtime.backends.release(node, conn)

        await asyncio.gather(*(one(n, c) for n, c in locked.items()))

    def check_locked(self, plan: Plan) -> None:
        """While LOCK TABLES is held, statements use only the locked tables (MySQL's 1100)."""
        if plan.kind == "ddl":  # its own connections would wait on this session's locks
            raise NotSupported("DDL while LOCK TABLES is held is not supported by pydble: UNLOCK TABLES first")
        if plan.hint:
            return  # sent as is to the node named: its locked connection answers for it
        for schema, table in plan.tables:
            if (schema, table) not in self.locked_tables:
                raise ProxyError(f"Table '{table}' was not locked with LOCK TABLES", 1100, "HY000")

    async def check_session_state(self) -> None:
        """Apply changed session variables now, so a bad SET fails at once with the backend's error."""
        if self.pinned or self.locked:
            for conn in [*self.pinned.values(), *self.locked.values()]:
                await self._sync(conn)
            return
        node = self.runtime.any_node(self.session.schema)
        conn = await self.runtime.backends.acquire(node, self.session.format_flags)
        try:
            await self._sync(conn)
        finally:
            self.runtime.backends.release(node, conn)

    async def run_set(self, sql: str, plain: dict[str, str], computed: dict[str, str]) -> dict[str, str]:
        """Run a SET once, as the client wrote it (every value worked out before any is assigned, as
        MariaDB does), on one connection carrying the session's state before it, and return for each key of
        `computed` (key -> the variable to read back: `@x` or `@@session.name`) a statement setting the
        value it got as a literal. The session replays that on every other connection, where the expression
        would be computed again (RAND(), NOW(), `@x + 1` on a connection that never saw @x,
        `CONCAT(@@sql_mode, ...)` over that connection's own sql_mode). `plain`: the SET's other
        assignments, key -> statement, now on the connection too."""
        targets = list(dict.fromkeys(computed.values()))
        probe = ", ".join(f"{t}, COLLATION({t}), HEX({t})" for t in targets)
        async with self._state_conn() as conn:
            try:
                sc = await conn.query(f"{sql};SELECT {probe}", self.runtime.backends.timeout_s)
                rs = sc.results[-1]
                row = rs.rows[0]
                literal = {t: variable_literal(t, rs.columns[3 * i], row[3 * i], row[3 * i + 1], row[3 * i + 2])
                           for i, t in enumerate(targets)}
            except BaseException:
                conn.tainted = True   # the SET may have run: no other session may take it
                conn.vars = {"": "unknown"}   # and the session's own re-sends its whole state before the next use
                raise
            out = {key: f"SET {target} = {literal[target]}" for key, target in computed.items()}
            conn.vars.update(plain)
            conn.vars.update(out)   # the values it holds now are exactly these
            return out

    async def session_variable(self, name: str) -> str:
        """A session variable as MariaDB made it of the session's SETs (sql_mode 'ANSI' is a list that names
        ANSI_QUOTES): read on a connection in the session's state."""
        async with self._state_conn() as conn:
            sc = await conn.query(f"SELECT @@session.{name}", self.runtime.backends.timeout_s)
        return bytes(sc.results[-1].rows[0][0] or b"").decode("utf-8", "replace")

    @contextlib.asynccontextmanager
    async def _state_conn(self):  # noqa: ANN202 - an async context manager
        """A connection in the session's state: the transaction's (or table locks') own, else a pooled one."""
        own = next(iter([*self.pinned.items(), *self.locked.items()]), None)
        node, conn = own if own is not None else (self.runtime.any_node(self.session.schema), None)
        if conn is None:
            conn = await self.runtime.backends.acquire(node, self.session.format_flags)
        try:
            await self._sync(conn)
            yield conn
        finally:
            if own is None:
                self.runtime.backends.release(node, conn)

    # -- statements -----------------------------------------------------------------------------
    async def execute(self, sql: str, r: Reply, more: bool, may_relay: bool) -> bool:
        """Plan one statement and run the plan; True if the answer was relayed to the client as is.
        EXPLAIN <statement> answers the plan instead (DBLE's EXPLAIN; planning checks the grants as running
        the statement would)."""
        inner = explained(sql)
        if inner is not None:
            r.resultset(explain_result(await build(self, inner, explain=True)), self.session.status(), more)
            return False
        return await (await build(self, sql)).run(self, r, more, may_relay)

    def _columns_of(self, table: str) -> frozenset[str] | None:
        """A table's column names (lower-case) from metadata, the table as written in FROM (`s . t` or `t`)."""
        parts = [p.strip().strip("`") for p in table.split(" . ")]
        schema = parts[0] if len(parts) == 2 else self.session.schema
        if schema is None:
            return None
        known = self.runtime.table_columns(schema, parts[-1])
        return frozenset(c.lower() for c in known) if known else None
    async def _select_insert_id(self, plan: Plan, sql: str, r: Reply, more: bool) -> None:
        """SELECT LAST_INSERT_ID(expr): the backend computes the value, the session keeps it as MySQL does
        (LAST_INSERT_ID() is answered by pydble); anywhere else in a SELECT the call is refused."""
        if plan.tables or len(plan.targets) != 1 or not _sets_insert_id(sql):
            raise NotSupported("LAST_INSERT_ID(expr) is supported by pydble in a SELECT only as the whole "
                               "statement: SELECT LAST_INSERT_ID(expr)")
        node = plan.targets[0].node
        sc = (await self._run_on([(node, plan.targets[0].sql)]))[0]
        if sc.error is None and sc.results and sc.results[0].rows:
            value = sc.results[0].rows[0][0]
            self.session.last_insert_id = int(bytes(value)) if value is not None else 0
        self.add_results(sc, r, more)

    async def run_single(self, node: str, packet: bytes, r: Reply, more: bool, may_relay: bool,
                         kind: str = "query", conn: BackendConnection | None = None,
                         rewrite: Callable[[list], None] | None = None, timeout: float | None = None) -> bool:
        """Run a command on one node: relay its bytes when allowed, else re-encode its results.
        conn: a connection the caller holds (kept, not given back); rewrite: applied to the collected rows;
        timeout: the bound of a statement expected to wait longer than backend_timeout_s (GET_LOCK)."""
        held = conn is not None
        if conn is None:
            conn = await self._get(node)
        elif conn.vars != self.session.vars:  # never a reset: it would release what the connection holds
            stmts = [sql for k, sql in self.session.vars.items() if conn.vars.get(k) != sql and sql]
            if stmts:
                await _apply_state(conn, stmts, self.runtime.backends.timeout_s)
            conn.vars = dict(self.session.vars)
        self.last_node = node
        sc: ResponseScanner | None = None
        try:
            if self.session.killed:
                raise QueryInterrupted()
            if may_relay:
                self.streaming.add(conn)
                if self.session.client.write_paused:
                    conn.pause_reading()
                try:
                    sc = await conn.run(packet, self.runtime.backends.timeout_s, kind=kind,
                                        sink=self.relay_sink or self.session.client)
                except BackendUnavailable as e:
                    if conn.relayed_any:
                        self.session.client.close()  # half an answer was sent; the client must not trust it
                    raise _on_node(node, e) from None
                finally:
                    self.streaming.discard(conn)
            else:
                try:
                    sc = await conn.run(packet, timeout or self.runtime.backends.timeout_s, kind=kind, collect=True)
                except BackendUnavailable as e:
                    raise _on_node(node, e) from None
            await self.keep_warnings([(conn, sc)])
        finally:
            if not held:
                self._done_with(node, conn)
        self._note_ok(sc)
        if may_relay:
            return True
        if rewrite is not None and sc.results and sc.results[0].columns:
            rewrite(sc.results[0].rows)
        self.add_results(sc, r, more)
        return False

    def _note_ok(self, sc: ResponseScanner) -> None:
        ok = self._ok(sc.ok) if sc.ok is not None else None
        if ok is not None and ok.last_insert_id:
            self.session.last_insert_id = ok.last_insert_id
        self.session.row_count = sc.row_count()

    def _ok(self, ok: OkInfo) -> OkInfo:
        """A write's OK as the client gets it: the first value pydble filled in is its last-insert-id (an
        INSERT IGNORE that wrote nothing keeps the backend's)."""
        if self.insert_id and ok.affected_rows:
            return replace(ok, last_insert_id=self.insert_id)
        return ok

    def add_results(self, sc: ResponseScanner, r: Reply, more: bool) -> None:
        """Re-encode a collected response with this session's sequence ids and flags."""
        status = self.session.status()
        n = len(sc.results)
        for i, res in enumerate(sc.results):
            last = i == n - 1 and sc.error is None
            m = more or not last
            if res.columns:
                r.resultset(res, status, m)
            elif res.ok is not None:
                r.ok_info(self._ok(res.ok), status, m)
        if sc.error is not None:
            r.err_info(sc.error)

    async def _run_on(self, targets: list[tuple[str, str]], copies: bool = False,
                      keep: list[BackendConnection] | None = None, budget: Budget | None = None
                      ) -> list[ResponseScanner]:
        """Run per-node SQL on several nodes in parallel, collecting their answers. copies: the nodes run
        the same statement on copies of the same rows (global tables), so one node's warnings stand for all;
        keep: the caller ends the connections' work itself (they are appended there instead of given back)."""
        acquired = await self._get_all([node for node, _ in targets])
        failure = next((a for a in acquired if isinstance(a, BaseException)), None)
        if failure is not None:
            for (node, _), a in zip(targets, acquired):
                if isinstance(a, BackendConnection):
                    self._done_with(node, a)
            raise failure
        conns: list[BackendConnection] = acquired  # type: ignore[assignment]
        if budget is None:   # one cap for the whole query (a cross-node JOIN passes its own, for all its reads)
            budget = Budget(self.runtime.config.server.merge_memory_mb << 20)
        self.gathering.update(conns)
        try:
            if self.session.killed:   # KILL QUERY came while the connections were taken
                results: list = [QueryInterrupted()] * len(conns)
            else:
                results = await asyncio.gather(
                    *(c.run(_com_query(sql), self.runtime.backends.timeout_s, collect=True, budget=budget)
                      for c, (_, sql) in zip(conns, targets)), return_exceptions=True)
        finally:
            self.gathering.difference_update(conns)
        await self.keep_warnings(list(zip(conns, results)), copies)
        if keep is not None:
            keep.extend(conns)
        else:
            for (node, _), c in zip(targets, conns):
                self._done_with(node, c)
        for (node, _), res in zip(targets, results):
            if isinstance(res, BackendUnavailable):
                raise _on_node(node, res)
            if isinstance(res, BaseException):
                raise res
        self.last_node = targets[-1][0]
        return results  # type: ignore[return-value]

    async def _write_all_or_nothing(self, targets: list[tuple[str, str]], copies: bool = False
                                    ) -> list[ResponseScanner]:
        """A write on several nodes is one statement: when it fails on one node it is undone on the others,
        as InnoDB undoes a failed statement. In a transaction each node takes a savepoint with it (same
        round trip) and goes back to it; in autocommit each node runs it in a transaction of its own,
        committed once every node has succeeded (a node lost during that COMMIT is XA's business)."""
        if self._pinning():
            scanners = _statement_only(
                await self._run_on([(n, f"SAVEPOINT {STMT_SAVEPOINT};{sql}") for n, sql in targets], copies))
            if any(sc.error is not None for sc in scanners) and self._rolling_back is None:
                back = [self.pinned[n] for (n, _), sc in zip(targets, scanners) if sc.error is None and n in self.pinned]
                await asyncio.gather(*(c.query(f"ROLLBACK TO SAVEPOINT {STMT_SAVEPOINT}", self.runtime.backends.timeout_s)
                                       for c in back))
            return scanners
        if self.locked:
            return await self._write_under_table_locks(targets, copies)
        if self.session.xa:
            return await self._write_as_xa(targets, copies)
        conns: list[BackendConnection] = []
        try:
            scanners = await self._run_on([(n, f"START TRANSACTION;{sql}") for n, sql in targets], copies, keep=conns)
        except BaseException:
            await self._finish({n: c for (n, _), c in zip(targets, conns)}, "ROLLBACK")
            raise
        failed = any(sc.error is not None for sc in scanners)
        lost = next((n for (n, _), c in zip(targets, conns) if c.broken), None)  # its part rolled back already
        errors = await self._finish({n: c for (n, _), c in zip(targets, conns)},
                                    "ROLLBACK" if failed or lost else "COMMIT")
        if lost is not None and not failed:
            raise BackendUnavailable(f"shardingNode[{lost}] connection was lost during a write on several "
                                     f"shardingNodes: it was rolled back on every node, nothing was written")
        if errors and not failed:
            raise BackendUnavailable(f"COMMIT of a write on several shardingNodes failed: {errors[0]}")
        return _statement_only(scanners)

    async def _write_as_xa(self, targets: list[tuple[str, str]], copies: bool) -> list[ResponseScanner]:
        """SET xa = on, autocommit: a write on several nodes is an XA transaction of its own, so a crash
        between two nodes' commits cannot leave it half written."""
        branches = XaBranches(self.runtime.xa)
        conns: list[BackendConnection] = []
        try:
            scanners = await self._run_on([(n, f"{branches.start_sql(n)};{sql}") for n, sql in targets], copies,
                                          keep=conns)
        except BaseException:
            await branches.finish({n: c for (n, _), c in zip(targets, conns)}, "ROLLBACK")
            raise
        held = {n: c for (n, _), c in zip(targets, conns)}
        failed = any(sc.error is not None for sc in scanners)
        lost = next((n for n, c in held.items() if c.broken), None)
        if failed or lost is not None:
            await branches.finish(held, "ROLLBACK")
            if lost is not None and not failed:
                raise BackendUnavailable(f"shardingNode[{lost}] connection was lost during a write on several "
                                         f"shardingNodes: it was rolled back on every node, nothing was written")
        else:
            await branches.finish(held, "COMMIT")
        return _statement_only(scanners)

    async def _write_under_table_locks(self, targets: list[tuple[str, str]], copies: bool) -> list[ResponseScanner]:
        """All or nothing while LOCK TABLES holds the connections: START TRANSACTION would release the
        table locks, so each node runs the write with autocommit off, then COMMIT or ROLLBACK (which keep
        the locks) and autocommit on again; the connections stay the session's."""
        scanners = _statement_only(await self._run_on([(n, f"SET autocommit=0;{sql}") for n, sql in targets], copies))
        end = "ROLLBACK" if any(sc.error is not None for sc in scanners) else "COMMIT"
        conns = [self.locked[n] for n, _ in targets if n in self.locked]
        await asyncio.gather(*(c.query(f"{end};SET autocommit=1", self.runtime.backends.timeout_s) for c in conns))
        return scanners

    def _global_only(self, plan: Plan) -> bool:
        """True when every table a write touches is a global table (one copy per node)."""
        return self.runtime.config.all_global(plan.tables)

    async def run_everywhere(self, targets: list[tuple[str, str]]) -> list[ResponseScanner]:
        """Run SQL on the given nodes outside any transaction (DDL); answers are collected."""
        return await self._run_on(targets)

    async def run_on_pinned(self, sql: str, r: Reply, more: bool) -> bool:
        """SAVEPOINT and friends: run on every node of the open transaction."""
        if self.pinned:
            scanners = await asyncio.gather(*(c.run(_com_query(sql), self.runtime.backends.timeout_s, collect=True)
                                              for c in self.pinned.values()))
            for sc in scanners:
                if sc.error is not None:
                    r.err_info(sc.error)
                    return False
        r.ok(self.session.status(), more=more)
        return False

    async def savepoint(self, op: str, name: str, r: Reply, more: bool) -> None:
        """SAVEPOINT / ROLLBACK TO / RELEASE on every node of the transaction, tracking the names.

        Nodes that join later get the savepoints at join time (see _sync), so ROLLBACK TO works on
        them too; outside a transaction a SAVEPOINT is a no-op, as on MySQL with autocommit."""
        key = name.lower()
        if op == "SAVEPOINT":
            if not self._pinning():
                r.ok(self.session.status(), more=more)
                return
            sql = f"SAVEPOINT `{key}`"
        else:
            if key not in self.savepoints:
                raise ProxyError(f"SAVEPOINT {name} does not exist", 1305, "42000")
            sql = f"ROLLBACK TO SAVEPOINT `{key}`" if op == "ROLLBACK" else f"RELEASE SAVEPOINT `{key}`"
        await self.run_on_pinned(sql, r, more)
        if r.out and r.out[-1][4:5] == b"\xff":
            return
        i = self.savepoints.index(key) if key in self.savepoints else len(self.savepoints)
        if op == "SAVEPOINT":
            self.savepoints = [n for n in self.savepoints if n != key] + [key]
        elif op == "ROLLBACK":
            del self.savepoints[i + 1:]   # later savepoints are gone, this one stays
        else:
            del self.savepoints[i:]       # InnoDB frees this one and every later one

    async def field_list(self, payload: bytes, r: Reply) -> bool:
        """COM_FIELD_LIST (the CLI's tab completion): asked of one node holding the table."""
        table_b, _, wild = payload[1:].partition(b"\x00")
        table = table_b.decode("utf-8", "replace")
        schema = self.session.schema
        if schema is None:
            raise ProxyError("No database selected", 1046, "3D000")
        if await self.runtime.views.field_list(self.session, schema, table, wild, r):
            return False   # a view pydble keeps: no node has it
        scratch.refuse(table)   # pydble's own scratch views, as every statement naming one
        node = self.runtime.node_of_table(schema, table)
        if node is None:
            raise NoSuchTable(f"Table '{schema}.{table}' doesn't exist")
        return await self.run_single(node, frame(0, payload), r, False, True, kind="field_list")

    async def keep_warnings(self, done: list[tuple[BackendConnection, object]], copies: bool = False) -> None:
        """After a statement, before its connections go back: the warnings (or error) each node reported
        for it (copies: the first node's only), fetched with SHOW WARNINGS where the count says there are
        some; SHOW WARNINGS, SHOW COUNT(*) WARNINGS and @@warning_count answer them next."""
        found: list[tuple[str, int, str]] = []
        self.node_warnings = []
        for conn, sc in done[:1] if copies else done:
            self.node_warnings.append([])
            if not isinstance(sc, ResponseScanner):
                continue
            if sc.warnings and not conn.broken:
                try:
                    shown = await conn.query("SHOW WARNINGS", self.runtime.backends.timeout_s)
                except ProxyError as e:
                    log.info("cannot fetch a statement's warnings", error=e.message)
                    continue
                for res in shown.results[:1]:
                    self.node_warnings[-1].extend(conn.warnings_of(res.rows))
            elif sc.error is not None:
                self.node_warnings[-1].append(("Error", sc.error.code, sc.error.message))
            found += self.node_warnings[-1]
        if found:
            self.session.warnings = found

    def show_warnings(self, sql: str) -> ResultSet:
        """SHOW WARNINGS / SHOW ERRORS of the session's last statement (SHOW COUNT(*) ... lives in the session)."""
        errors_only = sql.split()[1].upper() == "ERRORS"
        rows = [[lv.encode(), str(code).encode(), msg.encode("utf-8", "surrogateescape")]
                for lv, code, msg in self.session.warnings
                if lv == "Error" or not errors_only]
        m = _SHOW_LIMIT.search(sql)
        if m is not None:  # LIMIT [offset,] count
            offset, count = (int(m.group(1)), int(m.group(2))) if m.group(2) else (0, int(m.group(1)))
            rows = rows[offset:offset + count]
        return ResultSet(list(WARNING_COLUMNS), rows)
