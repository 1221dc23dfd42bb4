"""Session-level answers pydble gives itself (KILL of the own session, a substituted ROW_COUNT(), USE
information_schema, sql_mode ANSI_QUOTES, SET TRANSACTION for the next transaction), each compared with
what one MariaDB server answers the same client: the same answer, or a clear 1235 where pydble cannot
give MariaDB's."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pymysql
import pytest

from wire import drop_after

REF_DB = "answersref"


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    """Leave the shared backends without this module's tables."""
    yield from drop_after(proxy, "sharding_4_t1", "h1_plain")


@pytest.fixture
def pair(proxy, backends) -> Iterator[tuple[Any, Any]]:
    """(pydble session on schema1, a session on one plain MariaDB database), both with autocommit on."""
    backends[0].create_databases(REF_DB)
    px, ref = proxy.connect(), backends[0].connect(REF_DB, autocommit=True)
    try:
        yield px, ref
    finally:
        for c in (px, ref):
            try:
                c.close()
            except Exception:  # noqa: BLE001 - a killed session is already gone
                pass


def one(conn: Any, sql: str) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
        return None if row is None else row[0]


def error(conn: Any, sql: str) -> tuple[int, str]:
    """Run sql expecting an error: (code, message)."""
    with conn.cursor() as cur:
        with pytest.raises(pymysql.MySQLError) as e:
            cur.execute(sql)
            cur.fetchall()
    return e.value.args[0], e.value.args[1]


def fields(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    """The column definitions of sql's answer: name, type, length, flags, charset, decimals."""
    with conn.cursor() as cur:
        cur.execute(sql)
        cur.fetchall()
        return [(f.name, f.type_code, f.length, f.flags, f.charsetnr, f.scale) for f in cur._result.fields]


# -- KILL of the session's own id ----------------------------------------------------------------------

def test_kill_query_of_the_own_session_is_interrupted_as_on_mariadb(pair) -> None:
    """MariaDB interrupts the KILL QUERY statement itself (1317) and the session goes on."""
    for conn in pair:
        own = one(conn, "SELECT CONNECTION_ID()")
        assert error(conn, f"KILL QUERY {own}") == (1317, "Query execution was interrupted")
        assert one(conn, "SELECT 1") == 1


@pytest.mark.parametrize("kill", ["KILL", "KILL CONNECTION"])
def test_kill_of_the_own_connection_answers_killed_then_closes(pair, kill: str) -> None:
    """MariaDB answers 1927 and then closes the connection."""
    for conn in pair:
        own = one(conn, "SELECT CONNECTION_ID()")
        assert error(conn, f"{kill} {own}") == (1927, "Connection was killed")
        with pytest.raises(pymysql.err.OperationalError) as e:
            one(conn, "SELECT 1")
        assert e.value.args[0] in (2006, 2013)   # the server has gone


# -- ROW_COUNT() -------------------------------------------------------------------------------------

@pytest.mark.parametrize("expr", ["ROW_COUNT()", "ROW_COUNT() + 1", "ROW_COUNT() * 2.5", "CONCAT(ROW_COUNT())",
                                  "ROW_COUNT() AS rc"])
def test_row_count_column_is_described_as_mariadb_describes_it(pair, expr: str) -> None:
    """BIGINT, length 21, NOT NULL, in the expressions around it too (the proxy answers the value), and named
    as MariaDB names it: the expression as written."""
    px, ref = pair

    def same() -> None:
        assert fields(px, f"SELECT {expr}") == fields(ref, f"SELECT {expr}")

    for conn in pair:
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS h1_plain")
            cur.execute("CREATE TABLE h1_plain (id INT PRIMARY KEY)")
            cur.execute("INSERT INTO h1_plain VALUES (1), (2), (3)")
    same()
    for conn in pair:
        with conn.cursor() as cur:
            cur.execute("UPDATE h1_plain SET id = id + 10 WHERE id = 99")   # ROW_COUNT() 0
    same()
    for conn in pair:
        error(conn, "SELECT * FROM h1_no_such_table")   # ROW_COUNT() -1
    same()
    assert one(px, "SELECT ROW_COUNT()") == one(ref, "SELECT ROW_COUNT()") == -1


# -- SET TRANSACTION without SESSION -------------------------------------------------------------------

@pytest.fixture
def four_rows(pair) -> tuple[Any, Any]:
    """pair, with sharding_4_t1 (a row on each of its four nodes) behind pydble and h1_plain on MariaDB."""
    for conn, name in zip(pair, ("sharding_4_t1", "h1_plain")):
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {name}")
            cur.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT)")
            cur.execute(f"INSERT INTO {name} VALUES (1, 0), (2, 0), (3, 0), (4, 0)")
    return pair


@pytest.fixture
def dirty(proxy, backends, four_rows) -> Iterator[tuple[Any, Any]]:
    """four_rows; another session of each side holds all four updated to v = 1, uncommitted."""
    pair = four_rows
    writers = (proxy.connect(), backends[0].connect(REF_DB, autocommit=True))
    for w, name in zip(writers, ("sharding_4_t1", "h1_plain")):
        with w.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"UPDATE {name} SET v = 1")
    try:
        yield pair
    finally:
        for w in writers:
            w.rollback()
            w.close()


