"""The metadata loader against real MariaDB servers: consistency, failures, scale, partial loads."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from typing import Any

import pymysql
import pytest
from pymysql.constants import CLIENT
from structlog.testing import capture_logs

from meta.backend_query import MetaConnection
from meta.consistency import Consistency, consistent_in_memory
from meta.errors import UnknownDatabase
from meta.loader import load_all, load_tables, node_tables, result_from_texts
from meta.registry import Registry
from proxy.backends.meta_link import MetaLink

# a fresh connection per load (each asyncio.run has its own loop); pooling is shown below
LINK = MetaLink(idle_per_node=0)

ALL4 = ["dn1", "dn2", "dn3", "dn4"]

EXAMPLE_SCHEMAS = {
    "schema1": {
        "default_node": "dn5",
        "tables": {
            "test": {"type": "global", "nodes": ALL4},
            "sharding_2_t1": {"type": "sharding", "nodes": ["dn1", "dn2"], "function": "hash-two",
                              "column": "id"},
            "sharding_4_t1": {"type": "sharding", "nodes": ALL4, "function": "hash-four",
                              "column": "id"},
        },
    },
    "schema2": {"tables": {"sing": {"type": "single", "nodes": ["dn1"]}}},
}

T_DDL = ("CREATE TABLE {name} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
         "name VARCHAR(64) DEFAULT 'x', v INT, KEY k_v (v)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
# thousands of tables: MEMORY tables are created and dropped much faster than InnoDB ones
BULK_DDL = T_DDL.replace("ENGINE=InnoDB", "ENGINE=MEMORY")


def create_examples(env: Any) -> None:
    env.run_on(ALL4, T_DDL.format(name="test"), T_DDL.format(name="sharding_4_t1"))
    env.run_on(["dn1", "dn2"], T_DDL.format(name="sharding_2_t1"))
    env.run("dn1", T_DDL.format(name="sing"))
    env.run("dn5", T_DDL.format(name="nosharding_a"), "CREATE TABLE nosharding_b (a INT)",
            "CREATE VIEW v_not_listed AS SELECT 1 AS one")


def test_full_load_of_example_tables_is_consistent(meta_env: Any) -> None:
    create_examples(meta_env)
    # AUTO_INCREMENT differs between shards once rows are in: still consistent
    meta_env.run("dn3", "INSERT INTO sharding_4_t1 (name) VALUES ('a'), ('b'), ('c')")
    cfg = meta_env.config(EXAMPLE_SCHEMAS)
    res = asyncio.run(load_all(cfg, timeout_s=20, backend=LINK))
    assert res.ok, res.failed_nodes
    keys = {("schema1", "test"), ("schema1", "sharding_2_t1"), ("schema1", "sharding_4_t1"),
            ("schema2", "sing"), ("schema1", "nosharding_a"), ("schema1", "nosharding_b")}
    assert set(res.tables) == keys
    for key, m in res.tables.items():
        assert m.consistency is Consistency.CONSISTENT, (key, m.verdict().describe())
        assert m.structure is not None and not m.unknown
    t = res.tables[("schema1", "sharding_4_t1")]
    assert t.nodes == tuple(ALL4) and t.kind == "sharding"
    assert t.structure in {meta_env.show_create(n, "sharding_4_t1") for n in ALL4}
    assert "AUTO_INCREMENT=4" in meta_env.show_create("dn3", "sharding_4_t1")
    # identical texts are one object in memory
    test_meta = res.tables[("schema1", "test")]
    assert len({id(s) for s in test_meta.node_sql.values()}) == 1
    assert res.tables[("schema1", "nosharding_a")].kind == "default"
    assert res.tables[("schema1", "nosharding_a")].nodes == ("dn5",)

    reg = Registry(cfg)
    reg.apply(res)
    assert reg.tables_of("schema1") == ["nosharding_a", "nosharding_b", "sharding_2_t1",
                                        "sharding_4_t1", "test"]
    assert reg.get("schema1", "sharding_4_t1").parsed.column_names == ("id", "name", "v")
    assert reg.get("schema1", "Test").parsed.primary_key == ("id",)


def test_column_differing_on_one_node_is_inconsistent(meta_env: Any) -> None:
    create_examples(meta_env)
    meta_env.run("dn3", "ALTER TABLE test ADD COLUMN extra INT")
    cfg = meta_env.config(EXAMPLE_SCHEMAS)
    with capture_logs() as logs:
        res = asyncio.run(load_all(cfg, timeout_s=20, backend=LINK))
    m = res.tables[("schema1", "test")]
    assert m.consistency is Consistency.INCONSISTENT
    v = m.verdict()
    assert [x.nodes for x in v.variants] == [("dn1", "dn2", "dn4"), ("dn3",)]
    assert "extra" not in m.structure                          # the majority's structure
    assert res.tables[("schema1", "sharding_4_t1")].consistency is Consistency.CONSISTENT
    warn = [e for e in logs if e["event"] == "table structure not consistent across shardingNodes"]
    assert warn and warn[0]["table"] == "schema1.test" and "{dn3}" in warn[0]["detail"]


def test_table_missing_on_one_node_is_inconsistent(meta_env: Any) -> None:
    create_examples(meta_env)
    meta_env.run("dn2", "DROP TABLE sharding_4_t1")
    cfg = meta_env.config(EXAMPLE_SCHEMAS)
    with capture_logs() as logs:
        res = asyncio.run(load_all(cfg, timeout_s=20, backend=LINK))
    m = res.tables[("schema1", "sharding_4_t1")]
    assert m.consistency is Consistency.INCONSISTENT and m.missing_nodes == ("dn2",)
    assert m.structure is not None
    assert res.nodes["dn2"].ok and res.nodes["dn2"].missing == 1
    assert any(e["event"] == "tables missing on node" and e["node"] == "dn2" for e in logs)
    # a configured table missing everywhere is kept, without structure
    meta_env.run_on(["dn1", "dn2"], "DROP TABLE IF EXISTS sharding_2_t1")
    res = asyncio.run(load_all(cfg, timeout_s=20, backend=LINK))
    lost = res.tables[("schema1", "sharding_2_t1")]
    assert lost.consistency is Consistency.LOST and lost.structure is None
    reg = Registry(cfg)
    reg.apply(res)
    assert reg.get("schema1", "sharding_2_t1") is None and "sharding_2_t1" not in reg.tables_of("schema1")
    assert "sharding_4_t1" in reg.tables_of("schema1")   # on some nodes: listed (it answers 3009)


def test_small_batches_and_several_connections_give_the_same_result(meta_env: Any) -> None:
    names = [f"t{i:03d}" for i in range(45)]
    meta_env.run_on(ALL4, *(T_DDL.format(name=n) for n in names))
    schemas = {"s": {"tables": {n: {"type": "global", "nodes": ALL4} for n in names}}}
    cfg = meta_env.config(schemas)
    a = asyncio.run(load_all(cfg, timeout_s=20, batch_size=1000, backend=LINK))
    b = asyncio.run(load_all(cfg, timeout_s=20, batch_size=7, connections_per_node=3, backend=LINK))
    pooled = MetaLink()

    async def twice() -> Any:   # the second load reuses the first one's idle connections (pinged)
        await load_all(cfg, timeout_s=20, batch_size=7, backend=pooled)
        try:
            return await load_all(cfg, timeout_s=20, batch_size=7, backend=pooled)
        finally:
            pooled.close()
    c = asyncio.run(twice())
    assert a.ok and b.ok and c.ok
    texts = {k: m.node_sql for k, m in a.tables.items()}
    assert texts == {k: m.node_sql for k, m in b.tables.items()}
    assert texts == {k: m.node_sql for k, m in c.tables.items()}     # fresh == pooled connections
    assert all(m.consistency is Consistency.CONSISTENT for m in b.tables.values())


class _HookBackend:
    """The proxy's real backend, with a hook run on one node right after its table listing."""

    def __init__(self, node: str, hook: Any, idle_per_node: int = 0) -> None:
        self.inner = MetaLink(idle_per_node=idle_per_node)
        self.node = node
        self.hook = hook

    async def connect(self, node: Any, group: Any, *, timeout_s: float) -> MetaConnection:
        conn = await self.inner.connect(node, group, timeout_s=timeout_s)
        return _HookConn(conn, self.hook if node.name == self.node else None)


