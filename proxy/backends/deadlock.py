"""Deadlocks that span shardingNodes: no single InnoDB sees the cycle, so pydble looks for it.

Two transactions that each hold a row on one node and wait for the other's row on another node wait
on both nodes until innodb_lock_wait_timeout (50 s by default), where one MariaDB would have found
the deadlock at once and answered 1213; so do two shardingNodes on one server, which are two
transactions to its InnoDB. While a statement of an open transaction has waited longer
than WAIT_S, the detector asks each server concerned which transactions block which
(information_schema.INNODB_LOCK_WAITS), maps the backend connections to pydble sessions, and when the
waits form a cycle across sessions it interrupts the youngest waiter (KILL QUERY ID): that session gets
1213 and its transaction is rolled back on every node, exactly what InnoDB does to its victim.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import structlog

from meta.errors import ProxyError

from proxy.backends.backend import BackendConnection

if TYPE_CHECKING:
    from meta.config import Config

    from proxy.backends.pool import Backends

log = structlog.get_logger("pydble.deadlock")

WAIT_S = 0.2        # a statement of an open transaction waiting longer than this is looked at
PERIOD_S = 0.2      # how often the detector looks while anything waits that long

# waiting thread, blocking thread, and the waiting statement's query id (KILL QUERY ID interrupts that
# statement only, never a later one of the same connection)
LOCK_WAITS_SQL = ("SELECT r.trx_mysql_thread_id, b.trx_mysql_thread_id, p.QUERY_ID "
                  "FROM information_schema.INNODB_LOCK_WAITS w "
                  "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "
                  "JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id "
                  "JOIN information_schema.PROCESSLIST p ON p.ID = r.trx_mysql_thread_id")

Key = tuple[str, int]   # (dbGroup, backend thread id)


def find_cycle(edges: dict[int, set[int]]) -> list[int]:
    """One cycle of the wait-for graph (session ids), or [] when there is none."""
    state: dict[int, int] = {}   # 1 on the current path, 2 done
    path: list[int] = []

    def visit(n: int) -> list[int]:
        state[n] = 1
        path.append(n)
        for m in edges.get(n, ()):
            if state.get(m) == 1:
                return path[path.index(m):]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        state[n] = 2
        path.pop()
        return []

    for n in list(edges):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return []


def _innodb_sees(cycle: list[int], via: dict[tuple[int, int], set[tuple[BackendConnection, BackendConnection]]]
                 ) -> bool:
    """True when the cycle goes through one backend connection per session: then it is a cycle of one
    server's transactions, which its InnoDB finds and breaks itself. A session holding two connections
    to one server (two shardingNodes there) is two transactions to InnoDB, so a cycle through both is
    as invisible to it as one across servers."""
    used: dict[int, set[BackendConnection]] = {}
    for a, b in zip(cycle, cycle[1:] + cycle[:1]):
        for wc, bc in via[(a, b)]:
            used.setdefault(a, set()).add(wc)
            used.setdefault(b, set()).add(bc)
    return all(len(c) == 1 for c in used.values())


class DeadlockDetector:
    """Looks for wait cycles across backends while some transaction's statement waits; one per proxy."""

    def __init__(self, sessions: set, backends: Backends, config: Config) -> None:
        self.sessions = sessions   # the client port's (the runtime's live set)
        self.backends = backends
        self.config = config
        self._task: asyncio.Task | None = None
        self._unsupported: set[str] = set()   # dbGroups whose lock waits cannot be read (privilege)

    def start(self) -> None:
        """Run the watch loop in the background."""
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def stop(self) -> None:
        """Stop the watch loop."""
        if self._task is not None:
            self._task.cancel()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(PERIOD_S)
            try:
                async with asyncio.timeout(self.backends.timeout_s):
                    await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the detector must never take the proxy down
                log.exception("deadlock check failed")

    def _transactions(self) -> tuple[dict[Key, tuple[int, BackendConnection]], set[str]]:
        """Every pinned backend connection by (dbGroup, thread id) -> (session id, connection), and the
        dbGroups where a statement of a transaction has waited longer than WAIT_S."""
        now = time.monotonic()
        conns: dict[Key, tuple[int, BackendConnection]] = {}
        waiting: set[str] = set()
        if not any(p.waits_longer(WAIT_S, now) for p in self.backends.pools.values()):
            return conns, waiting   # nothing waits: no need to walk every session (thousands, idle)
        for s in self.sessions:
            for c in s.executor.pinned.values():
                if c.broken:
                    continue
                conns[(c.group.name, c.thread_id)] = (s.conn_id, c)
                if c.busy and now - c.last_used > WAIT_S:
                    waiting.add(c.group.name)
        return conns, waiting - self._unsupported

    async def check(self) -> None:
        """One look: read the lock waits of the servers concerned, break one cycle if there is one."""
        conns, groups = self._transactions()
        if len(groups) == 0:
            return
        edges: dict[int, set[int]] = {}
        # the backend connections each session-to-session edge goes through: (waiter's, blocker's)
        via: dict[tuple[int, int], set[tuple[BackendConnection, BackendConnection]]] = {}
        waiter_conn: dict[int, BackendConnection] = {}
        waiter_query: dict[int, int] = {}
        for group in groups:
            for waiter, blocker, query_id in await self._lock_waits(group):
                w, b = conns.get((group, waiter)), conns.get((group, blocker))
                if w is None or b is None or w[0] == b[0]:
                    continue
                edges.setdefault(w[0], set()).add(b[0])
                via.setdefault((w[0], b[0]), set()).add((w[1], b[1]))
                waiter_conn[w[0]] = w[1]
                waiter_query[w[0]] = query_id
        cycle = find_cycle(edges)
        if not cycle or _innodb_sees(cycle, via):
            return
        # InnoDB picks the transaction cheapest to roll back; the youngest wait is a fair stand-in
        victim = max(cycle, key=lambda sid: waiter_conn[sid].last_used)
        conn = waiter_conn[victim]
        if not conn.busy or conn.deadlock_victim:
            return
        conn.deadlock_victim = True
        log.info("deadlock across shardingNodes", sessions=cycle, victim=victim, db_group=conn.group.name)
        try:
            await self._run(conn.group.name, f"KILL QUERY ID {int(waiter_query[victim])}")
        except ProxyError as e:
            conn.deadlock_victim = False  # the statement ended meanwhile (unknown query id)
            log.info("deadlock victim already gone", victim=victim, error=e.message)

    async def _lock_waits(self, group: str) -> list[tuple[int, int, int]]:
        """(waiting thread id, blocking thread id, waiting query id) on one dbGroup's server."""
        try:
            sc = await self._run(group, LOCK_WAITS_SQL)
        except ProxyError as e:
            if e.code in (1227, 1142, 1044):  # no PROCESS privilege: cross-node deadlocks wait for the timeout
                self._unsupported.add(group)
                log.warning("cannot read lock waits; deadlocks across nodes end by lock wait timeout",
                            db_group=group, error=e.message)
            return []
        rows = sc.results[0].rows if sc.results else []
        return [(int(r[0]), int(r[1]), int(r[2])) for r in rows if None not in r[:3]]

    async def _run(self, group: str, sql: str):  # noqa: ANN202 - a ResponseScanner
        """Run one statement on a pooled connection of a dbGroup (any of its shardingNodes)."""
        backends = self.backends
        node = next(n for n, sn in self.config.sharding_nodes.items() if sn.db_group == group)
        conn = await backends.acquire(node, 0)
        try:
            return await conn.query(sql, backends.timeout_s)
        finally:
            backends.release(node, conn)
