"""Merges at scale: 1,000,000 rows on 4 nodes through pydble against one MariaDB holding the same rows
(issue 20 item 3, issue 18 item 6).

`mg_t` (1M rows, hash on id over dn1..dn4, four databases of one MariaDB server) and `mg_c` (100,000
customers, hash on cid: not co-located with mg_t's rows) through the proxy; the same two tables,
unsharded, in one database of the same server. Each query runs against both in the same invocation,
rounds alternating the order, through libmariadb (`MySQLdb._mysql`, rows fetched unbuffered in
batches, so the client's own cost is small and the same on both sides):

  (a) scatter ORDER BY ... LIMIT 10 over the 1M rows
  (b) GROUP BY with COUNT/SUM/AVG/MIN/MAX over the 1M rows (1,000 groups)
  (c) a full-table stream of the 1M rows (and of 100,000 rows: memory must not grow with the rows)
  (d) a cross-node JOIN (mg_t JOIN mg_c ON t.c = c.cid, joined in the proxy) with ORDER BY ... LIMIT

For each it prints the median seconds direct and through pydble, the ratio direct/pydble (target
>= 0.5: pydble at least half as fast as one MariaDB), and the proxy's peak RSS during the query
(VmHWM after resetting it through /proc/PID/clear_refs) above its RSS before, and the CPU seconds
the proxy itself spent on it (user + system from /proc/PID/stat).

    .venv/bin/python bench/merge_scale.py [--rows 1000000] [--rounds 3] [--mysql-port 3306]

Without --mysql-port a private MariaDB server (harness, 512 MB buffer pool) is started and removed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
for p in (REPO_ROOT, REPO_ROOT / "tests", REPO_ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import pymysql  # noqa: E402
from MySQLdb import _mysql  # noqa: E402

from harness import MariaDBServer, ProxyProcess, free_port  # noqa: E402
from point_select import cpu_seconds, loadavg  # noqa: E402  (one /proc reader for the benches)

SHARDS = ("mg_dn1", "mg_dn2", "mg_dn3", "mg_dn4")
DIRECT_DB = "mg_direct"
TARGET = 0.5

T_DDL = ("CREATE TABLE mg_t (id BIGINT NOT NULL PRIMARY KEY, k INT NOT NULL, c INT NOT NULL, "
         "v DECIMAL(12,2) NOT NULL, s VARCHAR(32) NOT NULL)")
C_DDL = "CREATE TABLE mg_c (cid INT NOT NULL PRIMARY KEY, name VARCHAR(32) NOT NULL, region INT NOT NULL)"


def queries(rows: int) -> list[tuple[str, str]]:
    """(label, SQL) of each measured query; the same text goes to pydble and to the direct table."""
    tenth = rows // 10
    return [
        ("a ORDER BY v DESC, id LIMIT 10", "SELECT id, k, v, s FROM mg_t ORDER BY v DESC, id LIMIT 10"),
        ("b GROUP BY k, 5 aggregates", "SELECT k, COUNT(*), SUM(v), AVG(v), MIN(v), MAX(v) FROM mg_t GROUP BY k"),
        (f"c stream {tenth:,} rows", f"SELECT id, k, c, v, s FROM mg_t WHERE id <= {tenth}"),
        (f"c stream {rows:,} rows", "SELECT id, k, c, v, s FROM mg_t"),
        ("d JOIN k = 7, ORDER BY LIMIT 10",
         "SELECT t.id, t.v, c.name FROM mg_t AS t JOIN mg_c AS c ON t.c = c.cid WHERE t.k = 7 "
         "ORDER BY t.v DESC, t.id LIMIT 10"),
        ("d JOIN k < 20, ORDER BY LIMIT 10",
         "SELECT t.id, t.v, c.name FROM mg_t AS t JOIN mg_c AS c ON t.c = c.cid WHERE t.k < 20 "
         "ORDER BY t.v DESC, t.id LIMIT 10"),
    ]


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak(pid: int) -> None:
    """VmHWM back to the current RSS (Linux >= 4.0), so the next peak is this query's."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


