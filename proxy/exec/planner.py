"""Statement -> plan: the router's Plan for a session's statement becomes a tree of primitives.

What a statement needs that the router cannot know (the session's grants, read-only user, LOCK TABLES,
metadata still loading, a global sequence, GET_LOCK) is checked here, before anything runs; the executor
then runs the tree it is given (proxy/exec/primitives.py).
"""

from __future__ import annotations

import re
import struct
from typing import TYPE_CHECKING, Any

from meta.errors import BackendError, NotSupported, ProxyError, ReadOnly

from proxy.plan.analyzer import Refused
from proxy.plan.router import POINT_KEY_MAX, POINT_TEXT_MAX
from proxy.ddl.ddl import require_meta
from proxy.plan.local import calls_session_functions
from proxy.exec.primitives import (Concatenate, Ddl, Join, Maintenance, MultiWrite, NodePlan, NodesUnlimited, OrCopies,
                         OverCopies, Primitive, Route, Scatter, SelectInsertId, SequenceInsert, TempDdl, TempStatement,
                         UserLockCall)
from proxy.exec.temp_tables import is_temporary_ddl
from proxy.wire.packets import com_query
from proxy.plan.sqltok import first_keyword, tokenize
from proxy.exec.user_locks import calls as user_lock_calls, refuse_assignment, sets_insert_id

if TYPE_CHECKING:  # pragma: no cover
    from proxy.plan.plan import Plan
    from proxy.runtime import ExecContext, Planner
    from proxy.backends.backend import Sink

WRITES = ("insert", "replace", "update", "delete")
WRITES_AND_SELECT = ("SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE")
# EXPLAIN <statement> answers pydble's plan (DBLE's EXPLAIN); EXPLAIN FORMAT=..., EXTENDED, PARTITIONS,
# ANALYZE and EXPLAIN <table> go on to MariaDB as before.
_EXPLAIN = re.compile(r"\s*EXPLAIN\s+(?=(?:SELECT|WITH|INSERT|REPLACE|UPDATE|DELETE|TABLE)\b|\()", re.I)


def explained(sql: str) -> str | None:
    """The statement an `EXPLAIN <statement>` asks pydble's plan of, else None."""
    m = _EXPLAIN.match(sql)
    return sql[m.end():] if m is not None else None


async def build(ctx: ExecContext, sql: str, *, explain: bool = False) -> Primitive:
    """The plan of one statement in this session. explain: only to show it (nothing is drawn from a
    sequence, the session's warnings stay)."""
    if not explain and _limited(ctx.session.vars) and first_keyword(sql) in ("SELECT", "WITH"):
        plan = await _build(ctx, sql, explain)
        if isinstance(plan, Route):
            return plan   # one node applies sql_select_limit itself, as MariaDB does
        # The proxy answers from several nodes: their reads must be whole (they feed a merge, a join or copies)
        # and the limit applies to the statement's own answer, as a LIMIT of its outermost query does.
        limit = _select_limit(ctx.session.vars)
        return NodesUnlimited(await _build(ctx, _with_limit(sql, limit), explain) if limit is not None else plan)
    seqs = ctx.runtime.sequences
    if seqs.columns and first_keyword(sql) in ("INSERT", "REPLACE") and ctx.temp.shadow_for(sql) is None and not (
            explain and seqs.nothing_to_fill(ctx.session, sql)):
        async def plan_filled(text: str) -> Primitive:
            return await _build(ctx, text, explain)
        return SequenceInsert(sql, plan_filled)
    return await _build(ctx, sql, explain)