class _HookConn:
    def __init__(self, conn: MetaConnection, hook: Any) -> None:
        self.conn, self.hook = conn, hook

    async def query(self, sql: str) -> Any:
        rows = await self.conn.query(sql)
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return rows

    async def query_multi(self, sql: str) -> Any:
        return await self.conn.query_multi(sql)

    async def close(self) -> None:
        await self.conn.close()

    def abort(self) -> None:
        self.conn.abort()


@pytest.mark.parametrize("idle", [0, 2], ids=["fresh", "pooled"])
def test_table_dropped_between_listing_and_show_create_retries_the_rest(meta_env: Any,
                                                                        idle: int) -> None:
    names = [f"t{i:02d}" for i in range(30)]
    meta_env.run_on(["dn1", "dn2"], *(T_DDL.format(name=n) for n in names))
    schemas = {"s": {"tables": {n: {"type": "global", "nodes": ["dn1", "dn2"]} for n in names}}}
    cfg = meta_env.config(schemas)
    backend = _HookBackend("dn2", lambda: meta_env.run("dn2", "DROP TABLE t13"), idle)
    with capture_logs() as logs:
        res = asyncio.run(load_all(cfg, timeout_s=20, batch_size=10, backend=backend))
    dropped = res.tables[("s", "t13")]
    assert dropped.consistency is Consistency.INCONSISTENT and dropped.missing_nodes == ("dn2",)
    for n in names:
        if n != "t13":  # including t14..t19, after the error inside the same batch
            m = res.tables[("s", n)]
            assert m.consistency is Consistency.CONSISTENT, n
            assert m.node_sql["dn2"] is not None
    assert res.nodes["dn2"].ok and res.nodes["dn2"].fetched == 29
    assert any(e["event"] == "table dropped during load" and e["table"] == "t13" for e in logs)


