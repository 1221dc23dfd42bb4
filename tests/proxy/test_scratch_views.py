"""pydble's scratch views (meta/scratch.py): DESC, SHOW COLUMNS, COM_FIELD_LIST and information_schema.COLUMNS
of a view pydble keeps make a view of its statement for a moment on one shardingNode. One left behind (its
connection lost between CREATE and DROP: a killed connection, a restarted backend, a proxy killed with SIGKILL)
is never seen through pydble, breaks nothing, and is dropped by the next use of that node once no instance can
still be using it; one another instance is using now is never touched."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any, Callable, Iterator

import pymysql
import pytest
from harness import ProxyProcess, require_tool
from wire import RawClient

from meta import scratch

DATABASES = ("db1", "db2", "db3")


def _err(cur: Any, sql: str) -> tuple[int, str]:
    with pytest.raises(pymysql.MySQLError) as e:
        cur.execute(sql)
    return e.value.args[0], e.value.args[1]


def _rows(cur: Any, sql: str) -> list[tuple[Any, ...]]:
    cur.execute(sql)
    return list(cur.fetchall())


def _scratch_on(backend_rows: Callable[..., Any], server: Any, db: str) -> set[str]:
    """The scratch names in a node's database, read on the backend itself."""
    return {n for (n,) in backend_rows(server, db, "SELECT TABLE_NAME FROM information_schema.TABLES "
                                                   "WHERE TABLE_SCHEMA = DATABASE()") if scratch.is_scratch(n)}


@pytest.fixture
def clean(backends: list[Any], backend_rows: Callable[..., Any]) -> Iterator[Callable[[], None]]:
    """No scratch name on the shared backends before and after the test (another test's or a crash's)."""
    def sweep() -> None:
        for b in backends:
            for db in DATABASES:
                for (n, kind) in backend_rows(b, db, "SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES "
                                                     "WHERE TABLE_SCHEMA = DATABASE()"):
                    if scratch.is_scratch(n):
                        backend_rows(b, db, f"DROP {'VIEW' if kind == 'VIEW' else 'TABLE'} `{n}`")
    sweep()
    yield sweep
    sweep()


def _kept_view(p: ProxyProcess) -> None:
    for sql in ("DROP VIEW IF EXISTS v4", "DROP TABLE IF EXISTS sharding_4_t1",
                "CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))",
                "INSERT INTO sharding_4_t1 VALUES (1,'a'),(2,'b'),(3,'c'),(4,'d')",
                "CREATE VIEW v4 AS SELECT id, name FROM sharding_4_t1 WHERE id > 1"):   # kept: four nodes
        p.query(sql)


def _field_list(p: ProxyProcess, table: bytes) -> tuple[list[bytes], Any]:
    """COM_FIELD_LIST in schema1: the column definitions, and the packet that ended them."""
    with RawClient(p.port) as c:
        assert c.login(database="schema1").kind == "ok"
        defs, end = c.field_list(table)
        return [d.payload for d in defs], end


