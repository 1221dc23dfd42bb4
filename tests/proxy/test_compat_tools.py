"""The tools users bring, run for real against pydble over real MariaDB: mysqldump and the mysql CLI
(dumps made through pydble and straight from a MariaDB, loaded back through pydble), LOCK TABLES as
dumps use it, SQLAlchemy 2.x ORM with PyMySQL and mysqlclient, SHOW TABLES / SHOW TABLE STATUS."""

from __future__ import annotations

import datetime
import subprocess
import threading
import time
from typing import Any, Iterator

import pymysql
import pytest
import sqlalchemy as sa
from sqlalchemy import DateTime, Integer, MetaData, String, func, select, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from harness import require_module, require_tool
from wire import drop_after

TABLES = ("sharding_4_t1", "test", "tools_plain")
# hash-four over dn1..dn4; dn1/dn3 live on backends[0] (db1/db2), dn2/dn4 on backends[1]; dn5 = backends[0].db3
NODE_DB = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2"), "dn5": (0, "db3")}
SHARD_NODES = ("dn1", "dn2", "dn3", "dn4")
COM_RESET_CONNECTION = 0x1F


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy: Any) -> Iterator[None]:
    yield from drop_after(proxy, *TABLES)


def _cli(tool: str, port: int, *args: str, user: str = "test", password: str = "111111",
         stdin: str | None = None) -> subprocess.CompletedProcess:
    argv = [require_tool(tool), "--no-defaults", "-h127.0.0.1", f"-P{port}", f"-u{user}", f"-p{password}", *args]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)


def _node_ids(backends: list[Any], backend_rows: Any, table: str = "sharding_4_t1") -> dict[str, list[int]]:
    out = {}
    for node in SHARD_NODES:
        i, db = NODE_DB[node]
        out[node] = [r[0] for r in backend_rows(backends[i], db, f"SELECT id FROM {table} ORDER BY id")]
    return out


def _make_tables(execute: Any) -> None:
    """The same three tables, with what dumps must carry: comments, server defaults, many rows."""
    for sql in [
        "DROP TABLE IF EXISTS sharding_4_t1", "DROP TABLE IF EXISTS test", "DROP TABLE IF EXISTS tools_plain",
        "CREATE TABLE sharding_4_t1 (id INT NOT NULL PRIMARY KEY, name VARCHAR(20) DEFAULT 'x' COMMENT 'its name', "
        "created TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) COMMENT='sharded on id'",
        "CREATE TABLE test (id INT PRIMARY KEY, v VARCHAR(10)) COMMENT 'a global table'",
        "CREATE TABLE tools_plain (id INT PRIMARY KEY, note TEXT)",
        "INSERT INTO sharding_4_t1 (id, name) VALUES " + ", ".join(f"({i}, 'n{i}')" for i in range(1, 13)),
        "INSERT INTO test VALUES (1, 'g1'), (2, 'g2')",
        "INSERT INTO tools_plain VALUES (1, 'it''s /* not */ a comment; really'), (2, NULL)",
    ]:
        execute(sql)


def _assert_loaded(proxy: Any, backends: list[Any], backend_rows: Any) -> None:
    """Every row back, each sharded row on the node its id hashes to, the global table on all four."""
    assert _node_ids(backends, backend_rows) == {"dn1": [4, 8, 12], "dn2": [1, 5, 9], "dn3": [2, 6, 10],
                                                 "dn4": [3, 7, 11]}
    for node in SHARD_NODES:
        i, db = NODE_DB[node]
        assert backend_rows(backends[i], db, "SELECT id, v FROM test ORDER BY id") == [(1, "g1"), (2, "g2")]
    assert backend_rows(backends[0], "db3", "SELECT id, note FROM tools_plain ORDER BY id") == [
        (1, "it's /* not */ a comment; really"), (2, None)]
    rows = proxy.query("SELECT id, name FROM sharding_4_t1 ORDER BY id")
    assert rows == [(i, f"n{i}") for i in range(1, 13)]
    assert "sharded on id" in proxy.query("SHOW CREATE TABLE sharding_4_t1")[0][1]


