"""Many sessions over few backend connections (issue 20 item 2): what one session leaves on a pooled
backend connection never reaches another, and what pins a connection gives it back when the session ends.

The module's proxy has max_con = 1 on ha_group2 (dn2, dn4: every session's statements there run on one
backend connection, which `@@pseudo_thread_id` proves) and max_con = 2 on ha_group1 (dn1, dn3, dn5: the
user locks' node, temporary tables of schema1, mx_t), so sessions must take turns on the same connections.
"""

from __future__ import annotations

import copy
import random
import resource
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pymysql
from pymysql.constants import CLIENT
import pytest

from harness import ProxyProcess, free_port, global_status, proxy_config
from ps_wire import PsClient

ONE = "/*!pydble:shardingNode=dn2*/ "   # ha_group2, max_con 1
DN5 = "/*!pydble:shardingNode=dn5*/ "   # ha_group1, max_con 2: schema1's default node
ROWS = 40


@pytest.fixture(scope="module")
def mx(backends: list[Any]) -> Iterator[ProxyProcess]:
    """A proxy of our own whose pools are tiny, with mx_t (id, v) sharded over dn1 and dn3 (ha_group1)."""
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-multiplex"))
    cfg["db_groups"]["ha_group1"]["max_con"] = 2
    cfg["db_groups"]["ha_group2"]["max_con"] = 1
    cfg["schemas"]["schema1"]["tables"]["mx_t"] = {"type": "sharding", "nodes": ["dn1", "dn3"],
                                                   "function": "hash-two", "column": "id"}
    p = ProxyProcess(cfg, name="proxy-multiplex", release_ports=True, wire_check=True)
    try:
        p.start()
        p.query("DROP TABLE IF EXISTS mx_t")
        p.query("CREATE TABLE mx_t (id INT PRIMARY KEY, v INT)")
        p.query("INSERT INTO mx_t VALUES " + ", ".join(f"({i}, {i * 10})" for i in range(ROWS)))
        yield p
        p.query("DROP TABLE IF EXISTS mx_t")
    finally:
        p.cleanup()


def one(conn: Any, sql: str) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
    return row if row is None or len(row) > 1 else row[0]


def err(conn: Any, sql: str) -> int:
    with pytest.raises(pymysql.MySQLError) as e:
        one(conn, sql)
    return e.value.args[0]


def in_use(p: ProxyProcess) -> dict[str, int]:
    return {r[0]: int(r[4]) for r in p.manager_query("show @@backend")}


def settles_to(p: ProxyProcess, value: dict[str, int]) -> bool:
    """The pools' in-use counts come back to value (the proxy sees a client leave asynchronously)."""
    import time
    for _ in range(100):
        if in_use(p) == value:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def two(mx: ProxyProcess) -> Iterator[tuple[Any, Any]]:
    a, b = mx.connect(), mx.connect()
    yield a, b
    for c in (a, b):
        if c.open:
            c.close()


def test_a_user_variable_of_one_session_is_invisible_to_another_on_the_same_connection(two) -> None:
    a, b = two
    one(a, "SET @mx_x = 1")
    assert one(a, ONE + "SELECT @mx_x, @@pseudo_thread_id")[0] == 1
    thread = one(a, ONE + "SELECT @@pseudo_thread_id")
    assert one(b, ONE + "SELECT @mx_x, @@pseudo_thread_id") == (None, thread)   # the same backend connection
    assert one(a, ONE + "SELECT @mx_x, @@pseudo_thread_id") == (1, thread)      # replayed for a
    assert one(b, ONE + "SELECT @mx_x") is None


