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


def _expire(fut: asyncio.Future) -> None:
    """A waiter's time is up: it wakes with nothing."""
    if not fut.done():
        fut.set_result(None)


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
        # at most a quarter of max_con: shared connections never go back, and a pool they filled would
        # leave transactions, DDL and sessions with their own state waiting for ever (none below max_con 4)
        self.shared_max = min(SHARED_CONNS, group.max_con // 4)
        self.out: set[BackendConnection] = set()     # leased: what the deadlock detector looks at first
        self.gathering = asyncio.Lock()   # held by a statement taking several connections (Executor._get_all)

    def _lease(self, conn: BackendConnection) -> BackendConnection:
        """Hand a connection out."""
        self.in_use += 1
        conn.leased = True
        self.out.add(conn)
        return conn

    def waits_longer(self, seconds: float, now: float) -> bool:
        """True when a leased connection has been running one command for longer than seconds (a lock
        wait, maybe): found without looking at every session."""
        return any(c.busy and now - c.last_used > seconds for c in self.out)

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
            return self._lease(conn)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.acquire_timeout_s
        while True:
            if self.closed:
                raise BackendUnavailable(f"dbGroup[{self.group.name}] pool is closed")
            below = self.total < self.group.max_con
            conn = self._pop_idle(flags, database, exact=below)
            if conn is not None:
                return self._lease(conn)
            if below or self._drop_one_idle():
                self.total += 1
                try:
                    conn = await open_connection(self.group, flags, database)
                    conn.names = self.names
                except BaseException:
                    self.total -= 1
                    self._wake()
                    raise
                return self._lease(conn)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ProxyError(f"no free connection to dbGroup[{self.group.name}]: all max_con="
                                 f"{self.group.max_con} in use for {self.acquire_timeout_s:g}s", 1040, "08004")
            # In line: release() hands a connection to the longest waiting session, so under thousands of
            # waiters none is overtaken again and again until its timeout. (No removal from the queue
            # here: finding a future in a deque of thousands, for every waiter, is quadratic; release()
            # skips the ones that are done.)
            fut: asyncio.Future = loop.create_future()
            self._waiters.append(fut)
            timer = loop.call_later(remaining, _expire, fut)
            try:
                conn = await fut
            except BaseException:   # cancelled (the session went away) just as a connection was handed over
                if fut.done() and not fut.cancelled() and fut.result() is not None:
                    self.release(fut.result())
                raise
            finally:
                timer.cancel()
            if conn is None:
                continue   # a slot came free (a connection was closed), or the wait expired: look again
            if conn.flags != flags:   # handed over in other format flags: its slot makes one in ours
                self._discard(conn)
                continue
            return conn

    def _discard(self, conn: BackendConnection) -> None:
        """Close a leased connection and free its slot."""
        conn.leased = False
        self.in_use -= 1
        self.out.discard(conn)
        self.total -= 1
        conn.close()

    def release(self, conn: BackendConnection) -> None:
        """Give a connection back: to the longest waiting session if any, else to the idle ones; broken,
        busy or tainted ones are closed instead (no other session may see what they hold). Twice is once
        (a session torn down while a command is in flight may release it from both ends); a held one
        stays out."""
        if not conn.leased or conn.held:
            return   # (held: a session's temporary tables are on it; it gives it back once they are gone)
        if conn.broken or conn.busy or self.closed or conn.in_trans or conn.tainted:
            conn.leased = False
            self.in_use -= 1
            self.out.discard(conn)
            if not conn.broken:
                conn.close()
            self.total -= 1
            self._wake()   # its slot is free: the first waiter opens a new one
            return
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(conn)   # still leased: it goes from one session to the next
                return
        conn.leased = False
        self.in_use -= 1
        self.out.discard(conn)
        key = (conn.flags, conn.database)
        lst = self.idle.get(key)
        if lst is None:
            self.idle[key] = [conn]
        else:
            lst.append(conn)

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
        if len(self.shared) >= self.shared_max or self.closed:
            return None
        conn = self._pop_idle(flags, None)
        if conn is None:
            return None
        self._lease(conn)
        if conn.vars != vars or not conn.autocommit or conn.in_trans:
            self.release(conn)
            return None
        conn.shared = True
        self.shared.append(conn)
        return conn

    def close(self) -> None:
        """Close every idle connection and refuse new acquisitions."""
        self.closed = True
        while self._waiters:   # they find the pool closed
            self._wake()
        for conn in self.shared:   # the reads in flight fail; their sessions answer the error
            conn.close()
        for lst in self.idle.values():
            for conn in lst:
                conn.close()
        self.idle.clear()

    def stats(self) -> dict[str, int]:
        """Pool use, for `show @@backend` and metrics."""
        return {"total": self.total, "in_use": self.in_use,
                "idle": sum(len(v) for v in self.idle.values()),
                "waiting": sum(1 for f in self._waiters if not f.done())}


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
        return pool._lease(conn) if conn is not None else None

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
