"""The runtime of one instance and what the pieces of it reach of each other.

`Runtime` owns config, metadata registry, backend pools, cluster handle and the services built over them
(router, DDL, XA, views, sequences, manager); proxy.server.assemble builds it, and the server, which only
accepts connections and starts and stops things, hands it to each session. The session hands itself and
its executor to the primitives that run its statements; those name what they use by the narrow Protocols
below, never by importing the session or executor module: imports flow one way (server -> manager ->
session -> exec -> ddl -> runtime -> plan -> backends -> wire), and none of them runs back up. This
module names only plan, backends and wire, for types.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Protocol

import structlog

from meta.errors import ProxyError
from meta.loader import load_all
from zk.release import ReleaseRefused

if TYPE_CHECKING:  # pragma: no cover - names for type checkers only, all below this module
    import ssl

    from proxy.backends.meta_link import MetaLink
    from meta.config import Config, UserConfig
    from meta.history import DdlHistory
    from meta.registry import Registry
    from zk.cluster import Cluster

    from proxy.plan.analyzer import Grants
    from proxy.backends.backend import BackendConnection, Sink
    from proxy.plan.plan import Plan
    from proxy.backends.pool import Backends
    from proxy.wire.response import Budget, ResponseScanner
    from proxy.wire.reply import Reply

log = structlog.get_logger("pydble.server")

DEFAULT_VERSION = "5.7.21-pydble"


class Planner(Protocol):
    """Turns one statement into a Plan (proxy.plan.router.Router)."""

    analyzer: Any
    views: Any

    def route(self, sql: str, schema: str | None, grants: Grants | None = None) -> Plan: ...
    generation: int

    def point_read(self, sql: str, schema: str | None, grants: Grants | None = None) -> Any: ...
    def point(self, sql: str, schema: str | None, grants: Grants | None = None) -> Any: ...
    def point_match(self, sql: str, schema: str | None) -> Any: ...
    def forget(self) -> None: ...
    def _render(self, sql: str, toks: list, strips: tuple) -> str: ...


@dataclass(eq=False)
class Runtime:
    """One proxy instance's parts, owned in one place: proxy.server.assemble builds it, the server hands it to
    every session it accepts (client and manager port); sessions and services take from it what they use."""

    config: Config
    registry: Registry
    backends: Backends
    meta_backend: MetaLink
    history: DdlHistory
    tls: ssl.SSLContext | None = None
    version: str = DEFAULT_VERSION
    # built over the parts above, each given the runtime it belongs to (set once by proxy.server.assemble);
    # named by their modules, which sit above this one
    router: Planner = None          # type: ignore[assignment]  # proxy.plan.router.Router
    metrics: Any = None             # proxy.metrics.Metrics
    ddl: Any = None                 # proxy.ddl.ddl.DdlRunner
    cluster: Cluster | None = None  # absent: single-instance mode
    xa: Any = None                  # proxy.exec.xa.XaCoordinator
    views: Any = None               # proxy.session.views.ViewService
    sequences: Any = None           # proxy.exec.sequence.Sequences
    manager: Any = None             # proxy.manager.manager.Manager
    worker: Any = None              # proxy.workers.WorkerInfo of a `serve --workers N` worker, else None
    kill_channel: Any = None        # proxy.workers.KillChannel of such a worker (KILL across workers)
    sessions: set = field(default_factory=set)           # the client port's
    manager_sessions: set = field(default_factory=set)   # the manager port's
    user_counts: dict[str, int] = field(default_factory=dict)
    login_timeout_s: float = 10.0
    started: float = field(default_factory=time.monotonic)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def max_packet(self) -> int:
        return self.config.server.max_allowed_packet

    @property
    def log(self) -> Any:
        return log.bind(instance=self.config.server.instance)

    # -- sessions -------------------------------------------------------------------------------
    def next_conn_id(self) -> int:
        """Connection ids as clients see them (CONNECTION_ID()); a worker's carry its index (KILL finds it)."""
        if self.worker is None:
            return next(self._ids)
        return self.worker.conn_id(next(self._ids), lambda: {s.conn_id for s in (*self.sessions,
                                                                                 *self.manager_sessions)})

    def track(self, session: Any) -> None:
        """A session the port just made (a manager-port session says so: `manager_port`)."""
        (self.manager_sessions if getattr(session, "manager_port", False) else self.sessions).add(session)

    def untrack(self, session: Any) -> None:
        if getattr(session, "manager_port", False):
            self.manager_sessions.discard(session)
        elif session in self.sessions:
            self.sessions.discard(session)
            if session.user:
                self.count_user(session.user, -1)

    def client_sessions(self) -> int:
        """Open client-port sessions (the manager port does not count against max_connections)."""
        return len(self.sessions)

    def count_user(self, user: str, delta: int) -> None:
        self.user_counts[user] = self.user_counts.get(user, 0) + delta

    def user_may_connect(self, u: UserConfig) -> bool:
        """Per-user max_con (0 = unlimited)."""
        return not u.max_con or self.user_counts.get(u.name, 0) < u.max_con

    def uptime(self) -> float:
        return time.monotonic() - self.started

    # -- knowledge of tables --------------------------------------------------------------------
    async def load_metadata(self) -> None:
        """Load all tables from every shardingNode; nodes that fail are logged, never fatal."""
        result = await load_all(self.config, backend=self.meta_backend)
        self.registry.apply(result)
        self.metrics.meta_load_seconds.labels("all").observe(result.seconds)
        self.log.info("metadata loaded", tables=len(result.tables), seconds=round(result.seconds, 3),
                      failed_nodes=result.failed_nodes or None)

    def any_node(self, schema: str | None) -> str:
        """A node to run schema-less statements on: the schema's default node, else its first node."""
        node = self.config.home_node(schema)
        if node is None:
            raise ProxyError("no shardingNode is configured", 1105, "HY000")
        return node

    def node_of_table(self, schema: str, table: str) -> str | None:
        """One node holding a table (its first node, or the schema's default node)."""
        t = self.config.table(schema, table)
        if t is not None:
            return t.nodes[0]
        return self.config.default_home(schema, table)

    def nodes_of_table(self, schema: str, table: str) -> tuple[str, ...]:
        """Every node holding a table (its configured nodes, or the schema's default node)."""
        t = self.config.table(schema, table)
        if t is not None:
            return tuple(t.nodes)
        node = self.config.default_home(schema, table)
        return (node,) if node is not None else ()

    def table_columns(self, schema: str, table: str) -> tuple[str, ...] | None:
        """Column order from memory, for INSERTs without a column list; a configured table memory
        cannot route raises its own error (1146 on no node, 3009) rather than leaving a 1235 to guess."""
        meta = self.registry.get(schema, table)
        if meta is None and self.config.table(schema, table) is not None:
            err = self.registry.unusable(schema, table)
            if err is not None:
                raise err
        parsed = meta.parsed if meta is not None else None
        return parsed.column_names if parsed is not None else None

    async def tables_of(self, schema: str) -> list[str]:
        """What SHOW TABLES lists, from memory: configured tables plus those found on the default node."""
        return self.registry.tables_of(schema)

    # -- DDL ------------------------------------------------------------------------------------
    async def run_ddl(self, session: SessionPort, plan: Plan, sql: str, r: Reply, more: bool) -> None:
        """DDL goes through the per-table lock and ends with the metadata refreshed."""
        await self.ddl.run(session, plan, sql, r, more)

    async def ddl_in_flight(self) -> list[tuple[str, str, str, str, str, float]]:
        """DDLs running now in the whole cluster: (schema, table, sql, instance, phase, since)."""
        rows = {(lk.schema, lk.table): (lk.schema, lk.table, lk.sql, lk.instance, lk.phase, lk.since)
                for lk in self.ddl.locks.all()}
        if self.cluster is not None:
            for row in await self.cluster.ddl_rows():
                rows[(row[0], row[1])] = row
        return sorted(rows.values(), key=lambda r: r[5])

    async def kill_ddl_lock(self, schema: str, table: str, force: bool = False) -> None:
        """Operator release of a table's DDL lock, here and in the cluster. Refused while this instance's
        own DDL holds it; in a cluster zk/release.py decides (the procedure `pydble ddl release` runs:
        refused while the holder is online or the DDL still runs on a node unless `force`, which stops it
        on the nodes first and makes every instance reload the table)."""
        lk = self.ddl.locks.get(schema, table)
        if not force and lk is not None and lk.instance == self.config.server.instance:
            raise ProxyError(f"refusing to release {schema}.{table}: its DDL belongs to online instance(s) "
                             f"{lk.instance}; wait for it, or add `force`", 1105, "HY000")
        if self.cluster is not None:
            try:
                await self.cluster.release_table(schema, table, force)   # refused: nothing is released
            except ReleaseRefused as e:
                raise ProxyError(e.message, 1105, "HY000") from None
        released = self.ddl.locks.release(schema, table)
        if self.cluster is None and not released:
            raise ProxyError(f"there is no ddl lock on {schema}.{table}", 1105, "HY000")
        self.log.warning("ddl lock released by operator", table=f"{schema}.{table}")

    async def cluster_rows(self) -> list[tuple[object, ...]]:
        """`show @@cluster`: every online instance (just this one without a cluster)."""
        if self.cluster is not None:
            return list(await self.cluster.instance_rows())
        srv = self.config.server
        return [(srv.instance, f"{srv.bind}:{srv.port}", self.registry.version, "standalone")]


