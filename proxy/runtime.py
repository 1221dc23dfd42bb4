"""What the pieces of an instance reach of each other, as narrow Protocols in a leaf module.

The server builds the instance (config, metadata registry, pools, cluster, router, DDL, XA, views,
sequences) and hands it to the sessions and services it makes; the session hands itself and its executor
to the primitives that run its statements. Those pieces name what they use by these Protocols, never by
importing the server, session or executor module: imports flow one way (server -> session -> execution
-> planning -> wire), and none of them runs back up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover - names for type checkers only, all below this module
    import ssl

    from meta.backend_query import PooledMetaBackend
    from meta.config import Config
    from meta.history import DdlHistory
    from meta.registry import Registry
    from zk.cluster import Cluster

    from .analyzer import Grants
    from .backend import BackendConnection, Sink
    from .plan import Plan
    from .pool import Backends
    from .protocol.response import Budget, ResponseScanner
    from .reply import Reply


class Planner(Protocol):
    """Turns one statement into a Plan (proxy.router.Router)."""

    analyzer: Any
    views: Any

    def route(self, sql: str, schema: str | None, grants: Grants | None = None) -> Plan: ...
    def point_read(self, sql: str, schema: str | None, grants: Grants | None = None) -> Any: ...
    def forget(self) -> None: ...
    def _render(self, sql: str, toks: list, strips: tuple) -> str: ...


class Runtime(Protocol):
    """One proxy instance as its sessions and services see it (proxy.server.ProxyServer builds it)."""

    config: Config
    tls: ssl.SSLContext | None
    registry: Registry
    backends: Backends
    meta_backend: PooledMetaBackend
    history: DdlHistory
    cluster: Cluster | None
    router: Planner
    metrics: Any      # proxy.metrics.Metrics
    ddl: Any          # proxy.ddl.DdlRunner
    xa: Any           # proxy.xa.XaCoordinator
    views: Any        # proxy.views.ViewService
    sequences: Any    # proxy.sequence.Sequences
    manager: Any      # proxy.manager.Manager
    kill_channel: Any  # proxy.workers.KillChannel of a `serve --workers N` worker, else None
    sessions: set
    version: str
    max_packet: int
    login_timeout_s: float

    def any_node(self, schema: str | None) -> str: ...
    def node_of_table(self, schema: str, table: str) -> str | None: ...
    def nodes_of_table(self, schema: str, table: str) -> tuple[str, ...]: ...
    def _table_columns(self, schema: str, table: str) -> tuple[str, ...] | None: ...
    async def tables_of(self, schema: str) -> list[str]: ...
    async def run_ddl(self, session: SessionPort, plan: Plan, sql: str, r: Reply, more: bool) -> None: ...
    def next_conn_id(self) -> int: ...
    def track(self, session: Any) -> None: ...
    def untrack(self, session: Any) -> None: ...
    def count_user(self, user: str, delta: int) -> None: ...
    def user_may_connect(self, u: Any) -> bool: ...
    def client_sessions(self) -> int: ...
    def uptime(self) -> float: ...
    async def load_metadata(self) -> None: ...
    async def ddl_in_flight(self) -> list[tuple[str, str, str, str, str, float]]: ...
    async def kill_ddl_lock(self, schema: str, table: str, force: bool = False) -> None: ...
    async def cluster_rows(self) -> list[tuple[object, ...]]: ...


class ClientPort(Protocol):
    """The client connection a session answers on (proxy.session.ClientProtocol)."""

    closed: bool
    write_paused: bool

    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def close(self) -> None: ...


class SessionPort(Protocol):
    """One client session's state, as the statements it runs read and change it (proxy.session.Session)."""

    server: Runtime
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
    vars: dict[str, str]
    last_insert_id: int
    warnings: list[tuple[str, int, str]]
    route: str
    format_flags: int
    deprecate_eof: bool
    log: Any

    def status(self) -> int: ...
    async def statement(self, sql: str, r: Reply, more: bool, may_relay: bool) -> bool: ...


class ExecContext(Protocol):
    """What a plan's primitives run with: the session's backend connections (proxy.executor.Executor)."""

    session: SessionPort
    server: Runtime
    streaming: set
    last_node: str
    relay_sink: Sink | None
    locked: dict[str, BackendConnection]
    locked_tables: Any
    pinned: dict[str, BackendConnection]
    xa: Any           # proxy.xa.XaBranches
    user_locks: Any   # proxy.user_locks.UserLocks
    temp: Any         # proxy.temp_tables.TempTables: the session's temporary tables
    insert_id: int    # while an INSERT whose increment column pydble filled runs: its first value

    async def _get(self, node: str) -> BackendConnection: ...

    async def _get_all(self, nodes: list[str]) -> list[BackendConnection | BaseException]: ...
    def _done_with(self, node: str, conn: BackendConnection) -> None: ...
    def _pinning(self) -> bool: ...
    def _global_only(self, plan: Plan) -> bool: ...
    async def _run_on(self, targets: list[tuple[str, str]], copies: bool = False,
                      keep: list[BackendConnection] | None = None, budget: Budget | None = None
                      ) -> list[ResponseScanner]: ...
    async def keep_warnings(self, done: list[tuple[BackendConnection, object]], copies: bool = False) -> None: ...
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
