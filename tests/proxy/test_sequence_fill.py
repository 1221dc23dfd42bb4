"""Sans-I/O: how INSERTs into a table with an increment_column are rewritten, and the local sequence file.

The store here is an in-memory stand-in for ZooKeeper/the file (the real ones are exercised by
tests/proxy/test_sequences.py and tests/zk/test_sequences_cluster.py); the SQL is routed by the real
router afterwards, so the filled values decide the nodes.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import types
from typing import Any

import pytest

from meta.config import parse_config
from meta.errors import NotSupported, ProxyError
from meta.sequence_file import SequenceFile
from proxy.plan.router import Router
from proxy.exec.sequence import Sequences

from test_router import EXAMPLE

COLUMNS = {("schema1", "sharding_4_t1"): ("id", "name", "n")}


class MemoryStore:
    """Hands out [next, next + n), like the real stores, from a dict."""

    def __init__(self) -> None:
        self.next: dict[str, int] = {}

    async def reserve(self, key: str, n: int, first: int | None) -> int | None:
        if key not in self.next:
            if first is None:
                return None
            self.next[key] = first
        lo = self.next[key]
        self.next[key] = lo + n
        return lo

    async def raise_to(self, key: str, value: int) -> None:
        if key in self.next and self.next[key] < value:
            self.next[key] = value


def _sequences(block: int = 10) -> tuple[Sequences, Router]:
    raw = copy.deepcopy(EXAMPLE)
    raw["server"]["sequence_block"] = block
    raw["schemas"]["schema1"]["tables"]["sharding_4_t1"]["increment_column"] = "id"
    cfg = parse_config(raw)
    router = Router(cfg, None, lambda s, t: COLUMNS.get((s, t)))
    server = types.SimpleNamespace(config=cfg, cluster=None, router=router,
                                   table_columns=lambda s, t: COLUMNS.get((s, t)))
    seqs = Sequences(server)  # type: ignore[arg-type]
    seqs.store = MemoryStore()
    seqs.store.next["schema1.sharding_4_t1"] = 1
    return seqs, router


def _fill(seqs: Sequences, sql: str, sql_mode: str = "") -> Any:
    session = types.SimpleNamespace(schema="schema1", vars={"sql_mode": sql_mode} if sql_mode else {},
                                    read_only=False, grants=None, user="test")
    return asyncio.run(seqs.fill(session, sql))  # type: ignore[arg-type]


@pytest.mark.parametrize("sql, filled", [
    ("INSERT INTO sharding_4_t1 (name) VALUES ('a'), ('b')",
     "INSERT INTO sharding_4_t1 (`id`, name) VALUES (1, 'a'), (2, 'b')"),
    ("insert into sharding_4_t1(name,n) values('a',1) returning id",
     "insert into sharding_4_t1(`id`, name,n) values(1, 'a',1) returning id"),
    ("INSERT INTO sharding_4_t1 () VALUES ()", "INSERT INTO sharding_4_t1 (`id`) VALUES (1)"),
    ("INSERT INTO sharding_4_t1 (id, name) VALUES (NULL, 'a'), (0, 'b'), (DEFAULT, 'c'), ('0', 'd')",
     "INSERT INTO sharding_4_t1 (id, name) VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')"),
    ("INSERT INTO sharding_4_t1 (name, id) VALUES ('a', 7), ('b', NULL)",
     "INSERT INTO sharding_4_t1 (name, id) VALUES ('a', 7), ('b', 8)"),
    ("INSERT INTO sharding_4_t1 VALUES (NULL, 'a', 1)", "INSERT INTO sharding_4_t1 VALUES (1, 'a', 1)"),
    ("INSERT INTO schema1.sharding_4_t1 SET name = 'a', n = 2",
     "INSERT INTO schema1.sharding_4_t1 SET name = 'a', n = 2, `id` = 1"),
    ("INSERT INTO sharding_4_t1 SET id = NULL, name = 'a'", "INSERT INTO sharding_4_t1 SET id = 1, name = 'a'"),
    ("REPLACE sharding_4_t1 (name) VALUE ('a')", "REPLACE sharding_4_t1 (`id`, name) VALUE (1, 'a')"),
    ("INSERT INTO sharding_4_t1 (name) VALUES ('it''s (1, 2)')",
     "INSERT INTO sharding_4_t1 (`id`, name) VALUES (1, 'it''s (1, 2)')"),
])
def test_rows_get_values(sql: str, filled: str) -> None:
    seqs, router = _sequences()
    got = _fill(seqs, sql)
    assert got is not None and got.sql == filled
    plan = router.route(got.sql, "schema1")
    assert plan.kind in ("insert", "replace") and plan.targets


def test_explicit_values_are_kept_and_move_the_sequence() -> None:
    seqs, router = _sequences(block=10)
    assert _fill(seqs, "INSERT INTO sharding_4_t1 (id, name) VALUES (5, 'a')") is None
    assert _fill(seqs, "INSERT INTO sharding_4_t1 (id, name) VALUES (0, 'a')", "NO_AUTO_VALUE_ON_ZERO") is None
    first = _fill(seqs, "INSERT INTO sharding_4_t1 (name) VALUES ('b')")
    assert first.first == 6   # above the explicit 5, as MySQL's counter
    assert _fill(seqs, "INSERT INTO sharding_4_t1 (id, name) VALUES (500, 'a')") is None
    assert _fill(seqs, "INSERT INTO sharding_4_t1 (name) VALUES ('b')").first == 501
    # the rows route by the filled ids: 501 -> dn2 (hash-four: 501 mod 4 = 1)
    assert [t.node for t in router.route("INSERT INTO sharding_4_t1 (`id`, name) VALUES (501, 'b')",
                                         "schema1").targets] == ["dn2"]


def test_values_follow_each_other_across_blocks() -> None:
    seqs, _ = _sequences(block=3)
    assert _fill(seqs, "INSERT INTO sharding_4_t1 (name) VALUES ('a'), ('b')").first == 1
    got = _fill(seqs, "INSERT INTO sharding_4_t1 (name) VALUES ('c'), ('d')")
    assert got.first == 4 and got.sql.endswith("(4, 'c'), (5, 'd')")   # 3 left over: too few for two rows
    got = _fill(seqs, "INSERT INTO sharding_4_t1 (name) VALUES " + ", ".join(["('x')"] * 7))
    assert got.first == 7 and "(13, 'x')" in got.sql


@pytest.mark.parametrize("sql, code", [
    ("INSERT INTO sharding_4_t1 (id, name) VALUES (1 + 1, 'a')", 1235),
    ("INSERT INTO sharding_4_t1 (id, name) VALUES ('abc', 'a')", 1235),
    ("INSERT INTO sharding_4_t1 (name) SELECT name FROM sharding_4_t1", 1235),
    ("INSERT INTO sharding_4_t1 (name) VALUES ('a') ON DUPLICATE KEY UPDATE name = 'b'", 1235),
    ("INSERT IGNORE INTO sharding_4_t1 (name) VALUES ('a'), ('b')", 1235),
    ("INSERT INTO sharding_4_t1 (name, n, id) VALUES ('a', 1, NULL), ('b')", 1136),
])
def test_what_cannot_be_filled_exactly_is_refused(sql: str, code: int) -> None:
    seqs, _ = _sequences()
    with pytest.raises(ProxyError) as e:
        _fill(seqs, sql)
    assert e.value.code == code, e.value.message
    assert not isinstance(e.value, NotSupported) or "sharding_4_t1" in e.value.message


def test_other_tables_are_left_alone() -> None:
    seqs, _ = _sequences()
    assert _fill(seqs, "INSERT INTO sharding_2_t1 (name) VALUES ('a')") is None
    assert _fill(seqs, "INSERT INTO nosuch (name) VALUES ('a')") is None


def test_sequence_file_survives_restarts_and_concurrent_writers(tmp_path: Any) -> None:
    key = "schema1.t"
    first = SequenceFile(tmp_path)
    assert asyncio.run(first.reserve(key, 5, None)) is None          # no state yet: the caller finds a start
    assert asyncio.run(first.reserve(key, 5, 10)) == 10
    again = SequenceFile(tmp_path)                                      # a restart reads the file
    assert asyncio.run(again.reserve(key, 5, 1)) == 15
    asyncio.run(again.raise_to(key, 100))
    assert asyncio.run(again.reserve(key, 1, None)) == 100
    got: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        store = SequenceFile(tmp_path)   # each with its own descriptor: the flock serialises them
        for _ in range(20):
            lo = asyncio.run(store.reserve(key, 3, None))
            with lock:
                got.extend(range(lo, lo + 3))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(got) == 240 and len(set(got)) == 240 and min(got) == 101


def test_inserts_with_nothing_to_fill_may_take_the_fast_path() -> None:
    seqs, _ = _sequences(block=10)
    session = types.SimpleNamespace(schema="schema1", vars={}, read_only=False, grants=None, user="test")
    explicit = "INSERT INTO sharding_4_t1 (id, name) VALUES (1, 'a')"
    assert not seqs.nothing_to_fill(session, explicit)   # no block held yet: 1 might move the sequence
    assert _fill(seqs, "INSERT INTO sharding_4_t1 (name) VALUES ('a')").first == 1   # holds [1, 11) now
    assert seqs.nothing_to_fill(session, explicit)       # below the block: nothing to do
    assert not seqs.nothing_to_fill(session, "INSERT INTO sharding_4_t1 (id, name) VALUES (30, 'a')")
    assert not seqs.nothing_to_fill(session, "INSERT INTO sharding_4_t1 (id, name) VALUES (NULL, 'a')")
    assert not seqs.nothing_to_fill(session, "INSERT INTO sharding_4_t1 (name) VALUES ('a')")
    assert not seqs.nothing_to_fill(session, "INSERT INTO sharding_4_t1 (id) VALUES (1 + 1)")
    assert seqs.nothing_to_fill(session, "INSERT INTO sharding_2_t1 (name) VALUES ('a')")
