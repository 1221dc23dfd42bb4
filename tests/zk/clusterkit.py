"""Helpers for cluster tests: three instances on one ZooKeeper root, and ways to look inside."""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import pymysql
from harness import cluster_section, free_port, proxy_config

from meta.config import parse_config
from meta.locks import MetaLocks
from meta.registry import Registry
from zk.aio import Zk
from zk.cluster import Cluster as ZkCluster

SESSION_TIMEOUT_S = 3
ACK_TIMEOUT_S = 6
TABLE = "sharding_4_t1"   # a 4-node sharding table of the example config


class Cluster:
    """Three proxies sharing one ZooKeeper root; helpers to drive and inspect them."""

    def __init__(self, make: Callable[..., Any], zookeeper: Any, root: str, backends: list[Any],
                 session_timeout_s: float = SESSION_TIMEOUT_S, ack_timeout_s: float = ACK_TIMEOUT_S) -> None:
        self.make = make
        self.zookeeper = zookeeper
        self.root = root
        self.backends = backends
        self.section = cluster_section(zookeeper, root=root, session_timeout_s=session_timeout_s,
                                       ack_timeout_s=ack_timeout_s)
        self.proxies: list[Any] = []

    def start(self, n: int = 3, env: dict[int, dict[str, str]] | None = None,
              server: dict[str, Any] | None = None) -> list[Any]:
        """Start n instances dble-1..dble-n (env per index, 0-based; `server`: [server] settings for all)."""
        for i in range(n):
            config = None
            if server:
                config = proxy_config(self.backends, free_port(), free_port(), instance=f"dble-{i + 1}",
                                      cluster=self.section)
                config["server"].update(server)
            self.proxies.append(self.make(config, instance=f"dble-{i + 1}", cluster=self.section,
                                          env=(env or {}).get(i)))
        return self.proxies

    def zk(self) -> Any:
        """A kazoo client (caller stops it)."""
        return self.zookeeper.client()

    def base(self) -> str:
        return f"{self.root}/cluster-1"

    def zk_children(self, path: str) -> list[str]:
        c = self.zk()
        try:
            return sorted(c.get_children(f"{self.base()}/{path}")) if c.exists(f"{self.base()}/{path}") else []
        finally:
            c.stop()
            c.close()


def full_meta(proxy: Any, table: str = TABLE, schema: str = "schema1") -> tuple[Any, ...]:
    """The `check full @@metadata` row of one table on one instance."""
    conn = proxy.manager()
    try:
        with conn.cursor() as cur:
            cur.execute(f"check full @@metadata where schema='{schema}' and table='{table}'")
            rows = cur.fetchall()
    finally:
        conn.close()
    assert len(rows) == 1, rows
    row = rows[0]
    return (*row[:4], int(row[4]), int(row[5]))  # the two flags as numbers, whatever their column type


def backend_structure(backends: list[Any], table: str = TABLE) -> set[str]:
    """The CREATE TABLE texts of a 4-node table as the backends really have them (AUTO_INCREMENT aside)."""
    texts = set()
    for server in backends:
        for db in ("db1", "db2"):
            rows = server.query(f"SHOW CREATE TABLE `{table}`", database=db)
            texts.add(rows[0][1])
    return texts


def reset_table(backends: list[Any], table: str = TABLE) -> None:
    """Start every test from a known physical state: the table on all 4 nodes, no extra columns."""
    for server in backends:
        for db in ("db1", "db2"):
            server.query(f"DROP TABLE IF EXISTS `{table}`", database=db)
            server.query(f"CREATE TABLE `{table}` (id INT PRIMARY KEY, v INT)", database=db)


def lock_table_on_backend(backends: list[Any], table: str = TABLE) -> Any:
    """Hold a metadata lock on one node so an ALTER through the proxy blocks there."""
    conn = backends[0].connect("db1")
    conn.autocommit(False)
    cur = conn.cursor()
    cur.execute(f"SELECT * FROM `{table}` LIMIT 1")  # an open transaction holds the MDL
    return conn


def show_ddl(proxy: Any) -> tuple[Any, ...]:
    """The rows of `show @@ddl` on one instance."""
    return tuple(proxy.manager_query("show @@ddl"))


def run_async(proxy: Any, sql: str) -> tuple[threading.Thread, dict[str, Any]]:
    """Run a statement in a thread; the dict gets 'ok' or 'error' when it returns."""
    out: dict[str, Any] = {}

    def go() -> None:
        try:
            conn = proxy.connect(read_timeout=60)
            try:
                with conn.cursor() as cur:
                    cur.execute(sql)
                out["ok"] = True
            finally:
                conn.close()
        except pymysql.MySQLError as e:
            out["error"] = e.args

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def wait_for(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll cond until truthy (bounded); fail the test naming what did not happen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


@asynccontextmanager
async def instance_and_other(zookeeper: Any, root: str, backends: list[Any],
                             refreshed: list[Any]) -> AsyncIterator[tuple[ZkCluster, Zk]]:
    """dble-2's Cluster on a session of its own (refreshes recorded, not run), and another session."""
    config = parse_config(proxy_config(backends, free_port(), free_port(), instance="dble-2",
                                       cluster=cluster_section(zookeeper, root=root)))

    async def refresh(keys: list[tuple[str, str]], texts: Any = None) -> None:
        refreshed.append(keys)

    async def load_all() -> None:
        pass

    c = ZkCluster(config, Registry(config), MetaLocks("dble-2"), load_all, refresh)
    c.zk = Zk(zookeeper.hosts, 10, asyncio.get_running_loop())
    await c.zk.start(10)
    other = Zk(zookeeper.hosts, 10, asyncio.get_running_loop())
    await other.start(10)
    try:
        for p in (c.paths.ddl, c.paths.history, c.paths.online):
            await c.zk.ensure_path(p)
        yield c, other
    finally:
        await c.zk.delete(root, recursive=True)
        await other.stop()
        await c.zk.stop()
