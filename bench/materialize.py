"""What answering a cross-node read over copies of its rows costs (proxy/exec/materialize.py): a window function
over a sharding table on 4 nodes and a 3-table non-equi join, through pydble and on one MariaDB holding the
same rows (the baseline, measured in the same run). Own MariaDB servers and proxy (harness classes).

`.venv/bin/python bench/materialize.py --rows 10000 --runs 20`
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
for p in (REPO_ROOT, REPO_ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from harness import MariaDBServer, ProxyProcess, free_port, proxy_config, start_all  # noqa: E402

DDL = "CREATE TABLE {t} (id INT PRIMARY KEY, k INT, s VARCHAR(16), m DECIMAL(10,2))"
QUERIES = {
    "window over 4 nodes": "SELECT id, ROW_NUMBER() OVER (PARTITION BY k ORDER BY m, id) AS rn, "
                           "SUM(m) OVER (PARTITION BY k) AS sm FROM mb_a WHERE id % 10 < {pct}",
    "3-table join, non-equi": "SELECT COUNT(*), SUM(a.m) FROM mb_a a JOIN mb_s s ON a.k = s.k "
                              "JOIN mb_d d ON d.k < s.k WHERE a.id % 10 < {pct}",
}


def _ms(conn, sql: str, runs: int) -> list[float]:
    out = []
    with conn.cursor() as cur:
        for _ in range(runs):
            t0 = time.perf_counter()
            cur.execute(sql)
            cur.fetchall()
            out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10000, help="rows of the sharding table")
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    servers = [MariaDBServer("mbb1"), MariaDBServer("mbb2")]
    proxy = None
    try:
        start_all(servers)
        for s in servers:
            s.create_databases("db1", "db2", "db3")
        servers[0].create_databases("mbref")
        cfg = copy.deepcopy(proxy_config(servers, free_port(), free_port(), instance="mat-bench"))
        cfg["schemas"]["schema1"]["tables"].update({
            "mb_a": {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "hash-four",
                     "column": "id"},
            "mb_s": {"type": "single", "nodes": ["dn2"]}})
        cfg["server"]["merge_memory_mb"] = 512
        proxy = ProxyProcess(cfg, name="mat-bench")
        proxy.start()
        px, ref = proxy.connect(), servers[0].connect("mbref")
        data = {"mb_a": args.rows, "mb_s": 50, "mb_d": 20}   # mb_d: the default node dn5
        for conn in (px, ref):
            with conn.cursor() as cur:
                for t, n in data.items():
                    cur.execute(f"DROP TABLE IF EXISTS {t}")
                    cur.execute(DDL.format(t=t))
                    for start in range(0, n, 2000):
                        cur.execute(f"INSERT INTO {t} VALUES " + ", ".join(
                            f"({i}, {i % 37}, 'v{i % 101}', {i % 997}.25)" for i in range(start, min(n, start + 2000))))
            conn.commit()
        print(f"| query ({args.rows} rows on 4 nodes) | rows read | pydble p50 ms | MariaDB p50 ms | ratio |")
        print("|---|---|---|---|---|")
        for name, sql in QUERIES.items():
            for pct in (1, 10):
                q = sql.format(pct=pct)
                _ms(px, q, 2)
                _ms(ref, q, 2)
                a, b = [], []
                for _ in range(4):   # interleaved, so load drifts hit both alike
                    a += _ms(px, q, max(1, args.runs // 4))
                    b += _ms(ref, q, max(1, args.runs // 4))
                pa, pb = statistics.median(a), statistics.median(b)
                print(f"| {name} | {pct * 10}% | {pa:.1f} | {pb:.1f} | {pa / pb:.1f}x |")
        px.close()
        ref.close()
    finally:
        if proxy is not None:
            proxy.cleanup()
        for s in servers:
            s.cleanup()


if __name__ == "__main__":
    main()
