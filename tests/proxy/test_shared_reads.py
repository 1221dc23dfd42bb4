"""Point reads of sessions in autocommit share pipelined backend connections (proxy/backends/pool.py shared_conn).

Several sessions' reads travel on one backend connection, answered in order; what a user must see is
exactly what a connection of their own would give: their own rows, in their own session state, with
their own warnings, and an error (never another session's answer) when the connection breaks.
"""

from __future__ import annotations

import copy
import random
import threading
import time
from typing import Any, Iterator

import pymysql
import pytest

from harness import ProxyProcess, free_port, proxy_config

ROWS = 64


@pytest.fixture(scope="module")
def sr_proxy(backends: list[Any]) -> Iterator[ProxyProcess]:
    """A proxy of our own (its pool holds only this module's connections) with this module's tables."""
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-shared-reads"))
    tables = cfg["schemas"]["schema1"]["tables"]
    tables["sr_t"] = {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "hash-four",
                      "column": "id"}
    tables["sr_warn"] = {"type": "single", "nodes": ["dn1"]}
    p = ProxyProcess(cfg, name="proxy-shared-reads", release_ports=True)
    try:
        p.start()
        for t in ("sr_t", "sr_warn"):
            p.query(f"DROP TABLE IF EXISTS {t}")
        p.query("CREATE TABLE sr_t (id INT PRIMARY KEY, name VARCHAR(20)) DEFAULT CHARSET utf8mb4")
        p.query("INSERT INTO sr_t VALUES " + ", ".join(f"({i}, 'n{i}é')" for i in range(ROWS)))
        p.query("CREATE TABLE sr_warn (id INT PRIMARY KEY, name VARCHAR(20))")
        p.query("INSERT INTO sr_warn VALUES (1, 'abc'), (2, '5x'), (3, '5')")
        yield p
        for t in ("sr_t", "sr_warn"):
            p.query(f"DROP TABLE IF EXISTS {t}")
    finally:
        p.cleanup()


def _reader(p: ProxyProcess, n: int, charset: str, seen: list[str]) -> None:
    """n point reads on one connection, each checked against the row it asked for."""
    try:
        _read(p, n, charset, seen)
    except Exception as e:  # noqa: BLE001 - the test fails on it, not the thread alone
        seen.append(f"wrong: the reader failed: {e!r}")


def _read(p: ProxyProcess, n: int, charset: str, seen: list[str]) -> None:
    conn = p.connect(charset=charset, use_unicode=False)
    try:
        with conn.cursor() as cur:
            if charset == "latin1":
                cur.execute("SET NAMES latin1")
            want_e = "é".encode("latin1" if charset == "latin1" else "utf-8")
            for _ in range(n):
                i = random.randrange(ROWS)
                try:
                    cur.execute(f"SELECT id, name FROM sr_t WHERE id = {i}")
                    row = cur.fetchone()
                except pymysql.err.OperationalError as e:  # the connection under it broke: an error, not data
                    seen.append(f"error {e.args[0]}")
                    if conn.open:
                        continue
                    conn = p.connect(charset=charset, use_unicode=False)
                    cur = conn.cursor()
                    if charset == "latin1":
                        cur.execute("SET NAMES latin1")
                    continue
                if row != (i, f"n{i}".encode() + want_e):
                    seen.append(f"wrong answer to id {i}: {row!r}")
    finally:
        conn.close()


def test_concurrent_reads_get_their_own_rows_in_their_own_state(sr_proxy: ProxyProcess) -> None:
    seen: list[str] = []
    threads = [threading.Thread(target=_reader, args=(sr_proxy, 300, cs, seen))
               for cs in ("utf8mb4",) * 10 + ("latin1",) * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert seen == []


def test_a_broken_shared_connection_answers_errors_never_other_rows(sr_proxy: ProxyProcess,
                                                                   backends: list[Any]) -> None:
    seen: list[str] = []
    threads = [threading.Thread(target=_reader, args=(sr_proxy, 400, "utf8mb4", seen)) for _ in range(8)]
    for t in threads:
        t.start()
    for _ in range(5):   # kill the backend connections under the readers, as a crash or a DBA would
        time.sleep(0.2)
        for b in backends:
            for (tid,) in b.query("SELECT id FROM information_schema.processlist WHERE id <> CONNECTION_ID() "
                                  "AND (info LIKE 'SELECT id, name FROM %sr_t%' OR command = 'Sleep')"):
                try:
                    b.query(f"KILL {int(tid)}")
                except Exception:  # noqa: BLE001 - it may have ended already
                    pass
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert [s for s in seen if s.startswith("wrong")] == []
    assert sr_proxy.query("SELECT name FROM sr_t WHERE id = 5") == [("n5é",)]


def test_warnings_of_a_shared_read_are_the_reads_own(sr_proxy: ProxyProcess, backends: list[Any]) -> None:
    conn = sr_proxy.connect()
    direct = pymysql.connect(host="127.0.0.1", port=backends[0].port, user="root", password="", database="db1",
                             autocommit=True)
    try:
        with conn.cursor() as cur, direct.cursor() as dcur:
            cur.execute("SELECT id FROM sr_warn WHERE id = 1")   # a point read: the pool shares a connection
            for _ in range(3):
                cur.execute("SELECT id FROM sr_warn WHERE name = 5")   # compares as numbers: MariaDB warns
                dcur.execute("SELECT id FROM sr_warn WHERE name = 5")
                assert cur.fetchall() == dcur.fetchall()
                cur.execute("SHOW WARNINGS")
                dcur.execute("SHOW WARNINGS")
                got = cur.fetchall()
                assert got == dcur.fetchall() and len(got) == 2
                cur.execute("SELECT id FROM sr_warn WHERE id = 3")
                cur.execute("SHOW WARNINGS")
                assert cur.fetchall() == ()
    finally:
        conn.close()
        direct.close()


def test_a_read_waiting_for_a_lock_does_not_hold_up_later_reads(sr_proxy: ProxyProcess, backends: list[Any]) -> None:
    """A read blocked by another client's lock stalls its shared connection: reads that come later go on
    other connections and are answered while the lock is still held."""
    locker = pymysql.connect(host="127.0.0.1", port=backends[0].port, user="root", password="", database="db1",
                             autocommit=True)
    got: list[Any] = []
    try:
        with locker.cursor() as lcur:
            lcur.execute("LOCK TABLES sr_warn WRITE")
            blocked = threading.Thread(target=lambda: got.append(sr_proxy.query("SELECT id FROM sr_warn WHERE id = 3")))
            blocked.start()
            time.sleep(0.5)   # the read waits on the lock; its shared connection now counts as stalled
            conn = sr_proxy.connect()
            try:
                with conn.cursor() as cur:
                    for i in range(40):
                        cur.execute(f"SELECT name FROM sr_t WHERE id = {i}")
                        assert cur.fetchone() == (f"n{i}é",)
            finally:
                conn.close()
            assert got == []   # still waiting: the reads above did not queue behind it
            lcur.execute("UNLOCK TABLES")
        blocked.join(30)
        assert got == [[(3,)]]
    finally:
        locker.close()
