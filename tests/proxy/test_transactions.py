"""Transactions across shardingNodes: BEGIN/COMMIT/ROLLBACK, autocommit=0, savepoints, lost clients.

Every check of what is committed reads the backends directly, so a rollback that only looks right
through the proxy would fail.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Iterator

import pymysql
import pytest
from pymysql.constants import SERVER_STATUS

from wire import drop_after, hash_node, node_rows


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    """Leave the shared backends without this module's tables."""
    yield from drop_after(proxy, 'sharding_4_t1', 'tx_other')

FOUR = ("dn1", "dn2", "dn3", "dn4")


@pytest.fixture

def table(proxy) -> Iterator[str]:
    """sharding_4_t1 recreated empty: (id INT PRIMARY KEY, name VARCHAR(20))."""
    proxy.query("DROP TABLE IF EXISTS sharding_4_t1")
    proxy.query("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))")
    yield "sharding_4_t1"


def _committed(backends, backend_rows) -> dict[str, list[int]]:
    """Committed ids per node, read directly from the backends."""
    return {n: sorted(r[0] for r in node_rows(backends, backend_rows, n, "SELECT id FROM sharding_4_t1"))
            for n in FOUR}


def _expect(ids) -> dict[str, list[int]]:
    return {n: sorted(i for i in ids if hash_node(i, FOUR) == n) for n in FOUR}


def _insert(cur: Any, ids) -> int:
    return cur.execute("INSERT INTO sharding_4_t1 VALUES " + ", ".join(f"({i}, 'n{i}')" for i in ids))


def test_rollback_undoes_rows_on_every_node(proxy, table, backends, backend_rows) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            assert _insert(cur, range(1, 9)) == 8
            cur.execute("UPDATE sharding_4_t1 SET name = 'changed'")
            cur.execute("SELECT COUNT(*) FROM sharding_4_t1 WHERE name = 'changed'")
            assert cur.fetchone() == (8,)  # the transaction sees its own writes on every node
            assert _committed(backends, backend_rows) == _expect([])  # nobody else does
            cur.execute("ROLLBACK")
            assert not conn.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            cur.execute("SELECT COUNT(*) FROM sharding_4_t1")
            assert cur.fetchone() == (0,)
    finally:
        conn.close()
    assert _committed(backends, backend_rows) == _expect([])


def test_commit_makes_rows_visible_on_every_node(proxy, table, backends, backend_rows) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION")
            _insert(cur, range(1, 9))
            assert _committed(backends, backend_rows) == _expect([])
            cur.execute("COMMIT")
    finally:
        conn.close()
    assert _committed(backends, backend_rows) == _expect(range(1, 9))


def test_autocommit_off_pins_nodes_until_commit_or_rollback(proxy, table, backends, backend_rows) -> None:
    conn = proxy.connect(autocommit=False)
    try:
        with conn.cursor() as cur:
            _insert(cur, [1, 2])
            cur.execute("UPDATE sharding_4_t1 SET name = 'x' WHERE id = 1")
            assert conn.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            conn.rollback()
            assert _committed(backends, backend_rows) == _expect([])
            _insert(cur, [3, 4, 5])
            assert _committed(backends, backend_rows) == _expect([])
            conn.commit()
            assert _committed(backends, backend_rows) == _expect([3, 4, 5])
            # the next statement opens a new transaction by itself (autocommit is still off)
            cur.execute("DELETE FROM sharding_4_t1 WHERE id = 4")
            assert _committed(backends, backend_rows) == _expect([3, 4, 5])
            conn.rollback()
            assert _committed(backends, backend_rows) == _expect([3, 4, 5])
    finally:
        conn.close()


def test_set_autocommit_on_commits_an_open_transaction(proxy, table, backends, backend_rows) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET autocommit = 0")
            _insert(cur, [1, 2, 3])
            cur.execute("SET autocommit = 1")  # as in MySQL: commits
            assert conn.server_status & SERVER_STATUS.SERVER_STATUS_AUTOCOMMIT
            assert not conn.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS
    finally:
        conn.close()
    assert _committed(backends, backend_rows) == _expect([1, 2, 3])


