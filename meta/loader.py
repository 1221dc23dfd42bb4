"""Load table metadata from every shardingNode in parallel, batched, bounded, never aborting.

Per node: one `SHOW FULL TABLES`, then `SHOW CREATE TABLE` statements joined into multi-statement
batches. A countdown tree (meta.countdown) says when each node, schema and the load are done;
when a schema completes, its tables are compared across nodes and turned into TableMeta records.
A node that is down, slow or failing completes its part with its tables marked unknown, and the
log says which node and why. Per-table Python work is kept tiny: no parsing during a load.
A DDL's refresh skips the load when its nodes already answered SHOW CREATE (result_from_texts).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Literal, Mapping

import structlog

from meta.backend_query import BackendStatementFailed, MetaBackend, MetaConnection, NodeUnavailable
from meta.config import Config, DbGroupConfig, ShardingNodeConfig
from meta.consistency import Consistency, judge
from meta.countdown import CONFIG, DEFAULT, LoadTree, Unit
from meta.errors import UnknownDatabase
from meta.model import EMPTY, KIND_DEFAULT, Key, TableMeta
from meta.scratch import is_scratch

log = structlog.get_logger("pydble.meta.loader")

LIST_TABLES = "SHOW FULL TABLES WHERE Table_type='BASE TABLE'"
ER_NO_SUCH_TABLE = 1146
DEFAULT_BATCH_SIZE = 500
PER_GROUP_PARALLEL = 16       # connections a load opens at once on one db_group
MAX_LOGGED_NAMES = 20
FILTERED_LISTING_MAX = 500   # up to this many wanted tables, list only those
ASSEMBLE_CHUNK = 256         # records built between yields to the event loop (queries keep flowing)


@dataclass(frozen=True, slots=True)
class LoadScope:
    """What a load covers, so the registry knows which old entries it replaces."""

    kind: Literal["all", "schema", "tables"]
    schema: str | None = None
    tables: frozenset[Key] = frozenset()

    def covers(self, key: Key) -> bool:
        """Whether an existing registry entry is superseded by this load."""
        if self.kind == "all":
            return True
        if self.kind == "schema":
            return key[0] == self.schema
        return key in self.tables

    def describe(self) -> str:
        """For logs."""
        if self.kind == "all":
            return "all"
        if self.kind == "schema":
            return f"schema {self.schema}"
        return ", ".join(f"{s}.{t}" for s, t in sorted(self.tables))


@dataclass(frozen=True, slots=True)
class NodeOutcome:
    """How one shardingNode's part of a load went."""

    node: str
    ok: bool
    reason: str | None
    listed: int           # base tables the listing returned
    fetched: int          # CREATE texts read
    missing: int          # wanted tables the node does not have
    unknown: int          # wanted tables it could not tell about
    seconds: float


@dataclass(slots=True)
class LoadResult:
    """A finished load: fresh records (version 0, not yet published) and how each node did."""

    scope: LoadScope
    tables: dict[Key, TableMeta]
    nodes: dict[str, NodeOutcome]
    # Schemas whose default node could not be listed: their unconfigured tables are unknown, so
    # the registry keeps what it had for them instead of forgetting them.
    unlisted_defaults: dict[str, str] = field(default_factory=dict)
    started_at: float = 0.0
    seconds: float = 0.0

    def __repr__(self) -> str:
        """A summary: asyncio and logs repr results, and thousands of records would be slow."""
        return (f"LoadResult(scope={self.scope.describe()!r}, tables={len(self.tables)}, "
                f"nodes={len(self.nodes)}, failed={sorted(self.failed_nodes)}, "
                f"seconds={self.seconds:.3f})")

    @property
    def ok(self) -> bool:
        """Every node answered fully."""
        return all(o.ok for o in self.nodes.values())

    @property
    def failed_nodes(self) -> dict[str, str]:
        """Node -> reason, for nodes that could not be read completely."""
        return {n: o.reason or "" for n, o in self.nodes.items() if not o.ok}

    def inconsistent(self) -> list[TableMeta]:
        """Tables whose nodes disagree (for alerts)."""
        return [m for m in self.tables.values() if m.consistency is Consistency.INCONSISTENT]


