"""The plan primitives (Vitess's engine model): each runs itself on a session's connections and explains itself.

proxy/exec/planner.py builds one tree per statement from the router's Plan; the executor only runs it. A
primitive is a small dataclass with `async run(ctx, r, more, may_relay) -> bool` (True: the answer was
relayed to the client byte for byte) and `explain(out) -> str` (its rows in an EXPLAIN, DBLE style: one
BASE SQL row per node, then the steps done in the proxy, each naming what it reads; returns its own name).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, Sequence

from meta.errors import NotSupported, ProxyError

from proxy.wire import constants as C
from proxy.wire.messages import ColumnDef, ErrInfo, OkInfo, ResultSet
from proxy.wire.packets import com_query, read_lenenc_str
from proxy.plan.sqltok import tokenize
from proxy.exec.scatter_relay import relay_concat, streamable
from proxy.exec.xa import refuse_implicit_commit

if TYPE_CHECKING:  # pragma: no cover
    from proxy.backends.backend import Sink
    from proxy.exec.join import JoinPlan
    from proxy.plan.plan import Plan
    from proxy.wire.response import ResponseScanner
    from proxy.wire.reply import Reply
    from proxy.runtime import ExecContext

# Merges over more rows than this (ORDER BY, GROUP BY, DISTINCT…) run in a worker thread: the GIL hands
# the event loop a turn every few milliseconds, so one big merge cannot stall every other client.
MERGE_INLINE_ROWS = 5_000

EXPLAIN_COLUMNS = ("SHARDING_NODE", "TYPE", "SQL/REF")   # DBLE 3's EXPLAIN result


class Primitive(Protocol):
    """One executable step of a plan."""

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool: ...
    def explain(self, out: Explainer) -> str: ...


class Explainer:
    """Collects a plan's EXPLAIN rows: node rows keep the node's name while the plan is only node SQL;
    once the proxy does a step of its own, they are numbered per node (dn1_0, dn1_1) as DBLE numbers them."""

    def __init__(self) -> None:
        self._rows: list[tuple[Any, str, Any]] = []   # (name or ("node", node, i), type, sql or refs)
        self._nodes: dict[str, int] = {}
        self._steps: dict[str, int] = {}

    def base(self, node: str, sql: str) -> tuple[str, str, int]:
        """A statement a node runs; returns its (late-bound) name."""
        i = self._nodes.get(node, 0)
        self._nodes[node] = i + 1
        name = ("node", node, i)
        self._rows.append((name, "BASE SQL", sql))
        return name  # type: ignore[return-value]

    def step(self, kind: str, refs: Sequence[Any], note: str = "") -> str:
        """A step done in the proxy over what `refs` name."""
        n = self._steps.get(kind, 0) + 1
        self._steps[kind] = n
        name = f"{kind.lower()}_{n}"
        self._rows.append((name, kind, (tuple(refs), note)))
        return name

    def rows(self) -> list[list[object]]:
        numbered = bool(self._steps)

        def name(x: Any) -> str:
            if isinstance(x, tuple):
                return f"{x[1]}_{x[2]}" if numbered else x[1]
            return x
        out: list[list[object]] = []
        for n, kind, what in self._rows:
            if kind == "BASE SQL":
                out.append([name(n), kind, what])
            else:
                refs, note = what
                text = "; ".join(name(x) for x in refs)
                out.append([name(n), kind, f"{text} ({note})" if note else text])
        return out


def explain_result(prim: Primitive) -> ResultSet:
    """EXPLAIN's answer: the plan's rows as a three-column text result."""
    ex = Explainer()
    prim.explain(ex)
    cols = [ColumnDef(n, C.T_VAR_STRING, C.CHARSET_UTF8MB4_GENERAL_CI, 1024) for n in EXPLAIN_COLUMNS]
    return ResultSet(cols, [[str(v).encode() for v in row] for row in ex.rows()])


def _bases(out: Explainer, plan: Plan) -> list[str]:
    return [out.base(t.node, t.sql) for t in plan.targets]


def explain_merge(out: Explainer, refs: Sequence[Any], merge: Any) -> str:
    """The steps a MergePlan does in the proxy over node rows, in the order it does them."""
    top = out.step("MERGE", refs)
    if merge is None:
        return top
    if merge.grouped or merge.aggregates:
        top = out.step("AGGREGATE", [top], "with rollup" if merge.rollup else "")
    if merge.having:
        top = out.step("HAVING_FILTER", [top])
    if merge.distinct:
        top = out.step("DISTINCT", [top])
    if merge.order_by:
        top = out.step("ORDER", [top])
    if merge.offset or merge.limit is not None:
        top = out.step("LIMIT", [top], f"offset {merge.offset}, limit {merge.limit}")
    return top


# -- one node --------------------------------------------------------------------------------------

@dataclass(slots=True)
class Route:
    """A statement for one node, relayed byte for byte when the client may take it so. It runs on the
    session's task (run), or straight from the client connection's data callback when a connection can take
    it at once (start: the point select's way, no task switch, no future). Not frozen: one is made per
    point read, and a frozen dataclass costs twice as much to build."""

    node: str
    sql: str
    any_db: bool = False   # the SQL names the node's database: a connection of its dbGroup on another will do
    shared: bool = False   # a point read: it may go on a pipelined shared connection (proxy.backends.pool)

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        return await ctx.run_single(self.node, com_query(self.sql), r, more, may_relay)

    def start(self, ctx: ExecContext, packet: bytes | None, sink: Sink | None, shown: str) -> bool:
        """Send it now if a connection can take it with no round trip first; the answer is relayed to sink
        (the client when None) and the session goes on when it has been. packet: the client's own framed
        command, when it may go on unchanged; shown: the statement as SHOW PROCESSLIST shows it. False:
        nothing was sent, run() on the session's task serves it."""
        return ctx.start_single(self.node, packet or com_query(self.sql), sink, self.any_db, self.shared, shown)

    def explain(self, out: Explainer) -> str:
        return out.base(self.node, self.sql)  # type: ignore[return-value]


@dataclass(frozen=True)
class NodePlan:
    """MariaDB's own plan of a statement on one node (EXPLAIN EXTENDED / FORMAT=JSON, ANALYZE): its rows
    name the node's database (`ref` db1.t.id); they name the statement's logical schema instead."""

    node: str
    sql: str
    schema: str

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        db = re.escape(ctx.runtime.backends.database_of(self.node).encode())
        named = re.compile(rb"(?<![\w$`])(`?)" + db + rb"\1(?=\.)")
        logical = self.schema.encode()

        def rename(rows: list) -> None:
            for row in rows:
                for i, cell in enumerate(row):
                    if cell is not None:
                        row[i] = named.sub(lambda m: m.group(1) + logical + m.group(1), bytes(cell))

        return await ctx.run_single(self.node, com_query(self.sql), r, more, False, rewrite=rename)

    def explain(self, out: Explainer) -> str:
        return out.base(self.node, self.sql)  # type: ignore[return-value]


# -- several nodes ---------------------------------------------------------------------------------

SELECT_LIMIT_OFF = "SET SESSION sql_select_limit = DEFAULT"


@dataclass(frozen=True)
class NodesUnlimited:
    """A read answered from several nodes while the session has sql_select_limit: the nodes read with it
    off, since their rows feed a merge, a join or copies (the limit is in the statement itself)."""

    inner: Primitive

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        variables = ctx.session.vars
        kept = variables["sql_select_limit"]
        variables["sql_select_limit"] = SELECT_LIMIT_OFF
        try:
            return await self.inner.run(ctx, r, more, may_relay)
        finally:
            variables["sql_select_limit"] = kept

    def explain(self, out: Explainer) -> str:
        return self.inner.explain(out)


@dataclass(frozen=True)
class Scatter:
    """A read on several nodes: streamed when the merge is concatenation, else merged in the proxy
    (ordered, aggregated, distinct, limited: plan.merge); a global table's copies answer once."""

    plan: Plan
    copies: bool = False   # every node holds the same rows (global tables): one node's warnings stand for all

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        if may_relay and streamable(self.plan):
            return await relay_concat(ctx, self.plan)  # rows of every node streamed, never decoded
        scanners = await ctx._run_on([(t.node, t.sql) for t in self.plan.targets], copies=self.copies)
        await _answer(ctx, self.plan, scanners, self.copies, r, more)
        return False

    def explain(self, out: Explainer) -> str:
        refs = _bases(out, self.plan)
        if self.plan.merge is None:
            return refs[0] if len(refs) == 1 else out.step("MERGE", refs, "the first node answers")
        return explain_merge(out, refs, self.plan.merge)


@dataclass(frozen=True)
class Maintenance:
    """ANALYZE / CHECK / CHECKSUM / OPTIMIZE / REPAIR TABLE: every node of the tables runs it, and the rows,
    which name each node's `database.table`, are answered under the logical schema, one table's rows
    combined over its nodes (never the first node's verdict for the whole table)."""

    plan: Plan

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        scanners = await ctx._run_on([(t.node, t.sql) for t in self.plan.targets])
        failed = next((sc.error for sc in scanners if sc.error is not None), None)
        if failed is not None:
            r.err_info(failed)
        elif all(sc.results and sc.results[0].columns for sc in scanners):
            r.resultset(maintenance_rows(ctx, self.plan, scanners), ctx.session.status(), more)
        else:
            ctx.add_results(scanners[0], r, more)
        return False

    def explain(self, out: Explainer) -> str:
        return out.step("MERGE", _bases(out, self.plan), "each table's rows under its logical name")


_CHECKSUM_MOD = 1 << 32   # MariaDB's table checksum is the sum of its rows' checksums, in 32 bits


def maintenance_rows(ctx: ExecContext, plan: Plan, scanners: list[ResponseScanner]) -> ResultSet:
    """The nodes' rows of a maintenance statement as one server answers it: `db.table` named
    `schema.table` (in the messages too); per table, CHECKSUM is summed over a sharding table's parts (one
    copy of any other), and the other statements' rows are listed once each, an `OK` status left out
    where some node reported another."""
    config, backends = ctx.runtime.config, ctx.runtime.backends
    columns = scanners[0].results[0].columns
    schema_of = {t: s for s, t in plan.tables}
    checksum = [c.name.lower() for c in columns] == ["table", "checksum"]
    per_table: dict[bytes, list[tuple[int, list[bytes | None]]]] = {}
    for i, (target, sc) in enumerate(zip(plan.targets, scanners)):
        db = backends.database_of(target.node)
        for row in sc.results[0].rows:
            full = bytes(row[0] or b"")
            d, _, t = full.decode("utf-8", "replace").partition(".")
            schema = schema_of.get(t.lower())
            if d == db and schema is not None:
                logical = f"{schema}.{t}".encode()
                row = [logical] + [v.replace(full, logical) if v is not None else None for v in row[1:]]
            per_table.setdefault(row[0] or b"", []).append((i, list(row)))
    out: list[list[bytes | None]] = []
    for name, rows in per_table.items():
        schema, _, t = name.decode("utf-8", "replace").partition(".")
        cfg = config.table(schema, t) if schema in config.schemas else None
        if checksum:
            if cfg is None or cfg.type != "sharding":
                out.append(rows[0][1])
            else:
                values = [r[1] for _, r in rows]
                total = None if None in values else sum(int(v) for v in values) % _CHECKSUM_MOD  # type: ignore
                out.append([name, None if total is None else str(total).encode()])
            continue
        distinct = list(dict.fromkeys(tuple(r) for _, r in rows))
        verdicts = {r[3] for r in distinct if (r[2] or b"").lower() == b"status"}
        out += [list(r) for r in distinct if not (len(verdicts) > 1 and (r[2] or b"").lower() == b"status"
                                                  and r[3] == b"OK")]
    return ResultSet(columns, out)


@dataclass(frozen=True)
class MultiWrite:
    """A write on several nodes, all of them or none (the executor's implicit transaction, XA or
    savepoint); a global table's copies (`broadcast`) count once. Multi-row INSERTs were split per node."""

    plan: Plan
    broadcast: bool

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        targets = [(t.node, t.sql) for t in self.plan.targets]
        scanners = await ctx._write_all_or_nothing(targets, copies=self.broadcast)
        await _answer(ctx, self.plan, scanners, self.broadcast, r, more)
        return False

    def explain(self, out: Explainer) -> str:
        refs = _bases(out, self.plan)
        return out.step("BROADCAST_WRITE" if self.broadcast else "MULTI_WRITE", refs, "all nodes or none")


async def _answer(ctx: ExecContext, plan: Plan, scanners: list[ResponseScanner], copies: bool, r: Reply,
                  more: bool) -> None:
    """One answer from several nodes' answers: the first error, the merged rows, or the summed OKs."""
    failed = [(i, sc.error) for i, sc in enumerate(scanners) if sc.error is not None]
    if plan.row_groups and len(ctx.node_warnings) == len(plan.row_groups) == len(scanners):
        ctx.session.warnings = split_insert_warnings(ctx.node_warnings, plan.row_groups)
    if failed:
        r.err_info(_first_failed_row(failed, plan.row_groups) if plan.row_groups else failed[0][1])
        return
    status = ctx.session.status()
    if plan.row_order is not None:
        r.resultset(_returned_in_order(plan.row_order, scanners), status, more)
        return
    if plan.returning_copies:
        r.resultset(_returned_by_copies(plan, scanners), status, more)
        return
    if plan.merge is not None:
        from proxy.exec.merge import merge_results
        sets = [sc.results[0] for sc in scanners if sc.results and sc.results[0].columns]
        if len(sets) != len(scanners):
            raise NotSupported("a scattered statement returned results of different shapes")
        merge = plan.merge
        warnings = min(len(ctx.session.warnings), 0xFFFF)  # every node's, as SHOW WARNINGS lists them

        def merge_and_encode() -> None:
            r.resultset(merge_results(merge, sets), status, more, warnings)

        if sum(len(s.rows) for s in sets) > MERGE_INLINE_ROWS:
            # a big sort or grouping off the event loop: other sessions keep being served meanwhile
            await asyncio.to_thread(merge_and_encode)
        else:
            merge_and_encode()
        return
    oks = [sc.ok for sc in scanners if sc.ok is not None]
    if oks and plan.is_write and copies:
        oks = oks[:1]  # every node holds the same copy: the client wrote one logical table
    affected = sum(ok.affected_rows for ok in oks)
    warnings = sum(ok.warnings for ok in oks)
    last_id = max((sc.ok.last_insert_id for sc in scanners if sc.ok is not None), default=0)
    if ctx.insert_id and affected:
        last_id = ctx.insert_id
    if last_id:
        ctx.session.last_insert_id = last_id
    if plan.kind == "select" or any(sc.results and sc.results[0].columns for sc in scanners):
        # a read that needs no merge plan (e.g. a global table broadcast): first node answers
        first = scanners[0].results[0]
        r.resultset(first, status, more, scanners[0].warnings)
        return
    found_rows = bool(ctx.session.format_flags & C.FOUND_ROWS)
    r.ok(status, affected, last_id, warnings, info=_write_info(plan, scanners, oks, found_rows), more=more)


def _write_info(plan: Plan, scanners: list[ResponseScanner], oks: list[OkInfo], found_rows: bool) -> bytes:
    """The info of the OK as one MariaDB words it for the whole statement: a multi-row INSERT's or
    REPLACE's 'Records: .. Duplicates: .. Warnings: ..', an UPDATE's 'Rows matched: .. Changed: ..
    Warnings: ..', summed over the nodes' (b'': none, or one pydble cannot count). found_rows: the
    client's CLIENT_FOUND_ROWS, under which an unchanged duplicate counts as an affected row."""
    if len(oks) == 1:
        return read_lenenc_str(oks[0].info, 0)[0] or b"" if oks[0].info else b""
    found = [ok.counts() for ok in oks]
    warnings = sum(ok.warnings for ok in oks)
    if plan.row_groups is None or len(plan.row_groups) != len(scanners) or len(oks) != len(scanners):
        if not all(c is not None and c[0] == b"Rows matched" for c in found):
            return b""
        return b"Rows matched: %d  Changed: %d  Warnings: %d" % (
            sum(c[1] for c in found), sum(c[2] for c in found), warnings)  # type: ignore[index]
    if sum(len(g) for g in plan.row_groups) < 2:
        return b""   # MariaDB words no info for one row
    records = duplicates = 0
    words: set[str] | None = None
    for m, ok, group, target in zip(found, oks, plan.row_groups, plan.targets):
        if m is not None and m[0] == b"Records":
            records, duplicates = records + m[1], duplicates + m[2]
        elif len(group) == 1:   # a node's one row: told by the rows it affected
            if words is None:   # its statement holds that one row: never a token per value of a big INSERT
                words = {t[1].upper() for t in tokenize(target.sql) if t[0] == "w"}
            ignore = "IGNORE" in words   # MariaDB counts then the rows not written (records - copied), else
            unsure = found_rows and "DUPLICATE" in words   # those deleted or updated (deleted + updated)
            records += 1
            if unsure and ok.affected_rows == 1:
                return b""   # inserted, or a duplicate left unchanged (counted as found): unknown
            if ignore:
                duplicates += ok.affected_rows == 0   # skipped, or a duplicate left unchanged
            elif ok.affected_rows > 1:   # ODKU changed a duplicate (2), REPLACE deleted n - 1
                duplicates += ok.affected_rows - 1
        else:
            return b""
    return b"Records: %d  Duplicates: %d  Warnings: %d" % (records, duplicates, warnings)


def _returned_in_order(order: tuple[tuple[int, ...], ...], scanners: list[ResponseScanner]) -> ResultSet:
    """INSERT ... RETURNING over several nodes: each node's rows put back at their VALUES positions,
    so the client reads them in the order it sent the rows, as from one MariaDB."""
    sets = [sc.results[0] if sc.results and sc.results[0].columns else None for sc in scanners]
    rows: list[list[bytes | None] | None] = [None] * sum(len(idx) for idx in order)
    for idx, rs in zip(order, sets):
        if rs is None or len(rs.rows) != len(idx):
            raise ProxyError("INSERT ... RETURNING: a shardingNode did not return one row per inserted row",
                             1105, "HY000")
        for i, row in zip(idx, rs.rows):
            rows[i] = row
    return ResultSet(sets[0].columns, rows)  # type: ignore[union-attr,arg-type]


def _returned_by_copies(plan: Plan, scanners: list[ResponseScanner]) -> ResultSet:
    """... RETURNING on a global table: the copies' rows, when every node returned the same ones."""
    sets = [sc.results[0] if sc.results and sc.results[0].columns else None for sc in scanners]
    first = sets[0]
    if first is None or any(rs is None or rs.rows != first.rows for rs in sets[1:]):
        nodes = ", ".join(t.node for t in plan.targets)
        raise ProxyError(f"{plan.kind.upper()} ... RETURNING: the copies of global table "
                         f"{'.'.join(plan.tables[0])} on {nodes} returned different rows (a server default such "
                         f"as NOW() differs per node); the statement ran on every node", 1105, "HY000")
    return first


_AT_ROW = re.compile(r" at row ([0-9]+)$")


def split_insert_warnings(nodes: list[list[tuple[str, int, str]]], groups: tuple[Sequence[int], ...]
                          ) -> list[tuple[str, int, str]]:
    """The warnings of an INSERT split over nodes as one MariaDB lists them: '... at row N' counted over the
    whole statement, in the order of its rows, none after the row whose error ended it. A warning naming
    no row (a duplicate under IGNORE) keeps its node's place: the order is then the nodes' one after the
    other (exact when one node has warnings)."""
    rows: list[tuple[int, int, int, tuple[str, int, str]]] = []   # (row, node, place, warning)
    ordered = True
    for i, warnings in enumerate(nodes):
        for k, (level, code, msg) in enumerate(warnings):
            m = _AT_ROW.search(msg)
            if m is None or not 0 < int(m.group(1)) <= len(groups[i]):
                ordered = False
                rows.append((-1, i, k, (level, code, msg)))
                continue
            row = groups[i][int(m.group(1)) - 1] + 1
            rows.append((row, i, k, (level, code, msg[:m.start()] + f" at row {row}")))
    if not ordered:
        return [w for _, _, _, w in rows]
    rows.sort(key=lambda x: x[0])   # stable: one row's warnings are its node's, in its order
    out: list[tuple[str, int, str]] = []
    for _, _, _, w in rows:
        out.append(w)
        if w[0] == "Error":
            break   # MariaDB stops at the first failing row
    return out


def _first_failed_row(failed: list[tuple[int, ErrInfo]], groups: tuple[Sequence[int], ...]) -> ErrInfo:
    """An INSERT split over nodes failed: the error of the row first in the statement, its row counted
    over the whole statement, as one MariaDB names it ('... at row N'). When a node's error names no row
    (a duplicate key), which row came first is unknown: the first node's error, its row mapped."""
    mapped: list[tuple[int, ErrInfo]] = []
    for i, e in failed:
        m = _AT_ROW.search(e.message)
        if m is None or not 0 < int(m.group(1)) <= len(groups[i]):
            mapped.append((-1, e))
            continue
        row = groups[i][int(m.group(1)) - 1] + 1
        mapped.append((row, ErrInfo(e.code, e.sqlstate, e.message[:m.start()] + f" at row {row}")))
    if any(row < 0 for row, _ in mapped):
        return mapped[0][1]
    return min(mapped, key=lambda x: x[0])[1]


# -- combined in the proxy -------------------------------------------------------------------------

def leaf_primitive(plan: Plan) -> Primitive:
    """The primitive that reads one routed SELECT (a set operation's branch, a join's side)."""
    if len(plan.targets) == 1:
        return Route(plan.targets[0].node, plan.targets[0].sql)
    return Scatter(plan)


@dataclass(frozen=True)
class Concatenate:
    """UNION / INTERSECT / EXCEPT whose branches run on different nodes: each branch read, then combined
    (and ordered, limited) in the proxy as MariaDB combines them (proxy.exec.setops)."""

    plan: Plan

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        from proxy.exec.setops import run_set_operation
        await run_set_operation(ctx, self.plan, r, more)
        return False

    def explain(self, out: Explainer) -> str:
        from proxy.plan.setplan import Ordered, SetNode
        sp = self.plan.setop
        names = {id(lf): leaf_primitive(lf.plan).explain(out) for lf in sp.leaves}
        leaves = iter(sp.leaves)

        def walk(e: Any) -> str:
            if isinstance(e, SetNode):
                a, b = walk(e.left), walk(e.right)
                return out.step(f"{e.op.upper().replace(' ', '_')}{'_ALL' if e.all else ''}", [a, b])
            if isinstance(e, Ordered):
                top = walk(e.body)
                if e.order:
                    top = out.step("ORDER", [top])
                if e.offset or e.limit is not None:
                    top = out.step("LIMIT", [top], f"offset {e.offset}, limit {e.limit}")
                return top
            return names[id(next(leaves))]
        return walk(sp.expr)


@dataclass(frozen=True)
class Join:
    """Two tables on different nodes joined in the proxy: the outer side read, the inner side looked up
    by batches of the join key's values (Vitess's join primitive), rows paired here (proxy.exec.join)."""

    join: JoinPlan
    outer: Plan | None = None   # the sides as routed, for EXPLAIN only
    inner: Plan | None = None

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        from proxy.exec.join import run_join
        ctx.session.warnings = []
        ctx.session.route = "join"
        await run_join(ctx, self.join, r, more)
        return False

    def explain(self, out: Explainer) -> str:
        refs = []
        for plan in (self.outer, self.inner):
            if plan is not None:
                refs.append(leaf_primitive(plan).explain(out) if len(plan.targets) == 1
                            else explain_merge(out, _bases(out, plan), None))
        kind = "LEFT" if self.join.left else "INNER"
        top = out.step("JOIN", refs, f"{kind}; the inner side is read by IN lists of the outer side's join keys")
        if self.join.order:
            top = out.step("ORDER", [top])
        if self.join.offset or self.join.limit is not None:
            top = out.step("LIMIT", [top], f"offset {self.join.offset}, limit {self.join.limit}")
        return top


@dataclass(frozen=True)
class OverCopies:
    """A read no per-node plan answers exactly: one MariaDB answers it over temporary copies of the rows
    it reads (proxy.exec.materialize)."""

    sql: str

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        from proxy.exec.materialize import Materialize
        m = Materialize(ctx, self.sql)
        ctx.session.warnings = []
        ctx.session.route = "materialize"
        await m.run(r, more)
        return False

    def explain(self, out: Explainer) -> str:
        return out.step("OVER_COPIES", [], "the tables' rows copied into temporary tables on one node, "
                                           "the statement run there")


@dataclass(frozen=True)
class OrCopies:
    """`first`, or when it refuses before sending anything (its merge, join or set operation cannot be
    exact), the same read over copies."""

    first: Primitive
    sql: str

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        try:
            return await self.first.run(ctx, r, more, may_relay)
        except NotSupported:   # raised before anything was sent to the client
            return await OverCopies(self.sql).run(ctx, r, more, may_relay)

    def explain(self, out: Explainer) -> str:
        return self.first.explain(out)


@dataclass(frozen=True)
class TempStatement:
    """CREATE / DROP TEMPORARY TABLE: on the session's own connection that keeps its temporary tables
    (proxy.exec.temp_tables)."""

    sql: str

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        ctx.session.route = "single"
        await ctx.temp.statement(self.sql, r, more)
        return False

    def explain(self, out: Explainer) -> str:
        return out.step("TEMPORARY_TABLE", [], "on the session's own connection")


@dataclass(frozen=True)
class TempDdl:
    """A DDL naming one of the session's temporary tables: run there, never a cluster DDL."""

    plan: Plan
    temps: tuple[tuple[str, str], ...]
    sql: str

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        await ctx.temp.ddl(self.plan, self.temps, self.sql, r, more)
        return False

    def explain(self, out: Explainer) -> str:
        return out.step("TEMPORARY_TABLE", [], "DDL on the session's own connection")


# -- statements with a role of their own -----------------------------------------------------------

@dataclass(frozen=True)
class Ddl:
    """A DDL: commits the open transaction (as MySQL does), then runs under the table's DDL lock, here and
    in the cluster, on every node of the table (proxy.ddl.ddl)."""

    plan: Plan
    sql: str

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        refuse_implicit_commit(ctx.xa, "a DDL statement")
        ctx.session.route = "ddl"
        await ctx.commit_all()
        ctx.session.explicit_txn = False
        await ctx.runtime.run_ddl(ctx.session, self.plan, self.sql, r, more)
        return False

    def explain(self, out: Explainer) -> str:
        refs = _bases(out, self.plan)
        return refs[0] if len(refs) == 1 else out.step("DDL", refs, "under the table's cluster DDL lock")


@dataclass(frozen=True)
class SequenceInsert:
    """An INSERT into a table whose increment column a global sequence fills: the values are drawn when
    it runs, then the filled statement is planned and run; its OK names the first value as LAST_INSERT_ID."""

    sql: str
    plan_filled: Callable[[str], Awaitable[Primitive]]

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        filled = await ctx.runtime.sequences.fill(ctx.session, self.sql)
        if filled is None:
            return await (await self.plan_filled(self.sql)).run(ctx, r, more, may_relay)
        ctx.insert_id = filled.first  # the answer is re-encoded: its OK carries the first value filled in
        try:
            return await (await self.plan_filled(filled.sql)).run(ctx, r, more, False)
        finally:
            ctx.insert_id = 0

    def explain(self, out: Explainer) -> str:
        return out.step("SEQUENCE", [], "the increment column is filled from the global sequence when the "
                                        "statement runs, then the INSERT is routed by its values")


@dataclass(frozen=True)
class UserLockCall:
    """GET_LOCK / RELEASE_LOCK and kin: run on the one connection that holds the session's user locks."""

    plan: Plan
    sql: str

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        await ctx.user_locks.run(self.plan, self.sql, com_query(self.sql), r, more)
        return False

    def explain(self, out: Explainer) -> str:
        return out.base(self.plan.targets[0].node, self.sql)  # type: ignore[return-value]


@dataclass(frozen=True)
class SelectInsertId:
    """SELECT LAST_INSERT_ID(expr): a backend computes the value, the session keeps it as MySQL does."""

    plan: Plan
    sql: str

    async def run(self, ctx: ExecContext, r: Reply, more: bool, may_relay: bool) -> bool:
        await ctx._select_insert_id(self.plan, self.sql, r, more)
        return False

    def explain(self, out: Explainer) -> str:
        return out.base(self.plan.targets[0].node, self.plan.targets[0].sql)  # type: ignore[return-value]