def _idle_threads(link: MetaLink) -> dict[tuple[str, int, int], Any]:
    """(host, port, server thread id) -> dbGroup of each connection the pool keeps idle."""
    return {(c.conn.group.host, c.conn.group.port, c.conn.thread_id): c.conn.group
            for idle in link._idle.values() for _, c in idle}


def test_pooled_connections_are_reused_and_dead_ones_replaced(meta_env: Any) -> None:
    create_examples(meta_env)
    cfg = meta_env.config(EXAMPLE_SCHEMAS)
    link = MetaLink()

    async def go() -> None:
        try:
            first = await load_all(cfg, timeout_s=20, backend=link)
            kept = _idle_threads(link)
            assert first.ok and kept
            second = await load_all(cfg, timeout_s=20, backend=link)
            assert second.ok and set(_idle_threads(link)) == set(kept)       # pinged and reused
            for (_, _, tid), g in kept.items():    # the server drops every idle connection
                killer = pymysql.connect(host=g.host, port=g.port, user=g.user, password=g.password)
                try:
                    killer.cursor().execute(f"KILL {tid}")
                finally:
                    killer.close()
            third = await load_all(cfg, timeout_s=20, backend=link)
            assert third.ok, third.failed_nodes
            assert {k: m.node_sql for k, m in third.tables.items()} == \
                {k: m.node_sql for k, m in first.tables.items()}
            assert _idle_threads(link) and not set(_idle_threads(link)) & set(kept)
        finally:
            link.close()
    asyncio.run(go())


def _spare_config(env: Any, spare: Any, timeout: float = 5) -> Any:
    schemas = {"schema1": {"default_node": "dn6",
                           "tables": {"test": {"type": "global", "nodes": ["dn1", "dn2", "dn6"]},
                                      "only_spare": {"type": "single", "nodes": ["dn6"]}}},
               "schema2": {"tables": {"sing": {"type": "single", "nodes": ["dn1"]}}}}
    return env.config(schemas,
                      extra_groups={"g3": {"host": spare.host, "port": spare.port, "user": "root",
                                           "connect_timeout_s": timeout}},
                      extra_nodes={"dn6": {"db_group": "g3", "database": "spare_db"}})


