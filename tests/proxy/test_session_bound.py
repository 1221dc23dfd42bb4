"""Session-bound statements through pydble: user locks (GET_LOCK and kin), LOCK TABLES, row locks of
SELECT ... FOR UPDATE, and all-or-nothing writes over several nodes, each checked from another session
or on the backends directly, as a user of one MySQL would notice them."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pymysql
import pytest

from wire import drop_after, hash_node, node_rows

FOUR = ("dn1", "dn2", "dn3", "dn4")


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    """Leave the shared backends without this module's tables."""
    yield from drop_after(proxy, "sharding_4_t1")


@pytest.fixture
def table(proxy) -> Iterator[str]:
    """sharding_4_t1 recreated with ids 1..8: (id INT PRIMARY KEY, v TINYINT)."""
    proxy.query("DROP TABLE IF EXISTS sharding_4_t1")
    proxy.query("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, v TINYINT)")
    proxy.query("INSERT INTO sharding_4_t1 VALUES " + ", ".join(f"({i}, {i})" for i in range(1, 9)))
    yield "sharding_4_t1"


def one(conn: Any, sql: str) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
    return row[0] if row else None


def err(conn: Any, sql: str) -> int:
    with pytest.raises(pymysql.MySQLError) as e:
        with conn.cursor() as cur:
            cur.execute(sql)
    return e.value.args[0]


def close(*conns: Any) -> None:
    for c in conns:
        if c.open:
            c.close()


def session(proxy, db: str = "schema1") -> Any:
    c = proxy.connect(database=db) if db else proxy.connect()
    c.autocommit(True)
    return c


# -- user locks ----------------------------------------------------------------------------------

def test_get_lock_contends_between_sessions_and_ends_with_the_session(proxy) -> None:
    a, b = session(proxy), session(proxy, "schema2")   # another schema: the same lock namespace
    try:
        assert one(a, "SELECT GET_LOCK('h9_lock', 0)") == 1
        assert one(b, "SELECT GET_LOCK('h9_lock', 0)") == 0          # held by a, as on one MySQL
        assert one(b, "SELECT IS_FREE_LOCK('h9_lock')") == 0
        assert one(b, "SELECT IS_USED_LOCK('h9_lock')") == one(a, "SELECT CONNECTION_ID()")
        assert one(b, "SELECT RELEASE_LOCK('h9_lock')") == 0         # not b's to release
        for _ in range(5):  # a's other statements (pooled connections) do not lose or spread the lock
            one(a, "SELECT 1 FROM dual")
            assert one(b, "SELECT GET_LOCK('h9_lock', 0)") == 0
        assert one(a, "SELECT RELEASE_LOCK('h9_lock')") == 1
        assert one(b, "SELECT GET_LOCK('h9_lock', 0)") == 1
        b.close()                                                      # session end releases it
        assert one(a, "SELECT GET_LOCK('h9_lock', 5)") == 1
        assert one(a, "SELECT RELEASE_ALL_LOCKS()") == 1
        assert one(a, "SELECT IS_FREE_LOCK('h9_lock')") == 1
    finally:
        close(a, b)


def test_reset_connection_releases_user_locks(proxy) -> None:
    a, b = session(proxy), session(proxy)
    try:
        assert one(a, "SELECT GET_LOCK('h9_reset', 0)") == 1
        assert one(b, "SELECT GET_LOCK('h9_reset', 0)") == 0
        a._execute_command(0x1F, b"")  # COM_RESET_CONNECTION, as a connection pool sends it
        a._read_ok_packet()
        assert one(b, "SELECT GET_LOCK('h9_reset', 0)") == 1
    finally:
        close(a, b)


def test_user_lock_functions_where_they_cannot_stay_on_the_session_are_refused(proxy, table) -> None:
    a = session(proxy)
    try:
        assert err(a, "SELECT GET_LOCK('h9_x', 0) FROM sharding_4_t1 WHERE id = 1") == 1235
        assert err(a, "SET @got = GET_LOCK('h9_x', 0)") == 1235
        assert err(a, "SELECT 1 + IS_USED_LOCK('h9_x')") == 1235
        with a.cursor(pymysql.cursors.Cursor) as cur:  # nothing was taken by the refused statements
            cur.execute("SELECT IS_FREE_LOCK('h9_x')")
            assert cur.fetchone() == (1,)
    finally:
        a.close()


