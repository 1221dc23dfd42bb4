"""A subscriber whose reload after a DDL misses a node (its backend paused) ends with the new
structure once the node is back, with no operator: a partial reload is not counted as applied."""

from __future__ import annotations

from typing import Any, Callable

from clusterkit import Cluster, full_meta, run_async, wait_for

PLAIN = "plain_partial"   # an unconfigured table of schema1: on its default node dn5 only (backends[0], db3)


def test_reload_that_missed_a_node_is_redone_when_it_returns(zookeeper: Any, zk_root: str,
                                                              fresh_proxy: Callable[..., Any],
                                                              backends: list[Any]) -> None:
    node = backends[0]
    node.query(f"DROP TABLE IF EXISTS `{PLAIN}`", database="db3")
    node.query(f"CREATE TABLE `{PLAIN}` (id INT PRIMARY KEY, v INT)", database="db3")
    try:
        cluster = Cluster(fresh_proxy, zookeeper, zk_root, backends, session_timeout_s=15, ack_timeout_s=10)
        del cluster.section["peer_secret"]   # ZooKeeper path: dble-2 reloads from the backends itself
        p1, p2 = cluster.start(2, server={"backend_timeout_s": 2})
        assert "`c_new`" not in full_meta(p2, PLAIN)[3]
        # dble-2 deaf while the ALTER runs; then the table's node stops answering just as dble-2 hears
        # the outcome and reloads
        p2.pause()
        try:
            t, out = run_async(p1, f"ALTER TABLE {PLAIN} ADD COLUMN c_new INT DEFAULT 7")
            wait_for(lambda: "`c_new`" in node.query(f"SHOW CREATE TABLE `{PLAIN}`", database="db3")[0][1],
                     30, "the ALTER on the node")
            node.pause()
            try:
                p2.resume()
                wait_for(lambda: "shardingNode metadata incomplete" in p2.log_text(), 30,
                         "dble-2's reload to miss the paused node")
            finally:
                node.resume()
        finally:
            p2.resume()
        t.join(60)
        assert "ok" in out, out
        # no operator: dble-2 reads the node again and its memory has the new structure, as the node has
        row = wait_for(lambda: (lambda r: r if "`c_new`" in r[3] else None)(full_meta(p2, PLAIN)), 60,
                       "dble-2's memory to get the new structure")
        assert row[4:] == (1, 1), row   # consistent across its nodes and with memory
        conn = p2.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT * FROM {PLAIN} LIMIT 1")
                assert [d[0] for d in cur.description] == ["id", "v", "c_new"]
        finally:
            conn.close()
    finally:
        node.query(f"DROP TABLE IF EXISTS `{PLAIN}`", database="db3")