class ClientPort(Protocol):
    """The client connection a session answers on (proxy.session.session.ClientProtocol)."""

    closed: bool
    write_paused: bool

    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def close(self) -> None: ...


class SessionPort(Protocol):
    """One client session's state, as the statements it runs read and change it (proxy.session.session.Session)."""

    runtime: Runtime
    client: ClientPort
    executor: ExecContext
    prepared: Any
    conn_id: int
    user: str
    peer: str
    schema: str | None
    schemas: tuple[str, ...]
    grants: Grants | None
    read_only: bool
    admin: bool
    autocommit: bool
    explicit_txn: bool
    xa: bool
    txn_chars: list[str]
    txn_snapshot: bool
    vars: dict[str, str]
    last_insert_id: int
    row_count: int | None
    warnings: list[tuple[str, int, str]]
    route: str
    requests: int
    killed: bool
    command: str
    info: str | None
    since: float
    format_flags: int
    deprecate_eof: bool
    log: Any

    def status(self) -> int: ...
    def sees(self, schema: str, table: str) -> bool: ...
    async def statement(self, sql: str, r: Reply, more: bool, may_relay: bool) -> bool: ...
    def refuse_misread(self, sql: str) -> None: ...


class ExecContext(Protocol):
    """What a plan's primitives run with: the session's backend connections (proxy.exec.executor.Executor)."""

    session: SessionPort
    runtime: Runtime
    streaming: set
    last_node: str
    relay_sink: Sink | None
    locked: dict[str, BackendConnection]
    locked_tables: Any
    pinned: dict[str, BackendConnection]
    xa: Any           # proxy.exec.xa.XaBranches
    user_locks: Any   # proxy.exec.user_locks.UserLocks
    temp: Any         # proxy.exec.temp_tables.TempTables: the session's temporary tables
    insert_id: int    # while an INSERT whose increment column pydble filled runs: its first value
    node_warnings: list[list[tuple[str, int, str]]]   # keep_warnings': each node's, in its order

    async def _get(self, node: str) -> BackendConnection: ...
    def _done_with(self, node: str, conn: BackendConnection) -> None: ...
    def _pinning(self) -> bool: ...
    def _global_only(self, plan: Plan) -> bool: ...
    async def _run_on(self, targets: list[tuple[str, str]], copies: bool = False,
                      keep: list[BackendConnection] | None = None, budget: Budget | None = None
                      ) -> list[ResponseScanner]: ...
    async def keep_warnings(self, done: list[tuple[BackendConnection, object]], copies: bool = False) -> None: ...
    def start_single(self, node: str, packet: bytes, sink: Sink | None, any_db: bool, shared: bool, shown: str,
                     key_execute: tuple[str, int] | None = None) -> bool: ...
    async def run_single(self, node: str, packet: bytes, r: Reply, more: bool, may_relay: bool,
                         kind: str = "query", conn: BackendConnection | None = None, rewrite: Any = None,
                         timeout: float | None = None) -> bool: ...
    def add_results(self, sc: ResponseScanner, r: Reply, more: bool) -> None: ...
    async def _write_all_or_nothing(self, targets: list[tuple[str, str]], copies: bool = False
                                    ) -> list[ResponseScanner]: ...
    async def commit_all(self) -> None: ...
    def check_locked(self, plan: Plan) -> None: ...
    def _columns_of(self, table: str) -> frozenset[str] | None: ...
    async def _select_insert_id(self, plan: Plan, sql: str, r: Reply, more: bool) -> None: ...
