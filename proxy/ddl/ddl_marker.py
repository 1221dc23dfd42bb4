"""Where a DDL still runs: its marker (in the DDL text sent to each node) looked up in every dbGroup's
processlist, from any process that has the backends (an instance, a reconciler, `pydble ddl release`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog

from meta.errors import ProxyError
from zk.records import MARKER_PREFIX

if TYPE_CHECKING:
    from proxy.backends.pool import Backends

log = structlog.get_logger("pydble.ddl")


async def ddl_running(backends: Backends, marker: str, kill: bool = False) -> list[str]:
    """The dbGroups whose processlist shows a statement carrying a DDL's marker (its connections,
    wherever they come from), or that could not be asked; `kill`: KILL QUERY each one found first."""
    tail = marker[len(MARKER_PREFIX):]
    if not marker.startswith(MARKER_PREFIX) or not (tail.isascii() and tail.isalnum()):
        raise ValueError(f"not a DDL marker: {marker!r}")
    one_node: dict[str, str] = {}
    for node, sn in backends.config.sharding_nodes.items():
        one_node.setdefault(sn.db_group, node)
    sql = ("SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() "
           f"AND INFO LIKE '%{marker} */%'")

    async def ask(group: str, node: str) -> bool:
        try:
            conn = await backends.acquire(node, 0)
        except ProxyError:
            return True   # cannot tell: it may still run there
        try:
            sc = await conn.query(sql, backends.timeout_s)
            ids = [int(row[0]) for row in sc.results[0].rows] if sc.results else []
            if kill:
                for thread in ids:
                    log.warning("stopping a DDL", db_group=group, thread=thread, marker=marker)
                    await conn.query(f"KILL QUERY {thread}", backends.timeout_s)
            return bool(ids)
        except ProxyError:
            return True
        finally:
            backends.release(node, conn)

    groups = sorted(one_node)
    found = await asyncio.gather(*(ask(g, one_node[g]) for g in groups))
    return [g for g, yes in zip(groups, found) if yes]


__all__ = ["ddl_running"]