def test_a_user_variable_set_from_an_expression_has_one_value_on_every_connection(two) -> None:
    """SET @x = expr is computed once, as on one MySQL: not again on each backend connection the session
    uses (RAND() and NOW() would differ, @x + 1 would be NULL where @x was never set, CONNECTION_ID() and
    DATABASE() would be a backend's)."""
    a, b = two
    one(a, "USE schema1")
    for sql in ("SET @mx_n = 0", "SET @mx_n = @mx_n + 1", "SET @mx_n = @mx_n + 1",
                "SET @mx_r = RAND(), @mx_t = NOW(6), @mx_c = CONNECTION_ID(), @mx_db = DATABASE()",
                "SET @mx_d = 1/3e0, @mx_m = 1.50, @mx_u = 18446744073709551615, @mx_null = NULL",
                "SET @mx_s = _latin1 X'E9' COLLATE latin1_german1_ci, @mx_b = _binary X'00FF', @mx_e = ''"):
        one(a, sql)
    probe = ("SELECT @mx_n, @mx_r, @mx_t, @mx_c, @mx_db, @mx_d = 1/3e0, @mx_m, @mx_u, @mx_null, "
             "HEX(@mx_s), COLLATION(@mx_s), HEX(@mx_b), COLLATION(@mx_b), @mx_e")
    first = one(a, ONE + probe.replace("SELECT @mx_n", "SELECT CONNECTION_ID(), @mx_n"))
    own_id, values = first[0], first[1:]
    assert values[0] == 2 and values[3] == own_id and values[4] == "schema1", values
    assert values[5] == 1 and str(values[6]) == "1.50" and values[7] == 18446744073709551615 and values[8] is None
    assert values[9:] == ("E9", "latin1_german1_ci", "00FF", "binary", ""), values
    for _ in range(3):   # another session takes the connections in between; every node answers the same
        one(b, ONE + "SELECT 1")
        one(b, DN5 + "SELECT 1")
        for via in (ONE, DN5, ""):
            cur = a.cursor()
            cur.execute(via + probe)
            assert cur.fetchone() == values, via


def test_a_session_variable_set_from_an_expression_keeps_its_value(two) -> None:
    """`SET sql_mode = CONCAT(@@sql_mode, ...)` twice keeps both modes on every connection, as on one
    MySQL: replaying the second expression on a fresh connection would have lost the first."""
    a, b = two
    base = one(a, DN5 + "SELECT @@sql_mode")
    one(a, "SET sql_mode = CONCAT(@@sql_mode, ',PIPES_AS_CONCAT')")
    one(a, "SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_UNSIGNED_SUBTRACTION')")
    wait = one(a, DN5 + "SELECT @@wait_timeout")
    one(a, "SET SESSION wait_timeout = @@wait_timeout + 10")
    one(a, "SET @@session.wait_timeout = @@session.wait_timeout + 10")
    for via in (ONE, DN5, ONE, DN5):
        one(b, ONE + "SELECT 1")
        one(b, DN5 + "SELECT 1")
        mode, timeout = one(a, via + "SELECT @@sql_mode, @@wait_timeout")
        assert set(mode.split(",")) == set(base.split(",")) | {"PIPES_AS_CONCAT", "NO_UNSIGNED_SUBTRACTION"}, via
        assert timeout == wait + 20, via
        assert one(a, via + "SELECT 'a' || 'b'") == "ab"   # PIPES_AS_CONCAT in force on that node
    assert one(b, DN5 + "SELECT @@wait_timeout") == wait   # b's session never had it


def test_a_dumps_saved_and_restored_settings_come_back_on_every_connection(two) -> None:
    """mysqldump's header saves settings in user variables and changes them in one SET; its footer puts
    them back. Each SET works out every value before assigning any, as MariaDB does."""
    a, b = two
    before = one(a, DN5 + "SELECT @@sql_mode, @@foreign_key_checks, @@unique_checks")
    for sql in ("/*!40101 SET @OLD_SQL_MODE=@@SQL_MODE, SQL_MODE='NO_AUTO_VALUE_ON_ZERO' */",
                "/*!40014 SET @OLD_FOREIGN_KEY_CHECKS=@@FOREIGN_KEY_CHECKS, FOREIGN_KEY_CHECKS=0 */",
                "/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */"):
        one(a, sql)
    for via in (ONE, DN5):
        assert one(a, via + "SELECT @@sql_mode, @@foreign_key_checks, @@unique_checks") == \
            ("NO_AUTO_VALUE_ON_ZERO", 0, 0)
    for sql in ("/*!40101 SET SQL_MODE=@OLD_SQL_MODE */", "/*!40014 SET FOREIGN_KEY_CHECKS=@OLD_FOREIGN_KEY_CHECKS */",
                "/*!40014 SET UNIQUE_CHECKS=@OLD_UNIQUE_CHECKS */"):
        one(a, sql)
    for via in (ONE, DN5, ONE):
        one(b, ONE + "SELECT 1")
        assert one(a, via + "SELECT @@sql_mode, @@foreign_key_checks, @@unique_checks") == before, via
    one(a, "SET @mx_p = 1, @mx_q = 2")
    one(a, "SET @mx_p = @mx_q, @mx_q = @mx_p, @mx_fresh = 1, @mx_fresh = @mx_fresh + 1")
    assert one(a, DN5 + "SELECT @mx_p, @mx_q, @mx_fresh") == (2, 1, None)   # MariaDB's answer
    half = one(a, DN5 + "SELECT @@max_allowed_packet") // 2 + 1000   # its HEX() exceeds what a backend sends
    assert err(a, f"SET @mx_big = REPEAT('a', {half})") == 1235   # too large to replay: refused, never ''
    assert one(a, ONE + "SELECT @mx_big") is None


