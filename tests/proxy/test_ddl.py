"""DDL through the client port on every kind of table, checked on every backend node, and DBLE's answers.

Every statement goes through a real pydble process; what it did is read straight from the MariaDB
backends, and what the proxy believes is read from its manager port (`check full @@metadata`).
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Iterator

import pymysql
import pytest

from ddl_env import ALL4, NODES, MetaProxyEnv, env_fixture
from harness import missing

T_DEF = "(id INT NOT NULL, v VARCHAR(10), PRIMARY KEY (id))"

KINDS = [
    pytest.param("schema1", "shard_a", ALL4, id="sharding"),
    pytest.param("schema1", "glob_a", ALL4, id="global"),
    pytest.param("schema2", "sing_a", ("dn2",), id="single"),
    pytest.param("schema1", "dflt_a", ("dn5",), id="default-node"),
]


@pytest.fixture(scope="module")
def env(backends: Any) -> Iterator[MetaProxyEnv]:
    yield from env_fixture(backends, tag="ddl")


def _on_nodes(env: MetaProxyEnv, table: str, nodes: tuple[str, ...]) -> dict[str, str | None]:
    """The table's CREATE text on every node; nodes outside `nodes` must not have it."""
    for n in NODES:
        if n not in nodes:
            assert env.show_create(n, table) is None, f"{table} leaked onto {n}"
    return {n: env.show_create(n, table) for n in nodes}


def _same_everywhere(env: MetaProxyEnv, table: str, nodes: tuple[str, ...]) -> str:
    texts = _on_nodes(env, table, nodes)
    assert all(t is not None for t in texts.values()), texts
    assert len({t.split(" AUTO_INCREMENT=")[0] for t in texts.values()}) == 1, texts
    return next(iter(texts.values()))


@pytest.mark.parametrize("schema, table, nodes", KINDS)
def test_ddl_lifecycle_runs_on_every_node_and_refreshes_before_answering(
        env: MetaProxyEnv, schema: str, table: str, nodes: tuple[str, ...]) -> None:
    env.drop_everywhere(table)
    env.reload(f"schema='{schema}' and table='{table}'")
    c = env.client(schema)
    try:
        cur = c.cursor()
        # CREATE TABLE
        cur.execute(f"CREATE TABLE {table} {T_DEF}")
        text = _same_everywhere(env, table, nodes)
        row = env.row(schema, table)            # right after the OK: memory already has it
        assert row["table_structure"] == text
        assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (1, 1)
        assert table in [r[0] for r in env.tables_through_proxy(schema)]
        # CREATE again: DBLE's message, from memory; IF NOT EXISTS is fine
        with pytest.raises(pymysql.MySQLError) as ei:
            cur.execute(f"CREATE TABLE {table} {T_DEF}")
        assert ei.value.args[0] == 1050
        assert f"Table '{schema}.{table}' or table meta already exists" in ei.value.args[1]
        cur.execute(f"CREATE TABLE IF NOT EXISTS {table} {T_DEF}")
        cur.execute(f"INSERT INTO {table} (id, v) VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e')")
        # ALTER TABLE: columns, indexes, defaults in one statement
        cur.execute(f"ALTER TABLE {table} ADD COLUMN w INT NOT NULL DEFAULT 7, MODIFY v VARCHAR(20), "
                    f"ADD INDEX k_w (w)")
        cur.execute(f"ALTER TABLE {table} ALTER COLUMN v SET DEFAULT 'zz'")
        text = _same_everywhere(env, table, nodes)
        assert "`w` int(11) NOT NULL DEFAULT 7" in text and "`v` varchar(20) DEFAULT 'zz'" in text
        assert "KEY `k_w` (`w`)" in text
        row = env.row(schema, table)
        assert row["table_structure"] == text and row["consistent_in_memory"] == 1
        cur.execute(f"INSERT INTO {table} (id) VALUES (6)")
        cur.execute(f"SELECT v, w FROM {table} WHERE id = 6")
        assert cur.fetchall() == (("zz", 7),)
        cur.execute(f"ALTER TABLE {table} DROP INDEX k_w, DROP COLUMN w, ALTER COLUMN v DROP DEFAULT")
        text = _same_everywhere(env, table, nodes)
        assert "`w`" not in text and "k_w" not in text
        assert env.row(schema, table)["table_structure"] == text
        # CREATE INDEX / DROP INDEX
        cur.execute(f"CREATE INDEX ix_v ON {table} (v)")
        for n in nodes:
            assert "ix_v" in env.indexes_on(n, table)
        assert "KEY `ix_v` (`v`)" in env.row(schema, table)["table_structure"]
        cur.execute(f"CREATE UNIQUE INDEX ux_v ON {table} (v, id)")
        cur.execute(f"DROP INDEX ix_v ON {table}")
        for n in nodes:
            assert env.indexes_on(n, table) == {"PRIMARY", "ux_v"}
        structure = env.row(schema, table)["table_structure"]
        assert "ix_v" not in structure and "UNIQUE KEY `ux_v`" in structure
        # TRUNCATE
        cur.execute(f"SELECT COUNT(*) FROM {table}")
        assert cur.fetchone()[0] == 6
        cur.execute(f"TRUNCATE TABLE {table}")
        for n in nodes:
            assert env.rows_on(n, f"SELECT COUNT(*) FROM `{table}`")[0][0] == 0
        assert env.row(schema, table)["consistent_in_sharding_nodes"] == 1
        # DROP TABLE [IF EXISTS]
        cur.execute(f"DROP TABLE {table}")
        assert all(t is None for t in _on_nodes(env, table, nodes).values())
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        with pytest.raises(pymysql.MySQLError) as ei:
            cur.execute(f"SELECT * FROM {table}")
        if table.startswith("dflt"):           # unconfigured: gone from memory, the backend says so
            assert ei.value.args[0] == 1146
            assert table not in [r[0] for r in env.tables_through_proxy(schema)]
            assert (schema, table) not in env.check_full(f"schema='{schema}'")
        else:                                    # configured, on none of its nodes: as MySQL says it
            assert ei.value.args == (1146, f"Table '{schema}.{table}' doesn't exist")
            assert env.row(schema, table)["table_structure"] == "null"
    finally:
        c.close()


