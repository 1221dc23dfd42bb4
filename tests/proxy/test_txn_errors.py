"""Errors inside transactions answered as one MariaDB would, and never a broken packet.

A backend connection killed (KILL on the backend) while the transaction sits idle or while its
statement runs: the client hears a server code naming the node (libmariadb-based clients used to get
"2027 Received malformed packet" for pydble's client-range codes), the COMMIT rolls back every node
and says so. A deadlock on one node, or across nodes (no single InnoDB sees that one), rolls the
whole transaction back and clears IN_TRANS; a lock wait timeout keeps it open. Every check of what
is committed reads the backends directly.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pymysql
import pytest
from harness import require_module
from pymysql.constants import CLIENT, SERVER_STATUS

from wire import drop_after, node_rows

TABLE = "sharding_4_t1"   # hash over dn1..dn4: id 4 -> dn1, 1 and 5 -> dn2, 2 -> dn3, 3 -> dn4
NODE_SERVER = {"dn1": 0, "dn2": 1, "dn3": 0, "dn4": 1}


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    yield from drop_after(proxy, TABLE)


@pytest.fixture
def rows(proxy) -> None:
    """sharding_4_t1 with ids 1..8 named 'n<id>', committed."""
    proxy.query(f"DROP TABLE IF EXISTS {TABLE}")
    proxy.query(f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, name VARCHAR(20))")
    proxy.query(f"INSERT INTO {TABLE} VALUES " + ", ".join(f"({i}, 'n{i}')" for i in range(1, 9)))


def _names(backends, backend_rows) -> dict[int, str]:
    """Committed names by id, read on the nodes themselves."""
    out: dict[int, str] = {}
    for node in ("dn1", "dn2", "dn3", "dn4"):
        out.update(dict(node_rows(backends, backend_rows, node, f"SELECT id, name FROM {TABLE}")))
    return out


def _original() -> dict[int, str]:
    return {i: f"n{i}" for i in range(1, 9)}


def _kill_transactions_on(backends, node: str) -> None:
    """KILL the backend connection(s) holding an open InnoDB transaction on node's server."""
    server = backends[NODE_SERVER[node]]
    ids = [r[0] for r in server.query("SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX")]
    assert ids, "no open transaction to kill"
    for i in ids:
        server.query(f"KILL {int(i)}")


def _mysqlclient(proxy) -> Any:
    """A libmariadb-based connection (mysqlclient): it reports a client-range code in an ERR as 2027."""
    MySQLdb = require_module("MySQLdb", "mysqlclient is not installed (needs libmariadb-dev)")
    return MySQLdb.connect(host="127.0.0.1", port=proxy.port, user="test", password="111111",
                           database="schema1", autocommit=True)


def test_a_killed_connection_is_reported_with_a_server_code_to_libmariadb(proxy, rows, backends,
                                                                         backend_rows) -> None:
    import MySQLdb  # noqa: F401 - _mysqlclient skipped already if missing

    conn = _mysqlclient(proxy)
    try:
        cur = conn.cursor()
        cur.execute("BEGIN")
        cur.execute(f"UPDATE {TABLE} SET name = 'x' WHERE id = 4")   # dn1
        cur.execute(f"UPDATE {TABLE} SET name = 'x' WHERE id = 1")   # dn2
        _kill_transactions_on(backends, "dn2")
        with pytest.raises(conn.OperationalError) as ei:
            cur.execute(f"UPDATE {TABLE} SET name = 'y' WHERE id = 5")   # dn2 again: its part is gone
        code, msg = ei.value.args
        assert code == 1105 and "dn2" in msg and "lost" in msg, ei.value.args
        with pytest.raises(conn.OperationalError) as ei:
            cur.execute("COMMIT")
        code, msg = ei.value.args
        assert code == 1105 and "rolled back" in msg and "nothing was committed" in msg, ei.value.args
        cur.execute(f"SELECT name FROM {TABLE} WHERE id = 4")   # the session goes on, outside a transaction
        assert cur.fetchall() == (("n4",),)
    finally:
        conn.close()
    assert _names(backends, backend_rows) == _original()