def _spare_tables(env: Any, spare: Any) -> None:
    env.run_on(["dn1", "dn2"], T_DDL.format(name="test"))
    env.run("dn1", T_DDL.format(name="sing"))
    spare.execute_many(["DROP TABLE IF EXISTS test", "DROP TABLE IF EXISTS only_spare",
                        "DROP TABLE IF EXISTS spare_default", T_DDL.format(name="test"),
                        T_DDL.format(name="only_spare"), "CREATE TABLE spare_default (a INT)"],
                       "spare_db")


def test_paused_backend_times_out_marks_unknown_and_logs_the_node(meta_env: Any,
                                                                    spare_server: Any) -> None:
    _spare_tables(meta_env, spare_server)
    cfg = _spare_config(meta_env, spare_server)
    reg = Registry(cfg)
    good = asyncio.run(load_all(cfg, timeout_s=20, backend=LINK))
    assert good.ok and good.tables[("schema1", "test")].consistency is Consistency.CONSISTENT
    reg.apply(good)
    spare_server.pause()
    try:
        with capture_logs() as logs:
            t0 = time.monotonic()
            res = asyncio.run(load_all(cfg, timeout_s=1.0, backend=LINK))
            elapsed = time.monotonic() - t0
    finally:
        spare_server.resume()
    assert elapsed < 3.0, elapsed
    assert not res.nodes["dn6"].ok and "timed out" in res.nodes["dn6"].reason
    assert res.nodes["dn1"].ok and res.nodes["dn2"].ok
    test = res.tables[("schema1", "test")]
    assert test.consistency is Consistency.UNKNOWN and "dn6" in test.unknown
    assert test.structure is not None                       # from the nodes that answered
    only = res.tables[("schema1", "only_spare")]
    assert only.consistency is Consistency.UNKNOWN and only.structure is None
    assert res.unlisted_defaults.keys() == {"schema1"}
    assert res.tables[("schema2", "sing")].consistency is Consistency.CONSISTENT
    warn = [e for e in logs if e["event"] == "shardingNode metadata incomplete"]
    assert warn and warn[0]["node"] == "dn6" and "timed out" in warn[0]["reason"]
    # memory keeps what it knew about the unreachable node's tables
    reg.apply(res)
    assert reg.get("schema1", "only_spare") is not None
    assert reg.get("schema1", "spare_default") is not None
    assert reg.get("schema1", "only_spare").consistency is Consistency.UNKNOWN


def test_backend_frozen_in_the_middle_of_a_batch_times_out(meta_env: Any, spare_server: Any) -> None:
    _spare_tables(meta_env, spare_server)
    cfg = _spare_config(meta_env, spare_server)
    backend = _HookBackend("dn6", spare_server.pause)      # freeze right after the listing
    try:
        t0 = time.monotonic()
        res = asyncio.run(load_all(cfg, timeout_s=1.0, backend=backend))
        elapsed = time.monotonic() - t0
    finally:
        spare_server.resume()
    assert elapsed < 3.0
    assert res.nodes["dn6"].reason == "timed out after 1s"
    assert res.tables[("schema1", "only_spare")].consistency is Consistency.UNKNOWN
    # listed, so its default-node tables are known by name and unknown in content
    assert res.tables[("schema1", "spare_default")].consistency is Consistency.UNKNOWN
    assert not res.unlisted_defaults