def test_set_transaction_isolation_applies_to_the_next_transaction_only(dirty) -> None:
    for conn, name in zip(dirty, ("sharding_4_t1", "h1_plain")):
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
            cur.execute("BEGIN")
            cur.execute(f"SELECT SUM(v) FROM {name}")
            assert cur.fetchone()[0] == 4, conn    # the transaction reads uncommitted rows, on every node
            cur.execute("COMMIT")
            cur.execute("BEGIN")
            cur.execute(f"SELECT SUM(v) FROM {name}")
            assert cur.fetchone()[0] == 0, conn    # the next one is the session's REPEATABLE READ again
            cur.execute("COMMIT")
            cur.execute("SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
            cur.execute("COMMIT")                  # a COMMIT uses it up, as on MariaDB
            cur.execute("START TRANSACTION")
            cur.execute(f"SELECT SUM(v) FROM {name}")
            assert cur.fetchone()[0] == 0, conn
            assert error(conn, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE") == (
                1568, "Transaction characteristics can't be changed while a transaction is in progress")
            cur.execute("ROLLBACK")
        assert one(conn, "SELECT @@session.tx_isolation") == "REPEATABLE-READ"


def test_set_session_transaction_wins_over_one_for_the_next(dirty) -> None:
    for conn, name in zip(dirty, ("sharding_4_t1", "h1_plain")):
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("BEGIN")
            cur.execute(f"SELECT SUM(v) FROM {name}")
            assert cur.fetchone()[0] == 0, conn
            cur.execute("COMMIT")


def test_set_transaction_before_a_statement_outside_a_transaction_is_refused(dirty) -> None:
    """MariaDB gives it to the next statement that opens a transaction of its own; pydble cannot tell which
    one that would be on its nodes: refused, and still there for START TRANSACTION."""
    px, _ = dirty
    with px.cursor() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
    code, msg = error(px, "SELECT SUM(v) FROM sharding_4_t1 WHERE id = 1")
    assert code == 1235 and "SET TRANSACTION" in msg
    with px.cursor() as cur:
        cur.execute("START TRANSACTION")
        cur.execute("SELECT SUM(v) FROM sharding_4_t1")
        assert cur.fetchone()[0] == 4
        cur.execute("ROLLBACK")
    assert one(px, "SELECT SUM(v) FROM sharding_4_t1") == 0


@pytest.mark.parametrize("autocommit", [1, 0])
def test_statements_naming_no_table_leave_set_transaction_for_the_next_one(four_rows, autocommit: int) -> None:
    """MariaDB opens no transaction for SELECT, DO, SET naming no table or SHOW: SET TRANSACTION READ ONLY is
    still there for the transaction after them (was: pydble refused each with 1235)."""
    read_only = (1792, "Cannot execute statement in a READ ONLY transaction")
    answers = []
    for conn, name in zip(four_rows, ("sharding_4_t1", "h1_plain")):
        with conn.cursor() as cur:
            cur.execute(f"SET autocommit = {autocommit}")
            cur.execute("SET TRANSACTION READ ONLY")
            got = [_rows(conn, "SELECT 1 + 1, CONCAT('a', 'b') AS c")]
            cur.execute("SET @h1_x = 5, @h1_y = @h1_x * 2")
            cur.execute("DO @h1_x + 1")
            got.append(_rows(conn, "SELECT @h1_x, @h1_y"))
            got.append(sorted(r[0] for r in _rows(conn, "SHOW TABLES") if r[0] == name))
            got.append(_rows(conn, "SHOW VARIABLES LIKE 'tx_read_only'"))
            answers.append(got)
            if conn is four_rows[0]:   # one that would open a transaction on a node: still refused
                assert error(conn, "DO (SELECT 1 FROM sharding_4_t1 LIMIT 1)")[0] == 1235
            cur.execute("START TRANSACTION")
            assert error(conn, f"INSERT INTO {name} VALUES (9, 0)") == read_only, conn
            cur.execute("ROLLBACK")
            cur.execute(f"INSERT INTO {name} VALUES (9, 0)")   # used up by that transaction
            cur.execute("COMMIT")
        assert one(conn, f"SELECT COUNT(*) FROM {name}") == 5
    assert answers[0][:2] == answers[1][:2] and answers[0][3] == answers[1][3]


def test_start_transaction_modes_give_the_transaction_its_access_mode(plain_rows) -> None:
    """START TRANSACTION READ ONLY / READ WRITE: the transaction's own mode, over SET TRANSACTION's for the
    next one and the session's (was dropped: a READ ONLY transaction wrote, a READ WRITE one could not)."""
    read_only = (1792, "Cannot execute statement in a READ ONLY transaction")
    for conn in plain_rows:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION READ ONLY, WITH CONSISTENT SNAPSHOT")
            assert error(conn, "INSERT INTO h1_plain VALUES (7, 'ro')") == read_only, conn
            cur.execute("ROLLBACK")
            cur.execute("SET TRANSACTION READ ONLY")
            cur.execute("START TRANSACTION READ WRITE")
            cur.execute("INSERT INTO h1_plain VALUES (8, 'rw')")
            cur.execute("ROLLBACK")
            cur.execute("SET SESSION TRANSACTION READ ONLY")
            cur.execute("START TRANSACTION READ WRITE")
            cur.execute("INSERT INTO h1_plain VALUES (9, 'rw')")
            cur.execute("ROLLBACK")
            cur.execute("SET SESSION TRANSACTION READ WRITE")
            cur.execute("INSERT INTO h1_plain VALUES (10, 'ac')")   # used up: autocommit writes again
        for bad in ("START TRANSACTION READ ONLY, READ WRITE", "START TRANSACTION FOO", "BEGIN READ ONLY"):
            assert error(conn, bad)[0] == 1064, (conn, bad)
        assert one(conn, "SELECT @@in_transaction") == 0
    assert _rows(plain_rows[0], "SELECT id FROM h1_plain ORDER BY id") == [(1,), (2,), (10,)]
    assert _rows(plain_rows[1], "SELECT id FROM h1_plain ORDER BY id") == [(1,), (2,), (10,)]


# -- COMMIT / ROLLBACK AND CHAIN, RELEASE ---------------------------------------------------------------

@pytest.mark.parametrize("end", ["COMMIT", "ROLLBACK"])
def test_and_chain_begins_the_next_transaction_and_release_closes_the_connection(pair, end: str) -> None:
    """MariaDB begins the next transaction at once after COMMIT/ROLLBACK AND CHAIN (was: pydble ended it, so
    the rows written next were committed one by one and a ROLLBACK after them undid nothing); RELEASE closes
    the connection after the OK; anything else after the keyword is 1064."""
    for conn, name in zip(pair, ("sharding_4_t1", "h1_plain")):
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {name}")
            cur.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT)")
            cur.execute("BEGIN")
            cur.execute(f"INSERT INTO {name} VALUES (1, 0), (2, 0)")
            cur.execute(f"{end} WORK AND CHAIN")
            cur.execute(f"INSERT INTO {name} VALUES (3, 0), (4, 0)")   # on other nodes than 1 and 2
            cur.execute("ROLLBACK AND NO CHAIN")
            cur.execute(f"SELECT COUNT(*) FROM {name}")
            assert cur.fetchone()[0] == (2 if end == "COMMIT" else 0), (conn, end)
            cur.execute(f"{end} AND CHAIN")   # outside a transaction too: one begins
            cur.execute(f"INSERT INTO {name} VALUES (5, 0)")
            cur.execute("ROLLBACK")
            cur.execute(f"SELECT COUNT(*) FROM {name} WHERE id = 5")
            assert cur.fetchone()[0] == 0, (conn, end)
        for bad in (f"{end} AND CHAIN RELEASE", f"{end} FOO", f"{end} AND"):
            assert error(conn, bad)[0] == 1064, (conn, bad)
        with conn.cursor() as cur:
            cur.execute(f"{end} NO RELEASE")
            cur.execute(f"{end} AND NO CHAIN RELEASE")
            with pytest.raises((pymysql.err.OperationalError, pymysql.err.InterfaceError)):
                cur.execute("SELECT 1")   # the server closed the connection after the OK


def test_and_chain_gives_the_ended_transactions_access_mode_not_an_earlier_ones(plain_rows) -> None:
    """The chained transaction has the access mode of the one that ended: READ WRITE for one autocommit=0 opened
    (or none), whatever an earlier START TRANSACTION READ ONLY said (was: pydble gave it that one's: 1792)."""
    for conn in plain_rows:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION READ ONLY")
            cur.execute("COMMIT")
            cur.execute("SET autocommit = 0")
            cur.execute("INSERT INTO h1_plain VALUES (3, 'a')")
            cur.execute("COMMIT AND CHAIN")
            cur.execute("INSERT INTO h1_plain VALUES (4, 'b')")
            cur.execute("COMMIT")
            cur.execute("SET autocommit = 1")
            cur.execute("START TRANSACTION READ ONLY")
            cur.execute("ROLLBACK")
            cur.execute("ROLLBACK AND CHAIN")
            cur.execute("INSERT INTO h1_plain VALUES (5, 'c')")
            cur.execute("COMMIT")
        assert _rows(conn, "SELECT id FROM h1_plain ORDER BY id") == [(1,), (2,), (3,), (4,), (5,)], conn


