"""The proxy instance: listens on the client port, owns config, router, backend pools and sessions."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import TYPE_CHECKING

import structlog

from meta.config import Config, UserConfig
from meta.errors import BackendUnavailable, ProxyError

from .backend import open_connection
from .pool import Backends
from .router import Router
from .session import ClientProtocol, Session

if TYPE_CHECKING:
    from .reply import Reply
    from .router import Plan

log = structlog.get_logger("pydble.server")

DEFAULT_VERSION = "5.7.21-pydble"


class ProxyServer:
    """One pydble instance in single-instance mode (the cluster layer plugs in later)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.backends = Backends(config)
        self.router = Router(config, self._default_tables_cached)
        self.sessions: set[Session] = set()
        self.user_counts: dict[str, int] = {}
        self.version = config.server.version or DEFAULT_VERSION
        self.max_packet = 64 << 20
        self.login_timeout_s = 10.0
        self.started = time.monotonic()
        self._ids = itertools.count(1)
        self._server: asyncio.base_events.Server | None = None
        self._default_tables: dict[str, list[str]] = {}
        self.log = log.bind(instance=config.server.instance)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Learn the backend version, then open the client port."""
        if self.config.server.version is None:
            self.version = await self._backend_version()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: ClientProtocol(self), self.config.server.bind,
                                                self.config.server.port, backlog=1024, reuse_address=True)
        self.log.info("listening", port=self.config.server.port, version=self.version)

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
        if self._server is not None:
            self._server.close()
        for s in list(self.sessions):
            s.client.close()
        self.backends.close()

    # -- sessions -------------------------------------------------------------------------------
    def next_conn_id(self) -> int:
        """Connection ids as clients see them (CONNECTION_ID())."""
        return next(self._ids)

    def track(self, session: Session) -> None:
        self.sessions.add(session)

    def untrack(self, session: Session) -> None:
        if session in self.sessions:
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
        if schema is not None:
            sc = self.config.schemas[schema]
            if sc.default_node:
                return sc.default_node
            nodes = self.config.all_nodes_of_schema(schema)
            if nodes:
                return nodes[0]
        return next(iter(self.config.sharding_nodes))

    def node_of_table(self, schema: str, table: str) -> str | None:
        """One node holding a table (its first node, or the schema's default node)."""
        t = self.config.table(schema, table)
        if t is not None:
            return t.nodes[0]
        return self.config.schemas[schema].default_node

    def _default_tables_cached(self, schema: str) -> list[str]:
        return self._default_tables.get(schema, [])

    async def tables_of(self, schema: str) -> list[str]:
        """What SHOW TABLES lists: configured tables plus the tables found on the default node."""
        tables = list(self.config.schemas[schema].tables)
        default = self.config.schemas[schema].default_node
        if default:
            conn = await self.backends.acquire(default, 0)
            try:
                sc = await conn.query("SHOW FULL TABLES WHERE Table_type='BASE TABLE'", self.backends.timeout_s)
            finally:
                self.backends.release(default, conn)
            found = [row[0].decode() for row in sc.results[0].rows if row[0] is not None]
            self._default_tables[schema] = found
            tables.extend(t for t in found if t.lower() not in self.config.schemas[schema].tables)
        return tables

    # -- DDL ------------------------------------------------------------------------------------
    async def run_ddl(self, session: Session, plan: Plan, sql: str, r: Reply, more: bool) -> None:
        """Run a DDL on every node of its table (metadata locks and refresh come with the meta layer)."""
        scanners = await session.executor.run_everywhere([(t.node, t.sql) for t in plan.targets])
        for t, sc in zip(plan.targets, scanners):
            if sc.error is not None:
                r.error(sc.error.code, sc.error.sqlstate, f"{sc.error.message} (shardingNode {t.node})")
                return
        r.ok(session.status(), more=more)


__all__ = ["ProxyServer", "BackendUnavailable"]
