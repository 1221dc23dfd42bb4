"""The access boundary (issue 16), tried as a hostile client would over a real proxy and real MariaDB:
a user `limited` granted only schema1, a user `priv` with DBLE dml privileges, a user `watcher` with
the admin flag. Nothing outside a user's grants may reach a backend, whatever the statement kind."""

from __future__ import annotations

import sys
from pathlib import Path

import pymysql
import pytest
from harness import ProxyProcess, free_port, proxy_config

PRIV = {"schema1": "0010", "schema2.sing": "1010"}   # INSERT, UPDATE, SELECT, DELETE


def _config(backends):
    cfg = proxy_config(backends, free_port(), free_port())
    cfg["users"] = [
        {"name": "test", "password": "111111", "schemas": ["schema1", "schema2"]},
        {"name": "limited", "password": "lim-pw", "schemas": ["schema1"]},
        {"name": "priv", "password": "priv-pw", "schemas": ["schema1", "schema2"], "privileges": PRIV},
        {"name": "watcher", "password": "watch-pw", "schemas": ["schema1"], "admin": True},
        {"name": "other", "password": "other-pw", "schemas": ["schema2"]},
        {"name": "blind", "password": "blind-pw", "schemas": ["schema1", "schema2"],
         "privileges": {"schema2.sing": "0000"}},
        {"name": "ro", "password": "ro-pw", "schemas": ["schema1"], "read_only": True},
    ]
    return cfg


@pytest.fixture(scope="module")
def px(request, backends):
    p = ProxyProcess(_config(backends), release_ports=True)
    p.start()
    request.addfinalizer(p.cleanup)
    p.query("DROP TABLE IF EXISTS sing", database="schema2")   # other tests shape it their way
    p.query("CREATE TABLE sing (id INT PRIMARY KEY, v VARCHAR(20))", database="schema2")
    p.query("REPLACE INTO sing VALUES (1, 'secret')", database="schema2")
    p.query("DROP TABLE IF EXISTS sharding_2_t1")   # likewise
    p.query("CREATE TABLE sharding_2_t1 (id INT PRIMARY KEY, v INT)")
    p.query("REPLACE INTO sharding_2_t1 VALUES (1, 10), (2, 20)")
    return p


def _err(conn, sql, args=None):
    """Run sql expecting an error; (code, message)."""
    with conn.cursor() as cur:
        with pytest.raises(pymysql.MySQLError) as e:
            cur.execute(sql, args)
            cur.fetchall()
    return e.value.args[0], e.value.args[1]


