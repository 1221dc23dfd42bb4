"""The client port as drivers see it: login, commands, driver probes, session state, status flags."""

from __future__ import annotations

import asyncio
from typing import Iterator

import aiomysql
import pymysql
import pytest
from pymysql.constants import CLIENT, SERVER_STATUS

from wire import (BASE_CAPS, CLIENT_DEPRECATE_EOF, CLIENT_MULTI_STATEMENTS, SERVER_STATUS_AUTOCOMMIT,
                  SERVER_STATUS_IN_TRANS, RawClient, drop_after)


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    """Leave the shared backends without this module's tables."""
    yield from drop_after(proxy, 'sharding_4_t1', 'sharding_2_t1', 'cp_fields', 'cp_multi', 'cp_names', 'cp_stop', 'cp_txn')


def _err(excinfo: pytest.ExceptionInfo) -> tuple[int, str]:
    return excinfo.value.args[0], excinfo.value.args[1]


# -- login --------------------------------------------------------------------------------------

def test_pymysql_logs_in_and_sees_the_backend_version(proxy, backends) -> None:
    conn = proxy.connect()
    try:
        direct = backends[0].connect()
        try:
            assert conn.get_server_info() == direct.get_server_info()  # MariaDB's '5.5.5-' prefix too
        finally:
            direct.close()
        with conn.cursor() as cur:
            cur.execute("SELECT DATABASE()")
            assert cur.fetchone() == ("schema1",)
            cur.execute("select @@version_comment limit 1")
            assert "pydble" in cur.fetchone()[0]
            cur.execute("SELECT CONNECTION_ID()")
            assert cur.fetchone()[0] == conn.thread_id()
    finally:
        conn.close()


def test_aiomysql_logs_in_and_queries(proxy) -> None:
    async def run() -> tuple:
        conn = await aiomysql.connect(host="127.0.0.1", port=proxy.port, user="test", password="111111",
                                      db="schema1", autocommit=True)
        try:
            async with conn.cursor() as cur:
                await cur.execute("SELECT DATABASE(), 1 + 1")
                first = await cur.fetchone()
            await conn.ping(reconnect=False)
            await conn.select_db("schema2")
            async with conn.cursor() as cur:
                await cur.execute("SELECT DATABASE()")
                second = await cur.fetchone()
            return first, second
        finally:
            conn.close()

    first, second = asyncio.run(run())
    assert first == ("schema1", 2)
    assert second == ("schema2",)


def test_wrong_password_is_1045(proxy) -> None:
    with pytest.raises(pymysql.err.OperationalError) as ei:
        proxy.connect(password="wrong")
    code, msg = _err(ei)
    assert code == 1045
    assert "Access denied for user 'test'" in msg and "using password: YES" in msg


def test_unknown_user_and_empty_password_are_1045(proxy) -> None:
    with pytest.raises(pymysql.err.OperationalError) as ei:
        proxy.connect(user="nobody")
    assert _err(ei)[0] == 1045
    with pytest.raises(pymysql.err.OperationalError) as ei:
        proxy.connect(password="")
    code, msg = _err(ei)
    assert code == 1045 and "using password: NO" in msg


def test_ungranted_schema_is_1044(proxy) -> None:
    for db in ("mysql", "db1", "schema9"):
        with pytest.raises(pymysql.err.OperationalError) as ei:
            proxy.connect(database=db)
        code, msg = _err(ei)
        assert code == 1044, (db, code, msg)
        assert f"to database '{db}'" in msg


def test_login_without_a_schema_then_use(proxy) -> None:
    conn = proxy.connect(database=None)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT DATABASE()")
            assert cur.fetchone() == (None,)
            with pytest.raises(pymysql.err.OperationalError) as ei:
                cur.execute("SELECT * FROM sharding_4_t1")
            assert ei.value.args[0] == 1046
            cur.execute("USE schema2")
            cur.execute("SELECT DATABASE()")
            assert cur.fetchone() == ("schema2",)
            with pytest.raises(pymysql.err.OperationalError) as ei:
                cur.execute("USE mysql")
            assert ei.value.args[0] == 1044
            cur.execute("SELECT DATABASE()")
            assert cur.fetchone() == ("schema2",)
    finally:
        conn.close()


