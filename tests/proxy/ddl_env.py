"""A pydble process over private databases on the session backends, for DDL and manager-port tests.

Each test module gets its own proxy and its own copies of db1..db3 on both backends, so its DDL
cannot disturb other modules' tables (nor theirs its own). Helpers read the backends directly,
bypassing the proxy, to check what a DDL really did on every shardingNode.
"""

from __future__ import annotations

import copy
import itertools
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import pymysql
from pymysql.constants import CLIENT

from harness import MariaDBServer, ProxyProcess, free_port, proxy_config

ALL4 = ("dn1", "dn2", "dn3", "dn4")
# DESIGN.md §2 layout: shardingNode -> (index of the backend, logical database)
NODES = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2"), "dn5": (0, "db3")}
CHECK_FULL_COLUMNS = ["schema", "table", "reload_time", "table_structure", "consistent_in_sharding_nodes",
                      "consistent_in_memory"]   # DESIGN.md §4, exactly (check full @@metadata_nodes adds one)

_seq = itertools.count(1)


def extra_tables() -> dict[str, Any]:
    """Configured tables beyond DESIGN.md's example, so tests need not share table names."""
    shard4 = {"type": "sharding", "nodes": list(ALL4), "function": "hash-four", "column": "id"}
    return {
        "schema1": {
            "shard_a": dict(shard4), "shard_b": dict(shard4), "shard_c": dict(shard4), "shard_d": dict(shard4),
            "glob_a": {"type": "global", "nodes": list(ALL4)},
            "glob_b": {"type": "global", "nodes": ["dn1", "dn2"]},
            "never_created": {"type": "global", "nodes": ["dn1", "dn2"]},
        },
        "schema2": {"sing_a": {"type": "single", "nodes": ["dn2"]}},
    }


