"""Server-side prepared statements, emulated the DBLE way, so drivers that prepare (sysbench) work.

PREPARE counts the `?` placeholders with the tokenizer and learns accurate column definitions by
preparing the statement once on one backend node of its table (cached per statement text and
metadata version). EXECUTE decodes the binary parameters (types remembered from the first execute),
writes them into the text as escaped SQL literals, and runs that text like a COM_QUERY, so the
bound sharding key routes as a literal would. The text-protocol answer is converted to binary rows
by column type: a single-node answer packet by packet while it streams, a merged one after the merge.
A point read on a shared backend connection is the exception: it runs there as the backend's own
prepared statement (planner.PointStatement, BackendConnection.statement), its binary answer relayed as is.
"""

from __future__ import annotations

import re
import struct
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from meta.errors import BackendError, NotSupported, ProxyError

from proxy.exec.merge import merged_columns
from proxy.exec.planner import PointStatement
from proxy.plan.placeholders import positional_placeholder, select_aliases
from proxy.plan.router import one_statement
from proxy.wire import constants as C
from proxy.wire.binary import (LAST_STATEMENT_ID, LONG_DATA, BinaryResultConverter, IntParams, ParamType, binary_answer,
                              limit_literal, limit_placeholders, parse_execute, parse_prepare_response, parse_send_long_data,
                              placeholder_positions, prepare_ok, sql_literal, substitute)
from proxy.wire.messages import ColumnDef, eof_packet, parse_column_def
from proxy.wire.packets import ProtocolError, frame
from proxy.wire.reply import Reply
from proxy.plan.sqltok import Token, first_keyword, tokenize
from proxy.exec.user_locks import calls as user_lock_calls, refuse_assignment, sets_insert_id

if TYPE_CHECKING:
    from proxy.plan.plan import Plan
    from proxy.runtime import ClientPort, Runtime, SessionPort

log = structlog.get_logger("pydble.prepared")

COMMANDS = frozenset({C.COM_STMT_PREPARE, C.COM_STMT_EXECUTE, C.COM_STMT_SEND_LONG_DATA, C.COM_STMT_CLOSE,
                      C.COM_STMT_RESET, C.COM_STMT_FETCH})
MAX_STATEMENTS = 16382        # MySQL's default max_prepared_stmt_count, here per session
CACHE_SIZE = 2048             # statement shapes kept per proxy instance
MAX_PLACEHOLDERS = 0xFFFF       # the parameter count is two bytes in PREPARE_OK
# Statements the session answers itself: PREPARE needs no backend for them (sysbench prepares BEGIN).
_SESSION_KEYWORDS = frozenset({"BEGIN", "START", "COMMIT", "ROLLBACK", "SET", "USE", "SAVEPOINT", "RELEASE",
                               "SHOW", ""})
_PARAM_DEF = ColumnDef("?", C.T_VAR_STRING, C.CHARSET_BINARY, 0, C.BINARY_FLAG, 0).encode()


_STAND_IN_MARK = "/*?*/"
_STAND_IN = re.compile(r"(?:NULL|1)/\*\?\*/")   # what _route_for_prepare writes for a placeholder


def _err_unknown(stmt_id: int, where: str) -> ProxyError:
    return ProxyError(f"Unknown prepared statement handler ({stmt_id}) given to {where}", 1243, "HY000")


def _limit_literal(value: object) -> str:
    try:
        return limit_literal(value)
    except ValueError as e:
        raise NotSupported(f"{e}: pydble writes the parameters into the statement and cannot read this "
                           "one in LIMIT as MariaDB would") from None


@dataclass(frozen=True)
class Shape:
    """What PREPARE learned of one statement text: placeholders and the definitions clients see."""

    sql: str
    positions: tuple[tuple[int, int], ...]
    param_defs: tuple[bytes, ...]
    column_defs: tuple[bytes, ...]
    version: int
    limits: frozenset[int] = frozenset()  # the placeholders that are a LIMIT count or offset
    aliases: tuple[tuple[int, str], ...] = ()  # select items named after their `?` text (proxy/plan/placeholders.py)


