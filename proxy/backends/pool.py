"""Bounded connection pools, one per dbGroup, handing out connections per shardingNode."""

from __future__ import annotations

import asyncio
import time
from collections import deque

import structlog

from meta.config import Config, DbGroupConfig
from meta.errors import BackendError, BackendUnavailable, ProxyError

from proxy.backends.backend import BackendConnection, open_connection
from proxy.backends.names import GroupNames, group_names

log = structlog.get_logger("pydble.pool")

# Point reads of sessions in autocommit share a few connections per dbGroup, pipelined (issue 20): one
# write to the backend and one read back carry several sessions' queries, and one MariaDB thread serves
# them in turn instead of a wake-up per query. Past these bounds a point read takes a connection of its own.
SHARED_CONNS = 2      # shared connections per dbGroup and format flags
SHARED_DEPTH = 16     # point reads in flight on one shared connection
SHARED_STALL_S = 0.1  # a shared connection with no answer for this long takes no more reads (one read
                      # waiting for a lock must not hold up other sessions' reads behind it)


class GroupPool:
    """At most max_con connections to one dbGroup; idle ones kept per (flags, database)."""

    def __init__(self, group: DbGroupConfig, acquire_timeout_s: float, names: GroupNames | None = None) -> None:
        self.group = group
        self.names = names   # given to every connection: clients see logical schema names
        self.acquire_timeout_s = acquire_timeout_s
        self.idle: dict[tuple[int, str | None], list[BackendConnection]] = {}
        self.total = 0
        self.in_use = 0
        self._waiters: deque[asyncio.Future] = deque()
        self.closed = False
        self.shared: list[BackendConnection] = []   # leased for good while they last (shared_conn)

    def _pop_idle(self, flags: int, database: str | None, exact: bool = False) -> BackendConnection | None:
        """An idle connection for (flags, database); unless exact, one of another database will do."""
        lst = self.idle.get((flags, database))
        while lst:
            conn = lst.pop()
            if not conn.broken:
                return conn
            self.total -= 1
        if exact:
            return None
        for (f, _db), lst in self.idle.items():
            if f != flags:
                continue
            while lst:
                conn = lst.pop()
                if not conn.broken:
                    return conn
                self.total -= 1
        return None

    def _drop_one_idle(self) -> bool:
        """Close an idle connection of other flags to make room for a new one."""
        for lst in self.idle.values():
            while lst:
                conn = lst.pop()
                self.total -= 1
                if not conn.broken:
                    conn.close()
                    return True
        return False

    async def acquire(self, flags: int, database: str | None) -> BackendConnection:
        """A connection with the given format flags, waiting (bounded) when max_con are in use."""
        if self.closed:
            raise BackendUnavailable(f"dbGroup[{self.group.name}] pool is closed")
        # Same database first; below max_con a new connection beats reusing one of another database,
        # which would cost a COM_INIT_DB round trip on every switch between shardingNodes.
        conn = self._pop_idle(flags, database, exact=self.total < self.group.max_con)
        if conn is not None:
            self.in_use += 1
            conn.leased = True
            return conn
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.acquire_timeout_s
        while True:
            below = self.total < self.group.max_con
            conn = self._pop_idle(flags, database, exact=below)
            if conn is not None:
                self.in_use += 1
                conn.leased = True
                return conn
            if below or self._drop_one_idle():
                self.total += 1
                try:
                    conn = await open_connection(self.group, flags, database)
                    conn.names = self.names
                except BaseException:
                    self.total -= 1
                    self._wake()
                    raise
                self.in_use += 1
                conn.leased = True
                return conn
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ProxyError(f"no free connection to dbGroup[{self.group.name}]: all max_con="
                                 f"{self.group.max_con} in use for {self.acquire_timeout_s:g}s", 1040, "08004")
            fut = loop.create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except asyncio.TimeoutError:
                pass
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)

    def release(self, conn: BackendConnection) -> None:
        """Give a connection back; broken or busy ones are closed instead. Twice is once (a session
        torn down while a command is in flight may release it from both ends); a held one stays out."""
        if not conn.leased or conn.held:
            return   # (held: a session's temporary tables are on it; it gives it back once they are gone)
        conn.leased = False
        self.in_use -= 1
        if conn.broken or conn.busy or self.closed or conn.in_trans:
            if not conn.broken:
                conn.close()
            self.total -= 1
        else:
            key = (conn.flags, conn.database)
            lst = self.idle.get(key)
            if lst is None:
                self.idle[key] = [conn]
            else:
                lst.append(conn)
        if self._waiters:
            self._wake()

    def _wake(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def shared_conn(self, flags: int, vars: dict[str, str]) -> BackendConnection | None:
        """A shared connection (BackendConnection.pipe) in this session state with room for one more
        point read: the first that has room, so one loop turn's reads go out together; an idle one is
        made shared when all are full. None: the caller takes a connection of its own."""
        now = time.monotonic()
        for conn in self.shared:
            n = conn.in_flight
            if (conn.flags == flags and n < SHARED_DEPTH and conn.vars == vars and not conn.broken
                    and (not n or now - conn.progress < SHARED_STALL_S)):
                return conn
        for conn in [c for c in self.shared if c.broken]:   # a failed one has nothing in flight
            self.shared.remove(conn)
            self.release(conn)   # closed: it leaves max_con's count
        if len(self.shared) >= SHARED_CONNS or self.closed:
            return None
        conn = self._pop_idle(flags, None)
        if conn is None:
            return None
        self.in_use += 1
        conn.leased = True
        if conn.vars != vars or not conn.autocommit or conn.in_trans:
            self.release(conn)
            return None
        conn.shared = True
        self.shared.append(conn)
        return conn

    def close(self) -> None:
        """Close every idle connection and refuse new acquisitions."""
        self.closed = True
        for conn in self.shared:   # the reads in flight fail; their sessions answer the error
            conn.close()
        for lst in self.idle.values():
            for conn in lst:
                conn.close()
        self.idle.clear()

    def stats(self) -> dict[str, int]:
        """Pool use, for `show @@backend` and metrics."""
        return {"total": self.total, "in_use": self.in_use,
                "idle": sum(len(v) for v in self.idle.values()), "waiting": len(self._waiters)}


class Backends:
    """All dbGroup pools of an instance, addressed by shardingNode name."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.timeout_s = config.server.backend_timeout_s
        # a session waits for a free connection at most twice the connect bound (10 s by default)
        names = group_names(config)
        self.pools = {name: GroupPool(g, acquire_timeout_s=2 * g.connect_timeout_s, names=names[name])
                      for name, g in config.db_groups.items()}
        self._nodes = {name: (self.pools[sn.db_group], sn.database) for name, sn in config.sharding_nodes.items()}

    def pool_of(self, node: str) -> GroupPool:
        """The pool of a shardingNode's dbGroup."""
        return self.pools[self.config.sharding_nodes[node].db_group]

    async def acquire(self, node: str, flags: int) -> BackendConnection:
        """A connection to a shardingNode, with its database selected; errors name the node."""
        sn = self.config.sharding_nodes[node]
        pool = self.pools[sn.db_group]
        try:
            conn = await pool.acquire(flags, sn.database)
        except BackendUnavailable as e:
            raise BackendUnavailable(f"shardingNode[{node}] is unavailable: {e.message}") from None
        except BackendError as e:
            raise BackendUnavailable(f"shardingNode[{node}] refused the login: {e.message}") from None
        if conn.database != sn.database:
            try:
                await conn.use(sn.database, self.timeout_s)
            except ProxyError as e:
                pool.release(conn)
                log.warning("shardingNode cannot use its database", node=node, database=sn.database, error=e.message)
                raise BackendUnavailable(f"shardingNode[{node}] cannot use its database (backend error "
                                         f"{e.code}; the proxy's log names it)") from None
        return conn

    def take_idle(self, node: str, flags: int, any_db: bool = False) -> BackendConnection | None:
        """An idle connection already on the node's database (any_db: on any database of its dbGroup),
        or None: never waits, never connects."""
        pool, database = self._nodes[node]
        if pool.closed:
            return None
        conn = pool._pop_idle(flags, database, exact=not any_db)
        if conn is not None:
            pool.in_use += 1
            conn.leased = True
        return conn

    def shared_conn(self, node: str, flags: int, vars: dict[str, str]) -> BackendConnection | None:
        """A shared connection of the node's dbGroup for a point read naming its database (GroupPool.shared_conn)."""
        return self._nodes[node][0].shared_conn(flags, vars)

    def database_of(self, node: str) -> str:
        """The physical database of a shardingNode."""
        return self._nodes[node][1]

    def release(self, node: str, conn: BackendConnection) -> None:
        """Return a connection acquired for a shardingNode."""
        self._nodes[node][0].release(conn)

    def close(self) -> None:
        """Close every pool."""
        for p in self.pools.values():
            p.close()