def test_stopped_backend_and_bad_database_complete_the_load(meta_env: Any, spare_server: Any) -> None:
    _spare_tables(meta_env, spare_server)
    cfg = _spare_config(meta_env, spare_server)
    spare_server.stop()
    try:
        with capture_logs() as logs:
            t0 = time.monotonic()
            res = asyncio.run(load_all(cfg, timeout_s=5, backend=LINK))
            elapsed = time.monotonic() - t0
    finally:
        spare_server.start()
    assert elapsed < 5
    assert not res.nodes["dn6"].ok and "connect" in res.nodes["dn6"].reason
    assert res.tables[("schema1", "test")].consistency is Consistency.UNKNOWN
    assert any(e["event"] == "shardingNode metadata incomplete" and e["node"] == "dn6"
               for e in logs)
    # a node whose database does not exist fails alone, with the server's reason
    bad = meta_env.config({"s": {"tables": {"test": {"type": "global", "nodes": ["dn1", "dn7"]}}}},
                          extra_nodes={"dn7": {"db_group": "g2", "database": "pm_no_such_db"}})
    res = asyncio.run(load_all(bad, timeout_s=5, backend=LINK))
    assert "1049" in res.nodes["dn7"].reason and res.nodes["dn1"].ok
    assert res.tables[("s", "test")].consistency is Consistency.UNKNOWN


def test_partial_load_of_one_table(meta_env: Any) -> None:
    create_examples(meta_env)
    cfg = meta_env.config(EXAMPLE_SCHEMAS)
    reg = Registry(cfg)
    reg.apply(asyncio.run(load_all(cfg, timeout_s=20, backend=LINK)))
    before = {k: m.version for k, m in reg.snapshot.tables.items()}
    meta_env.run_on(ALL4, "ALTER TABLE sharding_4_t1 ADD COLUMN added DATE")
    stale = reg.get("schema1", "sharding_4_t1")
    fresh = asyncio.run(load_tables(cfg, [("schema1", "SHARDING_4_T1")], timeout_s=20, backend=LINK))
    assert set(fresh.tables) == {("schema1", "sharding_4_t1")}
    assert set(fresh.nodes) == set(ALL4) and all(o.listed == 1 for o in fresh.nodes.values())
    new = fresh.tables[("schema1", "sharding_4_t1")]
    assert consistent_in_memory(stale, new) is False
    reg.apply(fresh)
    got = reg.get("schema1", "sharding_4_t1")
    assert "added" in got.parsed.column_names and got.consistency is Consistency.CONSISTENT
    assert consistent_in_memory(got, new) is True
    assert got.version > before[("schema1", "sharding_4_t1")]
    for k, v in before.items():
        if k != ("schema1", "sharding_4_t1"):
            assert reg.snapshot.tables[k].version == v
    # an unconfigured table on the default node, and one that is gone
    meta_env.run("dn5", "DROP TABLE nosharding_b")
    part = asyncio.run(load_tables(cfg, [("schema1", "nosharding_a"), ("schema1", "nosharding_b")], backend=LINK))
    assert set(part.tables) == {("schema1", "nosharding_a")}
    reg.apply(part)
    assert reg.record("schema1", "nosharding_b") is None and reg.get("schema1", "nosharding_a")
    # a whole schema
    sch = asyncio.run(load_tables(cfg, schema="schema2", backend=LINK))
    assert set(sch.tables) == {("schema2", "sing")}
    with pytest.raises(UnknownDatabase):
        asyncio.run(load_tables(cfg, schema="nope", backend=LINK))


def test_queries_are_served_during_a_reload(meta_env: Any) -> None:
    create_examples(meta_env)
    cfg = meta_env.config(EXAMPLE_SCHEMAS)
    reg = Registry(cfg)
    reg.apply(asyncio.run(load_all(cfg, timeout_s=20, backend=LINK)))
    stop = threading.Event()
    misses = []

    def reader() -> None:
        while not stop.is_set():
            if reg.get("schema1", "test") is None:
                misses.append(1)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(3):
            reg.apply(asyncio.run(load_all(cfg, timeout_s=20, backend=LINK)))
    finally:
        stop.set()
        t.join()
    assert not misses and reg.version == 4