def test_commit_release_ends_a_multi_statement_there(proxy, backends, plain_rows) -> None:
    """MariaDB runs nothing of a multi-statement after COMMIT RELEASE: it closes the connection (was: pydble ran
    the statements after it, an INSERT written in autocommit, and closed only then)."""
    from pymysql.constants import CLIENT
    multi = (proxy.connect(client_flag=CLIENT.MULTI_STATEMENTS),
             backends[0].connect(REF_DB, client_flag=CLIENT.MULTI_STATEMENTS))
    for conn, watch in zip(multi, plain_rows):
        with conn.cursor() as cur:
            with pytest.raises((pymysql.err.OperationalError, pymysql.err.InterfaceError)):
                cur.execute("COMMIT RELEASE; INSERT INTO h1_plain VALUES (3, 'after')")
                while cur.nextset():
                    pass
        conn.close()
        assert _rows(watch, "SELECT id FROM h1_plain ORDER BY id") == [(1,), (2,)], conn


def test_and_chain_releases_table_locks_as_start_transaction_does(proxy, backends, plain_rows) -> None:
    """The transaction AND CHAIN begins releases LOCK TABLES, as START TRANSACTION does (was: pydble kept the
    locks, another session waited on them, and the writes after it were not in a transaction)."""
    others = (proxy.connect(), backends[0].connect(REF_DB))
    try:
        for conn, other in zip(plain_rows, others):
            with conn.cursor() as cur, other.cursor() as cur2:
                cur.execute("LOCK TABLES h1_plain WRITE")
                cur.execute("COMMIT AND CHAIN")
                cur2.execute("SET SESSION lock_wait_timeout = 2")
                cur2.execute("INSERT INTO h1_plain VALUES (3, 'other')")   # no lock held any more
                cur.execute("INSERT INTO h1_plain VALUES (4, 'chained')")
                cur.execute("ROLLBACK")                                    # in the chained transaction
            assert _rows(conn, "SELECT id FROM h1_plain ORDER BY id") == [(1,), (2,), (3,)], conn
    finally:
        for c in others:
            c.close()


def test_completion_type_other_than_no_chain_is_refused(pair) -> None:
    """completion_type=CHAIN or RELEASE changes what every COMMIT does on each node: refused, not sent."""
    px, _ = pair
    for value in ("CHAIN", "'RELEASE'", "1"):
        code, msg = error(px, f"SET completion_type = {value}")
        assert code == 1235 and "completion_type" in msg, (value, msg)
    with px.cursor() as cur:
        cur.execute("SET completion_type = NO_CHAIN")
        cur.execute("BEGIN")
        cur.execute("COMMIT")
    assert one(px, "SELECT @@in_transaction") == 0


# -- sql_mode ANSI_QUOTES ----------------------------------------------------------------------------

@pytest.fixture
def plain_rows(pair) -> tuple[Any, Any]:
    for conn in pair:
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS h1_plain")
            cur.execute("CREATE TABLE h1_plain (id INT PRIMARY KEY, s VARCHAR(10))")
            cur.execute("INSERT INTO h1_plain VALUES (1, 'id'), (2, 'x')")
    return pair


@pytest.mark.parametrize("mode", ["ANSI_QUOTES", "ANSI", "STRICT_TRANS_TABLES,ANSI_QUOTES"])
@pytest.mark.parametrize("sql", ['SELECT "id" FROM h1_plain ORDER BY 1', 'SELECT id FROM "h1_plain" ORDER BY 1',
                                 'SELECT id FROM h1_plain WHERE s = "id"'])
def test_double_quotes_under_ansi_quotes_are_refused_not_read_as_strings(plain_rows, mode: str, sql: str) -> None:
    """MariaDB reads "x" as an identifier then; pydble's tokenizer reads a string: a clear 1235, never an
    answer of the other meaning (or 1064)."""
    px, ref = plain_rows
    for conn in plain_rows:
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION sql_mode = '{mode}'")
    with ref.cursor() as cur:
        cur.execute(sql)   # an identifier on MariaDB
    code, msg = error(px, sql)
    assert code == 1235 and "ANSI_QUOTES" in msg
    with px.cursor() as cur:   # nor prepared (the PREPARE is refused, as the statement would be)
        with pytest.raises(pymysql.MySQLError) as e:
            cur.execute("PREPARE h1_st FROM '" + sql + "'")
        assert e.value.args[0] == 1235
    assert one(px, "SELECT s FROM h1_plain WHERE `id` = 1") == "id"   # backquotes and single quotes work
    for conn in plain_rows:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = DEFAULT")
        assert one(conn, 'SELECT id FROM h1_plain WHERE s = "id"') == 1   # a string again
    assert one(ref, "SELECT @@sql_mode") == one(px, "SELECT @@sql_mode")


# What MariaDB reads under NO_BACKSLASH_ESCAPES as a string 'a\' and then code that names mysql.user,
# where a tokenizer with backslash escapes reads one string up to the quote after the '#'
_BACKSLASH_SMUGGLE = "SELECT 'a\\', (SELECT COUNT(*) FROM mysql.user) #'\n FROM h1_plain"


def test_backslash_under_no_backslash_escapes_never_hides_a_table(plain_rows) -> None:
    """Under NO_BACKSLASH_ESCAPES MariaDB ends 'a\\' at its second quote: a statement with a backslash in a
    quoted string is refused (1235), never read on past that quote (it would reach mysql.user, unchecked)."""
    px, ref = plain_rows
    for conn in plain_rows:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')")
    assert _rows(ref, _BACKSLASH_SMUGGLE)[0][0] == "a\\"   # the subquery runs on MariaDB
    for sql in (_BACKSLASH_SMUGGLE, "SELECT id FROM h1_plain WHERE s = 'x\\' OR 1 = 1 #'",
                "SELECT id FROM h1_plain WHERE s = 'x\\'; SELECT COUNT(*) FROM mysql.user #'"):
        code, msg = error(px, sql)
        assert code == 1235 and "NO_BACKSLASH_ESCAPES" in msg, (sql, code, msg)
    with px.cursor() as cur:   # nor prepared
        with pytest.raises(pymysql.MySQLError) as e:
            cur.execute("PREPARE h1_st FROM 'SELECT id FROM h1_plain WHERE s = ''x\\'''")
        assert e.value.args[0] == 1235
    for conn in plain_rows:   # quotes doubled, no backslash: the same reading, answered
        assert one(conn, "SELECT s FROM h1_plain WHERE s <> 'it''s' ORDER BY id") == "id"
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = DEFAULT")
        assert one(conn, "SELECT 'a\\'b'") == "a'b"   # an escape again
    assert one(ref, "SELECT @@sql_mode") == one(px, "SELECT @@sql_mode")


# -- USE information_schema ----------------------------------------------------------------------------