# -- LOCK TABLES ---------------------------------------------------------------------------------

def _waiter(proxy) -> Any:
    """A session whose waits on table and row locks end after a second with 1205."""
    c = session(proxy)
    with c.cursor() as cur:
        cur.execute("SET SESSION lock_wait_timeout = 1")
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
    return c


def _writes_wait(c: Any) -> bool:
    """True when an UPDATE of every row (every node) waits on someone's lock (1205), False when it runs."""
    try:
        with c.cursor() as cur:
            cur.execute("UPDATE schema1.sharding_4_t1 SET v = v")
        return False
    except pymysql.MySQLError as e:
        assert e.args[0] == 1205, e.args
        return True


@pytest.mark.parametrize("between", ["USE schema2", "START TRANSACTION", "BEGIN"])
def test_lock_tables_hold_through_use_and_end_where_mysql_ends_them(proxy, table, between) -> None:
    a, c = session(proxy), _waiter(proxy)
    try:
        one(a, "LOCK TABLES schema1.sharding_4_t1 WRITE")
        assert one(a, "SELECT COUNT(*) FROM schema1.sharding_4_t1") == 8   # read on every node under the lock
        assert _writes_wait(c)
        one(a, between)
        if between == "USE schema2":
            assert _writes_wait(c)                 # USE keeps table locks, as in MySQL
            one(a, "UNLOCK TABLES")
        # else: a transaction starts by releasing the session's table locks, as in MySQL
        assert not _writes_wait(c)
        one(a, "UNLOCK TABLES")
        one(a, "COMMIT")
        assert not _writes_wait(c)
    finally:
        close(a, c)


@pytest.mark.parametrize("end", ["session end", "COM_RESET_CONNECTION"])
def test_lock_tables_end_with_the_session(proxy, table, end) -> None:
    a, c = session(proxy), _waiter(proxy)
    try:
        one(a, "LOCK TABLES sharding_4_t1 READ")
        assert _writes_wait(c)
        if end == "session end":
            a.close()
        else:
            a._execute_command(0x1F, b"")
            a._read_ok_packet()
        ok = False
        for _ in range(20):   # the proxy sees the client leave asynchronously
            if not _writes_wait(c):
                ok = True
                break
        assert ok
    finally:
        close(a, c)


# -- row locks -----------------------------------------------------------------------------------

@pytest.mark.parametrize("lock, begin", [("FOR UPDATE", "START TRANSACTION"), ("LOCK IN SHARE MODE", "BEGIN"),
                                         ("FOR UPDATE", "SET autocommit = 0"), ("FOR UPDATE", "SET xa = on; BEGIN")])
def test_select_locking_rows_holds_them_on_every_node_until_commit(proxy, table, lock, begin) -> None:
    a, c = session(proxy), _waiter(proxy)
    try:
        for stmt in begin.split("; "):
            one(a, stmt)
        with a.cursor() as cur:
            # merged in the proxy when ordered, streamed from every node as they come when not
            order = "ORDER BY id" if "SHARE" in lock or "xa" in begin else ""
            cur.execute(f"SELECT id FROM sharding_4_t1 {order} {lock}")
            assert sorted(r[0] for r in cur.fetchall()) == list(range(1, 9))
        for i in range(1, 5):   # one row on each node
            assert err(c, f"UPDATE sharding_4_t1 SET v = 0 WHERE id = {i}") == 1205
        one(a, "COMMIT")
        with c.cursor() as cur:
            assert cur.execute("UPDATE sharding_4_t1 SET v = 0 WHERE id IN (1, 2, 3, 4)") == 4
    finally:
        close(a, c)


