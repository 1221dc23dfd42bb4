"""Resource limits: a capped merge budget with a clear error, backpressure to slow clients."""

from __future__ import annotations

import socket
import time

import pymysql
import pytest
from harness import free_port, proxy_config

from proxy.wire.handshake import build_handshake_response, parse_greeting, scramble_native_password
from proxy.wire import constants as C
from proxy.wire.packets import frame
from proxy.wire.response import ResponseScanner


def _rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _proxy_with_rows(backends, request, instance: str, table: str, create: str, rows, batches: int,
                     **server: object):
    """A private proxy with one freshly created table, filled by `batches` multi-row INSERTs."""
    from harness import ProxyProcess
    cfg = proxy_config(backends, free_port(), free_port(), instance=instance)
    cfg["server"].update(server)
    p = ProxyProcess(cfg, release_ports=True)
    p.start()
    request.addfinalizer(p.cleanup)
    p.query(f"DROP TABLE IF EXISTS {table}")
    p.query(create)
    conn = p.connect()
    with conn.cursor() as cur:
        for chunk in [rows[i::batches] for i in range(batches)]:
            cur.execute(f"INSERT INTO {table} VALUES " + ",".join(chunk))
    conn.close()
    return p


@pytest.fixture(scope="module")
def limited(backends, request):
    return _proxy_with_rows(backends, request, "limits-1", "sharding_4_t1",
                            "CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, pad LONGTEXT)",
                            [f"({i}, REPEAT('x', 2000))" for i in range(1200)], 12,
                            merge_memory_mb=1, client_buffer_kb=64)


def test_a_merge_past_the_budget_gets_a_clear_error_and_others_go_on(limited):
    with pytest.raises(pymysql.MySQLError) as e:
        limited.query("SELECT * FROM sharding_4_t1 ORDER BY pad, id")
    assert e.value.args[0] == 1038
    assert "merge memory budget" in e.value.args[1] and "LIMIT" in e.value.args[1]
    assert len(limited.query("SELECT id FROM sharding_4_t1 ORDER BY pad, id LIMIT 10")) == 10
    assert limited.query("SELECT COUNT(*) FROM sharding_4_t1") == [(1200,)]


def test_a_streamed_read_is_not_held_so_the_budget_does_not_cap_it(limited):
    """2.4 MB of rows with merge_memory_mb = 1: relayed as they arrive, so they pass; grouping them (held
    in the proxy, one group per row) is refused with the budget's error instead of growing without bound."""
    rows = limited.query("SELECT id, pad FROM sharding_4_t1")
    assert len(rows) == 1200 and sum(len(r[1]) for r in rows) == 2_400_000
    with pytest.raises(pymysql.MySQLError) as e:
        limited.query("SELECT id, pad, COUNT(*) FROM sharding_4_t1 GROUP BY id, pad")
    assert e.value.args[0] == 1038 and "merge_memory_mb" in e.value.args[1]
    assert limited.query("SELECT COUNT(*), MAX(LENGTH(pad)) FROM sharding_4_t1 GROUP BY LENGTH(pad)") == [(1200, 2000)]


def _login(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:3], "little"):
        buf += s.recv(65536)
    g = parse_greeting(buf[4:4 + int.from_bytes(buf[:3], "little")])
    caps = C.PROTOCOL_41 | C.SECURE_CONNECTION | C.PLUGIN_AUTH | C.CONNECT_WITH_DB | C.LONG_PASSWORD
    s.sendall(frame(1, build_handshake_response(caps, "test", scramble_native_password("111111", g.salt),
                                                "schema1")))
    ok = s.recv(65536)
    assert ok[4] == 0, ok
    return s


def test_a_slow_client_pauses_the_backend_instead_of_filling_memory(limited):
    s = _login(limited.port)
    # one node's rows (about 600 KB) plus a single-node 20 MB result the client does not read yet
    s.sendall(frame(0, b"\x03SELECT REPEAT('y', 1000) FROM seq_1_to_20000"))
    time.sleep(0.5)
    before = _rss_kb(limited.pid)
    time.sleep(2)
    grown = _rss_kb(limited.pid) - before
    assert grown < 8 * 1024, f"proxy grew {grown} KB while the client did not read"
    scanner = ResponseScanner(deprecate_eof=False)
    buf = b""
    got = 0
    s.settimeout(30)
    while not scanner.done:
        chunk = s.recv(1 << 20)
        assert chunk, "the proxy closed the connection mid-result"
        got += len(chunk)
        buf += chunk
        buf = buf[scanner.scan(buf):]
    s.close()
    assert scanner.error is None and got > 20_000_000
    assert limited.query("SELECT 1") == [(1,)]


@pytest.fixture(scope="module")
def big_merge(backends, request):
    p = _proxy_with_rows(backends, request, "limits-2", "sharding_2_t1",
                         "CREATE TABLE sharding_2_t1 (id INT PRIMARY KEY, k VARCHAR(40))",
                         [f"({i}, MD5({i}))" for i in range(300_000)], 30)
    request.addfinalizer(lambda: p.query("DROP TABLE IF EXISTS sharding_2_t1"))
    return p


def test_a_big_merge_does_not_stall_other_clients(big_merge):
    """While one client's 300,000-row ORDER BY is merged, another client's pings keep being answered."""
    import threading
    done: list[float] = []
    big: dict[str, float] = {}
    stop = threading.Event()

    def pinger() -> None:
        conn = big_merge.connect()
        with conn.cursor() as cur:
            while not stop.is_set():
                cur.execute("SELECT 1")
                cur.fetchall()
                done.append(time.monotonic())
        conn.close()

    t = threading.Thread(target=pinger)
    t.start()
    try:
        conn = big_merge.connect()
        with conn.cursor() as cur:
            time.sleep(0.2)
            big["start"] = time.monotonic()
            cur.execute("SELECT id, k FROM sharding_2_t1 ORDER BY k, id")
            big["end"] = time.monotonic()   # the whole answer is in: pymysql buffers it
            rows = cur.fetchall()
        conn.close()
    finally:
        stop.set()
        t.join(30)
    assert len(rows) == 300_000 and rows[0][1] <= rows[1][1] <= rows[-1][1]
    during = [big["start"]] + [x for x in done if big["start"] <= x <= big["end"]] + [big["end"]]
    longest_wait = max(b - a for a, b in zip(during, during[1:]))
    # inline, the merge alone held the event loop for ~40% of the query; off the loop, pings wait ~10%
    assert longest_wait < 0.25 * (big["end"] - big["start"]), (longest_wait, big["end"] - big["start"])