def test_ports_are_separate_for_client_and_manager_users(proxy) -> None:
    with pytest.raises(pymysql.err.OperationalError) as ei:
        proxy.manager(user="test", password="111111")
    assert _err(ei)[0] == 1045
    with pytest.raises(pymysql.err.OperationalError) as ei:
        proxy.connect(user="root", password="111111", database=None)
    assert _err(ei)[0] == 1045
    m = proxy.manager()
    try:
        with m.cursor() as cur:
            cur.execute("show @@help")
            assert cur.fetchall()
    finally:
        m.close()


def test_greeting_offers_native_password_and_autocommit(proxy) -> None:
    with RawClient(proxy.port) as c:
        g = c.read_greeting()
        assert g.status & SERVER_STATUS_AUTOCOMMIT
        assert g.connection_id > 0
        assert len(g.salt) == 20
        assert g.capabilities & CLIENT_MULTI_STATEMENTS


# -- commands -----------------------------------------------------------------------------------

def test_com_ping_and_init_db(proxy) -> None:
    conn = proxy.connect()
    try:
        conn.ping(reconnect=False)
        conn.select_db("schema2")
        with conn.cursor() as cur:
            cur.execute("SELECT DATABASE()")
            assert cur.fetchone() == ("schema2",)
            cur.execute("CREATE TABLE IF NOT EXISTS sing (id INT PRIMARY KEY)")
            cur.execute("SHOW TABLES")
            assert ("sing",) in cur.fetchall()
        with pytest.raises(pymysql.err.OperationalError) as ei:
            conn.select_db("mysql")   # a backend's own database: never a client's
        assert ei.value.args[0] == 1044
        conn.select_db("information_schema")   # every user's, as on MariaDB
        conn.ping(reconnect=False)
    finally:
        conn.close()


@pytest.mark.parametrize("caps", [BASE_CAPS, BASE_CAPS | CLIENT_DEPRECATE_EOF])
def test_com_set_option_is_answered_as_mariadb_answers_it(proxy, caps) -> None:
    """An EOF, or for a DEPRECATE_EOF client an OK headed 0xFE (was a classic EOF for every client); an option
    that does not exist is 1047 Unknown command."""
    with RawClient(proxy.port) as c:
        assert c.login(caps=caps).kind == "ok"
        c.command(b"\x1b\x00\x00")   # MYSQL_OPTION_MULTI_STATEMENTS_ON
        p = c.read_packet()
        status = bytes((SERVER_STATUS_AUTOCOMMIT, 0))
        assert (p.seq, p.payload) == (1, b"\xfe\x00\x00" + status + b"\x00\x00" if caps & CLIENT_DEPRECATE_EOF
                                      else b"\xfe\x00\x00" + status)
        c.query("SELECT 1; SELECT 2")   # the option took
        assert [s[1] for s in c.read_result().sets] == [[[b"1"]], [[b"2"]]]
        c.command(b"\x1b\x02\x00")
        p = c.read_packet()
        assert (p.seq, p.err_code, p.err_message) == (1, 1047, "Unknown command")


def test_com_process_kill_kills_as_mariadb_does(proxy) -> None:
    """mysql_kill() of libmariadb (mysqladmin kill, mysqli::kill) sends COM_PROCESS_KILL: it was 1047 Unknown
    command; now KILL CONNECTION's answers: OK and the victim closed, 1094 for an unknown id, 1927 for itself."""
    with RawClient(proxy.port) as killer, RawClient(proxy.port) as victim:
        assert killer.login().kind == "ok" and victim.login().kind == "ok"
        killer.command(b"\x0c" + victim.greeting.connection_id.to_bytes(4, "little"))
        assert killer.read_packet().kind == "ok"
        assert victim.closed_by_server()
        killer.command(b"\x0c" + (10 ** 9).to_bytes(4, "little"))
        p = killer.read_packet()
        assert (p.err_code, p.err_message) == (1094, f"Unknown thread id: {10 ** 9}")
        killer.command(b"\x0c" + killer.greeting.connection_id.to_bytes(4, "little"))
        p = killer.read_packet()
        assert (p.seq, p.err_code, p.err_message) == (1, 1927, "Connection was killed")
        assert killer.closed_by_server()
    assert proxy.query("SELECT 1") == [(1,)]


