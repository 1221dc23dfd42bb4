"""Long differential runs on demand: ``python -m tests.differential.run --queries 1000000 --seed N``.

Starts two private MariaDB servers and one pydble over them (the test harness), keeps the reference
database on the first server, runs the seed and prints the summary and every wrong answer.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
for p in (TESTS.parent, TESTS):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from harness import MariaDBServer, ProxyProcess, free_port, proxy_config, start_all  # noqa: E402

from .engine import REF_DB, Differ, Stats, proxy_config_for  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Run; exit status 1 when any answer was wrong."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queries", type=int, default=10000, help="statements per seed")
    ap.add_argument("--seed", type=int, action="append", help="seed (repeatable); default 1")
    ap.add_argument("--from", dest="first", type=int, default=0,
                    help="replay from statement N: the ones before the reload preceding it (every "
                         "500) are only generated, and each verdict from N on is printed")
    ap.add_argument("--quiet", action="store_true", help="print only the summary")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop the servers
    servers = [MariaDBServer("diff-backend1"), MariaDBServer("diff-backend2")]
    proxy = None
    try:
        start_all(servers)
        for s in servers:
            s.create_databases("db1", "db2", "db3")
        servers[0].create_databases(REF_DB)
        proxy = ProxyProcess(proxy_config_for(proxy_config(servers, free_port(), free_port(),
                                                           instance="pydble-diff")),
                             name="proxy-diff", release_ports=True)
        proxy.start()
        differ = Differ(proxy.port, servers[0].port, [s.port for s in servers])
        differ.create()
        stats = Stats()
        for seed in args.seed or [1]:
            print(f"seed {seed}: {args.queries} statements", flush=True)
            differ.run(seed, args.queries, stats, None if args.quiet else print, args.first)
        differ.close()
        print(stats.summary())
        return 1 if stats.unknown else 0
    finally:
        if proxy is not None:
            proxy.cleanup()
        for s in servers:
            s.cleanup()


if __name__ == "__main__":
    sys.exit(main())