def _create_many(env: Any, names: list[str], nodes: list[str]) -> None:
    def on(node: str) -> None:
        conn = env.server_of(node).connect(env.database_of(node),
                                           client_flag=CLIENT.MULTI_STATEMENTS)
        try:
            with conn.cursor() as cur:
                for i in range(0, len(names), 250):
                    cur.execute(";".join(BULK_DDL.format(name=n) for n in names[i:i + 250]))
                    while cur.nextset():
                        pass
        finally:
            conn.close()
    # one thread per server, its nodes in turn
    by_server: dict[int, list[str]] = {}
    for n in nodes:
        by_server.setdefault(id(env.server_of(n)), []).append(n)
    threads = [threading.Thread(target=lambda ns=ns: [on(n) for n in ns]) for ns in by_server.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_load_of_many_tables_on_four_nodes_in_parallel(meta_env: Any) -> None:
    """Several batches per node, four nodes at once (thousands of tables through a real proxy are in
    tests/proxy/test_manager_reload.py; 2,000 x 4 in the slow speed test below)."""
    names = [f"tbl_{i:04d}" for i in range(400)]
    _create_many(meta_env, names, ALL4)
    schemas = {"s": {"tables": {n: {"type": "sharding", "nodes": ALL4, "function": "hash-four",
                                    "column": "id"} for n in names}}}
    cfg = meta_env.config(schemas)
    res = asyncio.run(load_all(cfg, timeout_s=60, batch_size=150, backend=LINK))
    assert res.ok and len(res.tables) == 400
    assert all(m.consistency is Consistency.CONSISTENT for m in res.tables.values())
    assert all(o.fetched == 400 for o in res.nodes.values())


def _raw_pymysql_fetch(env: Any, nodes: list[str], batch: int) -> float:
    """The baseline: PyMySQL, one thread per node, the same listing and batched statements."""
    def fetch(node: str) -> None:
        conn = env.server_of(node).connect(env.database_of(node), client_flag=CLIENT.MULTI_STATEMENTS)
        try:
            cur = conn.cursor()
            cur.execute("SHOW FULL TABLES WHERE Table_type='BASE TABLE'")
            names = [r[0] for r in cur.fetchall()]
            for i in range(0, len(names), batch):
                cur.execute(";".join(f"SHOW CREATE TABLE `{n}`" for n in names[i:i + batch]))
                while True:
                    cur.fetchall()
                    if not cur.nextset():
                        break
        finally:
            conn.close()
    threads = [threading.Thread(target=fetch, args=(n,)) for n in nodes]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


@pytest.mark.slow
def test_load_speed_against_raw_pymysql(meta_env: Any) -> None:
    """Full load of 2,000 tables x 4 nodes over two servers within 1.5x the raw batched fetch."""
    names = [f"tbl_{i:04d}" for i in range(2000)]
    _create_many(meta_env, names, ALL4)
    cfg = meta_env.config({"s": {"tables": {n: {"type": "global", "nodes": ALL4} for n in names}}})
    _raw_pymysql_fetch(meta_env, ALL4, 500)                    # warm both paths up once
    asyncio.run(load_all(cfg, timeout_s=120, batch_size=500, backend=LINK))
    raws, ours = [], []
    for _ in range(5):
        raws.append(_raw_pymysql_fetch(meta_env, ALL4, 500))
        t0 = time.perf_counter()
        res = asyncio.run(load_all(cfg, timeout_s=120, batch_size=500, backend=LINK))
        ours.append(time.perf_counter() - t0)
        assert res.ok and len(res.tables) == 2000
    ratio = statistics.median(ours) / statistics.median(raws)
    print(f"2000 tables x 4 nodes: raw PyMySQL median {statistics.median(raws):.3f}s, "
          f"load_all median {statistics.median(ours):.3f}s, ratio {ratio:.2f}")
    assert ratio <= 1.5, (raws, ours)


# --- a DDL's refresh from the SHOW CREATE texts its nodes answered (result_from_texts) ---------


def _texts_of(env: Any, cfg: Any, keys: list[tuple[str, str]]) -> dict[str, dict[str, str | None]]:
    """What a DDL would collect: each node's CREATE text of the tables it holds, None if absent."""
    out: dict[str, dict[str, str | None]] = {}
    for node, names in node_tables(cfg, keys).items():
        got: dict[str, str | None] = {}
        for name in names:
            try:
                got[name] = env.show_create(node, name)
            except pymysql.MySQLError as e:
                assert e.args[0] == 1146, e
                got[name] = None
        out[node] = got
    return out


def _assert_same_result(fast: Any, loaded: Any) -> None:
    """The records a load and result_from_texts give agree on everything but the fetch time."""
    assert fast.scope == loaded.scope
    assert set(fast.tables) == set(loaded.tables)
    for key, m in loaded.tables.items():
        f = fast.tables[key]
        assert (f.kind, f.nodes, dict(f.node_sql), f.structure, f.consistency, dict(f.unknown)) == \
            (m.kind, m.nodes, dict(m.node_sql), m.structure, m.consistency, dict(m.unknown)), key
        assert f.version == 0 and f.reload_time is not None
    assert {n: (o.ok, o.listed, o.fetched, o.missing, o.unknown) for n, o in fast.nodes.items()} == \
        {n: (o.ok, o.listed, o.fetched, o.missing, o.unknown) for n, o in loaded.nodes.items()}


KEYS_OF_EVERY_KIND = [("schema1", "sharding_4_t1"), ("schema1", "Test"), ("schema1", "sharding_2_t1"),
                      ("schema2", "sing"), ("schema1", "nosharding_a"), ("schema1", "not_anywhere")]


def test_result_from_texts_equals_a_load_for_every_kind_of_table(meta_env: Any) -> None:
    create_examples(meta_env)
    meta_env.run("dn3", "ALTER TABLE sharding_4_t1 ADD COLUMN extra INT")   # one inconsistent table
    cfg = meta_env.config(EXAMPLE_SCHEMAS)
    wanted = {n: set(names) for n, names in node_tables(cfg, KEYS_OF_EVERY_KIND).items()}
    assert wanted == {"dn1": {"sharding_4_t1", "test", "sharding_2_t1", "sing"},
                      "dn2": {"sharding_4_t1", "test", "sharding_2_t1"}, "dn3": {"sharding_4_t1", "test"},
                      "dn4": {"sharding_4_t1", "test"}, "dn5": {"nosharding_a", "not_anywhere"}}
    texts = _texts_of(meta_env, cfg, KEYS_OF_EVERY_KIND)
    assert texts["dn5"]["not_anywhere"] is None
    loaded = asyncio.run(load_tables(cfg, KEYS_OF_EVERY_KIND, timeout_s=20, backend=LINK))
    fast = result_from_texts(cfg, KEYS_OF_EVERY_KIND, texts)
    assert fast is not None and fast.ok
    _assert_same_result(fast, loaded)
    assert {k: (m.kind, m.consistency) for k, m in fast.tables.items()} == {
        ("schema1", "sharding_4_t1"): ("sharding", Consistency.INCONSISTENT),
        ("schema1", "test"): ("global", Consistency.CONSISTENT),
        ("schema1", "sharding_2_t1"): ("sharding", Consistency.CONSISTENT),
        ("schema2", "sing"): ("single", Consistency.CONSISTENT),
        ("schema1", "nosharding_a"): ("default", Consistency.CONSISTENT),
    }                                        # not_anywhere: an unconfigured table that is not there
    test_meta = fast.tables[("schema1", "test")]
    assert len({id(s) for s in test_meta.node_sql.values()}) == 1   # identical texts: one object
    reg = Registry(cfg)
    reg.apply(fast, loaded=False)
    assert reg.get("schema1", "nosharding_a").parsed.column_names == ("id", "name", "v")


def test_result_from_texts_of_dropped_tables(meta_env: Any) -> None:
    create_examples(meta_env)
    cfg = meta_env.config(EXAMPLE_SCHEMAS)
    reg = Registry(cfg)
    reg.apply(asyncio.run(load_all(cfg, timeout_s=20, backend=LINK)))
    meta_env.run_on(["dn1", "dn2"], "DROP TABLE sharding_2_t1")
    meta_env.run("dn5", "DROP TABLE nosharding_b")
    keys = [("schema1", "sharding_2_t1"), ("schema1", "nosharding_b")]
    texts = _texts_of(meta_env, cfg, keys)
    assert texts == {"dn1": {"sharding_2_t1": None}, "dn2": {"sharding_2_t1": None},
                     "dn5": {"nosharding_b": None}}
    fast = result_from_texts(cfg, keys, texts)
    assert fast is not None
    _assert_same_result(fast, asyncio.run(load_tables(cfg, keys, timeout_s=20, backend=LINK)))
    lost = fast.tables[("schema1", "sharding_2_t1")]
    assert lost.consistency is Consistency.LOST and lost.structure is None
    assert ("schema1", "nosharding_b") not in fast.tables
    reg.apply(fast, loaded=False)
    assert reg.record("schema1", "nosharding_b") is None
    assert reg.get("schema1", "sharding_2_t1") is None and "sharding_2_t1" not in reg.tables_of("schema1")
    assert "sharding_4_t1" in reg.tables_of("schema1")   # on some nodes: listed (it answers 3009)


def test_result_from_texts_is_none_unless_every_node_answered(meta_env: Any) -> None:
    create_examples(meta_env)
    cfg = meta_env.config(EXAMPLE_SCHEMAS)
    keys = [("schema1", "sharding_4_t1"), ("schema1", "nosharding_a")]
    texts = _texts_of(meta_env, cfg, keys)
    assert result_from_texts(cfg, keys, texts) is not None
    no_dn3 = {n: t for n, t in texts.items() if n != "dn3"}
    assert result_from_texts(cfg, keys, no_dn3) is None                     # a node missing
    no_table = {**texts, "dn5": {}}
    assert result_from_texts(cfg, keys, no_table) is None                    # a table missing
    other_table = {**texts, "dn2": {"test": texts["dn2"]["sharding_4_t1"]}}
    assert result_from_texts(cfg, keys, other_table) is None
    assert result_from_texts(cfg, [("nope", "t")], texts) is None            # unknown schema
    not_text = {**texts, "dn5": {**texts["dn5"], "nosharding_a": 42}}      # from another instance, garbled
    assert result_from_texts(cfg, keys, not_text) is None
    assert node_tables(cfg, [("nope", "t")]) == {}
    # more than needed is fine; a table of a schema without a default node has no record, as in a load
    extra = {**texts, "dn9": {"x": None}, "dn1": {**texts["dn1"], "other": "CREATE TABLE `other` (a int)"}}
    assert set(result_from_texts(cfg, keys, extra).tables) == {("schema1", "sharding_4_t1"),
                                                               ("schema1", "nosharding_a")}
    nowhere = [("schema2", "unconfigured")]
    assert node_tables(cfg, nowhere) == {}
    fast = result_from_texts(cfg, nowhere, {})
    assert fast is not None and fast.tables == {} and fast.scope.covers(("schema2", "unconfigured"))
    _assert_same_result(fast, asyncio.run(load_tables(cfg, nowhere, timeout_s=20, backend=LINK)))


def test_result_from_texts_is_cheap() -> None:
    """Pure and fast: a DDL's refresh must cost far less than the load it replaces."""
    from meta.config import parse_config
    cfg = parse_config({
        "users": [{"name": "test", "password": "x", "schemas": ["s"]}],
        "manager_users": [{"name": "root", "password": "x"}],
        "db_groups": {"g": {"host": "127.0.0.1", "port": 1, "user": "root", "password": ""}},
        "sharding_nodes": {f"dn{i}": {"db_group": "g", "database": f"d{i}"} for i in range(8)},
        "functions": {"h": {"type": "hash", "partition_count": [8], "partition_length": [1]}},
        "schemas": {"s": {"tables": {"t": {"type": "sharding", "nodes": [f"dn{i}" for i in range(8)],
                                           "function": "h", "column": "id"}}}},
    })
    text = "CREATE TABLE `t` (\n  `id` int(11) NOT NULL\n) ENGINE=InnoDB"
    texts = {f"dn{i}": {"t": text} for i in range(8)}
    t0 = time.perf_counter()
    for _ in range(200):
        res = result_from_texts(cfg, [("s", "t")], texts)
    per_call = (time.perf_counter() - t0) / 200
    assert res is not None and res.tables[("s", "t")].consistency is Consistency.CONSISTENT
    assert per_call < 0.002, per_call
