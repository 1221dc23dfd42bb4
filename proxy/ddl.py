"""DDL through the client port: lock the table, run on all its nodes, refresh metadata, then answer.

Right after a node answers the DDL, the same connection reads SHOW CREATE TABLE of the DDL's tables
there; when every node answered cleanly, the refresh is built from those texts (no metadata load).
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable, Mapping

import structlog

from meta.errors import BackendUnavailable, ProxyError, TableExists
from meta.history import DdlHistoryEntry
from meta.later import Later
from meta.loader import LoadResult, load_tables, node_tables, result_from_texts
from meta.locks import MetaLocks
from zk.originator import ClusterDdl

from .protocol.messages import ErrInfo
from .protocol.packets import frame

if TYPE_CHECKING:
    from .backend import BackendConnection
    from .protocol.response import ResponseScanner
    from .reply import Reply
    from .router import Plan
    from .server import ProxyServer
    from .session import Session

log = structlog.get_logger("pydble.ddl")

ER_TABLE_EXISTS = 1050
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


class DdlRunner:
    """Serializes DDL per table on this instance and keeps metadata in step with the backends."""

    def __init__(self, server: ProxyServer) -> None:
        self.server = server
        self.locks = MetaLocks(server.config.server.instance)
        self.tasks: set[asyncio.Task] = set()
        self.later = Later()   # each DDL's info line, written a moment after its answer (flushed at stop)

    async def run(self, session: Session, plan: Plan, sql: str, r: Reply, more: bool) -> None:
        """Run a DDL for a session; it finishes (and unlocks) even if the client leaves meanwhile."""
        owner = f"session:{session.conn_id}"
        self._take_locks(plan, sql, owner)
        trace = DdlTrace(session.user, before=self._structures(plan, sql))
        trace.mark("lock")
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._locked(plan, sql, owner, session.schema, trace))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        status = session.status
        try:
            err, warning = await asyncio.shield(task)
        finally:
            # history and metrics once the answer is written (the session writes it before its next
            # loop turn), or once the DDL ends if the client has gone
            task.add_done_callback(lambda t: loop.call_soon(self._remember, plan, sql, trace, t))
        if err is not None:
            r.proxy_error(err)
        elif warning:
            session.warnings = [("Warning", 4006, warning)]
            r.ok(status(), warnings=1, info=warning.encode(), more=more)
        else:
            r.ok(status(), more=more)

    async def run_on(self, plan: Plan, sql: str, user: str, repair_of: int,
                     verify: Callable[[], Awaitable[None]] | None = None) -> ProxyError | None:
        """A DDL without a session (the repair of a half-applied one, proxy/ddl_repair.py), on exactly
        `plan.targets`: the same locks, cluster protocol, refresh and history as run(). `verify` runs
        once this instance's locks are held (raising refuses the DDL)."""
        owner = f"repair:{repair_of}"
        self._take_locks(plan, sql, owner)
        if verify is not None:
            try:
                await verify()
            except BaseException:
                for s, t in self.keys_of(plan, sql):
                    self.locks.release(s, t, owner)
                raise
        trace = DdlTrace(user, before=self._structures(plan, sql), repair_of=repair_of)
        trace.mark("lock")
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._locked(plan, sql, owner, None, trace))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(lambda t: self._remember(plan, sql, trace, t))
        err, _ = await asyncio.shield(task)
        return err

    def _take_locks(self, plan: Plan, sql: str, owner: str) -> None:
        """This instance's lock on every table of the DDL, all or none."""
        taken: list[tuple[str, str]] = []
        try:
            for schema, table in self.keys_of(plan, sql):
                self.locks.acquire(schema, table, sql, owner)
                taken.append((schema, table))
        except ProxyError:
            for s, t in taken:
                self.locks.release(s, t, owner)
            raise

    def _structures(self, plan: Plan, sql: str) -> dict[str, str]:
        """Memory's CREATE text of the DDL's tables before it runs: what a half-applied DDL's lagging
        nodes must still have for `repair @@ddl` to re-run it there."""
        out = {}
        for s, t in self.keys_of(plan, sql):
            meta = self.server.registry.get(s, t)
            if meta is not None and meta.structure is not None:
                out[f"{s}.{t}"] = meta.structure
        return out

    async def _locked(self, plan: Plan, sql: str, owner: str, schema: str | None,
                      trace: DdlTrace | None = None) -> tuple[ProxyError | None, str | None]:
        """The DDL itself (through the cluster when there is one), always ending unlocked and refreshed."""
        keys = self.keys_of(plan, sql)
        trace = trace or DdlTrace("")
        trace.keys = keys
        dlog = log.bind(instance=self.server.config.server.instance, tables=[f"{s}.{t}" for s, t in keys],
                        ddl=plan.ddl)
        started = time.monotonic()
        err: ProxyError | None = None
        warning: str | None = None
        try:
            self._precheck(plan)
            cluster = self.server.cluster
            if cluster is None:
                err = await self._apply(plan, keys, dlog, started, owner, trace)
                return err, None
            async with ClusterDdl(cluster, keys, sql, plan.ddl or "UNKNOWN") as cd:
                trace.mark("cluster_init")
                await cd.ensure_held()

                async def publish(err: ProxyError | None, texts: Texts | None) -> None:
                    cd.details = trace.details(plan, self.server.registry.version)   # for ddl_history
                    await cd.complete(err is None, err.message if err is not None else "", texts=texts)

                err = await self._apply(plan, keys, dlog, started, owner, trace, publish, cd.announce)
                trace.mark("publish")
                warning, trace.laggards = cd.warning(), sorted(cd.laggards)
                return err, warning
        except ProxyError as e:
            err = e
            return e, None
        except Exception as e:  # noqa: BLE001 - a DDL must always answer and unlock
            dlog.exception("ddl failed")
            err = ProxyError(f"DDL failed: {e}")
            return err, None
        finally:
            for s, t in keys:
                self.locks.release(s, t, owner)

    def _remember(self, plan: Plan, sql: str, trace: DdlTrace, task: asyncio.Task) -> None:
        """Append the finished DDL (`task`: _locked's) to this instance's persistent history and metrics."""
        interrupted = task.cancelled() or task.exception() is not None
        err = ProxyError("the DDL was interrupted") if interrupted else task.result()[0]
        keys, laggards = trace.keys, trace.laggards
        if trace.executed is not None:
            seconds, failed = trace.executed
            self.later.call(lambda: log.info(
                "ddl executed", instance=self.server.config.server.instance, tables=[f"{s}.{t}" for s, t in keys],
                ddl=plan.ddl, phase="EXECUTED", seconds=seconds, failed=failed,
                outcome="OK" if err is None else "FAILED"))
        details = trace.details(plan, self.server.registry.version)
        self.server.metrics.ddl_done("OK" if err is None else "FAILED", details["phases_ms"])
        self.server.history.append(DdlHistoryEntry(
            self.server.config.server.instance, trace.user, sql, plan.ddl or "UNKNOWN",
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
        results = await self.execute(plan, keys, sent)
        if trace is not None:
            trace.mark("execute")
        err = self._outcome(plan, results)
        texts: Texts = {x.node: x.texts for x in results if x.texts is not None}
        task = None
        if publish is not None:
            # the outcome on the wire (ZooKeeper, the peers) before this instance builds its own refresh;
            # a peer that cannot build the tables from the texts loads them from the backends
            task = asyncio.get_running_loop().create_task(publish(err, texts if keys else None))
            await asyncio.sleep(0)
        self._phase(keys, owner, "REFRESHING")
        executed = (round(time.monotonic() - started, 3), [x.node for x in results if x.error])
        if trace is not None:
            trace.executed = executed   # the "ddl executed" line is written after the answer (meta/later.py)
        dlog.debug("ddl nodes answered", seconds=executed[0], failed=executed[1])
        try:
            await self.refresh(keys, texts)
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
                schema = parts[0] if len(parts) == 2 and parts[0] in self.server.config.schemas else keys[0][0]
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
        reg = self.server.registry
        for schema, table in plan.tables:
            if plan.ddl == "CREATE_TABLE" and not plan.if_exists and reg.get(schema, table) is not None:
                raise TableExists(f"Table '{schema}.{table}' or table meta already exists")

    async def execute(self, plan: Plan, keys: list[tuple[str, str]] | None = None,
                      sent: Callable[[], None] | None = None) -> list[NodeResult]:
        """Run the DDL on every target node in parallel, on connections of its own; in the same
        command each connection reads the structure of the keys' tables on its node (the refresh's
        input): `DDL;SHOW CREATE TABLE ...` as one multi-statement, one round trip per node.
        `sent()` is called once every node's command is written."""
        backends = self.server.backends
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
        wanted = node_tables(self.server.config, plan.tables if keys is None else keys)
        for n in {n for n in nodes if nodes.count(n) > 1}:
            wanted.pop(n, None)  # two statements on one node in parallel: no single "after"

        async def one(node: str, sql: str) -> NodeResult:
            conn = await backends.acquire(node, 0)
            try:
                tables = wanted.get(node) if _prints_plainly(conn) else None
                if tables:
                    db = _quote(backends.database_of(node))
                    # a new line first: a trailing "-- comment" in the DDL must not swallow the rest
                    sql += "".join(f"\n;SHOW CREATE TABLE {db}.{_quote(t)}" for t in tables)
                sc = await conn.run(frame(0, b"\x03" + sql.encode("utf-8", "surrogateescape")),
                                    backends.timeout_s, collect=True, sent=one_sent)
            finally:
                backends.release(node, conn)
            if not tables or not sc.results:   # no texts asked for, or the DDL failed (nothing after it ran)
                return NodeResult(node, sc.error)
            return NodeResult(node, None, _texts_after(sc, tables, plan.ddl == "DROP_TABLE"))

        outs = await asyncio.gather(*(one(t.node, t.sql) for t in plan.targets), return_exceptions=True)
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

    def refresh_now(self, keys: list[tuple[str, str]], texts: Mapping[str, Mapping[str, str | None]]) -> bool:
        """refresh without waiting (a peer's outcome handled on the spot): False, with nothing done,
        when the texts do not answer for every table (refresh then loads)."""
        result = result_from_texts(self.server.config, keys, texts) if keys else None
        if result is None:
            return False
        log.debug("ddl refresh", tables=[f"{s}.{t}" for s, t in keys], source="texts")
        self._publish(result)
        return True

    async def _publish_locally(self, keys: list[tuple[str, str]], result: LoadResult | None) -> None:
        """Swap the tables' new structure into the registry: `result` (built from texts), or loaded."""
        if not keys:
            return
        log.debug("ddl refresh", tables=[f"{s}.{t}" for s, t in keys], source="load" if result is None else "texts")
        if result is None:
            result = await load_tables(self.server.config, keys, backend=self.server.meta_backend)
        self._publish(result)

    def _publish(self, result: LoadResult) -> None:
        """The registry swap both refresh paths end in (and its load-time metric)."""
        self.server.metrics.meta_load_seconds.labels("tables").observe(result.seconds)
        self.server.registry.apply(result, loaded=False)

    def _outcome(self, plan: Plan, results: list[NodeResult]) -> ProxyError | None:
        failed = [x for x in results if x.error is not None]
        if not failed:
            return None
        first = failed[0]
        db = self.server.config.sharding_nodes[first.node].database
        tables = ",".join(f"{db}.{t}" for _, t in plan.tables)
        ok_nodes = [x.node for x in results if x.error is None]
        note = f" (shardingNode[{first.node}], physical table {tables}"
        note += f"; succeeded on {','.join(ok_nodes)})" if ok_nodes else ")"
        if plan.ddl == "CREATE_TABLE" and all(x.error.code == ER_TABLE_EXISTS for x in failed):
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
    (results[0]), or None when any answer is not certain (the refresh then loads). 1146 counts as
    "gone" only after a clean DROP (no "unknown table" note), and only for the last table (an error
    ends the batch), since a name differing in case (a load matches names case-insensitively) gives
    1146 too."""
    ddl_ok, shows = sc.results[0].ok, sc.results[1:]
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


def require_meta(server: ProxyServer, plan: Plan) -> None:
    """DML on a configured table memory cannot route gets 1146 or DBLE's 3009 instead of a guess."""
    reg = server.registry
    for schema, table in plan.tables:
        if server.config.table(schema, table) is not None and (err := reg.unusable(schema, table)):
            raise err


__all__ = ["DdlRunner", "require_meta", "BackendUnavailable"]