def test_a_left_behind_scratch_view_is_never_seen_and_is_swept(fresh_proxy, backends, backend_rows, clean):
    """Leftovers on schema1's default node dn5 (db3, whose other tables schema1 lists) and on dn1 (db1, where
    v4's scratch views are made): before, information_schema.TABLES and COLUMNS listed them, VIEWS refused the
    whole schema with 1235, a statement could read them, a table of that name was loaded as metadata."""
    p = fresh_proxy()
    _kept_view(p)
    b1 = backends[0]
    now = time.time()
    stale, fresh = scratch.name(now - scratch.STALE_S - 60), scratch.name(now)   # fresh: another instance's, now
    old_style = scratch.PREFIX + "0123456789abcdef"   # pydble before names had a time: its age is unknown
    broken = scratch.name(now - scratch.STALE_S - 120)   # it read a table dropped since: an invalid view
    for db in ("db1", "db3"):
        for n in (stale, fresh, old_style):
            backend_rows(b1, db, f"CREATE VIEW `{n}` AS SELECT 1 AS x")
        backend_rows(b1, db, "CREATE TABLE scratch_gone (id INT)")
        backend_rows(b1, db, f"CREATE VIEW `{broken}` AS SELECT id FROM scratch_gone")
        backend_rows(b1, db, "DROP TABLE scratch_gone")
    table = scratch.name(now - scratch.STALE_S - 60)   # a table of such a name (made through a hint, say)
    backend_rows(b1, "db3", f"CREATE TABLE `{table}` (id INT)")
    p.manager_query("reload @@metadata")
    leftovers = {stale, fresh, old_style, broken}

    c = p.connect()
    cur = c.cursor()

    def listed(sql: str, column: int = 0) -> set[str]:
        """The names a listing shows: never a scratch name (other tests' tables on db3 may be there too)."""
        names = {str(r[column]) for r in _rows(cur, sql)}
        assert not any(scratch.is_scratch(n) for n in names), (sql, names)
        return names

    # information_schema: no row of theirs; VIEWS answered (it was 1235 for schema1)
    assert {"sharding_4_t1", "v4"} <= listed("SELECT TABLE_NAME FROM information_schema.TABLES "
                                             "WHERE TABLE_SCHEMA = 'schema1'")
    assert _rows(cur, "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.VIEWS") == [("schema1", "v4")]
    assert _scratch_on(backend_rows, b1, "db1") == leftovers   # nothing has described v4 on dn1 yet
    # v4's columns come from a scratch view on dn1: this first use of dn1 sweeps it of the stale ones (the
    # broken one too), keeping the one another instance may be using and the one whose age is unknown
    assert "v4" in listed("SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS "
                          "WHERE TABLE_SCHEMA = 'schema1'")
    assert _scratch_on(backend_rows, b1, "db1") == {fresh, old_style}
    assert _rows(cur, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_NAME = 'v4' "
                      "ORDER BY ORDINAL_POSITION") == [("id",), ("name",)]
    listed("SELECT TABLE_NAME FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = 'schema1'")
    listed("SELECT TABLE_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = 'schema1'")
    # SHOW: nothing of theirs either
    assert {"sharding_4_t1", "v4"} <= listed("SHOW TABLES")
    assert ("v4", "VIEW") in _rows(cur, "SHOW FULL TABLES") and "v4" in listed("SHOW FULL TABLES")
    assert {"sharding_4_t1", "v4"} <= listed("SHOW TABLE STATUS")
    listed("SHOW OPEN TABLES FROM schema1", 1)
    # naming one is refused as MariaDB refuses a name it cannot hold, however it is named
    for sql in (f"SELECT * FROM `{stale}`", f"SELECT * FROM schema1.`{table}`", f"DESC `{fresh}`",
                f"SHOW CREATE TABLE `{old_style}`", f"CREATE TABLE `{scratch.name()}` (id INT)",
                f"CREATE VIEW `{scratch.name()}` AS SELECT 1", f"CREATE VIEW `{scratch.PREFIX}mine` AS SELECT 1",
                f"DROP TABLE `{table}`", f"DROP TABLE IF EXISTS `{table}`", f"INSERT INTO `{table}` VALUES (1)",
                f"SHOW CREATE VIEW `{stale}`", f"DROP VIEW `{stale}`", f"ALTER VIEW `{stale}` AS SELECT 2",
                f"SHOW COLUMNS FROM `{stale}`"):
        assert _err(cur, sql)[0] == 1103, sql
    defs, end = _field_list(p, stale.encode())
    assert defs == [] and end.kind == "err" and end.err_code == 1103
    # never metadata: reload and check full see neither the views nor the table
    p.manager_query("reload @@metadata")
    checked = {str(r[1]) for r in p.manager_query("check full @@metadata")}
    assert "sharding_4_t1" in checked and not any(scratch.is_scratch(n) for n in checked), checked
    # a dump of the schema has no trace of them, and loads
    login = ["--no-defaults", "-h127.0.0.1", f"-P{p.port}", "-utest", "-p111111"]
    dump = subprocess.run([require_tool("mysqldump"), *login, "schema1"],
                          capture_output=True, text=True, timeout=60)
    assert dump.returncode == 0 and not dump.stderr, dump.stderr
    assert scratch.PREFIX not in dump.stdout and "CREATE VIEW `v4`" in dump.stdout

    # the kept view is described as before, and each description takes its scratch view away
    assert [r[:3] for r in _rows(cur, "DESC v4")] == [("id", "int(11)", "NO"), ("name", "varchar(20)", "YES")]
    assert [r[0] for r in _rows(cur, "SHOW FULL COLUMNS FROM v4 LIKE 'na%'")] == ["name"]
    defs, end = _field_list(p, b"v4")
    assert len(defs) == 2 and end.kind == "eof"
    assert _rows(cur, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_NAME = 'v4' "
                      "ORDER BY ORDINAL_POSITION") == [("id",), ("name",)]
    assert _scratch_on(backend_rows, b1, "db1") == {fresh, old_style}   # those uses left nothing
    assert _scratch_on(backend_rows, b1, "db3") == leftovers | {table}   # no scratch view is made on dn5
    # what is left of an old-style name is the operator's to drop on the backend (a hinted DROP VIEW is not
    # pydble's to send: views through pydble are its own)
    with pytest.raises(pymysql.MySQLError) as e:
        cur.execute(f"/*!pydble:shardingNode=dn1*/ DROP VIEW `{old_style}`")
    assert e.value.args[0] in (1103, 1235)
    backend_rows(b1, "db1", f"DROP VIEW `{old_style}`")
    assert _scratch_on(backend_rows, b1, "db1") == {fresh}
    c.close()


