"""The proxy instance: listens on the client port, owns config, router, backend pools and sessions."""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
from typing import TYPE_CHECKING

import structlog

from meta.config import Config, UserConfig, tls_context
from meta.errors import BackendUnavailable, ProxyError
from meta.backend_query import PooledMetaBackend
from meta.history import DdlHistory
from meta.loader import load_all
from meta.registry import Registry
from zk.cluster import Cluster
from zk.release import ReleaseRefused

from .backend import open_connection
from .ddl import DdlRunner
from .deadlock import DeadlockDetector
from .manager import Manager, ManagerSession
from .metrics import Metrics
from .pool import Backends
from .router import Router
from .sequence import Sequences
from .session import ClientProtocol, Session, kill_session
from .sqltok import set_server_version
from .xa import XaCoordinator
from .views import ViewService
from .workers import KillChannel, WorkerInfo

if TYPE_CHECKING:
    from .reply import Reply
    from .plan import Plan

log = structlog.get_logger("pydble.server")

DEFAULT_VERSION = "5.7.21-pydble"


class ProxyServer:
    """One pydble instance in single-instance mode (the cluster layer plugs in later)."""

    def __init__(self, config: Config, worker: WorkerInfo | None = None) -> None:
        self.config = config
        self.worker = worker   # one of `serve --workers N`: its connection ids, KILL across workers
        self.kill_channel: KillChannel | None = None
        self.tls = tls_context(config.server)  # TLS on the client port, when configured
        self.backends = Backends(config)
        self.registry = Registry(config)
        self.meta_backend = PooledMetaBackend()
        self.history = DdlHistory(config.server.data_dir or None)
        self.metrics = Metrics(self)
        self.router = Router(config, self.registry.tables_of, self._table_columns)
        self.ddl = DdlRunner(self)
        self.manager = Manager(self)
        self.cluster: Cluster | None = None
        if config.cluster is not None:
            self.cluster = Cluster(config, self.registry, self.ddl.locks, self.load_metadata, self.ddl.refresh,
                                   self.ddl.refresh_now, self.ddl.running)
        self.xa = XaCoordinator(self)
        self.views = ViewService(self)
        self.sequences = Sequences(self)   # after the cluster: ZooKeeper holds them there
        self.sessions: set[Session] = set()   # the client port's
        self.manager_sessions: set[ManagerSession] = set()
        self.deadlocks = DeadlockDetector(self)
        self.user_counts: dict[str, int] = {}
        self.version = config.server.version or DEFAULT_VERSION
        set_server_version(self.version)
        self.max_packet = config.server.max_allowed_packet
        self.login_timeout_s = 10.0
        self.started = time.monotonic()
        self._ids = itertools.count(1)
        self._servers: list[asyncio.base_events.Server] = []
        self.log = log.bind(instance=config.server.instance)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Learn the backend version, load every table's metadata, then open both ports."""
        _big_buffers_return_to_the_os()
        nofile = _open_files_to_the_hard_limit()
        if nofile < self.config.server.max_connections + 1024:
            self.log.warning("the open files limit is below max_connections: clients past it are refused by the OS",
                             nofile=nofile, max_connections=self.config.server.max_connections)
        if self.config.server.version is None:
            self.version = await self._backend_version()
            set_server_version(self.version)
        if self.cluster is not None:
            await self.cluster.start()  # loads metadata under syncMeta.lock
        else:
            await self.load_metadata()
        await self.xa.start()   # in-doubt XA branches a crash left are finished before clients come
        await self.views.start()   # every view known before the first client is served
        # Start-up objects (modules, config, the first metadata) live for the whole run: keep the
        # cyclic GC from rescanning them, or each full collection stalls every query (~100 ms).
        gc.collect()
        gc.freeze()
        if self.worker is not None:
            self.kill_channel = KillChannel(self.worker, lambda cid, user, admin, query: kill_session(
                self, cid, user, admin, query))
            await self.kill_channel.start()
        loop = asyncio.get_running_loop()
        srv = self.config.server
        # a backlog as deep as max_connections (the kernel caps it at net.core.somaxconn): clients connecting
        # all at once (a pool's start, a restart) wait in the queue instead of retrying their SYN a second later
        backlog = min(max(1024, srv.max_connections), 65535)
        self._servers.append(await loop.create_server(lambda: ClientProtocol(self), srv.bind, srv.port,
                                                      backlog=backlog, reuse_address=True, reuse_port=srv.reuse_port))
        self._servers.append(await loop.create_server(lambda: ClientProtocol(self, ManagerSession), srv.bind,
                                                      srv.manager_port, backlog=128, reuse_address=True))
        self.deadlocks.start()
        if srv.metrics_port:
            self.metrics.serve(srv.bind, srv.metrics_port)
        self.log.info("listening", port=srv.port, manager_port=srv.manager_port, metrics_port=srv.metrics_port or None,
                      version=self.version)

    async def load_metadata(self) -> None:
        """Load all tables from every shardingNode; nodes that fail are logged, never fatal."""
        result = await load_all(self.config, backend=self.meta_backend)
        self.registry.apply(result)
        self.metrics.meta_load_seconds.labels("all").observe(result.seconds)
        self.log.info("metadata loaded", tables=len(result.tables), seconds=round(result.seconds, 3),
                      failed_nodes=result.failed_nodes or None)

    async def _backend_version(self) -> str:
        """The first reachable backend's version string, so drivers see a real server version."""
        for g in self.config.db_groups.values():
            try:
                conn = await open_connection(g, 0, None)
            except ProxyError as e:
                self.log.warning("backend unreachable at start", db_group=g.name, error=e.message)
                continue
            conn.close()
            return conn.server_version
        return DEFAULT_VERSION

    async def stop(self) -> None:
        """Stop listening, close every session and pool."""
        for srv in self._servers:
            srv.close()
        if self.kill_channel is not None:
            self.kill_channel.close()
        self.deadlocks.stop()
        for s in [*self.sessions, *self.manager_sessions]:
            s.client.close()
        await self.ddl.stop()
        await self.xa.stop()
        if self.cluster is not None:
            await self.cluster.stop()
        self.ddl.later.flush()
        self.backends.close()
        self.meta_backend.close()
        await asyncio.to_thread(self.history.close)

    # -- sessions -------------------------------------------------------------------------------
    def next_conn_id(self) -> int:
        """Connection ids as clients see them (CONNECTION_ID()); a worker's carry its index (KILL finds it)."""
        if self.worker is None:
            return next(self._ids)
        return self.worker.conn_id(next(self._ids), lambda: {s.conn_id for s in (*self.sessions,
                                                                                 *self.manager_sessions)})

    def track(self, session: Session | ManagerSession) -> None:
        if isinstance(session, ManagerSession):
            self.manager_sessions.add(session)
        else:
            self.sessions.add(session)

    def client_sessions(self) -> int:
        """Open client-port sessions (the manager port does not count against max_connections)."""
        return len(self.sessions)

    def untrack(self, session: Session | ManagerSession) -> None:
        if isinstance(session, ManagerSession):
            self.manager_sessions.discard(session)
        elif session in self.sessions:
            self.sessions.discard(session)
            if session.user:
                self.count_user(session.user, -1)

    def count_user(self, user: str, delta: int) -> None:
        self.user_counts[user] = self.user_counts.get(user, 0) + delta

    def user_may_connect(self, u: UserConfig) -> bool:
        """Per-user max_con (0 = unlimited)."""
        return not u.max_con or self.user_counts.get(u.name, 0) < u.max_con

    def uptime(self) -> float:
        return time.monotonic() - self.started

    # -- knowledge of tables --------------------------------------------------------------------
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
        return self.config.schemas[schema].default_node

    def nodes_of_table(self, schema: str, table: str) -> tuple[str, ...]:
        """Every node holding a table (its configured nodes, or the schema's default node)."""
        t = self.config.table(schema, table)
        if t is not None:
            return tuple(t.nodes)
        node = self.config.schemas[schema].default_node
        return (node,) if node is not None else ()

    def _table_columns(self, schema: str, table: str) -> tuple[str, ...] | None:
        """Column order from memory, for INSERTs without a column list."""
        meta = self.registry.get(schema, table)
        parsed = meta.parsed if meta is not None else None
        return parsed.column_names if parsed is not None else None

    async def tables_of(self, schema: str) -> list[str]:
        """What SHOW TABLES lists, from memory: configured tables plus those found on the default node."""
        return self.registry.tables_of(schema)

    # -- DDL ------------------------------------------------------------------------------------
    async def run_ddl(self, session: Session, plan: Plan, sql: str, r: Reply, more: bool) -> None:
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


__all__ = ["ProxyServer", "BackendUnavailable"]


def _open_files_to_the_hard_limit() -> int:
    """Every client and backend connection is a descriptor: the soft RLIMIT_NOFILE (often 1024) would
    refuse clients long before max_connections, so it is raised to the hard limit; the limit now."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    want = 1 << 20 if hard == resource.RLIM_INFINITY else hard   # Linux refuses more than nr_open anyway
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass   # capped lower (nr_open): keep what we have
    return soft


def _big_buffers_return_to_the_os() -> None:
    """glibc serves large blocks from its heap once a big one was freed (a dynamic mmap threshold), and
    that heap is rarely given back: the packet buffers of attackers that left would stay resident. A
    fixed threshold keeps blocks over 256 KB in their own mappings, returned to the OS when freed."""
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt(-3, 256 * 1024)   # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass  # not glibc: nothing to tune
