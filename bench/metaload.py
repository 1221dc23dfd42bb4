"""Metadata load speed and memory: `reload @@metadata` through pydble vs the same fetch done directly.

Creates N tables (default 10,000) on each of 4 shardingNodes over two MariaDB servers (DESIGN.md §2:
dn1 s1/db1, dn2 s2/db1, dn3 s1/db2, dn4 s2/db2), configured as N sharding tables over dn1..dn4, so the
proxy holds 4 x N table-node entries. Then, in rounds that alternate which goes first, it times:

- reload:  `reload @@metadata` on the manager port of a real pydble process (start-up load excluded);
- raw:     the same batched fetch straight from the nodes with PyMySQL, one connection per node:
           `SHOW FULL TABLES WHERE Table_type='BASE TABLE'`, then `SHOW CREATE TABLE` statements joined
           into multi-statement queries of --batch statements, the nodes in parallel threads (with
           --seq also one after the other, which avoids the threads' GIL contention; the faster of
           the two is then the baseline);
- single:  one `SHOW CREATE TABLE` query per table, one thread and connection per node.

Every round runs each kind once, in a rotating order. Prints the medians, the ratios reload/raw
(target <= 1.5) and single/reload, and the proxy's RSS from
/proc/<pid>/status (target <= 300 MB at 40,000 entries).

    .venv/bin/python bench/metaload.py [--tables 10000] [--rounds 2] [--batch 500] [--engine MEMORY] [--seq]
    .venv/bin/python bench/metaload.py --backend 127.0.0.1:3306 --backend 127.0.0.1:3307

Without --backend it starts two private MariaDB servers with the test harness (temporary data
directories, free ports) and removes them at the end; with --backend it uses databases named
`metaload_db1`/`metaload_db2` on those servers (root, empty password unless --password) and drops
them at the end unless --keep.
"""

from __future__ import annotations