# --- planning -----------------------------------------------------------------------------


@dataclass(slots=True)
class _NodeWork:
    """What one node must answer for, and what it answered; mutated only by its own task."""

    node: str
    wants: dict[str, tuple[Key, ...]] = field(default_factory=dict)  # lower name -> keys
    harvest: list[tuple[str, frozenset[str]]] = field(default_factory=list)  # (schema, configured)
    sql: dict[str, str | None] = field(default_factory=dict)       # lower name -> text / None
    unknown: dict[str, str] = field(default_factory=dict)          # lower name -> reason
    failure: str | None = None
    listed: int = -1
    seconds: float = 0.0


@dataclass(slots=True)
class _Plan:
    scope: LoadScope
    work: dict[str, _NodeWork]
    units: dict[str, set[Unit]]
    keys: dict[Key, tuple[str, tuple[str, ...]]]                   # configured key -> (kind, nodes)
    default_schemas: dict[str, str]                                # schema -> its default node


# Planning a load of tens of thousands of configured tables takes a noticeable time (hundreds of ms
# on a busy machine) in one event-loop step, so whole-config and whole-schema plans are kept per
# Config (which is immutable) and each load starts from a copy of the template's wants.
_PLAN_CACHE: dict[tuple[int, str, str | None], tuple[Config, _Plan]] = {}
_PLAN_CACHE_MAX = 8


def _plan(config: Config, scope: LoadScope) -> _Plan:
    """The work of a load: which node must answer for which tables, and the countdown units."""
    if scope.kind == "tables":
        return _build_plan(config, scope)
    ck = (id(config), scope.kind, scope.schema)
    hit = _PLAN_CACHE.get(ck)
    if hit is not None and hit[0] is config:
        tmpl = hit[1]
    else:
        tmpl = _build_plan(config, scope)
        if len(_PLAN_CACHE) >= _PLAN_CACHE_MAX:
            _PLAN_CACHE.clear()
        _PLAN_CACHE[ck] = (config, tmpl)
    work = {n: _NodeWork(n, dict(w.wants), list(w.harvest)) for n, w in tmpl.work.items()}
    return _Plan(scope, work, tmpl.units, tmpl.keys, tmpl.default_schemas)


def _build_plan(config: Config, scope: LoadScope) -> _Plan:
    work: dict[str, _NodeWork] = {}
    units: dict[str, set[Unit]] = {}
    keys: dict[Key, tuple[str, tuple[str, ...]]] = {}
    defaults: dict[str, str] = {}

    def node(n: str) -> _NodeWork:
        w = work.get(n)
        if w is None:
            w = work[n] = _NodeWork(n)
        return w

    if scope.kind == "tables":
        wanted: dict[str, set[str]] = {}
        for s, t in scope.tables:
            wanted.setdefault(s, set()).add(t)
        schemas = list(wanted)
    elif scope.kind == "schema":
        schemas = [scope.schema] if scope.schema else []
    else:
        schemas = list(config.schemas)
    for s in schemas:
        sc = config.schemas[s]
        su = units.setdefault(s, set())
        only = wanted[s] if scope.kind == "tables" else None
        for name, tc in sc.tables.items():
            if only is not None and name not in only:
                continue
            keys[(s, name)] = (tc.type, tc.nodes)
            key = (s, name)
            for n in tc.nodes:
                wants = node(n).wants
                wants[name] = wants.get(name, ()) + (key,)
                su.add((n, CONFIG))
        if sc.default_node is None:
            continue
        configured = frozenset(sc.tables)
        if only is None:
            node(sc.default_node).harvest.append((s, configured))
            su.add((sc.default_node, DEFAULT))
            defaults[s] = sc.default_node
        else:
            extra = [t for t in only if t not in configured]
            for t in extra:
                wants = node(sc.default_node).wants
                wants[t] = wants.get(t, ()) + ((s, t),)
            if extra:
                su.add((sc.default_node, DEFAULT))
                defaults[s] = sc.default_node
    return _Plan(scope, work, units, keys, defaults)