Scope = tuple[str | None, str | None]   # (user, schema) a cached shape belongs to


def _is_view_statement(toks: list[Token]) -> bool:
    """CREATE [OR REPLACE] [ALGORITHM=..] [DEFINER=..] [SQL SECURITY ..] VIEW / ALTER ... VIEW."""
    for t in toks[1:16]:
        if t[0] == "w" and t[1].upper() in ("AS", "SELECT", "TABLE", "INDEX", "DATABASE", "SCHEMA"):
            return False
        if t[0] == "w" and t[1].upper() == "VIEW":
            return True
    return False


class ShapeCache:
    """A bounded LRU of statement shapes per (user, schema, text), for all sessions of one instance: a shape
    is shared only by sessions with the same grants (PREPARE checks them while it learns the shape)."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._d: OrderedDict[tuple[Scope, str], Shape] = OrderedDict()

    def get(self, scope: Scope, sql: str, version: int) -> Shape | None:
        """The cached shape, unless the metadata changed since it was learned."""
        key = (scope, sql)
        s = self._d.get(key)
        if s is None:
            return None
        if s.version != version:
            del self._d[key]
            return None
        self._d.move_to_end(key)
        return s

    def put(self, scope: Scope, shape: Shape) -> None:
        """Remember a shape, dropping the least recently used beyond the bound."""
        self._d[(scope, shape.sql)] = shape
        self._d.move_to_end((scope, shape.sql))
        while len(self._d) > self.size:
            self._d.popitem(last=False)

    def __len__(self) -> int:
        return len(self._d)


_caches: weakref.WeakKeyDictionary[Runtime, ShapeCache] = weakref.WeakKeyDictionary()


def cache_of(server: Runtime) -> ShapeCache:
    """The shape cache of a proxy instance."""
    c = _caches.get(server)
    if c is None:
        c = _caches[server] = ShapeCache()
    return c


@dataclass
class Statement:
    """One prepared statement of a session."""

    id: int
    shape: Shape
    types: tuple[ParamType, ...] | None = None
    long_data: dict[int, bytearray] = field(default_factory=dict)
    ints: IntParams | None = None   # the fast bind of these types, when every parameter is an integer
    point: PointStatement | None = None   # the route kept for its executes (planner.PointStatement)
    failed: ProxyError | None = None   # a SEND_LONG_DATA MariaDB refused: every EXECUTE answers it until RESET

    @property
    def params(self) -> int:
        return len(self.shape.positions)


class _Collector:
    """A sink that keeps what a backend sends (a PREPARE answer is small)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(bytes(data))


class _BinarySink:
    """The relay sink of an EXECUTE: text packets in from the backend, binary packets out to the client. A
    whole answer in one write (the point read) is converted in one pass; anything else packet by packet."""

    __slots__ = ("client", "deprecate_eof", "conv", "ended", "failed")

    def __init__(self, client: ClientPort, deprecate_eof: bool) -> None:
        self.client = client
        self.deprecate_eof = deprecate_eof
        self.conv: BinaryResultConverter | None = None   # made for an answer that does not come whole
        self.ended = False
        self.failed = False

    def write(self, data: bytes) -> None:
        if self.failed:
            return
        try:
            if self.conv is None:
                if self.ended:
                    raise ProtocolError("bytes after the end of the answer")
                whole = binary_answer(data, self.deprecate_eof)
                if whole is not None:
                    self.ended = True
                    self.client.write(whole[0])
                    return
                self.conv = BinaryResultConverter(self.deprecate_eof)
            out = self.conv.feed(data)
        except (ProtocolError, ValueError, struct.error) as e:
            # Half an answer may be out already; the client must not trust the rest.
            self.failed = True
            log.error("cannot convert a row to the binary protocol", error=str(e))
            self.client.close()
            return
        if out:
            self.client.write(out)


