"""Comparing pydble's answer with one plain MariaDB holding the same rows (cross-node read tests)."""

from __future__ import annotations

import copy
from collections import Counter
from contextlib import contextmanager
from typing import Any, Iterator, Sequence


def answer(conn: Any, sql: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(rows, column names, types and the decimals of numbers) of one statement."""
    with conn.cursor() as cur:
        cur.execute(sql)
        # decimals as the differential test compares them: of numbers (a string's is 39 or 0 depending on
        # whether MariaDB sorted the join through a temporary table)
        meta = [(d[0], d[1], d[5] if d[1] in (0, 4, 5, 246) else None) for d in cur.description]
        return [tuple(r) for r in cur.fetchall()], meta


def assert_same_answer(px: Any, ref: Any, sql: str, ordered: bool) -> list[tuple[Any, ...]]:
    """pydble's answer is the reference's (in order when the ORDER BY is total); the reference's rows."""
    got, got_meta = answer(px, sql)
    want, want_meta = answer(ref, sql)
    assert got_meta == want_meta
    if ordered:
        assert got == want
    else:
        assert Counter(map(repr, got)) == Counter(map(repr, want))
    return want


@contextmanager
def proxy_and_reference(backends: list[Any], name: str, ref_db: str, tables: dict[str, Any],
                        users: Sequence[dict[str, Any]] = (), **server: Any) -> Iterator[tuple[Any, Any, Any]]:
    """(pydble connection, reference connection, proxy): a proxy with `tables` added to schema1 (and
    `users`, [server] settings), and the reference database `ref_db` on the first backend."""
    from harness import ProxyProcess, free_port, proxy_config

    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance=f"pydble-{name}"))
    cfg["schemas"]["schema1"]["tables"].update(copy.deepcopy(tables))
    cfg["server"].update(server)
    cfg["users"].extend(copy.deepcopy(list(users)))
    backends[0].create_databases(ref_db)
    p = ProxyProcess(cfg, name=f"proxy-{name}", release_ports=True)
    try:
        p.start()
        px, ref = p.connect(), backends[0].connect(ref_db)
        try:
            yield px, ref, p
        finally:
            px.close()
            ref.close()
    finally:
        p.cleanup()
