"""Bad input: malformed and truncated packets, huge packets, garbage SQL, vanishing clients, a storm.

Each bad client must get an error or a clean close, and the proxy must keep serving everyone else:
every test ends by checking that a well-behaved client still gets right answers.
"""

from __future__ import annotations

from typing import Iterator

import asyncio
import os
import random
import socket
import struct
import sys
import time
from pathlib import Path

import aiomysql
import pymysql
import pytest

from harness import free_port, proxy_config

from wire import BASE_CAPS, CLIENT_PROTOCOL_41, RawClient, drop_after

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from attack_rss import rss_mb  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    """Leave the shared backends without this module's tables."""
    yield from drop_after(proxy, 'sharding_4_t1', 'sharding_2_t1', 'bi_blob', 'bi_big', 'bi_slow', 'bi_inject')


def _healthy(p) -> None:
    """A normal client still gets right answers, from one node and merged."""
    assert p.query("SELECT 1 + 1") == [(2,)]
    assert p.query("SELECT COUNT(*) FROM sharding_4_t1 WHERE id < 0") == [(0,)]


@pytest.fixture(scope="module", autouse=True)
def _sharding_table(proxy) -> None:
    proxy.query("CREATE TABLE IF NOT EXISTS sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))")


def _frame(seq: int, payload: bytes) -> bytes:
    return struct.pack("<I", len(payload) | seq << 24) + payload


# -- connection phase ---------------------------------------------------------------------------

@pytest.mark.parametrize("answer", [
    b"hello",                                        # far too short
    b"\x00" * 32,                                    # no PROTOCOL_41, no user
    struct.pack("<IIB", CLIENT_PROTOCOL_41, 0, 45) + b"\x00" * 23 + b"test",          # user without NUL
    struct.pack("<IIB", BASE_CAPS, 0, 45) + b"\x00" * 23 + b"test\x00\x14abc",       # auth shorter than said
    struct.pack("<IIB", BASE_CAPS | 1 << 21, 0, 45) + b"\x00" * 23 + b"test\x00\xfe\xff\xff\xff\xff\xff\xff\xff\x7f",
    struct.pack("<IIB", BASE_CAPS | 1 << 11, 0, 45) + b"\x00" * 23,                  # asks for SSL
    bytes(range(256)) * 3,
])
def test_malformed_handshake_responses_get_an_error_and_a_close(proxy, answer) -> None:
    with RawClient(proxy.port) as c:
        c.read_greeting()
        c.send_packet(1, answer)
        p = c.read_packet()
        assert p.kind == "err"
        assert p.err_code in (1043, 1045, 1047), p.payload
        assert c.closed_by_server()
    _healthy(proxy)


def test_truncated_packets_and_silent_clients_are_dropped(proxy) -> None:
    socks = []
    for data in (b"", b"\x05", b"\x64\x00\x00\x01" + b"x" * 10, _frame(1, b"\x00" * 10)[:-3]):
        s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        s.recv(4096)  # greeting
        if data:
            s.sendall(data)
        socks.append(s)
    for s in socks:  # half a packet, then gone
        s.close()
    # the start of a 16 MB packet, then nothing more: closing is clean
    with RawClient(proxy.port) as c:
        assert c.login().kind == "ok"
        c.send_raw(struct.pack("<I", 0xFFFFFF) + b"\x03" + b"\x00" * 1000)
    _healthy(proxy)


def test_garbage_commands_after_login(proxy) -> None:
    cases = [
        (b"", "close"),                          # an empty command packet
        (b"\x02", "any"),                        # COM_INIT_DB with no name
        (b"\x04", "any"),                        # COM_FIELD_LIST with no table
        (b"\x1b\x00", "any"),                    # COM_SET_OPTION cut short
        (b"\x17\x01", "any"),                    # COM_STMT_EXECUTE cut short
        (b"\x17" + b"\xff" * 40, "any"),         # COM_STMT_EXECUTE of an unknown statement
        (b"\x18\x01\x00", "any"),                # COM_STMT_SEND_LONG_DATA cut short
        (b"\x1c\x00", "any"),                    # COM_STMT_FETCH
        (b"\x11garbage", "any"),                 # COM_CHANGE_USER
        (b"\xfe\xfe\xfe", "any"),                # not a command at all
        (b"\x03\xff\xfe\xfd SELECT", "any"),     # COM_QUERY that is not UTF-8
        (b"\x03", "any"),                        # COM_QUERY with no text
    ]
    for payload, expect in cases:
        with RawClient(proxy.port) as c:
            assert c.login().kind == "ok"
            c.send_packet(0, payload)
            c.sock.settimeout(2)  # SEND_LONG_DATA has no answer: silence is fine as long as we go on
            try:
                p = c.read_packet()
            except socket.timeout:
                c.sock.settimeout(5)
                c.query("SELECT 7")
                p = c.read_packet()
                while p.kind != "err" and p.payload != b"\x017" and p.kind != "eof":
                    p = c.read_packet()
                continue
            except (EOFError, ConnectionResetError):
                continue
            if expect == "close":
                assert p.kind == "err"
                assert c.closed_by_server()
                continue
            assert p.kind in ("err", "ok", "eof", "data"), payload
            if p.kind == "err":
                # the session either goes on or ends cleanly; it never hangs
                c.sock.settimeout(5)
                try:
                    c.query("SELECT 7")
                    r = c.read_result()
                    assert r.sets and r.sets[0][1] == [[b"7"]]
                except (EOFError, ConnectionResetError, BrokenPipeError):
                    pass
    _healthy(proxy)


