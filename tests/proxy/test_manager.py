"""The manager port of DESIGN.md §4 through a real proxy: who may log in, every command, every filter,
the exact columns and texts, and usage errors for malformed commands."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from typing import Any, Iterator

import pymysql
import pytest

from ddl_env import ALL4, CHECK_FULL_COLUMNS, MetaProxyEnv, env_fixture
from harness.proxy import REPO_ROOT

T_DEF = "(id INT NOT NULL, v VARCHAR(10), PRIMARY KEY (id))"
TIMESTAMP = re.compile(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d")   # yyyy/MM/dd HH:mm:ss, as DBLE shows it


@pytest.fixture(scope="module")
def env(backends: Any) -> Iterator[MetaProxyEnv]:
    yield from env_fixture(backends, tag="mgr")


def _mq(proxy: Any, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    conn = proxy.manager()
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return ([d[0] for d in cur.description] if cur.description else []), list(cur.fetchall())
    finally:
        conn.close()


# -- login and help (the session proxy: nothing here changes its state) ------------------------------

def test_only_manager_users_log_in_to_the_manager_port(proxy: Any) -> None:
    with pytest.raises(pymysql.MySQLError) as ei:
        proxy.manager(user="test", password="111111")          # a client user
    assert ei.value.args[0] == 1045 and "Access denied for user 'test'" in ei.value.args[1]
    with pytest.raises(pymysql.MySQLError) as ei:
        proxy.manager(user="root", password="wrong")
    assert ei.value.args[0] == 1045
    with pytest.raises(pymysql.MySQLError) as ei:
        proxy.connect(user="root", password="111111")          # and managers stay off the client port
    assert ei.value.args[0] == 1045
    conn = proxy.manager()
    try:
        conn.ping()
        with conn.cursor() as cur:                             # a client's SQL is not a manager command
            with pytest.raises(pymysql.MySQLError) as ei:
                cur.execute("SELECT * FROM schema1.test")
            assert ei.value.args[0] == 1064
    finally:
        conn.close()


def test_show_help_lists_every_command_with_one_line(proxy: Any) -> None:
    cols, rows = _mq(proxy, "show @@help")
    assert cols == ["STATEMENT", "DESCRIPTION"]
    statements = [r[0] for r in rows]
    for cmd in ("reload @@metadata", "check @@metadata", "check full @@metadata", "show @@ddl",
                "kill @@ddl_lock", "show @@cluster", "show @@help"):
        assert any(s == cmd or s.startswith(cmd + " ") for s in statements), cmd
    assert all(d and "\n" not in d for _, d in rows)
    assert _mq(proxy, "SHOW @@HELP;") == (cols, rows)      # case and a trailing ';' do not matter


@pytest.mark.parametrize("sql", [
    "reload @@metadata where", "reload @@metadata where schema", "reload @@metadata where table='t'",
    "reload @@metadata where table in ('noschema')", "reload @@metadata where schema='s' or table='t'",
    "check @@metadata where schema='schema1'", "check full @@metadata where reload_time > 'yesterday'",
    "check full @@metadata where consistent_in_memory=2", "check full @@metadata where foo=1",
    "kill @@ddl_lock", "kill @@ddl_lock where schema='schema1'", "kill @@ddl_lock where table='t'",
    "show @@ddl where schema='schema1'", "show @@nothing", "reload @@metadatas", "hello",
])
def test_malformed_commands_get_a_usage_error(proxy: Any, sql: str) -> None:
    with pytest.raises(pymysql.MySQLError) as ei:
        _mq(proxy, sql)
    code, msg = ei.value.args[0], ei.value.args[1]
    assert code == 1064
    assert "usage:" in msg or "show @@help" in msg or "expected 'yyyy/MM/dd HH:mm:ss'" in msg, msg


def test_check_metadata_timestamp(proxy: Any) -> None:
    cols, rows = _mq(proxy, "check @@metadata")
    assert cols == ["TIMESTAMP"] and len(rows) == 1 and TIMESTAMP.fullmatch(rows[0][0])
    before = dt.datetime.now().replace(microsecond=0) - dt.timedelta(seconds=1)
    assert _mq(proxy, "reload @@metadata") == ([], [])
    _, rows = _mq(proxy, "check @@metadata")
    loaded = dt.datetime.strptime(rows[0][0], "%Y/%m/%d %H:%M:%S")
    assert before <= loaded <= dt.datetime.now() + dt.timedelta(seconds=1)


def test_show_cluster_standalone(proxy: Any) -> None:
    cols, rows = _mq(proxy, "show @@cluster")
    assert len(cols) == 4 and len(rows) == 1 and rows[0][0] == proxy.instance


# -- metadata commands on a proxy of our own ---------------------------------------------------------

@pytest.fixture(scope="module")
def tables(env: MetaProxyEnv) -> MetaProxyEnv:
    """shard_a consistent; glob_a missing on dn3; sing_a (schema2) fine; dflt_m on the default node;
    never_created never created; then everything loaded."""
    for t in ("shard_a", "glob_a", "dflt_m"):
        env.drop_everywhere(t)
    env.run_on(ALL4, f"CREATE TABLE shard_a {T_DEF}", f"CREATE TABLE glob_a {T_DEF}")
    env.run("dn3", "DROP TABLE glob_a")
    env.run("dn2", f"CREATE TABLE IF NOT EXISTS sing_a {T_DEF}")
    env.run("dn5", f"CREATE TABLE dflt_m {T_DEF}")
    env.reload()
    return env


def test_repair_without_a_half_applied_ddl_changes_nothing(tables: MetaProxyEnv) -> None:
    env = tables
    cols, rows = env.mq("repair @@ddl where schema='schema1' and table='shard_a'")
    assert cols == ["schema", "table", "action", "message"]
    assert rows[0][2] == "nothing" and rows[0][3].startswith("nothing to repair"), rows
    code, msg = env.manager_error("repair @@ddl where schema='schema1' and table='glob_a'")   # differs, no DDL
    assert code == 1105 and "dn3(missing)" in msg and "no DDL on it is in the DDL history" in msg, msg
    assert env.manager_error("repair @@ddl where schema='nope' and table='t'")[0] == 1049


def test_check_full_columns_and_rows(tables: MetaProxyEnv) -> None:
    env = tables
    conn = env.manager()
    try:
        with conn.cursor() as cur:
            cur.execute("check full @@metadata")   # DESIGN.md §4's six columns, as DBLE's
            assert [d[0] for d in cur.description] == CHECK_FULL_COLUMNS
            six = {(r[0], r[1]): r for r in cur.fetchall()}
            cur.execute("check full @@metadata_nodes")   # the same, then which nodes differ
            assert [d[0] for d in cur.description] == [*CHECK_FULL_COLUMNS, "differing_sharding_nodes"]
            rows = {(r[0], r[1]): r for r in cur.fetchall()}
    finally:
        conn.close()
    assert {k: r[:6] for k, r in rows.items()} == six
    configured = {("schema1", t) for t in ("test", "sharding_2_t1", "sharding_4_t1", "shard_a", "shard_b",
                                           "shard_c", "shard_d", "glob_a", "glob_b", "never_created")}
    configured |= {("schema2", "sing"), ("schema2", "sing_a")}
    assert configured | {("schema1", "dflt_m")} <= set(rows)
    s, t, reload_time, structure, in_nodes, in_memory, differing = rows[("schema1", "shard_a")]
    assert TIMESTAMP.fullmatch(reload_time) and structure == env.show_create("dn1", "shard_a")
    assert (in_nodes, in_memory, differing) == (1, 1, "")
    assert rows[("schema1", "glob_a")][4:] == (0, 0, "dn3(missing)")   # missing on dn3: never consistent
    assert rows[("schema1", "dflt_m")][4:] == (1, 1, "")
    assert rows[("schema1", "never_created")][2:] == ("null", "null", 0, 0, "")


def _pydble(*args: str) -> subprocess.CompletedProcess:
    """`python -m cli ARGS` from the repo root, as an operator runs `pydble`."""
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def test_pydble_meta_check_and_reload_ask_the_manager_port(tables: MetaProxyEnv) -> None:
    """DESIGN.md §1: `pydble meta check/reload`; exit 1 when a table is inconsistent, one-line errors."""
    env = tables
    conf = str(env.proxy.config_path)
    r = _pydble("meta", "check", "--config", conf, "--schema", "schema1", "--table", "shard_a")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    header, row = r.stdout.splitlines()
    assert header.split()[:5] == ["SCHEMA", "TABLE", "RELOAD_TIME", "CONSISTENT_IN_SHARDING_NODES",
                                  "CONSISTENT_IN_MEMORY"]
    assert row.split()[:2] == ["schema1", "shard_a"] and TIMESTAMP.search(row) and row.split()[-2:] == ["1", "1"]
    r = _pydble("meta", "check", "--config", conf, "--json")
    assert r.returncode == 1, r.stderr   # glob_a is missing on dn3
    found = {(t["schema"], t["table"]): t for t in json.loads(r.stdout)["tables"]}
    assert found[("schema1", "glob_a")]["differing_sharding_nodes"] == "dn3(missing)"
    r = _pydble("meta", "reload", "--config", conf, "--tables", "schema1.shard_a,schema2.sing_a")
    assert (r.returncode, r.stdout, r.stderr) == (0, "reload metadata success\n", "")
    port = str(env.proxy.manager_port)
    for args, code, text in (
            (("--port", port, "--user", "nobody", "--password", "x"), 2, "refused the login: (1045)"),
            (("--port", "1", "--user", "root"), 2, "cannot reach the manager port 127.0.0.1:1"),
            (("--config", conf, "--table", "t"), 2, "--table needs --schema"),
            (("--config", conf, "--schema", "nope"), 3, "(1049)")):
        r = _pydble("meta", "check", *args)
        assert r.returncode == code and r.stderr.count("\n") == 1 and text in r.stderr, (args, r.stderr)


def test_check_full_schema_and_table_filters(tables: MetaProxyEnv) -> None:
    env = tables
    assert {s for s, _ in env.check_full("schema='schema2'")} == {"schema2"}
    assert set(env.check_full("schema=schema2")) == set(env.check_full('schema="schema2"'))
    assert set(env.check_full("schema = `schema1`")) >= {("schema1", "shard_a"), ("schema1", "dflt_m")}
    assert list(env.check_full("schema='schema1' and table='shard_a'")) == [("schema1", "shard_a")]
    assert list(env.check_full("schema=schema1 and table=DFLT_M")) == [("schema1", "dflt_m")]
    assert list(env.check_full("SCHEMA = 'schema1' AND TABLE = \"never_created\"")) == [("schema1", "never_created")]
    code, msg = env.manager_error("check full @@metadata where schema='nope'")
    assert code == 1049 and "nope" in msg
    code, msg = env.manager_error("check full @@metadata where schema='schema1' and table='no_such_t'")
    assert "no_such_t" in msg and "doesn't exist" in msg


def test_check_full_consistency_filters(tables: MetaProxyEnv) -> None:
    env = tables
    env.run_on(["dn1", "dn2"], "CREATE TABLE IF NOT EXISTS glob_b (id INT PRIMARY KEY)")
    env.reload("schema='schema1' and table='glob_b'")
    env.run_on(["dn1", "dn2"], "ALTER TABLE glob_b ADD COLUMN behind INT")   # memory is now stale
    everything = env.check_full()
    for col in ("consistent_in_sharding_nodes", "consistent_in_memory"):
        zero, one = env.check_full(f"{col}=0"), env.check_full(f"{col} = 1")
        assert all(r[col] == 0 for r in zero.values()) and all(r[col] == 1 for r in one.values())
        assert set(zero) | set(one) == set(everything) and not set(zero) & set(one)
    assert ("schema1", "glob_a") in env.check_full("consistent_in_sharding_nodes=0")
    assert ("schema1", "shard_a") in env.check_full("consistent_in_sharding_nodes=1")
    stale = env.check_full("consistent_in_memory=0")
    assert ("schema1", "glob_b") in stale and stale[("schema1", "glob_b")]["consistent_in_sharding_nodes"] == 1
    assert ("schema1", "glob_b") in env.check_full("consistent_in_data_nodes=1")   # DBLE 2.x spelling
    env.reload("table in ('schema1.glob_b')")
    assert ("schema1", "glob_b") in env.check_full("consistent_in_memory=1")


def test_check_full_reload_time_filters(tables: MetaProxyEnv) -> None:
    env = tables
    everything = env.check_full()
    t = everything[("schema1", "shard_a")]["reload_time"]
    nulls = {k for k, r in everything.items() if r["reload_time"] == "null"}
    assert ("schema1", "never_created") in nulls
    assert set(env.check_full("reload_time is null")) == nulls
    assert set(env.check_full("RELOAD_TIME IS NULL")) == nulls
    timed = set(everything) - nulls
    same = env.check_full(f"reload_time = '{t}'")
    assert ("schema1", "shard_a") in same and all(r["reload_time"] == t for r in same.values())
    later, earlier = env.check_full(f"reload_time >= '{t}'"), env.check_full(f"reload_time<='{t}'")
    assert ("schema1", "shard_a") in later and ("schema1", "shard_a") in earlier
    assert all(r["reload_time"] >= t for r in later.values()) and all(r["reload_time"] <= t for r in earlier.values())
    assert set(later) | set(earlier) == timed
    assert env.check_full("reload_time >= '2999-01-01 00:00:00'") == {}
    assert env.check_full("reload_time <= '2000/01/01 00:00:00'") == {}
    assert set(env.check_full(f'reload_time >= "{t.replace("/", "-")}"')) == set(later)   # either separator
    assert set(env.check_full(f"reload_time = '{t.replace('/', '-')}'")) == set(same)


def test_reload_where_forms_reload_only_those_tables(tables: MetaProxyEnv) -> None:
    """After changes behind the proxy's back, each form brings exactly its tables back in line."""
    env = tables
    targets = {("schema1", "shard_a"): ALL4, ("schema1", "dflt_m"): ("dn5",), ("schema2", "sing_a"): ("dn2",)}

    def touch() -> None:
        for (s, t), nodes in targets.items():
            env.run_on(nodes, f"ALTER TABLE {t} ADD COLUMN x{touch.n} INT")
        touch.n += 1
    touch.n = 0

    def fresh() -> set[tuple[str, str]]:
        rows = env.check_full()
        return {k for k in targets if rows[k]["consistent_in_memory"] == 1}

    forms = [
        ("schema='schema2'", {("schema2", "sing_a")}),
        ("schema=schema1 and table=shard_a", {("schema1", "shard_a")}),
        ('schema="schema1" and table="dflt_m"', {("schema1", "dflt_m")}),
        ("schema = `schema1` and table = `DFLT_M`", {("schema1", "dflt_m")}),
        ("table in ('schema1.shard_a', 'schema2.sing_a')", {("schema1", "shard_a"), ("schema2", "sing_a")}),
        ("table in (schema1.dflt_m)", {("schema1", "dflt_m")}),
        ("table in (\"schema1.shard_a\")", {("schema1", "shard_a")}),
        ("schema='schema1'", {("schema1", "shard_a"), ("schema1", "dflt_m")}),
        ("", set(targets)),
    ]
    for where, expect in forms:
        touch()
        assert fresh() == set(), where
        cols, rows = env.mq("reload @@metadata" + (f" where {where}" if where else ""))
        assert (cols, rows) == ([], []), where
        assert fresh() == expect, where
    # the OK carries DBLE's message (info is length-prefixed, as MariaDB sends it)
    conn = env.manager()
    try:
        with conn.cursor() as cur:
            cur.execute("reload @@metadata where schema='schema1' and table='shard_a'")
        assert conn._result.message == b"\x17reload metadata success"
    finally:
        conn.close()
    code, msg = env.manager_error("reload @@metadata where schema='nope'")
    assert code == 1049 and "nope" in msg


def test_show_ddl_columns_when_idle(env: MetaProxyEnv) -> None:
    cols, rows = env.mq("show @@ddl")
    assert cols == ["schema", "table", "sql", "instance", "phase", "since"] and rows == []


def test_meta_version_of_the_instance_bumps_with_every_change(env: MetaProxyEnv) -> None:
    """`show @@cluster` carries the instance's metadata version: a reload and a DDL each bump it."""
    def version() -> int:
        _, rows = env.mq("show @@cluster")
        return int(rows[0][2])

    v0 = version()
    env.reload("schema='schema2'")
    v1 = version()
    env.drop_everywhere("dflt_v")
    env.sql(f"CREATE TABLE dflt_v {T_DEF}")
    v2 = version()
    env.sql("DROP TABLE dflt_v")
    assert v0 < v1 < v2 < version()