def test_row_count_is_the_sessions_own_and_found_rows_is_refused(mx, two) -> None:
    """ROW_COUNT() speaks of the client's previous statement as on one MySQL, whichever backend connection
    or nodes ran it and whatever other sessions ran there since; FOUND_ROWS(), which pydble cannot count,
    is refused (1235) rather than read off a connection another session used last."""
    a, b = two
    one(a, "USE schema1")
    one(b, "USE schema1")
    one(a, DN5 + "DROP TABLE IF EXISTS mx_rc")
    one(a, DN5 + "CREATE TABLE mx_rc (id INT PRIMARY KEY, v INT)")
    try:
        assert one(a, "SELECT ROW_COUNT()") == 0   # a DDL's
        a.cursor().execute("INSERT INTO mx_rc VALUES (1, 1), (2, 2), (3, 3)")
        one(b, DN5 + "SELECT 1")   # b's statement on the shared connection between a's two
        assert one(a, "SELECT ROW_COUNT()") == 3
        assert one(a, "SELECT ROW_COUNT()") == -1   # after a SELECT, as MariaDB answers
        a.cursor().execute(DN5 + "UPDATE mx_rc SET v = v + 1 WHERE id < 3")
        one(b, DN5 + "UPDATE mx_rc SET v = 0")
        assert one(a, "SELECT ROW_COUNT() + 0") == 2
        a.cursor().execute("CREATE TABLE IF NOT EXISTS sharding_2_t1 (id INT PRIMARY KEY)")
        a.cursor().execute("DELETE FROM sharding_2_t1 WHERE id = -1 OR id = -2")   # two nodes, no row
        assert one(a, "SELECT ROW_COUNT()") == 0
        a.cursor().execute("SET @mx_rc = 1")
        assert one(a, "SELECT ROW_COUNT()") == 0
        multi = mx.connect(client_flag=CLIENT.MULTI_STATEMENTS)
        try:
            cur = multi.cursor()
            cur.execute("DELETE FROM mx_rc WHERE id = 3; SELECT ROW_COUNT(); SELECT ROW_COUNT()")
            cur.nextset()
            assert cur.fetchone() == (1,)   # each statement of a multi-statement sees the one before it
            cur.nextset()
            assert cur.fetchone() == (-1,)
        finally:
            multi.close()
        a.cursor().execute("INSERT INTO mx_rc VALUES (4, 4), (5, 5)")
        one(a, "SET @mx_rc_seen = ROW_COUNT()")
        assert one(a, ONE + "SELECT @mx_rc_seen") == 2
        one(a, "PREPARE mx_p FROM 'SELECT ROW_COUNT()'")
        assert one(a, "EXECUTE mx_p") == 0   # the PREPARE's
        assert one(a, "WITH w AS (SELECT 1) SELECT ROW_COUNT() FROM w") == -1
        assert err(a, "INSERT INTO mx_rc VALUES (1, 1)") == 1062
        assert one(a, "SELECT ROW_COUNT()") == -1   # after an error, as MariaDB answers
        one(a, "SELECT SQL_CALC_FOUND_ROWS * FROM mx_rc LIMIT 1")
        code = err(a, "SELECT FOUND_ROWS()")
        assert code == 1235
        # other ways to leave a variable on one shared backend connection are refused, hinted or not
        assert err(a, "SELECT id INTO @mx_into FROM mx_rc LIMIT 1") == 1235
        assert err(a, DN5 + "SELECT 9 INTO @mx_into") == 1235
        assert err(a, DN5 + "SET @mx_into = 9") == 1235
        assert one(a, "SELECT @mx_into") is None
    finally:
        one(a, DN5 + "DROP TABLE IF EXISTS mx_rc")


@pytest.mark.parametrize("set_sql, probe, default", [
    ("SET sql_mode = 'ANSI_QUOTES'", "@@sql_mode", None),
    ("SET NAMES latin1", "@@character_set_client", None),
    ("SET time_zone = '+05:00'", "@@time_zone", None),
    ("SET SESSION lock_wait_timeout = 7", "@@lock_wait_timeout", None),
])
def test_session_variables_of_one_session_never_reach_another(two, set_sql, probe, default) -> None:
    a, b = two
    before = one(b, ONE + f"SELECT {probe}")
    one(a, set_sql)
    mine = one(a, ONE + f"SELECT {probe}, @@pseudo_thread_id")
    assert mine[0] != before
    assert one(b, ONE + f"SELECT {probe}, @@pseudo_thread_id") == (before, mine[1])
    assert one(a, ONE + f"SELECT {probe}") == mine[0]