def test_random_bytes_never_hurt_the_proxy(proxy) -> None:
    rng = random.Random(20240601)
    clients = []
    try:
        for i in range(60):
            c = RawClient(proxy.port, timeout=5)
            clients.append(c)
            if i % 2:
                assert c.login().kind == "ok"
            else:
                c.read_greeting()
            blob = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 300)))
            try:
                c.send_raw(blob)
            except (ConnectionResetError, BrokenPipeError):
                pass
        _healthy(proxy)  # while the garbage sits in 60 sessions
    finally:
        for c in clients:
            c.close()
    _healthy(proxy)


# -- big packets --------------------------------------------------------------------------------

def test_a_query_over_16mb_is_joined_and_forwarded(proxy, backends) -> None:
    (maxp,) = backends[0].query("SELECT @@max_allowed_packet")[0]
    size = 17 << 20
    assert maxp > size + 1000, "the private servers allow 64 MB packets"
    conn = proxy.connect(max_allowed_packet=128 << 20, read_timeout=60, write_timeout=60)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT LENGTH('" + "x" * size + "') AS n")
            assert cur.fetchone() == (size,)
            cur.execute("DROP TABLE IF EXISTS bi_blob")
            cur.execute("CREATE TABLE bi_blob (id INT PRIMARY KEY, b LONGBLOB)")
            blob = os.urandom(size // 2) * 2
            cur.execute("INSERT INTO bi_blob VALUES (1, %s), (2, 'small')", (blob,))
            cur.execute("SELECT b FROM bi_blob WHERE id = 1")     # a row over 16 MB, relayed
            assert cur.fetchone()[0] == blob
            cur.execute("SELECT id, LENGTH(b) FROM bi_blob ORDER BY id")
            assert cur.fetchall() == ((1, size), (2, 5))
    finally:
        conn.close()
    _healthy(proxy)


def test_a_row_over_16mb_through_a_merge(proxy) -> None:
    size = (16 << 20) + 100
    proxy.query("DROP TABLE IF EXISTS sharding_2_t1")
    proxy.query("CREATE TABLE sharding_2_t1 (id INT PRIMARY KEY, b LONGBLOB)")
    conn = proxy.connect(max_allowed_packet=128 << 20, read_timeout=60, write_timeout=60)
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO sharding_2_t1 VALUES (1, REPEAT('a', %s)), (2, 'b'), (3, 'c')", (size,))
            cur.execute("SELECT id, b FROM sharding_2_t1 ORDER BY id")   # merged from dn1 and dn2
            rows = cur.fetchall()
            assert [r[0] for r in rows] == [1, 2, 3]
            assert len(rows[0][1]) == size and rows[0][1][:3] == b"aaa"
    finally:
        conn.close()


def test_a_packet_over_the_proxy_limit_is_refused_with_1153(proxy) -> None:
    conn = proxy.connect(max_allowed_packet=256 << 20, read_timeout=60, write_timeout=60)
    try:
        with conn.cursor() as cur:
            with pytest.raises(pymysql.err.MySQLError) as ei:
                cur.execute("SELECT LENGTH('" + "y" * (65 << 20) + "')")
            code = ei.value.args[0]
            assert code in (1153, 2006, 2013), ei.value.args  # 1153 if read before the close
    finally:
        conn.close()
    # the raw view: the proxy answers 1153 as soon as the header announces too much
    with RawClient(proxy.port, timeout=30) as c:
        assert c.login().kind == "ok"
        payload = b"\x03SELECT '" + b"z" * (70 << 20) + b"'"
        try:
            c.send_packet(0, payload)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            p = c.read_packet()
            assert p.kind == "err" and p.err_code == 1153
        except (EOFError, ConnectionResetError):
            pass  # the close may overtake the error on a reset socket
    _healthy(proxy)


# -- garbage SQL --------------------------------------------------------------------------------

def test_garbage_sql_gets_1064_and_the_session_goes_on(proxy) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            for sql in ("SELEC 1", "SELECT * FROM sharding_4_t1 WHERE id = = 3", "SELECT 1 +", "))((",
                        "SELECT 'unterminated", "INSERT INTO sharding_4_t1 VALUES (", "\x00\x01\x02",
                        "SELECT * FROM sharding_4_t1 WHERE"):
                with pytest.raises(pymysql.err.MySQLError) as ei:
                    cur.execute(sql)
                assert ei.value.args[0] == 1064, (sql, ei.value.args)
                cur.execute("SELECT 3")
                assert cur.fetchone() == (3,)
            # a statement the router passes on unparsed: the backend's own 1064 comes back as is
            with pytest.raises(pymysql.err.MySQLError) as ei:
                cur.execute("SELECT 1 FROM DUAL WHERE 1 = = 1")
            code, msg = ei.value.args
            assert code == 1064 and "right syntax to use near" in msg
    finally:
        conn.close()


@pytest.mark.parametrize("sql", [
    "SET @c = 1; DELETE FROM bi_inject",
    "SET sql_mode = ''; DELETE FROM bi_inject",
    "SET @c = 1 /*!; DELETE FROM bi_inject */",
    "SET @c = 1 /*M!100100 ; DELETE FROM bi_inject */",
])
def test_a_statement_hidden_after_a_set_never_runs(proxy, sql) -> None:
    """Without multi-statements a `;` ends the text as on MariaDB (1064): the SET's value was run on a backend
    connection, which runs several statements, so the DELETE ran there unrouted and unchecked."""
    proxy.query("CREATE TABLE IF NOT EXISTS bi_inject (id INT PRIMARY KEY)")   # on the default node
    proxy.query("REPLACE INTO bi_inject VALUES (1), (2), (3)")
    with RawClient(proxy.port) as c:
        assert c.login().kind == "ok"   # no CLIENT_MULTI_STATEMENTS
        c.query(sql)
        res = c.read_result()
        assert res.error is not None and res.error.err_code == 1064, res.packets[-1].payload
        c.query("SELECT @c")
        assert c.read_result().sets[0][1] == [[None]]   # nothing of it ran
    assert proxy.query("SELECT COUNT(*) FROM bi_inject") == [(3,)]
    _healthy(proxy)


def test_a_client_charset_whose_characters_may_end_in_a_backslash_cannot_hide_a_statement(proxy) -> None:
    """Under SET NAMES gbk, 0xbf5c is one character for MariaDB but a byte and a backslash escaping the quote for
    pydble, which reads UTF-8: `SELECT '<bf5c>'; DELETE FROM t; -- '` ran the DELETE on the backend. The
    charset stays usable (set by name, by collation id, or in the handshake); such a statement is refused."""
    proxy.query("CREATE TABLE IF NOT EXISTS bi_inject (id INT PRIMARY KEY)")
    proxy.query("REPLACE INTO bi_inject VALUES (1), (2), (3)")
    attack = b"\x03SELECT '\xbf\x5c'; DELETE FROM bi_inject; -- '"
    with RawClient(proxy.port) as c:
        assert c.login().kind == "ok"
        for sql in ("SET NAMES gbk", "SET NAMES big5 COLLATE big5_bin", "SET CHARACTER SET sjis",
                    "SET character_set_client = 'cp932'", "SET character_set_client = 28"):
            c.query(sql)
            assert c.read_result().error is None, sql
            c.send_packet(0, attack)
            res = c.read_result()
            assert res.error is not None and res.error.err_code == 1235, (sql, res.packets[-1].payload)
    with RawClient(proxy.port) as c:   # gbk_chinese_ci (28) named in the handshake
        c.read_greeting()
        c.send_packet(1, c.handshake_response("test", "111111", "schema1", BASE_CAPS)[:8] + b"\x1c"
                      + c.handshake_response("test", "111111", "schema1", BASE_CAPS)[9:])
        assert c.read_packet().kind == "ok"
        c.send_packet(0, attack)
        res = c.read_result()
        assert res.error is not None and res.error.err_code == 1235, res.packets[-1].payload
    assert proxy.query("SELECT COUNT(*) FROM bi_inject") == [(3,)]
    _healthy(proxy)


def test_a_prepared_statement_is_one_statement(proxy) -> None:
    """COM_STMT_PREPARE refuses several statements (1064) and an empty text (1065) as MariaDB does; it
    prepared them, and EXECUTE ran `SET @a = 1; DELETE FROM t` on a backend whole."""
    proxy.query("CREATE TABLE IF NOT EXISTS bi_inject (id INT PRIMARY KEY)")
    proxy.query("REPLACE INTO bi_inject VALUES (1), (2), (3)")
    with RawClient(proxy.port) as c:
        assert c.login().kind == "ok"
        for text, code in ((b"SET @a = 1; DELETE FROM bi_inject", 1064), (b"", 1065), (b" ; ", 1065)):
            c.command(b"\x16" + text)
            p = c.read_packet()
            assert p.kind == "err" and p.err_code == code, (text, p.payload)
    assert proxy.query("SELECT COUNT(*) FROM bi_inject") == [(3,)]


# -- clients that vanish ------------------------------------------------------------------------

@pytest.fixture
def small_pool_proxy(backends, fresh_proxy):
    cfg = proxy_config(backends, free_port(), free_port(), instance="pydble-vanish")
    for g in cfg["db_groups"].values():
        g["max_con"] = 3
        g["connect_timeout_s"] = 1
    return fresh_proxy(cfg)


def _reset(sock: socket.socket) -> None:
    """Close with a RST, as a killed client does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_clients_vanishing_mid_result_leave_no_bad_connection(small_pool_proxy) -> None:
    p = small_pool_proxy
    p.query("DROP TABLE IF EXISTS bi_big")
    p.query("CREATE TABLE bi_big (id INT PRIMARY KEY, pad VARCHAR(200))")  # default node dn5
    p.query("INSERT INTO bi_big SELECT seq, REPEAT('p', 200) FROM seq_1_to_60000")
    for i in range(8):  # more than max_con: leaked connections would starve the pool
        with RawClient(p.port) as c:
            assert c.login().kind == "ok"
            c.query("SELECT * FROM bi_big" if i % 2 else "SELECT id, pad, SLEEP(0) FROM bi_big ORDER BY id DESC")
            c.recv_exact(20000)  # the answer has started
            _reset(c.sock)
    # the backend connections that were streaming were dropped, not handed to the next session
    for _ in range(10):
        assert p.query("SELECT COUNT(*), MAX(id) FROM bi_big") == [(60000, 60000)]
        assert p.query("SELECT id FROM bi_big WHERE id = 777") == [(777,)]
    # a client gone while the backend is still working
    with RawClient(p.port) as c:
        assert c.login().kind == "ok"
        c.query("SELECT SLEEP(3)")
        time.sleep(0.2)
        _reset(c.sock)
    started = time.monotonic()
    assert p.query("SELECT 5") == [(5,)]
    assert time.monotonic() - started < 2
    _healthy(p)


def test_a_client_vanishing_mid_merge(small_pool_proxy) -> None:
    p = small_pool_proxy
    p.query("DROP TABLE IF EXISTS sharding_4_t1")
    p.query("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(200))")
    rows = ", ".join(f"({i}, REPEAT('q', 200))" for i in range(1, 4001))
    p.query(f"INSERT INTO sharding_4_t1 VALUES {rows}")
    for _ in range(5):
        with RawClient(p.port) as c:
            assert c.login().kind == "ok"
            c.query("SELECT * FROM sharding_4_t1 ORDER BY id")
            c.recv_exact(1000)
            _reset(c.sock)
    assert p.query("SELECT COUNT(*) FROM sharding_4_t1") == [(4000,)]
    assert p.query("SELECT id FROM sharding_4_t1 ORDER BY id DESC LIMIT 1") == [(4000,)]


def test_a_slow_reader_gets_everything(backends, fresh_proxy) -> None:
    """Backpressure: a client reading slowly for longer than the backend timeout still gets it all.

    The timeout bounds backend silence, not how long a client takes to read a long answer."""
    p = fresh_proxy(proxy_config(backends, free_port(), free_port(), instance="pydble-slow")
                    | {"server": {"instance": "pydble-slow", "bind": "127.0.0.1", "port": free_port(),
                                  "manager_port": free_port(), "backend_timeout_s": 1}})
    p.query("DROP TABLE IF EXISTS bi_slow")
    p.query("CREATE TABLE bi_slow (id INT PRIMARY KEY, pad VARCHAR(200))")
    p.query("INSERT INTO bi_slow SELECT seq, REPEAT('s', 200) FROM seq_1_to_30000")
    for sql in ("SELECT id, pad FROM bi_slow", "/*!pydble:shardingNode=dn5*/ SELECT id, pad FROM bi_slow"):
        with RawClient(p.port) as c:
            assert c.login().kind == "ok"
            c.query(sql)
            started = time.monotonic()
            chunks = []
            while time.monotonic() - started < 2.5:  # ~6 MB answer read at ~1.5 MB/s at most
                chunks.append(c.sock.recv(16384))
                time.sleep(0.01)
            c.buf = b"".join(chunks)
            res = c.read_result()
            assert res.error is None, res.error.payload if res.error else None
            ids = [int(r[0]) for r in res.sets[0][1]]
            assert ids == list(range(1, 30001))
            seqs = res.seqs
            assert all((b - a) % 256 == 1 for a, b in zip(seqs, seqs[1:]))
    # the connection that was held back is in a good state for the next session
    for _ in range(5):
        assert p.query("SELECT COUNT(*) FROM bi_slow") == [(30000,)]


def test_a_client_that_sends_without_reading_grows_no_buffer(proxy) -> None:
    """Commands pipelined by a client that reads nothing are not answered faster than it reads: the 4 MB
    answers of 25 merged reads (100 MB) were all built and queued in the proxy's memory."""
    proxy.query("DELETE FROM sharding_4_t1 WHERE id <= 4")
    proxy.query("INSERT INTO sharding_4_t1 VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')")
    sql = b"\x03SELECT id, REPEAT(name, 1000000) FROM sharding_4_t1 WHERE id IN (1, 2, 3, 4) ORDER BY id"
    with RawClient(proxy.proxy_port, timeout=30) as c:
        assert c.login().kind == "ok"
        before = rss_mb(proxy.pid)
        c.send_raw(_frame(0, sql) * 25)
        grew = 0.0
        for _ in range(20):   # what the proxy would have queued by now (about 100 MB/s here)
            time.sleep(0.15)
            grew = max(grew, rss_mb(proxy.pid) - before)
        assert grew < 40, f"the proxy grew {grew:.0f} MB for a client that reads nothing"
        for _ in range(25):   # then it answers everything, in order, once the client reads
            res = c.read_result()
            assert res.error is None and [(r[0], len(r[1])) for r in res.sets[0][1]] == [
                (b"1", 1000000), (b"2", 1000000), (b"3", 1000000), (b"4", 1000000)]
    _healthy(proxy)


# -- a storm of connections ---------------------------------------------------------------------

def test_500_connections_at_once(proxy) -> None:
    proxy.query("DROP TABLE IF EXISTS sharding_4_t1")
    proxy.query("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))")
    proxy.query("INSERT INTO sharding_4_t1 VALUES " + ", ".join(f"({i}, 'n{i}')" for i in range(1, 101)))

    async def one(i: int) -> str:
        try:
            conn = await asyncio.wait_for(
                aiomysql.connect(host="127.0.0.1", port=proxy.port, user="test", password="111111",
                                 db="schema1", autocommit=True, connect_timeout=30), 60)
        except pymysql.err.OperationalError as e:
            return f"refused {e.args[0]}"
        try:
            async with conn.cursor() as cur:
                k = i % 100 + 1
                await cur.execute("SELECT name FROM sharding_4_t1 WHERE id = %s", (k,))
                assert await cur.fetchone() == (f"n{k}",)
                if i % 10 == 0:
                    await cur.execute("SELECT COUNT(*) FROM sharding_4_t1")
                    assert await cur.fetchone() == (100,)
            return "ok"
        except pymysql.err.MySQLError as e:
            return f"error {e.args[0]}"
        finally:
            conn.close()

    async def storm() -> list[str]:
        # the sockets also sit idle together: every one logs in before any query is sent
        return await asyncio.gather(*(one(i) for i in range(500)))

    started = time.monotonic()
    outcomes = asyncio.run(storm())
    elapsed = time.monotonic() - started
    bad = [o for o in outcomes if o != "ok"]
    assert all(o.startswith(("error 1040", "refused 1040")) for o in bad), bad[:5]
    assert len(bad) <= 50, bad[:5]
    assert elapsed < 60
    _healthy(proxy)


def test_500_raw_greetings_at_once(proxy) -> None:
    """500 sockets opened together each get a greeting; those that never answer are let go."""
    socks = []
    try:
        for _ in range(500):
            s = socket.socket()
            s.settimeout(30)
            s.connect(("127.0.0.1", proxy.port))
            socks.append(s)
        for s in socks:
            hdr = s.recv(4)
            assert len(hdr) == 4 and hdr[3] == 0
    finally:
        for s in socks:
            s.close()
    _healthy(proxy)