class PreparedStatements:
    """The prepared statements of one session and the COM_STMT_* commands on them."""

    def __init__(self, session: SessionPort) -> None:
        self.session = session
        self.stmts: dict[int, Statement] = {}
        self.named: dict[str, Statement] = {}   # SQL-level PREPARE name FROM ... (proxy/session/sql_prepare.py)
        self.assigned: set[str] = set()  # user variables a := or CALL set since their last SET (proxy/session/sql_prepare.py)
        self._next_id = 1
        self._last_id = 0

    # -- entry point ----------------------------------------------------------------------------
    async def dispatch(self, payload: bytes) -> None:
        """Answer one COM_STMT_* command (CLOSE and SEND_LONG_DATA are never answered)."""
        cmd = payload[0]
        s = self.session
        try:
            if cmd == C.COM_STMT_PREPARE:
                self._last_id = 0  # a pipelined execute of "the last statement" must fail with this one
                s.client.write(await self.prepare(payload[1:].decode("utf-8", "surrogateescape")))
            elif cmd == C.COM_STMT_EXECUTE:
                await self.execute(payload)
            elif cmd == C.COM_STMT_SEND_LONG_DATA:
                self.send_long_data(payload)
            elif cmd == C.COM_STMT_CLOSE:
                self.close(payload)
            elif cmd == C.COM_STMT_RESET:
                self.reset(payload)
                r = Reply(s.deprecate_eof)
                r.ok(s.status())
                s.client.write(r.bytes())
            else:  # COM_STMT_FETCH: results are always sent whole, so no cursor is ever open
                stmt_id = int.from_bytes(payload[1:5], "little")
                self._get(stmt_id, "mysqld_stmt_fetch")   # an unknown statement is 1243, as on MariaDB
                raise ProxyError(f"The statement ({stmt_id}) has no open cursor", 1421, "HY000")
        except ProxyError as e:
            if cmd in (C.COM_STMT_CLOSE, C.COM_STMT_SEND_LONG_DATA):
                s.log.info("statement command failed", command=cmd, error=e.message)
                return
            r = Reply(s.deprecate_eof)
            r.proxy_error(e)
            s.client.write(r.bytes())

    def close_all(self) -> None:
        """COM_RESET_CONNECTION: every statement of the session is gone (SQL-level ones too)."""
        self.stmts.clear()
        self.named.clear()
        self.assigned.clear()

    # -- PREPARE --------------------------------------------------------------------------------
    async def prepare(self, sql: str) -> bytes:
        """COM_STMT_PREPARE: register the statement; return the framed PREPARE_OK answer."""
        self.check_room()
        shape = await self.shape_of(sql)
        stmt_id = self._next_id
        self._next_id = self._next_id % 0xFFFFFFFE + 1
        self.stmts[stmt_id] = Statement(stmt_id, shape)
        self._last_id = stmt_id
        return self._prepare_answer(stmt_id, shape)

    def check_room(self) -> None:
        """MySQL's max_prepared_stmt_count, counting binary and SQL-level statements together."""
        if len(self.stmts) + len(self.named) >= MAX_STATEMENTS:
            raise ProxyError(f"Can't create more than max_prepared_stmt_count statements (current value: "
                             f"{MAX_STATEMENTS})", 1461, "42000")

    async def shape_of(self, sql: str) -> Shape:
        """What PREPARE learns of a statement text (validated as MariaDB would), cached per instance."""
        if not one_statement(sql, tokenize(sql)):
            raise ProxyError("Query was empty", 1065, "42000")
        refuse_assignment(sql)
        self.session.refuse_misread(sql)
        if first_keyword(sql) == "SELECT" and "last_insert_id" in sql.lower() and sets_insert_id(sql) is not None:
            raise NotSupported("LAST_INSERT_ID(expr) is not supported by pydble in prepared statements: the "
                               "session's value would not follow it")
        if user_lock_calls(sql):  # binary execution runs on pooled connections, where no lock may stay
            raise NotSupported("GET_LOCK and the other user-lock functions are not supported by pydble in "
                               "prepared statements: run them as plain statements")
        s = self.session
        cache = cache_of(s.runtime)
        version = s.runtime.registry.version
        scope = (s.user, s.schema)   # another user's shape was learned under other grants
        if s.executor.temp.shadow_for(sql) is not None:   # the session's own tables: learned for it alone
            return await self._learn(sql, version)
        shape = cache.get(scope, sql, version)
        if shape is None:
            shape = await self._learn(sql, version)
            cache.put(scope, shape)
        return shape

    def _prepare_answer(self, stmt_id: int, shape: Shape) -> bytes:
        status = self.session.status()
        out = [frame(1, prepare_ok(stmt_id, len(shape.column_defs), len(shape.param_defs)))]
        seq = 2
        for defs in (shape.param_defs, shape.column_defs):
            if not defs:
                continue
            for d in defs:
                out.append(frame(seq, d))
                seq += 1
            if not self.session.deprecate_eof:
                out.append(frame(seq, eof_packet(0, status)))
                seq += 1
        return b"".join(out)

    async def _learn(self, sql: str, version: int) -> Shape:
        """Count placeholders and ask one backend node for the column definitions."""
        toks = tokenize(sql)
        positions = placeholder_positions(toks)
        if len(positions) > MAX_PLACEHOLDERS:  # the count is 2 bytes in PREPARE_OK: MariaDB refuses more
            raise ProxyError("Prepared statement contains too many placeholders", 1390, "HY000")
        param_defs = (_PARAM_DEF,) * len(positions)
        limits = limit_placeholders(toks)
        if positions and first_keyword(sql) in ("CREATE", "ALTER") and _is_view_statement(toks):
            raise ProxyError("View's SELECT contains a variable or parameter", 1351, "HY000")
        if first_keyword(sql) in ("PREPARE", "EXECUTE", "DEALLOCATE"):
            raise ProxyError("This command is not supported in the prepared statement protocol yet", 1295, "HY000")
        if positions and positional_placeholder(toks):
            raise NotSupported("a ? standing alone as an ORDER BY or GROUP BY item is not supported by pydble: "
                               "MariaDB reads it as a constant, but the value written in would be a column "
                               "position")
        if first_keyword(sql) in _SESSION_KEYWORDS:
            return Shape(sql, positions, param_defs, (), version, limits)  # BEGIN, SET, SHOW...: the session answers
        aliases = select_aliases(sql, toks) if positions else ()
        # a statement naming a temporary table: its columns come with the results (pooled connections lack it)
        temp = self.session.executor.temp.shadow_for(sql) is not None
        plan = None if temp else self._route_for_prepare(sql, positions)
        if plan is None or plan.kind == "ddl" or not plan.targets:
            return Shape(sql, positions, param_defs, (), version, limits, aliases)
        target = plan.targets[0]
        physical = target.sql
        if positions and physical.count(_STAND_IN_MARK) == len(positions):
            # the backend prepares the placeholders themselves: `LIMIT NULL` would be a syntax error there,
            # and the parameter and column definitions are those of the `?` text
            physical = _STAND_IN.sub("?", physical)
        backend_params, columns = await self._prepare_on(target.node, physical)
        if len(backend_params) == len(positions):
            param_defs = backend_params
        if plan.merge is not None and columns:
            columns = tuple(c.encode() for c in merged_columns(plan.merge, [parse_column_def(c) for c in columns]))
        return Shape(sql, positions, param_defs, columns, version, limits, aliases)

    def _route_for_prepare(self, sql: str, positions: tuple[tuple[int, int], ...]) -> Plan | None:
        """A plan for the statement with its placeholders unbound: as is, or with NULL or 1 standing in."""
        router = self.session.runtime.router
        schema = self.session.schema
        candidates = [sql]
        if positions:
            candidates += [substitute(sql, positions, [f"{v}/*?*/"] * len(positions)) for v in ("NULL", "1")]
        err: ProxyError | None = None
        for cand in candidates:
            try:
                return router.route(cand, schema, self.session.grants)
            except ProxyError as e:
                err = err or e
        if err is not None and err.code in (1044, 1046, 1049, 1051, 1054, 1064, 1142, 1146):
            raise err  # no database, unknown database, unknown table or column, syntax: the client must hear it now
        log.debug("prepare: no route with unbound parameters, columns come with the results", sql=sql[:200])
        return None

    async def _prepare_on(self, node: str, sql: str) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
        """PREPARE sql on one node (a pooled connection) and close it there; (param defs, column defs)."""
        s = self.session
        backends = s.runtime.backends
        conn = await backends.acquire(node, s.format_flags)
        try:
            sink = _Collector()
            sc = await conn.run(frame(0, bytes((C.COM_STMT_PREPARE,)) + sql.encode("utf-8", "surrogateescape")),
                                backends.timeout_s, kind="prepare", sink=sink)
            if sc.error is not None:
                if sc.error.code == 1295:  # the backend cannot prepare it; the text will still run
                    return (), ()
                raise BackendError(sc.error.message, sc.error.code, sc.error.sqlstate)
            ok = parse_prepare_response(b"".join(sink.parts), bool(conn.flags & C.DEPRECATE_EOF))
            conn.close_statement(ok.stmt_id)
            return ok.param_defs, ok.column_defs
        finally:
            backends.release(node, conn)

    # -- EXECUTE --------------------------------------------------------------------------------
    def _get(self, stmt_id: int, where: str) -> Statement:
        stmt = self.stmts.get(self._last_id if stmt_id == LAST_STATEMENT_ID else stmt_id)
        if stmt is None:   # named as the client gave it, 4294967295 too (as MariaDB)
            raise _err_unknown(stmt_id, where)
        return stmt

    def bind(self, stmt: Statement, payload: bytes) -> str:
        """The statement text with this execute's parameters written in as literals."""
        try:
            req = parse_execute(payload, stmt.params, stmt.types, frozenset(stmt.long_data))
        except ProtocolError as e:
            raise ProxyError(f"Incorrect arguments to mysqld_stmt_execute ({e})", 1210, "HY000") from None
        if req.types is not None:
            stmt.types = req.types
            shape = stmt.shape
            stmt.ints = None if shape.limits or shape.aliases else IntParams.of(shape.sql, shape.positions, req.types)
        if not stmt.params:
            return stmt.shape.sql
        values = [bytes(stmt.long_data[i]) if v is LONG_DATA else v for i, v in enumerate(req.values)]
        return self.bound_text(stmt.shape, values, "mysqld_stmt_execute")

    def bound_text(self, shape: Shape, values: list[object], where: str) -> str:
        """The statement text with these parameter values written in as literals (LIMIT ones as MariaDB
        reads them there): the one substitution of COM_STMT_EXECUTE and SQL-level EXECUTE."""
        backslashes = "NO_BACKSLASH_ESCAPES" not in self.session.vars.get("sql_mode", "").upper()
        literals = []
        limits = shape.limits
        try:
            for i, v in enumerate(values):
                if i not in limits:
                    literals.append(sql_literal(v, backslashes))
                else:
                    literals.append(_limit_literal(v.encode("utf-8", "surrogateescape") if isinstance(v, str) else v))
        except (ValueError, TypeError) as e:
            raise ProxyError(f"Incorrect arguments to {where} ({e})", 1210, "HY000") from None
        if not shape.aliases:
            return substitute(shape.sql, shape.positions, literals)
        edits = sorted([*zip(shape.positions, literals), *(((at, at), alias) for at, alias in shape.aliases)])
        return substitute(shape.sql, tuple(e[0] for e in edits), [e[1] for e in edits])

    async def execute(self, payload: bytes) -> None:
        """COM_STMT_EXECUTE: run the bound text and answer with binary rows."""
        s = self.session
        if len(payload) < 10:   # no statement id, flags and iteration count: MariaDB's answer, known statement or not
            raise ProxyError("Malformed communication packet", 1835, "HY000")
        stmt = self._get(int.from_bytes(payload[1:5], "little"), "mysqld_stmt_execute")
        if stmt.failed is not None:
            raise stmt.failed
        sql = self.bind(stmt, payload)
        stmt.long_data.clear()  # long data is consumed by the execute, as MySQL does
        r = Reply(s.deprecate_eof)
        sink = _BinarySink(s.client, s.deprecate_eof)
        ex = s.executor
        ex.relay_sink = sink
        try:
            relayed = await s.statement(sql, r, more=False, may_relay=True)
        except ProxyError as e:
            r.proxy_error(e)
            relayed = False
        finally:
            ex.relay_sink = None
        if not relayed:
            s.client.write(BinaryResultConverter(s.deprecate_eof).feed(r.bytes()))

    def fast_bind(self, payload: bytes) -> str | None:
        """The bound text of a COM_STMT_EXECUTE the session's fast path may start from the data callback
        (a known statement without long data); None leaves it to the task, which answers any error."""
        stmt = self.stmts.get(int.from_bytes(payload[1:5], "little")) if len(payload) >= 5 else None
        if stmt is None or stmt.long_data or stmt.failed is not None:
            return None
        ints = stmt.ints
        if ints is not None and ints.types is stmt.types and (sql := ints.bind(payload)) is not None:
            return sql
        try:
            return self.bind(stmt, payload)
        except ProxyError:
            return None

    def fast_point(self, payload: bytes) -> bool | None:
        """Start an execute of a prepared point read from the data callback by the route kept on its
        statement (only the key is new): True when started, False when the task must serve it, None when
        it is not such an execute (fast_bind and the quick route of its text decide)."""
        stmt = self.stmts.get(int.from_bytes(payload[1:5], "little")) if len(payload) >= 5 else None
        if stmt is None or stmt.long_data or stmt.failed is not None:
            return None
        ints = stmt.ints
        if ints is None or ints.types is not stmt.types:
            return None
        s = self.session
        router = s.runtime.router
        point = stmt.point
        if point is None or not point.valid(router, ints.template, s.schema):
            point = stmt.point = PointStatement(router, ints.template, s.schema)
        if point.table is None:
            return None
        values = ints.values(payload)
        if values is None:
            return None
        return point.start(s.executor, values[0], _BinarySink(s.client, s.deprecate_eof))

    def binary_sink(self) -> _BinarySink:
        """Where the fast path relays an EXECUTE's text answer: converted to binary rows for the client."""
        return _BinarySink(self.session.client, self.session.deprecate_eof)

    # -- the others -----------------------------------------------------------------------------
    def send_long_data(self, payload: bytes) -> None:
        """COM_STMT_SEND_LONG_DATA: append a chunk to one parameter (bounded by max_allowed_packet). It has no
        answer: as MariaDB, a chunk refused (a parameter the statement lacks, one grown past max_allowed_packet)
        fails the statement's EXECUTEs until COM_STMT_RESET, never runs it with the value cut short."""
        try:
            stmt_id, param, data = parse_send_long_data(payload)
        except ProtocolError:
            return
        stmt = self._get(stmt_id, "mysqld_stmt_send_long_data")
        if param >= stmt.params:
            stmt.failed = ProxyError("Incorrect arguments to mysqld_stmt_send_long_data", 1210, "HY000")
            return
        buf = stmt.long_data.setdefault(param, bytearray())
        if len(buf) + len(data) > self.session.runtime.max_packet:
            stmt.failed = ProxyError("Parameter of prepared statement which is set through mysql_send_long_data() "
                                     "is longer than 'max_allowed_packet' bytes", 1105, "HY000")
            return
        buf += data

    def close(self, payload: bytes) -> None:
        """COM_STMT_CLOSE: forget the statement (an unknown id is ignored, as MySQL does; 0xFFFFFFFF is the one
        prepared last, as for the other COM_STMT_* commands)."""
        if len(payload) >= 5:
            stmt_id = int.from_bytes(payload[1:5], "little")
            self.stmts.pop(self._last_id if stmt_id == LAST_STATEMENT_ID else stmt_id, None)

    def reset(self, payload: bytes) -> None:
        """COM_STMT_RESET: drop the long data sent so far, and the error a chunk of it left."""
        stmt = self._get(int.from_bytes(payload[1:5], "little") if len(payload) >= 5 else 0,
                         "mysqld_stmt_reset")
        stmt.long_data.clear()
        stmt.failed = None


__all__ = ["COMMANDS", "PreparedStatements", "Shape", "ShapeCache", "Statement", "cache_of"]