def test_a_set_the_backend_refuses_halfway_leaves_nothing_on_the_connection(two) -> None:
    a, b = two
    mode = one(b, ONE + "SELECT @@sql_mode")
    # one SET, two assignments: the first is valid, the second fails on the backend
    assert err(a, "SET sql_mode = 'ANSI_QUOTES', time_zone = 'No/Such_Zone'") == 1298
    assert one(a, ONE + "SELECT @@sql_mode") == mode      # the session's state did not change...
    assert one(b, ONE + "SELECT @@sql_mode") == mode      # ...nor anyone else's on that connection


def test_a_temporary_table_of_one_session_is_invisible_to_others(mx, two) -> None:
    a, b = two
    before = in_use(mx)
    one(a, "CREATE TEMPORARY TABLE mx_tmp (id INT)")   # on dn5, the default node
    one(a, "INSERT INTO mx_tmp VALUES (1)")
    assert one(a, "SELECT COUNT(*) FROM mx_tmp") == 1
    held = one(a, "SELECT @@pseudo_thread_id FROM mx_tmp")   # the connection holding it
    seen = set()
    for _ in range(3):   # the other connection of ha_group1: never a's
        assert err(b, "SELECT COUNT(*) FROM mx_tmp") == 1146
        seen.add(one(b, DN5 + "SELECT @@pseudo_thread_id"))
    assert held not in seen
    a.close()
    assert settles_to(mx, before)   # a's connection went back...
    for _ in range(3):              # ...without the table
        assert err(b, "SELECT COUNT(*) FROM mx_tmp") == 1146


def test_a_user_lock_pins_a_connection_until_the_session_ends(mx, two) -> None:
    a, b = two
    before = in_use(mx)
    assert one(a, "SELECT GET_LOCK('mx_lock', 0)") == 1
    assert in_use(mx)["ha_group1"] == before["ha_group1"] + 1   # the lock node's: held between statements
    for _ in range(3):   # a's other statements take pooled connections; the lock stays where it is
        assert one(a, ONE + "SELECT 1") == 1
        assert one(b, "SELECT GET_LOCK('mx_lock', 0)") == 0
    assert one(b, "SELECT IS_USED_LOCK('mx_lock')") == one(a, "SELECT CONNECTION_ID()")
    assert in_use(mx)["ha_group1"] == before["ha_group1"] + 2   # b holds one too now (max_con: all of them)
    a.close()
    assert settles_to(mx, {**before, "ha_group1": before["ha_group1"] + 1})   # a's went back to the pool
    assert one(b, "SELECT GET_LOCK('mx_lock', 0)") == 1          # and the lock went with the session
    b.close()
    assert settles_to(mx, before)
    c = mx.connect()
    try:   # nobody holds it
        assert one(c, "SELECT IS_FREE_LOCK('mx_lock')") == 1
    finally:
        c.close()


def test_prepared_statements_stay_with_their_session_and_leave_nothing_on_a_backend(mx, backends, two) -> None:
    a, b = two
    on_backends = global_status(backends, "Prepared_stmt_count")
    one(a, "PREPARE mx_s FROM 'SELECT v FROM mx_t WHERE id = ?'")
    one(a, "SET @mx_id = 3")
    assert one(a, "EXECUTE mx_s USING @mx_id") == 30
    assert err(b, "EXECUTE mx_s USING @mx_id") == 1243            # unknown to another session
    ps = PsClient(mx.port)
    try:
        stmt = ps.prepare("SELECT v FROM mx_t WHERE id = ?")
        four = [(3, False, (4).to_bytes(4, "little"))]   # MYSQL_TYPE_LONG 4
        got = ps.execute(stmt.stmt_id, four)
        assert len(got.rows) == 1 and got.rows[0][-4:] == (40).to_bytes(4, "little"), got
        other = PsClient(mx.port)
        try:   # another session's statement id means nothing here
            assert other.execute(stmt.stmt_id, four).err_code == 1243
        finally:
            other.close()
    finally:
        ps.close()
    assert one(a, "EXECUTE mx_s USING @mx_id") == 30
    a.close()
    assert global_status(backends, "Prepared_stmt_count") == on_backends        # nothing left prepared on a pooled connection


