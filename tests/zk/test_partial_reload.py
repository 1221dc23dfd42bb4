"""A subscriber whose reload after a DDL misses a node (its backend paused) ends with the new
structure once the node is back, with no operator: a partial reload is not counted as applied."""

from __future__ import annotations

from typing import Any, Callable

from clusterkit import TABLE, Cluster, backend_structure, full_meta, reset_table, run_async, wait_for


def test_reload_that_missed_a_node_is_redone_when_it_returns(zookeeper: Any, zk_root: str,
                                                              fresh_proxy: Callable[..., Any],
                                                              backends: list[Any]) -> None:
    reset_table(backends)
    cluster = Cluster(fresh_proxy, zookeeper, zk_root, backends, session_timeout_s=15, ack_timeout_s=10)
    del cluster.section["peer_secret"]   # ZooKeeper path: dble-2 reloads from the backends itself
    p1, p2 = cluster.start(2, server={"backend_timeout_s": 2})
    # dble-2 deaf while the ALTER runs on every node; then one backend (2 of the 4 nodes) stops
    # answering just as dble-2 hears the outcome and reloads
    p2.pause()
    try:
        t, out = run_async(p1, f"ALTER TABLE {TABLE} ADD COLUMN c_new INT DEFAULT 7")
        wait_for(lambda: all("`c_new`" in s for s in backend_structure(backends)), 30, "the ALTER on every node")
        backends[1].pause()
        try:
            p2.resume()
            wait_for(lambda: "shardingNode metadata incomplete" in p2.log_text(), 30,
                     "dble-2's reload to miss the paused backend")
        finally:
            backends[1].resume()
    finally:
        p2.resume()
    t.join(60)
    assert out.get("ok"), out
    # no operator: dble-2 reads the missed nodes again and serves the new structure everywhere
    row = wait_for(lambda: (lambda r: r if "`c_new`" in r[3] and r[4:] == (1, 1) else None)(full_meta(p2)),
                   60, "dble-2 to reload the missed nodes")
    assert row[4:] == (1, 1), row
    conn = p2.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {TABLE} LIMIT 1")
            assert [d[0] for d in cur.description] == ["id", "v", "c_new"]
    finally:
        conn.close()
