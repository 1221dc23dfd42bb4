"""Metadata loads through a real proxy: start-up and `reload @@metadata` with shardingNodes down or frozen
(bounded, parallel, never aborted, logged), batching seen from the backend, queries served across a reload
of thousands of tables, and the consistency rules as `check full @@metadata` reports them."""

from __future__ import annotations

import re
import statistics
import threading
import time
from typing import Any, Callable, Iterator

import pytest

from ddl_env import ALL4, Background, MetaProxyEnv, drop_databases, env_fixture, start_env
from harness import free_port

T_DEF = "(id INT NOT NULL, v VARCHAR(10), PRIMARY KEY (id))"
CONNECT_TIMEOUT_S = 2


def _log_lines(env: MetaProxyEnv, *needles: str) -> list[str]:
    """Lines of the proxy's log that contain every needle."""
    return [ln for ln in env.proxy.log_text().splitlines() if all(n in ln for n in needles)]


# -- nodes down or frozen --------------------------------------------------------------------------

@pytest.fixture
def frozen(fresh_mariadb: Callable[..., Any]) -> Any:
    """A server of this test's own with one table, paused (SIGSTOP) for the test: it accepts TCP
    connections and never answers."""
    s = fresh_mariadb("frozen", databases=("fz1", "fz2"))
    s.execute_many([f"CREATE TABLE t_frozen {T_DEF}"], "fz1")
    s.execute_many([f"CREATE TABLE t_frozen {T_DEF}"], "fz2")
    s.pause()
    return s


def test_load_with_a_node_down_and_nodes_frozen_completes_bounded_and_says_why(
        backends: Any, frozen: Any) -> None:
    dead_port = free_port()                     # reserved for us, nobody listens on it

    def mutate(cfg: dict[str, Any]) -> None:
        cfg["server"]["backend_timeout_s"] = 5
        cfg["db_groups"]["ha_dead"] = {"host": "127.0.0.1", "port": dead_port, "user": "root", "password": "",
                                       "connect_timeout_s": CONNECT_TIMEOUT_S}
        cfg["db_groups"]["ha_frozen"] = {"host": "127.0.0.1", "port": frozen.port, "user": "root",
                                         "password": "", "connect_timeout_s": CONNECT_TIMEOUT_S}
        cfg["sharding_nodes"]["dn6"] = {"db_group": "ha_dead", "database": "db1"}
        cfg["sharding_nodes"]["dn7"] = {"db_group": "ha_frozen", "database": "fz1"}
        cfg["sharding_nodes"]["dn8"] = {"db_group": "ha_frozen", "database": "fz2"}
        cfg["schemas"]["schema1"]["tables"].update({
            "t_ok": {"type": "global", "nodes": ["dn1", "dn2"]},
            "t_dead": {"type": "global", "nodes": ["dn1", "dn6"]},
            "t_frozen": {"type": "sharding", "nodes": ["dn2", "dn7", "dn8"], "function": "hash-three",
                         "column": "id"},
        })
        cfg["functions"]["hash-three"] = {"type": "hash", "partition_count": [3], "partition_length": [1]}

    env: MetaProxyEnv | None = None
    try:
        # the tables exist on the reachable nodes before the proxy starts
        env = start_env(backends, tag="down", tables={}, mutate=mutate, start=False)
        env.run_on(["dn1", "dn2"], f"CREATE TABLE t_ok {T_DEF}")
        env.run("dn1", f"CREATE TABLE t_dead {T_DEF}")
        env.run("dn2", f"CREATE TABLE t_frozen {T_DEF}")
        t0 = time.monotonic()
        env.proxy.start()
        started_in = time.monotonic() - t0
        # start-up: the frozen nodes were waited for in parallel, each bounded by its connect timeout
        assert started_in < 4 * CONNECT_TIMEOUT_S + 5, started_in
        for node, why in (("dn6", "Connection refused"), ("dn7", "timed out"), ("dn8", "timed out")):
            assert _log_lines(env, "shardingNode metadata incomplete", f"node={node}", why), \
                f"{node}: {why} not logged:\n{env.proxy.log_tail(30)}"
        # what memory says about each table
        rows = env.check_full("schema='schema1'")
        assert (rows[("schema1", "t_ok")]["consistent_in_sharding_nodes"],
                rows[("schema1", "t_ok")]["consistent_in_memory"]) == (1, 1)
        for t in ("t_dead", "t_frozen"):                 # unknown on some node: never consistent
            assert rows[("schema1", t)]["consistent_in_sharding_nodes"] == 0, t
            assert rows[("schema1", t)]["consistent_in_memory"] == 0, t
            assert "CREATE TABLE" in rows[("schema1", t)]["table_structure"]   # known from the live node
        # queries on healthy tables go on; the proxy answers while nodes are down
        env.sql("INSERT INTO t_ok VALUES (1, 'a')")
        assert env.sql("SELECT v FROM t_ok WHERE id = 1") == [("a",)]
        # reload @@metadata (every form): bounded, parallel, completes, logs again
        for where in ("", "schema='schema1'", "schema='schema1' and table='t_frozen'",
                      "table in ('schema1.t_dead', 'schema1.t_frozen')"):
            before = len(_log_lines(env, "shardingNode metadata incomplete"))
            t0 = time.monotonic()
            env.reload(where)
            took = time.monotonic() - t0
            assert took < 4 * CONNECT_TIMEOUT_S + 5, (where, took)   # bounded by the connect timeouts, as at start-up
            assert len(_log_lines(env, "shardingNode metadata incomplete")) > before, where
        assert _log_lines(env, "shardingNode metadata incomplete", "node=dn7", "timed out after 2s")
        # the frozen server comes back: its nodes load again
        frozen.resume()
        env.reload()
        rows = env.check_full("schema='schema1'")
        assert rows[("schema1", "t_frozen")]["consistent_in_sharding_nodes"] == 1
        assert rows[("schema1", "t_dead")]["consistent_in_sharding_nodes"] == 0
    finally:
        if env is not None:
            env.proxy.cleanup()
            drop_databases(backends, env.dbs)