import argparse
import re
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
for p in (REPO_ROOT, REPO_ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import pymysql  # noqa: E402
from pymysql.constants import CLIENT  # noqa: E402

from harness import MariaDBServer, ProxyProcess, free_port, start_all  # noqa: E402

NODES = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2")}
TARGET_RATIO = 1.5
TARGET_RSS_MB = 300
LIST_SQL = "SHOW FULL TABLES WHERE Table_type='BASE TABLE'"
CREATE_CHUNK = 250
# Private servers get a table cache that holds every table, as a server with this many tables would be
# configured; otherwise each pass reopens (and re-reads the .frm of) every table and the benchmark
# measures the servers' table cache, not the fetch.
SERVER_ARGS = ("--table-open-cache=50000", "--table-definition-cache=50000", "--open-files-limit=65535")
# A table shaped like an application's: a dozen columns of the usual types, three secondary keys.
TABLE_DDL = (
    "CREATE TABLE `{name}` (`id` BIGINT NOT NULL AUTO_INCREMENT, `tenant_id` INT NOT NULL, "
    "`code` VARCHAR(32) NOT NULL, `name` VARCHAR(128) DEFAULT NULL, `status` TINYINT NOT NULL DEFAULT 0, "
    "`amount` DECIMAL(12,2) DEFAULT NULL, `ratio` DOUBLE DEFAULT NULL, `note` VARCHAR(255) DEFAULT '', "
    "`payload` VARBINARY(512) DEFAULT NULL, `created_at` DATETIME NOT NULL, `updated_at` TIMESTAMP NULL "
    "DEFAULT NULL, `col_{name}` INT DEFAULT NULL, PRIMARY KEY (`id`), UNIQUE KEY `uk_code` (`tenant_id`,`code`), "
    "KEY `k_status` (`status`,`created_at`), KEY `k_name` (`name`)) ENGINE={engine} DEFAULT CHARSET=utf8mb4")


def out(text: str = "") -> None:
    """The benchmark's report goes to stdout."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class Backend:
    """A MariaDB server to use: host, port, credentials."""

    def __init__(self, host: str, port: int, user: str = "root", password: str = "") -> None:
        self.host, self.port, self.user, self.password = host, port, user, password

    def connect(self, database: str | None = None, **kw: Any) -> Any:
        """A PyMySQL connection to this server."""
        params: dict[str, Any] = dict(host=self.host, port=self.port, user=self.user, password=self.password,
                                      database=database, autocommit=True, charset="utf8mb4", connect_timeout=10,
                                      read_timeout=3600, write_timeout=3600)
        params.update(kw)
        return pymysql.connect(**params)


def in_threads(fns: Sequence[Callable[[], Any]]) -> float:
    """Run the functions in parallel threads; wall seconds; re-raise the first error."""
    errors: list[BaseException] = []

    def wrap(fn: Callable[[], Any]) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


class Bench:
    """The tables, the proxy and the three ways of fetching the same metadata."""

    def __init__(self, backends: list[Backend], dbs: dict[str, str], tables: int, batch: int,
                 engine: str) -> None:
        self.backends = backends
        self.dbs = dbs                  # "db1" -> real database name
        self.names = [f"t{i:05d}" for i in range(tables)]
        self.batch = batch
        self.engine = engine
        self.proxy: ProxyProcess | None = None

    def node(self, n: str) -> tuple[Backend, str]:
        """The server and database of a shardingNode."""
        idx, logical = NODES[n]
        return self.backends[idx], self.dbs[logical]

    # -- set-up ---------------------------------------------------------------------------------
    def create_tables(self) -> float:
        """CREATE the tables on every node (one thread per node, multi-statement batches)."""
        for b in self.backends:
            with b.connect() as c, c.cursor() as cur:
                for db in self.dbs.values():
                    cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")

        def make(n: str) -> None:
            b, db = self.node(n)
            with b.connect(db, client_flag=CLIENT.MULTI_STATEMENTS) as c, c.cursor() as cur:
                cur.execute(LIST_SQL)
                have = {r[0] for r in cur.fetchall()}
                todo = [t for t in self.names if t not in have]
                for i in range(0, len(todo), CREATE_CHUNK):
                    cur.execute(";".join(TABLE_DDL.format(name=t, engine=self.engine)
                                         for t in todo[i:i + CREATE_CHUNK]))
                    while cur.nextset():
                        pass
        return in_threads([lambda n=n: make(n) for n in NODES])

    def config(self, port: int, manager_port: int) -> dict[str, Any]:
        """pydble's config: the four nodes and N sharding tables over them."""
        b1, b2 = self.backends
        node_list = list(NODES)
        return {
            "server": {"instance": "metaload", "bind": "127.0.0.1", "port": port, "manager_port": manager_port,
                       "backend_timeout_s": 600},
            "users": [{"name": "test", "password": "111111", "schemas": ["bench"]}],
            "manager_users": [{"name": "root", "password": "111111"}],
            "db_groups": {
                "ha_group1": {"host": b1.host, "port": b1.port, "user": b1.user, "password": b1.password},
                "ha_group2": {"host": b2.host, "port": b2.port, "user": b2.user, "password": b2.password},
            },
            "sharding_nodes": {n: {"db_group": f"ha_group{idx + 1}", "database": self.dbs[logical]}
                               for n, (idx, logical) in NODES.items()},
            "functions": {"hash-four": {"type": "hash", "partition_count": [4], "partition_length": [1]}},
            "schemas": {"bench": {"tables": {t: {"type": "sharding", "nodes": node_list, "function": "hash-four",
                                                 "column": "id"} for t in self.names}}},
        }

    def start_proxy(self) -> float:
        """Start pydble (its start-up load included); seconds until it greets."""
        self.proxy = ProxyProcess(self.config(free_port(), free_port()), name="metaload-proxy", release_ports=True)
        t0 = time.perf_counter()
        self.proxy.start(timeout=1800)
        return time.perf_counter() - t0

    # -- the three fetches ----------------------------------------------------------------------
    def _connections(self, multi: bool) -> dict[str, Any]:
        """One open connection per node, made before the clock starts (the proxy keeps its metadata
        connections open between loads too; a login costs 50-300 ms on this busy machine)."""
        conns = {}
        for n in NODES:
            b, db = self.node(n)
            conns[n] = b.connect(db, client_flag=CLIENT.MULTI_STATEMENTS) if multi else b.connect(db)
        return conns

    def raw_batched(self, parallel: bool = True) -> float:
        """The baseline: listing plus batched multi-statement SHOW CREATE TABLE, one connection per
        node; the nodes in parallel threads, or one after the other (no GIL contention)."""
        conns = self._connections(multi=True)

        def fetch(n: str) -> None:
            with conns[n].cursor() as cur:
                cur.execute(LIST_SQL)
                names = [r[0] for r in cur.fetchall()]
                got = 0
                for i in range(0, len(names), self.batch):
                    cur.execute(";".join(f"SHOW CREATE TABLE `{t}`" for t in names[i:i + self.batch]))
                    while True:
                        got += len(cur.fetchall())
                        if not cur.nextset():
                            break
                assert got == len(names) >= len(self.names), (n, got)
        try:
            if not parallel:
                t0 = time.perf_counter()
                for n in NODES:
                    fetch(n)
                return time.perf_counter() - t0
            return in_threads([lambda n=n: fetch(n) for n in NODES])
        finally:
            for c in conns.values():
                c.close()

    def one_per_table(self) -> float:
        """One SHOW CREATE TABLE round trip per table, one thread per node."""
        conns = self._connections(multi=False)

        def fetch(n: str) -> None:
            with conns[n].cursor() as cur:
                cur.execute(LIST_SQL)
                for (t, _) in cur.fetchall():
                    cur.execute(f"SHOW CREATE TABLE `{t}`")
                    cur.fetchall()
        try:
            return in_threads([lambda n=n: fetch(n) for n in NODES])
        finally:
            for c in conns.values():
                c.close()

    def reload(self) -> float:
        """`reload @@metadata` on the manager port; seconds until its OK."""
        assert self.proxy is not None
        conn = self.proxy.manager(read_timeout=3600)
        try:
            with conn.cursor() as cur:
                t0 = time.perf_counter()
                cur.execute("reload @@metadata")
                return time.perf_counter() - t0
        finally:
            conn.close()

    def startup_summary(self) -> dict[str, str]:
        """The fields of the proxy's log line for its start-up load (tables, seconds, inconsistent...)."""
        assert self.proxy is not None
        for line in self.proxy.log_text().splitlines():
            if "metadata loaded" in line and "scope=all" in line:
                return dict(re.findall(r"(\w+)=(\S+)", line))
        return {}

    def proxy_memory_mb(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) of the proxy process in MB."""
        assert self.proxy is not None and self.proxy.pid is not None
        status = Path(f"/proc/{self.proxy.pid}/status").read_text()
        kb = {k: int(v.split()[0]) for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(.*)$", status, re.M)}
        return kb["VmRSS"] / 1024, kb["VmHWM"] / 1024


def load_average() -> str:
    """The machine's 1/5/15-minute load averages, for the report."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 on completion (targets are reported, not enforced)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", type=int, default=10_000, help="tables per shardingNode (default 10000)")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds of reload and raw fetch (default 2)")
    ap.add_argument("--batch", type=int, default=500, help="SHOW CREATE TABLE statements per query (default 500)")
    ap.add_argument("--engine", default="MEMORY",
                    help="storage engine of the tables (default MEMORY: the fastest to create; the server then "
                         "answers fastest too, which is the hardest case for the proxy's ratio)")
    ap.add_argument("--backend", action="append", default=[], metavar="HOST:PORT",
                    help="use these two servers instead of starting private ones (give it twice)")
    ap.add_argument("--user", default="root")
    ap.add_argument("--password", default="")
    ap.add_argument("--keep", action="store_true", help="with --backend: keep the databases afterwards")
    ap.add_argument("--no-single", action="store_true", help="skip the one-query-per-table baseline")
    ap.add_argument("--seq", action="store_true",
                    help="also time the raw fetch with the nodes one after another (no GIL contention)")
    args = ap.parse_args(argv)
    # SIGTERM (and SIGINT, which background shells ignore) end the run through the cleanup below
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)

    started: list[MariaDBServer] = []
    if args.backend:
        if len(args.backend) != 2:
            ap.error("--backend must be given exactly twice")
        backends = []
        for hp in args.backend:
            host, _, port = hp.rpartition(":")
            backends.append(Backend(host or "127.0.0.1", int(port), args.user, args.password))
        dbs = {"db1": "metaload_db1", "db2": "metaload_db2"}
    else:
        started = [MariaDBServer(f"metaload{i}", extra_args=SERVER_ARGS) for i in (1, 2)]
        start_all(started)
        backends = [Backend(s.host, s.port) for s in started]
        dbs = {"db1": "db1", "db2": "db2"}
    bench = Bench(backends, dbs, args.tables, args.batch, args.engine)
    entries = args.tables * len(NODES)
    try:
        out(f"metaload: {args.tables} tables x {len(NODES)} shardingNodes = {entries} table-node entries, "
            f"engine {args.engine}, batch {args.batch}, {args.rounds} rounds; load average {load_average()}")
        out(f"  creating tables ... {bench.create_tables():.1f}s")
        took = bench.start_proxy()
        summary = bench.startup_summary()
        out(f"  starting pydble (includes its start-up load) ... {took:.1f}s (start-up load "
            f"{summary.get('seconds', '?')}s, {summary.get('tables', '?')} tables, "
            f"{summary.get('inconsistent', '?')} inconsistent, failed nodes {summary.get('failed_nodes', '?')})")
        if summary.get("tables") != str(args.tables) or summary.get("inconsistent") != "0":
            out("  WARNING: the start-up load did not see every table consistent")
        # No warm-up pass: the start-up load ran the proxy's code paths, and the servers' table cache
        # cannot hold every table anyway (it is capped by the open-files limit), so every pass of
        # either kind reopens most tables the same way.
        times: dict[str, list[float]] = {"raw": [], "raw-seq": [], "reload": [], "single": []}
        for r in range(args.rounds):
            order: list[tuple[str, Callable[[], float]]] = [("raw", bench.raw_batched), ("reload", bench.reload)]
            if not args.no_single:
                order.append(("single", bench.one_per_table))
            if args.seq:
                order.append(("raw-seq", lambda: bench.raw_batched(parallel=False)))
            order = order[r % len(order):] + order[:r % len(order)]
            for name, fn in order:
                s = fn()
                times[name].append(s)
                out(f"  round {r + 1}: {name:7s} {s:7.2f}s")
        raws, seqs, reloads = times["raw"], times["raw-seq"], times["reload"]
        rss, hwm = bench.proxy_memory_mb()
        single = statistics.median(times["single"]) if times["single"] else None
        par_m, reload_m = statistics.median(raws), statistics.median(reloads)
        seq_m = statistics.median(seqs) if seqs else float("inf")
        raw_m = min(par_m, seq_m)                             # the faster baseline is the one to beat
        ratio = reload_m / raw_m
        out("")
        out(f"raw batched PyMySQL fetch, nodes in parallel threads  median {par_m:7.2f}s   "
            f"({', '.join(f'{x:.2f}' for x in raws)})")
        if seqs:
            out(f"raw batched PyMySQL fetch, nodes one after another    median {seq_m:7.2f}s   "
                f"({', '.join(f'{x:.2f}' for x in seqs)})")
        out(f"reload @@metadata (pydble)  median {reload_m:7.2f}s   ({', '.join(f'{x:.2f}' for x in reloads)})")
        if single is not None:
            out(f"one query per table         median {single:7.2f}s   "
                f"({', '.join(f'{x:.2f}' for x in times['single'])})")
        out(f"ratio reload / faster raw batched: {ratio:.2f}  (target <= {TARGET_RATIO}) "
            f"{'OK' if ratio <= TARGET_RATIO else 'NOT MET'}")
        if single is not None:
            out(f"ratio one-per-table / reload: {single / reload_m:.2f}  "
                f"(reload / one-per-table: {reload_m / single:.2f})")
        out(f"proxy RSS {rss:.0f} MB, peak {hwm:.0f} MB at {entries} table-node entries  "
            f"(target <= {TARGET_RSS_MB} MB) {'OK' if hwm <= TARGET_RSS_MB else 'NOT MET'}")
        out(f"load average at the end: {load_average()}")
        return 0
    finally:
        if bench.proxy is not None:
            bench.proxy.cleanup()
        if started:
            for srv in started:
                srv.kill()          # throwaway data: no clean shutdown of thousands of tables
                srv.cleanup()
        elif not args.keep:
            for b in backends:
                try:
                    with b.connect() as c, c.cursor() as cur:
                        for db in dbs.values():
                            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
                except pymysql.MySQLError as e:
                    out(f"  (could not drop the databases on {b.host}:{b.port}: {e})")


if __name__ == "__main__":
    raise SystemExit(main())