def test_drop_table_if_exists_and_create_if_not_exists_on_partial_tables(env: MetaProxyEnv) -> None:
    """IF [NOT] EXISTS completes a table missing on some nodes; the refresh sees every node."""
    env.drop_everywhere("shard_b")
    env.run("dn3", f"CREATE TABLE shard_b {T_DEF}")
    env.reload("schema='schema1' and table='shard_b'")
    assert env.row("schema1", "shard_b")["consistent_in_sharding_nodes"] == 0
    env.sql(f"CREATE TABLE IF NOT EXISTS shard_b {T_DEF}")
    _same_everywhere(env, "shard_b", ALL4)
    row = env.row("schema1", "shard_b")
    assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (1, 1)
    env.run("dn1", "DROP TABLE shard_b")
    env.sql("DROP TABLE IF EXISTS shard_b")
    assert all(env.show_create(n, "shard_b") is None for n in ALL4)


def test_create_of_table_existing_physically_without_meta_is_1050(env: MetaProxyEnv) -> None:
    """Created behind the proxy's back (no metadata yet): DBLE's 1050, and memory catches up."""
    env.drop_everywhere("shard_c")
    env.reload("schema='schema1' and table='shard_c'")
    env.run_on(ALL4, f"CREATE TABLE shard_c {T_DEF}")
    code, msg = env.error_of("SELECT * FROM shard_c")
    assert code == 1146                          # memory (the last load) found it on no node
    code, msg = env.error_of(f"CREATE TABLE shard_c {T_DEF}")
    assert code == 1050 and "Table 'schema1.shard_c' or table meta already exists" in msg
    assert env.row("schema1", "shard_c")["consistent_in_sharding_nodes"] == 1
    assert env.sql("SELECT COUNT(*) FROM shard_c") == [(0,)]
    # on some nodes only: the others get it, the answer is still 1050 naming where it existed
    env.drop_everywhere("shard_c")
    env.reload("schema='schema1' and table='shard_c'")
    env.run("dn4", f"CREATE TABLE shard_c {T_DEF}")
    code, msg = env.error_of(f"CREATE TABLE shard_c {T_DEF}")
    assert code == 1050 and "Table 'schema1.shard_c' or table meta already exists" in msg
    assert "dn4" in msg
    _same_everywhere(env, "shard_c", ALL4)
    assert env.row("schema1", "shard_c")["consistent_in_sharding_nodes"] == 1


