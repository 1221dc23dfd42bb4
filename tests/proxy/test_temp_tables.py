"""Temporary tables through pydble, as a user of one MySQL sees them: the session's own, on one backend
connection it holds (shadowing a real table of the same name), invisible to other sessions, gone with
DROP, COM_RESET_CONNECTION / COM_CHANGE_USER and the end of the session, never left on a pooled
connection."""

from __future__ import annotations

import struct
from decimal import Decimal
import time
from typing import Any, Iterator

import pymysql
import pytest

from wire import drop_after, scramble

SHARDED = "sharding_4_t1"   # dn1..dn4, hash on id
GLOBAL = "test"             # dn1..dn4


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    yield from drop_after(proxy, SHARDED, GLOBAL)


@pytest.fixture
def tables(proxy) -> Iterator[None]:
    """sharding_4_t1 with ids 1..8 and the global table `test` with ids 1..3 (id, name)."""
    for t in (SHARDED, GLOBAL):
        proxy.query(f"DROP TABLE IF EXISTS {t}")
        proxy.query(f"CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR(20))")
    proxy.query(f"INSERT INTO {SHARDED} VALUES " + ", ".join(f"({i}, 'r{i}')" for i in range(1, 9)))
    proxy.query(f"INSERT INTO {GLOBAL} VALUES (1, 'g1'), (2, 'g2'), (3, 'g3')")
    yield


def session(proxy, db: str | None = "schema1") -> Any:
    c = proxy.connect(database=db) if db else proxy.connect()
    c.autocommit(True)
    return c