@dataclass
class MetaProxyEnv:
    """A proxy and the two backends behind it, with the node -> private database mapping."""

    proxy: ProxyProcess
    servers: Sequence[MariaDBServer]
    dbs: dict[str, str]                                  # "db1" -> private database name
    nodes: dict[str, tuple[int, str]] = field(default_factory=lambda: dict(NODES))

    # -- the backends, directly ---------------------------------------------------------------
    def server_of(self, node: str) -> MariaDBServer:
        """The backend server holding a shardingNode."""
        return self.servers[self.nodes[node][0]]

    def database_of(self, node: str) -> str:
        """The private database that plays a shardingNode."""
        return self.dbs[self.nodes[node][1]]

    def direct(self, node: str, **kw: Any) -> Any:
        """A PyMySQL connection straight to a shardingNode's database (multi-statements allowed)."""
        kw.setdefault("client_flag", CLIENT.MULTI_STATEMENTS)
        return self.server_of(node).connect(self.database_of(node), **kw)

    def run(self, node: str, *statements: str) -> None:
        """Run statements directly on a shardingNode's database."""
        self.server_of(node).execute_many(statements, self.database_of(node))

    def run_on(self, nodes: Sequence[str], *statements: str) -> None:
        """Run statements directly on several shardingNodes."""
        for n in nodes:
            self.run(n, *statements)

    def rows_on(self, node: str, sql: str) -> list[tuple[Any, ...]]:
        """Rows of a query run directly on a shardingNode."""
        return self.server_of(node).query(sql, self.database_of(node))

    def show_create(self, node: str, table: str) -> str | None:
        """The table's CREATE text on one node, None if it is not there."""
        try:
            return self.rows_on(node, f"SHOW CREATE TABLE `{table}`")[0][1]
        except pymysql.MySQLError as e:
            if e.args[0] == 1146:
                return None
            raise

    def columns_on(self, node: str, table: str) -> list[str]:
        """Column names of a table on one node."""
        return [r[0] for r in self.rows_on(node, f"SHOW COLUMNS FROM `{table}`")]

    def indexes_on(self, node: str, table: str) -> set[str]:
        """Index names of a table on one node."""
        return {r[2] for r in self.rows_on(node, f"SHOW INDEX FROM `{table}`")}

    def drop_everywhere(self, table: str, nodes: Sequence[str] = tuple(NODES)) -> None:
        """Drop a table on the backends directly (test set-up), then tell the proxy."""
        self.run_on(nodes, f"DROP TABLE IF EXISTS `{table}`")

    def reset(self, table: str, schema: str = "schema1") -> None:
        """Drop a table on every backend directly and make the proxy forget it."""
        self.drop_everywhere(table)
        self.reload(f"schema='{schema}' and table='{table}'")

    # -- the proxy ----------------------------------------------------------------------------
    def client(self, database: str | None = "schema1", **kw: Any) -> Any:
        """A PyMySQL connection to the proxy's client port."""
        return self.proxy.connect(database=database, **kw)

    def sql(self, sql: str, database: str | None = "schema1") -> list[tuple[Any, ...]]:
        """One statement through the client port on a short-lived connection."""
        return self.proxy.query(sql, database=database)

    def error_of(self, sql: str, database: str | None = "schema1") -> tuple[int, str]:
        """The (code, message) a statement fails with through the client port."""
        try:
            self.sql(sql, database)
        except pymysql.MySQLError as e:
            return e.args[0], str(e.args[1])
        raise AssertionError(f"{sql!r} did not fail")

    def manager(self) -> Any:
        """A PyMySQL connection to the proxy's manager port."""
        return self.proxy.manager()

    def mq(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """A manager command: (column names, rows); an OK gives ([], [])."""
        conn = self.manager()
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                cols = [d[0] for d in cur.description] if cur.description else []
                return cols, list(cur.fetchall())
        finally:
            conn.close()

    def manager_error(self, sql: str) -> tuple[int, str]:
        """The (code, message) a manager command fails with."""
        try:
            self.mq(sql)
        except pymysql.MySQLError as e:
            return e.args[0], str(e.args[1])
        raise AssertionError(f"{sql!r} did not fail")

    def check_full(self, where: str = "") -> dict[tuple[str, str], dict[str, Any]]:
        """`check full @@metadata [where ...]` as {(schema, table): row as a dict}."""
        cols, rows = self.mq("check full @@metadata" + (f" where {where}" if where else ""))
        assert cols == CHECK_FULL_COLUMNS
        return {(r[0], r[1]): dict(zip(cols, r)) for r in rows}

    def row(self, schema: str, table: str) -> dict[str, Any]:
        """One table's `check full @@metadata` row."""
        got = self.check_full(f"schema='{schema}' and table='{table}'")
        assert list(got) == [(schema, table)], got
        return got[(schema, table)]

    def reload(self, where: str = "") -> None:
        """`reload @@metadata [where ...]`, expecting its OK."""
        cols, rows = self.mq("reload @@metadata" + (f" where {where}" if where else ""))
        assert (cols, rows) == ([], [])

    def show_ddl(self) -> list[dict[str, Any]]:
        """`show @@ddl` rows as dicts."""
        cols, rows = self.mq("show @@ddl")
        return [dict(zip(cols, r)) for r in rows]

    def wait_ddl(self, table: str, present: bool = True, timeout: float = 15.0) -> list[dict[str, Any]]:
        """Wait (bounded) until `show @@ddl` does (or no longer does) list a DDL on the table."""
        deadline = time.monotonic() + timeout
        while True:
            rows = [r for r in self.show_ddl() if r["table"] == table]
            if bool(rows) == present:
                return rows
            if time.monotonic() > deadline:
                raise AssertionError(f"show @@ddl {'never' if present else 'still'} lists {table}: {rows}")
            time.sleep(0.05)

    def tables_through_proxy(self, database: str = "schema1", full: bool = False) -> list[tuple[Any, ...]]:
        """SHOW [FULL] TABLES through the client port."""
        return self.sql("SHOW FULL TABLES" if full else "SHOW TABLES", database)


class Background:
    """A statement run on its own thread (a DDL that will wait on a backend lock)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.seconds = 0.0
        self._t = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._t.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        t0 = time.monotonic()
        try:
            self.result = fn()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.error = e
        finally:
            self.seconds = time.monotonic() - t0

    def join(self, timeout: float = 30.0) -> "Background":
        """Wait (bounded) for the statement to finish."""
        self._t.join(timeout)
        assert not self._t.is_alive(), "background statement did not finish"
        return self

    @property
    def done(self) -> bool:
        """Whether the statement has finished."""
        return not self._t.is_alive()


def start_env(servers: Sequence[MariaDBServer], *, tag: str = "ddl", tables: dict[str, Any] | None = None,
              server_extra: dict[str, Any] | None = None,
              mutate: Callable[[dict[str, Any]], None] | None = None, start: bool = True) -> MetaProxyEnv:
    """Private databases on both servers and a proxy over them (DESIGN.md §2 plus extra tables);
    `mutate` may change the config dict (more db_groups, nodes, tables) before the proxy starts."""
    name = f"{tag}{os.getpid()}_{next(_seq)}"
    dbs = {d: f"{name}_{d}" for d in ("db1", "db2", "db3")}
    for s in servers[:2]:
        s.create_databases(*dbs.values())
    cfg = copy.deepcopy(proxy_config(list(servers), free_port(), free_port(), instance=f"pydble-{tag}"))
    for node, spec in cfg["sharding_nodes"].items():
        spec["database"] = dbs[spec["database"]]
    cfg["server"]["backend_timeout_s"] = 20
    cfg["server"].update(server_extra or {})
    for schema, extra in (tables if tables is not None else extra_tables()).items():
        cfg["schemas"][schema]["tables"].update(extra)
    if mutate is not None:
        mutate(cfg)
    proxy = ProxyProcess(cfg, name=f"proxy-{tag}", release_ports=True)
    try:
        if start:
            proxy.start()
    except BaseException:
        proxy.cleanup()
        drop_databases(servers, dbs)
        raise
    return MetaProxyEnv(proxy, servers, dbs)


def drop_databases(servers: Sequence[MariaDBServer], dbs: dict[str, str]) -> None:
    """Drop the private databases on both servers (best effort)."""
    for s in servers[:2]:
        try:
            s.execute_many([f"DROP DATABASE IF EXISTS `{d}`" for d in dbs.values()])
        except Exception:  # noqa: BLE001 - best effort; the servers go away with the session
            pass


def env_fixture(servers: Sequence[MariaDBServer], *, keep_databases: bool = False,
                **kw: Any) -> Iterator[MetaProxyEnv]:
    """Body of a module-scoped fixture: start, yield, always stop the proxy. The private databases
    are dropped too unless keep_databases (thousands of tables take seconds to drop, and the
    session's backends and their data directories go away at the end anyway)."""
    env = start_env(servers, **kw)
    try:
        yield env
    finally:
        env.proxy.cleanup()
        if not keep_databases:
            drop_databases(servers, env.dbs)