def test_configured_table_never_created_is_1146_as_in_mysql(env: MetaProxyEnv) -> None:
    """Spark's JDBC writer (4.1+) creates a table only on 1146 from its existence probe."""
    for sql in ("SELECT * FROM never_created", "SELECT * FROM never_created WHERE 1=0",
                "INSERT INTO never_created VALUES (1)", "UPDATE never_created SET a = 1",
                "DELETE FROM never_created"):
        assert env.error_of(sql) == (1146, "Table 'schema1.never_created' doesn't exist"), sql
    for sql in ("ALTER TABLE never_created ADD COLUMN c INT", "TRUNCATE TABLE never_created"):   # word for word
        assert env.error_of(sql) == (1146, "Table 'schema1.never_created' doesn't exist"), sql
    assert env.error_of("DROP TABLE never_created") == (1051, "Unknown table 'schema1.never_created'")
    row = env.row("schema1", "never_created")
    assert [row[k] for k in ("reload_time", "table_structure", "consistent_in_sharding_nodes",
                             "consistent_in_memory")] == ["null", "null", 0, 0]


def test_configured_table_dropped_behind_the_proxy_is_3009_on_some_nodes_1146_on_all(env: MetaProxyEnv) -> None:
    env.drop_everywhere("glob_b")
    env.sql(f"CREATE TABLE glob_b {T_DEF}")
    env.sql("INSERT INTO glob_b VALUES (1, 'x')")
    env.run("dn2", "DROP TABLE glob_b")
    env.reload()
    for sql in ("SELECT * FROM glob_b", "INSERT INTO glob_b VALUES (2, 'y')"):   # dn1 still has it
        assert env.error_of(sql) == (3009, "Table meta 'schema1.glob_b' is lost,PLEASE reload @@metadata"), sql
    env.run("dn1", "DROP TABLE glob_b")
    env.reload()
    assert env.error_of("SELECT * FROM glob_b") == (1146, "Table 'schema1.glob_b' doesn't exist")
    assert "glob_b" not in [r[0] for r in env.tables_through_proxy()]   # configured, but on no node now
    env.sql(f"CREATE TABLE glob_b {T_DEF}")                          # and CREATE brings it back
    assert env.sql("SELECT COUNT(*) FROM glob_b") == [(0,)]


def test_insert_without_a_column_list_on_a_sharding_table_memory_cannot_route_is_1146_or_3009(
        env: MetaProxyEnv) -> None:
    """The sharding key's position comes from metadata; with none, the table's own error, not a 1235."""
    env.reset("shard_b")
    for sql in ("INSERT INTO shard_b VALUES (1, 'a')", "REPLACE INTO shard_b VALUES (1, 'a')",
                "INSERT INTO shard_b VALUES (1, 'a'), (2, 'b')"):
        assert env.error_of(sql) == (1146, "Table 'schema1.shard_b' doesn't exist"), sql
    env.run("dn1", f"CREATE TABLE shard_b {T_DEF}")
    env.reload("schema='schema1' and table='shard_b'")
    assert env.error_of("INSERT INTO shard_b VALUES (1, 'a')") == (
        3009, "Table meta 'schema1.shard_b' is lost,PLEASE reload @@metadata")
    env.reset("shard_b")


def test_ddl_on_a_table_missing_on_some_nodes_is_refused_before_it_runs_anywhere(env: MetaProxyEnv) -> None:
    """An ALTER would change the nodes holding the table and fail on the others, every time: refused,
    naming the nodes; CREATE TABLE IF NOT EXISTS completes the table, then the ALTER runs."""
    env.reset("shard_b")
    env.sql(f"CREATE TABLE shard_b {T_DEF}")
    env.run("dn4", "DROP TABLE shard_b")
    env.reload("schema='schema1' and table='shard_b'")
    for sql in ("ALTER TABLE shard_b ADD COLUMN c INT", "CREATE INDEX iv ON shard_b (v)"):
        code, msg = env.error_of(sql)
        assert code == 1105 and "schema1.shard_b is missing on dn4" in msg, msg
    assert all("`c`" not in env.show_create(n, "shard_b") and "iv" not in env.show_create(n, "shard_b")
               for n in ("dn1", "dn2", "dn3"))
    env.sql(f"CREATE TABLE IF NOT EXISTS shard_b {T_DEF}")
    env.sql("ALTER TABLE shard_b ADD COLUMN c INT")
    assert all("`c` int(11)" in env.show_create(n, "shard_b") for n in ALL4)
    env.reset("shard_b")


