"""Registry copy-on-write and versions; TableMeta lazy parsing and memory footprint."""

from __future__ import annotations

import re
import threading
import time
import tracemalloc
from types import MappingProxyType

from meta.config import parse_config
from meta.consistency import Consistency, judge
from meta.loader import LoadResult, LoadScope
from meta.model import KIND_DEFAULT, TableMeta, _parse_normalized, parse_create
from meta.registry import MetaChange, Registry

RAW = {
    "users": [{"name": "test", "password": "x", "schemas": ["schema1", "schema2"]}],
    "manager_users": [{"name": "root", "password": "x"}],
    "db_groups": {"g1": {"host": "127.0.0.1", "port": 1, "user": "root"},
                  "g2": {"host": "127.0.0.1", "port": 2, "user": "root"}},
    "sharding_nodes": {"dn1": {"db_group": "g1", "database": "db1"},
                       "dn2": {"db_group": "g2", "database": "db1"},
                       "dn5": {"db_group": "g1", "database": "db3"}},
    "schemas": {"schema1": {"default_node": "dn5",
                            "tables": {"test": {"type": "global", "nodes": ["dn1", "dn2"]},
                                       "lost": {"type": "global", "nodes": ["dn1", "dn2"]}}},
                "schema2": {"tables": {"sing": {"type": "single", "nodes": ["dn1"]}}}},
}
CONFIG = parse_config(RAW)


def ddl(table: str, extra: str = "") -> str:
    return (f"CREATE TABLE `{table}` (\n  `id` int(11) NOT NULL,\n  `v` varchar(10) DEFAULT NULL,{extra}\n"
            f"  PRIMARY KEY (`id`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")


def meta(schema: str, table: str, nodes: tuple[str, ...], texts: dict, kind: str = "global",
         unknown: dict | None = None, now: float = 1_700_000_000.0) -> TableMeta:
    v = judge(nodes, texts, unknown or {})
    return TableMeta(schema, table, kind, nodes, texts, v.structure, v.state, now, 0,
                     MappingProxyType(unknown or {}))


def full_result(now: float = 1_700_000_000.0, extra_default: bool = True) -> LoadResult:
    t = {
        ("schema1", "test"): meta("schema1", "test", ("dn1", "dn2"),
                                  {"dn1": ddl("test"), "dn2": ddl("test")}, now=now),
        ("schema1", "lost"): meta("schema1", "lost", ("dn1", "dn2"), {"dn1": None, "dn2": None},
                                  now=now),
        ("schema2", "sing"): meta("schema2", "sing", ("dn1",), {"dn1": ddl("sing")}, "single",
                                  now=now),
    }
    if extra_default:
        t[("schema1", "dflt")] = meta("schema1", "dflt", ("dn5",), {"dn5": ddl("dflt")},
                                      KIND_DEFAULT, now=now)
    return LoadResult(LoadScope("all"), t, {}, {}, now, 0.1)


def test_apply_full_load_and_reads() -> None:
    reg = Registry(CONFIG)
    assert reg.version == 0 and reg.last_load_time is None and reg.last_load_time_text() is None
    assert reg.apply(full_result()) == 1
    assert reg.get("schema1", "TEST").structure == ddl("test")
    assert reg.get("schema1", "lost") is None               # no structure: see test_unusable_...
    assert reg.record("schema1", "lost").consistency is Consistency.LOST
    assert reg.get("schema1", "nope") is None
    assert reg.tables_of("schema1") == ["dflt", "test"]   # "lost" is on no node: SHOW TABLES leaves it out
    assert reg.tables_of("schema2") == ["sing"]
    assert re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d", reg.last_load_time_text())
    assert reg.get("schema1", "test").version == 1


def test_unusable_tells_missing_everywhere_from_missing_somewhere_and_not_loaded() -> None:
    """1146 as MySQL says it when every node answered without the table; DBLE's 3009 when some node
    lacks it or could not be asked; nothing for a table every node has."""
    reg = Registry(CONFIG)
    assert reg.unusable("schema1", "test").code == 3009          # before any load: not loaded
    reg.apply(full_result())
    assert reg.unusable("schema1", "TEST") is None
    lost = reg.unusable("schema1", "lost")
    assert (lost.code, lost.sqlstate, lost.message) == (1146, "42S02", "Table 'schema1.lost' doesn't exist")
    partial = meta("schema1", "lost", ("dn1", "dn2"), {"dn1": ddl("lost"), "dn2": None})
    unknown = meta("schema1", "test", ("dn1", "dn2"), {"dn1": None}, unknown={"dn2": "timed out"})
    reg.replace_tables([partial, unknown])
    assert reg.get("schema1", "lost") is not None                # a structure, but dn2 lacks the table
    for table in ("lost", "test"):
        err = reg.unusable("schema1", table)
        assert (err.code, err.message) == (3009, f"Table meta 'schema1.{table}' is lost,PLEASE reload @@metadata")