def test_begin_inside_a_transaction_commits_the_first(proxy, table, backends, backend_rows) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            _insert(cur, [1, 2])
            cur.execute("BEGIN")  # implicit commit, as MySQL does
            _insert(cur, [3])
            cur.execute("ROLLBACK")
    finally:
        conn.close()
    assert _committed(backends, backend_rows) == _expect([1, 2])


def test_an_error_inside_a_transaction_keeps_it_open(proxy, table, backends, backend_rows) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            _insert(cur, [1])
            with pytest.raises(pymysql.err.IntegrityError):
                _insert(cur, [1])
            assert conn.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            _insert(cur, [2, 3])
            cur.execute("COMMIT")
    finally:
        conn.close()
    assert _committed(backends, backend_rows) == _expect([1, 2, 3])


def test_savepoints_across_nodes(proxy, table, backends, backend_rows) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            _insert(cur, [1])                 # dn2
            cur.execute("SAVEPOINT s1")
            _insert(cur, [2, 5])              # dn3 joins after the savepoint, dn2 again
            cur.execute("SAVEPOINT s2")
            _insert(cur, [4])                 # dn1 joins after s2
            cur.execute("ROLLBACK TO SAVEPOINT s2")
            cur.execute("SELECT id FROM sharding_4_t1 ORDER BY id")
            assert cur.fetchall() == ((1,), (2,), (5,))
            cur.execute("ROLLBACK TO s1")
            cur.execute("SELECT id FROM sharding_4_t1 ORDER BY id")
            assert cur.fetchall() == ((1,),)
            with pytest.raises(pymysql.err.MySQLError) as ei:
                cur.execute("ROLLBACK TO SAVEPOINT s2")   # gone with the rollback to s1
            assert ei.value.args[0] == 1305
            _insert(cur, [3])
            cur.execute("RELEASE SAVEPOINT s1")
            cur.execute("COMMIT")
    finally:
        conn.close()
    assert _committed(backends, backend_rows) == _expect([1, 3])


def test_a_vanished_client_rolls_back(proxy, table, backends, backend_rows) -> None:
    conn = proxy.connect()
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        _insert(cur, range(1, 9))
    conn._sock.shutdown(socket.SHUT_RDWR)  # no COM_QUIT, no ROLLBACK: the client just goes away
    conn._force_close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        # the rows were never committed; the locks they held must be released too
        probe = proxy.connect()
        try:
            with probe.cursor() as cur:
                cur.execute("SET innodb_lock_wait_timeout = 1")
                try:
                    cur.execute("INSERT INTO sharding_4_t1 VALUES (1, 'again'), (2, 'again')")
                    break
                except pymysql.err.OperationalError as e:
                    assert e.args[0] == 1205
        finally:
            probe.close()
    assert _committed(backends, backend_rows) == _expect([1, 2])


def test_other_sessions_do_not_see_uncommitted_rows(proxy, table) -> None:
    a = proxy.connect()
    b = proxy.connect()
    try:
        with a.cursor() as ca, b.cursor() as cb:
            ca.execute("BEGIN")
            _insert(ca, range(1, 5))
            cb.execute("SELECT COUNT(*) FROM sharding_4_t1")
            assert cb.fetchone() == (0,)
            ca.execute("COMMIT")
            cb.execute("SELECT COUNT(*) FROM sharding_4_t1")
            assert cb.fetchone() == (4,)
    finally:
        a.close()
        b.close()


def test_ddl_inside_a_transaction_commits_it(proxy, table, backends, backend_rows) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            _insert(cur, [1, 2])
            cur.execute("DROP TABLE IF EXISTS tx_other")   # implicit commit, as in MySQL
            cur.execute("ROLLBACK")
    finally:
        conn.close()
    assert _committed(backends, backend_rows) == _expect([1, 2])


def test_read_only_transactions_and_isolation_level(proxy, table) -> None:
    proxy.query("INSERT INTO sharding_4_t1 VALUES (1, 'a'), (2, 'b')")
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute("BEGIN")
            cur.execute("SELECT COUNT(*) FROM sharding_4_t1")
            assert cur.fetchone() == (2,)
            proxy.query("INSERT INTO sharding_4_t1 VALUES (3, 'c')")
            cur.execute("SELECT COUNT(*) FROM sharding_4_t1")
            assert cur.fetchone() == (3,)   # READ COMMITTED sees the other commit
            cur.execute("COMMIT")
    finally:
        conn.close()