def test_commit_after_a_node_was_lost_while_idle_commits_nothing(proxy, rows, backends, backend_rows) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"UPDATE {TABLE} SET name = 'x' WHERE id = 4")   # dn1
            cur.execute(f"UPDATE {TABLE} SET name = 'x' WHERE id = 1")   # dn2
            _kill_transactions_on(backends, "dn2")
            time.sleep(0.2)
            with pytest.raises(pymysql.err.OperationalError) as ei:
                cur.execute("COMMIT")
            code, msg = ei.value.args
            assert code == 1105 and "dn2" in msg and "nothing was committed" in msg, ei.value.args
            cur.execute(f"UPDATE {TABLE} SET name = 'after' WHERE id = 8")   # the next statement works,
            assert not conn.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS   # outside a transaction
    finally:
        conn.close()
    assert _names(backends, backend_rows) == {**_original(), 8: "after"}


def test_commit_after_a_node_was_lost_during_a_statement_commits_nothing(proxy, rows, backends,
                                                                         backend_rows) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"UPDATE {TABLE} SET name = 'x' WHERE id = 4")   # dn1
            cur.execute(f"UPDATE {TABLE} SET name = 'x' WHERE id = 1")   # dn2
            killer = threading.Timer(0.5, _kill_transactions_on, (backends, "dn2"))
            killer.start()
            try:
                with pytest.raises(pymysql.err.OperationalError) as ei:
                    cur.execute(f"SELECT SLEEP(5) FROM {TABLE} WHERE id = 5")   # dn2, killed meanwhile
            finally:
                killer.join()
            code, msg = ei.value.args
            assert code == 1105 and "dn2" in msg, ei.value.args
            with pytest.raises(pymysql.err.OperationalError) as ei:
                cur.execute("COMMIT")
            assert ei.value.args[0] == 1105 and "nothing was committed" in ei.value.args[1], ei.value.args
            cur.execute(f"SELECT COUNT(*) FROM {TABLE}")
            assert cur.fetchall() == ((8,),)
    finally:
        conn.close()
    assert _names(backends, backend_rows) == _original()


def _begin(proxy) -> tuple[Any, Any]:
    conn = proxy.connect()
    cur = conn.cursor()
    cur.execute("BEGIN")
    return conn, cur


def _run_bg(cur: Any, sql: str) -> tuple[threading.Thread, dict[str, Any]]:
    """Run sql in a thread (it is expected to block on a lock); the outcome lands in the dict."""
    out: dict[str, Any] = {}

    def go() -> None:
        try:
            cur.execute(sql)
            out["ok"] = True
        except pymysql.err.MySQLError as e:
            out["error"] = e.args

    t = threading.Thread(target=go)
    t.start()
    return t, out


def _deadlock_victim(a: tuple[Any, Any, dict], b: tuple[Any, Any, dict]) -> tuple[Any, Any]:
    """Of two sessions that deadlocked, (victim connection, survivor connection); checks the 1213."""
    (ca, ta, oa), (cb, tb, ob) = a, b
    ta.join(20)
    tb.join(20)
    assert not ta.is_alive() and not tb.is_alive()
    errors = [o.get("error") for o in (oa, ob)]
    assert sorted(e is None for e in errors) == [False, True], (oa, ob)   # exactly one victim
    victim, survivor = (ca, cb) if errors[0] is not None else (cb, ca)
    code, sqlstate_msg = next(e for e in errors if e is not None)
    assert code == 1213 and "Deadlock found" in sqlstate_msg
    return victim, survivor