@pytest.mark.parametrize("options", [[], ["--single-transaction"], ["--single-transaction", "--routines", "--events"]],
                         ids=["lock-tables", "single-transaction", "routines-events"])
def test_mysqldump_through_pydble_then_load_it_back_with_the_mysql_cli(proxy: Any, backends: list[Any],
                                                                       backend_rows: Any, options: list[str]) -> None:
    _make_tables(proxy.query)
    # the default options (--opt: LOCK TABLES ... READ LOCAL while dumping), or one consistent-snapshot
    # transaction (SET SESSION TRANSACTION ISOLATION LEVEL, START TRANSACTION WITH CONSISTENT SNAPSHOT,
    # SAVEPOINT / ROLLBACK TO SAVEPOINT around each table); --routines asks SHOW {FUNCTION|PROCEDURE|PACKAGE}
    # STATUS, --events SHOW EVENTS (none in a logical schema: nothing is dumped for them)
    dump = _cli("mysqldump", proxy.port, *options, "schema1", *TABLES)
    assert dump.returncode == 0 and not dump.stderr, dump.stderr
    text = dump.stdout
    assert "LOCK TABLES `sharding_4_t1` WRITE;" in text and "/*!40101 SET NAMES utf8mb4 */;" in text
    assert "INSERT INTO `sharding_4_t1` VALUES" in text and "COMMENT='sharded on id'" in text
    assert "db1" not in text and "db2" not in text   # logical names only
    load = _cli("mysql", proxy.port, "schema1", stdin=text)
    assert load.returncode == 0, load.stderr
    _assert_loaded(proxy, backends, backend_rows)


def test_mysqldump_skip_opt_through_pydble(proxy: Any, backends: list[Any], backend_rows: Any) -> None:
    """--skip-opt (and --skip-create-options, --compatible) first sends
    SET SQL_QUOTE_SHOW_CREATE=1/*!40102 ,SQL_MODE=concat(@@sql_mode, ...) */: a SET continued in a version comment."""
    _make_tables(proxy.query)
    dump = _cli("mysqldump", proxy.port, "--skip-opt", "--add-drop-table", "schema1", *TABLES)
    assert dump.returncode == 0 and not dump.stderr, dump.stderr
    assert "INSERT INTO `sharding_4_t1` VALUES (1,'n1'," in dump.stdout   # a statement per row
    proxy.query("DELETE FROM sharding_4_t1")
    load = _cli("mysql", proxy.port, "schema1", stdin=dump.stdout)
    assert load.returncode == 0, load.stderr
    assert _node_ids(backends, backend_rows) == {"dn1": [4, 8, 12], "dn2": [1, 5, 9], "dn3": [2, 6, 10],
                                                 "dn4": [3, 7, 11]}


def test_a_dump_made_straight_from_mariadb_loads_through_pydble(proxy: Any, backends: list[Any],
                                                                backend_rows: Any, fresh_mariadb: Any) -> None:
    plain = fresh_mariadb("tools_plain_mariadb", databases=["schema1"])
    _make_tables(lambda sql: plain.query(sql, "schema1"))
    dump = _cli("mysqldump", plain.port, "--databases", "schema1", user="root", password="")
    assert dump.returncode == 0, dump.stderr
    assert "CREATE DATABASE /*!32312 IF NOT EXISTS*/ `schema1`" in dump.stdout and "USE `schema1`;" in dump.stdout
    for t in TABLES:
        proxy.query(f"DROP TABLE IF EXISTS {t}")
    load = _cli("mysql", proxy.port, stdin=dump.stdout)   # no default schema: the dump says USE
    assert load.returncode == 0, load.stderr
    _assert_loaded(proxy, backends, backend_rows)


def _connect(proxy: Any, **kw: Any) -> Any:
    return pymysql.connect(host=proxy.host, port=proxy.port, user="test", password="111111", database="schema1",
                           autocommit=True, read_timeout=30, **kw)


