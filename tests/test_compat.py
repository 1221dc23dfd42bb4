"""Compatibility matrix: the mysql CLI, PyMySQL, aiomysql and mysqlclient against the proxy.

Each client connects with its own defaults, reads the status flags the way it does (autocommit,
IN_TRANS), writes rows over several nodes of a sharding table inside and outside transactions, and
reads them back merged. The README's compatibility matrix points at these tests (and at
test_compat_jdbc.py, test_compat_spark.py, proxy/test_prepared_sysbench.py).
"""

from __future__ import annotations

import asyncio
import copy
import os
import pty
import select
import socket
import subprocess
import threading
import time
from collections import Counter
from typing import Any, Iterator

import pytest

from harness import ProxyProcess, free_port, proxy_config, require_module, require_tool

NODES = ["dn1", "dn2", "dn3", "dn4"]
NODE_DB = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2")}
IN_TRANS, AUTOCOMMIT = 1, 2
TRICKY = "it's a \"quote\" \\ backslash; -- ü"


@pytest.fixture(scope="module")
def compat_proxy(backends: list[Any]) -> Iterator[ProxyProcess]:
    """A proxy of our own with one sharding table per client, created empty."""
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-compat"))
    tables = cfg["schemas"]["schema1"]["tables"]
    names = ("compat_cli", "compat_pymysql", "compat_aiomysql", "compat_mysqlclient")
    for t in names:
        tables[t] = {"type": "sharding", "nodes": NODES, "function": "hash-four", "column": "id"}
    p = ProxyProcess(cfg, name="proxy-compat", release_ports=True)
    try:
        p.start()
        conn = p.connect()
        with conn.cursor() as cur:
            for t in names:
                cur.execute(f"DROP TABLE IF EXISTS {t}")
                cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR(60))")
        conn.close()
        yield p
    finally:
        p.cleanup()


def node_ids(backends: list[Any], table: str) -> dict[str, list[int]]:
    """The ids each node holds, read directly."""
    out = {}
    for node, (i, db) in NODE_DB.items():
        out[node] = sorted(r[0] for r in backends[i].query(f"SELECT id FROM {table}", db))
    return out


def assert_placed(backends: list[Any], table: str, ids: list[int]) -> None:
    """Every id on the node hash-four names, and nothing else."""
    got = node_ids(backends, table)
    assert got == {n: sorted(i for i in ids if i % 4 == k) for k, n in enumerate(NODES)}


# -- the mysql CLI ------------------------------------------------------------------------------

