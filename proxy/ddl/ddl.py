"""DDL through the client port: lock the table, run on all its nodes, refresh metadata, then answer.

Right after a node answers the DDL, the same connection reads SHOW CREATE TABLE of the DDL's tables
there; when every node answered cleanly, the refresh is built from those texts (no metadata load).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable, Mapping

import structlog

from meta.errors import BackendUnavailable, DdlInProgress, ProxyError, RefreshIncomplete, TableExists
from meta.history import DdlHistoryEntry
from meta.later import Later
from meta.loader import LoadResult, load_tables, node_tables, result_from_texts
from meta.locks import RELOAD_OWNER, MetaLocks
from zk.originator import ClusterDdl
from zk.records import MARKER_PREFIX

from proxy.ddl.ddl_marker import ddl_running
from proxy.ddl.ddl_repair import refuse_on_differing
from proxy.wire import constants as C
from proxy.wire.messages import ErrInfo, OkInfo
from proxy.wire.packets import frame
from proxy.plan.sqltok import tokenize

if TYPE_CHECKING:
    from proxy.backends.backend import BackendConnection
    from proxy.backends.pool import Backends
    from proxy.wire.response import ResponseScanner
    from proxy.wire.reply import Reply
    from proxy.plan.plan import Plan
    from proxy.runtime import Runtime
    from proxy.runtime import SessionPort

log = structlog.get_logger("pydble.ddl")

RELOAD_RETRY_FIRST_S = 1.0    # a DDL's own refresh that missed a node: first retry after this long,
RELOAD_RETRY_MAX_S = 30.0     # doubling up to this, until every node answers (or pydble stops)
RELOAD_WAIT_S = 10.0          # how long a DDL waits for such a re-read (a dead node's connect timeout) to end
ER_TABLE_EXISTS = 1050
ER_BAD_TABLE_ERROR = 1051
ER_NO_SUCH_TABLE = 1146
Texts = dict[str, dict[str, str | None]]   # shardingNode -> lower table name -> CREATE text (None: absent)
# session variables a pooled connection may carry that cannot change how SHOW CREATE TABLE prints a
# table (sql_mode, old_mode, character sets, time_zone and the like can: the refresh then loads)
_NEUTRAL_VARS = frozenset({"isolation", "tx_read_only", "wait_timeout", "interactive_timeout", "net_read_timeout",
                           "net_write_timeout", "lock_wait_timeout", "innodb_lock_wait_timeout",
                           "sql_select_limit", "max_statement_time", "auto_increment_increment",
                           "auto_increment_offset", "foreign_key_checks", "unique_checks"})
# ALTER TABLE t RENAME [TO|AS] [s.]u (not RENAME COLUMN/INDEX/KEY): u must be refreshed (and locked) too
_RENAME_TO = re.compile(r"\bRENAME\s+(?:TO\s+|AS\s+)?(?!(?:COLUMN|INDEX|KEY)\b)"
                        r"((?:`(?:[^`]|``)+`|[\w$]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[\w$]+))?)", re.I)


@dataclass
class NodeResult:
    """One node's answer to a DDL."""

    node: str
    error: ErrInfo | None
    texts: dict[str, str | None] | None = None   # SHOW CREATE right after it; None: not read cleanly
    ok: OkInfo | None = None                      # its OK, and the warnings it left (logical names)
    warnings: list[tuple[str, int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class DdlAnswer:
    """The OK of a DDL that succeeded everywhere, as one MariaDB answers it: the rows ALTER copied, its
    'Records: ..  Duplicates: ..  Warnings: ..', and the notes (DROP TABLE IF EXISTS of a missing table)."""

    affected_rows: int
    info: bytes
    warnings: list[tuple[str, int, str]]


def ddl_answer(results: list[NodeResult], copies: bool) -> DdlAnswer | None:
    """One answer from the nodes' OKs (copies: each node holds the same table, one stands for all); None
    when the nodes left different warnings (pydble cannot tell which one MariaDB would)."""
    done = [x for x in results if x.error is None and x.ok is not None]
    if not done or any(x.warnings != done[0].warnings for x in done):
        return None
    oks = [x.ok for x in done[:1] if x.ok is not None] if copies else [x.ok for x in done if x.ok is not None]
    counts = [ok.counts() for ok in oks]
    info = b""
    if all(c is not None and c[0] == b"Records" for c in counts):
        info = b"Records: %d  Duplicates: %d  Warnings: %d" % (
            sum(c[1] for c in counts), sum(c[2] for c in counts), len(done[0].warnings))  # type: ignore[index]
    return DdlAnswer(sum(ok.affected_rows for ok in oks), info, done[0].warnings)


@dataclass
class DdlTrace:
    """When each phase of one DDL ended, for the history (milliseconds per phase)."""

    user: str
    started_at: float = field(default_factory=time.time)
    t0: float = field(default_factory=time.monotonic)
    last: float = 0.0
    phases_ms: dict[str, float] = field(default_factory=dict)
    keys: list[tuple[str, str]] = field(default_factory=list)   # the tables locked and refreshed
    laggards: list[str] = field(default_factory=list)           # instances that did not ack in time
    executed: tuple[float, list[str]] | None = None   # seconds until the nodes answered, nodes that failed
    before: dict[str, str] = field(default_factory=dict)   # "schema.table" -> memory's CREATE text at lock time
    repair_of: int = 0                                     # the history id this DDL repairs (ddl_repair.py)
    repairing: bool = False                                # a repair (its id may be 0: ZooKeeper counts from 0)
    answer: DdlAnswer | None = None                        # the client's OK, as one MariaDB gives it

    def mark(self, phase: str) -> None:
        """A phase just ended."""
        now = time.monotonic()
        self.phases_ms[phase] = round((now - (self.last or self.t0)) * 1000, 3)
        self.last = now

    def details(self, plan: Plan, meta_version: int) -> dict:
        """What the history keeps besides the statement."""
        phases = dict(self.phases_ms)
        phases["total"] = round((time.monotonic() - self.t0) * 1000, 3)
        return {"user": self.user, "nodes": [t.node for t in plan.targets], "phases_ms": phases,
                "meta_version": meta_version, "started_at": self.started_at}


class NodeWork:
    """One DDL's connections to its nodes (one per target): each answered a ping before anything ran,
    each is stopped with KILL QUERY where pydble gives up, all are given back once the DDL has ended."""

    def __init__(self, backends: Backends, started: float) -> None:
        self.backends = backends
        self.started = started
        self.nodes: list[str] = []
        self.conns: list[BackendConnection] = []
        self.tasks: list[asyncio.Task] = []
        self.marker = f"{MARKER_PREFIX}{uuid.uuid4().hex}"   # in the DDL text: its connections found from outside
        self.stopped = ""                                 # why pydble gave up on it ("": it has not)
        self.giving_up: asyncio.Task | None = None
        self.timer: asyncio.TimerHandle | None = None

    async def reach(self, nodes: list[str]) -> None:
        """A connection to every node; refused, with nothing run anywhere, naming a node that does not
        answer (DBLE checks every node before a DDL too: a DDL run on some nodes only splits the table)."""
        outs = await asyncio.gather(*(self._reach_one(n) for n in nodes), return_exceptions=True)
        for node, out in zip(nodes, outs):
            if not isinstance(out, BaseException):
                self.nodes.append(node)
                self.conns.append(out)
        for node, out in zip(nodes, outs):
            if isinstance(out, BaseException):
                self.release()
                why = out.message if isinstance(out, ProxyError) else str(out) or out.__class__.__name__
                raise ProxyError(f"DDL refused: shardingNode[{node}] is unreachable ({why}); a DDL runs only "
                                 f"when every shardingNode of its table answers", 1105, "HY000")

    async def _reach_one(self, node: str) -> BackendConnection:
        """A pooled connection that answers COM_PING (an idle one may be stale: then one more try)."""
        for attempt in (1, 2):
            conn = await self.backends.acquire(node, 0)
            try:
                sc = await conn.run(frame(0, bytes((C.COM_PING,))), self.backends.timeout_s)
            except ProxyError:
                self.backends.release(node, conn)   # closed by run(): the pool drops it
                if attempt == 2:
                    raise
                continue
            if sc.error is None:
                return conn
            self.backends.release(node, conn)
            raise ProxyError(sc.error.message, sc.error.code, sc.error.sqlstate)
        raise AssertionError("unreachable")

    async def run(self, coros: Iterable[Awaitable[NodeResult]]) -> list[NodeResult | BaseException]:
        """The DDL on every node, each as a task give_up can wait for, watched for silent nodes."""
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(c) for c in coros]   # type: ignore[arg-type]
        watch = loop.create_task(self._watch())
        try:
            return await asyncio.gather(*self.tasks, return_exceptions=True)
        finally:
            watch.cancel()

    async def _watch(self) -> None:
        """A DDL has no time limit, but a node that stops answering altogether must not hold it (and
        its table) forever: every backend_timeout_s, another connection asks each node still running
        it whether the DDL's connection is still there; where it cannot be asked, or is gone, that
        node's part fails (its connection is dropped) and the refresh reads what the nodes have."""
        while True:
            await asyncio.sleep(self.backends.timeout_s)
            busy = [(n, c, t) for n, c, t in zip(self.nodes, self.conns, self.tasks) if not t.done()]
            outs = await asyncio.gather(*(self._alive(n, c) for n, c, _ in busy), return_exceptions=True)
            for (node, conn, task), out in zip(busy, outs):
                if out is True or task.done():
                    continue
                why = out.message if isinstance(out, ProxyError) else "its connection is gone there"
                log.warning("a node running a DDL stopped answering; its part fails", node=node, reason=why)
                conn.close()

    async def _alive(self, node: str, conn: BackendConnection) -> bool:
        """Is the DDL's connection still in the node's processlist (asked on another connection)?"""
        sc = await self._aside(node, f"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = "
                                     f"{int(conn.thread_id)}")
        return bool(sc.results) and int(sc.results[0].rows[0][0] or 0) > 0

    def give_up(self, why: str) -> None:
        """Stop the DDL on every node still running it; its own path then sees it end on each, reloads
        the table from the backends and only then releases the locks. Idempotent."""
        if self.giving_up is None:
            self.stopped = why
            self.giving_up = asyncio.get_running_loop().create_task(self._stop(why))

    async def _stop(self, why: str) -> None:
        busy = [(n, c, t) for n, c, t in zip(self.nodes, self.conns, self.tasks) if not t.done()]
        log.warning("giving up on a DDL: stopping it on its nodes", reason=why, marker=self.marker,
                    nodes=[n for n, _, _ in busy])
        outs = await asyncio.gather(*(self._kill(n, c) for n, c, _ in busy), return_exceptions=True)
        for (node, _, _), out in zip(busy, outs):
            if isinstance(out, BaseException):
                log.warning("KILL QUERY failed", node=node, error=str(out))
        pending = [t for _, _, t in busy if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=self.backends.timeout_s)
        for node, conn, task in busy:
            if not task.done():   # the node did not end it: drop the connection, the reload tells the truth
                log.warning("DDL still running after KILL QUERY; connection dropped", node=node)
                conn.close()

    async def _kill(self, node: str, conn: BackendConnection) -> None:
        """KILL QUERY on the DDL's connection, sent from another connection to the same node."""
        await self._aside(node, f"KILL QUERY {int(conn.thread_id)}")

    async def _aside(self, node: str, sql: str) -> ResponseScanner:
        """Run SQL on another connection to a node than the DDL's own (bounded by backend_timeout_s)."""
        other = await self.backends.acquire(node, 0)
        try:
            return await other.query(sql, self.backends.timeout_s)
        finally:
            self.backends.release(node, other)

    def release(self) -> None:
        """Give the connections back (closed after a give-up: a pending kill must not hit a later query)."""
        if self.timer is not None:
            self.timer.cancel()
        for node, conn in zip(self.nodes, self.conns):
            if self.stopped:
                conn.close()
            self.backends.release(node, conn)
        self.nodes, self.conns = [], []


class DdlRunner:
    """Serializes DDL per table on this instance and keeps metadata in step with the backends."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.locks = MetaLocks(runtime.config.server.instance)
        self.tasks: set[asyncio.Task] = set()
        self.active: dict[str, NodeWork] = {}   # owner -> the DDL's backend connections while it runs
        self.later = Later()   # each DDL's info line, written a moment after its answer (flushed at stop)
        self.reloads: dict[tuple[str, str], None] = {}   # tables whose refresh after a DDL here missed a node
        self._reload_task: asyncio.Task | None = None    # re-reads them (backing off) until complete

    async def run(self, session: SessionPort, plan: Plan, sql: str, r: Reply, more: bool) -> None:
        """Run a DDL for a session; it finishes (and unlocks) even if the client leaves meanwhile."""
        owner = f"session:{session.conn_id}"
        await self._take_locks(plan, sql, owner)
        trace = DdlTrace(session.user, before=self._structures(plan, sql))
        trace.mark("lock")
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._locked(plan, sql, owner, session.schema, trace))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        status = session.status
        try:
            err, warning = await asyncio.shield(task)
        except asyncio.CancelledError:
            self._client_gone(owner)
            raise
        finally:
            # history and metrics once the answer is written (the session writes it before its next
            # loop turn), or once the DDL ends if the client has gone
            task.add_done_callback(lambda t: loop.call_soon(self._remember, plan, sql, trace, t))
        if err is not None:
            r.proxy_error(err)
        elif warning:
            session.warnings = [("Warning", 4006, warning)]
            r.ok(status(), warnings=1, info=warning.encode(), more=more)
        elif trace.answer is not None:
            session.warnings = trace.answer.warnings
            r.ok(status(), trace.answer.affected_rows, warnings=len(trace.answer.warnings), info=trace.answer.info,
                 more=more)
        else:
            r.ok(status(), more=more)

    async def run_on(self, plan: Plan, sql: str, user: str, repair_of: int,
                     verify: Callable[[], Awaitable[None]] | None = None) -> ProxyError | None:
        """A DDL without a session (the repair of a half-applied one, proxy/ddl/ddl_repair.py), on exactly
        `plan.targets`: the same locks, cluster protocol, refresh and history as run(). `verify` runs
        once this instance's locks are held (raising refuses the DDL)."""
        owner = f"repair:{repair_of}"
        await self._take_locks(plan, sql, owner)
        if verify is not None:
            try:
                await verify()
            except BaseException:
                for s, t in self.keys_of(plan, sql):
                    self.locks.release(s, t, owner)
                raise
        trace = DdlTrace(user, before=self._structures(plan, sql), repair_of=repair_of, repairing=True)
        trace.mark("lock")
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._locked(plan, sql, owner, None, trace))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(lambda t: self._remember(plan, sql, trace, t))
        err, _ = await asyncio.shield(task)
        return err

    async def _take_locks(self, plan: Plan, sql: str, owner: str) -> None:
        """This instance's lock on every table of the DDL, all or none. A background re-read of a table
        (after a DDL that missed a node) is no DDL: it is waited for (bounded by RELOAD_WAIT_S) as MySQL
        waits for a metadata lock, not answered with 4006."""
        taken: list[tuple[str, str]] = []
        deadline = asyncio.get_running_loop().time() + RELOAD_WAIT_S
        try:
            for schema, table in self.keys_of(plan, sql):
                while True:
                    try:
                        self.locks.acquire(schema, table, sql, owner)
                        break
                    except DdlInProgress:
                        held = self.locks.get(schema, table)
                        if held is None or not held.owner.startswith(RELOAD_OWNER) \
                                or asyncio.get_running_loop().time() > deadline:
                            raise
                    await asyncio.sleep(0.02)
                taken.append((schema, table))
        except BaseException:
            for s, t in taken:
                self.locks.release(s, t, owner)
            raise

    def _structures(self, plan: Plan, sql: str) -> dict[str, str]:
        """Memory's CREATE text of the DDL's tables before it runs: what a half-applied DDL's lagging
        nodes must still have for `repair @@ddl` to re-run it there."""
        out = {}
        for s, t in self.keys_of(plan, sql):
            meta = self.runtime.registry.get(s, t)
            if meta is not None and meta.structure is not None:
                out[f"{s}.{t}"] = meta.structure
        return out

    async def _locked(self, plan: Plan, sql: str, owner: str, schema: str | None,
                      trace: DdlTrace | None = None) -> tuple[ProxyError | None, str | None]:
        """The DDL itself (through the cluster when there is one), always ending unlocked and refreshed."""
        keys = self.keys_of(plan, sql)
        trace = trace or DdlTrace("")
        trace.keys = keys
        dlog = log.bind(instance=self.runtime.config.server.instance, tables=[f"{s}.{t}" for s, t in keys],
                        ddl=plan.ddl)
        started = time.monotonic()
        err: ProxyError | None = None
        warning: str | None = None
        work = self.active[owner] = NodeWork(self.runtime.backends, started)
        reaching: asyncio.Task | None = None
        try:
            self._precheck(plan)
            cluster = self.runtime.cluster
            if cluster is None:
                await work.reach([t.node for t in plan.targets])
                if not trace.repairing:
                    await refuse_on_differing(self.runtime, plan)
                err = await self._apply(plan, keys, dlog, started, owner, trace)
                return err, None
            # the nodes' pings overlap the INIT write (nothing runs on a node before both are done; an
            # unreachable node then refuses the DDL under the lock, which the cleanup decides FAILED)
            reaching = asyncio.get_running_loop().create_task(work.reach([t.node for t in plan.targets]))
            async with ClusterDdl(cluster, keys, sql, plan.ddl or "UNKNOWN", work.marker) as cd:
                await reaching
                trace.mark("cluster_init")   # the INIT write and the pings, as before they overlapped
                await cd.ensure_held()
                if not trace.repairing:   # under the cluster lock: no DDL on the table runs meanwhile
                    await refuse_on_differing(self.runtime, plan)

                async def publish(err: ProxyError | None, texts: Texts | None) -> None:
                    details = trace.details(plan, self.runtime.registry.version)   # for ddl_history:
                    cd.details = {**details, **_node_outcome(trace, details["nodes"])}   # any instance repairs
                    await cd.complete(err is None, err.message if err is not None else "", texts=texts)

                err = await self._apply(plan, keys, dlog, started, owner, trace, publish, cd.announce)
                trace.mark("publish")
                warning, trace.laggards = cd.warning(), sorted(cd.laggards)
                return err, warning
        except ProxyError as e:
            err = e
            return e, None
        except Exception:  # noqa: BLE001 - a DDL must always answer and unlock
            dlog.exception("ddl failed")
            err = ProxyError("DDL failed: an internal error in pydble (its log has the details)")  # no Python text
            return err, None
        finally:
            if reaching is not None and not reaching.done():   # INIT failed first: its connections back too
                await asyncio.wait([reaching])
            if reaching is not None and not reaching.cancelled():
                reaching.exception()   # retrieved: the INIT's error is the answer
            work.release()
            self.active.pop(owner, None)
            for s, t in keys:
                self.locks.release(s, t, owner)

    def _client_gone(self, owner: str) -> None:
        """The client left mid-DDL: give up once `[server] ddl_timeout_s` has passed (never when 0)."""
        work = self.active.get(owner)
        limit = self.runtime.config.server.ddl_timeout_s
        if work is None or limit <= 0 or work.timer is not None:
            return
        delay = max(0.0, work.started + limit - time.monotonic())
        work.timer = asyncio.get_running_loop().call_later(
            delay, work.give_up, f"its client went away and ddl_timeout_s ({limit:g}s) passed")

    async def stop(self) -> None:
        """Shutdown: give up on every DDL in flight, and wait (bounded) until each has ended and released."""
        if self._reload_task is not None:
            self._reload_task.cancel()
        for work in list(self.active.values()):
            work.give_up("pydble is shutting down")
        if self.tasks:
            cluster = self.runtime.config.cluster
            bound = 2 * self.runtime.backends.timeout_s + (2 * cluster.ack_timeout_s if cluster else 0)
            await asyncio.wait(list(self.tasks), timeout=bound)
            for _ in range(2):
                await asyncio.sleep(0)   # each finished DDL's history entry (_remember, scheduled) before the history closes

    async def running(self, marker: str, kill: bool = False) -> list[str]:
        """The dbGroups where a DDL with that marker still runs (proxy/ddl/ddl_marker.py)."""
        return await ddl_running(self.runtime.backends, marker, kill)

    def _remember(self, plan: Plan, sql: str, trace: DdlTrace, task: asyncio.Task) -> None:
        """Append the finished DDL (`task`: _locked's) to this instance's persistent history and metrics."""
        interrupted = task.cancelled() or task.exception() is not None
        err = ProxyError("the DDL was interrupted") if interrupted else task.result()[0]
        keys, laggards = trace.keys, trace.laggards
        if trace.executed is not None:
            seconds, failed = trace.executed
            self.later.call(lambda: log.info(
                "ddl executed", instance=self.runtime.config.server.instance, tables=[f"{s}.{t}" for s, t in keys],
                ddl=plan.ddl, phase="EXECUTED", seconds=seconds, failed=failed,
                outcome="OK" if err is None else "FAILED"))
        details = trace.details(plan, self.runtime.registry.version)
        self.runtime.metrics.ddl_done("OK" if err is None else "FAILED", details["phases_ms"])
        self.runtime.history.append(DdlHistoryEntry(
            self.runtime.config.server.instance, trace.user, sql, plan.ddl or "UNKNOWN",
            [f"{s}.{t}" for s, t in keys], details["nodes"], "OK" if err is None else "FAILED",
            "" if err is None else f"({err.code}) {err.message}", details["phases_ms"], details["meta_version"],
            trace.started_at, time.time(), laggards, **_node_outcome(trace, details["nodes"])))

    async def _apply(self, plan: Plan, keys: list[tuple[str, str]], dlog: structlog.stdlib.BoundLogger,
                     started: float, owner: str = "", trace: DdlTrace | None = None,
                     publish: Callable[[ProxyError | None, Texts | None], Awaitable[None]] | None = None,
                     sent: Callable[[], None] | None = None) -> ProxyError | None:
        """Run on the backends, then refresh this instance's metadata (persist before publish).

        `sent` (a cluster's: tell the other instances INIT) is called once the DDL is written to every
        node. `publish` (a cluster's: the outcome, with the CREATE texts the refresh is built from or
        None when it loads, to the other instances) starts as soon as the backends answered, while this
        instance refreshes, and is awaited before returning."""
        self._phase(keys, owner, "EXECUTING")
        results = await self.execute(plan, self.active[owner], keys, sent)
        if trace is not None:
            trace.mark("execute")
        err = self._outcome(plan, results)
        if trace is not None and err is None:
            trace.answer = ddl_answer(results, self.runtime.config.all_global(plan.tables))
        texts: Texts = {x.node: x.texts for x in results if x.texts is not None}
        executed = (round(time.monotonic() - started, 3), [x.node for x in results if x.error])
        if trace is not None:
            trace.executed = executed   # the "ddl executed" line is written after the answer (meta/later.py)
        task = None
        if publish is not None:
            # the outcome on the wire (ZooKeeper, the peers) before this instance builds its own refresh;
            # a peer that cannot build the tables from the texts loads them from the backends
            task = asyncio.get_running_loop().create_task(publish(err, texts if keys else None))
            await asyncio.sleep(0)
        self._phase(keys, owner, "REFRESHING")
        dlog.debug("ddl nodes answered", seconds=executed[0], failed=executed[1])
        try:
            await self.refresh(keys, texts)
        except RefreshIncomplete as e:
            # the DDL's outcome stands; the tables are published with the unreached nodes' old part
            # (consistency UNKNOWN) and read again in the background until every node answers
            dlog.warning("refresh after ddl missed nodes; reading them again later", nodes=sorted(e.nodes))
            self.reload_later(keys)
        else:
            if trace is not None:
                trace.mark("refresh")
        finally:
            if task is not None:
                await task   # bounded by the cluster's own waits (ack_timeout_s)
        return err

    def keys_of(self, plan: Plan, sql: str) -> list[tuple[str, str]]:
        """The tables a DDL locks and refreshes: its own, plus the new name of an ALTER ... RENAME."""
        keys = [(s, t) for s, t in plan.tables]
        if plan.ddl == "ALTER_TABLE" and keys:
            m = _RENAME_TO.search(sql)
            if m is not None:
                parts = [p.strip().strip("`").replace("``", "`") for p in re.split(r"\s*\.\s*", m.group(1))]
                schema = parts[0] if len(parts) == 2 and parts[0] in self.runtime.config.schemas else keys[0][0]
                new = (schema, parts[-1].lower())
                if new not in keys:
                    keys.append(new)
        return keys

    def _phase(self, keys: list[tuple[str, str]], owner: str, phase: str) -> None:
        """Show where a DDL is (`show @@ddl`'s phase column)."""
        for s, t in keys:
            lk = self.locks.get(s, t)
            if lk is not None and lk.owner == owner:
                lk.phase = phase

    def _precheck(self, plan: Plan) -> None:
        """DBLE's answers that come from memory before any backend is touched."""
        reg = self.runtime.registry
        for schema, table in plan.tables:
            if plan.ddl == "CREATE_TABLE" and not plan.if_exists and reg.get(schema, table) is not None:
                raise TableExists(f"Table '{schema}.{table}' or table meta already exists")

    async def execute(self, plan: Plan, work: NodeWork, keys: list[tuple[str, str]] | None = None,
                      sent: Callable[[], None] | None = None) -> list[NodeResult]:
        """Run the DDL on every target node in parallel, on the connections `work` reached (one per
        target); in the same command each connection reads the structure of the keys' tables on its
        node (the refresh's input): `DDL;SHOW CREATE TABLE ...` as one multi-statement, one round trip
        per node. No time limit: a DDL may wait on a metadata lock as long as the backend lets it
        (pydble stops it with KILL QUERY where it gives up, NodeWork.give_up). The DDL text carries
        `work.marker`, so its connections can be found in a backend's processlist.
        `sent()` is called once every node's command is written."""
        backends = self.runtime.backends
        nodes = [t.node for t in plan.targets]
        unsent = len(plan.targets)

        def one_sent() -> None:
            nonlocal unsent
            unsent -= 1
            if unsent == 0 and sent is not None:
                try:
                    sent()
                except Exception:  # noqa: BLE001 - the DDL runs anyway; complete() tells the peers
                    log.exception("telling the other instances INIT failed")
        wanted = node_tables(self.runtime.config, plan.tables if keys is None else keys)
        for n in {n for n in nodes if nodes.count(n) > 1}:
            wanted.pop(n, None)  # two statements on one node in parallel: no single "after"

        async def one(i: int, node: str, sql: str) -> NodeResult:
            if work.stopped:
                raise ProxyError(f"the DDL was not run: {work.stopped}")
            conn = work.conns[i]
            tables = wanted.get(node) if _prints_plainly(conn) else None
            toks = tokenize(sql)
            if toks and toks[-1][:2] == ("o", ";"):   # the client's own end: no empty statement after it
                sql = sql[:toks[-1][2]]
            # a new line first: a trailing "-- comment" in the DDL must not swallow what follows
            sql += f"\n/* {work.marker} */\n;SHOW WARNINGS"   # its notes, for the client's OK
            if tables:
                db = _quote(backends.database_of(node))
                sql += "".join(f"\n;SHOW CREATE TABLE {db}.{_quote(t)}" for t in tables)
            sc = await conn.run(frame(0, b"\x03" + sql.encode("utf-8", "surrogateescape")),
                                None, collect=True, sent=one_sent)
            if not sc.results:   # the DDL failed (nothing after it ran)
                return NodeResult(node, sc.error)
            warnings = conn.warnings_of(sc.results[1].rows if len(sc.results) > 1 else [])
            texts = _texts_after(sc, tables, plan.ddl == "DROP_TABLE") if tables else None
            return NodeResult(node, None, texts, sc.results[0].ok, warnings)

        outs = await work.run(one(i, t.node, t.sql) for i, t in enumerate(plan.targets))
        results: list[NodeResult] = []
        for t, o in zip(plan.targets, outs):
            if isinstance(o, ProxyError):
                results.append(NodeResult(t.node, ErrInfo(o.code, o.sqlstate, o.message)))
            elif isinstance(o, BaseException):
                results.append(NodeResult(t.node, ErrInfo(2013, "HY000", f"shardingNode[{t.node}]: {o}")))
            else:
                results.append(o)
        return results

    async def refresh(self, keys: list[tuple[str, str]],
                      texts: Mapping[str, Mapping[str, str | None]] | None = None) -> None:
        """Publish the tables' structure: from SHOW CREATE texts when they answer for every node
        (this DDL's or another instance's), else re-read from the backends (persist before publish)."""
        if keys and (texts is None or not self.refresh_now(keys, texts)):
            await self._publish_locally(keys, None)
        for key in keys:
            self.reloads.pop(key, None)   # read completely: no retry due

    def reload_later(self, keys: Iterable[tuple[str, str]]) -> None:
        """Re-read these tables in the background until every node answers: a partial refresh is
        never the end of a DDL here (nothing else would re-read an UNKNOWN table)."""
        self.reloads.update(dict.fromkeys(keys))
        if self._reload_task is None or self._reload_task.done():
            self._reload_task = asyncio.get_running_loop().create_task(self._reload_until_complete())

    async def _reload_until_complete(self) -> None:
        """The owner of reload_later's retries: backing off (RELOAD_RETRY_FIRST_S doubling up to
        RELOAD_RETRY_MAX_S) while a node stays down; stopped by stop()."""
        delay = RELOAD_RETRY_FIRST_S
        while self.reloads:
            await asyncio.sleep(delay)
            # a table locked by a DDL now is refreshed by that DDL; try it again afterwards
            keys = [k for k in self.reloads if self.locks.get(*k) is None]
            if not keys:
                continue
            # held meanwhile: a DDL starting on the table while we read would be overwritten by this read
            for k in keys:
                self.locks.acquire(*k, "reload after a ddl missed nodes", f"{RELOAD_OWNER}later").phase = "REFRESHING"
            try:
                await self.refresh(keys, None)
                log.info("ddl refresh completed after missing nodes", tables=[f"{s}.{t}" for s, t in keys])
                delay = RELOAD_RETRY_FIRST_S
            except RefreshIncomplete as e:
                delay = min(2 * delay, RELOAD_RETRY_MAX_S)
                log.warning("ddl refresh still misses nodes", tables=[f"{s}.{t}" for s, t in keys],
                            nodes=sorted(e.nodes), retry_in_s=delay)
            except ProxyError as e:   # e.g. a schema no longer configured: nothing left to read
                log.warning("ddl refresh retry gave up", tables=[f"{s}.{t}" for s, t in keys], error=e.message)
                for key in keys:
                    self.reloads.pop(key, None)
            finally:
                for k in keys:
                    self.locks.release(*k, f"{RELOAD_OWNER}later")

    def refresh_now(self, keys: list[tuple[str, str]], texts: Mapping[str, Mapping[str, str | None]]) -> bool:
        """refresh without waiting (a peer's outcome handled on the spot): False, with nothing done,
        when the texts do not answer for every table (refresh then loads)."""
        result = result_from_texts(self.runtime.config, keys, texts) if keys else None
        if result is None:
            return False
        log.debug("ddl refresh", tables=[f"{s}.{t}" for s, t in keys], source="texts")
        self._publish(result)
        return True

    async def _publish_locally(self, keys: list[tuple[str, str]], result: LoadResult | None) -> None:
        """Swap the tables' new structure into the registry: `result` (built from texts), or loaded.
        A load that missed nodes is published (their old part carried over, UNKNOWN), then raises
        RefreshIncomplete: the caller must not count the refresh as applied."""
        if not keys:
            return
        log.debug("ddl refresh", tables=[f"{s}.{t}" for s, t in keys], source="load" if result is None else "texts")
        if result is None:
            result = await load_tables(self.runtime.config, keys, backend=self.runtime.meta_backend)
        self._publish(result)
        missed = result.failed_nodes
        if missed or result.unlisted_defaults:
            missed = {**result.unlisted_defaults, **missed}
            raise RefreshIncomplete("metadata refresh incomplete: "
                                    + "; ".join(f"{n}: {why}" for n, why in sorted(missed.items())), missed)

    def _publish(self, result: LoadResult) -> None:
        """The registry swap both refresh paths end in (and its load-time metric)."""
        self.runtime.metrics.meta_load_seconds.labels("tables").observe(result.seconds)
        self.runtime.registry.apply(result, loaded=False)

    def _outcome(self, plan: Plan, results: list[NodeResult]) -> ProxyError | None:
        failed = [x for x in results if x.error is not None]
        if not failed:
            return None
        first = failed[0]
        if (len(failed) == len(results) and first.error.code in (ER_NO_SUCH_TABLE, ER_BAD_TABLE_ERROR)
                and all((x.error.code, x.error.message) == (first.error.code, first.error.message) for x in failed)):
            # the table is on none of its nodes: one MySQL's answer, word for word
            return ProxyError(first.error.message, first.error.code, first.error.sqlstate)
        tables = ",".join(f"{s}.{t}" for s, t in plan.tables)   # logical names: a client never sees db1
        ok_nodes = [x.node for x in results if x.error is None]
        note = f" (shardingNode[{first.node}], table {tables}"
        note += f"; succeeded on {','.join(ok_nodes)})" if ok_nodes else ")"
        if plan.ddl == "CREATE_TABLE" and plan.tables and all(x.error.code == ER_TABLE_EXISTS for x in failed):
            # the table exists physically (on some or all nodes) while memory had no metadata
            schema, table = plan.tables[0]
            return TableExists(f"Table '{schema}.{table}' or table meta already exists" + note)
        return ProxyError(first.error.message + note, first.error.code, first.error.sqlstate)