def _blocked(proxy: Any, sql: str) -> bool:
    """True when another session's statement would wait on a table lock."""
    c = _connect(proxy)
    try:
        with c.cursor() as cur:
            cur.execute("SET SESSION lock_wait_timeout = 0")   # MariaDB: fail at once instead of waiting
            try:
                cur.execute(sql)
            except pymysql.err.OperationalError as e:
                assert e.args[0] == 1205, e
                return True
        return False
    finally:
        c.close()


def test_lock_tables_hold_on_every_node_until_released(proxy: Any) -> None:
    proxy.query("CREATE TABLE IF NOT EXISTS sharding_4_t1 (id INT NOT NULL PRIMARY KEY, name VARCHAR(20))")
    proxy.query("CREATE TABLE IF NOT EXISTS test (id INT PRIMARY KEY, v VARCHAR(10))")
    c = _connect(proxy)
    try:
        cur = c.cursor()
        cur.execute("LOCK TABLES sharding_4_t1 WRITE")
        for i in (1, 2, 3, 4):   # each node's part of the table is locked
            assert _blocked(proxy, f"SELECT * FROM sharding_4_t1 WHERE id = {i}")
        cur.execute("SET NAMES latin1")     # session state changes reach the locked connections...
        cur.execute("SELECT @@character_set_client, COUNT(*) > -1 FROM sharding_4_t1 WHERE id = 1")
        assert cur.fetchall() == (("latin1", 1),)
        cur.execute("SET NAMES utf8mb4")    # ...and never by a reset, which would drop the locks
        assert _blocked(proxy, "SELECT * FROM sharding_4_t1 WHERE id = 2")
        cur.execute("INSERT INTO sharding_4_t1 (id, name) VALUES (101, 'a'), (102, 'b') "
                    "ON DUPLICATE KEY UPDATE name = VALUES(name)")
        cur.execute("SELECT COUNT(*) FROM sharding_4_t1 WHERE id IN (101, 102)")
        assert cur.fetchone() == (2,)
        with pytest.raises(pymysql.err.OperationalError) as e:
            cur.execute("SELECT * FROM test")
        assert e.value.args == (1100, "Table 'test' was not locked with LOCK TABLES")
        cur.execute("USE schema2")          # as MySQL: USE keeps the locks
        assert _blocked(proxy, "SELECT * FROM sharding_4_t1 WHERE id = 1")
        cur.execute("UNLOCK TABLES")
        assert not _blocked(proxy, "SELECT * FROM sharding_4_t1 WHERE id = 1")
        cur.execute("USE schema1")

        cur.execute("LOCK TABLES schema1.sharding_4_t1 READ")
        assert _blocked(proxy, "DELETE FROM sharding_4_t1 WHERE id = 101")
        with pytest.raises(pymysql.err.OperationalError) as e:   # the backend's own answer, logical name
            cur.execute("DELETE FROM sharding_4_t1 WHERE id = 101")
        assert e.value.args == (1099, "Table 'sharding_4_t1' was locked with a READ lock and can't be updated")
        with pytest.raises(pymysql.err.NotSupportedError, match="while LOCK TABLES is held"):
            cur.execute("/*!pydble:shardingNode=dn1*/ DROP TABLE sharding_4_t1")
        cur.execute("BEGIN")                # as MySQL: a transaction starts by releasing the locks
        assert not _blocked(proxy, "DELETE FROM sharding_4_t1 WHERE id = 101")
        cur.execute("COMMIT")

        cur.execute("LOCK TABLES schema1.sharding_4_t1 WRITE")
        with pytest.raises(pymysql.err.NotSupportedError, match="while LOCK TABLES is held"):
            cur.execute("SET autocommit = 0")   # refused: locks and transactions are kept apart
        with pytest.raises(pymysql.err.NotSupportedError, match="while LOCK TABLES is held"):
            cur.execute("ALTER TABLE sharding_4_t1 ADD COLUMN extra INT")
        c.close()                           # a session that ends releases its locks
        c = None
        assert not _blocked(proxy, "DELETE FROM sharding_4_t1 WHERE id = 102")
    finally:
        if c is not None:
            c.close()