def test_unconfigured_table_in_schema_without_default_node_is_1146(env: MetaProxyEnv) -> None:
    for sql, db in ((f"CREATE TABLE nope {T_DEF}", "schema2"), (f"CREATE TABLE schema2.nope {T_DEF}", "schema1"),
                    ("DROP TABLE nope", "schema2"), ("ALTER TABLE nope ADD COLUMN x INT", "schema2"),
                    ("SELECT * FROM nope", "schema2")):
        code, msg = env.error_of(sql, db)
        assert code == 1146 and "Table 'schema2.nope' doesn't exist in the config of sharding" in msg, sql
    assert all(env.show_create(n, "nope") is None for n in NODES)


def test_drop_table_if_exists_of_a_table_that_can_be_nowhere_is_ok_with_a_note(env: MetaProxyEnv) -> None:
    """Idempotent scripts: MySQL (and DBLE) answer OK, with MySQL's Note 1051."""
    conn = env.client("schema2")
    try:
        with conn.cursor() as cur:
            for sql in ("DROP TABLE IF EXISTS nope", "DROP TABLE IF EXISTS schema2.nope, nope2"):
                cur.execute(sql)
                cur.execute("SHOW WARNINGS")
                assert cur.fetchall()[0] == ("Note", 1051, "Unknown table 'schema2.nope'"), sql
    finally:
        conn.close()
    code, msg = env.error_of("DROP TABLE IF EXISTS sing_a, nope", "schema2")   # one of them is real: refused
    assert code == 1146 and "nope" in msg


def test_ddl_failing_on_some_nodes_names_the_node_and_logical_table_and_memory_shows_the_truth(
        env: MetaProxyEnv) -> None:
    env.drop_everywhere("shard_d")
    env.sql(f"CREATE TABLE shard_d {T_DEF}")
    env.run("dn3", "ALTER TABLE shard_d ADD COLUMN c VARCHAR(5)")   # dn3 will refuse the next ALTER
    code, msg = env.error_of("ALTER TABLE shard_d ADD COLUMN c INT")
    assert code == 1060 and "Duplicate column name 'c'" in msg
    assert "shardingNode[dn3]" in msg and "table schema1.shard_d" in msg      # logical: a client never sees
    assert env.database_of("dn3") not in msg                                  # the physical database
    # no rollback: the nodes that succeeded keep the column; dn3 keeps its own
    for n in ("dn1", "dn2", "dn4"):
        assert "`c` int(11) DEFAULT NULL" in env.show_create(n, "shard_d")
    assert "`c` varchar(5) DEFAULT NULL" in env.show_create("dn3", "shard_d")
    row = env.row("schema1", "shard_d")
    assert row["consistent_in_sharding_nodes"] == 0
    assert "`c` int(11)" in row["table_structure"]                 # refreshed: the majority's text
    assert ("schema1", "shard_d") in env.check_full("consistent_in_sharding_nodes=0")
    # repaired by hand on dn3, a reload makes it consistent again
    env.run("dn3", "ALTER TABLE shard_d MODIFY c INT")
    env.reload("table in ('schema1.shard_d')")
    row = env.row("schema1", "shard_d")
    assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (1, 1)
    # a failure on every node: the backend's error, nothing changed anywhere
    code, msg = env.error_of("ALTER TABLE shard_d DROP COLUMN not_there")
    assert code == 1091 and "shardingNode[dn" in msg and "succeeded" not in msg
    env.sql("DROP TABLE shard_d")


def test_show_tables_answers_from_memory(env: MetaProxyEnv) -> None:
    env.drop_everywhere("behind_back")
    for db, t in (("schema1", "test"), ("schema1", "shard_a"), ("schema2", "sing"), ("schema2", "sing_a")):
        env.sql(f"CREATE TABLE IF NOT EXISTS {t} {T_DEF}", db)
    env.reload("schema='schema1'")
    env.run("dn5", f"CREATE TABLE behind_back {T_DEF}")
    names = [r[0] for r in env.tables_through_proxy()]
    assert "behind_back" not in names                      # the proxy did not ask the backend
    assert {"test", "shard_a"} <= set(names)
    assert "never_created" not in names                    # configured, on no node: not listed
    env.reload("schema='schema1' and table='behind_back'")
    full = env.tables_through_proxy(full=True)
    assert ("behind_back", "BASE TABLE") in full
    env.run("dn5", "DROP TABLE behind_back")
    assert "behind_back" in [r[0] for r in env.tables_through_proxy()]   # still in memory
    env.reload("schema=schema1")
    assert "behind_back" not in [r[0] for r in env.tables_through_proxy()]
    assert [r[0] for r in env.tables_through_proxy("schema2")] == ["sing", "sing_a"]


