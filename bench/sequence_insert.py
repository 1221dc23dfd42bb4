"""What a global sequence costs an INSERT: sysbench oltp_insert (one table, sbtest1) through pydble.

Three proxies over the same two MariaDB servers: sbtest1 with `increment_column = "id"` in
single-instance mode (local file) and in a cluster (ZooKeeper), and sbtest1 without one. Cases, rounds
interleaved: ids filled by the sequence (--auto_inc=on: sysbench sends id 0), ids sent by the client
(--auto_inc=off) to the sequence table and to the plain one.

    .venv/bin/python bench/sequence_insert.py [--seconds 10] [--threads 4] [--rounds 2] [--block 1000]
"""

from __future__ import annotations

import argparse
import copy
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import MariaDBServer, ProxyProcess, ZooKeeperServer, free_port, proxy_config, start_all  # noqa: E402

NODES = ["dn1", "dn2", "dn3", "dn4"]


def config(backends: list[MariaDBServer], name: str, block: int, zk: ZooKeeperServer | None,
           sequence: bool) -> dict:
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance=name, cluster=zk))
    cfg["server"]["sequence_block"] = block
    t = {"type": "sharding", "nodes": NODES, "function": "hash-four", "column": "id"}
    if sequence:
        t["increment_column"] = "id"
    cfg["schemas"]["schema1"]["tables"]["sbtest1"] = t
    return cfg


def sysbench(port: int, auto_inc: bool, seconds: int, threads: int, command: str = "run") -> float:
    argv = ["sysbench", "oltp_insert", "--db-driver=mysql", "--mysql-host=127.0.0.1", f"--mysql-port={port}",
            "--mysql-user=test", "--mysql-password=111111", "--mysql-db=schema1", "--tables=1", "--table-size=100",
            f"--auto_inc={'on' if auto_inc else 'off'}", f"--threads={threads}", f"--time={seconds}",
            "--mysql-ignore-errors=1062", command]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120)
    out = res.stdout + res.stderr
    if res.returncode != 0:
        raise SystemExit(out[-2000:])
    m = re.search(r"transactions:\s+\d+\s+\(([\d.]+) per sec", out)
    return float(m.group(1)) if m else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--block", type=int, default=1000)
    args = ap.parse_args()
    backends = [MariaDBServer("bench-seq-b1"), MariaDBServer("bench-seq-b2")]
    zk = ZooKeeperServer("bench-seq-zk")
    proxies: dict[str, ProxyProcess] = {}
    try:
        start_all(backends)
        for b in backends:
            b.create_databases("db1", "db2", "db3")
        zk.start()
        for name, z, seq in (("local", None, True), ("cluster", zk, True), ("plain", None, False)):
            proxies[name] = ProxyProcess(config(backends, f"bench-seq-{name}", args.block, z, seq),
                                         name=f"bench-seq-{name}", release_ports=True)
            proxies[name].start()
        proxies["local"].query("DROP TABLE IF EXISTS sbtest1")
        sysbench(proxies["local"].port, True, 0, 1, "prepare")   # the table's AUTO_INCREMENT id, from the sequence
        for name in ("cluster", "plain"):   # they learn of the table created through another instance
            proxies[name].manager_query("reload @@metadata")
        cases = [("sequence, local file", "local", True), ("sequence, ZooKeeper", "cluster", True),
                 ("client ids, sequence table (local)", "local", False),
                 ("client ids, plain table", "plain", False)]
        tps: dict[str, list[float]] = {c[0]: [] for c in cases}
        for _ in range(args.rounds):
            for label, name, auto_inc in cases:
                tps[label].append(sysbench(proxies[name].port, auto_inc, args.seconds, args.threads))
        base = sum(tps["client ids, plain table"]) / args.rounds
        for label, values in tps.items():
            avg = sum(values) / len(values)
            print(f"{label:38s} {avg:8.0f} tps  ratio to client ids on a plain table {avg / base:.2f}  "
                  f"({', '.join(f'{v:.0f}' for v in values)})", flush=True)
    finally:
        for p in proxies.values():
            p.cleanup()
        zk.cleanup()
        for b in backends:
            b.cleanup()


if __name__ == "__main__":
    main()