def test_a_client_asking_ignore_space_gets_it_in_its_sql_mode(proxy) -> None:
    """As MariaDB: the handshake's CLIENT_IGNORE_SPACE puts IGNORE_SPACE in the session's sql_mode, through
    COM_RESET_CONNECTION too (pydble offered the flag and ignored it: `COUNT (*)` was a syntax error)."""
    proxy.query("CREATE TABLE IF NOT EXISTS sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))")
    with RawClient(proxy.port) as c:
        assert c.login(caps=BASE_CAPS | 1 << 8).kind == "ok"
        for _ in range(2):
            c.query("SELECT @@sql_mode")
            assert b"IGNORE_SPACE" in c.read_result().sets[0][1][0][0].split(b",")
            c.query("SELECT COUNT (*) FROM sharding_4_t1 WHERE id < 0")
            res = c.read_result()
            assert res.error is None and res.sets[0][1] == [[b"0"]], res.packets[-1].payload
            c.command(b"\x1f")   # COM_RESET_CONNECTION
            assert c.read_packet().kind == "ok"
    with RawClient(proxy.port) as c:   # a client that does not ask: MariaDB's default sql_mode
        assert c.login().kind == "ok"
        c.query("SELECT @@sql_mode")
        assert b"IGNORE_SPACE" not in c.read_result().sets[0][1][0][0]


def test_com_init_db_takes_the_name_as_sent(proxy) -> None:
    """As MariaDB: no name is 1046, a quoted name is a name with quotes (the proxy took `schema2` as schema2)."""
    with RawClient(proxy.port) as c:
        assert c.login().kind == "ok"
        for name, code in ((b"", 1046), (b"`schema2`", 1044)):
            c.command(b"\x02" + name)
            p = c.read_packet()
            assert p.kind == "err" and p.err_code == code, (name, p.payload)
        c.query("SELECT DATABASE()")
        assert c.read_result().sets[0][1] == [[b"schema1"]]


@pytest.mark.parametrize("deprecate_eof", [False, True])

def test_com_field_list_answers_column_definitions(proxy, deprecate_eof) -> None:
    _sharding_4(proxy, [])
    proxy.query("DROP TABLE IF EXISTS cp_fields")
    proxy.query("CREATE TABLE cp_fields (a INT PRIMARY KEY, b VARCHAR(10), c DATE)")
    caps = BASE_CAPS | (CLIENT_DEPRECATE_EOF if deprecate_eof else 0)
    with RawClient(proxy.port) as c:
        assert c.login(caps=caps).kind == "ok"
        for table, names in (("cp_fields", [b"a", b"b", b"c"]), ("sharding_4_t1", None)):
            defs, p = c.field_list(table)
            assert p.kind == "eof", p.payload
            assert [p.seq for p in defs] == list(range(1, len(defs) + 1))
            got = [_coldef_name(d.payload) for d in defs]
            if names is not None:
                assert got == names
            else:
                assert b"id" in got
        c.command(b"\x04no_such_table_here\x00")
        p = c.read_packet()
        assert p.kind == "err" and p.err_code == 1146
        c.query("SELECT 1")
        assert c.read_result().sets[0][1] == [[b"1"]]


def _coldef_name(p: bytes) -> bytes:
    """The 'name' field of a ColumnDefinition41 (the fifth length-encoded string)."""
    pos = 0
    for _ in range(4):
        pos += 1 + p[pos]
    return p[pos + 1:pos + 1 + p[pos]]


def test_com_reset_connection_clears_session_state(proxy) -> None:
    with RawClient(proxy.port) as c:
        assert c.login().kind == "ok"
        c.query("SET @x = 42, autocommit = 0, SESSION sql_mode = 'ANSI_QUOTES'")
        assert c.read_result().error is None
        c.query("SELECT @x, @@sql_mode")
        res = c.read_result()
        assert res.sets[0][1] == [[b"42", b"ANSI_QUOTES"]]
        c.command(b"\x1f")
        ok = c.read_packet()
        assert ok.kind == "ok" and ok.status & SERVER_STATUS_AUTOCOMMIT
        assert not ok.status & SERVER_STATUS_IN_TRANS
        c.query("SELECT @x, @@sql_mode LIKE '%ANSI_QUOTES%'")
        res = c.read_result()
        assert res.sets[0][1] == [[None, b"0"]]
        assert res.packets[-1].status & SERVER_STATUS_AUTOCOMMIT