def test_hinted_ddl_and_multi_table_drop_refresh_metadata(env: MetaProxyEnv) -> None:
    env.drop_everywhere("dflt_h1")
    env.drop_everywhere("dflt_h2")
    env.sql(f"/*!pydble:shardingNode=dn5*/ CREATE TABLE dflt_h1 {T_DEF}")
    env.sql(f"CREATE TABLE dflt_h2 {T_DEF}")
    assert env.row("schema1", "dflt_h1")["consistent_in_sharding_nodes"] == 1
    env.sql("DROP TABLE dflt_h1, dflt_h2")
    assert env.show_create("dn5", "dflt_h1") is None and env.show_create("dn5", "dflt_h2") is None
    names = [r[0] for r in env.tables_through_proxy()]
    assert "dflt_h1" not in names and "dflt_h2" not in names


def test_renaming_a_default_node_table_moves_its_metadata(env: MetaProxyEnv) -> None:
    for t in ("dflt_r1", "dflt_r2", "dflt_r3"):
        env.drop_everywhere(t)
    env.reload("schema='schema1'")
    env.sql(f"CREATE TABLE dflt_r1 {T_DEF}")
    env.sql("ALTER TABLE dflt_r1 RENAME TO dflt_r2")
    names = [r[0] for r in env.tables_through_proxy()]
    assert "dflt_r2" in names and "dflt_r1" not in names
    assert "CREATE TABLE `dflt_r2`" in env.row("schema1", "dflt_r2")["table_structure"]
    env.sql("ALTER TABLE dflt_r2 ADD COLUMN x INT")
    env.sql("ALTER TABLE dflt_r2 RENAME COLUMN x TO y")                      # not a table rename
    assert "`y` int(11)" in env.row("schema1", "dflt_r2")["table_structure"]
    env.sql("RENAME TABLE dflt_r2 TO dflt_r3")
    names = [r[0] for r in env.tables_through_proxy()]
    assert "dflt_r3" in names and "dflt_r2" not in names
    assert env.sql("SELECT COUNT(*) FROM dflt_r3") == [(0,)]
    env.sql("DROP TABLE dflt_r3")


def _refresh_loaded(env: MetaProxyEnv, schema: str, table: str, ddl: Callable[[], object]) -> bool:
    """Whether a DDL on the table (`ddl` runs it) refreshed by loading metadata (rather than from the
    SHOW CREATE texts its nodes answered right after it): its request logged a "metadata loaded".
    The DDL's own "ddl executed" line comes a moment after its answer (meta/later.py)."""
    def lines() -> list[str]:
        return [ln for ln in env.proxy.log_text().splitlines()
                if "ddl executed" in ln and f"tables=['{schema}.{table}']" in ln]
    before = len(lines())
    ddl()
    deadline = time.monotonic() + 10
    while len(lines()) <= before:
        assert time.monotonic() < deadline, f"no 'ddl executed' line for {schema}.{table} in the log"
        time.sleep(0.01)
    rid = re.search(r"\brequest_id=(\S+)", lines()[before])
    assert rid is not None, lines()[before]
    return any("metadata loaded" in ln and f"request_id={rid.group(1)} " in ln
               for ln in env.proxy.log_text().splitlines())


def _fails_with(env: MetaProxyEnv, sql: str, code: int) -> None:
    assert env.error_of(sql)[0] == code


def _columns(env: MetaProxyEnv, table: str, schema: str = "schema1") -> list[str]:
    """The column list a SELECT * returns through the proxy."""
    c = env.client(schema)
    try:
        with c.cursor() as cur:
            cur.execute(f"SELECT * FROM {table}")
            return [d[0] for d in cur.description]
    finally:
        c.close()


@pytest.mark.parametrize("schema, table, nodes", [KINDS[0], KINDS[3]])
def test_ddl_refresh_from_the_nodes_answers_without_a_load(
        env: MetaProxyEnv, schema: str, table: str, nodes: tuple[str, ...]) -> None:
    """CREATE / ADD COLUMN / DROP: memory is built from SHOW CREATE read on the DDL's connections."""
    env.reset(table, schema)
    assert not _refresh_loaded(env, schema, table, lambda: env.sql(f"CREATE TABLE {table} {T_DEF}", schema))
    row = env.row(schema, table)
    assert row["table_structure"] == _same_everywhere(env, table, nodes)
    assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (1, 1)
    assert not _refresh_loaded(env, schema, table,
                               lambda: env.sql(f"ALTER TABLE {table} ADD COLUMN added INT DEFAULT 3", schema))
    assert _columns(env, table, schema) == ["id", "v", "added"]
    row = env.row(schema, table)
    assert row["table_structure"] == _same_everywhere(env, table, nodes)
    assert "`added` int(11) DEFAULT 3" in row["table_structure"] and row["consistent_in_memory"] == 1
    assert not _refresh_loaded(env, schema, table, lambda: env.sql(f"DROP TABLE {table}", schema))
    if table.startswith("dflt"):
        assert table not in [r[0] for r in env.tables_through_proxy(schema)]
        assert env.error_of(f"SELECT * FROM {table}", schema)[0] == 1146
    else:
        assert env.row(schema, table)["table_structure"] == "null"
        assert env.error_of(f"SELECT * FROM {table}", schema)[0] == 1146