def _rows(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


@pytest.fixture
def limited(px):
    c = px.connect(user="limited", password="lim-pw")
    yield c
    c.close()


def test_tables_outside_the_grants_are_refused_in_every_statement_kind(px, backends, limited):
    refused = {
        "SELECT * FROM schema2.sing": "SELECT",
        "SELECT * FROM `schema2`.`sing` WHERE id = 1": "SELECT",
        "SELECT id FROM sharding_2_t1 WHERE id IN (SELECT id FROM schema2.sing)": "SELECT",
        "SELECT (SELECT v FROM schema2.sing LIMIT 1)": "SELECT",
        "SELECT * FROM sharding_2_t1 a JOIN schema2.sing b ON a.id = b.id": "SELECT",
        "SELECT * FROM JSON_TABLE((SELECT v FROM schema2.sing LIMIT 1), '$' COLUMNS (x INT PATH '$')) j": "SELECT",
        "INSERT INTO schema2.sing VALUES (9, 'x')": "INSERT",
        "REPLACE INTO schema2.sing VALUES (1, 'x')": "INSERT",
        "INSERT INTO sharding_2_t1 (id, v) SELECT id, 1 FROM schema2.sing": "SELECT",
        "UPDATE schema2.sing SET v = 'x'": "UPDATE",
        "DELETE FROM schema2.sing": "DELETE",
        "DROP TABLE schema2.sing": "DROP",
        "TRUNCATE TABLE schema2.sing": "DROP",
        "ALTER TABLE schema2.sing ADD COLUMN z INT": "ALTER",
        "CREATE TABLE schema2.evil (id INT)": "CREATE",
        "CREATE INDEX ix ON schema2.sing (v)": "INDEX",
        "SHOW CREATE TABLE schema2.sing": "SHOW",
        "SHOW COLUMNS FROM schema2.sing": "SELECT",
        "SHOW INDEX FROM sing FROM schema2": "SELECT",
        "DESC schema2.sing": "SELECT",
        "EXPLAIN SELECT * FROM schema2.sing": "SELECT",
        "DO (SELECT COUNT(*) FROM schema2.sing)": "SELECT",
        "CHECKSUM TABLE schema2.sing": "SELECT",
        "SELECT 1 /*!50000 , (SELECT v FROM schema2.sing LIMIT 1) */": "SELECT",
        "SELECT 1 /*M!100000 , (SELECT v FROM schema2.sing LIMIT 1) */": "SELECT",
        "SELECT * FROM db1.sing": "SELECT",    # the physical database: unknown, and said no more
    }
    for sql, word in refused.items():
        code, msg = _err(limited, sql)
        assert code == 1142, (sql, code, msg)
        table = "evil" if "schema2.evil" in sql else "sing"
        assert msg == f"{word} command denied to user 'limited'@'127.0.0.1' for table '{table}'", (sql, msg)
    # RETURNING's list runs as written on the written table's node (dn1 also holds schema2.sing)
    for sql in ("INSERT INTO sharding_2_t1 VALUES (8, 8) RETURNING (SELECT v FROM sing LIMIT 1)",
                "REPLACE INTO sharding_2_t1 VALUES (8, 8) RETURNING id, (SELECT MAX(v) FROM db1.sing)",
                "DELETE FROM sharding_2_t1 WHERE id = 8 RETURNING *, (WITH q AS (SELECT v FROM schema2.sing) "
                "SELECT MAX(v) FROM q)"):
        code, msg = _err(limited, sql)
        assert code == 1235 and "secret" not in msg, (sql, msg)
    for sql in ("SELECT SETVAL(schema2.sing, 100)", "SELECT NEXTVAL(db1.sing)", "SELECT PREVIOUS VALUE FOR sing",
                "INSERT INTO sharding_2_t1 VALUES (NEXT VALUE FOR schema2.sing, 1)"):
        code, msg = _err(limited, sql)     # a SEQUENCE object is a table: never reached unchecked
        assert code == 1235 and "SEQUENCE" in msg, (sql, msg)
    # a SHOW's WHERE runs on a node as written: a subquery in it would be a yes/no oracle on any table there
    for sql in ("SHOW COLUMNS FROM sharding_2_t1 WHERE (SELECT MAX(v) FROM schema2.sing) = 'secret'",
                "SHOW INDEX FROM sharding_2_t1 WHERE (SELECT COUNT(*) FROM db1.sing) > 0",
                "SHOW VARIABLES WHERE Variable_name = 'version' AND (SELECT MAX(v) FROM sing) = 'secret'",
                "SHOW SESSION STATUS WHERE EXISTS (SELECT 1 FROM schema2.sing)",
                "SHOW COLLATION WHERE Collation = 'utf8mb4_bin' AND (SELECT 1 FROM sing) = 1"):
        code, msg = _err(limited, sql)
        assert code in (1235, 1142), (sql, msg)
    assert _rows(limited, "SHOW VARIABLES WHERE Variable_name = 'version' AND 1 = 1")   # the WHERE itself works
    # MariaDB's dynamic SQL: refused as a whole (it answered 1243 'Unknown prepared statement handler (IMMEDIATE)')
    code, msg = _err(limited, "EXECUTE IMMEDIATE 'SELECT * FROM schema2.sing'")
    assert (code, msg) == (1235, "EXECUTE IMMEDIATE is not supported by pydble: PREPARE the statement, then EXECUTE it")
    with limited.cursor() as cur:      # a statement named `immediate` is still a name
        cur.execute("PREPARE immediate FROM 'SELECT 7'")
        cur.execute("EXECUTE immediate")
        assert cur.fetchall() == ((7,),)
    # a stored function of another schema (its definer's rights, in a database schemas share)
    assert _err(limited, "SELECT schema2.f()") == _db_denied("limited", "schema2")
    assert _err(limited, "SELECT id FROM sharding_2_t1 WHERE v = `schema2` . f(1)") == _db_denied("limited", "schema2")
    assert _err(limited, "USE schema2")[0] == 1044
    assert _err(limited, "CREATE TABLE evil2 LIKE schema2.sing")[0] in (1142, 1235)  # 1235: not co-located
    # a prepared statement (COM_STMT_PREPARE) is checked at PREPARE, before any backend prepares it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "proxy"))
    from ps_wire import Answer, PsClient
    with PsClient(px.port, user="limited", password="lim-pw") as ps:
        for sql in ("SELECT * FROM schema2.sing WHERE id = ?", "UPDATE schema2.sing SET v = ? WHERE id = 1",
                    "SELECT * FROM mysql.user WHERE user = ?"):
            got = ps.prepare(sql)
            assert isinstance(got, Answer) and got.err_code in (1142, 1044), (sql, got)
    # and each statement of a multi-statement on its own
    multi = px.connect(user="limited", password="lim-pw",
                       client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS)
    try:
        with multi.cursor() as cur:
            cur.execute("SELECT 1; SELECT * FROM schema2.sing")
            with pytest.raises(pymysql.MySQLError) as e:
                cur.nextset()
        assert e.value.args[0] == 1142
    finally:
        multi.close()
    # nothing changed on the backend: sing still has its row, no evil table exists
    assert backends[0].query("SELECT v FROM sing", database="db1") == [("secret",)]
    assert backends[0].query("SHOW TABLES LIKE 'evil%'", database="db1") == []
    assert backends[0].query("SHOW TABLES LIKE 'evil%'", database="db3") == []


def test_granted_schema_still_works(limited):
    assert _rows(limited, "SELECT v FROM sharding_2_t1 WHERE id = 1") == [(10,)]
    assert _rows(limited, "SELECT COUNT(*) FROM schema1.sharding_2_t1") == [(2,)]
    assert _rows(limited, "SELECT USER(), CURRENT_USER()")[0][0].startswith("limited@")
    assert _rows(limited, "SHOW DATABASES") == [("schema1",)]


def test_backend_schemas_and_host_are_out_of_reach(limited, px):
    full = px.connect()   # even a user granted every logical schema
    try:
        for conn, who in ((limited, "limited"), (full, "test")):
            for sql in ("SELECT user, authentication_string FROM mysql.user", "SELECT * FROM sys.version",
                        "SELECT * FROM performance_schema.threads", "SHOW TABLES FROM mysql",
                        "SELECT * FROM sharding_2_t1 WHERE id IN (SELECT 1 FROM mysql.db)",
                        "/*!pydble:shardingNode=dn1*/ SELECT * FROM mysql.user"):
                code, msg = _err(conn, sql)
                assert code == 1044, (sql, msg)
                assert f"Access denied for user '{who}'@'127.0.0.1' to database" in msg, (sql, msg)
            assert _err(conn, "USE mysql")[0] == 1044
            with pytest.raises(pymysql.MySQLError) as e:
                conn.select_db("performance_schema")   # COM_INIT_DB
            assert e.value.args[0] == 1044
            for sql in ("SELECT LOAD_FILE('/etc/passwd')", "SELECT `load_file`('/etc/passwd')",
                        "SELECT * FROM sharding_2_t1 INTO OUTFILE '/tmp/pydble-out'",
                        "SELECT 1 INTO DUMPFILE '/tmp/pydble-dump'",
                        "LOAD DATA INFILE '/etc/passwd' INTO TABLE sharding_2_t1",
                        "/*!pydble:shardingNode=dn5*/ SELECT LOAD_FILE('/etc/passwd')",
                        "SET @x = LOAD_FILE('/etc/passwd')", "SET @x = (SELECT authentication_string FROM mysql.user)",
                        "CREATE TABLE evil3 (id INT) DATA DIRECTORY = '/tmp'",
                        "SHOW BINLOG EVENTS", "SHOW ENGINE INNODB STATUS", "SHOW TABLE STATUS FROM db3",
                        "SHOW TRIGGERS FROM db1", "SHOW EVENTS FROM mysql", "SHOW CREATE DATABASE db1"):
                code, msg = _err(conn, sql)
                assert code in (1235, 1044), (sql, code, msg)
            with conn.cursor() as cur:   # the logical schemas' stored programs (none), never the backend's (sys)
                for sql in ("SHOW PROCEDURE STATUS", "SHOW FUNCTION STATUS", "SHOW EVENTS"):
                    cur.execute(sql)
                    assert cur.fetchall() == (), sql
            # the backend's account and thread never show through a statement a backend answers
            with conn.cursor() as cur:
                cur.execute("SELECT CONNECTION_ID(), USER(), CURRENT_USER() FROM sharding_2_t1 WHERE id = 1")
                assert cur.fetchall() == ((conn.thread_id(), f"{who}@127.0.0.1", f"{who}@127.0.0.1"),)
                assert [d[0] for d in cur.description] == ["CONNECTION_ID()", "USER()", "CURRENT_USER()"]
                cur.execute("SELECT COUNT(*) FROM sharding_2_t1 WHERE SESSION_USER() LIKE 'root%'")
                assert cur.fetchall() == ((0,),)
    finally:
        full.close()


def test_no_table_reads_another_database_through_the_merge_engine(backends, limited):
    """ENGINE=MERGE UNION=(db.t, ...) reads and writes any MyISAM table of any database of the server: a
    user granted only schema1 read db1's. Refused (1235) for tables and temporary tables, however spelled."""
    backends[0].query("CREATE TABLE IF NOT EXISTS myi (id INT, v VARCHAR(20)) ENGINE=MyISAM", database="db1")
    backends[0].query("REPLACE INTO myi VALUES (1, 'myisam-secret')", database="db1")
    try:
        for sql in ("CREATE TABLE mrg (id INT, v VARCHAR(20)) ENGINE=MRG_MyISAM UNION=(db1.myi)",
                    "CREATE TABLE mrg (id INT, v VARCHAR(20)) ENGINE = 'MERGE' UNION (`db1`.`myi`) INSERT_METHOD=LAST",
                    "CREATE TABLE mrg (id INT, v VARCHAR(20)) UNION=(db1.myi)",   # default_storage_engine = MERGE
                    "CREATE TEMPORARY TABLE mrg (id INT, v VARCHAR(20)) ENGINE=MERGE UNION=(db1.myi)",
                    "CREATE TEMPORARY TABLE mrg (id INT) ENGINE=MyISAM DATA DIRECTORY='/tmp'",
                    "CREATE TABLE fed (id INT) ENGINE='FEDERATED'",
                    "ALTER TABLE sharding_2_t1 ENGINE=MRG_MyISAM"):
            code, msg = _err(limited, sql)
            assert code == 1235 and "secret" not in msg, (sql, msg)
        with limited.cursor() as cur:   # a set operation's UNION in CREATE ... SELECT is not the option
            cur.execute("CREATE TEMPORARY TABLE un (a INT) SELECT 1 AS a UNION (SELECT 2)")
            cur.execute("SELECT a FROM un ORDER BY a")
            assert cur.fetchall() == ((1,), (2,))
            cur.execute("DROP TEMPORARY TABLE un")
    finally:
        backends[0].query("DROP TABLE IF EXISTS myi", database="db1")
        for db in ("db1", "db3"):
            backends[0].query("DROP TABLE IF EXISTS mrg", database=db)


def test_hints_cannot_leave_the_grants(limited):
    # dn1's database (db1) also holds schema2.sing: a hint must not reach it under schema1's name
    for sql in ("/*!pydble:shardingNode=dn1*/ SELECT * FROM sing",
                "/*!pydble:shardingNode=dn1*/ SELECT * FROM schema2.sing",
                "/*!pydble:shardingNode=dn1*/ DROP TABLE sing",
                "/*!pydble:shardingNode=dn1*/ SELECT * FROM db1.sing"):
        code, msg = _err(limited, sql)
        assert code in (1142, 1235, 1049), (sql, code, msg)
        assert "secret" not in msg
    # a hint that stays inside the grants still works
    assert _rows(limited, "/*!pydble:shardingNode=dn1*/ SELECT COUNT(*) FROM sharding_2_t1") == [(1,)]


def test_dble_privileges_per_schema_and_table(px, backends):
    c = px.connect(user="priv", password="priv-pw")
    try:
        assert _rows(c, "SELECT COUNT(*) FROM sharding_2_t1") == [(2,)]       # schema1 = 0010: SELECT only
        for sql, word in (("INSERT INTO sharding_2_t1 VALUES (5, 5)", "INSERT"),
                          ("UPDATE sharding_2_t1 SET v = 0 WHERE id = 1", "UPDATE"),
                          ("DELETE FROM sharding_2_t1 WHERE id = 1", "DELETE"),
                          ("DROP TABLE sharding_2_t1", "DROP")):
            code, msg = _err(c, sql)
            assert (code, msg) == (1142, f"{word} command denied to user 'priv'@'127.0.0.1' for table "
                                         f"'sharding_2_t1'"), sql
        c.select_db("schema2")                                                  # schema2.sing = 1010
        assert _rows(c, "SELECT v FROM sing WHERE id = 1") == [("secret",)]
        with c.cursor() as cur:
            cur.execute("INSERT INTO sing VALUES (7, 'ok')")
        assert _err(c, "UPDATE sing SET v = 'x' WHERE id = 1")[0] == 1142
        assert _err(c, "DELETE FROM sing WHERE id = 7")[0] == 1142
        # reading one table to write another: each needs its own bit
        assert _err(c, "DELETE FROM schema2.sing WHERE id IN (SELECT id FROM schema1.sharding_2_t1)")[0] == 1142
        grants = [r[0] for r in _rows(c, "SHOW GRANTS")]
        assert grants == ["GRANT USAGE ON *.* TO `priv`@`%`", "GRANT SELECT ON `schema1`.* TO `priv`@`%`",
                          "GRANT ALL PRIVILEGES ON `schema2`.* TO `priv`@`%`",
                          "GRANT SELECT, INSERT ON `schema2`.`sing` TO `priv`@`%`"]   # MariaDB's quoting
        assert [r[0] for r in _rows(c, "SHOW GRANTS FOR CURRENT_USER()")] == grants
        assert _err(c, "SHOW GRANTS FOR root")[0] == 1044
    finally:
        c.close()
    assert backends[0].query("SELECT COUNT(*) FROM sing WHERE id = 7", database="db1") == [(1,)]
    px.query("DELETE FROM sing WHERE id = 7", database="schema2")


def test_processlist_and_kill_speak_of_pydbles_sessions(px):
    a = px.connect(user="limited", password="lim-pw")
    b = px.connect(user="limited", password="lim-pw")
    other = px.connect()   # user test
    watcher = px.connect(user="watcher", password="watch-pw")
    try:
        a_id = _rows(a, "SELECT CONNECTION_ID()")[0][0]
        b_id = _rows(b, "SELECT CONNECTION_ID()")[0][0]
        other_id = _rows(other, "SELECT CONNECTION_ID()")[0][0]
        rows = _rows(a, "SHOW FULL PROCESSLIST")
        assert {r[0] for r in rows} == {a_id, b_id}       # its own sessions only, as MySQL without PROCESS
        me = next(r for r in rows if r[0] == a_id)
        assert me[1] == "limited" and me[2].startswith("127.0.0.1:") and me[3] == "schema1"
        assert me[4] == "Query" and me[7] == "SHOW FULL PROCESSLIST"
        assert next(r for r in rows if r[0] == b_id)[4] == "Sleep"
        assert {r[1] for r in _rows(watcher, "SHOW PROCESSLIST")} >= {"limited", "test", "watcher"}
        assert "root" not in {r[1] for r in _rows(watcher, "SHOW PROCESSLIST")}   # never the backend account
        code, _ = _err(a, f"KILL {other_id}")
        assert code == 1095                                # not its own: refused
        assert _rows(other, "SELECT 1") == [(1,)]
        assert _err(a, "KILL 999999")[0] == 1094           # a backend thread id means nothing here
        with a.cursor() as cur:
            cur.execute(f"KILL QUERY {b_id}")              # nothing running: a no-op
            cur.execute(f"KILL {b_id}")
        with pytest.raises(pymysql.MySQLError):
            _rows(b, "SELECT 1")
        with watcher.cursor() as cur:
            cur.execute(f"KILL CONNECTION {other_id}")     # the admin flag may kill anyone's session
        with pytest.raises(pymysql.MySQLError):
            _rows(other, "SELECT 1")
    finally:
        for c in (a, b, other, watcher):
            try:
                c.close()
            except Exception:  # noqa: BLE001 - killed ones are already gone
                pass


PROCESSLIST_TABLE_COLUMNS = ["ID", "USER", "HOST", "DB", "COMMAND", "TIME", "STATE", "INFO", "TIME_MS", "STAGE",
                             "MAX_STAGE", "PROGRESS", "MEMORY_USED", "MAX_MEMORY_USED", "EXAMINED_ROWS", "QUERY_ID",
                             "INFO_BINARY", "TID"]


def test_information_schema_processlist_speaks_of_pydbles_sessions(px, backends):
    a = px.connect(user="limited", password="lim-pw")
    b = px.connect(user="limited", password="lim-pw")
    other = px.connect()   # user test
    watcher = px.connect(user="watcher", password="watch-pw")
    try:
        a_id, b_id, other_id, w_id = (_rows(c, "SELECT CONNECTION_ID()")[0][0] for c in (a, b, other, watcher))
        sql = "SELECT * FROM information_schema.PROCESSLIST"
        with a.cursor() as cur:
            cur.execute(sql)
            assert [d[0] for d in cur.description] == PROCESSLIST_TABLE_COLUMNS   # MariaDB's columns
            rows = list(cur.fetchall())
        assert {r[0] for r in rows} == {a_id, b_id}        # its own sessions only, as MySQL without PROCESS
        me = next(r for r in rows if r[0] == a_id)
        assert me[1] == "limited" and me[2].startswith("127.0.0.1:") and me[3] == "schema1"
        assert me[4] == "Query" and me[7] == sql and me[16] == sql.encode()
        assert next(r for r in rows if r[0] == b_id)[4:8] == ("Sleep", 0, "", None)
        assert _rows(a, "SELECT ID, USER FROM information_schema.PROCESSLIST WHERE USER = 'test'") == []
        assert _rows(a, "SELECT COUNT(*) FROM information_schema.PROCESSLIST") == [(2,)]
        assert _rows(a, "SELECT ID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()") == [(a_id,)]

        seen = _rows(watcher, "SELECT ID, USER FROM information_schema.PROCESSLIST WHERE USER = 'test'")
        assert (other_id, "test") in seen and {u for _, u in seen} == {"test"}
        everyone = _rows(watcher, "SELECT ID, USER FROM information_schema.PROCESSLIST")
        assert {a_id, b_id, other_id, w_id} <= {i for i, _ in everyone}
        assert "root" not in {u for _, u in everyone}     # never the backend account's threads
        assert _rows(watcher, f"SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                              f"WHERE ID IN ({a_id}, {b_id}, {other_id}, {w_id})") == [(4,)]
        threads = {r[0] for r in backends[0].query("SELECT ID FROM information_schema.PROCESSLIST")}
        pydble_ids = {i for i, _ in everyone}
        assert _rows(watcher, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID IN (" +
                     ",".join(str(t) for t in threads - pydble_ids or {0}) + ")") == [(0,)]
    finally:
        for c in (a, b, other, watcher):
            c.close()


def test_kill_query_interrupts_a_running_statement(px):
    import threading
    victim = px.connect(user="limited", password="lim-pw")
    killer = px.connect(user="limited", password="lim-pw")
    try:
        vid = _rows(victim, "SELECT CONNECTION_ID()")[0][0]
        out: list = []

        def run():
            try:
                out.append(_rows(victim, "SELECT SLEEP(20) FROM sharding_2_t1 WHERE id = 1"))
            except pymysql.MySQLError as e:
                out.append(e)
        t = threading.Thread(target=run)
        t.start()
        import time
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any(r[0] == vid and r[4] == "Query" for r in _rows(killer, "SHOW PROCESSLIST")):
                break
            time.sleep(0.1)
        time.sleep(0.3)
        started = time.monotonic()
        with killer.cursor() as cur:
            cur.execute(f"KILL QUERY {vid}")
        t.join(15)
        assert time.monotonic() - started < 10
        # MariaDB's SLEEP answers 1 when interrupted, or the statement ends with 1317
        assert out and (out[0] == [(1,)] or getattr(out[0], "args", (0,))[0] == 1317), out
        assert _rows(victim, "SELECT 1") == [(1,)]       # the session itself goes on
    finally:
        victim.close()
        killer.close()


def _denied(user: str, word: str, table: str) -> tuple[int, str]:
    return 1142, f"{word} command denied to user '{user}'@'127.0.0.1' for table '{table}'"


def _db_denied(user: str, db: str) -> tuple[int, str]:
    return 1044, f"Access denied for user '{user}'@'127.0.0.1' to database '{db}'"


def test_lock_tables_stays_inside_the_grants(px, limited):
    """A lock blocks every other user of the table: LOCK TABLES is checked as MariaDB checks it."""
    for sql, db in (("LOCK TABLES schema2.sing READ", "schema2"),
                    ("LOCK TABLES sharding_2_t1 READ, `schema2` . /*x*/ `sing` WRITE", "schema2"),
                    ("LOCK TABLES schema2.nosuch READ", "schema2"),
                    ("LOCK TABLES db1.sing WRITE", "db1"), ("LOCK TABLES mysql.user READ", "mysql")):
        assert _err(limited, sql) == _db_denied("limited", db), sql
    blind = px.connect(user="blind", password="blind-pw", database="schema2")
    ro = px.connect(user="ro", password="ro-pw")
    try:
        assert _err(blind, "LOCK TABLES sing WRITE") == _denied("blind", "SELECT", "sing")
        assert _err(ro, "LOCK TABLES sharding_2_t1 READ, test WRITE") == (1290, "User 'ro' is read only")
        with ro.cursor() as cur:          # a read lock is a read
            cur.execute("LOCK TABLES sharding_2_t1 READ")
            cur.execute("SELECT COUNT(*) FROM sharding_2_t1")
            cur.execute("UNLOCK TABLES")
    finally:
        blind.close()
        ro.close()
    # nothing was left locked: the owner still writes at once
    owner = px.connect(database="schema2", read_timeout=5)
    try:
        with owner.cursor() as cur:
            cur.execute("UPDATE sing SET v = 'secret' WHERE id = 1")
    finally:
        owner.close()


def test_session_variables_only_a_privileged_account_may_set_are_refused(px, limited):
    """SET is replayed on the backend's own (privileged) account: what MariaDB lets only SUPER, BINLOG
    ADMIN/REPLAY or FILE set (binary log, general log, server identity, file paths) gets 1227."""
    super_, binlog = "SUPER", "SUPER, BINLOG ADMIN"
    for sql, need in (("SET sql_log_bin = 0", binlog), ("SET @@session.`SQL_LOG_BIN` = OFF", binlog),
                      ("SET SESSION sql_log_off = 1, autocommit = 1", super_),
                      ("SET LOCAL binlog_format = 'STATEMENT'", binlog),
                      ("SET @@gtid_seq_no = 5", "SUPER, BINLOG REPLAY"), ("SET server_id = 7", "SUPER, BINLOG REPLAY"),
                      ("SET pseudo_thread_id = 1", "SUPER, BINLOG REPLAY"), ("SET innodb_tmpdir = '/tmp'", "FILE"),
                      ("/*!40101 SET sql_log_bin = 0 */", binlog), ("SET gtid_next = 'AUTOMATIC'", super_)):
        assert _err(limited, sql) == (1227, f"Access denied; you need (at least one of) the {need} privilege(s) "
                                            f"for this operation"), sql
    assert _rows(limited, "SELECT @@sql_log_bin, @@sql_log_off, @@autocommit FROM sharding_2_t1 WHERE id = 1") == \
        [(1, 0, 1)]
    # a password is the config's (client users) or the operator's (the backend account): never set through SET
    for sql in ("SET PASSWORD = PASSWORD('x')", "SET PASSWORD FOR root@localhost = PASSWORD('x')",
                "set password='x'"):
        code, msg = _err(limited, sql)
        assert code == 1235 and msg.startswith("SET PASSWORD is not supported by pydble"), (sql, msg)


def test_view_ddl_needs_the_grants_on_the_view(px):
    """A view is DDL on its name: a user with SELECT only may not create, replace, alter or drop one."""
    px.query("CREATE OR REPLACE VIEW v_owned AS SELECT id FROM sharding_2_t1")
    c = px.connect(user="priv", password="priv-pw")    # schema1 = 0010: SELECT only
    try:
        for sql, word, name in (("CREATE VIEW v_new AS SELECT id FROM sharding_2_t1", "CREATE VIEW", "v_new"),
                                ("CREATE OR REPLACE VIEW v_owned AS SELECT 1 AS id", "CREATE VIEW", "v_owned"),
                                ("ALTER VIEW v_owned AS SELECT 1 AS id", "CREATE VIEW", "v_owned"),
                                ("DROP VIEW v_owned", "DROP", "v_owned"),
                                ("DROP VIEW IF EXISTS schema1.v_owned", "DROP", "v_owned")):
            assert _err(c, sql) == _denied("priv", word, name), sql
        assert sorted(_rows(c, "SELECT id FROM v_owned")) == [(1,), (2,)]
    finally:
        c.close()
        px.query("DROP VIEW IF EXISTS v_owned")


def test_triggers_and_table_status_never_list_a_nodes_physical_database(px, backends, limited):
    """dn1's database db1 holds schema1's sharding_2_t1 beside schema2's sing: what lists a database
    (SHOW TRIGGERS, SHOW TABLE STATUS, in any spelling or through a hint) speaks of logical schemas."""
    backends[0].query("CREATE TRIGGER trg_hidden BEFORE INSERT ON sharding_2_t1 FOR EACH ROW SET NEW.v = 42",
                      database="db1")
    other = px.connect(user="other", password="other-pw", database="schema2")
    full = px.connect()
    try:
        assert _rows(other, "SHOW TRIGGERS") == []                     # schema2 has none
        assert _rows(other, "SHOW TRIGGERS FROM schema2 LIKE 's%'") == []
        assert _err(other, "SHOW TRIGGERS FROM schema1") == _db_denied("other", "schema1")
        assert [r[0] for r in _rows(other, "SHOW TABLE STATUS")] == ["sing"]
        for sql in ("SHOW TRIGGERS /*x*/", "SHOW TABLE STATUS /*x*/", "SHOW /*x*/ TABLE STATUS"):
            code, msg = _err(other, sql)
            assert code == 1235 and "trg_hidden" not in msg, (sql, msg)
        for sql in ("/*!pydble:shardingNode=dn1*/ SHOW TABLE STATUS", "/*!pydble:shardingNode=dn1*/ SHOW TRIGGERS"):
            assert _err(limited, sql)[0] == 1235, sql
        # schema1's own trigger is on a physical table: refused, as information_schema.TRIGGERS refuses it
        assert _err(full, "SHOW TRIGGERS")[0] == 1235
    finally:
        other.close()
        full.close()
        backends[0].query("DROP TRIGGER IF EXISTS trg_hidden", database="db1")


def test_a_table_without_any_privilege_is_not_listed(px):
    """As MySQL lists only the tables a user holds some privilege on: `blind` has none on schema2.sing,
    so no listing names it or shows its columns, indexes or row count (DESC of it is refused too)."""
    c = px.connect(user="blind", password="blind-pw", database="schema2")
    try:
        assert _err(c, "DESC sing") == _denied("blind", "SELECT", "sing")
        assert _rows(c, "SHOW TABLES") == [] and _rows(c, "SHOW FULL TABLES FROM schema2") == []
        assert _rows(c, "SHOW TABLE STATUS") == [] and _rows(c, "SHOW OPEN TABLES FROM schema2") == []
        for t in ("TABLES", "COLUMNS", "STATISTICS", "PARTITIONS", "KEY_COLUMN_USAGE", "TABLE_CONSTRAINTS"):
            assert _rows(c, f"SELECT TABLE_NAME FROM information_schema.{t} WHERE TABLE_SCHEMA = 'schema2'") == [], t
        # schema1, where it holds every bit, is listed as before
        assert "sharding_2_t1" in [r[0] for r in _rows(c, "SHOW TABLES FROM schema1")]
        assert ("sharding_2_t1", "v") in _rows(c, "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS "
                                                 "WHERE TABLE_SCHEMA = 'schema1'")
    finally:
        c.close()
    priv = px.connect(user="priv", password="priv-pw", database="schema2")    # some bits on it: listed
    try:
        assert _rows(priv, "SHOW TABLES") == [("sing",)]
    finally:
        priv.close()


def test_maintenance_statements_answer_logical_names_over_every_node(px, backends):
    """CHECK / CHECKSUM / ANALYZE TABLE answered the first node's rows under its physical `db1.t` name:
    a checksum of one part, a part missing elsewhere unreported. Every node answers, under schema1."""
    parts = [backends[i].query("CHECKSUM TABLE sharding_2_t1", database="db1")[0][1] for i in (0, 1)]
    c = px.connect(user="limited", password="lim-pw")
    try:
        assert _rows(c, "CHECKSUM TABLE sharding_2_t1") == [("schema1.sharding_2_t1", sum(parts) % 2 ** 32)]
        assert _rows(c, "CHECK TABLE sharding_2_t1") == [("schema1.sharding_2_t1", "check", "status", "OK")]
        assert _rows(c, "ANALYZE TABLE `sharding_2_t1`") == [("schema1.sharding_2_t1", "analyze", "status", "OK")]
        code, msg = _err(c, "SELECT id FROM sharding_2_t1 WHERE id = 1 PROCEDURE ANALYSE()")   # named db1.sharding_2_t1.id
        assert code == 1235 and "PROCEDURE ANALYSE" in msg
        with c.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS sharding_4_t1")   # another test of this worker may have made it
            cur.execute("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY)")
        backends[1].query("DROP TABLE sharding_4_t1", database="db2")      # dn4's part is gone
        assert _rows(c, "CHECK TABLE sharding_4_t1") == [
            ("schema1.sharding_4_t1", "check", "Error", "Table 'schema1.sharding_4_t1' doesn't exist"),
            ("schema1.sharding_4_t1", "check", "status", "Operation failed")]
        assert _rows(c, "CHECKSUM TABLE sharding_4_t1") == [("schema1.sharding_4_t1", None)]
    finally:
        c.close()
        for i, db in ((0, "db1"), (1, "db1"), (0, "db2"), (1, "db2")):
            backends[i].query("DROP TABLE IF EXISTS sharding_4_t1", database=db)
        px.manager_query("reload @@metadata")


def test_use_reads_the_database_name_as_mysql_does(limited):
    """USE's name is read from the tokens: comments around it, backquotes and doubled backquotes, as MySQL."""
    with limited.cursor() as cur:
        cur.execute("USE /* the granted one */ `schema1` -- trailing")
        cur.execute("USE schema1 /* x */;")
    assert _rows(limited, "SELECT DATABASE()") == [("schema1",)]
    assert _err(limited, "USE /*x*/ `schema2` /*y*/") == _db_denied("limited", "schema2")
    assert _err(limited, "USE `sche``ma2`") == _db_denied("limited", "sche`ma2")
    for sql in ("USE", "USE ;", "USE schema1 schema2"):
        assert _err(limited, sql)[0] == 1064, sql
    assert _rows(limited, "SELECT DATABASE()") == [("schema1",)]


def test_information_schema_queries_leave_nothing_on_shared_connections(px, limited):
    """An information_schema query runs on a pooled backend connection: a variable assigned or a user lock
    taken there would outlive the statement and reach whichever session gets the connection next."""
    for sql in ("SELECT @leak := 'topsecret' FROM information_schema.SCHEMATA",
                "SELECT GET_LOCK('leak', 0) FROM information_schema.SCHEMATA"):
        assert _err(limited, sql)[0] == 1235, sql
    other = px.connect()
    try:
        for _ in range(8):   # whichever pooled connection it lands on
            assert _rows(other, "SELECT @leak FROM sharding_2_t1 WHERE id = 1") == [(None,)]
        assert _rows(other, "SELECT IS_FREE_LOCK('leak')") == [(1,)]
    finally:
        other.close()


# gbk (as big5, cp932, sjis) has two-byte characters whose second byte is `\`: MariaDB reads BF 5C as one
# character, so the string ends at the next quote and what pydble read as the rest of the string is code
_GBK_LEAK = b"SELECT id, '\xbf\\', (SELECT v FROM sing LIMIT 1) AS x #'\nFROM sharding_2_t1 WHERE id = 2"


def _raw_rows(conn, sql: bytes):
    """Run the statement's bytes as they are (pymysql would encode a str in the connection's charset)."""
    with conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def test_a_multibyte_client_charset_cannot_hide_code_in_a_string(px):
    """Under a gbk client charset the bytes BF 5C are one character to MariaDB, a byte and an escaped quote
    to a UTF-8 reader: a subquery on schema2.sing (dn1's db1 beside sharding_2_t1) would pass unchecked."""
    at_login = px.connect(user="limited", password="lim-pw", charset="gbk")      # the handshake's charset
    later = px.connect(user="limited", password="lim-pw")
    try:
        with later.cursor() as cur:
            cur.execute("SET NAMES gbk")
        for conn in (at_login, later):
            with conn.cursor() as cur, pytest.raises(pymysql.MySQLError) as e:
                cur.execute(_GBK_LEAK)
                cur.fetchall()
            assert e.value.args[0] == 1235 and "gbk" in e.value.args[1], e.value.args
            # text whose characters are high bytes only reads the same either way: it still works
            assert _raw_rows(conn, "SELECT HEX('中文') AS h, v FROM sharding_2_t1 WHERE id = 2".encode("gbk")) == \
                [("D6D0CEC4", 20)]
        with later.cursor() as cur:
            cur.execute("SET NAMES utf8mb4")
        assert _raw_rows(later, "SELECT 'é\\'', v FROM sharding_2_t1 WHERE id = 2".encode()) == [("é'", 20)]
    finally:
        at_login.close()
        later.close()
    # a bound parameter is text pydble quotes itself: UTF-8 E4 B8 AD is 中 to pydble, E4B8 + AD5C to gbk, so
    # the backslash pydble put before the quote would be swallowed and the parameter's rest run as code
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "proxy"))
    from ps_wire import Answer, PsClient, p_str
    inj = "中', (SELECT v FROM sing LIMIT 1) AS x #".encode()
    with PsClient(px.port, user="limited", password="lim-pw") as ps:
        assert ps.query("SET NAMES gbk").kind == "ok"
        st = ps.prepare("SELECT id, ?\nFROM sharding_2_t1 WHERE id = 2")
        got = ps.execute(st.stmt_id, [p_str(inj)])
        assert isinstance(got, Answer) and got.err_code == 1235 and not got.rows, got
        assert ps.query(f"SET @p = _utf8mb4 X'{inj.hex()}'").kind == "ok"
        assert ps.query("PREPARE s2 FROM 'SELECT id, ?\\nFROM sharding_2_t1 WHERE id = 2'").kind == "ok"
        got = ps.query("EXECUTE s2 USING @p")
        assert got.err_code == 1235 and not got.rows, got


def test_unicode_spaces_neither_end_a_token_nor_open_a_comment(limited):
    """MariaDB's `--` opens a comment before an ASCII space or control character only, and a no-break or em
    space is an identifier character to it: `--\\u00a0.v` is `- - <alias>.v`, so a reader taking the rest of
    the line for a comment let the subquery on schema2.sing (dn1's db1, beside sharding_2_t1) through."""
    for space in ("\u00a0", "\u2003", "\u3000"):
        sql = (f"SELECT id, 1 --{space}.v , (SELECT v FROM sing LIMIT 1) AS x\n"
               f"FROM sharding_2_t1 {space} WHERE id = 2")
        code, msg = _err(limited, sql)
        assert code in (1142, 1146, 1235) and "secret" not in msg, (repr(space), code, msg)
    # what MariaDB reads as a comment still is one (a control character after `--` too), names still resolve
    assert _rows(limited, "SELECT v -- one\nFROM sharding_2_t1 WHERE id = 2 --\x7f, (SELECT 1)") == [(20,)]
    assert _rows(limited, "SELECT v AS `a\u00a0b` FROM sharding_2_t1 WHERE id = 2 # x") == [(20,)]


def test_a_hint_never_acts_as_the_backend_account(px, backends):
    """A user granted every logical schema is still no backend account: what a hint sends is checked too,
    and what pydble cannot check (accounts, databases, stored programs, server-wide SHOWs, statements it does
    not read) is refused, never run with the backend account's rights."""
    backends[0].query("CREATE DATABASE IF NOT EXISTS h_unmapped")
    backends[0].query("CREATE TABLE IF NOT EXISTS h_unmapped.secret (s VARCHAR(20))")
    full = px.connect()
    hint = "/*!pydble:shardingNode=dn1*/ "
    try:
        # a database no schema maps is as unknown through a hint as without one
        for sql in ("SELECT * FROM h_unmapped.secret", hint + "SELECT * FROM h_unmapped.secret"):
            assert _err(full, sql) == _denied("test", "SELECT", "secret"), sql
        for sql in ("CREATE USER h_evil@'%' IDENTIFIED BY 'x'", "DROP USER IF EXISTS h_nobody",
                    "RENAME USER h_nobody TO h_other", "CREATE ROLE h_role", "CREATE DATABASE h_made",
                    "ALTER DATABASE db1 COMMENT 'x'", "CREATE SERVER h_srv FOREIGN DATA WRAPPER mysql OPTIONS (HOST 'x')",
                    "CREATE FUNCTION h_f() RETURNS TEXT RETURN CURRENT_USER()",
                    "CREATE DEFINER = CURRENT_USER PROCEDURE h_p() SELECT CURRENT_USER()",
                    "CREATE EVENT h_ev ON SCHEDULE AT CURRENT_TIMESTAMP DO SELECT 1", "STOP SLAVE",
                    "SHOW GRANTS", "SHOW DATABASES", "SHOW PROCESSLIST", "SHOW ENGINE INNODB STATUS",
                    "SHOW CREATE USER root", "SHOW TABLES"):
            code, msg = _err(full, hint + sql)
            assert code == 1235 and "root" not in msg, (sql, code, msg)
        # what pydble reads and checks still goes where the hint says
        assert _rows(full, hint + "SELECT COUNT(*) FROM sharding_2_t1 WHERE id = 2") == [(1,)]
        assert [r[0] for r in _rows(full, hint + "DESC sharding_2_t1")] == ["id", "v"]
    finally:
        full.close()
        backends[0].query("DROP DATABASE h_unmapped")
    b = backends[0]
    assert b.query("SELECT user FROM mysql.user WHERE user LIKE 'h\\_%'") == []
    assert b.query("SELECT name FROM mysql.proc WHERE name LIKE 'h\\_%'") == []
    assert b.query("SHOW DATABASES LIKE 'h\\_made'") == [] and b.query("SELECT * FROM mysql.servers") == []


def test_on_duplicate_key_update_needs_the_update_privilege(px, backends):
    """INSERT ... ON DUPLICATE KEY UPDATE rewrites an existing row: as in MySQL it needs UPDATE on the table
    besides INSERT. `priv` holds INSERT and SELECT on schema2.sing (1010): it overwrote row 1 through it."""
    c = px.connect(user="priv", password="priv-pw", database="schema2")
    try:
        for sql in ("INSERT INTO sing VALUES (1, 'x') ON DUPLICATE KEY UPDATE v = 'overwritten'",
                    "INSERT INTO sing SET id = 1, v = 'y' ON DUPLICATE KEY UPDATE v = 'overwritten'",
                    "INSERT INTO sing SELECT 1, 'z' ON DUPLICATE KEY UPDATE v = 'overwritten'",
                    "INSERT INTO sing VALUES (1, 'x') ON DUPLICATE KEY UPDATE v = 'overwritten' RETURNING id"):
            assert _err(c, sql) == _denied("priv", "UPDATE", "sing"), sql
        with c.cursor() as cur:     # a plain INSERT (and INSERT IGNORE, which changes no row) still works
            cur.execute("INSERT IGNORE INTO sing VALUES (1, 'x'), (8, 'new')")
    finally:
        c.close()
    assert backends[0].query("SELECT id, v FROM sing WHERE id IN (1, 8) ORDER BY id", database="db1") == \
        [(1, "secret"), (8, "new")]
    px.query("DELETE FROM sing WHERE id = 8", database="schema2")


def test_a_default_node_never_reaches_another_schemas_table_in_its_database(px, backends, fresh_proxy):
    """schema2's default node dn1 is db1, where schema1's sharding_2_t1 has a part: the name is schema1's
    table there, not an unconfigured table of schema2. `other` (schema2 only) read and updated its rows."""
    cfg = _config(backends)
    cfg["schemas"]["schema2"]["default_node"] = "dn1"
    p = fresh_proxy(config=cfg)
    c = p.connect(user="other", password="other-pw", database="schema2")
    try:
        for sql in ("SELECT * FROM sharding_2_t1", "SELECT v FROM sharding_2_t1 WHERE id = 2",
                    "UPDATE sharding_2_t1 SET v = v + 1000", "SELECT * FROM sing JOIN sharding_2_t1 USING (id)",
                    "DESC sharding_2_t1", "CREATE TABLE IF NOT EXISTS sharding_2_t1 (id INT)"):
            code, msg = _err(c, sql)
            assert code == 1146 and "schema2.sharding_2_t1" in msg, (sql, code, msg)
        assert "sharding_2_t1" not in [r[0] for r in _rows(c, "SHOW TABLES")]
        assert _rows(c, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_NAME = 'sharding_2_t1'") == []
        with c.cursor() as cur:     # schema2's own unconfigured tables still live on its default node
            cur.execute("CREATE TABLE h_own (id INT)")
            cur.execute("INSERT INTO h_own VALUES (1)")
        assert _rows(c, "SELECT id FROM h_own") == [(1,)]
    finally:
        try:
            with c.cursor() as cur:
                cur.execute("DROP TABLE IF EXISTS h_own")
        finally:
            c.close()
    assert backends[0].query("SELECT v FROM sharding_2_t1 WHERE id = 2", database="db1") == [(20,)]


def test_current_user_never_names_the_backend_account(limited):
    """CURRENT_USER is also written without parentheses, and information_schema queries run on a backend:
    both answered the backend account ('root@127.0.0.1'), never the client's user."""
    me = "limited@127.0.0.1"
    for sql in ("SELECT CURRENT_USER FROM sharding_2_t1 WHERE id = 2",      # the point-read fast path
                "SELECT current_user, v FROM sharding_2_t1 WHERE id = 2 ORDER BY v",
                "SELECT CURRENT_USER, COUNT(*) FROM information_schema.SCHEMATA",
                "SELECT USER(), COUNT(*) FROM information_schema.SCHEMATA",
                "SELECT CURRENT_USER(), COUNT(*) FROM information_schema.SCHEMATA"):
        assert _rows(limited, sql)[0][0] == me, sql
    assert _rows(limited, "SELECT COUNT(*) FROM sharding_2_t1 WHERE id = 2 AND CURRENT_USER LIKE 'root%'") == [(0,)]
    with limited.cursor() as cur:
        cur.execute("SELECT CURRENT_USER FROM sharding_2_t1 WHERE id = 2")
        assert [d[0] for d in cur.description] == ["CURRENT_USER"]


def test_version_comments_hide_no_code(limited):
    """MariaDB lexes the code of a version comment it runs like any code (a `*/` in its string does not end
    it), and lets one it skips hold a plain comment: a reader ending both at the first `*/` took the code
    after them for a string, and let a subquery on schema2.sing through (for SHOW ... WHERE, run on a node
    of backend1, even db1.sing by name, its value in the error message)."""
    leaks = ("SELECT id /*!99999 /* */ ' */ , (SELECT v FROM sing LIMIT 1) AS x #'\nFROM sharding_2_t1 WHERE id = 2",
             "SELECT id /*!50000 ' */ ' */ , (SELECT v FROM sing LIMIT 1) AS x #'\nFROM sharding_2_t1 WHERE id = 2",
             "SHOW TABLES WHERE Tables_in_schema1 <> /*!50000 ' */ ' OR "
             "EXTRACTVALUE(1, CONCAT(0x7e, (SELECT v FROM db1.sing LIMIT 1))) = 'secret' */ #'",
             "SHOW TABLES WHERE Tables_in_schema1 <> '' /*!99999 /* */ ' */ OR "
             "EXTRACTVALUE(1, CONCAT(0x7e, (SELECT v FROM db1.sing LIMIT 1))) = 1 #'")
    for sql in leaks:
        code, msg = _err(limited, sql)
        assert code in (1064, 1142, 1235) and "secret" not in msg, (sql, code, msg)
    # what the server runs of a version comment still runs, and what it skips is still skipped
    assert _rows(limited, "SELECT v /*!50000 , '*/' AS s */ FROM sharding_2_t1 WHERE id = 2") == [(20, "*/")]
    assert _rows(limited, "SELECT v /*!99999 /* x */ , 1 */ FROM sharding_2_t1 WHERE id = 2") == [(20,)]


def test_show_where_is_checked_as_any_statement(px, limited):
    """SHOW TABLES/DATABASES/TABLE STATUS/OPEN TABLES ... WHERE runs the WHERE on a node over the logical rows:
    it read the backend host's files, ran sys functions, answered the backend account and database, and left
    a user variable on the shared connection. The WHERE is checked as any statement is."""
    for sql, code in (("SHOW TABLES WHERE EXTRACTVALUE(1, CONCAT(0x7e, LOAD_FILE('/etc/hostname'))) = 1", 1235),
                      ("SHOW DATABASES WHERE EXTRACTVALUE(1, CONCAT(0x7e, LOAD_FILE('/etc/hostname'))) = 1", 1235),
                      ("SHOW TABLE STATUS WHERE EXTRACTVALUE(1, CONCAT(0x7e, sys.format_bytes(1000))) = 1", 1044),
                      ("SHOW OPEN TABLES WHERE schema2.f() = 1", 1044),
                      ("SHOW FULL TABLES WHERE (@leak := 'x') IS NOT NULL", 1235),
                      ("SHOW TABLES WHERE NEXTVAL(db1.s) = 1", 1235)):
        assert _err(limited, sql)[0] == code, sql
    # the session's own answers, as in any statement: the client's user and the logical schema
    for fn, want in (("CURRENT_USER()", "limited@127.0.0.1"), ("CURRENT_USER", "limited@127.0.0.1"),
                     ("DATABASE()", "schema1")):
        assert _err(limited, f"SHOW TABLES WHERE EXTRACTVALUE(1, CONCAT(0x7e, {fn})) = 1") == \
            (1105, f"XPATH syntax error: '~{want}'"), fn
    assert _rows(limited, "SHOW TABLES WHERE Tables_in_schema1 = DATABASE()") == []
    assert _rows(limited, "SHOW FULL TABLES WHERE Table_type = 'BASE TABLE' AND Tables_in_schema1 LIKE 'shard%'") == \
        [("sharding_2_t1", "BASE TABLE")]
    other = px.connect()
    try:
        for _ in range(8):   # whichever pooled connection the WHERE ran on
            assert _rows(other, "SELECT @leak FROM sharding_2_t1 WHERE id = 1") == [(None,)]
    finally:
        other.close()


def test_mssql_brackets_hide_no_code(px):
    """Under sql_mode MSSQL MariaDB reads [x'] as a quoted identifier: a reader taking [ for an operator and
    ' for a string let the subquery on schema2.sing (dn1's db1, beside sharding_2_t1) through."""
    c = px.connect(user="limited", password="lim-pw")
    try:
        with c.cursor() as cur:
            cur.execute("SET SESSION sql_mode = 'MSSQL'")
        code, msg = _err(c, "SELECT id AS [x'], (SELECT v FROM sing LIMIT 1) AS y, 1 AS ['] "
                            "FROM sharding_2_t1 WHERE id = 2")
        assert code == 1235 and "MSSQL" in msg, (code, msg)
        assert _rows(c, "SELECT v AS `[x]`, '[' FROM sharding_2_t1 WHERE id = 2") == [(20, "[")]   # no [ as code
    finally:
        c.close()