def test_a_second_lock_tables_waits_for_the_first_and_then_gets_every_node(proxy: Any) -> None:
    proxy.query("CREATE TABLE IF NOT EXISTS sharding_4_t1 (id INT NOT NULL PRIMARY KEY, name VARCHAR(20))")
    a, b = _connect(proxy), _connect(proxy)
    got: list[float] = []
    try:
        a.cursor().execute("LOCK TABLES sharding_4_t1 WRITE")
        waiter = threading.Thread(target=lambda: (b.cursor().execute("LOCK TABLES sharding_4_t1 WRITE"),
                                                  got.append(time.monotonic())))
        waiter.start()
        time.sleep(1.0)
        assert not got                         # b waits while a holds the locks
        released = time.monotonic()
        a.cursor().execute("UNLOCK TABLES")
        waiter.join(20)
        assert got and got[0] >= released      # then b has them, on every node
        for i in (1, 2, 3, 4):
            assert _blocked(proxy, f"SELECT * FROM sharding_4_t1 WHERE id = {i}")
        b.cursor().execute("UNLOCK TABLES")
    finally:
        a.close()
        b.close()


def test_lock_tables_is_released_by_com_reset_connection(proxy: Any) -> None:
    proxy.query("CREATE TABLE IF NOT EXISTS sharding_4_t1 (id INT NOT NULL PRIMARY KEY, name VARCHAR(20))")
    c = _connect(proxy)
    try:
        c.cursor().execute("LOCK TABLES sharding_4_t1 WRITE")
        assert _blocked(proxy, "SELECT * FROM sharding_4_t1 WHERE id = 3")
        c._execute_command(COM_RESET_CONNECTION, b"")  # what connection pools send
        c._read_ok_packet()
        assert not _blocked(proxy, "SELECT * FROM sharding_4_t1 WHERE id = 3")
    finally:
        c.close()


def test_show_tables_and_table_status_list_what_exists(proxy: Any, backends: list[Any], backend_rows: Any) -> None:
    proxy.query("DROP TABLE IF EXISTS sharding_2_t1")       # configured, never created
    proxy.query("DROP TABLE IF EXISTS sharding_4_t1")
    proxy.query("CREATE TABLE sharding_4_t1 (id INT NOT NULL PRIMARY KEY, name VARCHAR(20)) AUTO_INCREMENT=7")
    proxy.query("INSERT INTO sharding_4_t1 VALUES " + ", ".join(f"({i}, 'x')" for i in range(1, 9)))
    names = [r[0] for r in proxy.query("SHOW TABLES")]
    assert "sharding_2_t1" not in names and "sharding_4_t1" in names
    assert [r[0] for r in proxy.query("SHOW FULL TABLES LIKE 'sharding%'")] == ["sharding_4_t1"]
    with pytest.raises(pymysql.err.MySQLError) as e:
        proxy.query("SELECT * FROM sharding_2_t1")             # what SHOW TABLES says, the table answers
    assert e.value.args[0] in (1146, 3009)
    c = _connect(proxy)
    try:
        cur = c.cursor(pymysql.cursors.DictCursor)
        cur.execute("SHOW TABLE STATUS FROM schema1 LIKE 'sharding\\_%'")
        rows = cur.fetchall()
    finally:
        c.close()
    assert [r["Name"] for r in rows] == ["sharding_4_t1"]        # one row, the logical name
    per_node = []
    for node in SHARD_NODES:
        i, db = NODE_DB[node]
        per_node.append(backend_rows(backends[i], db, "SHOW TABLE STATUS LIKE 'sharding_4_t1'")[0])
    assert rows[0]["Rows"] == sum(r[4] for r in per_node)      # summed over the nodes
    assert rows[0]["Data_length"] == sum(r[6] for r in per_node)
    assert rows[0]["Engine"] == "InnoDB"