@pytest.mark.parametrize("lock", ["FOR UPDATE", "LOCK IN SHARE MODE"])
def test_select_locking_rows_in_autocommit_releases_them_at_statement_end(proxy, table, lock) -> None:
    """As on MariaDB: with autocommit each node's locks end with the statement, so no node keeps a row."""
    a, c = session(proxy), _waiter(proxy)
    try:
        for order in ("", "ORDER BY id"):   # streamed from every node, and merged in the proxy
            assert sorted(r[0] for r in _rows(a, f"SELECT id FROM sharding_4_t1 {order} {lock}")) == list(range(1, 9))
            assert not _writes_wait(c)
        with c.cursor() as cur:   # and the rows were free for someone else at once
            assert cur.execute("UPDATE sharding_4_t1 SET v = 0 WHERE id IN (1, 2, 3, 4)") == 4
    finally:
        close(a, c)


def test_locking_reads_pydble_cannot_lock_on_every_node_are_refused(proxy, table) -> None:
    """A locking read that would be answered from rows read without their locks is refused, never run."""
    a, c = session(proxy), _waiter(proxy)
    try:
        one(a, "BEGIN")
        for sql in ("SELECT id FROM sharding_4_t1 ORDER BY id LIMIT 2 FOR UPDATE",     # would lock rows left out
                    "SELECT a.id FROM sharding_4_t1 a JOIN sharding_2_t1 b ON a.id = b.id FOR UPDATE"):
            assert err(a, sql) == 1235, sql
        # each branch of a set operation locking its own rows: they are taken, on both nodes, until COMMIT
        assert sorted(r[0] for r in _rows(a, "(SELECT id FROM sharding_4_t1 WHERE id = 1 FOR UPDATE) UNION ALL "
                                            "(SELECT id FROM sharding_4_t1 WHERE id = 2 FOR UPDATE)")) == [1, 2]
        for i in (1, 2):
            assert err(c, f"UPDATE sharding_4_t1 SET v = 0 WHERE id = {i}") == 1205
        # as MariaDB reads it, a trailing FOR UPDATE belongs to the last branch only
        assert sorted(r[0] for r in _rows(a, "SELECT id FROM sharding_4_t1 WHERE id = 3 UNION "
                                            "SELECT id FROM sharding_4_t1 WHERE id = 4 FOR UPDATE")) == [3, 4]
        assert err(c, "UPDATE sharding_4_t1 SET v = 0 WHERE id = 4") == 1205
        with c.cursor() as cur:
            assert cur.execute("UPDATE sharding_4_t1 SET v = 0 WHERE id = 3") == 1
        one(a, "ROLLBACK")
        assert not _writes_wait(c)
    finally:
        close(a, c)