def test_use_information_schema_as_mariadb_allows_every_user(proxy, pair) -> None:
    """MariaDB lets every user USE information_schema; pydble too, and then answers what it can answer
    exactly (its tables named information_schema.X, over the user's logical schemas only) and refuses the
    rest with 1235, never a backend's physical databases."""
    px, ref = pair
    with px.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS h1_plain")
        cur.execute("CREATE TABLE h1_plain (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO h1_plain VALUES (1)")
    for conn in pair:
        with conn.cursor() as cur:
            cur.execute("USE information_schema")
        assert one(conn, "SELECT DATABASE()") == "information_schema"
        assert one(conn, "SELECT 1 + 1") == 2
    code, msg = error(px, "SHOW TABLES")
    assert code == 1235 and "information_schema" in msg
    code, msg = error(px, "SELECT COUNT(*) FROM TABLES")   # MariaDB's information_schema.TABLES: not guessed
    assert code == 1235 and "information_schema.<table>" in msg
    assert error(px, "CREATE TABLE h1_x (id INT)")[0] == 1235
    schemas = {r[0] for r in _rows(px, "SELECT TABLE_SCHEMA FROM information_schema.TABLES")}
    assert schemas <= {"schema1", "schema2"}
    assert "db1" not in {r[0] for r in _rows(px, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")}
    assert one(px, "SELECT COUNT(*) FROM schema1.h1_plain WHERE id = 1") == 1   # a logical table, qualified
    assert ("h1_plain",) in _rows(px, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'schema1'")
    with px.cursor() as cur:
        cur.execute("USE schema1")
    assert one(px, "SELECT DATABASE()") == "schema1"
    at_login = proxy.connect(database="information_schema")   # as USE: allowed at login too (was 1044)
    try:
        assert one(at_login, "SELECT DATABASE()") == "information_schema"
        at_login.select_db("INFORMATION_SCHEMA")
        assert one(at_login, "SELECT DATABASE()") == "information_schema"
    finally:
        at_login.close()


def test_information_schema_as_current_database_shows_no_other_users_schemas(proxy, fresh_proxy, backends) -> None:
    """A user granted schema2 only, in information_schema, sees schema2's rows and nothing of schema1."""
    from harness import free_port, proxy_config
    cfg = proxy_config(backends, free_port(), free_port())
    cfg["users"] = [{"name": "test", "password": "111111", "schemas": ["schema1", "schema2"]},
                    {"name": "other", "password": "other-pw", "schemas": ["schema2"]}]
    p = fresh_proxy(cfg)
    conn = p.connect(user="other", password="other-pw", database="schema2")
    try:
        with conn.cursor() as cur:
            cur.execute("USE information_schema")
            cur.execute("SELECT DISTINCT TABLE_SCHEMA FROM information_schema.TABLES")
            assert {r[0] for r in cur.fetchall()} <= {"schema2"}
            cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
            assert [r[0] for r in cur.fetchall()] == ["schema2"]
        assert error(conn, "SELECT * FROM schema1.test")[0] == 1142
        assert error(conn, "USE schema1")[0] == 1044
    finally:
        conn.close()


def _rows(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def test_field_list_in_information_schema_is_refused_not_a_dropped_connection(proxy) -> None:
    """COM_FIELD_LIST (the CLI's tab completion) while information_schema is the current database: a clear
    1235 and the session goes on (was an exception that closed the connection)."""
    from ps_wire import PsClient
    with PsClient(proxy.port) as c:
        assert c.query("USE information_schema").kind == "ok"
        c.send(0, b"\x04SCHEMATA\x00")
        a = c.answer()
        assert (a.kind, a.err_code) == ("err", 1235) and "information_schema" in a.err_message
        assert c.query("SELECT 1").kind == "rows"


# -- START TRANSACTION READ ONLY / READ WRITE / WITH CONSISTENT SNAPSHOT ---------------------------------

READ_ONLY = (1792, "Cannot execute statement in a READ ONLY transaction")


@pytest.mark.parametrize("start", ["START TRANSACTION READ ONLY", "START TRANSACTION READ ONLY, WITH CONSISTENT SNAPSHOT",
                                   "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"])
def test_a_write_in_a_read_only_transaction_fails_on_every_node(four_rows, start: str) -> None:
    """MariaDB answers 1792 to any write of a READ ONLY transaction: on each node it reaches, whether the
    node joined the transaction before the write or with it."""
    for conn, name in zip(four_rows, ("sharding_4_t1", "h1_plain")):
        with conn.cursor() as cur:
            cur.execute(start)
            cur.execute(f"SELECT SUM(v) FROM {name} WHERE id = 1")   # one node joins with a read
            assert error(conn, f"UPDATE {name} SET v = 1 WHERE id = 1") == READ_ONLY, conn
            assert error(conn, f"UPDATE {name} SET v = 1 WHERE id = 2") == READ_ONLY, conn   # joins with the write
            assert error(conn, f"UPDATE {name} SET v = 1") == READ_ONLY, conn
            assert error(conn, f"INSERT INTO {name} VALUES (5, 0), (6, 0), (7, 0), (8, 0)") == READ_ONLY, conn
            cur.execute("COMMIT")
        assert one(conn, f"SELECT COUNT(*) FROM {name} WHERE v = 0") == 4


def test_read_write_wins_over_a_read_only_session(four_rows) -> None:
    for conn, name in zip(four_rows, ("sharding_4_t1", "h1_plain")):
        _run_all(conn, "SET SESSION TRANSACTION READ ONLY", "START TRANSACTION READ WRITE", f"UPDATE {name} SET v = 1",
                 "COMMIT")
        assert error(conn, f"UPDATE {name} SET v = 2 WHERE id = 3")[0] == 1792   # the session's again
        _run_all(conn, "SET SESSION TRANSACTION READ WRITE")
        assert one(conn, f"SELECT SUM(v) FROM {name}") == 4


def test_read_only_transaction_under_xa_fails_writes_too(four_rows) -> None:
    px, _ = four_rows
    with px.cursor() as cur:
        cur.execute("SET xa = on")
        cur.execute("START TRANSACTION READ ONLY")
        assert error(px, "UPDATE sharding_4_t1 SET v = 1") == READ_ONLY
        cur.execute("ROLLBACK")
        cur.execute("SET xa = off")
    assert one(px, "SELECT SUM(v) FROM sharding_4_t1") == 0


@pytest.mark.parametrize("start", ["START TRANSACTION WITH CONSISTENT SNAPSHOT",
                                   "START TRANSACTION /*!40100 WITH CONSISTENT SNAPSHOT */",   # mysqldump's
                                   "START TRANSACTION READ ONLY, WITH CONSISTENT SNAPSHOT"])
def test_consistent_snapshot_is_taken_when_the_transaction_starts(proxy, backends, four_rows, start: str) -> None:
    """MariaDB's snapshot is of the moment START TRANSACTION ran: rows another session commits after it are
    not seen, on any node, even one the transaction reads for the first time afterwards."""
    writers = (proxy.connect(), backends[0].connect(REF_DB, autocommit=True))
    try:
        for conn, w, name in zip(four_rows, writers, ("sharding_4_t1", "h1_plain")):
            with conn.cursor() as cur:
                cur.execute(start)
                with w.cursor() as wc:
                    wc.execute(f"UPDATE {name} SET v = 1")
                    wc.execute(f"INSERT INTO {name} VALUES (5, 1), (6, 1), (7, 1), (8, 1)")
                cur.execute(f"SELECT COUNT(*), SUM(v) FROM {name}")
                assert cur.fetchone() == (4, 0), conn
                cur.execute("COMMIT")
            assert one(conn, f"SELECT SUM(v) FROM {name}") == 8
    finally:
        for w in writers:
            w.close()


def test_consistent_snapshot_under_xa_is_refused(four_rows) -> None:
    """XA START cannot take a snapshot: refused rather than a snapshot of a later moment."""
    px, _ = four_rows
    with px.cursor() as cur:
        cur.execute("SET xa = on")
        code, msg = error(px, "START TRANSACTION WITH CONSISTENT SNAPSHOT")
        assert code == 1235 and "CONSISTENT SNAPSHOT" in msg
        cur.execute("SET xa = off")
    assert one(px, "SELECT SUM(v) FROM sharding_4_t1") == 0


# -- KILL QUERY of a statement on the nodes -------------------------------------------------------------

@pytest.mark.parametrize("sql", ["/*!pydble:shardingNode=dn1*/ SELECT SLEEP(10)", "/*!dble:shardingNode=dn2*/ SELECT SLEEP(10)",
                                 "SELECT SLEEP(10) FROM sharding_4_t1", "SELECT SLEEP(10), id FROM sharding_4_t1 ORDER BY id"])
def test_kill_query_stops_a_statement_on_the_nodes(proxy, backends, four_rows, sql: str) -> None:
    """MariaDB interrupts the sleep at once (1317) and the connection goes on; behind pydble the statement
    stops on every node running it."""
    px, _ = four_rows
    victim = one(px, "SELECT CONNECTION_ID()")
    outcome: dict[str, Any] = {}

    def run() -> None:
        began = time.monotonic()
        try:
            outcome["rows"] = _rows(px, sql)
        except pymysql.MySQLError as e:
            outcome["error"] = e.args[0]
        outcome["ended"] = time.monotonic()
        outcome["took"] = outcome["ended"] - began

    runner = threading.Thread(target=run)
    runner.start()
    killer = proxy.connect()
    try:
        assert _running_on_backends(backends) or _wait(lambda: _running_on_backends(backends)), "never started"
        killed_at = time.monotonic()
        with killer.cursor() as cur:
            cur.execute(f"KILL QUERY {victim}")
        runner.join(timeout=10)
        assert not runner.is_alive()
        # answered soon after the KILL (a loaded box's seconds), long before the 10 s sleep would have ended
        assert outcome.get("error") == 1317 and outcome["ended"] - killed_at < 5 and outcome["took"] < 9, outcome
        assert _wait(lambda: not _running_on_backends(backends)), "the sleep goes on on a node"
        assert one(px, "SELECT 1") == 1
        assert one(px, "SELECT COUNT(*) FROM sharding_4_t1") == 4
    finally:
        killer.close()
        runner.join(timeout=10)


def _running_on_backends(backends: Any) -> bool:
    """Whether a backend still runs a SLEEP(10)."""
    for b in backends:
        c = b.connect()
        try:
            with c.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%SLEEP(10)%' "
                            "AND ID <> CONNECTION_ID()")
                if cur.fetchone()[0]:
                    return True
        finally:
            c.close()
    return False


def _wait(cond: Any, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


# -- CONNECTION_ID() -------------------------------------------------------------------------------------

@pytest.mark.parametrize("expr", ["CONNECTION_ID()", "CONNECTION_ID() AS cid", "CONNECTION_ID() + 1",
                                  "CONCAT(CONNECTION_ID())", "CONNECTION_ID() DIV 2", "connection_id()"])
def test_connection_id_column_is_described_as_mariadb_describes_it(four_rows, expr: str) -> None:
    """INT UNSIGNED, length 10, NOT NULL (LONG, flags NOT_NULL|UNSIGNED|BINARY), in expressions as their type,
    named as MariaDB names the item."""
    px, ref = four_rows
    assert fields(px, f"SELECT {expr}") == fields(ref, f"SELECT {expr}")
    assert (fields(px, f"SELECT {expr} FROM sharding_4_t1 WHERE id = 1")[0][1:]
            == fields(ref, f"SELECT {expr} FROM h1_plain WHERE id = 1")[0][1:])
    assert one(px, "SELECT CONNECTION_ID() FROM sharding_4_t1 WHERE id = 2") == one(px, "SELECT CONNECTION_ID()")


@pytest.mark.parametrize("items", ["CONCAT(DATABASE(), 'x')", "IFNULL(DATABASE(),'')  /* why */ , 1",
                                   "ROW_COUNT()\n  + 1, USER() IS NOT NULL", "(SELECT DATABASE())",
                                   "CASE WHEN ROW_COUNT() > 0 THEN 1 END", "ROW_COUNT() + 1 rc",
                                   "ROW_COUNT() + 1 AS `r`", "ROW_COUNT() + 1 FROM dual WHERE 1 = 1"])
def test_an_expression_around_a_session_function_is_named_as_mariadb_names_it(pair, items: str) -> None:
    """DATABASE(), USER(), ROW_COUNT() ... are answered by pydble inside the expression; the column keeps the
    name MariaDB gives it (the item as written, comments dropped), not the text pydble substituted."""
    px, ref = pair
    assert [f[0] for f in fields(px, f"SELECT {items}")] == [f[0] for f in fields(ref, f"SELECT {items}")]


@pytest.mark.parametrize("expr", ["DATABASE()", "SCHEMA()", "CONCAT(DATABASE(), 'x')", "USER()", "CURRENT_USER()",
                                  "SESSION_USER()", "LENGTH(USER()) > 0", "DATABASE() = 'x'"])
def test_session_function_columns_are_described_as_mariadb_describes_them(pair, expr: str) -> None:
    """pydble answers DATABASE() and USER() with the client's values; the column keeps the type, length,
    charset and nullability MariaDB gives the call (a literal in its place would be NOT NULL, of its own length)."""
    px, ref = pair
    assert fields(px, f"SELECT {expr}") == fields(ref, f"SELECT {expr}")


@pytest.mark.parametrize("expr", ["LAST_INSERT_ID()", "@@identity", "@@warning_count", "@@error_count"])
def test_other_integer_probes_are_described_as_mariadb_describes_them(pair, expr: str) -> None:
    px, ref = pair
    assert fields(px, f"SELECT {expr}") == fields(ref, f"SELECT {expr}")


# -- COM_FIELD_LIST of a view pydble keeps -------------------------------------------------------------

def _field_list(port: int, user: str, password: str, database: str, table: str,
                wild: str = "") -> tuple[list[bytes], Any]:
    """COM_FIELD_LIST of table (with a wildcard): the column definition payloads and the packet that ended the
    answer."""
    from wire import RawClient
    with RawClient(port) as c:
        assert c.login(user=user, password=password, database=database).kind == "ok"
        defs, end = c.field_list(table, wild)
        return [d.payload for d in defs], end


def test_field_list_of_a_view_pydble_keeps_lists_its_columns(proxy, backends, four_rows) -> None:
    """MariaDB answers the view's columns (table and org_table the view's name, the schema its own)."""
    px, ref = four_rows
    for conn, name in zip(four_rows, ("sharding_4_t1", "h1_plain")):
        with conn.cursor() as cur:
            cur.execute("DROP VIEW IF EXISTS h2_v")
            cur.execute(f"CREATE VIEW h2_v AS SELECT id, v, id + 1 AS n FROM {name} WHERE v = 0")
    try:
        ref_db = bytes((len(REF_DB),)) + REF_DB.encode()
        for wild in ("", "%", "v", "i%"):   # the client's wildcard too, as MariaDB filters by it
            got, end = _field_list(proxy.port, "test", "111111", "schema1", "h2_v", wild)
            assert end.kind == "eof", end.payload
            want, _ = _field_list(backends[0].port, backends[0].user, backends[0].password, REF_DB, "h2_v", wild)
            assert [d.replace(b"\x07schema1", ref_db, 1) for d in got] == want, wild
    finally:
        for conn in four_rows:
            with conn.cursor() as cur:
                cur.execute("DROP VIEW IF EXISTS h2_v")


# -- a column qualified with a backend's physical database ---------------------------------------------

@pytest.mark.parametrize("sql", ["SELECT {db}.{t}.id FROM {t}", "SELECT id FROM {t} WHERE {db}.{t}.id = 1",
                                 "SELECT id FROM {t} ORDER BY {db}.{t}.v"])
def test_a_column_qualified_with_a_physical_database_is_unknown(four_rows, sql: str) -> None:
    """MariaDB sees only the logical schema: another database's qualifier is 1054 Unknown column."""
    px, ref = four_rows
    want = error(ref, sql.format(db="db1", t="h1_plain"))
    assert want[0] == 1054
    for db in ("db1", "db2", "db3"):
        got = error(px, sql.format(db=db, t="sharding_4_t1"))
        assert got == (1054, want[1].replace("h1_plain", "sharding_4_t1").replace("db1.", f"{db}.")), got
    with px.cursor() as cur:
        cur.execute("USE schema2")
        cur.execute("CREATE TABLE IF NOT EXISTS sing (id INT PRIMARY KEY, v INT)")
    for db in ("db1", "db2", "db3"):
        got = error(px, sql.format(db=db, t="sing"))
        assert got == (1054, want[1].replace("h1_plain", "sing").replace("db1.", f"{db}.")), got
    assert one(px, "SELECT COUNT(schema2.sing.id) FROM sing") is not None   # the logical name works
    assert error(px, "SELECT db1.sing.* FROM sing") == (1051, "Unknown table 'db1.sing'")
    # (never sent to the ref: MariaDB 10.11 crashes on it; behind pydble it never reaches a node)
    assert error(px, "SELECT * FROM sing JOIN sing s2 USING (id) WHERE db1.sing.id = 1") == (
        1054, "Unknown column 'db1.sing.id' in 'WHERE'")
    assert error(ref, "SELECT db1.h1_plain.* FROM h1_plain") == (1051, "Unknown table 'db1.h1_plain'")


@pytest.mark.parametrize("sql", ["SELECT {db}.{t}.id FROM {t}", "SELECT id FROM {t} WHERE {db}.{t}.id = 1",
                                 "SELECT id FROM {t} ORDER BY {db}.{t}.v", "SELECT {own}.{t}.id FROM {t} AS x",
                                 "SELECT id FROM {t} WHERE id IN (SELECT {db}.{t}.id FROM {t} AS y)",
                                 "UPDATE {t} SET {db}.{t}.v = 5", "DELETE FROM {t} WHERE {db}.{t}.id > 0"])
def test_a_column_qualified_with_another_schema_than_its_tables_is_unknown(four_rows, sql: str) -> None:
    """MariaDB: `db.t.c` names a table of the statement only if that table is db's t (known by that name, not
    hidden by an alias), else 1054 (was: pydble dropped `schema2.` and answered, or wrote, as for `t.c`)."""
    px, ref = four_rows
    want = error(ref, sql.format(db="db1", own=REF_DB, t="h1_plain"))
    assert want[0] == 1054
    got = error(px, sql.format(db="schema2", own="schema1", t="sharding_4_t1"))
    assert got == (1054, want[1].replace(f"{REF_DB}.", "schema1.").replace("db1.", "schema2.")
                   .replace("h1_plain", "sharding_4_t1")), got
    assert _rows(px, "SELECT id, v FROM sharding_4_t1 ORDER BY id") == [(1, 0), (2, 0), (3, 0), (4, 0)]


def test_a_column_qualified_with_its_own_schema_is_answered(four_rows) -> None:
    """`schema.t.c` and `schema.alias.c` of the statement's tables, and of a view pydble keeps, as on MariaDB."""
    px, ref = four_rows
    with px.cursor() as cur:
        cur.execute("CREATE OR REPLACE VIEW h4_v AS SELECT id, v FROM sharding_4_t1")
    try:
        for conn, db, t in ((px, "schema1", "sharding_4_t1"), (ref, REF_DB, "h1_plain")):
            assert _rows(conn, f"SELECT {db}.{t}.id FROM {t} WHERE {db}.{t}.id < 3 ORDER BY 1") == [(1,), (2,)]
            assert _rows(conn, f"SELECT {db}.x.* FROM {db}.{t} x WHERE {db}.x.id = 4") == [(4, 0)]
        assert _rows(px, "SELECT schema1.h4_v.id FROM h4_v WHERE schema1.h4_v.v = 0 ORDER BY 1") == [
            (1,), (2,), (3,), (4,)]
        assert error(px, "SELECT schema2.h4_v.id FROM h4_v") == (1054, "Unknown column 'schema2.h4_v.id' in 'SELECT'")
        assert error(px, "SELECT schema2.sharding_4_t1.* FROM sharding_4_t1") == (
            1051, "Unknown table 'schema2.sharding_4_t1'")
    finally:
        with px.cursor() as cur:
            cur.execute("DROP VIEW IF EXISTS h4_v")


@pytest.mark.parametrize("sql", ["CREATE TABLE {new} AS SELECT {db}.{t}.id FROM {t}",
                                 "CREATE TABLE {new} SELECT id FROM {t} WHERE {db}.{t}.id = 1",
                                 "CREATE TABLE {new} (x INT) SELECT {db}.{t}.* FROM {t}",
                                 "CREATE VIEW {new} AS SELECT {db}.{t}.id FROM {t}",
                                 "INSERT INTO {t} SELECT {db}.{t}.id + 10, 0 FROM {t}"])
def test_a_column_of_another_schema_in_the_select_of_a_ddl_creates_nothing(pair, sql: str) -> None:
    """MariaDB checks the SELECT of CREATE TABLE ... SELECT (and of a view, of INSERT ... SELECT) as a SELECT:
    1054 (1051 for db.t.*), nothing created nor written (was: pydble dropped `schema2.` and created the table)."""
    px, ref = pair
    for conn, name in ((px, "h5_src"), (ref, "h5_src")):
        _run_all(conn, "DROP TABLE IF EXISTS h5_new", "DROP VIEW IF EXISTS h5_new", f"DROP TABLE IF EXISTS {name}",
                 f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT)", f"INSERT INTO {name} VALUES (1, 0)")
    try:
        want = error(ref, sql.format(new="h5_new", db="db1", t="h5_src"))
        assert want[0] in (1054, 1051)
        got = error(px, sql.format(new="h5_new", db="schema2", t="h5_src"))
        assert got == (want[0], want[1].replace("db1.", "schema2.")), got
        assert _rows(px, "SHOW TABLES LIKE 'h5_new'") == []
        assert _rows(px, "SELECT id, v FROM h5_src") == [(1, 0)]
        _run_all(px, "CREATE TABLE h5_new (id INT)")   # nothing of that name was left on the node
    finally:
        for conn in pair:
            _run_all(conn, "DROP TABLE IF EXISTS h5_new", "DROP VIEW IF EXISTS h5_new", "DROP TABLE IF EXISTS h5_src")


@pytest.mark.parametrize("sql", ["SELECT {db}.{t}.v FROM {t}", "SELECT {db}.{t}.* FROM {t}",
                                 "UPDATE {t} SET {db}.{t}.v = 1", "SELECT id FROM {t} WHERE {db}.{t}.id = ?"])
def test_prepare_of_a_column_of_another_schema_fails_as_on_mariadb(proxy, backends, four_rows, sql: str) -> None:
    """MariaDB refuses such a statement at PREPARE (SQL-level and COM_STMT_PREPARE), not at EXECUTE: 1054
    (1051 for db.t.*); was: pydble prepared it and only EXECUTE failed."""
    from ps_wire import PsClient
    px, ref = four_rows
    want = error(ref, "PREPARE h5_s FROM '" + sql.format(db="db1", t="h1_plain") + "'")
    assert want[0] in (1054, 1051)
    for db in ("schema2", "db1"):
        text = sql.format(db=db, t="sharding_4_t1")
        expect = (want[0], want[1].replace("db1.", f"{db}.").replace("h1_plain", "sharding_4_t1"))
        assert error(px, f"PREPARE h5_s FROM '{text}'") == expect
        assert error(px, "EXECUTE h5_s")[0] == 1243   # no statement of that name was left
        with PsClient(proxy.port) as c:
            a = c.prepare(text)
            assert (getattr(a, "kind", None), getattr(a, "err_code", None), getattr(a, "err_message", None)) == (
                "err", *expect), a
    with PsClient(backends[0].port, backends[0].user, backends[0].password, REF_DB) as c:
        a = c.prepare(sql.format(db="db1", t="h1_plain"))
        assert (getattr(a, "err_code", None), getattr(a, "err_message", None)) == want, a
    assert _rows(px, "SELECT id, v FROM sharding_4_t1 ORDER BY id") == [(1, 0), (2, 0), (3, 0), (4, 0)]


def _run_all(conn: Any, *statements: str) -> None:
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


# -- warnings ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("show", ["SHOW WARNINGS", "SHOW ERRORS", "SHOW WARNINGS LIMIT 1"])
def test_show_warnings_columns_are_described_as_mariadb_describes_them(pair, show: str) -> None:
    """Level and Message NOT NULL with decimals 39, as MariaDB sends them (was: nullable, decimals 0, so a
    driver reported them nullable)."""
    px, ref = pair
    for conn in pair:
        one(conn, "SELECT 1 / 0")
    assert fields(px, show) == fields(ref, show)
    assert _rows(px, show) == _rows(ref, show)


# -- AVG over several nodes ----------------------------------------------------------------------------

def test_avg_over_nodes_is_typed_and_printed_as_mariadb(proxy, backends) -> None:
    """AVG of INT, DECIMAL, DOUBLE(M,D), FLOAT and CHAR merged over four nodes: the column definitions
    (length, flags, decimals) and the text of each value are MariaDB's (was: lengths from the SUM's,
    e.g. 37 for 16, flags without BINARY, and DOUBLE(10,3)'s AVG printed '3.25' for '3.2500000')."""
    backends[0].create_databases(REF_DB)
    px, ref = proxy.connect(conv={}), backends[0].connect(REF_DB, conv={})   # values as the server's text
    sql = ("SELECT id % 2 AS k, AVG(v), AVG(dc), AVG(d) AS m, AVG(f), AVG(c), AVG(DISTINCT v) FROM {t} "
           "GROUP BY k ORDER BY k")
    try:
        for conn, name in ((px, "sharding_4_t1"), (ref, "h1_plain")):
            _run_all(conn, f"DROP TABLE IF EXISTS {name}",
                     f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT, dc DECIMAL(6,2), d DOUBLE(10,3), f FLOAT, "
                     f"c CHAR(2))",
                     f"INSERT INTO {name} VALUES (1, 1, 1.5, 1, 1.5, '1'), (2, 2, 2.25, 2.5, 2.25, '2'), "
                     f"(3, 3, 3.13, 3.125, 3.125, '3'), (4, 4, 4, 4, 4, '4'), (5, 7, 0.01, 0.5, 7, '5')")
        assert fields(px, sql.format(t="sharding_4_t1")) == fields(ref, sql.format(t="h1_plain"))
        assert _rows(px, sql.format(t="sharding_4_t1")) == _rows(ref, sql.format(t="h1_plain"))
    finally:
        for conn in (px, ref):
            conn.close()


# -- the info of a write over several nodes --------------------------------------------------------------

_WRITES = ["INSERT INTO {t} VALUES (1, 1, 'a'), (2, 2, 'b'), (3, 3, 'c'), (4, 4, 'd')",
           "INSERT INTO {t} VALUES (5, 1, 'abcd'), (6, 2, 'b')",                        # a warning
           "INSERT IGNORE INTO {t} VALUES (1, 1, 'a'), (5, 2, 'b'), (7, 3, 'c'), (9, 4, 'd')",
           "INSERT INTO {t} VALUES (1, 1, 'a'), (2, 20, 'b'), (10, 3, 'c'), (14, 3, 'c') "
           "ON DUPLICATE KEY UPDATE v = VALUES(v)",
           "INSERT IGNORE INTO {t} VALUES (1, 1, 'a'), (2, 25, 'b'), (15, 3, 'c') ON DUPLICATE KEY UPDATE v = VALUES(v)",
           "REPLACE INTO {t} VALUES (1, 100, 'a'), (2, 20, 'b'), (12, 3, 'c'), (16, 3, 'c')",
           "INSERT INTO {t} VALUES (31, 1, 'a')",
           "UPDATE {t} SET v = 2 WHERE id < 5",
           "UPDATE IGNORE {t} SET s = 'toolong' WHERE id < 3",
           "DELETE FROM {t} WHERE id > 20"]


@pytest.mark.parametrize("found_rows", [False, True])
def test_info_of_a_write_over_several_nodes_is_mariadbs(proxy, backends, found_rows: bool) -> None:
    """'Records: 4  Duplicates: 1  Warnings: 0' of a multi-row INSERT / REPLACE / ODKU and 'Rows matched: ..
    Changed: ..  Warnings: ..' of an UPDATE, as one MariaDB words them for the whole statement (was: none when
    the statement ran on several nodes; the mysql CLI and drivers show it)."""
    from pymysql.constants import CLIENT
    backends[0].create_databases(REF_DB)
    flag = {"client_flag": CLIENT.FOUND_ROWS} if found_rows else {}
    px, ref = proxy.connect(**flag), backends[0].connect(REF_DB, **flag)
    try:
        for conn, name in ((px, "sharding_4_t1"), (ref, "h1_plain")):
            _run_all(conn, "SET sql_mode = ''", f"DROP TABLE IF EXISTS {name}",
                     f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT, s VARCHAR(3))")
        for sql in _WRITES:
            got, want = [], []
            for conn, name, out in ((px, "sharding_4_t1", got), (ref, "h1_plain", want)):
                with conn.cursor() as cur:
                    cur.execute(sql.format(t=name))
                    out.append((cur.rowcount, cur._result.message, cur._result.warning_count))
            if found_rows and "DUPLICATE" in sql:   # an unchanged duplicate is one affected row, as an
                assert got[0][::2] == want[0][::2] and got[0][1] in (want[0][1], b""), sql   # inserted one
                continue
            assert got == want, sql
    finally:
        for conn in (px, ref):
            conn.close()


@pytest.mark.parametrize("mode", ["", "STRICT_ALL_TABLES"])
def test_warnings_of_an_insert_split_over_nodes_are_mariadbs(four_rows, mode: str) -> None:
    """SHOW WARNINGS after a multi-row INSERT over four nodes: '... at row N' counted over the statement and in
    its order; after one that failed, only the error of the row that ended it (was: each node's own row
    numbers, node after node, and every failing node's error)."""
    sql = ("INSERT INTO {t} VALUES (11, 1), (12, 22222222222), (13, 3), (14, 44444444444), (15, 'x'), "
           "(16, 6)")
    got = []
    for conn, name in zip(four_rows, ("sharding_4_t1", "h1_plain")):
        _run_all(conn, f"SET sql_mode = '{mode}'")
        with conn.cursor() as cur:
            try:
                cur.execute(sql.format(t=name))
            except pymysql.MySQLError as e:
                got.append(("error", e.args[0], e.args[1]))
        got.append([tuple(w) for w in _rows(conn, "SHOW WARNINGS")])
        got.append(one(conn, "SELECT @@warning_count"))
    half = len(got) // 2
    assert repr(got[:half]).replace("schema1", REF_DB).replace("sharding_4_t1", "h1_plain") == repr(got[half:])


_DDLS = ["DROP TABLE IF EXISTS {t}_nope", "DROP TABLE IF EXISTS h4_nope1, {t}_nope",
         "CREATE TABLE IF NOT EXISTS {t} (id INT)", "CREATE TABLE IF NOT EXISTS {t} (id INT) ; -- the client's end", "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS v INT",
         "ALTER TABLE {t} ADD COLUMN w INT", "ALTER TABLE {t} MODIFY COLUMN w BIGINT",
         "CREATE INDEX IF NOT EXISTS iv ON {t} (v)", "CREATE INDEX IF NOT EXISTS iv ON {t} (v)",
         "DROP INDEX IF EXISTS ix ON {t}"]


def test_ddl_over_nodes_answers_mariadbs_ok_and_notes(four_rows) -> None:
    """A DDL on a sharding table's four nodes answers as one MariaDB: ALTER's copied rows and 'Records: ..
    Duplicates: ..  Warnings: ..', and the notes of IF [NOT] EXISTS in SHOW WARNINGS (was: a bare OK, no
    warnings: 'Unknown table' of DROP TABLE IF EXISTS, 'Duplicate column name' ... were lost)."""
    for ddl in _DDLS:
        got = []
        for conn, name in zip(four_rows, ("sharding_4_t1", "h1_plain")):
            with conn.cursor() as cur:
                cur.execute(ddl.format(t=name))
                got.append((cur.rowcount, cur._result.message, cur._result.warning_count,
                            [tuple(w) for w in _rows(conn, "SHOW WARNINGS")], one(conn, "SELECT ROW_COUNT()")))
        assert repr(got[0]).replace("schema1", REF_DB).replace("sharding_4_t1", "h1_plain") == repr(got[1]), ddl


def test_sum_and_avg_of_doubles_over_nodes_are_mariadbs(proxy, backends) -> None:
    """MariaDB adds doubles row by row in its order; the nodes' partial sums added in another order give
    other digits ('12' for '11.600000000000001'): pydble answers them over copies of the rows instead of
    merging (was: the merged, wrong digits)."""
    backends[0].create_databases(REF_DB)
    px, ref = proxy.connect(conv={}), backends[0].connect(REF_DB, conv={})   # the digits as the server's text
    values = [0.1, 0.2, 0.3, 0.7, 1e16, 1.0, -1e16, 0.1, 0.3, 0.6, 1.1, 2.2, 3.3]
    rows = ", ".join(f"({i}, {v!r}, '{v!r}')" for i, v in enumerate(values, start=1))
    try:
        for conn, name in ((px, "sharding_4_t1"), (ref, "h1_plain")):
            _run_all(conn, f"DROP TABLE IF EXISTS {name}", f"CREATE TABLE {name} (id INT PRIMARY KEY, g DOUBLE, "
                     f"s VARCHAR(30))", f"INSERT INTO {name} VALUES {rows}")
        for sql in ("SELECT SUM(g), AVG(g), SUM(s) FROM {t}", "SELECT SUM(g) FROM {t} WHERE id > 7",
                    "SELECT id % 3 AS k, SUM(g), AVG(g) FROM {t} GROUP BY k ORDER BY k"):
            assert _rows(px, sql.format(t="sharding_4_t1")) == _rows(ref, sql.format(t="h1_plain")), sql
    finally:
        for conn in (px, ref):
            conn.close()


def _answers(conn: Any, statements: list[str]) -> list[Any]:
    """Each statement's rows, or its error code."""
    out: list[Any] = []
    for sql in statements:
        try:
            out.append(_rows(conn, sql))
        except pymysql.MySQLError as e:
            out.append(e.args[0])
    return out


def test_autocommit_off_opens_a_transaction_where_mariadb_does(four_rows) -> None:
    """With autocommit=0 a statement naming no table opens no transaction: SET TRANSACTION is allowed
    after it (was: 1568 as soon as a node was kept for the session), a read of a table opens one
    (@@in_transaction 1, was 0: the node that answered it was not the transaction's), COMMIT ends it."""
    statements = ["SET autocommit = 0", "SELECT 1", "SET TRANSACTION READ ONLY", "SELECT @@in_transaction",
                  "SET TRANSACTION READ WRITE", "COMMIT", "SELECT COUNT(*) FROM {t} WHERE id = 1",
                  "SELECT @@in_transaction, @@session.in_transaction", "SET TRANSACTION READ ONLY", "COMMIT",
                  "SELECT COUNT(*) FROM {t}", "SELECT @@in_transaction", "SET TRANSACTION READ ONLY", "ROLLBACK",
                  "SELECT @@in_transaction", "SET autocommit = 1"]
    got = [_answers(conn, [s.format(t=name) for s in statements])
           for conn, name in zip(four_rows, ("sharding_4_t1", "h1_plain"))]
    assert got[0] == got[1]