def test_com_quit_closes(proxy) -> None:
    with RawClient(proxy.port) as c:
        assert c.login().kind == "ok"
        c.command(b"\x01")
        assert c.closed_by_server()


def test_unknown_command_is_an_error_not_a_hang(proxy) -> None:
    with RawClient(proxy.port) as c:
        assert c.login().kind == "ok"
        c.command(b"\x0b")  # COM_CONNECT_OUT: internal to the server
        p = c.read_packet()
        assert p.kind == "err" and p.err_code == 1047
        c.query("SELECT 2")
        assert c.read_result().sets[0][1] == [[b"2"]]


# -- multi-statements ---------------------------------------------------------------------------

def _multi(proxy):
    return proxy.connect(client_flag=CLIENT.MULTI_STATEMENTS)


def test_multi_statements_return_every_result_in_order(proxy) -> None:
    proxy.query("DROP TABLE IF EXISTS cp_multi")
    proxy.query("CREATE TABLE cp_multi (id INT PRIMARY KEY, v INT)")
    conn = _multi(proxy)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 AS one; INSERT INTO cp_multi VALUES (1, 10), (2, 20); "
                        "SELECT v FROM cp_multi ORDER BY id; UPDATE cp_multi SET v = v + 1; SELECT DATABASE()")
            assert cur.fetchall() == ((1,),)
            assert cur.nextset()
            assert cur.rowcount == 2
            assert cur.nextset()
            assert cur.fetchall() == ((10,), (20,))
            assert cur.nextset()
            assert cur.rowcount == 2
            assert cur.nextset()
            assert cur.fetchall() == (("schema1",),)
            assert not cur.nextset()
            cur.execute("SELECT SUM(v) FROM cp_multi")
            assert cur.fetchone() == (32,)
    finally:
        conn.close()


def test_multi_statements_with_scatter_and_local_parts(proxy) -> None:
    _sharding_4(proxy, range(1, 9))
    conn = _multi(proxy)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM sharding_4_t1; SELECT id FROM sharding_4_t1 WHERE id = 3; "
                        "SET @v = 7; SELECT @v; SELECT id FROM sharding_4_t1 ORDER BY id DESC LIMIT 2")
            assert cur.fetchall() == ((8,),)
            assert cur.nextset() and cur.fetchall() == ((3,),)
            assert cur.nextset()  # the SET's OK
            assert cur.nextset() and cur.fetchall() == ((7,),)
            assert cur.nextset() and cur.fetchall() == ((8,), (7,))
            assert not cur.nextset()
    finally:
        conn.close()


def test_an_error_in_the_middle_stops_the_rest(proxy) -> None:
    proxy.query("DROP TABLE IF EXISTS cp_stop")
    proxy.query("CREATE TABLE cp_stop (id INT PRIMARY KEY)")
    conn = _multi(proxy)
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO cp_stop VALUES (1); SELECT * FROM no_such_table_xyz; INSERT INTO cp_stop VALUES (2)")
            with pytest.raises(pymysql.err.ProgrammingError) as ei:
                cur.nextset()
            assert ei.value.args[0] == 1146
            cur.execute("SELECT id FROM cp_stop")
            assert cur.fetchall() == ((1,),)
            # a proxy-side error (1235) in the middle stops the rest too: RAND() in a read answered over
            # copies of the nodes' rows is refused (its values would not be one MySQL's)
            for t in ("sharding_4_t1", "sharding_2_t1"):
                cur.execute(f"DROP TABLE IF EXISTS {t}")
                cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR(20))")
            cur.execute("SELECT 1; SELECT a.id, RAND() FROM sharding_4_t1 a RIGHT JOIN sharding_2_t1 b ON a.id = b.id; "
                        "INSERT INTO cp_stop VALUES (3)")
            with pytest.raises(pymysql.err.MySQLError) as ei:
                cur.nextset()
            assert ei.value.args[0] == 1235
            cur.execute("SELECT id FROM cp_stop")
            assert cur.fetchall() == ((1,),)
    finally:
        conn.close()