@pytest.mark.parametrize("first, second, a_other, b_other", [
    pytest.param(1, 5, 2, 3, id="one node"),              # both rows on dn2: InnoDB sees the cycle
    pytest.param(4, 1, 2, 3, id="across servers"),        # dn1 and dn2: only pydble sees it
    pytest.param(4, 6, 1, 3, id="two nodes of a server"),  # dn1 and dn3: two transactions to one InnoDB
])
def test_a_deadlock_rolls_back_the_whole_transaction_of_its_victim(proxy, rows, backends, backend_rows,
                                                                   first: int, second: int, a_other: int,
                                                                   b_other: int) -> None:
    ca, a = _begin(proxy)
    cb, b = _begin(proxy)
    try:
        a.execute(f"UPDATE {TABLE} SET name = 'a' WHERE id = {a_other}")    # a's part elsewhere
        b.execute(f"UPDATE {TABLE} SET name = 'b' WHERE id = {b_other}")    # b's part elsewhere
        a.execute(f"UPDATE {TABLE} SET name = 'a' WHERE id = {first}")
        b.execute(f"UPDATE {TABLE} SET name = 'b' WHERE id = {second}")
        started = time.monotonic()
        ta, oa = _run_bg(a, f"UPDATE {TABLE} SET name = 'a' WHERE id = {second}")
        time.sleep(0.3)
        tb, ob = _run_bg(b, f"UPDATE {TABLE} SET name = 'b' WHERE id = {first}")
        victim, survivor = _deadlock_victim((ca, ta, oa), (cb, tb, ob))
        assert time.monotonic() - started < 10   # not innodb_lock_wait_timeout (50 s)
        assert survivor.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS
        survivor.cursor().execute("COMMIT")
        with victim.cursor() as cur:   # the victim's session goes on, outside a transaction
            cur.execute(f"SELECT COUNT(*) FROM {TABLE}")
            assert cur.fetchall() == ((8,),)
            cur.execute("SET @after = 1")   # an OK: PyMySQL reads the status flags of OK packets
        assert not victim.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS
        who = "a" if survivor is ca else "b"
        won = {a_other: "a", first: "a", second: "a"} if who == "a" else {b_other: "b", first: "b", second: "b"}
        assert _names(backends, backend_rows) == {**_original(), **won}   # nothing of the victim's
    finally:
        ca.close()
        cb.close()


def test_a_lock_wait_timeout_keeps_the_transaction_open(proxy, rows, backends, backend_rows) -> None:
    ca, a = _begin(proxy)
    cb = proxy.connect()
    try:
        a.execute(f"UPDATE {TABLE} SET name = 'a' WHERE id = 4")    # dn1, held
        b = cb.cursor()
        b.execute("SET innodb_lock_wait_timeout = 1")
        b.execute("BEGIN")
        b.execute(f"UPDATE {TABLE} SET name = 'b' WHERE id = 1")    # dn2
        with pytest.raises(pymysql.err.OperationalError) as ei:
            b.execute(f"UPDATE {TABLE} SET name = 'b' WHERE id = 4")
        assert ei.value.args[0] == 1205 and "Lock wait timeout" in ei.value.args[1]
        assert cb.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS   # as MariaDB: still open
        a.execute("ROLLBACK")
        b.execute("COMMIT")
    finally:
        ca.close()
        cb.close()
    assert _names(backends, backend_rows) == {**_original(), 1: "b"}


@pytest.mark.parametrize("txn", ["autocommit", "transaction"])
def test_a_duplicate_key_in_a_multi_node_insert_inserts_nothing(proxy, rows, backends, backend_rows,
                                                                txn: str) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            if txn == "transaction":
                cur.execute("BEGIN")
                cur.execute(f"UPDATE {TABLE} SET name = 'kept' WHERE id = 5")
            with pytest.raises(pymysql.err.IntegrityError) as ei:
                cur.execute(f"INSERT INTO {TABLE} VALUES (11, 'x'), (12, 'x'), (3, 'dup'), (14, 'x')")
            assert ei.value.args == (1062, "Duplicate entry '3' for key 'PRIMARY'")
            cur.execute(f"SELECT COUNT(*) FROM {TABLE}")   # as on MariaDB: the statement did nothing
            assert cur.fetchall() == ((8,),)
            if txn == "transaction":
                cur.execute("COMMIT")   # the transaction went on: its earlier work is committed
    finally:
        conn.close()
    assert _names(backends, backend_rows) == {**_original(), **({5: "kept"} if txn == "transaction" else {})}


def test_an_error_in_the_middle_of_a_multi_statement(proxy, rows, backends, backend_rows) -> None:
    conn = proxy.connect(client_flag=CLIENT.MULTI_STATEMENTS)
    try:
        with conn.cursor() as cur:
            cur.execute(f"UPDATE {TABLE} SET name = 'm' WHERE id = 6; INSERT INTO {TABLE} VALUES (2, 'dup'); "
                        f"UPDATE {TABLE} SET name = 'never' WHERE id = 7")
            with pytest.raises(pymysql.err.IntegrityError) as ei:
                cur.nextset()
            assert ei.value.args == (1062, "Duplicate entry '2' for key 'PRIMARY'")
            cur.execute(f"SELECT name FROM {TABLE} WHERE id IN (6, 7) ORDER BY id")   # the session goes on
            assert cur.fetchall() == (("m",), ("n7",))
    finally:
        conn.close()
    assert _names(backends, backend_rows) == {**_original(), 6: "m"}
