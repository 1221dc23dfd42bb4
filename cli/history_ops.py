"""`pydble ddl history`: finished DDLs, cluster-wide from ZooKeeper or from one instance's own file."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from meta.config import ConfigError, load_config
from meta.history import DdlHistory
from zk.ops import ZkOps
from zk.paths import history_order
from zk.records import BadRecord, HistoryEntry

from .cluster_ops import (EXIT_NOTHING, EXIT_OK, EXIT_USAGE, Output, Target, add_connection_options, fmt_time,
                          quiet_logs, run_command)

SQL_WIDTH = 60


def _row(finished: float, instance: str, user: str, tables: str, outcome: str, total: Any, sql: str) -> list:
    short = " ".join(sql.split())
    return [fmt_time(finished), instance, user, tables, outcome, "" if total is None else f"{total:.1f}",
            short if len(short) <= SQL_WIDTH else short[:SQL_WIDTH - 3] + "..."]


HEADERS = ["finished", "instance", "user", "tables", "outcome", "total_ms", "sql"]


def from_zookeeper(ops: ZkOps, target: Target, out: Output, args: argparse.Namespace) -> int:
    """The cluster-wide history kept in ddl_history (every instance's DDLs), newest first."""
    entries: list[HistoryEntry] = []
    for name in list(reversed(history_order(ops.children(target.paths.history))))[:args.limit]:
        got = ops.get(f"{target.paths.history}/{name}")
        if got is None:
            continue
        try:
            entries.append(HistoryEntry.decode(got[0]))
        except BadRecord:
            continue
    if out.as_json:
        out.json([asdict(e) for e in entries])
    else:
        out.table(HEADERS, [_row(e.finished_at, e.instance, e.user, f"{e.schema}.{e.table}",
                                 "OK" if e.status == "SUCCESS" else e.status, e.phases_ms.get("total"), e.sql)
                            for e in entries])
    return EXIT_OK if entries else EXIT_NOTHING


def from_file(args: argparse.Namespace) -> int:
    """A single instance's persistent history (its data_dir), newest first."""
    out = Output(args.json)
    try:
        config = load_config(args.config)
    except ConfigError as e:
        out.error(f"config error: {e}")
        return EXIT_USAGE
    entries = DdlHistory(config.server.data_dir).entries(args.limit)
    if out.as_json:
        out.json([asdict(e) for e in entries])
    else:
        out.table(HEADERS, [_row(e.finished_at, e.instance, e.user, ",".join(e.tables), e.outcome,
                                 e.phases_ms.get("total"), e.sql) for e in entries])
    return EXIT_OK if entries else EXIT_NOTHING


def ddl_history(args: argparse.Namespace) -> int:
    """ZooKeeper when there is a cluster; the instance's own file for a single-instance config."""
    quiet_logs(getattr(args, "verbose", False))
    if args.config and not args.zk:
        try:
            single = load_config(args.config).cluster is None
        except ConfigError as e:
            Output(args.json).error(f"config error: {e}")
            return EXIT_USAGE
        if single:
            return from_file(args)
    return run_command(args, from_zookeeper)


def add_history_parser(dsub: argparse._SubParsersAction) -> None:
    """Register `pydble ddl history`."""
    p = dsub.add_parser("history", help="finished DDLs: instance, user, tables, outcome, durations")
    p.add_argument("--limit", type=int, default=50, help="newest N entries (default 50)")
    add_connection_options(p)
    p.set_defaults(func=ddl_history)