def test_without_multi_statements_a_semicolon_list_is_a_syntax_error(proxy) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            with pytest.raises(pymysql.err.ProgrammingError) as ei:
                cur.execute("SELECT 1; SELECT 2")
            assert ei.value.args[0] == 1064
            cur.execute("SELECT 3")
            assert cur.fetchone() == (3,)
    finally:
        conn.close()


# -- status flags -------------------------------------------------------------------------------

def test_status_flags_follow_autocommit_and_transactions(proxy) -> None:
    _sharding_4(proxy, range(1, 5))
    conn = proxy.connect(autocommit=True)
    try:
        st = lambda: conn.server_status  # noqa: E731
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            assert st() & SERVER_STATUS.SERVER_STATUS_AUTOCOMMIT
            assert not st() & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            cur.execute("SELECT * FROM sharding_4_t1 WHERE id = 1")  # relayed from one node
            assert st() & SERVER_STATUS.SERVER_STATUS_AUTOCOMMIT
            assert not st() & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            conn.begin()
            assert st() & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            cur.execute("UPDATE sharding_4_t1 SET name = 'x' WHERE id = 2")
            assert st() & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            cur.execute("SELECT COUNT(*) FROM sharding_4_t1")  # merged
            assert st() & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            cur.execute("SELECT DATABASE()")  # answered by the proxy
            assert st() & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            conn.commit()
            assert not st() & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            conn.autocommit(False)
            assert not st() & SERVER_STATUS.SERVER_STATUS_AUTOCOMMIT
            cur.execute("SELECT name FROM sharding_4_t1 WHERE id = 2")
            assert cur.fetchone() == ("x",)
            assert not st() & SERVER_STATUS.SERVER_STATUS_AUTOCOMMIT
            # as on MariaDB itself, reads alone do not flag a transaction; a write does
            cur.execute("UPDATE sharding_4_t1 SET name = 'y' WHERE id = 2")
            assert st() & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            assert not st() & SERVER_STATUS.SERVER_STATUS_AUTOCOMMIT
            cur.execute("SELECT COUNT(*) FROM sharding_4_t1")
            assert st() & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            conn.rollback()
            assert not st() & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            conn.autocommit(True)
            assert st() & SERVER_STATUS.SERVER_STATUS_AUTOCOMMIT
        assert proxy.query("SELECT name FROM sharding_4_t1 WHERE id = 2") == [("x",)]
    finally:
        conn.close()


def test_pymysql_default_is_transactional_and_commit_is_needed(proxy) -> None:
    """PyMySQL's default autocommit=False: rows are visible to others only after commit()."""
    proxy.query("DROP TABLE IF EXISTS cp_txn")
    proxy.query("CREATE TABLE cp_txn (id INT PRIMARY KEY)")
    conn = proxy.connect(autocommit=False)
    try:
        assert not conn.get_autocommit()
        with conn.cursor() as cur:
            cur.execute("INSERT INTO cp_txn VALUES (1)")
            assert conn.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS
            assert proxy.query("SELECT COUNT(*) FROM cp_txn") == [(0,)]
        conn.commit()
        assert proxy.query("SELECT COUNT(*) FROM cp_txn") == [(1,)]
    finally:
        conn.close()


# -- driver probes and session state ------------------------------------------------------------

def test_connector_j_post_login_queries(proxy) -> None:
    with RawClient(proxy.port) as c:
        assert c.login(caps=BASE_CAPS | CLIENT_DEPRECATE_EOF).kind == "ok"
        # Connector/J pipelines both queries before reading any answer
        c.send_raw(_packet(b"\x03set autocommit=1, sql_mode = concat(@@sql_mode,',STRICT_TRANS_TABLES')")
                   + _packet(b"\x03SELECT @@max_allowed_packet,@@system_time_zone,@@time_zone,"
                             b"@@auto_increment_increment"))
        first = c.read_result()
        assert first.error is None and first.oks
        assert first.oks[0].status & SERVER_STATUS_AUTOCOMMIT
        second = c.read_result()
        assert second.error is None
        (row,) = second.sets[0][1]
        assert int(row[0]) >= 1 << 20 and row[3] == b"1"
        c.query("SELECT @@sql_mode")
        assert b"STRICT_TRANS_TABLES" in c.read_result().sets[0][1][0][0]
        c.query("SHOW VARIABLES WHERE Variable_name in ('max_allowed_packet','system_time_zone')")
        assert len(c.read_result().sets[0][1]) == 2