# -- batching, and no stall across a reload of thousands of tables -----------------------------------

MANY = 3000
BATCH = 500   # the loader's default batch size
# half on schema1's default node (dn5, first server), half on schema3's (dn4, second server),
# so both servers create their share at once
HOMES = {"dn5": ("schema1", range(0, MANY // 2)), "dn4": ("schema3", range(MANY // 2, MANY))}


def _add_schema3(cfg: dict[str, Any]) -> None:
    cfg["schemas"]["schema3"] = {"default_node": "dn4", "tables": {}}
    cfg["users"][0]["schemas"].append("schema3")


@pytest.fixture(scope="module")
def crowded(backends: Any) -> Iterator[MetaProxyEnv]:
    """A proxy whose default nodes hold 3,000 tables (MEMORY tables: the fastest to create)."""
    for env in env_fixture(backends, tag="cow", keep_databases=True, mutate=_add_schema3, tables={
            "schema1": {"shard_a": {"type": "sharding", "nodes": list(ALL4), "function": "hash-four",
                                    "column": "id"}}}):
        def create(node: str, numbers: range) -> None:
            conn = env.direct(node)
            try:
                with conn.cursor() as cur:
                    for i in range(numbers.start, numbers.stop, 250):
                        cur.execute(";".join(f"CREATE TABLE many_{j:04d} (id INT PRIMARY KEY, v VARCHAR(20), "
                                             f"k INT, KEY k_k (k)) ENGINE=MEMORY"
                                             for j in range(i, min(numbers.stop, i + 250))))
                        while cur.nextset():
                            pass
            finally:
                conn.close()
        makers = [Background(lambda n=n, r=r: create(n, r)) for n, (_, r) in HOMES.items()]
        for m in makers:
            m.join(300)
            assert m.error is None, m.error
        env.run("dn5", "INSERT INTO many_0007 VALUES (1, 'x', 1)")
        env.sql(f"CREATE TABLE shard_a {T_DEF}")
        env.sql("INSERT INTO shard_a VALUES (1, 'a'), (2, 'b')")
        env.reload()
        yield env


def test_reload_is_batched_multi_statement_show_create(crowded: MetaProxyEnv) -> None:
    """The backends' general logs show a handful of batched queries, not one per table."""
    env = crowded
    admins = [env.server_of(n).connect() for n in HOMES]
    saved, since = [], []
    try:
        for admin in admins:
            cur = admin.cursor()
            cur.execute("SELECT @@global.general_log, @@global.log_output, NOW(6)")
            g, o, now = cur.fetchone()
            saved.append((g, o))
            since.append(now)
            cur.execute("SET GLOBAL log_output = 'TABLE'")
            cur.execute("SET GLOBAL general_log = 1")
        try:
            env.reload()
        finally:
            for admin, (g, o) in zip(admins, saved):
                cur = admin.cursor()
                cur.execute("SET GLOBAL general_log = %s", (g,))
                cur.execute(f"SET GLOBAL log_output = '{o}'")
        texts: list[str] = []
        for admin, t in zip(admins, since):
            cur = admin.cursor()
            cur.execute("SELECT argument FROM mysql.general_log WHERE event_time >= %s AND command_type = 'Query' "
                        "AND argument LIKE 'SHOW CREATE TABLE%%'", (t,))
            texts += [r[0].decode() if isinstance(r[0], bytes) else r[0] for r in cur.fetchall()]
    finally:
        for admin in admins:
            admin.close()
    ours = [t for t in texts if "many_" in t]
    statements = sum(t.count("SHOW CREATE TABLE") for t in ours)
    assert statements >= MANY, statements
    per_node = -(-(MANY // 2) // BATCH)                              # ceil(tables / batch) queries
    assert len(ours) <= len(HOMES) * (per_node + 1), len(ours)
    assert all(t.count(";") < BATCH for t in ours)                  # and each batch is bounded


def test_queries_flow_without_stall_across_a_reload_of_thousands_of_tables(crowded: MetaProxyEnv) -> None:
    """DBLE parks every query while it reloads. Here no query may wait anything like the reload
    (every reload: the worst query under a third of it), and a reload must show the worst query
    within 10 x p50 + 50 ms. Other processes share this machine's two cores and can delay the
    proxy by themselves, so that tight bound gets three tries: a stall of our own (a synchronous
    step over thousands of tables, a full GC of the heap) would show in every one of them."""
    env = crowded
    conn = env.client()
    cur = conn.cursor()
    queries = ("SELECT v FROM shard_a WHERE id = 1", "SELECT v FROM many_0007 WHERE id = 1")
    expect = {queries[0]: (("a",),), queries[1]: (("x",),)}

    def one(i: int) -> tuple[float, float]:
        sql = queries[i % 2]
        t0 = time.perf_counter()
        cur.execute(sql)
        rows = cur.fetchall()
        t1 = time.perf_counter()
        assert rows == expect[sql], (sql, rows)      # never an error, never a wrong answer
        return t0, t1 - t0

    tries: list[str] = []
    try:
        for i in range(200):                                   # warm up, and a baseline
            one(i)
        base = [one(i)[1] for i in range(400)]
        for attempt in range(3):
            done = threading.Event()

            def reload() -> None:
                try:
                    env.reload()
                finally:
                    done.set()
            started = time.perf_counter()
            bg = Background(reload)
            samples = []
            i = 0
            while not done.is_set():
                samples.append(one(i))
                i += 1
            bg.join()
            assert bg.error is None, bg.error
            seconds = time.perf_counter() - started
            during = [lat for t0, lat in samples if t0 <= started + seconds]
            assert len(during) >= 50, f"only {len(during)} queries during a {seconds:.2f}s reload"
            p50 = statistics.median(base + during)
            worst = max(during)
            bound = 10 * p50 + 0.050
            tries.append(f"reload {seconds:.2f}s: {len(during)} queries, worst {worst * 1e3:.1f} ms, "
                         f"p50 {p50 * 1e3:.2f} ms, bound {bound * 1e3:.1f} ms")
            assert worst < seconds / 3, tries[-1]
            if worst < bound:
                break
        else:
            raise AssertionError("a query stalled in every reload: " + "; ".join(tries))
    finally:
        conn.close()
    rows = env.check_full("schema='schema3' and table='many_2999'")
    assert rows[("schema3", "many_2999")]["consistent_in_sharding_nodes"] == 1
    assert len(env.tables_through_proxy("schema1")) >= MANY // 2


def test_ddl_finishing_during_a_reload_is_not_undone_by_it(crowded: MetaProxyEnv) -> None:
    """The reload read shard_a before the DDL changed it; the DDL's refresh, published while the
    reload was still reading thousands of tables, must survive the reload's publish."""
    env = crowded
    for n in range(3):
        reload = Background(env.reload)
        time.sleep(0.05 * n)
        env.sql(f"ALTER TABLE shard_a ADD COLUMN race{n} INT")
        reload.join()
        assert reload.error is None or "doing DDL" in str(reload.error), reload.error
        row = env.row("schema1", "shard_a")
        assert f"`race{n}` int(11)" in row["table_structure"], n
        assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (1, 1)
        env.sql(f"INSERT INTO shard_a (id, v, race{n}) VALUES ({10 + n}, 'r', {n})")
    for n in range(3):
        env.sql(f"ALTER TABLE shard_a DROP COLUMN race{n}")


# -- consistency rules --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def env(backends: Any) -> Iterator[MetaProxyEnv]:
    yield from env_fixture(backends, tag="cons")


def test_auto_increment_values_differing_across_nodes_are_consistent(env: MetaProxyEnv) -> None:
    env.reset("shard_a")
    env.sql("CREATE TABLE shard_a (id INT NOT NULL AUTO_INCREMENT, v VARCHAR(10), PRIMARY KEY (id)) "
            "DEFAULT CHARSET=utf8mb4")
    env.sql("INSERT INTO shard_a (id, v) VALUES (1, 'a'), (2, 'b'), (6, 'c'), (11, 'd')")
    texts = {n: env.show_create(n, "shard_a") for n in ALL4}
    assert len(set(texts.values())) > 1, texts               # the backends really differ in AUTO_INCREMENT=N
    assert len({re.sub(r" AUTO_INCREMENT=\d+", "", t) for t in texts.values()}) == 1
    env.reload("schema='schema1' and table='shard_a'")
    row = env.row("schema1", "shard_a")
    assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (1, 1)


@pytest.mark.parametrize("change, node", [
    ("ADD COLUMN extra INT", "dn2"),
    ("MODIFY v VARCHAR(11)", "dn4"),
    ("ALTER COLUMN v SET DEFAULT 'q'", "dn1"),
    ("ADD INDEX k_v (v)", "dn3"),
    ("ENGINE=MyISAM", "dn2"),
])
def test_a_difference_on_one_node_is_inconsistent(env: MetaProxyEnv, change: str, node: str) -> None:
    env.reset("shard_b")
    env.sql(f"CREATE TABLE shard_b {T_DEF}")
    assert env.row("schema1", "shard_b")["consistent_in_sharding_nodes"] == 1
    env.run(node, f"ALTER TABLE shard_b {change}")
    row = env.row("schema1", "shard_b")                       # memory predates the change
    assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (0, 0)
    env.reload("schema='schema1' and table='shard_b'")
    assert env.row("schema1", "shard_b")["consistent_in_sharding_nodes"] == 0
    assert ("schema1", "shard_b") in env.check_full("consistent_in_sharding_nodes=0")
    assert ("schema1", "shard_b") not in env.check_full("consistent_in_sharding_nodes=1")


def test_a_table_missing_on_one_node_is_inconsistent(env: MetaProxyEnv) -> None:
    env.reset("glob_a")
    env.sql(f"CREATE TABLE glob_a {T_DEF}")
    env.run("dn4", "DROP TABLE glob_a")
    env.reload()
    row = env.row("schema1", "glob_a")
    assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (0, 0)
    assert _log_lines(env, "table structure not consistent", "schema1.glob_a") or \
        _log_lines(env, "tables missing on node", "node=dn4", "glob_a")
    env.sql(f"CREATE TABLE IF NOT EXISTS glob_a {T_DEF}")    # the DDL repairs it, memory follows
    row = env.row("schema1", "glob_a")
    assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (1, 1)


def test_identical_structures_are_consistent_and_stale_memory_is_reported(env: MetaProxyEnv) -> None:
    env.reset("glob_b")
    env.sql(f"CREATE TABLE glob_b {T_DEF}")
    row = env.row("schema1", "glob_b")
    assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (1, 1)
    env.run_on(["dn1", "dn2"], "ALTER TABLE glob_b ADD COLUMN both_nodes INT")
    row = env.row("schema1", "glob_b")
    assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (1, 0)
    assert "both_nodes" not in row["table_structure"]
    env.reload("table in ('schema1.glob_b')")
    row = env.row("schema1", "glob_b")
    assert (row["consistent_in_sharding_nodes"], row["consistent_in_memory"]) == (1, 1)
    assert "both_nodes" in row["table_structure"]