async def _build(ctx: ExecContext, sql: str, explain: bool) -> Primitive:
    s = ctx.session
    refuse_assignment(sql)
    if is_temporary_ddl(sql):
        return TempStatement(sql)
    shadow = ctx.temp.shadow_for(sql)   # names one of the session's temporary tables
    temps: tuple[tuple[str, str], ...] = ()
    try:
        if shadow is not None:
            plan, temps = ctx.temp.route(sql, shadow)
        else:
            plan = ctx.runtime.router.route(sql, s.schema, s.grants)
    except NotSupported as e:
        if shadow is not None:
            raise   # (neither EXPLAIN's verdict, the proxy's join nor copies: they would read other tables)
        grants = s.grants
        if not isinstance(e, Refused) and not (grants is not None and grants.restricted):
            await _syntax_verdict(ctx, sql)  # (a statement not fully read is never sent for a restricted user)
        if not isinstance(e, Refused) and "JOIN" in e.message:
            from proxy.exec.join import plan_join   # two tables on different nodes: joined here
            try:
                join = plan_join(sql, ctx._columns_of)
            except NotSupported:
                join = None
            if join is not None:
                return OrCopies(_join(ctx, join, explain), sql)
        if not isinstance(e, Refused) and first_keyword(sql) in ("SELECT", "WITH"):
            return OverCopies(sql)   # no per-node plan answers it exactly: one MariaDB over copies
        raise
    if plan.tables and not explain:  # as in MariaDB, a statement on tables starts a fresh SHOW WARNINGS
        s.warnings = []
    if s.read_only and (plan.is_write or plan.kind == "ddl") and not explain:
        raise ReadOnly.of(s.user)
    if ctx.locked_tables and not explain:
        ctx.check_locked(plan)
    if user_lock_calls(sql):
        return UserLockCall(plan, sql)
    if plan.kind == "select" and "last_insert_id" in sql.lower() and sets_insert_id(sql) is not None:
        return SelectInsertId(plan, sql)
    if plan.kind in ("select", *WRITES) and not plan.hint:
        require_meta(ctx.runtime, plan)
    if plan.kind == "ddl" and temps:
        return TempDdl(plan, temps, sql)
    if plan.kind == "ddl":
        return Ddl(plan, sql)
    if not explain:
        s.route = "single" if len(plan.targets) == 1 else "multi"
    if plan.setop is not None:
        return OrCopies(Concatenate(plan), sql) if shadow is None else Concatenate(plan)
    if plan.maintenance:
        return Maintenance(plan)
    if len(plan.targets) == 1:
        schemas = {schema for schema, _ in plan.tables}
        if first_keyword(sql) in ("EXPLAIN", "ANALYZE") and len(schemas) == 1 and not plan.hint:
            return NodePlan(plan.targets[0].node, plan.targets[0].sql, schemas.pop())
        return Route(plan.targets[0].node, plan.targets[0].sql)
    if plan.kind in WRITES:
        return MultiWrite(plan, ctx._global_only(plan))
    scatter = Scatter(plan, ctx._global_only(plan))
    return OrCopies(scatter, sql) if plan.kind == "select" and plan.merge is not None and shadow is None else scatter


_NO_LIMIT = 18446744073709551615


def _limited(variables: dict[str, str]) -> bool:
    """The session set sql_select_limit (what Connector/J's setMaxRows sends) to something but DEFAULT."""
    sql = variables.get("sql_select_limit")
    return bool(sql) and sql.split("=", 1)[1].strip().upper() != "DEFAULT"


def _select_limit(variables: dict[str, str]) -> int | None:
    """The number of rows the session's sql_select_limit allows, None for no limit."""
    if not _limited(variables):
        return None
    value = variables["sql_select_limit"].split("=", 1)[1].strip()
    if not value.isdigit():
        raise NotSupported("a read across shardingNodes under sql_select_limit set to an expression is not "
                           "supported by pydble: set it to a number")
    return None if int(value) >= _NO_LIMIT else int(value)


def _with_limit(sql: str, limit: int) -> str:
    """The SELECT with LIMIT n on its outermost query, unless it has one (which wins, as in MariaDB)."""
    toks = tokenize(sql)
    while toks and toks[-1][0] == "o" and toks[-1][1] == ";":
        toks.pop()
    depth, at = 0, toks[-1][3] if toks else len(sql)
    for i, (kind, text, start, _) in enumerate(toks):
        if kind == "o" and text == "(":
            depth += 1
        elif kind == "o" and text == ")":
            depth -= 1
        elif depth == 0 and kind == "w":
            up = text.upper()
            nxt = toks[i + 1][1].upper() if i + 1 < len(toks) else ""
            if up == "LIMIT":
                return sql
            if (up, nxt) in (("FOR", "UPDATE"), ("LOCK", "IN"), ("INTO", nxt)) and at == toks[-1][3]:
                at = start   # LIMIT comes before the locking clause
    return f"{sql[:at]} LIMIT {limit} {sql[at:]}"


def quick_route(ctx: ExecContext, sql: str) -> Route | None:
    """The plan of a statement that the client connection's data callback may start itself (Route.start):
    one node, and nothing build() would check or substitute first (grants refused, read-only user, a
    sequence to draw from, metadata not usable, session functions, information_schema); else None, and
    build() plans it on the session's task. The sysbench point select is the case it is made for."""
    if ";" in sql:
        return None
    s = ctx.session
    rt = ctx.runtime
    try:
        point = rt.router.point(sql, s.schema, s.grants)
    except ProxyError:
        return None  # the task answers the refusal
    if point is not None:
        pt, i, at = point
        if pt.configured and rt.registry.unusable(*pt.table):
            return None  # memory cannot route it: the task answers 1146 or 3009
        # Name the node's database in the statement: any pooled connection to the dbGroup can then run it, so
        # a few hot backend connections serve all shardingNodes of a server instead of one set per database,
        # each waking up cold.
        return Route(pt.nodes[i], sql[:at] + pt.heads[i] + sql[at:], True, True)
    head = sql[:6].upper()
    kw = head if head in ("SELECT", "INSERT", "UPDATE", "DELETE") else first_keyword(sql)
    low = sql.lower()
    if "information_schema" in low or "_lock" in low or ":=" in low or "last_insert_id" in low:
        return None  # answered from the logical schemas by the task (proxy.session.infoschema)
    if kw == "SELECT" and " from " not in low:
        return None  # local probes are the task's business
    if kw not in WRITES_AND_SELECT or calls_session_functions(sql, low):
        return None  # DATABASE(), USER(), CONNECTION_ID() ... are substituted by the task
    try:
        plan = rt.router.route(sql, s.schema, s.grants)
        if len(plan.targets) != 1 or plan.kind == "ddl" or (s.read_only and plan.is_write):
            return None
        if (plan.kind in ("insert", "replace") and plan.tables and plan.tables[0] in rt.sequences.columns
                and not rt.sequences.nothing_to_fill(s, sql)):
            return None  # its increment column needs values from the global sequence
        if not plan.hint and plan.kind in ("select", *WRITES):
            require_meta(rt, plan)
    except ProxyError:
        return None  # the task plans it again and answers the error
    return Route(plan.targets[0].node, plan.targets[0].sql)