def _rows(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


# -- all-or-nothing writes over several nodes ----------------------------------------------------

def _all_rows(backends, backend_rows) -> list[tuple[int, int]]:
    return sorted(r for n in FOUR for r in node_rows(backends, backend_rows, n, "SELECT id, v FROM sharding_4_t1"))


ORIGINAL = [(i, i) for i in range(1, 9)]


@pytest.mark.parametrize("xa", [False, True])
def test_a_multi_node_write_failing_on_one_node_changes_no_node(proxy, table, backends, backend_rows, xa) -> None:
    a = session(proxy)
    try:
        if xa:
            one(a, "SET xa = on")
        one(a, "SET SESSION sql_mode = 'STRICT_TRANS_TABLES'")
        # INSERT: the out-of-range row goes to one node, the others to the other three
        assert err(a, "INSERT INTO sharding_4_t1 VALUES (11, 1), (12, 1), (13, 1), (14, 1000)") == 1264
        assert _all_rows(backends, backend_rows) == ORIGINAL
        # UPDATE: only id 8 overflows a TINYINT (8 + 120 > 127), on one node of four
        assert err(a, "UPDATE sharding_4_t1 SET v = v + 120") == 1264
        assert _all_rows(backends, backend_rows) == ORIGINAL
        # DELETE: a row on dn1 is referenced by a foreign key there; the other nodes must keep theirs
        node_rows(backends, backend_rows, "dn1", "CREATE TABLE h9_child (pid INT, FOREIGN KEY (pid) "
                                                  "REFERENCES sharding_4_t1 (id))")
        try:
            node_rows(backends, backend_rows, "dn1", "INSERT INTO h9_child VALUES (4)")
            assert hash_node(4, FOUR) == "dn1"
            assert err(a, "DELETE FROM sharding_4_t1 WHERE id > 0") == 1451
            assert _all_rows(backends, backend_rows) == ORIGINAL
        finally:
            node_rows(backends, backend_rows, "dn1", "DROP TABLE h9_child")
        # and the same statements succeed whole
        with a.cursor() as cur:
            assert cur.execute("UPDATE sharding_4_t1 SET v = v + 100") == 8
            assert cur.execute("DELETE FROM sharding_4_t1 WHERE id > 4") == 4
        assert _all_rows(backends, backend_rows) == [(i, i + 100) for i in range(1, 5)]
    finally:
        close(a)


def test_a_global_table_write_failing_on_one_copy_changes_no_copy(proxy, backends, backend_rows) -> None:
    """Every copy of a global table is one table: a write one copy refuses is undone on the others."""
    a = session(proxy)
    try:
        one(a, "DROP TABLE IF EXISTS test")
        one(a, "CREATE TABLE test (id INT PRIMARY KEY, v TINYINT)")
        one(a, "INSERT INTO test VALUES (1, 1), (2, 2)")
        node_rows(backends, backend_rows, "dn3", "INSERT INTO test VALUES (50, 50)")   # only dn3's copy has it
        assert err(a, "INSERT INTO test VALUES (49, 1), (50, 1)") == 1062
        assert err(a, "UPDATE test SET v = v + 100 WHERE id < 3 OR id = 50") == 1264   # 150 > 127 on dn3 only
        for n in FOUR:
            want = [(1, 1), (2, 2)] + ([(50, 50)] if n == "dn3" else [])
            assert sorted(node_rows(backends, backend_rows, n, "SELECT id, v FROM test")) == want, n
    finally:
        one(a, "DROP TABLE IF EXISTS test")
        close(a)


def test_a_failed_multi_node_write_with_autocommit_off_undoes_only_itself(proxy, table, backends,
                                                                         backend_rows) -> None:
    """autocommit=0: the failed statement is undone on every node, the transaction's earlier work stays."""
    a = session(proxy)
    try:
        one(a, "SET SESSION sql_mode = 'STRICT_TRANS_TABLES'")
        one(a, "SET autocommit = 0")
        with a.cursor() as cur:
            assert cur.execute("UPDATE sharding_4_t1 SET v = 50 WHERE id IN (1, 2)") == 2
        assert err(a, "UPDATE sharding_4_t1 SET v = v + 100") == 1264   # 50 + 100 overflows on two nodes
        assert err(a, "INSERT INTO sharding_4_t1 VALUES (20, 1), (21, 1), (3, 9)") == 1062   # id 3 is dn4's
        one(a, "COMMIT")
        assert _all_rows(backends, backend_rows) == [(1, 50), (2, 50)] + ORIGINAL[2:]
    finally:
        close(a)


@pytest.mark.parametrize("bulk", [False, True])
def test_a_failed_multi_node_insert_names_the_row_of_the_whole_statement(proxy, table, backends, backend_rows,
                                                                          bulk) -> None:
    """As one MariaDB: the first row (in the statement's order) that fails is named, counted over every row."""
    a = session(proxy)
    try:
        one(a, "SET SESSION sql_mode = 'STRICT_TRANS_TABLES'")
        rows = [f"({i}, 1)" for i in range(11, 19)] + ["(30, 1000)", "(31, 1)", "(33, 2000)"]
        if bulk:   # the planner's path for big INSERTs (over 64 KB), with the same rows first
            rows = [f"({i}, 1)" for i in range(100, 8100)] + rows
        with pytest.raises(pymysql.MySQLError) as e:
            with a.cursor() as cur:
                cur.execute("INSERT INTO sharding_4_t1 VALUES " + ", ".join(rows))
        assert e.value.args == (1264, f"Out of range value for column 'v' at row {len(rows) - 2}")
        assert _all_rows(backends, backend_rows) == ORIGINAL
    finally:
        close(a)


# -- temporary tables ----------------------------------------------------------------------------

def test_a_hinted_temporary_table_is_refused_and_leaves_nothing_on_a_backend(proxy, table) -> None:
    """Sent as is through a hint, a temporary table would stay on a pooled connection (seen by whichever
    session comes next): refused. Plain temporary tables stay on the session: tests/proxy/test_temp_tables.py."""
    a = session(proxy)
    try:
        assert err(a, "/*!pydble:shardingNode=dn5*/ CREATE TEMPORARY TABLE h9_tmp (id INT)") == 1235
        for _ in range(3):
            assert err(a, "SELECT * FROM h9_tmp") == 1146
    finally:
        close(a)


# -- user variables ------------------------------------------------------------------------------

def test_user_variable_assignments_inside_statements_are_refused_not_leaked(proxy, table) -> None:
    """`@v := ...` would set @v on whichever shared backend connection ran the statement: another session
    could read it next and this one would not. SET @v is replayed on the session's connections instead."""
    a, b = session(proxy), session(proxy)
    try:
        for sql in ("SELECT @h9v := id FROM sharding_4_t1 WHERE id = 1",
                    "SELECT @h9v := 7",
                    "UPDATE sharding_4_t1 SET v = @h9v := 5 WHERE id = 1"):
            assert err(a, sql) == 1235, sql
        for _ in range(3):
            assert one(b, "SELECT @h9v FROM sharding_4_t1 WHERE id = 1") is None
        one(a, "SET @h9v := 3")
        assert one(a, "SELECT @h9v + v FROM sharding_4_t1 WHERE id = 2") == 5
        assert one(b, "SELECT @h9v FROM sharding_4_t1 WHERE id = 2") is None
    finally:
        close(a, b)


def test_select_last_insert_id_of_an_expression_sets_the_sessions_value(proxy, table) -> None:
    """SELECT LAST_INSERT_ID(expr) returns expr and makes it the session's LAST_INSERT_ID(), as in MySQL."""
    a, b = session(proxy), session(proxy)
    try:
        assert one(a, "SELECT LAST_INSERT_ID(42)") == 42
        assert one(a, "SELECT LAST_INSERT_ID()") == 42
        assert one(b, "SELECT LAST_INSERT_ID()") == 0
        assert one(a, "SELECT LAST_INSERT_ID(40 + 3)") == 43
        assert one(a, "SELECT LAST_INSERT_ID()") == 43
        assert err(a, "SELECT LAST_INSERT_ID(id) FROM sharding_4_t1 WHERE id = 5") == 1235
        assert err(a, "SELECT LAST_INSERT_ID(7) + 1") == 1235
        assert one(a, "SELECT LAST_INSERT_ID()") == 43
    finally:
        close(a, b)


def test_lock_tables_across_schemas_and_nodes(proxy, table) -> None:
    # another module may have left schema2.sing with other columns on the shared backends
    proxy.query("DROP TABLE IF EXISTS sing", database="schema2")
    proxy.query("CREATE TABLE sing (id INT PRIMARY KEY)", database="schema2")
    a, c = session(proxy, "schema2"), _waiter(proxy)
    try:
        one(a, "LOCK TABLES schema1.sharding_4_t1 READ, sing WRITE")
        assert one(a, "SELECT COUNT(*) FROM schema1.sharding_4_t1") == 8
        assert err(a, "UPDATE schema1.sharding_4_t1 SET v = v") == 1099   # READ-locked, as MySQL: 1099
        with a.cursor() as cur:
            assert cur.execute("INSERT INTO sing VALUES (1)") == 1
        assert _writes_wait(c)
        assert err(c, "INSERT INTO schema2.sing VALUES (2)") == 1205
        one(a, "USE schema1")
        one(a, "UNLOCK TABLES")
        assert not _writes_wait(c)
        with c.cursor() as cur:
            assert cur.execute("INSERT INTO schema2.sing VALUES (2)") == 1
    finally:
        close(a, c)
        proxy.query("DROP TABLE IF EXISTS sing", database="schema2")


def test_a_lost_user_lock_connection_is_reported_once(proxy, backends) -> None:
    a = session(proxy)
    try:
        assert one(a, "SELECT GET_LOCK('h9_lost', 0)") == 1
        thread = backends[0].query("SELECT IS_USED_LOCK('h9_lost')")[0][0]   # dn1: the lock node's server
        backends[0].query(f"KILL {int(thread)}")
        assert backends[0].query("SELECT IS_FREE_LOCK('h9_lost')") == [(1,)]
        assert err(a, "SELECT IS_FREE_LOCK('h9_lost')") == 1105   # told: the session's locks are gone
        assert one(a, "SELECT GET_LOCK('h9_lost', 0)") == 1
        assert one(a, "SELECT RELEASE_LOCK('h9_lost')") == 1
    finally:
        close(a)


def test_a_failed_multi_node_write_under_lock_tables_changes_nothing_and_keeps_the_locks(
        proxy, table, backends, backend_rows) -> None:
    a, c = session(proxy), _waiter(proxy)
    try:
        one(a, "SET SESSION sql_mode = 'STRICT_TRANS_TABLES'")
        one(a, "LOCK TABLES sharding_4_t1 WRITE")
        assert err(a, "INSERT INTO sharding_4_t1 VALUES (11, 1), (12, 1), (13, 1), (14, 1000)") == 1264
        assert err(a, "UPDATE sharding_4_t1 SET v = v + 120") == 1264
        assert one(a, "SELECT SUM(v) FROM sharding_4_t1") == 36
        assert _writes_wait(c)                     # still locked
        with a.cursor() as cur:
            assert cur.execute("UPDATE sharding_4_t1 SET v = v + 1") == 8
        one(a, "UNLOCK TABLES")
        assert _all_rows(backends, backend_rows) == [(i, i + 1) for i in range(1, 9)]
    finally:
        close(a, c)


def test_kill_query_interrupts_a_session_waiting_for_a_user_lock(proxy) -> None:
    a, b, k = session(proxy), session(proxy), session(proxy)
    got: list[Any] = []
    try:
        assert one(a, "SELECT GET_LOCK('h9_kill', 0)") == 1
        b_id = one(b, "SELECT CONNECTION_ID()")

        def wait() -> None:
            try:
                got.append(one(b, "SELECT GET_LOCK('h9_kill', 25)"))   # 0 after 25 s if never interrupted
            except pymysql.MySQLError as e:
                got.append(e.args[0])

        t = threading.Thread(target=wait)
        t.start()
        for _ in range(50):   # until b is in its GET_LOCK (SHOW PROCESSLIST shows pydble's sessions)
            with k.cursor() as cur:
                cur.execute("SHOW PROCESSLIST")
                rows = {r[0]: r for r in cur.fetchall()}
            if rows.get(b_id) and rows[b_id][4] == "Query":
                break
            time.sleep(0.1)
        one(k, f"KILL QUERY {b_id}")
        t.join(40)
        assert got and got[0] in (None, 1317), got     # interrupted, as on one MariaDB
        assert one(b, "SELECT IS_USED_LOCK('h9_kill')") == one(a, "SELECT CONNECTION_ID()")
    finally:
        close(a, b, k)


def test_a_get_lock_wait_longer_than_the_backend_timeout_keeps_the_sessions_locks(backends, fresh_proxy) -> None:
    """GET_LOCK(name, N) may wait its N seconds past backend_timeout_s: it answers 0, the session's
    other locks stay held (the lock connection is not ended as a stuck one would be)."""
    from wire import extended_config
    p = fresh_proxy(extended_config(backends, server={"backend_timeout_s": 1}))
    a, b = session(p), session(p)
    try:
        assert one(a, "SELECT GET_LOCK('h9_long', 0)") == 1
        assert one(b, "SELECT GET_LOCK('h9_mine', 0)") == 1
        assert one(b, "SELECT GET_LOCK('h9_long', 3)") == 0          # waited its 3 s, past the 1 s bound
        assert one(a, "SELECT IS_USED_LOCK('h9_mine')") == one(b, "SELECT CONNECTION_ID()")
    finally:
        close(a, b)


def test_prepared_statements_that_would_leave_state_on_a_backend_are_refused(proxy) -> None:
    a = session(proxy)
    try:
        for sql in ("SELECT GET_LOCK(%s, 0)", "SELECT LAST_INSERT_ID(%s)", "SELECT @h9p := %s"):
            with a.cursor() as cur:
                with pytest.raises(pymysql.MySQLError) as e:
                    cur.execute(f"PREPARE h9s FROM '{sql % '?'}'")
                assert e.value.args[0] == 1235, sql
        assert one(a, "SELECT IS_FREE_LOCK('h9_p')") == 1
    finally:
        close(a)