def _packet(payload: bytes, seq: int = 0) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes((seq,)) + payload


def test_set_names_is_kept_and_replayed(proxy) -> None:
    proxy.query("DROP TABLE IF EXISTS cp_names")
    proxy.query("CREATE TABLE cp_names (id INT PRIMARY KEY, s VARCHAR(20)) DEFAULT CHARSET=utf8mb4")
    conn = proxy.connect(charset="latin1")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@character_set_client, @@character_set_results")
            assert cur.fetchone() == ("latin1", "latin1")
            cur.execute("INSERT INTO cp_names VALUES (1, %s)", ("caf\u00e9",))
            cur.execute("SET NAMES utf8mb4")
            cur.execute("SELECT @@character_set_client")
            assert cur.fetchone() == ("utf8mb4",)
    finally:
        conn.close()
    assert proxy.query("SELECT s FROM cp_names WHERE id = 1") == [("caf\u00e9",)]
    # every backend connection the session uses gets the same state: many nodes, one answer
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET NAMES latin1")
            cur.execute("SET @tag = 'x1'")
            for _ in range(3):
                cur.execute("SELECT @@character_set_client, @tag")
                assert cur.fetchone() == ("latin1", "x1")
            cur.execute("/*!pydble:shardingNode=dn2*/ SELECT @@character_set_client, @tag")
            assert cur.fetchone() == ("latin1", "x1")
    finally:
        conn.close()


def test_a_bad_set_fails_at_once_and_the_session_goes_on(proxy) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            with pytest.raises(pymysql.err.MySQLError) as ei:
                cur.execute("SET sql_mode = 'NO_SUCH_MODE'")
            assert ei.value.args[0] == 1231
            with pytest.raises(pymysql.err.MySQLError) as ei:
                cur.execute("SET SESSION no_such_variable_xyz = 1")
            assert ei.value.args[0] == 1193
            with pytest.raises(pymysql.err.MySQLError) as ei:
                cur.execute("SET NAMES no_such_charset")
            assert ei.value.args[0] == 1115
            with pytest.raises(pymysql.err.MySQLError) as ei:
                cur.execute("SET autocommit = 'maybe'")
            assert ei.value.args[0] == 1231
            # nothing of the failed SETs sticks
            cur.execute("SELECT 5, @@sql_mode LIKE '%NO_SUCH%'")
            assert cur.fetchone() == (5, 0)
            cur.execute("SELECT COUNT(*) FROM sharding_4_t1 WHERE id < 0")
            assert cur.fetchone() == (0,)
    finally:
        conn.close()


def test_set_session_variables_apply_to_routed_queries(proxy) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute("SET @@session.group_concat_max_len = 4096, @a = 1, @b := 'two'")
            cur.execute("SELECT @@tx_isolation, @@group_concat_max_len, @a, @b")
            assert cur.fetchone() == ("READ-COMMITTED", 4096, 1, "two")
    finally:
        conn.close()


def test_show_databases_and_tables(proxy) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES")
            assert {r[0] for r in cur.fetchall()} == {"schema1", "schema2"}
            for t in ("sharding_2_t1", "sharding_4_t1", "test", "schema2.sing"):   # SHOW TABLES lists what exists
                cur.execute(f"CREATE TABLE IF NOT EXISTS {t} (id INT PRIMARY KEY)")
            cur.execute("SHOW TABLES")
            names = {r[0] for r in cur.fetchall()}
            assert {"sharding_2_t1", "sharding_4_t1", "test"} <= names
            cur.execute("SHOW FULL TABLES FROM schema2")
            assert cur.fetchall() == (("sing", "BASE TABLE"),)
    finally:
        conn.close()


# -- helpers ------------------------------------------------------------------------------------

def _has(proxy, table: str) -> bool:
    return any(r[0] == table for r in proxy.query("SHOW TABLES"))


def _sharding_4(proxy, ids) -> None:
    """(Re)create sharding_4_t1 with the given ids."""
    proxy.query("DROP TABLE IF EXISTS sharding_4_t1")
    proxy.query("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))")
    values = ", ".join(f"({i}, 'n{i}')" for i in ids)
    if values:
        proxy.query(f"INSERT INTO sharding_4_t1 VALUES {values}")