def _node_outcome(trace: DdlTrace, nodes: list[str]) -> dict:
    """The history's record of where a DDL failed; the structure before it only when it also
    succeeded somewhere (half-applied: what `repair @@ddl` checks the lagging nodes against)."""
    failed = trace.executed[1] if trace.executed is not None else []
    partial = bool(failed) and len(set(failed)) < len(set(nodes))
    return {"failed_nodes": list(failed), "before": trace.before if partial else {}, "repair_of": trace.repair_of}


def _prints_plainly(conn: BackendConnection) -> bool:
    """A connection carrying a session's variables (sql_mode, character set) may print a CREATE text
    differently from a metadata load: then the refresh loads instead of reading texts after the DDL."""
    return not conn.broken and all(k.startswith("@") or k in _NEUTRAL_VARS for k in conn.vars)


def _texts_after(sc: ResponseScanner, tables: tuple[str, ...], drop: bool) -> dict[str, str | None] | None:
    """The tables' CREATE texts from the SHOW CREATE TABLE answers that followed a DDL's OK
    (results[0]) and its warnings, or None when any answer is not certain (the refresh then loads). 1146 counts as
    "gone" only after a clean DROP (no "unknown table" note), and only for the last table (an error
    ends the batch), since a name differing in case (a load matches names case-insensitively) gives
    1146 too."""
    ddl_ok, shows = sc.results[0].ok, sc.results[2:]   # (results[1]: its SHOW WARNINGS)
    out: dict[str, str | None] = {}
    for i, t in enumerate(tables):
        if i < len(shows):
            text = _create_text(shows[i].rows)
            if text is None:
                return None
            out[t] = text
        elif (i == len(tables) - 1 and i == len(shows) and drop and ddl_ok is not None and not ddl_ok.warnings
              and sc.error is not None and sc.error.code == ER_NO_SUCH_TABLE):
            out[t] = None
        else:
            log.debug("no structure read after ddl", table=t, error=sc.error.message if sc.error else None)
            return None
    return out


def _quote(name: str) -> str:
    """A backquoted identifier (physical names come from the config and DDL, never trusted raw)."""
    return "`" + name.replace("`", "``") + "`"


def _create_text(rows: list[list[bytes | None]]) -> str | None:
    """The CREATE TABLE text of a SHOW CREATE TABLE answer; None for anything else (a view, a
    temporary table shadowing the real one, undecodable bytes), which a metadata load would not use."""
    if len(rows) != 1 or len(rows[0]) != 2 or rows[0][1] is None:
        return None
    try:
        text = bytes(rows[0][1]).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.startswith("CREATE TABLE ") else None


def require_meta(server: Runtime, plan: Plan) -> None:
    """DML on a configured table memory cannot route gets 1146 or DBLE's 3009 instead of a guess."""
    reg = server.registry
    for schema, table in plan.tables:
        if server.config.table(schema, table) is not None and (err := reg.unusable(schema, table)):
            raise err


__all__ = ["DdlRunner", "require_meta", "BackendUnavailable"]
