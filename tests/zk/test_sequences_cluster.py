"""Global sequences in a cluster: two instances inserting at once never hand out the same value.

Blocks are tiny (sequence_block = 3) so the instances reserve from the same znode over and over and
lose version races to each other; every id must still be unique, and a restarted instance goes on
above every value the cluster handed out (its unused block is skipped).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from harness import cluster_section, free_port, proxy_config

NODES = ("dn1", "dn2", "dn3", "dn4")
THREADS = 3
STATEMENTS = 25


def _config(backends: list[Any], zookeeper: Any, root: str, instance: str) -> dict[str, Any]:
    cfg = proxy_config(backends, free_port(), free_port(), instance=instance,
                       cluster=cluster_section(zookeeper, root=root, session_timeout_s=5, ack_timeout_s=10))
    cfg["server"]["sequence_block"] = 3
    cfg["schemas"]["schema1"]["tables"]["seq_c"] = {"type": "sharding", "nodes": list(NODES),
                                                    "function": "hash-four", "column": "id",
                                                    "increment_column": "id"}
    return cfg


def _insert_many(proxy: Any, tag: str, ids: list[int], errors: list[BaseException]) -> None:
    try:
        conn = proxy.connect()
        with conn.cursor() as cur:
            for i in range(STATEMENTS):
                rows = 1 + i % 3
                cur.execute("INSERT INTO seq_c (who) VALUES " + ", ".join([f"('{tag}')"] * rows))
                first = cur.lastrowid
                ids.extend(range(first, first + rows))
        conn.close()
    except BaseException as e:  # noqa: BLE001 - reported by the test
        errors.append(e)


def test_two_instances_never_hand_out_the_same_value(zookeeper: Any, zk_root: str, backends: list[Any],
                                                     fresh_proxy: Callable[..., Any]) -> None:
    a = fresh_proxy(_config(backends, zookeeper, zk_root, "dble-1"))
    b = fresh_proxy(_config(backends, zookeeper, zk_root, "dble-2"))
    a.query("DROP TABLE IF EXISTS seq_c")
    a.query("CREATE TABLE seq_c (id BIGINT PRIMARY KEY, who VARCHAR(20))")
    per_thread: list[list[int]] = [[] for _ in range(2 * THREADS)]
    errors: list[BaseException] = []
    threads = [threading.Thread(target=_insert_many, args=(p, p.instance, per_thread[i], errors))
               for i, p in enumerate([a, b] * THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    ids = [i for got in per_thread for i in got]
    assert len(ids) == 2 * THREADS * sum(1 + i % 3 for i in range(STATEMENTS))
    assert len(set(ids)) == len(ids), "a value was handed out twice"
    for got in per_thread:   # each session's values increase
        assert got == sorted(got)
    # the rows the OK packets announced are the rows in the table
    assert a.query("SELECT COUNT(*), COUNT(DISTINCT id), MIN(id), MAX(id) FROM seq_c")[0] == (
        len(ids), len(ids), min(ids), max(ids))
    zk = zookeeper.client()
    try:
        data, _ = zk.get(f"{zk_root}/cluster-1/sequence/schema1.seq_c")
    finally:
        zk.stop()
        zk.close()
    assert int(data) > max(ids)

    # an instance killed and started again goes on above everything handed out (its unused block is skipped)
    b.kill()
    b.start()
    conn = b.connect()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO seq_c (who) VALUES ('restarted')")
        assert cur.lastrowid > max(ids)
        cur.execute("INSERT INTO seq_c (who) VALUES ('a'), ('b')")
        assert cur.lastrowid > max(ids) + 1
    conn.close()
    # and the other instance goes on from its own block, never reusing a value either
    conn = a.connect()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO seq_c (who) VALUES ('a again')")
        cur.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM seq_c")
        assert cur.fetchall() == ((len(ids) + 4, len(ids) + 4),)
        cur.execute("DROP TABLE seq_c")
    conn.close()


def test_without_zookeeper_an_insert_needing_a_block_fails_then_works_again(
        zookeeper: Any, zk_root: str, backends: list[Any], fresh_proxy: Callable[..., Any]) -> None:
    import time

    import pymysql
    import pytest

    a = fresh_proxy(_config(backends, zookeeper, zk_root, "dble-1"))
    a.query("DROP TABLE IF EXISTS seq_c")
    a.query("CREATE TABLE seq_c (id BIGINT PRIMARY KEY, who VARCHAR(20))")
    conn = a.connect()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO seq_c (who) VALUES ('a')")
        before = cur.lastrowid
        zookeeper.stop()
        try:
            started = time.monotonic()
            with pytest.raises(pymysql.MySQLError) as e:   # 5 rows: more than the block holds
                cur.execute("INSERT INTO seq_c (who) VALUES ('b'), ('c'), ('d'), ('e'), ('f')")
            assert e.value.args[0] == 1105 and "global sequence schema1.seq_c" in e.value.args[1], e.value.args
            assert time.monotonic() - started < 60
        finally:
            zookeeper.start()
        deadline = time.monotonic() + 60
        while True:   # once the instance is back in ZooKeeper, values come again, above the old ones
            try:
                cur.execute("INSERT INTO seq_c (who) VALUES ('g'), ('h'), ('i'), ('j')")
                break
            except pymysql.MySQLError as e:
                assert e.args[0] == 1105 and time.monotonic() < deadline, e.args
                time.sleep(0.5)
        assert cur.lastrowid > before
        cur.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM seq_c")
        assert cur.fetchall() == ((5, 5),)
        cur.execute("DROP TABLE seq_c")
    conn.close()
