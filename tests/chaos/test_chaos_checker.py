"""The chaos checker itself: its parsers, and an overlap detector that really sees overlapping DDL."""

from __future__ import annotations

import threading
import time
from typing import Iterator

import pytest
from chaos_check import Checker, ddl_table, extra_names, norm_sql
from chaos_env import SLOW_LOG_ARGS, ChaosEnv
from chaos_workload import copying
from harness import MariaDBServer

CREATE = """CREATE TABLE `chaos_t1` (
  `id` bigint(20) NOT NULL,
  `k` int(11) NOT NULL,
  `v` int(11) NOT NULL DEFAULT 0,
  `c12` int(11) DEFAULT NULL,
  PRIMARY KEY (`id`),
  KEY `ix7` (`k`),
  UNIQUE KEY `ux9` (`k`,`v`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"""


def test_extra_names_are_the_workload_columns_and_indexes() -> None:
    assert extra_names(CREATE) == {"c12", "ix7", "ux9"}


@pytest.mark.parametrize("sql,table", [
    ("ALTER TABLE chaos_t1 ADD COLUMN c1 INT", "chaos_t1"),
    ("alter table `db1`.`chaos_g` drop index ix3", "chaos_g"),
    ("CREATE INDEX ix4 ON chaos_t2 (k)", "chaos_t2"),
    ("DROP INDEX IF EXISTS ix4 ON `chaos_t3`", "chaos_t3"),
    ("OPTIMIZE TABLE chaos_t1", None),
])
def test_ddl_table(sql: str, table: str | None) -> None:
    assert ddl_table(sql) == table


class _NoWorkload:
    class schema:  # noqa: N801 - stands in for SchemaModel
        ok_ddls: list = []

    def __init__(self, forced: set[str] | None = None) -> None:
        self.forced = forced or set()


class _NoFaults:
    records: list = []


@pytest.fixture
def logged_backend() -> Iterator[MariaDBServer]:
    """One MariaDB with the chaos run's slow-log settings and chaos_t1 in db1."""
    s = MariaDBServer("chaos-check", extra_args=SLOW_LOG_ARGS)
    try:
        s.start()
        s.create_databases("db1")
        s.query("CREATE TABLE chaos_t1 (id BIGINT PRIMARY KEY, k INT NOT NULL, v INT NOT NULL DEFAULT 0)",
                database="db1")
        yield s
    finally:
        s.cleanup()


def _overlaps(server: MariaDBServer, forced: set[str] | None = None) -> list[str]:
    env = ChaosEnv("selftest")
    env.backends = [server]
    checker = Checker(env, _NoWorkload(forced), _NoFaults(), lambda _m: None)
    checker.overlaps()
    return checker.violations


def test_sequential_alters_do_not_overlap(logged_backend: MariaDBServer) -> None:
    logged_backend.execute_many(["ALTER TABLE chaos_t1 ADD COLUMN c1 INT", "ALTER TABLE chaos_t1 ADD INDEX ix1 (k)",
                                 "DROP INDEX ix1 ON chaos_t1"], database="db1")
    assert _overlaps(logged_backend) == []


def test_two_alters_at_once_are_seen(logged_backend: MariaDBServer) -> None:
    """Hold the table's metadata lock, queue two ALTERs behind it, release: their intervals intersect."""
    holder = logged_backend.connect("db1")
    holder.begin()
    with holder.cursor() as cur:
        cur.execute("SELECT * FROM chaos_t1")   # an open transaction holds a shared metadata lock

    def alter(sql: str) -> None:
        logged_backend.query(sql, database="db1")

    threads = [threading.Thread(target=alter, args=(f"ALTER TABLE chaos_t1 ADD COLUMN c{i} INT",)) for i in (1, 2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30   # both ALTERs queued behind the lock before it goes
    while len(logged_backend.query("SELECT id FROM information_schema.PROCESSLIST WHERE info LIKE "
                                   "'ALTER TABLE chaos_t1 ADD COLUMN c%' AND state LIKE '%metadata lock%'")) < 2:
        assert time.monotonic() < deadline, "the two ALTERs never both waited on the metadata lock"
        time.sleep(0.05)
    holder.rollback()
    holder.close()
    for t in threads:
        t.join(30)
    found = _overlaps(logged_backend)
    assert len(found) == 1 and "DDL overlap on backend1.db1.chaos_t1" in found[0], found
    # the same overlap is allowed when an operator released the first DDL's lock with force
    assert _overlaps(logged_backend, forced={"ALTER TABLE chaos_t1 ADD COLUMN c1 INT"}) == []


def test_ddls_on_the_bigger_table_are_copying_alters() -> None:
    assert copying("chaos_t4", "ALTER TABLE chaos_t4 ADD COLUMN c1 INT") == \
        "ALTER TABLE chaos_t4 ADD COLUMN c1 INT, ALGORITHM=COPY"
    assert copying("chaos_t4", "CREATE INDEX ix2 ON chaos_t4 (k)") == "CREATE INDEX ix2 ON chaos_t4 (k) ALGORITHM=COPY"
    assert copying("chaos_t4", "DROP INDEX ix2 ON chaos_t4") == "DROP INDEX ix2 ON chaos_t4"   # 1064 with ALGORITHM
    assert copying("chaos_t1", "ALTER TABLE chaos_t1 ADD COLUMN c1 INT") == "ALTER TABLE chaos_t1 ADD COLUMN c1 INT"


def test_a_logged_ddl_matches_its_client_statement_without_pydbles_marker() -> None:
    # pydble appends `/* pydble-ddl:<id> */` to the DDL it runs on the nodes (found from outside by it)
    assert norm_sql("ALTER TABLE chaos_t3  ADD COLUMN c307 INT\n/* pydble-ddl:0f3a9c */") == \
        norm_sql("alter table chaos_t3 add column c307 int")