class CommandCounter:
    """A TCP relay in front of the proxy that counts the commands clients send (first byte, seq 0)."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.counts: Counter[int] = Counter()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            s = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(c, s, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(s, c, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        buf = b""
        try:
            while True:
                d = src.recv(65536)
                if not d:
                    break
                if count:
                    buf += d
                    while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:3], "little"):
                        n = int.from_bytes(buf[:3], "little")
                        if buf[3] == 0 and n:
                            self.counts[buf[4]] += 1
                        buf = buf[4 + n:]
                dst.sendall(d)
        except OSError:
            pass
        finally:
            for x in (src, dst):
                try:
                    x.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def run_interactive(argv: list[str], lines: list[str], settle: float = 2.0) -> str:
    """Run a terminal program in a pty (so the mysql CLI behaves as for a person), feeding lines."""
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                         env={**os.environ, "TERM": "dumb", "HOME": "/tmp"})
    os.close(slave)
    out = bytearray()

    def drain(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            r, _, _ = select.select([master], [], [], 0.1)
            if r:
                try:
                    out.extend(os.read(master, 65536))
                except OSError:
                    return

    drain(settle)
    for line in lines:
        os.write(master, line.encode() + b"\n")
        drain(1.0)
    try:
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
    return out.decode("utf-8", "replace")


def test_mysql_cli(compat_proxy: ProxyProcess, backends: list[Any]) -> None:
    require_tool("mysql", "the mysql CLI is not installed (apt mariadb-client)")
    base = ["mysql", "-h127.0.0.1", f"-P{compat_proxy.port}", "-utest", "-p111111"]
    sql = ("INSERT INTO compat_cli VALUES (1,'a'),(2,'b'),(3,'c'),(4,'d'),(5,'e'); "
           "BEGIN; DELETE FROM compat_cli WHERE id = 5; ROLLBACK; "
           "SELECT @@version_comment; SELECT id, name FROM compat_cli ORDER BY id DESC LIMIT 3; "
           "SELECT COUNT(*), SUM(id) FROM compat_cli; SHOW TABLES LIKE 'compat_c%';")
    res = subprocess.run(base + ["--batch", "schema1", "-e", sql], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n") == [
        "@@version_comment", "pydble sharding proxy",
        "id\tname", "5\te", "4\td", "3\tc",
        "COUNT(*)\tSUM(id)", "5\t15",
        "Tables_in_schema1 (compat_c%)", "compat_cli", ""]
    assert_placed(backends, "compat_cli", [1, 2, 3, 4, 5])

    # interactive: completion (SHOW TABLES + COM_FIELD_LIST per table), USE (COM_INIT_DB), errors shown
    relay = CommandCounter(compat_proxy.port)
    try:
        text = run_interactive(["mysql", "-h127.0.0.1", f"-P{relay.port}", "-utest", "-p111111", "--auto-rehash",
                                "schema1"],
                               ["USE schema2;", "SELECT DATABASE();", "USE nope;", "quit"])
    finally:
        relay.close()
    assert "Reading table information for completion" in text
    assert "Database changed" in text and "| schema2    |" in text
    assert "ERROR 1044" in text  # schema not granted
    assert relay.counts[0x04] >= 4, relay.counts  # COM_FIELD_LIST: at least our four compat tables
    assert relay.counts[0x02] >= 1, relay.counts  # COM_INIT_DB


# -- PyMySQL --------------------------------------------------------------------------------------

def test_pymysql(compat_proxy: ProxyProcess, backends: list[Any]) -> None:
    import pymysql

    conn = pymysql.connect(host="127.0.0.1", port=compat_proxy.port, user="test", password="111111",
                           database="schema1", charset="utf8mb4")  # PyMySQL's default: autocommit off
    try:
        assert not conn.get_autocommit()
        assert conn.server_status & AUTOCOMMIT == 0
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO compat_pymysql VALUES (%s, %s)", [(i, f"{TRICKY}{i}") for i in range(12)])
            assert conn.server_status & IN_TRANS
            conn.rollback()
            assert not conn.server_status & IN_TRANS
            cur.execute("SELECT COUNT(*) FROM compat_pymysql")
            assert cur.fetchone() == (0,)
            cur.executemany("INSERT INTO compat_pymysql VALUES (%s, %s)", [(i, f"{TRICKY}{i}") for i in range(12)])
            conn.commit()
            cur.execute("SELECT name FROM compat_pymysql WHERE id = %s", (7,))
            assert cur.fetchone() == (f"{TRICKY}7",)
            cur.execute("SELECT id FROM compat_pymysql ORDER BY id DESC LIMIT 2, 3")
            assert cur.fetchall() == ((9,), (8,), (7,))
        conn.autocommit(True)
        assert conn.get_autocommit() and conn.server_status & AUTOCOMMIT
    finally:
        conn.close()
    assert_placed(backends, "compat_pymysql", list(range(12)))


# -- aiomysql -------------------------------------------------------------------------------------

def test_aiomysql(compat_proxy: ProxyProcess, backends: list[Any]) -> None:
    import aiomysql

    async def main() -> None:
        pool = await aiomysql.create_pool(host="127.0.0.1", port=compat_proxy.port, user="test",
                                          password="111111", db="schema1", autocommit=True, minsize=1, maxsize=4)
        try:
            async def one(i: int) -> None:
                async with pool.acquire() as conn:
                    assert conn.get_autocommit()
                    async with conn.cursor() as cur:
                        await cur.execute("INSERT INTO compat_aiomysql VALUES (%s, %s)", (i, TRICKY))
            await asyncio.gather(*(one(i) for i in range(20)))
            async with pool.acquire() as conn:
                await conn.begin()
                async with conn.cursor() as cur:
                    await cur.execute("DELETE FROM compat_aiomysql WHERE id >= 15")
                    assert conn.server_status & IN_TRANS
                await conn.commit()
                assert not conn.server_status & IN_TRANS
                async with conn.cursor(aiomysql.SSCursor) as cur:
                    await cur.execute("SELECT id, name FROM compat_aiomysql ORDER BY id")
                    rows = await cur.fetchall()
                assert [r[0] for r in rows] == list(range(15)) and {r[1] for r in rows} == {TRICKY}
        finally:
            pool.close()
            await pool.wait_closed()

    asyncio.run(main())
    assert_placed(backends, "compat_aiomysql", list(range(15)))


# -- mysqlclient (MySQLdb, libmariadb) -----------------------------------------------------------

def test_mysqlclient(compat_proxy: ProxyProcess, backends: list[Any]) -> None:
    MySQLdb = require_module("MySQLdb", "mysqlclient is not installed (needs libmariadb-dev)")

    conn = MySQLdb.connect(host="127.0.0.1", port=compat_proxy.port, user="test", password="111111",
                           database="schema1", charset="utf8mb4")
    try:
        assert not conn.get_autocommit()  # mysqlclient turns autocommit off and reads it back from the flags
        cur = conn.cursor()
        cur.executemany("INSERT INTO compat_mysqlclient VALUES (%s, %s)", [(i, TRICKY) for i in range(10)])
        conn.commit()
        cur.execute("UPDATE compat_mysqlclient SET name = %s WHERE id = %s", ("changed", 3))
        assert cur.rowcount == 1
        conn.rollback()
        cur.execute("SELECT name FROM compat_mysqlclient WHERE id IN (3, 4) ORDER BY id")
        assert cur.fetchall() == ((TRICKY,), (TRICKY,))
        cur.execute("SELECT COUNT(*), MAX(id) FROM compat_mysqlclient")
        assert cur.fetchone() == (10, 9)
        conn.autocommit(True)
        assert conn.get_autocommit()
        conn.ping()
        assert "MariaDB" in conn.get_server_info()
    finally:
        conn.close()
    assert_placed(backends, "compat_mysqlclient", list(range(10)))
