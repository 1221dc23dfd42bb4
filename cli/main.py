"""The `pydble` command: serve, init-db, meta (a running instance's metadata), and (with a cluster) ddl and cluster tools."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import TYPE_CHECKING

import structlog

from meta.config import Config, ConfigError, StartRefused, load_config

if TYPE_CHECKING:
    from proxy.workers import WorkerInfo


def _load(path: str):
    try:
        return load_config(path)
    except ConfigError as e:
        sys.stderr.write(f"pydble: config error: {e}\n")
        raise SystemExit(2) from None


def cmd_serve(args: argparse.Namespace) -> int:
    """Run one proxy instance, or with --workers N > 1 a parent keeping N of them, until SIGTERM/SIGINT."""
    from proxy.log import configure

    configure(args.log_level, json=args.log_json)
    config = _load(args.config)
    if args.workers == 1:
        return serve_instance(config)
    from .workers import Supervisor, check_workers  # noqa: PLC0415
    try:
        check_workers(config, args.workers)
    except ConfigError as e:
        sys.stderr.write(f"pydble: config error: {e}\n")
        return 2
    return Supervisor(config, args.workers, serve_instance).run()


def serve_instance(config: Config, worker: WorkerInfo | None = None) -> int:
    """One proxy process (a worker of `--workers N` when `worker` is given) until SIGTERM/SIGINT."""
    from proxy.server import ProxyServer

    from .pause import pause_hook_from_env

    try:
        import uvloop  # noqa: PLC0415
        uvloop.install()
    except ImportError:
        pass

    async def run() -> None:
        try:
            server = ProxyServer(config, worker)
        except ConfigError as e:
            sys.stderr.write(f"pydble: config error: {e}\n")
            raise SystemExit(2) from None
        pause = pause_hook_from_env()
        if pause is not None:   # tests only: it pauses at a named phase, the path stays production's
            server.runtime.xa.pause = pause
            if server.runtime.cluster is not None:
                server.runtime.cluster.pause = pause
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await server.start()
        except OSError as e:
            structlog.get_logger("pydble").error("cannot listen", error=str(e))
            raise SystemExit(1) from None
        except StartRefused as e:
            sys.stderr.write(f"pydble: {e}\n")
            raise SystemExit(1) from None
        await stop.wait()
        if worker is not None:   # a worker whose parent died has no one to SIGKILL it: bound the stop
            from .workers import STOP_WAIT_S  # noqa: PLC0415
            signal.alarm(int(STOP_WAIT_S) + 5)
        await server.stop()

    asyncio.run(run())
    return 0


def cmd_init_db(args: argparse.Namespace) -> int:
    """Create every shardingNode's database on its dbGroup (what `make run` needs on a fresh machine)."""
    import pymysql

    config = _load(args.config)
    by_group: dict[str, list[str]] = {}
    for n in config.sharding_nodes.values():
        by_group.setdefault(n.db_group, []).append(n.database)
    failed = False
    for gname, dbs in by_group.items():
        g = config.db_groups[gname]
        try:
            conn = pymysql.connect(host=g.host, port=g.port, user=g.user, password=g.password,
                                   connect_timeout=g.connect_timeout_s, autocommit=True)
        except pymysql.MySQLError as e:
            sys.stderr.write(f"pydble: db_groups.{gname} ({g.host}:{g.port}): {e.args[-1]}\n")
            failed = True
            continue
        with conn:
            with conn.cursor() as cur:
                for db in sorted(set(dbs)):
                    cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
        sys.stdout.write(f"db_groups.{gname}: databases {', '.join(sorted(set(dbs)))} ready\n")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pydble", description="MySQL-protocol sharding proxy")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run a proxy instance")
    s.add_argument("--config", required=True)
    s.add_argument("--log-level", default="info")
    s.add_argument("--log-json", action="store_true", help="JSON log lines")
    s.add_argument("--workers", type=int, default=1, metavar="N",
                   help="N worker processes on the client port (one per core the proxy may use; N > 1 "
                        "needs [cluster]): instance <instance>-w<i>, manager port manager_port + i")
    s.set_defaults(func=cmd_serve)
    i = sub.add_parser("init-db", help="create the shardingNodes' databases on the backends")
    i.add_argument("--config", required=True)
    i.set_defaults(func=cmd_init_db)
    from cli import cluster_ops, ddl_ops, meta_ops  # noqa: PLC0415 - operator tools: ZooKeeper, no server
    ddl_ops.add_parser(sub)
    cluster_ops.add_parser(sub)
    meta_ops.add_parser(sub)
    from cli import xa_ops  # noqa: PLC0415
    xa_ops.add_parser(sub)
    from jobs.pipeline import add_arguments as pipeline_arguments, run_cli  # noqa: PLC0415 - imports no Spark
    pl = sub.add_parser("pipeline", help="Spark pipeline: load a sharding table through the proxy, verify")
    pipeline_arguments(pl)
    pl.set_defaults(func=run_cli)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
