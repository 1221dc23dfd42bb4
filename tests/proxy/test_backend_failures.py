"""Backend pools and failures: max_con bounds, a backend down or frozen, and recovery.

A failing backend must cost only the queries that need it: the client hears which shardingNode
failed, quickly, and everything else keeps being served.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import pymysql
import pytest

from harness import free_port, proxy_config
from harness.ports import tcp_connections

from wire import drop_after


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    """Leave the shared backends without this module's tables."""
    yield from drop_after(proxy, 'bf_plain')


def _config(backends, **server: Any) -> dict[str, Any]:
    cfg = proxy_config(backends, free_port(), free_port(), instance="pydble-fail")
    cfg["server"].update(server)
    return cfg


def _seed(p) -> None:
    """sharding_4_t1 with ids 1..8: two rows on each of dn1..dn4."""
    p.query("DROP TABLE IF EXISTS sharding_4_t1")
    p.query("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))")
    p.query("INSERT INTO sharding_4_t1 VALUES " + ", ".join(f"({i}, 'n{i}')" for i in range(1, 9)))


def _fails(p, sql: str, database: str = "schema1", within: float = 10.0) -> tuple[int, str]:
    """Run sql expecting an error; return (code, message) and check it came back in time."""
    started = time.monotonic()
    with pytest.raises(pymysql.err.MySQLError) as ei:
        p.query(sql, database=database)
    assert time.monotonic() - started < within, "the error took too long"
    return ei.value.args[0], ei.value.args[1]


# -- pools --------------------------------------------------------------------------------------