def test_ddl_refresh_falls_back_to_a_load_for_a_name_in_another_case(env: MetaProxyEnv) -> None:
    """On a case-sensitive backend `DfltUpper` is not `dfltupper`: SHOW CREATE of the key says 1146
    after a CREATE, which is not trusted, so the refresh loads (listing names case-insensitively)."""
    if env.server_of("dn5").query("SELECT @@lower_case_table_names")[0][0] != 0:
        missing("backends that keep table names' case (lower_case_table_names=0): these fold them")
    env.drop_everywhere("DfltUpper")
    env.reset("dfltupper")
    assert _refresh_loaded(env, "schema1", "dfltupper", lambda: env.sql(f"CREATE TABLE DfltUpper {T_DEF}"))
    assert env.show_create("dn5", "DfltUpper") is not None and env.show_create("dn5", "dfltupper") is None
    assert "dfltupper" in [r[0] for r in env.tables_through_proxy()]
    row = env.row("schema1", "dfltupper")
    assert row["table_structure"] == env.show_create("dn5", "DfltUpper") and row["consistent_in_memory"] == 1
    assert _refresh_loaded(env, "schema1", "dfltupper", lambda: env.sql("ALTER TABLE DfltUpper ADD COLUMN z INT"))
    assert "`z` int(11)" in env.row("schema1", "dfltupper")["table_structure"]
    assert _columns(env, "DfltUpper") == ["id", "v", "z"]
    # the lower-case name is not there: nothing dropped (a note, or 1051), memory keeps the table
    assert _refresh_loaded(env, "schema1", "dfltupper", lambda: env.sql("DROP TABLE IF EXISTS dfltupper"))
    assert _refresh_loaded(env, "schema1", "dfltupper", lambda: _fails_with(env, "DROP TABLE dfltupper", 1051))
    assert env.show_create("dn5", "DfltUpper") is not None
    assert "dfltupper" in [r[0] for r in env.tables_through_proxy()]
    assert "`z` int(11)" in env.row("schema1", "dfltupper")["table_structure"]
    # gone: 1146 after a clean DROP is trusted
    assert not _refresh_loaded(env, "schema1", "dfltupper", lambda: env.sql("DROP TABLE DfltUpper"))
    assert env.show_create("dn5", "DfltUpper") is None
    assert "dfltupper" not in [r[0] for r in env.tables_through_proxy()]


def test_a_ddl_ending_in_a_comment_or_a_semicolon_still_reads_the_structure_after_it(env: MetaProxyEnv) -> None:
    """The refresh's SHOW CREATE TABLE rides in the DDL's own command (`DDL` newline `;SHOW ...`): a
    trailing -- or # comment in the user's DDL does not swallow it, and a trailing `;` never turns
    the DDL's OK into an error (at worst the refresh loads)."""
    schema, table, nodes = "schema1", "shard_a", ALL4
    env.reset(table, schema)
    assert not _refresh_loaded(env, schema, table,
                               lambda: env.sql(f"CREATE TABLE {table} {T_DEF} -- made here", schema))
    assert not _refresh_loaded(env, schema, table,
                               lambda: env.sql(f"ALTER TABLE {table} ADD COLUMN c1 INT # a note", schema))
    env.sql(f"ALTER TABLE {table} ADD COLUMN c2 INT;", schema)
    assert _columns(env, table, schema) == ["id", "v", "c1", "c2"]
    row = env.row(schema, table)
    assert row["table_structure"] == _same_everywhere(env, table, nodes)
    assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (1, 1)
    assert not _refresh_loaded(env, schema, table, lambda: env.sql(f"DROP TABLE {table} -- gone", schema))
    assert env.row(schema, table)["table_structure"] == "null"
