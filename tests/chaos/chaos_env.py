"""The private world of one chaos run: two MariaDB backends, one ZooKeeper, three pydble instances.

Nothing here is shared with the session fixtures: the run kills, pauses and stops these servers
at will. Backends log every DDL they execute to ``mysql.slow_log`` (see ``SLOW_LOG_ARGS``) so the
checker can see, on each backend's own clock, when each ALTER started and ended.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from harness import (
    MariaDBServer,
    ProxyProcess,
    ZooKeeperServer,
    cluster_section,
    free_port,
    proxy_config,
    start_all,
)

log = logging.getLogger("chaos")

SCHEMA = "schema1"
SHARDING_TABLES = ("chaos_t1", "chaos_t2", "chaos_t3", "chaos_t4")
GLOBAL_TABLE = "chaos_g"
TABLES = (*SHARDING_TABLES, GLOBAL_TABLE)
TABLE_NODES = ("dn1", "dn2", "dn3", "dn4")
NODE_PLACES = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2")}
CREATE_SQL = "CREATE TABLE `{t}` (id BIGINT PRIMARY KEY, k INT NOT NULL, v INT NOT NULL DEFAULT 0)"
# The bigger table: pre-filled rows (ids from BIG_BASE, each on its hash-four node) make its copying
# ALTERs (ALGORITHM=COPY) take seconds; the rows count as acknowledged inserts for the checker.
BIG_TABLE = "chaos_t4"
BIG_BASE = 1_000_000_000
BIG_ROWS_PER_NODE = 40_000
INSTANCES = ("chaos-1", "chaos-2", "chaos-3")

SESSION_TIMEOUT_S = 3.0
ACK_TIMEOUT_S = 5.0
BACKEND_TIMEOUT_S = 8.0
CONNECT_TIMEOUT_S = 2.0

# Only "admin" statements (ALTER TABLE, CREATE/DROP INDEX) reach the slow log, and all of them
# (long_query_time=0): a CSV table that survives restarts, written when a statement ends, with the
# statement's start time (microseconds) and its duration. The last option on the command line wins,
# so these override nothing else the harness passes.
SLOW_LOG_ARGS = ("--slow-query-log=ON", "--log-output=TABLE", "--long-query-time=0",
                 "--log-slow-admin-statements=ON", "--log-slow-filter=admin")


def chaos_config(backends: list[MariaDBServer], zk: ZooKeeperServer, root: str, instance: str) -> dict[str, Any]:
    """The harness example config plus the chaos tables, short cluster timeouts and bounded backends."""
    cfg = proxy_config(backends, free_port(), free_port(), instance=instance,
                       cluster=cluster_section(zk, root=root, session_timeout_s=SESSION_TIMEOUT_S,
                                               ack_timeout_s=ACK_TIMEOUT_S))
    cfg["server"]["backend_timeout_s"] = BACKEND_TIMEOUT_S
    for group in cfg["db_groups"].values():
        group["connect_timeout_s"] = CONNECT_TIMEOUT_S
    tables = cfg["schemas"][SCHEMA]["tables"]
    for t in SHARDING_TABLES:
        tables[t] = {"type": "sharding", "nodes": list(TABLE_NODES), "function": "hash-four", "column": "id"}
    tables[GLOBAL_TABLE] = {"type": "global", "nodes": list(TABLE_NODES)}
    return cfg


class ChaosEnv:
    """Starts, reaches into and tears down the servers of one run."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.root = f"/pydble-chaos-{tag}-{uuid.uuid4().hex[:8]}"
        self.backends: list[MariaDBServer] = []
        self.zk: ZooKeeperServer | None = None
        self.proxies: list[ProxyProcess] = []

    # -- life cycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Backends (with the chaos tables on every node), ZooKeeper, then the three instances."""
        self.backends = [MariaDBServer(f"chaos-b{i + 1}", extra_args=SLOW_LOG_ARGS) for i in range(2)]
        start_all(self.backends)
        for b in self.backends:
            b.create_databases("db1", "db2", "db3")
            for db in ("db1", "db2"):
                b.execute_many([f"DROP TABLE IF EXISTS `{t}`" for t in TABLES]
                               + [CREATE_SQL.format(t=t) for t in TABLES], database=db)
        self.fill_big()
        self.zk = ZooKeeperServer("chaos-zk")
        self.zk.start()
        for name in INSTANCES:
            p = ProxyProcess(chaos_config(self.backends, self.zk, self.root, name), name=name, release_ports=True)
            self.proxies.append(p)
            p.start(60)

    def cleanup(self) -> None:
        """Stop everything (proxies first); never raises."""
        for server in [*self.proxies, self.zk, *self.backends]:
            if server is None:
                continue
            try:
                server.cleanup()
            except Exception:  # noqa: BLE001 - best effort at the end of a run
                log.exception("cleanup of %s failed", server.name)

    def keep_logs(self, dest: Path) -> None:
        """Copy every server's logs to dest (for a post-mortem of a failed run)."""
        dest.mkdir(parents=True, exist_ok=True)
        for server in [*self.proxies, self.zk, *self.backends]:
            if server is None:
                continue
            for f in server.workdir.glob("*.log"):
                try:
                    shutil.copy(f, dest / f"{server.name}-{f.name}")
                except OSError:
                    pass

    def big_ids(self) -> list[int]:
        """The ids fill_big put in the bigger table."""
        return [BIG_BASE + 4 * n + j for j in range(len(TABLE_NODES)) for n in range(BIG_ROWS_PER_NODE)]

    def fill_big(self) -> None:
        """BIG_ROWS_PER_NODE rows on each node of the bigger table (id % 4 picks the node, as hash-four)."""
        for j, node in enumerate(TABLE_NODES):
            bi, db = NODE_PLACES[node]
            self.backends[bi].execute_many(
                [f"INSERT INTO `{BIG_TABLE}` (id, k, v) SELECT {BIG_BASE} + 4 * seq + {j}, seq % 100, 0 "
                 f"FROM seq_0_to_{BIG_ROWS_PER_NODE - 1}"], database=db)

    # -- reaching in ------------------------------------------------------------------------------
    @property
    def base(self) -> str:
        """The cluster's ZooKeeper base path."""
        return f"{self.root}/cluster-1"

    def zk_state(self) -> dict[str, list[str]]:
        """Children of the ddl folder and the lock folders (what must be empty when all is calm)."""
        assert self.zk is not None
        c = self.zk.client(timeout=10, session_timeout=10)
        try:
            out = {}
            for key in ("ddl", "lock/ddl_lock", "lock/view_lock", "lock", "online"):
                path = f"{self.base}/{key}"
                out[key] = sorted(c.get_children(path)) if c.exists(path) else []
            return out
        finally:
            c.stop()
            c.close()

    def node_conn(self, node: str, timeout: float = 10.0) -> Any:
        """A bounded connection straight to a node's database (an application beside pydble)."""
        bi, db = NODE_PLACES[node]
        b = self.backends[bi]
        return b.connect(db, connect_timeout=3, read_timeout=timeout, write_timeout=timeout)

    def ddl_waiting_on(self, node: str, name: str) -> bool:
        """A pydble DDL naming column or index `name` waits for a metadata lock on the node now."""
        bi, db = NODE_PLACES[node]
        conn = self.backends[bi].connect(None, connect_timeout=3, read_timeout=10, write_timeout=10)
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW PROCESSLIST")
                rows = cur.fetchall()
        finally:
            conn.close()
        word = re.compile(rf"\b{re.escape(name)}\b")
        return any(r[3] == db and "metadata lock" in (r[6] or "") and "pydble-ddl:" in (r[7] or "") and word.search(r[7] or "")
                   for r in rows)

    def manager_rows(self, proxy: ProxyProcess, sql: str) -> list[tuple[Any, ...]]:
        """Rows of one manager-port command, on a short-lived bounded connection."""
        conn = proxy.manager(connect_timeout=5, read_timeout=60, write_timeout=30)
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())
        finally:
            conn.close()

    def node_structures(self) -> dict[str, dict[str, str | None]]:
        """table -> node -> SHOW CREATE TABLE text straight from the backends (None: missing)."""
        out: dict[str, dict[str, str | None]] = {t: {} for t in TABLES}
        for node, (bi, db) in NODE_PLACES.items():
            conn = self.backends[bi].connect(db, read_timeout=60)
            try:
                with conn.cursor() as cur:
                    for t in TABLES:
                        try:
                            cur.execute(f"SHOW CREATE TABLE `{t}`")
                            out[t][node] = cur.fetchone()[1]
                        except Exception as e:  # noqa: BLE001 - a missing table is an answer
                            if getattr(e, "args", (0,))[0] == 1146:
                                out[t][node] = None
                            else:
                                raise
            finally:
                conn.close()
        return out

    def node_rows(self) -> dict[str, dict[str, dict[int, int]]]:
        """table -> node -> {id: v} straight from the backends."""
        out: dict[str, dict[str, dict[int, int]]] = {t: {} for t in TABLES}
        for node, (bi, db) in NODE_PLACES.items():
            conn = self.backends[bi].connect(db, read_timeout=120)
            try:
                with conn.cursor() as cur:
                    for t in TABLES:
                        cur.execute(f"SELECT id, v FROM `{t}`")
                        out[t][node] = {int(i): int(v) for i, v in cur.fetchall()}
            finally:
                conn.close()
        return out

    def slow_log(self, bi: int) -> list[tuple[float, float, int, str, str]]:
        """Every DDL a backend logged: (start, duration, thread id, database, statement)."""
        rows = self.backends[bi].query(
            "SELECT UNIX_TIMESTAMP(start_time), TIME_TO_SEC(query_time), thread_id, db, "
            "CONVERT(sql_text USING utf8mb4) FROM mysql.slow_log")
        return [(float(s), float(d), int(th), str(db or ""), str(sql)) for s, d, th, db, sql in rows]

    def wait_all_running(self, timeout: float = 60.0) -> list[str]:
        """Every server up (restarting what is not); returns the names that had to be started."""
        started = []
        deadline = time.monotonic() + timeout
        for server in [*self.backends, self.zk, *self.proxies]:
            assert server is not None
            if server.paused:
                server.resume()
            if not server.running:
                started.append(server.name)
                server.start(max(10.0, deadline - time.monotonic()))
        return started