_LENGTH = struct.Struct("<I").pack


class PointStatement:
    """A prepared point read's route, planned once for its text, the session's schema and the router's
    generation (Router.forget): an execute only hashes its key to pick the node and writes the key into
    that node's text. The grant and the table's metadata are still checked on every execute, as
    quick_route does. An instance with no table: the statement is not a point read (the text path decides)."""

    __slots__ = ("template", "schema", "generation", "table", "packets", "texts")

    def __init__(self, router: Planner, template: str, schema: str | None) -> None:
        self.template = template   # the bound text with `%d` for the key (IntParams.template)
        self.schema = schema
        self.generation = router.generation
        self.table: Any = None
        self.packets: tuple[bytes, ...] = ()   # per node: the COM_QUERY payload with `%d` for the key
        self.texts: tuple[str, ...] = ()   # per node: the text with `?` for the key, prepared on the backend
        if "%%" in template or template.count("%d") != 1:
            return   # (a point read's text has no `%` and one parameter, its key)
        before, after = template.split("%d")
        if len(before) + len(after) + len(str(POINT_KEY_MAX - 1)) >= POINT_TEXT_MAX:
            return   # some keys would make it too long for point_read: the text path decides each
        hit = router.point_match(f"{before}1{after}", schema)
        if hit is None or hit[2:] != (len(before), len(before) + 1):
            return
        pt, at = hit[0], hit[1]
        self.table = pt
        tail = b"%d" + after.encode("utf-8", "surrogateescape")
        heads = [f"{before[:at]}{head}{before[at:]}" for head in pt.heads]
        self.packets = tuple(b"\x03" + h.replace("%", "%%").encode("utf-8", "surrogateescape") + tail for h in heads)
        self.texts = tuple(f"{h}?{after}" for h in heads)

    def valid(self, router: Planner, template: str, schema: str | None) -> bool:
        """Still planned for this text, schema and router generation."""
        return self.template is template and self.schema == schema and self.generation == router.generation

    def start(self, ctx: ExecContext, key: int, sink: Sink) -> bool | None:
        """Route.start for the execute binding key (its answer relayed to sink); None: the text path decides
        (a key or grant the quick route leaves to the planner, metadata not usable)."""
        pt = self.table
        if pt is None or not 0 <= key < POINT_KEY_MAX:
            return None
        try:
            i = pt.index(key, ctx.session.grants)
        except ProxyError:
            return None
        if i is None or (pt.configured and ctx.runtime.registry.unusable(*pt.table)):
            return None
        body = self.packets[i] % key
        return ctx.start_single(pt.nodes[i], _LENGTH(len(body)) + body, sink, True, True, self.template % key,
                                (self.texts[i], key))


def _join(ctx: ExecContext, join: object, explain: bool) -> Join:
    """A proxy join; for EXPLAIN, its two sides routed as they will be read."""
    if not explain:
        return Join(join)  # type: ignore[arg-type]
    from proxy.exec.join import _side_sql
    sides = []
    for side in join.sides:  # type: ignore[attr-defined]
        plan: Plan = ctx.runtime.router.route(_side_sql(side, None)[0], ctx.session.schema, ctx.session.grants)
        sides.append(plan)
    return Join(join, sides[0], sides[1])  # type: ignore[arg-type]


async def _syntax_verdict(ctx: ExecContext, sql: str) -> None:
    """A SELECT the proxy cannot plan may simply be wrong: let a backend's EXPLAIN say so (1064).

    EXPLAIN parses the whole statement without running it; only its syntax error is passed on,
    anything else leaves the proxy's own 1235 to explain what cannot be routed."""
    if first_keyword(sql) not in ("SELECT", "WITH", "("):
        return
    node = ctx.runtime.any_node(ctx.session.schema)
    try:
        conn = await ctx._get(node)
    except ProxyError:
        return
    try:
        sc = await conn.run(com_query("EXPLAIN " + sql), ctx.runtime.backends.timeout_s, collect=True)
    except ProxyError:
        return
    finally:
        ctx._done_with(node, conn)
    if sc.error is not None and sc.error.code == 1064:
        raise BackendError(sc.error.message, sc.error.code, sc.error.sqlstate)