def test_tables_of_lists_configured_before_any_load() -> None:
    assert Registry(CONFIG).tables_of("schema1") == ["lost", "test"]


def test_copy_on_write_snapshot_is_stable_and_versions_bump() -> None:
    reg = Registry(CONFIG)
    reg.apply(full_result())
    held = reg.snapshot
    before = dict(held.tables)
    changed = meta("schema1", "test", ("dn1", "dn2"),
                   {"dn1": ddl("test", "\n  `w` int(11),"), "dn2": ddl("test", "\n  `w` int(11),")})
    v2 = reg.replace_tables([changed])
    assert v2 == 2 and reg.version == 2
    assert dict(held.tables) == before                          # the reader's view did not move
    assert held.tables[("schema1", "test")].structure == ddl("test")
    assert "`w`" in reg.get("schema1", "test").structure
    assert reg.get("schema1", "test").version == 2
    assert reg.get("schema2", "sing").version == 1              # untouched tables keep theirs
    v3 = reg.apply(full_result())
    assert v3 == 3 and reg.get("schema2", "sing").version == 3


def test_partial_scopes_replace_only_their_tables() -> None:
    reg = Registry(CONFIG)
    reg.apply(full_result())
    # one table reload; the requested default-node table no longer exists: it is dropped
    res = LoadResult(LoadScope("tables", tables=frozenset({("schema1", "test"), ("schema1", "dflt")})),
                     {("schema1", "test"): meta("schema1", "test", ("dn1", "dn2"),
                                                {"dn1": ddl("test"), "dn2": None})},
                     {}, {}, time.time(), 0.01)
    changes: list[MetaChange] = []
    reg.add_listener(changes.append)
    reg.apply(res)
    assert reg.get("schema1", "test").consistency is Consistency.INCONSISTENT
    assert reg.record("schema1", "dflt") is None
    assert reg.get("schema2", "sing").version == 1
    assert changes[-1].upserted == (("schema1", "test"),)
    assert changes[-1].dropped == (("schema1", "dflt"),) and not changes[-1].full
    # a schema reload drops the schema's tables it did not find, leaves other schemas alone
    reg.apply(full_result())
    res = LoadResult(LoadScope("schema", schema="schema1"),
                     {("schema1", "test"): meta("schema1", "test", ("dn1", "dn2"),
                                                {"dn1": ddl("test"), "dn2": ddl("test")})},
                     {}, {}, time.time(), 0.01)
    reg.apply(res)
    assert reg.snapshot.by_schema["schema1"] == ("test",)
    assert reg.get("schema2", "sing") is not None


def test_unreachable_node_keeps_known_structure() -> None:
    reg = Registry(CONFIG)
    reg.apply(full_result(now=1000.0))
    down = {"dn1": "timed out after 1s", "dn2": "connect failed"}
    res = LoadResult(LoadScope("all"),
                     {("schema1", "test"): meta("schema1", "test", ("dn1", "dn2"), {}, unknown=down),
                      ("schema2", "sing"): meta("schema2", "sing", ("dn1",), {}, "single",
                                                unknown={"dn1": "down"})},
                     {}, {"schema1": "connect failed"}, 2000.0, 1.0)
    reg.apply(res)
    t = reg.get("schema1", "test")
    assert t is not None and t.structure == ddl("test")
    assert t.consistency is Consistency.UNKNOWN and dict(t.unknown) == down
    assert t.reload_time == 1000.0                               # not refreshed
    d = reg.get("schema1", "dflt")                               # default node not listed: kept
    assert d is not None and d.consistency is Consistency.UNKNOWN
    assert reg.record("schema1", "lost") is None                 # not in this load's result


def test_drop_listener_and_failing_listener() -> None:
    reg = Registry(CONFIG)
    seen: list[MetaChange] = []
    reg.add_listener(lambda c: (_ for _ in ()).throw(RuntimeError("bad listener")))
    remove = reg.add_listener(seen.append)
    reg.apply(full_result())
    assert seen[-1].full and seen[-1].version == 1
    v = reg.drop("schema1", "TEST")
    assert reg.get("schema1", "test") is None and seen[-1].dropped == (("schema1", "test"),)
    assert v == 2
    remove()
    reg.drop("schema2", "sing")
    assert len(seen) == 2