def test_max_con_bounds_backend_connections_and_sessions_wait(backends, fresh_proxy) -> None:
    cfg = _config(backends)
    for g in cfg["db_groups"].values():
        g["max_con"] = 2
    p = fresh_proxy(cfg)
    peak = {"n": 0}
    stop = threading.Event()

    def watch() -> None:  # the backend's own count of the sleeps running at once (dn5 is on ha_group1)
        while not stop.is_set():
            n = backends[0].query("SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                                  "WHERE info LIKE 'SELECT SLEEP(0.4), %'")[0][0]
            peak["n"] = max(peak["n"], n)
            time.sleep(0.05)

    def one(i: int) -> Any:
        return p.query("SELECT SLEEP(0.4), %s", args=(i,))[0][1]

    w = threading.Thread(target=watch)
    w.start()
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(8) as ex:
            results = list(ex.map(one, range(8)))
    finally:
        stop.set()
        w.join()
    elapsed = time.monotonic() - started
    assert results == list(range(8))            # every session got its answer
    assert elapsed >= 1.5                       # 8 sleeps of 0.4 s through 2 connections: 4 waves
    assert 1 <= peak["n"] <= 2, peak            # never more than max_con to the dbGroup


def test_a_session_waiting_too_long_for_a_connection_gets_a_clear_error(backends, fresh_proxy) -> None:
    cfg = _config(backends)
    cfg["db_groups"]["ha_group1"].update(max_con=1, connect_timeout_s=1)
    p = fresh_proxy(cfg)
    holder = p.connect()
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("/*!pydble:shardingNode=dn5*/ SELECT 1")  # pins the only ha_group1 connection
        code, msg = _fails(p, "SELECT SLEEP(0)", within=8)
        assert code == 1040
        assert "ha_group1" in msg and "max_con=1" in msg
        # the other dbGroup is not affected
        assert p.query("/*!pydble:shardingNode=dn2*/ SELECT 7") == [(7,)]
        with holder.cursor() as cur:
            cur.execute("COMMIT")
        assert p.query("SELECT 8") == [(8,)]   # the connection is free again
    finally:
        holder.close()


# -- a backend down -----------------------------------------------------------------------------

def test_a_stopped_backend_fails_only_its_nodes_and_recovers(fresh_backends, fresh_proxy) -> None:
    p = fresh_proxy(_config(fresh_backends, backend_timeout_s=5), backends=fresh_backends)
    _seed(p)
    b2 = fresh_backends[1]
    b2.stop()
    # ids 1 and 5 live on dn2, 3 and 7 on dn4 (ha_group2); 2, 6 on dn3 and 4, 8 on dn1 (ha_group1)
    code, msg = _fails(p, "SELECT name FROM sharding_4_t1 WHERE id = 1")
    assert code == 1105 and "dn2" in msg, msg
    code, msg = _fails(p, "SELECT COUNT(*) FROM sharding_4_t1")
    assert "dn2" in msg or "dn4" in msg, msg
    code, msg = _fails(p, "INSERT INTO sharding_4_t1 VALUES (11, 'x')")
    assert "dn4" in msg, msg
    # what does not need ha_group2 keeps working, on new and old sessions alike
    assert p.query("SELECT name FROM sharding_4_t1 WHERE id = 4") == [("n4",)]
    assert p.query("SELECT id FROM sharding_4_t1 WHERE id IN (2, 8) ORDER BY id") == [(2,), (8,)]
    assert p.query("/*!pydble:shardingNode=dn3*/ SELECT COUNT(*) FROM sharding_4_t1") == [(2,)]
    assert p.query("SELECT DATABASE()") == [("schema1",)]
    p.query("CREATE TABLE IF NOT EXISTS bf_plain (id INT)")  # default node dn5 is on ha_group1
    p.query("INSERT INTO bf_plain VALUES (1)")
    assert p.query("SELECT COUNT(*) FROM bf_plain") == [(1,)]
    b2.start()
    deadline = time.monotonic() + 15
    while True:
        try:
            assert p.query("SELECT COUNT(*) FROM sharding_4_t1") == [(8,)]
            break
        except pymysql.err.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert p.query("SELECT name FROM sharding_4_t1 WHERE id = 5") == [("n5",)]


def test_a_frozen_backend_times_out_naming_the_node_while_others_are_served(fresh_backends, fresh_proxy) -> None:
    cfg = _config(fresh_backends, backend_timeout_s=4)
    cfg["db_groups"]["ha_group2"]["connect_timeout_s"] = 1
    p = fresh_proxy(cfg, backends=fresh_backends)
    _seed(p)
    b2 = fresh_backends[1]
    b2.pause()
    try:
        results: dict[str, Any] = {}

        def slow() -> None:
            try:
                p.query("SELECT name FROM sharding_4_t1 WHERE id = 1")
            except pymysql.err.MySQLError as e:
                results["slow"] = e.args

        t = threading.Thread(target=slow)
        t.start()
        # while that waits on the frozen server (backend_timeout_s), the other one serves
        for i in (2, 4, 6, 8):
            assert p.query("SELECT name FROM sharding_4_t1 WHERE id = %s", args=(i,)) == [(f"n{i}",)]
        assert t.is_alive() and "slow" not in results, "the other node's reads waited for the frozen one"
        t.join(10)
        assert not t.is_alive()
        code, msg = results["slow"]
        assert code == 1105 and "dn2" in msg, msg
        code, msg = _fails(p, "SELECT COUNT(*) FROM sharding_4_t1", within=5)
        assert "dn2" in msg or "dn4" in msg, msg
    finally:
        b2.resume()
    deadline = time.monotonic() + 10
    while True:
        try:
            assert p.query("SELECT COUNT(*) FROM sharding_4_t1") == [(8,)]
            break
        except pymysql.err.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_backend_lost_in_a_transaction_is_reported(fresh_backends, fresh_proxy) -> None:
    p = fresh_proxy(_config(fresh_backends, backend_timeout_s=5), backends=fresh_backends)
    _seed(p)
    conn = p.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("UPDATE sharding_4_t1 SET name = 'x' WHERE id IN (1, 4)")  # dn2 and dn1
            fresh_backends[1].kill()
            with pytest.raises(pymysql.err.MySQLError) as ei:
                cur.execute("UPDATE sharding_4_t1 SET name = 'y' WHERE id = 5")  # dn2 again
            assert "dn2" in ei.value.args[1]
            with pytest.raises(pymysql.err.MySQLError):
                cur.execute("COMMIT")
    finally:
        conn.close()
    # dn1's part was not committed behind the client's back... nor is the session stuck
    assert p.query("SELECT name FROM sharding_4_t1 WHERE id = 4") in ([("n4",)], [("x",)])
    assert p.query("SELECT name FROM sharding_4_t1 WHERE id = 8") == [("n8",)]


def _proxy_ports(pid: int, backend_port: int) -> set[int]:
    """Local ports of a process's TCP connections to a backend port."""
    return {local for local, remote, _ in tcp_connections(pid) if remote == backend_port}


def test_a_backend_killing_idle_pooled_connections_is_harmless(backends, fresh_proxy) -> None:
    p = fresh_proxy(_config(backends))
    p.query("DROP TABLE IF EXISTS bf_kill")
    p.query("CREATE TABLE bf_kill (id INT PRIMARY KEY, name VARCHAR(20))")   # default node dn5 (ha_group1)
    p.query("INSERT INTO bf_kill VALUES " + ", ".join(f"({i}, 'k{i}')" for i in range(8)))
    conns = [p.connect() for _ in range(3)]   # several sessions at once: several pooled connections
    for i in range(8):
        for c in conns:
            with c.cursor() as cur:
                cur.execute("SELECT name FROM bf_kill WHERE id = %s", (i,))
                assert cur.fetchall() == ((f"k{i}",),)
                cur.execute("SELECT 1")
    # the server drops the proxy's connections (wait_timeout, a DBA's KILL, a failover)
    ports = _proxy_ports(p.pid, backends[0].port)
    assert ports, "the proxy holds pooled connections to ha_group1"
    admin = backends[0].connect()
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT id, host FROM information_schema.PROCESSLIST")
            for cid, host in cur.fetchall():
                if host and host.rsplit(":", 1)[-1].isdigit() and int(host.rsplit(":", 1)[1]) in ports:
                    cur.execute(f"KILL {cid}")
    finally:
        admin.close()
    time.sleep(0.2)
    for i in range(8):   # the same sessions go on, fast path and task alike, on fresh backend connections
        for c in conns:
            with c.cursor() as cur:
                cur.execute("SELECT 2")
                assert cur.fetchall() == ((2,),)
                cur.execute("SELECT name FROM bf_kill WHERE id = %s", (i,))
                assert cur.fetchall() == ((f"k{i}",),)
    for c in conns:
        c.close()
    p.query("DROP TABLE bf_kill")
