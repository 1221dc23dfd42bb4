"""`pydble xa list`: pydble's XA transactions in doubt, with no proxy running (after a crash, say).

Reads the decision log (ZooKeeper for a cluster config, <data_dir>/xa/ otherwise) and asks every
dbGroup's XA RECOVER; what `show @@xa` on the manager port shows from a running instance.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from meta.config import Config, ConfigError, load_config
from meta.xa_log import BadXaRecord, LocalXaLog, XaDecision, owner_of
from proxy.exec.xa import XA_COLUMNS, Branch, InDoubt, in_doubt_rows
from zk.ops import ZkOps, ZkUnreachable
from zk.paths import Paths

from .cluster_ops import EXIT_NOTHING, EXIT_OK, EXIT_USAGE, Output, quiet_logs


def _decisions(config: Config, timeout: float) -> dict[str, XaDecision]:
    if config.cluster is None:
        return LocalXaLog(config.server.data_dir).read_all()
    paths = Paths(config.cluster.root, config.cluster.cluster_id)
    out: dict[str, XaDecision] = {}
    with ZkOps(config.cluster.zk, paths, connect_timeout=timeout, op_timeout=timeout, auth=config.cluster.auth) as ops:
        for name in ops.children(paths.xa):
            got = ops.get(f"{paths.xa}/{name}")
            if got is None:
                continue
            try:
                d = XaDecision.decode(got[0])
            except BadXaRecord:
                continue
            out[d.gtrid] = d
    return out


def _prepared(config: Config, timeout: float, out: Output) -> dict[str, list[Branch]]:
    import pymysql

    found: dict[str, list[Branch]] = {}
    for name, g in config.db_groups.items():
        try:
            conn = pymysql.connect(host=g.host, port=g.port, user=g.user, password=g.password,
                                   connect_timeout=min(timeout, g.connect_timeout_s), read_timeout=timeout)
        except pymysql.MySQLError as e:
            out.error(f"db_groups.{name} ({g.host}:{g.port}): {e.args[-1]}")
            continue
        try:
            with conn.cursor() as cur:
                cur.execute("XA RECOVER")
                rows = cur.fetchall()
        except pymysql.MySQLError as e:
            out.error(f"db_groups.{name}: XA RECOVER failed: {e.args[-1]}")
            continue
        finally:
            conn.close()
        for fmt, glen, blen, data in rows:
            data = data if isinstance(data, bytes) else str(data).encode()
            gtrid = data[:int(glen)].decode("utf-8", "replace")
            if int(fmt) == 1 and owner_of(gtrid) is not None:
                found.setdefault(gtrid, []).append(Branch(name, data[int(glen):int(glen) + int(blen)]))
    return found


def xa_list(args: argparse.Namespace) -> int:
    """List in-doubt XA transactions; exit 1 when there is none."""
    quiet_logs(getattr(args, "verbose", False))
    out = Output(args.json)
    try:
        config = load_config(args.config)
    except ConfigError as e:
        out.error(f"config error: {e}")
        return EXIT_USAGE
    try:
        decisions = _decisions(config, args.timeout)
    except ZkUnreachable as e:
        out.error(str(e))
        return EXIT_USAGE
    prepared = _prepared(config, args.timeout, out)
    items: dict[str, InDoubt] = {}
    for gtrid, branches in prepared.items():
        d = decisions.get(gtrid)
        items[gtrid] = InDoubt(gtrid, owner_of(gtrid) or "?", d.state if d else "none", branches, d.at if d else None)
    for gtrid, d in decisions.items():
        items.setdefault(gtrid, InDoubt(gtrid, d.instance, d.state, [], d.at))
    rows = in_doubt_rows(sorted(items.values(), key=lambda x: x.gtrid))
    if out.as_json:
        out.json([{**asdict(x), "branches": [f"{b.group}:{b.bqual.decode('utf-8', 'replace')}" for b in x.branches]}
                  for x in items.values()])
    else:
        out.table(XA_COLUMNS, rows)
    return EXIT_OK if items else EXIT_NOTHING


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `pydble xa list`."""
    p = sub.add_parser("xa", help="XA transactions (SET xa = on): list those in doubt")
    xsub = p.add_subparsers(dest="xa_command", required=True)
    ls = xsub.add_parser("list", help="in-doubt XA transactions: prepared branches (XA RECOVER) and decisions")
    ls.add_argument("--config", required=True, metavar="FILE", help="the instance's config file")
    ls.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="bound on each connection")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.add_argument("-v", "--verbose", action="store_true")
    ls.set_defaults(func=xa_list)