def test_two_hundred_clients_over_two_connections_get_their_own_answers(mx) -> None:
    clients, problems = 200, []
    start = threading.Barrier(clients)

    def client(i: int) -> None:
        rnd = random.Random(i)
        try:
            c = mx.connect()
        except pymysql.MySQLError as e:
            problems.append(f"client {i} could not log in: {e}")
            return
        try:
            kind = i % 4
            if kind == 1:   # its own state, replayed on whichever connection serves it
                one(c, f"SET @mx_me = {i}, time_zone = '+0{i % 10}:00'")
            start.wait(30)
            for _ in range(5):
                k = rnd.randrange(ROWS)
                if kind == 0:     # plain point reads (the shared pipelined connections' business)
                    got, want = one(c, f"SELECT v FROM mx_t WHERE id = {k}"), k * 10
                elif kind == 1:
                    got = one(c, f"SELECT @mx_me, @@time_zone, v FROM mx_t WHERE id = {k}")
                    want = (i, f"+0{i % 10}:00", k * 10)
                elif kind == 2:   # a short transaction pins a connection until COMMIT
                    one(c, "BEGIN")
                    got = one(c, f"SELECT v FROM mx_t WHERE id = {k}")
                    one(c, f"UPDATE mx_t SET v = v WHERE id = {k}")
                    one(c, "COMMIT")
                    want = k * 10
                else:             # a scatter read over both connections of ha_group2
                    got, want = one(c, "SELECT COUNT(*), @mx_me FROM mx_t"), (ROWS, None)
                if got != want:
                    problems.append(f"client {i} (kind {kind}) got {got!r}, wanted {want!r}")
        except Exception as e:  # noqa: BLE001 - reported by the test
            problems.append(f"client {i} (kind {i % 4}) failed: {e!r}")
        finally:
            c.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert problems == [], problems[:10]
    rows = {r[0]: r for r in mx.manager_query("show @@backend")}
    assert int(rows["ha_group1"][3]) <= 2   # never more backend connections than max_con


def test_the_proxy_raises_its_open_files_limit_to_the_hard_limit(fresh_proxy) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    soft = 256 if hard == resource.RLIM_INFINITY else min(256, hard - 1)
    p = fresh_proxy(argv=["prlimit", f"--nofile={soft}:{'unlimited' if hard == resource.RLIM_INFINITY else hard}",
                          sys.executable, "-m", "cli", "serve", "--config", "{config}"])
    limits = Path(f"/proc/{p.pid}/limits").read_text()
    line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
    now = line.split()[3]
    assert now == ("unlimited" if hard == resource.RLIM_INFINITY else str(hard)) or int(now) > soft, line


def _pool(p: ProxyProcess, group: str) -> tuple[int, int, int]:
    """(total, in use, waiting) of a dbGroup's pool, from `show @@backend`."""
    row = next(r for r in p.manager_query("show @@backend") if r[0] == group)
    return int(row[3]), int(row[4]), int(row[6])


def _until(cond: Any, what: str) -> None:
    import time
    for _ in range(200):
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def test_sessions_waiting_for_a_connection_are_served_in_turn_and_one_that_leaves_takes_nothing(mx) -> None:
    holder, leaver, stays = mx.connect(), mx.connect(), mx.connect()
    got: dict[str, Any] = {}

    def ask(name: str, c: Any, sql: str) -> None:
        try:
            got[name] = one(c, sql)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            got[name] = e

    try:
        one(holder, "BEGIN")
        one(holder, ONE + "SELECT 1")                  # pins ha_group2's only connection
        first = threading.Thread(target=ask, args=("leaver", leaver, ONE + "SELECT 2"))
        first.start()
        _until(lambda: _pool(mx, "ha_group2")[2] == 1, "the first waiter queued")
        second = threading.Thread(target=ask, args=("stays", stays, ONE + "SELECT 3"))
        second.start()
        _until(lambda: _pool(mx, "ha_group2")[2] == 2, "the second waiter queued")
        leaver._sock.shutdown(2)   # noqa: SLF001 - the client is gone while its statement waits
        first.join(30)
        _until(lambda: _pool(mx, "ha_group2")[2] == 1, "the waiter that left is no longer counted")
        one(holder, "COMMIT")                          # the connection goes to the one still waiting
        second.join(30)
        assert got["stays"] == 3
        _until(lambda: _pool(mx, "ha_group2")[1] == 0, "every connection back in the pool")
        assert one(holder, ONE + "SELECT 4") == 4      # no slot went with the session that left
        assert _pool(mx, "ha_group2")[0] == 1
    finally:
        for c in (holder, leaver, stays):
            try:
                c.close()
            except Exception:  # noqa: BLE001 - the leaver's socket is already shut
                pass