def test_a_failing_description_leaves_no_scratch_view(fresh_proxy, backends, backend_rows, clean):
    """A statement error after the scratch view is made (a WHERE naming no column) drops it all the same: it was
    left behind on every such error, the connection closed before its DROP."""
    p = fresh_proxy()
    _kept_view(p)
    c = p.connect()
    cur = c.cursor()
    for sql in ("SHOW COLUMNS FROM v4 WHERE nope = 1", "SHOW FULL FIELDS FROM v4 WHERE nope = 1",
                "SHOW INDEX FROM v4 WHERE nope = 1"):
        assert _err(cur, sql) == (1054, "Unknown column 'nope' in 'WHERE'"), sql
    assert [r[0] for r in _rows(cur, "SHOW COLUMNS FROM v4 WHERE Field = 'id'")] == ["id"]   # the session goes on
    c.close()
    for b in backends:
        for db in DATABASES:
            assert _scratch_on(backend_rows, b, db) == set(), (b.name, db)


def test_a_scratch_view_another_instance_is_using_is_left_alone(fresh_proxy, backends, backend_rows, clean):
    """Two instances on the same backends: A's information_schema.COLUMNS has made the scratch view of v_free on
    dn1 and waits (a lock held on v_locked's table) to make v_locked's; B's DESC sweeps dn1 meanwhile. B drops the
    stale leftover and not A's view, and A's answer is whole."""
    a = fresh_proxy()
    for sql in ("DROP TABLE IF EXISTS sharding_4_t1", "DROP TABLE IF EXISTS sharding_2_t1",
                "CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))",
                "CREATE TABLE sharding_2_t1 (id INT PRIMARY KEY, v INT)"):
        a.query(sql)
    b = fresh_proxy()
    for p in (a, b):   # each instance keeps its own views (single-instance mode): the same two
        p.query("CREATE VIEW v_free AS SELECT id, name FROM sharding_4_t1")
        p.query("CREATE VIEW v_locked AS SELECT id, v FROM sharding_2_t1")
    b1 = backends[0]
    stale = ""
    locker = pymysql.connect(host=b1.host, port=b1.port, user="root", password="", database="db1", autocommit=True)
    answer: dict[str, Any] = {}
    try:
        with locker.cursor() as lc:
            lc.execute("LOCK TABLES sharding_2_t1 WRITE")

        def columns_through_a() -> None:
            try:
                answer["rows"] = a.query("SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS "
                                         "WHERE TABLE_NAME LIKE 'v\\_%' ORDER BY TABLE_NAME, ORDINAL_POSITION")
            except Exception as e:  # noqa: BLE001 - reported by the assertion below
                answer["error"] = e

        t = threading.Thread(target=columns_through_a)
        t.start()
        deadline = time.monotonic() + 30
        in_use: set[str] = set()
        while not in_use and time.monotonic() < deadline:   # A's first scratch view is there; A waits for the lock
            in_use = _scratch_on(backend_rows, b1, "db1") - {stale}
            time.sleep(0.05)
        assert len(in_use) == 1, in_use
        made = int(next(iter(in_use))[len(scratch.PREFIX):].split("_")[0])   # named with the time it was made
        assert time.time() - 60 < made <= time.time()
        stale = scratch.name(time.time() - scratch.STALE_S - 60)   # (A swept dn1 before: this one is B's to drop)
        backend_rows(b1, "db1", f"CREATE VIEW `{stale}` AS SELECT 1 AS x")

        c = b.connect()
        cur = c.cursor()
        assert [r[0] for r in _rows(cur, "DESC v_free")] == ["id", "name"]   # B's first use of dn1: its sweep
        assert _rows(cur, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'schema1' "
                          "AND TABLE_TYPE = 'VIEW'") == [("v_free",), ("v_locked",)]   # A's in-flight view: unseen
        c.close()
        assert _scratch_on(backend_rows, b1, "db1") == in_use   # the stale one dropped, A's kept
        assert t.is_alive()
    finally:
        with locker.cursor() as lc:
            lc.execute("UNLOCK TABLES")
        locker.close()
    t.join(60)
    assert "error" not in answer, answer.get("error")
    assert answer["rows"] == [("v_free", "id"), ("v_free", "name"), ("v_locked", "id"), ("v_locked", "v")]
    assert _scratch_on(backend_rows, b1, "db1") == set()
    for p in (a, b):
        p.query("DROP VIEW v_free, v_locked")