# --- fetching -----------------------------------------------------------------------------


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _listing_sql(w: _NodeWork, database: str) -> str:
    """The whole listing when harvesting a default node, else only the wanted names (a DDL refresh
    of one table should not list thousands); the name match is case-insensitive either way."""
    if w.harvest or len(w.wants) > FILTERED_LISTING_MAX:
        return LIST_TABLES
    names = ",".join(_literal(n) for n in w.wants)
    return f"{LIST_TABLES} AND {_quote('Tables_in_' + database)} IN ({names})"


class _Loader:
    """One load: plans, runs every node, assembles records as schemas complete."""

    def __init__(self, config: Config, plan: _Plan, *, timeout_s: float, batch_size: int,
                 connections_per_node: int, backend: MetaBackend) -> None:
        self.config = config
        self.plan = plan
        self.timeout_s = timeout_s
        self.batch_size = max(1, batch_size)
        self.per_node = max(1, connections_per_node)
        self.backend = backend
        self.pool: dict[str, str] = {}          # interned CREATE texts shared across nodes
        self.tables: dict[Key, TableMeta] = {}
        self.unlisted_defaults: dict[str, str] = {}
        self.group_sems = {g: asyncio.Semaphore(PER_GROUP_PARALLEL) for g in config.db_groups}
        self.group_down: dict[str, str] = {}
        self.now = time.time()
        self.assembly: list[asyncio.Task[None]] = []
        self.tree = LoadTree(plan.units, on_schema=self._schema_done)

    async def run(self) -> LoadResult:
        """Run every node concurrently; return when the countdown tree says the load is done."""
        t0 = time.perf_counter()
        self.tree.start()
        tasks = [asyncio.create_task(self._node(w), name=f"meta-load-{w.node}")
                 for w in self.plan.work.values()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if not self.tree.done:  # every node task completes its countdown in `finally`
            log.error("metadata load countdown did not finish; forcing it",
                      pending=sorted(n for n, c in self.tree.nodes.items() if not c.fired))
            self.tree.force_all()
        if self.assembly:
            await asyncio.gather(*self.assembly)
        seconds = time.perf_counter() - t0
        outcomes = {w.node: _outcome(w) for w in self.plan.work.values()}
        result = LoadResult(self.plan.scope, self.tables, outcomes, self.unlisted_defaults,
                            self.now, seconds)
        failed = result.failed_nodes
        log.info("metadata loaded", scope=self.plan.scope.describe(), tables=len(self.tables),
                 nodes=len(outcomes), failed_nodes=failed or None,
                 inconsistent=sum(1 for m in self.tables.values()
                                  if m.consistency is Consistency.INCONSISTENT),
                 seconds=round(seconds, 3))
        return result

    async def _node(self, w: _NodeWork) -> None:
        """Read one node; whatever happens, complete its countdown and mark what is unknown."""
        nc = self.config.sharding_nodes[w.node]
        group = self.config.db_groups[nc.db_group]
        nlog = log.bind(node=w.node, db_group=group.name, address=f"{group.host}:{group.port}",
                        database=nc.database)
        conns: list[MetaConnection] = []
        t0 = time.perf_counter()
        try:
            async with self.group_sems[group.name]:
                t0 = time.perf_counter()
                if group.name in self.group_down:
                    raise NodeUnavailable(f"db_group {group.name} unreachable: "
                                          f"{self.group_down[group.name]}")
                async with asyncio.timeout(self.timeout_s):
                    await self._node_inner(w, group, nc, conns, nlog)
        except TimeoutError:
            w.failure = f"timed out after {self.timeout_s:g}s"
        except NodeUnavailable as e:
            w.failure = e.reason
            if e.unreachable:
                self.group_down.setdefault(group.name, e.reason)
        except BackendStatementFailed as e:
            w.failure = f"listing tables failed: {e}"
        except asyncio.CancelledError:
            w.failure = "load cancelled"
            raise
        except Exception as e:  # a bug or an odd backend must not abort the load
            w.failure = f"{type(e).__name__}: {e}"
            nlog.exception("unexpected error while loading node metadata")
        finally:
            w.seconds = time.perf_counter() - t0
            for c in conns:
                if w.failure is None:
                    await c.close()
                else:
                    c.abort()
            self._finish_node(w, nlog)

    async def _node_inner(self, w: _NodeWork, group: DbGroupConfig, nc: ShardingNodeConfig,
                          conns: list[MetaConnection], nlog: structlog.stdlib.BoundLogger) -> None:
        connect_timeout = min(group.connect_timeout_s, self.timeout_s)
        conn = await self.backend.connect(nc, group, timeout_s=connect_timeout)
        conns.append(conn)
        rows = await conn.query(_listing_sql(w, nc.database))
        actual: dict[str, str] = {}
        for r in rows:
            name = r[0]
            if is_scratch(name):
                continue   # pydble's own (meta/scratch.py): never table metadata
            low = name.lower()
            if low in actual:
                nlog.warning("two tables differ only in case; using the first", table=name,
                             first=actual[low])
                continue
            actual[low] = name
        w.listed = len(actual)
        for schema, configured in w.harvest:
            for low in actual:
                if low not in configured and self.config.default_home(schema, low) is not None:   # (or another's)
                    w.wants[low] = w.wants.get(low, ()) + ((schema, low),)
        fetch: list[str] = []
        for low in w.wants:
            name = actual.get(low)
            if name is None:
                w.sql[low] = None
            else:
                fetch.append(name)
        if any(v is None for v in w.sql.values()):
            missing = [k for k, v in w.sql.items() if v is None]
            nlog.warning("tables missing on node", count=len(missing),
                         tables=missing[:MAX_LOGGED_NAMES])
        queue: deque[tuple[int, list[str]]] = deque()
        chunks = [fetch[i:i + self.batch_size] for i in range(0, len(fetch), self.batch_size)]
        for bid, chunk in zip(self.tree.add_batches(w.node, len(chunks)), chunks):
            queue.append((bid, chunk))
        self.tree.listed(w.node)
        extra = min(self.per_node, len(queue)) - 1
        if extra > 0:
            async def one_more() -> None:
                try:  # appended at once, so a timeout meanwhile still closes it
                    conns.append(await self.backend.connect(nc, group, timeout_s=connect_timeout))
                except NodeUnavailable as e:
                    nlog.debug("extra metadata connection failed; continuing with fewer",
                               error=e.reason)
            await asyncio.gather(*(one_more() for _ in range(extra)))
        if len(conns) == 1:
            await self._drain(w, conns[0], queue, nlog)
            return
        try:
            async with asyncio.TaskGroup() as tg:
                for c in conns:
                    tg.create_task(self._drain(w, c, queue, nlog))
        except BaseExceptionGroup as eg:  # one broken connection fails the node, as with one
            raise eg.exceptions[0] from None

    async def _drain(self, w: _NodeWork, conn: MetaConnection, queue: deque[tuple[int, list[str]]],
                     nlog: structlog.stdlib.BoundLogger) -> None:
        """Run batches until none is left; after a failing statement, retry the rest of its batch."""
        pool = self.pool
        sql_of = w.sql
        while queue:
            bid, names = queue.popleft()
            res = await conn.query_multi(";".join(f"SHOW CREATE TABLE {_quote(n)}" for n in names))
            for name, rows in zip(names, res.results):
                text = rows[0][1] if rows and len(rows[0]) > 1 else None
                if text is not None:
                    text = pool.setdefault(text, text)
                sql_of[name.lower()] = text
            err = res.error
            if err is not None and err.index < len(names):
                bad = names[err.index]
                if err.code == ER_NO_SUCH_TABLE:
                    sql_of[bad.lower()] = None
                    nlog.info("table dropped during load", table=bad)
                else:
                    w.unknown[bad.lower()] = f"SHOW CREATE TABLE failed: ({err.code}) {err.message}"
                    nlog.warning("SHOW CREATE TABLE failed", table=bad, code=err.code,
                                 error=err.message)
                rest = names[err.index + 1:]
                if rest:
                    (retry,) = self.tree.add_batches(w.node, 1)
                    queue.appendleft((retry, rest))
            self.tree.batch_done(w.node, bid)

    def _finish_node(self, w: _NodeWork, nlog: structlog.stdlib.BoundLogger) -> None:
        if w.failure is not None:
            reason = w.failure
            for low in w.wants:
                if low not in w.sql:
                    w.unknown.setdefault(low, reason)
            unlisted = [s for s, _ in w.harvest] if w.listed < 0 else []
            for s in unlisted:
                self.unlisted_defaults[s] = reason
            nlog.warning("shardingNode metadata incomplete", reason=reason,
                         tables_unknown=len(w.unknown), default_node_of=unlisted or None,
                         seconds=round(w.seconds, 3))
        else:
            nlog.debug("shardingNode metadata loaded", listed=w.listed, fetched=len(w.sql),
                       seconds=round(w.seconds, 3))
        self.tree.node_failed(w.node)  # no-op when its last batch already completed it

    # --- assembly, run by the countdown tree when a schema's last node completes ---

    def _schema_done(self, schema: str) -> None:
        """The schema's last countdown fired: build its records in a task that yields now and then."""
        self.assembly.append(asyncio.get_running_loop().create_task(
            self._assemble(schema), name=f"meta-assemble-{schema}"))

    async def _assemble(self, schema: str) -> None:
        """Turn a completed schema's answers into records, a chunk at a time, so one event-loop
        step never holds thousands of tables (queries are served between chunks)."""
        done = 0
        for key, kind, nodes in _schema_keys(self.plan, schema):
            self.tables[key] = _record(self.plan, key, kind, nodes, self.now)
            done += 1
            if done % ASSEMBLE_CHUNK == 0:
                await asyncio.sleep(0)


# --- assembly: a plan whose nodes have answered, turned into records ----------------------


def _outcome(w: _NodeWork) -> NodeOutcome:
    """The node's summary, for the result (and the log of a failed node)."""
    missing = sum(1 for v in w.sql.values() if v is None)
    return NodeOutcome(w.node, w.failure is None and not w.unknown, w.failure, max(w.listed, 0),
                       len(w.sql) - missing, missing, len(w.unknown), w.seconds)


def _schema_keys(plan: _Plan, schema: str) -> Iterable[tuple[Key, str, tuple[str, ...]]]:
    """Every table of the schema a load answers for: configured ones, then default-node ones."""
    configured: set[Key] = set()
    for k, (kind, nodes) in plan.keys.items():
        if k[0] == schema:
            configured.add(k)
            yield k, kind, nodes
    dnode = plan.default_schemas.get(schema)
    if dnode is None:
        return
    dw = plan.work[dnode]
    nodes1 = (dnode,)
    for low, ks in dw.wants.items():
        for k in ks:
            if k[0] == schema and k not in configured:
                if dw.sql.get(low) is None and low not in dw.unknown:
                    continue  # not on the default node: no such table
                configured.add(k)
                yield k, KIND_DEFAULT, nodes1


def _record(plan: _Plan, key: Key, kind: str, nodes: tuple[str, ...], now: float) -> TableMeta:
    """One table's record from its nodes' answers: the consistency verdict decides the structure."""
    low = key[1]
    node_sql: dict[str, str | None] = {}
    unknown: dict[str, str] = {}
    work = plan.work
    for n in nodes:
        w = work[n]
        if low in w.unknown:
            unknown[n] = w.unknown[low]
        elif low in w.sql:
            node_sql[n] = w.sql[low]
        else:
            unknown[n] = w.failure or "not fetched"
    v = judge(nodes, node_sql, unknown)
    if v.state is Consistency.INCONSISTENT:
        log.warning("table structure not consistent across shardingNodes",
                    table=f"{key[0]}.{key[1]}", detail=v.describe())
    return TableMeta(key[0], low, kind, nodes, node_sql, v.structure, v.state, now, 0,
                     unknown or EMPTY)


def _tables_scope(config: Config, tables: Iterable[tuple[str, str]]) -> LoadScope:
    """The scope of a load of some tables; raises UnknownDatabase for a schema not configured."""
    keys = set()
    for s, t in tables:
        if s not in config.schemas:
            raise UnknownDatabase(f"Unknown database '{s}'")
        keys.add((s, t.lower()))
    return LoadScope("tables", tables=frozenset(keys))


# --- public entry points ------------------------------------------------------------------


async def load_all(config: Config, *, timeout_s: float | None = None,
                   batch_size: int = DEFAULT_BATCH_SIZE, connections_per_node: int = 1,
                   backend: MetaBackend) -> LoadResult:
    """Load every table of every schema (start-up and `reload @@metadata`)."""
    return await _run(config, LoadScope("all"), timeout_s, batch_size, connections_per_node, backend)


async def load_tables(config: Config, tables: Iterable[tuple[str, str]] | None = None,
                      schema: str | None = None, *, timeout_s: float | None = None,
                      batch_size: int = DEFAULT_BATCH_SIZE, connections_per_node: int = 1,
                      backend: MetaBackend) -> LoadResult:
    """Reload some tables (a list of (schema, table)) or one schema; both None means everything."""
    if tables is not None:
        scope = _tables_scope(config, tables)
    elif schema is not None:
        if schema not in config.schemas:
            raise UnknownDatabase(f"Unknown database '{schema}'")
        scope = LoadScope("schema", schema=schema)
    else:
        scope = LoadScope("all")
    return await _run(config, scope, timeout_s, batch_size, connections_per_node, backend)


def node_tables(config: Config, tables: Iterable[tuple[str, str]]) -> dict[str, tuple[str, ...]]:
    """Which lower-case table names a refresh of these tables reads on each shardingNode (what a
    DDL asks its nodes right after running, so result_from_texts can answer without a load)."""
    try:
        plan = _plan(config, _tables_scope(config, tables))
    except UnknownDatabase:
        return {}
    return {n: tuple(w.wants) for n, w in plan.work.items()}


def result_from_texts(config: Config, tables: Iterable[tuple[str, str]],
                      texts: Mapping[str, Mapping[str, str | None]]) -> LoadResult | None:
    """The LoadResult load_tables would give, built from SHOW CREATE texts already in hand
    (node -> lower name -> text, None: not there); None unless they answer for every table."""
    t0 = time.perf_counter()
    try:
        plan = _plan(config, _tables_scope(config, tables))
    except UnknownDatabase:
        return None
    pool: dict[str, str] = {}
    for n, w in plan.work.items():
        got = texts.get(n)
        if not isinstance(got, Mapping):
            return None
        for low in w.wants:
            text = got.get(low, False)
            if text is not None and not isinstance(text, str):
                return None  # not answered (or not a text: they may come from another instance)
            w.sql[low] = None if text is None else pool.setdefault(text, text)
        w.listed = sum(1 for v in w.sql.values() if v is not None)
    now = time.time()
    records = {key: _record(plan, key, kind, nodes, now)
               for schema in plan.units for key, kind, nodes in _schema_keys(plan, schema)}
    return LoadResult(plan.scope, records, {n: _outcome(w) for n, w in plan.work.items()},
                      started_at=now, seconds=time.perf_counter() - t0)


async def _run(config: Config, scope: LoadScope, timeout_s: float | None, batch_size: int,
               connections_per_node: int, backend: MetaBackend) -> LoadResult:
    loader = _Loader(config, _plan(config, scope),
                     timeout_s=config.server.backend_timeout_s if timeout_s is None else timeout_s,
                     batch_size=batch_size, connections_per_node=connections_per_node,
                     backend=backend)
    return await loader.run()