class Bench:
    """The server, the data, the proxy and the timed queries."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.server: MariaDBServer | None = None
        self.proxy: ProxyProcess | None = None
        self.port = args.mysql_port

    def start(self) -> None:
        if self.port is None:
            self.server = MariaDBServer("bench-merge-scale", extra_args=("--innodb-buffer-pool-size=512M",))
            self.server.start()
            self.port = self.server.port
        t0 = time.monotonic()
        self._prepare()
        print(f"loaded {self.args.rows:,} rows twice in {time.monotonic() - t0:.1f} s", flush=True)
        self._start_proxy()

    def _admin(self) -> Any:
        return pymysql.connect(host="127.0.0.1", port=self.port, user="root", password=self.args.mysql_password,
                               autocommit=True)

    def _prepare(self) -> None:
        """The direct tables from seq_1_to_N, then split by key mod 4 into the shard databases."""
        n = self.args.rows
        customers = max(n // 10, 1)
        conn = self._admin()
        with conn.cursor() as cur:
            if self.args.keep and self._loaded(cur):
                return
            for db in (DIRECT_DB, *SHARDS):
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
                cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"USE `{DIRECT_DB}`")
            cur.execute(T_DDL)
            cur.execute(C_DDL)
            cur.execute(f"INSERT INTO mg_t SELECT seq, seq % 1000, (seq * 7) % {customers} + 1, "
                        f"((seq * 7919) % 1000000) / 100, LEFT(MD5(seq), 16) FROM seq_1_to_{n}")
            cur.execute(f"INSERT INTO mg_c SELECT seq, CONCAT('customer-', seq), seq % 10 FROM seq_1_to_{customers}")
            for i, db in enumerate(SHARDS):
                cur.execute(f"USE `{db}`")
                cur.execute(T_DDL)
                cur.execute(C_DDL)
                cur.execute(f"INSERT INTO mg_t SELECT * FROM `{DIRECT_DB}`.mg_t WHERE id % 4 = {i}")
                cur.execute(f"INSERT INTO mg_c SELECT * FROM `{DIRECT_DB}`.mg_c WHERE cid % 4 = {i}")
            for db in (DIRECT_DB, *SHARDS):
                cur.execute(f"ANALYZE TABLE `{db}`.mg_t, `{db}`.mg_c")
        conn.close()

    def _loaded(self, cur: Any) -> bool:
        """--keep on a server that still holds the rows of an earlier run: load nothing."""
        try:
            cur.execute(f"SELECT COUNT(*) FROM `{SHARDS[-1]}`.mg_c")
            cur.execute(f"SELECT COUNT(*) FROM `{DIRECT_DB}`.mg_t")
        except pymysql.MySQLError:
            return False
        return cur.fetchone()[0] == self.args.rows

    def _start_proxy(self) -> None:
        nodes = [f"dn{i + 1}" for i in range(len(SHARDS))]
        cfg = {
            "server": {"instance": "bench-merge", "bind": "127.0.0.1", "port": free_port(),
                       "manager_port": free_port(), "merge_memory_mb": self.args.merge_memory_mb},
            "users": [{"name": "bench", "password": "bench", "schemas": ["mg"]}],
            "manager_users": [{"name": "root", "password": "111111"}],
            "db_groups": {"g1": {"host": "127.0.0.1", "port": self.port, "user": "root",
                                 "password": self.args.mysql_password, "max_con": 64}},
            "sharding_nodes": {n: {"db_group": "g1", "database": db} for n, db in zip(nodes, SHARDS)},
            "functions": {"hash-four": {"type": "hash", "partition_count": [4], "partition_length": [1]}},
            "schemas": {"mg": {"tables": {
                "mg_t": {"type": "sharding", "nodes": nodes, "function": "hash-four", "column": "id"},
                "mg_c": {"type": "sharding", "nodes": nodes, "function": "hash-four", "column": "cid"},
            }}},
        }
        self.proxy = ProxyProcess(cfg, name="bench-merge-proxy")
        self.proxy.start()

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.cleanup()
        if self.server is not None:
            self.server.cleanup()
        elif self.port is not None and not self.args.keep:
            conn = self._admin()
            with conn.cursor() as cur:
                for db in (DIRECT_DB, *SHARDS):
                    cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            conn.close()

    def connect(self, target: str) -> Any:
        if target == "direct":
            return _mysql.connect(host="127.0.0.1", port=self.port, user="root", password=self.args.mysql_password,
                                  database=DIRECT_DB)
        assert self.proxy is not None
        return _mysql.connect(host="127.0.0.1", port=self.proxy.port, user="bench", password="bench", database="mg")

    def time_query(self, conn: Any, sql: str) -> tuple[float, int, Any]:
        """Seconds to run sql and read every row (unbuffered, in batches), the row count, the first rows."""
        started = time.monotonic()
        conn.query(sql)
        res = conn.use_result()
        count = 0
        head = None
        while True:
            batch = res.fetch_row(maxrows=10000)
            if not batch:
                break
            if head is None:
                head = batch[:3]
            count += len(batch)
        return time.monotonic() - started, count, head

    def measure(self, label: str, sql: str, conns: dict[str, Any]) -> dict[str, Any]:
        pid = self.proxy.pid if self.proxy is not None else None
        times: dict[str, list[float]] = {"direct": [], "pydble": []}
        peaks: list[int] = []
        cpu: list[float] = []
        counts: dict[str, int] = {}
        heads: dict[str, Any] = {}
        for rnd in range(self.args.rounds):
            order = ("direct", "pydble") if rnd % 2 == 0 else ("pydble", "direct")
            for target in order:
                if target == "pydble" and pid:
                    _reset_peak(pid)
                    before = _status_kb(pid, "VmRSS")
                    cpu0 = cpu_seconds(pid)
                secs, n, head = self.time_query(conns[target], sql)
                if target == "pydble" and pid:
                    peaks.append(_status_kb(pid, "VmHWM") - before)
                    cpu.append(cpu_seconds(pid) - cpu0)
                times[target].append(secs)
                counts[target] = n
                heads[target] = head
        d, p = statistics.median(times["direct"]), statistics.median(times["pydble"])
        same = counts["direct"] == counts["pydble"] and (label.startswith("c") or heads["direct"] == heads["pydble"])
        return {"label": label, "direct": d, "pydble": p, "ratio": d / p if p else 0.0, "rows": counts["pydble"],
                "peak_mb": max(peaks) / 1024 if peaks else 0.0,
                "cpu": statistics.median(cpu) if cpu else 0.0, "same": same,
                "rss_mb": _status_kb(pid, "VmRSS") / 1024 if pid else 0.0}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3, help="runs per query and target, order alternating")
    ap.add_argument("--mysql-port", type=int, help="use this MariaDB on 127.0.0.1 instead of a private one")
    ap.add_argument("--mysql-password", default="")
    ap.add_argument("--merge-memory-mb", type=int, default=256, help="the proxy's [server] merge_memory_mb")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark databases on --mysql-port (and reuse them next time)")
    ap.add_argument("--only", help="run only the queries whose label starts with one of these letters (e.g. ab)")
    args = ap.parse_args(argv)
    b = Bench(args)
    try:
        b.start()
        print(f"load average before: {loadavg()}", flush=True)
        conns = {"direct": b.connect("direct"), "pydble": b.connect("pydble")}
        for _, sql in queries(args.rows)[:2]:   # warm both: buffer pool, plan caches, metadata
            for c in conns.values():
                b.time_query(c, sql)
        results = []
        print(f"\n{'query':<34} {'rows':>9} {'direct s':>9} {'pydble s':>9} {'ratio':>6} "
              f"{'proxy cpu s':>11} {'peak RSS +MB':>12} {'RSS MB':>7}  same")
        for label, sql in queries(args.rows):
            if args.only and label[0] not in args.only:
                continue
            r = b.measure(label, sql, conns)
            results.append(r)
            print(f"{r['label']:<34} {r['rows']:>9,} {r['direct']:>9.3f} {r['pydble']:>9.3f} {r['ratio']:>6.2f} "
                  f"{r['cpu']:>11.2f} {r['peak_mb']:>12.1f} {r['rss_mb']:>7.0f}  {'yes' if r['same'] else 'NO'}", flush=True)
        print(f"\nratio = direct seconds / pydble seconds (target >= {TARGET}); median of {args.rounds} rounds; "
              f"load average now {loadavg()}")
        return 0 if all(r["same"] for r in results) else 1
    finally:
        b.stop()


if __name__ == "__main__":
    raise SystemExit(main())
