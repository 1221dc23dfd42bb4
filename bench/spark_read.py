"""Spark JDBC read throughput: a 4-node sharding table through pydble vs straight from the 4 nodes.

Starts two MariaDB servers and one pydble instance (the test harness classes), creates the sharding
table `schema1.spark_bench` (hash-four on id over dn1..dn4) through the proxy, fills each node
directly from MariaDB's sequence engine (1,000,000 rows by default), then reads the whole table
with Spark in the same session, alternating:

  proxy   one JDBC source on the proxy, partitionColumn=id, numPartitions=4 (each partition is a
          range query the proxy scatters to the 4 nodes and merges)
  direct  the union of four JDBC sources, one per node (jdbc:mysql://backend/dbN), one partition each

Both read every column of every row into the JVM (the `noop` sink), with 4 tasks. Prints rows/s of
each and the ratio proxy/direct (target >= 0.7).

    python bench/spark_read.py [--rows 1000000] [--runs 3] [--cores 4] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
for p in (REPO_ROOT, REPO_ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from harness import MariaDBServer, ProxyProcess, free_port, proxy_config, start_all  # noqa: E402

from jobs.spark import Jdbc, spark_session  # noqa: E402

TABLE = "spark_bench"
NODES = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2")}
TARGET_RATIO = 0.7
DDL = (f"CREATE TABLE {TABLE} (id INT NOT NULL PRIMARY KEY, k INT NOT NULL, name VARCHAR(40) NOT NULL, "
       "amount DECIMAL(12,2), created DATETIME, pad CHAR(60) NOT NULL)")


def out(text: str = "") -> None:
    """The benchmark's report goes to stdout."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def load(backends: list[MariaDBServer], rows: int) -> None:
    """Fill each node with its share (id mod 4 = its index) from MariaDB's sequence engine."""
    for idx, (node, (b, db)) in enumerate(NODES.items()):
        backends[b].execute_many([
            f"INSERT INTO {TABLE} SELECT seq, seq MOD 1000, CONCAT('name-', seq), seq / 100, "
            f"'2024-01-01' + INTERVAL (seq MOD 100000) MINUTE, RPAD(seq, 60, '#') "
            f"FROM seq_1_to_{rows} WHERE seq MOD 4 = {idx}"], db)


def timed(df: Any) -> float:
    """Seconds to pull every row of df into the JVM."""
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cores", type=int, default=4, help="Spark local cores (tasks in parallel)")
    ap.add_argument("--fetch-size", type=int, default=0, help="JDBC fetchsize (0: the driver buffers a partition)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    backends = [MariaDBServer("bench-backend1"), MariaDBServer("bench-backend2")]
    proxy: ProxyProcess | None = None
    spark = None
    try:
        start_all(backends)
        for b in backends:
            b.create_databases("db1", "db2", "db3")
        cfg = proxy_config(backends, free_port(), free_port(), instance="pydble-bench")
        cfg["schemas"]["schema1"]["tables"][TABLE] = {"type": "sharding", "nodes": list(NODES),
                                                      "function": "hash-four", "column": "id"}
        proxy = ProxyProcess(cfg, name="bench-proxy", release_ports=True)
        proxy.start()
        proxy.query(f"DROP TABLE IF EXISTS {TABLE}")
        proxy.query(DDL)
        t0 = time.perf_counter()
        load(backends, args.rows)
        out(f"loaded {args.rows:,} rows over 4 nodes directly in {time.perf_counter() - t0:.1f}s")
        assert proxy.query(f"SELECT COUNT(*) FROM {TABLE}")[0][0] == args.rows

        spark = spark_session("pydble-bench-spark-read", cores=args.cores)
        extra = {"fetchsize": str(args.fetch_size)} if args.fetch_size else {}
        via = Jdbc("127.0.0.1", proxy.port, "schema1", "test", "111111")
        proxy_df = spark.read.jdbc(via.url, TABLE, column="id", lowerBound=1, upperBound=args.rows + 1,
                                   numPartitions=4, properties=via.properties(**extra))
        direct_df = None
        for node, (b, db) in NODES.items():
            j = Jdbc("127.0.0.1", backends[b].port, db, "root", "")
            part = spark.read.jdbc(j.url, TABLE, properties=j.properties(**extra))
            direct_df = part if direct_df is None else direct_df.unionAll(part)
        assert direct_df is not None
        assert proxy_df.rdd.getNumPartitions() == direct_df.rdd.getNumPartitions() == 4

        timed(proxy_df.limit(1000))  # warm up the JVM, the driver and both paths
        timed(direct_df.limit(1000))
        t_proxy: list[float] = []
        t_direct: list[float] = []
        for i in range(args.runs):
            order = [("proxy", proxy_df, t_proxy), ("direct", direct_df, t_direct)]
            if i % 2:
                order.reverse()
            for name, df, acc in order:
                acc.append(timed(df))
                out(f"run {i + 1}: {name:<6} {acc[-1]:6.2f}s  {args.rows / acc[-1]:>10,.0f} rows/s")
        mp, md = statistics.median(t_proxy), statistics.median(t_direct)
        ratio = md / mp
        out("")
        out(f"rows                 {args.rows:,} (4 nodes on 2 MariaDB servers, {args.cores} Spark cores)")
        out(f"through the proxy    {args.rows / mp:>12,.0f} rows/s (median {mp:.2f}s)")
        out(f"direct, union of 4   {args.rows / md:>12,.0f} rows/s (median {md:.2f}s)")
        out(f"ratio proxy/direct   {ratio:.2f}   (target >= {TARGET_RATIO})  "
            f"{'OK' if ratio >= TARGET_RATIO else 'BELOW TARGET'}")
        if args.json:
            Path(args.json).write_text(json.dumps({
                "rows": args.rows, "runs": args.runs, "cores": args.cores, "proxy_s": t_proxy,
                "direct_s": t_direct, "proxy_rows_per_s": args.rows / mp, "direct_rows_per_s": args.rows / md,
                "ratio": ratio}, indent=2))
        return 0
    finally:
        if spark is not None:
            spark.stop()
        if proxy is not None:
            proxy.cleanup()
        for b in backends:
            b.cleanup()


if __name__ == "__main__":
    raise SystemExit(main())