class Base(DeclarativeBase):
    pass


class Item(Base):
    """A model whose server defaults SQLAlchemy fetches with INSERT ... RETURNING on MariaDB >= 10.5."""

    __tablename__ = "sharding_4_t1"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(20), server_default="fresh")
    created: Mapped[datetime.datetime] = mapped_column(DateTime, server_default=func.now())


@pytest.mark.parametrize("driver", ["pymysql", "mysqldb"])
def test_sqlalchemy_orm_with_server_defaults_returning_and_reflection(proxy: Any, backends: list[Any],
                                                                     backend_rows: Any, driver: str) -> None:
    if driver == "mysqldb":
        require_module("MySQLdb", "mysqlclient is not installed (needs libmariadb-dev)")
    engine = sa.create_engine(f"mysql+{driver}://test:111111@{proxy.host}:{proxy.port}/schema1")
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE IF EXISTS sharding_4_t1"))
        Base.metadata.create_all(engine)
        with Session(engine) as s:
            s.add_all([Item(id=i) for i in range(1, 9)])    # one INSERT ... RETURNING over four nodes
            s.add(Item(id=20, name="given"))
            s.commit()
            items = s.scalars(select(Item).order_by(Item.id)).all()
            assert [(i.id, i.name) for i in items][:3] == [(1, "fresh"), (2, "fresh"), (3, "fresh")]
            assert all(isinstance(i.created, datetime.datetime) for i in items)
            s.get(Item, 3).name = "three"
            s.delete(s.get(Item, 4))
            s.commit()
            assert s.get(Item, 3).name == "three" and s.get(Item, 4) is None
        assert _node_ids(backends, backend_rows) == {"dn1": [8, 20], "dn2": [1, 5], "dn3": [2, 6], "dn4": [3, 7]}
        md = MetaData()
        md.reflect(engine)                                    # every listed table can be reflected
        assert "sharding_4_t1" in md.tables and "sharding_2_t1" not in md.tables
        assert [c.name for c in md.tables["sharding_4_t1"].columns] == ["id", "name", "created"]
    finally:
        engine.dispose()


def test_insert_returning_on_a_global_table_answers_the_copies_rows(proxy: Any, backends: list[Any],
                                                                   backend_rows: Any) -> None:
    proxy.query("DROP TABLE IF EXISTS test")
    proxy.query("CREATE TABLE test (id INT PRIMARY KEY, v VARCHAR(10) DEFAULT 'g')")
    rows = proxy.query("INSERT INTO test (id) VALUES (7), (3) RETURNING id, v")
    assert rows == [(7, "g"), (3, "g")]
    for node in SHARD_NODES:
        i, db = NODE_DB[node]
        assert backend_rows(backends[i], db, "SELECT id, v FROM test ORDER BY id") == [(3, "g"), (7, "g")]


def test_server_side_prepare_while_lock_tables_is_held(proxy: Any) -> None:
    """Connector/J and sysbench prepare on the server: the prepare uses the session's locked connection,
    never a pooled one that would wait on the session's own WRITE lock."""
    from ps_wire import PsClient, p_long

    proxy.query("CREATE TABLE IF NOT EXISTS sharding_4_t1 (id INT NOT NULL PRIMARY KEY, name VARCHAR(20))")
    proxy.query("REPLACE INTO sharding_4_t1 (id, name) VALUES (5, 'five')")
    with PsClient(proxy.port, timeout=10) as c:
        assert c.query("LOCK TABLES sharding_4_t1 WRITE").kind == "ok"
        started = time.monotonic()
        st = c.prepare("SELECT name FROM sharding_4_t1 WHERE id = ?")
        assert time.monotonic() - started < 5 and not hasattr(st, "kind"), st
        ans = c.execute(st.stmt_id, [p_long(5)])
        assert ans.kind == "rows" and len(ans.rows) == 1, ans
        assert c.query("UNLOCK TABLES").kind == "ok"