def test_readers_never_block_during_writes() -> None:
    reg = Registry(CONFIG)
    reg.apply(full_result())
    stop = threading.Event()
    errors: list[str] = []
    reads = [0]

    def reader() -> None:
        while not stop.is_set():
            m = reg.get("schema2", "sing")
            if m is None or m.structure != ddl("sing"):
                errors.append(repr(m))
            reads[0] += 1

    ts = [threading.Thread(target=reader) for _ in range(3)]
    for t in ts:
        t.start()
    for _ in range(200):
        reg.apply(full_result())
    # even while a writer holds the write lock, a read returns at once
    with reg._write:
        t0 = time.perf_counter()
        assert reg.get("schema2", "sing") is not None
        assert time.perf_counter() - t0 < 0.05
    stop.set()
    for t in ts:
        t.join()
    assert not errors and reads[0] > 0
    assert reg.version == 201


def test_lazy_parse_shared_by_identical_normalized_texts() -> None:
    _parse_normalized.cache_clear()
    a = ddl("p") + " AUTO_INCREMENT=5"
    m = meta("schema1", "p", ("dn1", "dn2"), {"dn1": ddl("p"), "dn2": ddl("p")})
    assert _parse_normalized.cache_info().currsize == 0          # nothing parsed during load
    assert m.columns[0].name == "id" and m.parsed.primary_key == ("id",)
    assert m.parsed.column("V").name == "v" and m.parsed.index_of("v") == 1
    parse_create(ddl("p"))
    info = _parse_normalized.cache_info()
    assert info.misses == 1 and info.hits >= 2
    assert parse_create(a.replace("DEFAULT CHARSET", "AUTO_INCREMENT=9 DEFAULT CHARSET")) is not None


def test_parse_falls_back_for_syntax_sqlglot_lacks() -> None:
    sql = ("CREATE TABLE `x` (\n  `id` int(10) unsigned NOT NULL AUTO_INCREMENT,\n"
           "  `g` int(11) GENERATED ALWAYS AS (`id` + 1) VIRTUAL,\n  PRIMARY KEY (`id`)\n"
           ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4\n PARTITION BY HASH (`id`)\nPARTITIONS 4")
    p = parse_create(sql)
    assert p.column_names == ("id", "g") and p.auto_increment == "id"
    weird = "CREATE TABLE `w` (\n  `a` int(11) NOT NULL,\n  `b` SOMETHINGODD(1,2,3) x y z\n) ENGINE=InnoDB"
    assert parse_create(weird).column_names[0] == "a"


def test_memory_of_40000_table_node_entries() -> None:
    """10,000 tables x 4 nodes with distinct texts stay far below the proxy's 300 MB budget."""
    nodes = ("dn1", "dn2", "dn3", "dn4")
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tables = {}
    for i in range(10_000):
        text = ddl(f"table_{i:05d}", "".join(f"\n  `col_{i}_{j}` bigint(20) DEFAULT NULL," for j in range(8)))
        texts = {n: text for n in nodes}                        # the loader interns per load
        tables[("schema1", f"table_{i:05d}")] = meta("schema1", f"table_{i:05d}", nodes, texts)
    reg = Registry(CONFIG)
    reg.apply(LoadResult(LoadScope("all"), tables, {}, {}, time.time(), 1.0))
    del tables
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert used < 40 * 2**20, f"{used / 2**20:.1f} MiB"


def test_reload_keeps_what_a_ddl_published_while_it_was_loading() -> None:
    """A long reload read `test` before a DDL changed it; the DDL's refresh, published meanwhile, wins."""
    reg = Registry(CONFIG)
    reg.apply(full_result())
    base = reg.version                                            # the reload starts here
    changed = {"dn1": ddl("test", "\n  `w` int(11),"), "dn2": ddl("test", "\n  `w` int(11),")}
    refreshed = LoadResult(LoadScope("tables", tables=frozenset({("schema1", "test")})),
                           {("schema1", "test"): meta("schema1", "test", ("dn1", "dn2"), changed)},
                           {}, {}, time.time(), 0.01)
    reg.apply(refreshed, loaded=False)                            # the DDL's refresh
    stale = full_result()                                         # what the reload read before the DDL
    reg.apply(stale, base_version=base)
    assert "`w`" in reg.get("schema1", "test").structure
    assert reg.get("schema2", "sing").version == reg.version      # the rest is the reload's
    # without a DDL in between, a reload replaces everything as usual
    base = reg.version
    reg.apply(full_result(), base_version=base)
    assert "`w`" not in reg.get("schema1", "test").structure
