"""What `SET xa = on` costs: a transaction writing one row on each of two shardingNodes (two servers),
committed plainly and two-phase, through a single instance (decision fsynced under data_dir) and through
a cluster instance (decision in ZooKeeper). Own MariaDB servers, ZooKeeper and proxies (harness classes).

`.venv/bin/python bench/xa_commit.py --runs 300`
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
for p in (REPO_ROOT, REPO_ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from harness import (MariaDBServer, ProxyProcess, ZooKeeperServer, free_port, proxy_config,  # noqa: E402
                     start_all)


def _txn_ms(conn, xa: bool, runs: int) -> list[float]:
    """Commit latency (BEGIN .. COMMIT, ms) of `runs` transactions updating id 4 (dn1) and id 1 (dn2)."""
    out = []
    with conn.cursor() as cur:
        cur.execute(f"SET xa = {'on' if xa else 'off'}")
        for i in range(runs):
            t0 = time.perf_counter()
            cur.execute("BEGIN")
            cur.execute(f"UPDATE sharding_4_t1 SET v = {i} WHERE id = 4")
            cur.execute(f"UPDATE sharding_4_t1 SET v = {i} WHERE id = 1")
            cur.execute("COMMIT")
            out.append((time.perf_counter() - t0) * 1000)
    return out


def _row(name: str, ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=20)
    return f"| {name} | {statistics.median(ms):.2f} | {q[18]:.2f} |"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()
    servers = [MariaDBServer("xab1"), MariaDBServer("xab2")]
    zk = ZooKeeperServer("xabzk")
    procs: list = []
    try:
        start_all(servers)
        for s in servers:
            s.create_databases("db1", "db2", "db3")
        zk.start()
        for s in servers:   # before the proxies start: both load it
            for db in ("db1", "db2"):
                s.query("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, v INT)", db)
                s.query("INSERT INTO sharding_4_t1 VALUES (1, 0), (4, 0), (5, 0), (8, 0)", db)
        single = ProxyProcess(proxy_config(servers, free_port(), free_port(), instance="xa-bench"), name="xa-bench")
        clustered = ProxyProcess(proxy_config(servers, free_port(), free_port(), instance="xa-bench-c", cluster=zk),
                                 name="xa-bench-c")
        for p in (single, clustered):
            procs.append(p)
            p.start()
        print("| path (2 nodes, BEGIN..COMMIT) | p50 ms | p95 ms |\n|---|---|---|")
        for name, p in (("single instance", single), ("cluster instance", clustered)):
            conn = p.connect()
            try:
                _txn_ms(conn, False, 20)   # warm-up
                _txn_ms(conn, True, 20)
                plain, xa = [], []
                for _ in range(5):   # interleaved, so load drifts hit both alike
                    plain += _txn_ms(conn, False, args.runs // 5)
                    xa += _txn_ms(conn, True, args.runs // 5)
            finally:
                conn.close()
            print(_row(f"{name}, plain commit", plain))
            print(_row(f"{name}, xa = on", xa))
    finally:
        for p in procs:
            p.cleanup()
        zk.cleanup()
        for s in servers:
            s.cleanup()


if __name__ == "__main__":
    main()
