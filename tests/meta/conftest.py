"""Fixtures for metadata tests: private databases on the shared backends, configs, a spare server."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import pytest

from meta.config import Config, parse_config

_seq = itertools.count(1)


@dataclass
class MetaEnv:
    """Two servers and, on each, three private databases playing db1, db2, db3."""

    s1: Any
    s2: Any
    db: dict[str, str]   # "db1" -> private name

    # DESIGN.md §2 layout: dn1 s1/db1, dn2 s2/db1, dn3 s1/db2, dn4 s2/db2, dn5 s1/db3
    NODES = {"dn1": ("g1", "db1"), "dn2": ("g2", "db1"), "dn3": ("g1", "db2"),
             "dn4": ("g2", "db2"), "dn5": ("g1", "db3")}

    def server_of(self, node: str) -> Any:
        return self.s1 if self.NODES[node][0] == "g1" else self.s2

    def database_of(self, node: str) -> str:
        return self.db[self.NODES[node][1]]

    def run(self, node: str, *statements: str) -> None:
        """Run statements directly on a shardingNode's database."""
        self.server_of(node).execute_many(statements, self.database_of(node))

    def run_on(self, nodes: Sequence[str], *statements: str) -> None:
        for n in nodes:
            self.run(n, *statements)

    def show_create(self, node: str, table: str) -> str:
        return self.server_of(node).query(f"SHOW CREATE TABLE `{table}`", self.database_of(node))[0][1]

    def config(self, schemas: dict[str, Any], *, extra_groups: dict[str, Any] | None = None,
               extra_nodes: dict[str, Any] | None = None) -> Config:
        """A Config in DESIGN.md §2 shape over the two servers and the private databases."""
        groups = {
            "g1": {"host": self.s1.host, "port": self.s1.port, "user": "root", "password": ""},
            "g2": {"host": self.s2.host, "port": self.s2.port, "user": "root", "password": ""},
            **(extra_groups or {}),
        }
        nodes = {n: {"db_group": g, "database": self.db[d]} for n, (g, d) in self.NODES.items()}
        nodes.update(extra_nodes or {})
        raw = {
            "users": [{"name": "test", "password": "111111", "schemas": list(schemas)}],
            "manager_users": [{"name": "root", "password": "111111"}],
            "db_groups": groups,
            "sharding_nodes": nodes,
            "functions": {
                "hash-two": {"type": "hash", "partition_count": [2], "partition_length": [1]},
                "hash-four": {"type": "hash", "partition_count": [4], "partition_length": [1]},
            },
            "schemas": schemas,
        }
        return parse_config(raw)


@pytest.fixture
def meta_env(backends: Any) -> Iterator[MetaEnv]:
    """Fresh private databases for one test, dropped afterwards (other tests share the servers)."""
    s1, s2 = backends[0], backends[1]
    tag = f"pm{os.getpid()}_{next(_seq)}"
    db = {d: f"{tag}_{d}" for d in ("db1", "db2", "db3")}
    for s in (s1, s2):
        s.create_databases(*db.values())
    try:
        yield MetaEnv(s1, s2, db)
    finally:
        for s in (s1, s2):
            try:
                s.execute_many([f"DROP DATABASE IF EXISTS `{d}`" for d in db.values()])
            except Exception:
                pass


@pytest.fixture(scope="module")
def spare_server() -> Iterator[Any]:
    """A third server of our own, to stop and pause without disturbing the shared backends."""
    from harness import MariaDBServer  # tests/ is on sys.path (tests/conftest.py)

    s = MariaDBServer("meta-spare")
    s.start()
    s.create_databases("spare_db")
    try:
        yield s
    finally:
        s.cleanup()
