"""The metadata loader's backend (meta.backend_query.MetaBackend) over the proxy's own wire layer.

Connections log in with proxy.backends.backend.open_connection (multi-statements on, as for every
backend connection) and answers are decoded by proxy.wire.response.ResponseScanner, the one result
set decoder merging uses too. A few idle connections per shardingNode are kept, so the refresh
after every DDL (on every instance of a cluster) skips the connect and login.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Sequence

from meta.backend_query import BackendStatementFailed, MultiResult, NodeUnavailable, StatementError
from meta.config import DbGroupConfig, ShardingNodeConfig
from meta.errors import CLIENT_ERROR_MIN, BackendError, ProxyError

from proxy.backends.backend import BackendConnection, open_connection
from proxy.wire import constants as C
from proxy.wire.packets import com_query, frame
from proxy.wire.response import ResponseScanner

PING_TIMEOUT_S = 2.0
_PING = frame(0, bytes((C.COM_PING,)))

Rows = list[tuple[Any, ...]]


def _text_rows(sc: ResponseScanner) -> list[Rows]:
    """Each result set's rows with values as str (None for NULL), as the loader reads them."""
    return [[tuple([None if v is None else v.decode("utf-8", "surrogateescape") for v in row]) for row in rs.rows]
            for rs in sc.results]


def multi_result(sc: ResponseScanner) -> MultiResult:
    """A complete multi-statement answer as the loader reads it: the rows of each statement that ran, and
    the server error that stopped the batch at the next one."""
    results: list[Sequence[tuple[Any, ...]]] = list(_text_rows(sc))
    err = sc.error
    return MultiResult(results, None if err is None else StatementError(len(results), err.code, err.message))


class LinkConnection:
    """One MetaConnection over a BackendConnection; close() hands it back to its pool."""

    __slots__ = ("conn", "pool", "key")

    def __init__(self, conn: BackendConnection, pool: MetaLink, key: tuple) -> None:
        self.conn, self.pool, self.key = conn, pool, key

    async def _run(self, sql: str) -> ResponseScanner:
        """Send one COM_QUERY and collect its answer; transport trouble becomes NodeUnavailable."""
        try:
            sc = await self.conn.run(com_query(sql), None, collect=True, coldefs=False)
        except ProxyError as e:
            raise NodeUnavailable(f"connection lost: {e.message}") from None
        except (OSError, RuntimeError) as e:
            self.conn.close()
            raise NodeUnavailable(f"connection lost: {e!r}") from None
        err = sc.error
        if err is not None and err.code >= CLIENT_ERROR_MIN:
            self.conn.close()
            raise NodeUnavailable(f"query failed: ({err.code}) {err.message}")
        return sc

    async def query(self, sql: str) -> Sequence[tuple[Any, ...]]:
        """Run one statement; a server error becomes BackendStatementFailed, the rest NodeUnavailable."""
        sc = await self._run(sql)
        if sc.error is not None:
            raise BackendStatementFailed(sc.error.code, sc.error.message)
        rows = _text_rows(sc)
        return rows[0] if rows else ()

    async def query_multi(self, sql: str) -> MultiResult:
        """Every statement's rows in order; a server error on statement i ends the batch there."""
        return multi_result(await self._run(sql))

    async def close(self) -> None:
        """Back to the idle pool (or closed when it is full or the connection broke)."""
        self.pool.give_back(self)

    def abort(self) -> None:
        """Drop the socket now (after a timeout the server may never answer)."""
        self.conn.close()


class MetaLink:
    """The proxy's MetaBackend: connections of its own wire layer, a few kept idle per shardingNode
    (pinged before reuse, dropped after max_idle_s)."""

    def __init__(self, *, idle_per_node: int = 2, max_idle_s: float = 60.0) -> None:
        self.idle_per_node = idle_per_node
        self.max_idle_s = max_idle_s
        self._idle: dict[tuple, list[tuple[float, LinkConnection]]] = {}

    async def connect(self, node: ShardingNodeConfig, group: DbGroupConfig, *,
                      timeout_s: float) -> LinkConnection:
        """An idle connection that still answers a ping (bounded), else a new one whose connect and login
        (greeting included) are bounded by timeout_s."""
        key = (group.host, group.port, group.user, node.database, id(asyncio.get_running_loop()))
        now = time.monotonic()
        idle = self._idle.get(key, [])
        while idle:
            since, link = idle.pop()
            if now - since > self.max_idle_s or link.conn.broken:
                link.abort()
                continue
            try:
                sc = await link.conn.run(_PING, min(timeout_s, PING_TIMEOUT_S))
                if sc.error is None:
                    return link
            except Exception:  # noqa: BLE001 - a dead idle connection is simply replaced
                pass
            link.abort()
        try:
            conn = await open_connection(group, 0, node.database, timeout_s)
        except ProxyError as e:
            raise NodeUnavailable(f"connect failed: ({e.code}) {e.message}",
                                  unreachable=not isinstance(e, BackendError) or e.code >= CLIENT_ERROR_MIN) from None
        return LinkConnection(conn, self, key)

    def give_back(self, link: LinkConnection) -> None:
        """Keep a connection that finished cleanly (closing the extras)."""
        idle = self._idle.setdefault(link.key, [])
        if len(idle) >= self.idle_per_node or link.conn.broken or link.conn.busy:
            link.abort()
        else:
            idle.append((time.monotonic(), link))

    def close(self) -> None:
        """Close every idle connection."""
        for idle in self._idle.values():
            for _, link in idle:
                link.abort()
        self._idle.clear()