def rows(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return [tuple(r) for r in cur.fetchall()]


def run(conn: Any, sql: str) -> int:
    with conn.cursor() as cur:
        return cur.execute(sql)


def err(conn: Any, sql: str) -> int:
    with pytest.raises(pymysql.MySQLError) as e:
        run(conn, sql)
    return e.value.args[0]


def in_use(proxy, group: str = "ha_group1") -> int:
    return next(int(r[4]) for r in proxy.manager_query("show @@backend") if r[0] == group)


def quiet_in_use(proxy) -> int:
    """The in-use count once sessions that just left (earlier tests') have given theirs back."""
    last = in_use(proxy)
    for _ in range(50):
        time.sleep(0.2)
        now = in_use(proxy)
        if now == last:
            return now
        last = now
    return last


def settles_to(proxy, value: int) -> bool:
    """The pool's in-use count comes back to value (the proxy sees a client leave asynchronously)."""
    for _ in range(50):
        if in_use(proxy) == value:
            return True
        time.sleep(0.1)
    return False


def test_create_write_read_and_join_with_a_global_table(proxy, tables) -> None:
    a = session(proxy)
    try:
        run(a, "CREATE TEMPORARY TABLE h4_tmp (id INT PRIMARY KEY, qty INT)")
        assert run(a, "INSERT INTO h4_tmp VALUES (1, 10), (2, 20), (3, 30), (9, 90)") == 4
        assert run(a, "UPDATE h4_tmp SET qty = qty + 1 WHERE id > 1") == 3
        assert run(a, "DELETE FROM h4_tmp WHERE id = 9") == 1
        assert rows(a, "SELECT id, qty FROM h4_tmp ORDER BY id") == [(1, 10), (2, 21), (3, 31)]
        assert rows(a, f"SELECT t.id, g.name, t.qty FROM h4_tmp t JOIN {GLOBAL} g ON g.id = t.id "
                       f"WHERE t.qty > 15 ORDER BY t.id") == [(2, "g2", 21), (3, "g3", 31)]
        assert rows(a, "SELECT COUNT(*), SUM(qty) FROM schema1.h4_tmp") == [(3, Decimal("62"))]
        # with the rows of one sharding table's node only: exact; over all its nodes: refused
        assert rows(a, f"SELECT t.qty, s.name FROM h4_tmp t JOIN {SHARDED} s ON s.id = t.id + 3 WHERE s.id = 4") \
            == [(10, "r4")]
        assert err(a, f"SELECT * FROM h4_tmp t JOIN {SHARDED} s ON s.id = t.id") == 1235
        assert err(a, f"INSERT INTO h4_tmp SELECT id, id FROM {SHARDED}") == 1235
        assert err(a, "CREATE TEMPORARY TABLE h4_tmp (id INT)") == 1050   # as MariaDB
        assert run(a, "DROP TEMPORARY TABLE h4_tmp") == 0
        assert err(a, "SELECT * FROM h4_tmp") == 1146
        assert err(a, "DROP TEMPORARY TABLE h4_tmp") == 1051
        run(a, "DROP TEMPORARY TABLE IF EXISTS h4_tmp")
        assert rows(a, "SHOW WARNINGS") == [("Note", 1051, "Unknown table 'schema1.h4_tmp'")]
    finally:
        a.close()


def test_a_temporary_table_shadows_a_real_one_and_other_sessions_never_see_it(proxy, tables) -> None:
    a, b = session(proxy), session(proxy)
    try:
        run(a, f"CREATE TEMPORARY TABLE {SHARDED} (id INT PRIMARY KEY, name VARCHAR(20))")
        run(a, f"INSERT INTO {SHARDED} VALUES (100, 'mine')")
        assert rows(a, f"SELECT id, name FROM {SHARDED}") == [(100, "mine")]
        assert rows(a, f"SELECT COUNT(*) FROM schema1.{SHARDED} WHERE id = 3") == [(0,)]
        assert rows(b, f"SELECT COUNT(*) FROM {SHARDED}") == [(8,)]               # the real table
        run(a, "CREATE TEMPORARY TABLE h4_only (id INT)")
        assert err(b, "SELECT * FROM h4_only") == 1146
        for _ in range(3):   # b's pooled connections on the node of a's tables do not hold them either
            assert err(b, "/*!pydble:shardingNode=dn1*/ SELECT * FROM h4_only") == 1146
        assert [r[0] for r in rows(a, "SHOW TABLES")].count("h4_only") == 0      # as MariaDB: not listed
        assert run(a, f"DROP TABLE {SHARDED}") == 0                                # drops the temporary one
        assert rows(a, f"SELECT COUNT(*) FROM {SHARDED}") == [(8,)]
        assert rows(b, f"SELECT COUNT(*) FROM {SHARDED}") == [(8,)]
    finally:
        a.close()
        b.close()


def test_reachable_from_another_schema_and_only_by_its_own_schema(proxy, tables) -> None:
    a = session(proxy)
    try:
        run(a, "CREATE TEMPORARY TABLE h4_s1 (id INT)")
        run(a, "INSERT INTO h4_s1 VALUES (7)")
        run(a, "USE schema2")
        assert rows(a, "SELECT id FROM schema1.h4_s1") == [(7,)]
        assert err(a, "SELECT id FROM h4_s1") == 1146        # schema2 has no such table, as in MySQL
        run(a, "CREATE TEMPORARY TABLE h4_s2 LIKE schema1.h4_s1")
        run(a, "INSERT INTO h4_s2 SELECT id + 1 FROM schema1.h4_s1")
        assert rows(a, "SELECT id FROM h4_s2") == [(8,)]
        run(a, "USE schema1")
        assert rows(a, "SELECT id FROM schema2.h4_s2") == [(8,)]
        run(a, f"CREATE TEMPORARY TABLE h4_copy AS SELECT id, name FROM {SHARDED} WHERE id = 5")
        assert rows(a, "SELECT id, name FROM h4_copy") == [(5, "r5")]
        run(a, f"CREATE TEMPORARY TABLE h4_g AS SELECT * FROM {GLOBAL}")
        assert rows(a, "SELECT COUNT(*) FROM h4_g g JOIN h4_s1 s ON s.id = g.id + 4") == [(1,)]
        run(a, f"CREATE TEMPORARY TABLE h4_like LIKE {SHARDED}")
        assert rows(a, "SELECT COUNT(*) FROM h4_like") == [(0,)]
        assert err(a, f"CREATE TEMPORARY TABLE h4_all AS SELECT * FROM {SHARDED}") == 1235   # several nodes
    finally:
        a.close()


def test_inside_a_transaction(proxy, tables) -> None:
    a, b = session(proxy), session(proxy)
    try:
        run(a, "BEGIN")
        run(a, f"UPDATE {SHARDED} SET name = 'txn' WHERE id = 4")      # dn1, the temporary table's node
        run(a, "CREATE TEMPORARY TABLE h4_t (id INT PRIMARY KEY)")       # no implicit commit
        run(a, f"INSERT INTO h4_t SELECT id FROM {SHARDED} WHERE id = 4")  # the same connection sees it
        assert rows(a, "SELECT id FROM h4_t") == [(4,)]
        assert rows(b, f"SELECT name FROM {SHARDED} WHERE id = 4") == [("r4",)]
        run(a, "ROLLBACK")
        assert rows(a, f"SELECT name FROM {SHARDED} WHERE id = 4") == [("r4",)]
        assert rows(a, "SELECT COUNT(*) FROM h4_t") == [(0,)]     # its rows rolled back, the table stays
        run(a, "START TRANSACTION")
        run(a, "INSERT INTO h4_t VALUES (1), (2)")
        run(a, f"UPDATE {SHARDED} SET name = 'c' WHERE id IN (1, 2)")   # dn2 and dn3 join the transaction
        run(a, "COMMIT")
        assert rows(a, "SELECT id FROM h4_t ORDER BY id") == [(1,), (2,)]
        assert rows(b, f"SELECT name FROM {SHARDED} WHERE id IN (1, 2)") == [("c",), ("c",)]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("end", ["disconnect", "reset", "change_user"])
def test_session_end_drops_them_and_gives_the_connection_back(proxy, tables, end) -> None:
    before = quiet_in_use(proxy)
    a = session(proxy)
    run(a, "CREATE TEMPORARY TABLE h4_gone (id INT)")
    run(a, "INSERT INTO h4_gone VALUES (1)")
    assert in_use(proxy) == before + 1          # held by the session while the table exists
    if end == "disconnect":
        a.close()
    elif end == "reset":
        a._execute_command(0x1F, b"")           # COM_RESET_CONNECTION
        a._read_ok_packet()
    else:   # COM_CHANGE_USER to the same user, answering the handshake's scramble
        auth = scramble("111111", a.salt[:20])
        a._execute_command(0x11, b"test\x00" + bytes((len(auth),)) + auth + b"schema1\x00"
                           + struct.pack("<H", 45) + b"mysql_native_password\x00")
        a._read_ok_packet()
    assert settles_to(proxy, before)
    b = session(proxy)
    try:
        if end != "disconnect":
            run(a, "USE schema1")
            assert err(a, "SELECT * FROM h4_gone") == 1146
        for _ in range(3):   # the pooled connections of its node (the one released last first) lack it
            assert err(b, "/*!pydble:shardingNode=dn1*/ SELECT * FROM h4_gone") == 1146
    finally:
        b.close()
        if a.open:
            a.close()


def test_what_cannot_stay_on_the_session_is_refused(proxy, tables) -> None:
    a = session(proxy)
    try:
        assert err(a, "/*!pydble:shardingNode=dn1*/ CREATE TEMPORARY TABLE h4_h (id INT)") == 1235
        run(a, "CREATE TEMPORARY TABLE h4_r (id INT)")
        assert err(a, f"LOCK TABLES {SHARDED} READ") == 1235
        assert err(a, "RENAME TABLE h4_r TO h4_r2") == 1235
        run(a, "TRUNCATE TABLE h4_r")
        run(a, "ALTER TABLE h4_r ADD COLUMN v INT")
        assert rows(a, "SELECT COUNT(*) FROM h4_r") == [(0,)]
        run(a, "INSERT INTO h4_r VALUES (1, 2)")
        assert rows(a, "SELECT id, v FROM h4_r") == [(1, 2)]
        # schema2.sing lives in the database of dn1, where schema1's temporary `sing` would hide it
        run(a, "CREATE TEMPORARY TABLE sing (id INT)")
        assert rows(a, "SELECT COUNT(*) FROM sing") == [(0,)]
        assert err(a, "SELECT * FROM schema2.sing") == 1235
        run(a, "DROP TEMPORARY TABLE sing")
        # combined in the proxy: the temporary table's branch on its connection, the other scattered
        assert rows(a, f"SELECT id FROM h4_r UNION SELECT id FROM {SHARDED} WHERE id < 3 ORDER BY id") \
            == [(1,), (2,)]
        assert rows(a, f"SELECT id FROM {SHARDED} EXCEPT SELECT id FROM h4_r ORDER BY id") \
            == [(i,) for i in range(2, 9)]
    finally:
        a.close()


def test_describe_show_create_and_prepared_statements(proxy, tables) -> None:
    a = session(proxy)
    try:
        run(a, "CREATE TEMPORARY TABLE h4_d (id INT PRIMARY KEY, note VARCHAR(5))")
        run(a, "INSERT INTO h4_d VALUES (1, 'x')")
        assert [r[0] for r in rows(a, "DESCRIBE h4_d")] == ["id", "note"]
        assert [r[0] for r in rows(a, "SHOW COLUMNS FROM h4_d")] == ["id", "note"]
        assert "CREATE TEMPORARY TABLE `h4_d`" in rows(a, "SHOW CREATE TABLE h4_d")[0][1]
        run(a, "PREPARE h4_ps FROM 'SELECT note FROM h4_d WHERE id = ?'")
        run(a, "SET @h4_id = 1")
        assert rows(a, "EXECUTE h4_ps USING @h4_id") == [("x",)]
        assert err(a, "CREATE VIEW h4_v AS SELECT * FROM h4_d") == 1352   # as MySQL: no view over it
    finally:
        a.close()


@pytest.mark.parametrize("sql, right", [
    (f"SELECT id FROM {SHARDED} WHERE id IN (SELECT id FROM h4_x) ORDER BY id", [(2,), (5,)]),
    (f"SELECT id, (SELECT COUNT(*) FROM h4_x) FROM {SHARDED} WHERE id < 3 ORDER BY id", [(1, 2), (2, 2)]),
    (f"SELECT COUNT(*) FROM {SHARDED} s WHERE EXISTS (SELECT 1 FROM h4_x x WHERE x.id = s.id)", [(2,)]),
    (f"SELECT id FROM h4_x WHERE id IN (SELECT id FROM {SHARDED}) ORDER BY id", [(2,), (5,)]),
    (f"SELECT id FROM h4_x x WHERE EXISTS (SELECT 1 FROM {GLOBAL} g WHERE g.id = x.id)", [(2,)]),
    (f"SELECT COUNT(*) FROM (SELECT id FROM {SHARDED}) q JOIN h4_x x ON x.id = q.id", [(2,)]),
])
def test_subqueries_mixing_it_with_other_nodes_are_right_or_refused(proxy, tables, sql, right) -> None:
    """Never 1146 from a node without the table, never a real table of its name read in its place."""
    a = session(proxy)
    try:
        run(a, "CREATE TEMPORARY TABLE h4_x (id INT PRIMARY KEY)")
        run(a, "INSERT INTO h4_x VALUES (2), (5), (50)")
        try:
            got = rows(a, sql)
        except pymysql.MySQLError as e:
            assert e.args[0] == 1235, e.args
        else:
            assert got == right
    finally:
        a.close()


@pytest.mark.parametrize("sql", [
    f"UPDATE {SHARDED} SET name = 'x' WHERE id IN (SELECT id FROM h4_y)",
    f"DELETE FROM {SHARDED} WHERE id IN (SELECT id FROM h4_y)",
    f"INSERT INTO {SHARDED} (id, name) SELECT id, 'y' FROM h4_y",
    f"DELETE FROM h4_y WHERE id IN (SELECT id FROM {SHARDED})",
])
def test_writes_mixing_it_with_other_nodes_are_right_or_refused(proxy, tables, sql) -> None:
    a, b = session(proxy), session(proxy)
    try:
        run(a, "CREATE TEMPORARY TABLE h4_y (id INT PRIMARY KEY)")
        run(a, "INSERT INTO h4_y VALUES (2), (5), (60)")
        before = rows(b, f"SELECT id, name FROM {SHARDED} ORDER BY id")
        try:
            run(a, sql)
        except pymysql.MySQLError as e:
            assert e.args[0] == 1235, e.args
            assert rows(b, f"SELECT id, name FROM {SHARDED} ORDER BY id") == before
            assert rows(a, "SELECT id FROM h4_y ORDER BY id") == [(2,), (5,), (60,)]
            return
        after = rows(b, f"SELECT id, name FROM {SHARDED} ORDER BY id")
        mine = rows(a, "SELECT id FROM h4_y ORDER BY id")
        if sql.startswith("UPDATE"):
            assert after == [(i, "x" if i in (2, 5) else n) for i, n in before] and mine == [(2,), (5,), (60,)]
        elif sql.startswith(f"DELETE FROM {SHARDED}"):
            assert after == [(i, n) for i, n in before if i not in (2, 5)]
        elif sql.startswith("INSERT"):
            assert False, "ids 2 and 5 exist: MariaDB answers 1062"
        else:
            assert mine == [(60,)] and after == before
    finally:
        a.close()
        b.close()


def test_a_temporary_table_shadowing_a_global_one_is_never_read_as_the_global_copies(proxy, tables) -> None:
    """Shadowing `test` (on dn1..dn4): a statement over other nodes must not read their real copies."""
    a = session(proxy)
    try:
        run(a, f"CREATE TEMPORARY TABLE {GLOBAL} (id INT PRIMARY KEY, name VARCHAR(20))")
        run(a, f"INSERT INTO {GLOBAL} VALUES (5, 't5'), (6, 't6')")
        for sql, right in ((f"SELECT id FROM {SHARDED} WHERE id IN (SELECT id FROM {GLOBAL}) ORDER BY id",
                            [(5,), (6,)]),
                           (f"SELECT s.id, g.name FROM {SHARDED} s JOIN {GLOBAL} g ON g.id = s.id ORDER BY s.id",
                            [(5, "t5"), (6, "t6")]),
                           (f"SELECT COUNT(*) FROM {GLOBAL}", [(2,)])):
            try:
                assert rows(a, sql) == right, sql
            except pymysql.MySQLError as e:
                assert e.args[0] == 1235, (sql, e.args)
    finally:
        a.close()


def test_a_binary_prepared_statement_reads_the_sessions_temporary_table(proxy, tables) -> None:
    from ps_wire import T_LONG, PsClient
    with PsClient(proxy.port) as c:
        assert c.query("CREATE TEMPORARY TABLE h4_ps (id INT PRIMARY KEY, v INT)").kind == "ok"
        assert c.query("INSERT INTO h4_ps VALUES (1, 10), (2, 20)").kind == "ok"
        st = c.prepare("SELECT v FROM h4_ps WHERE id = ?")
        assert not isinstance(st, type(c.query("DO 1"))), st
        ans = c.execute(st.stmt_id, [(T_LONG, False, struct.pack("<i", 2))])
        assert ans.kind == "rows" and len(ans.rows) == 1, ans
        assert ans.rows[0][-4:] == struct.pack("<i", 20)   # the binary row: header, null bitmap, INT 20
