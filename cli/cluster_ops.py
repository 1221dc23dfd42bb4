"""`pydble cluster status`, and what every operator command shares: where the cluster is, output, exit codes.

Operator commands talk to ZooKeeper directly (no proxy needs to be running), from a config file's
[cluster] section or from --zk/--root/--cluster-id. Exit codes: 0 done, 1 nothing to act on,
2 bad arguments / config / ZooKeeper unreachable, 3 refused (see the message).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TextIO

from kazoo.exceptions import AuthFailedError, KazooException, NoAuthError

from meta.config import Config, ConfigError, load_config
from zk.ops import CONNECT_TIMEOUT_S, HolderView, OnlineView, TableDdl, ZkOps, ZkUnreachable, age
from zk.paths import Paths

EXIT_OK, EXIT_NOTHING, EXIT_USAGE, EXIT_REFUSED = 0, 1, 2, 3
DEFAULT_ROOT, DEFAULT_CLUSTER_ID = "/dble", "cluster-1"


class UsageError(Exception):
    """Bad or missing arguments (exit 2)."""


# -- output ---------------------------------------------------------------------------------------

class Output:
    """The commands' only way to write: aligned tables or JSON on stdout, one-line errors on stderr."""

    def __init__(self, as_json: bool = False, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.as_json = as_json
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def error(self, text: str) -> None:
        """One line on stderr, prefixed like every pydble error."""
        self.err.write(f"pydble: {text}\n")

    def json(self, obj: Any) -> None:
        self.out.write(json.dumps(obj, indent=2, default=str) + "\n")

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "") -> None:
        """Columns padded to their widest cell; the last column is left ragged."""
        cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
        for r in cells:
            padded = [c.ljust(widths[i]) if i < len(r) - 1 else c for i, c in enumerate(r)]
            self.line(indent + "  ".join(padded).rstrip())

    def pairs(self, items: Sequence[tuple[str, Any]], indent: str = "") -> None:
        """key  value lines, keys aligned."""
        width = max((len(k) for k, _ in items), default=0)
        for k, v in items:
            self.line(f"{indent}{k.ljust(width)}  {v}")


def fmt_age(seconds: float) -> str:
    """3s, 2m05s, 1h02m, 3d04h."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def fmt_time(ts: float) -> str:
    """Local wall-clock time of an epoch timestamp."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts > 0 else "-"


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


# -- where the cluster is -------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """The cluster to operate on, and the config file's contents when one was given."""

    hosts: str
    paths: Paths
    config: Config | None

    def describe(self) -> dict[str, str]:
        return {"zk": self.hosts, "root": self.paths.root, "cluster_id": self.paths.cluster_id}


def add_connection_options(p: argparse.ArgumentParser) -> None:
    """--config / --zk / --root / --cluster-id / --timeout / --json, on every operator command."""
    g = p.add_argument_group("cluster")
    g.add_argument("--config", metavar="FILE", help="a pydble config file: its [cluster] section (and its "
                                                    "backends, for ddl gc)")
    g.add_argument("--zk", metavar="HOST:PORT", help="ZooKeeper connection string (overrides the config's)")
    g.add_argument("--root", help=f"cluster root path (default {DEFAULT_ROOT}, or the config's)")
    g.add_argument("--cluster-id", help=f"cluster id (default {DEFAULT_CLUSTER_ID}, or the config's)")
    g.add_argument("--timeout", type=float, default=CONNECT_TIMEOUT_S, metavar="SECONDS",
                   help=f"bound on connecting and on each ZooKeeper call (default {CONNECT_TIMEOUT_S:g})")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("-v", "--verbose", action="store_true", help="log to stderr what the command does")


def resolve_target(args: argparse.Namespace) -> Target:
    """The cluster from --config and/or --zk; UsageError when neither says where ZooKeeper is."""
    config = None
    hosts, root, cluster_id = args.zk, args.root, args.cluster_id
    if args.config:
        try:
            config = load_config(args.config)
        except ConfigError as e:
            raise UsageError(f"config error: {e}") from None
        cc = config.cluster
        if cc is None and not hosts:
            raise UsageError(f"{args.config} has no [cluster] section (single-instance mode); "
                             f"pass --zk HOST:PORT to name a cluster")
        if cc is not None:
            hosts = hosts or cc.zk
            root = root or cc.root
            cluster_id = cluster_id or cc.cluster_id
    if not hosts:
        raise UsageError("say where the cluster is: --config FILE or --zk HOST:PORT")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    root = root or DEFAULT_ROOT
    if not root.startswith("/"):
        raise UsageError(f"--root must be an absolute znode path, not {root!r}")
    return Target(hosts, Paths(root, cluster_id or DEFAULT_CLUSTER_ID), config)


def quiet_logs(verbose: bool) -> None:
    """structlog and kazoo to stderr, warnings only unless -v: stdout is the command's output."""
    from proxy.log import configure

    configure("debug" if verbose else "warning")
    kazoo = logging.getLogger("kazoo")
    if verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    else:
        kazoo.addHandler(logging.NullHandler())
        kazoo.propagate = False  # its connection retries would print tracebacks on a dead ZooKeeper


Command = Callable[[ZkOps, Target, Output, argparse.Namespace], int]


def run_command(args: argparse.Namespace, fn: Command) -> int:
    """Resolve the cluster, open one bounded session, run fn, map failures to exit codes."""
    quiet_logs(getattr(args, "verbose", False))
    out = Output(getattr(args, "json", False))
    try:
        target = resolve_target(args)
    except UsageError as e:
        out.error(str(e))
        return EXIT_USAGE
    auth = target.config.cluster.auth if target.config is not None and target.config.cluster else None
    ops = ZkOps(target.hosts, target.paths, connect_timeout=args.timeout, op_timeout=args.timeout, auth=auth)
    try:
        with ops:
            return fn(ops, target, out, args)
    except UsageError as e:
        out.error(str(e))
        return EXIT_USAGE
    except ZkUnreachable as e:
        out.error(str(e))
        return EXIT_USAGE
    except (NoAuthError, AuthFailedError) as e:
        which = "this config's auth is not it" if auth else "pass --config with that auth"
        out.error(f"ZooKeeper at {target.hosts} refused access ({e.__class__.__name__}): the cluster's znodes "
                  f"need the digest identity of its [cluster] auth; {which}")
        return EXIT_USAGE
    except KazooException as e:
        out.error(f"ZooKeeper at {target.hosts} failed: {e.__class__.__name__} {e}".rstrip())
        return EXIT_USAGE


# -- a running instance's manager port -------------------------------------------------------------

@dataclass(frozen=True)
class ManagerPort:
    """Where a running instance's manager port is, and who logs in (commands that ask an instance)."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)

    def describe(self) -> str:
        return f"{self.host}:{self.port}"


def add_manager_options(p: argparse.ArgumentParser) -> None:
    """--config / --host / --port / --user / --password / --timeout / --json, on commands that ask an instance."""
    p.add_argument("--config", metavar="FILE", help="the instance's config: its manager port and manager user")
    p.add_argument("--host", help="the instance's manager address (default: the config's bind, or 127.0.0.1)")
    p.add_argument("--port", type=int, help="the instance's manager port (default: the config's)")
    p.add_argument("--user", help="manager user (default: the config's first)")
    p.add_argument("--password", help="manager password (default: the config's, when in clear text)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="bound on connecting")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("-v", "--verbose", action="store_true", help="log to stderr what the command does")


def resolve_manager(args: argparse.Namespace) -> ManagerPort:
    """The manager port from --config and/or --host/--port/--user/--password; UsageError when unknown."""
    host, port, user, password = args.host, args.port, args.user, args.password
    if args.config:
        try:
            config = load_config(args.config)
        except ConfigError as e:
            raise UsageError(f"config error: {e}") from None
        bind = config.server.bind
        host = host or ("127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind)
        port = port or config.server.manager_port
        if user is None and config.manager_users:
            user = next(iter(config.manager_users))
        mu = config.manager_users.get(user or "")
        if password is None and mu is not None and not (len(mu.password) == 41 and mu.password[0] == "*"):
            password = mu.password   # clear text in the config (a '*' hash cannot log in)
    if not port or not user:
        raise UsageError("say which instance to ask: --config FILE (its manager port and user) or --port and --user")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    return ManagerPort(host or "127.0.0.1", port, user, password or "")


def manager_connect(m: ManagerPort, timeout: float, read_timeout: float | None = None) -> Any:
    """A PyMySQL connection to the manager port; UsageError (one line) when it is down or refuses the login."""
    import pymysql

    try:
        return pymysql.connect(host=m.host, port=m.port, user=m.user, password=m.password,
                               connect_timeout=timeout, read_timeout=read_timeout)
    except pymysql.OperationalError as e:
        if e.args[0] in (1044, 1045):
            raise UsageError(f"the manager port {m.describe()} refused the login: ({e.args[0]}) {e.args[-1]}") from None
        raise UsageError(f"cannot reach the manager port {m.describe()}: {e.args[-1]}") from None
    except pymysql.MySQLError as e:
        raise UsageError(f"cannot reach the manager port {m.describe()}: {e.args[-1]}") from None


# -- JSON shapes shared by the commands -----------------------------------------------------------

def online_json(v: OnlineView) -> dict[str, Any]:
    info = v.info
    d: dict[str, Any] = {"name": v.name, "session": hex(v.stat.ephemeral_owner)}
    if info is None:
        d["error"] = v.error
        return d
    d.update(host=info.host, port=info.port, manager_port=info.manager_port, meta_version=info.meta_version,
             started_at=info.started_at, pid=info.pid)
    return d


def holder_json(h: HolderView | None, online: dict[str, OnlineView]) -> dict[str, Any] | None:
    if h is None:
        return None
    return {"instance": h.instance, "online": h.instance in online, "since": h.stat.ctime,
            "age_s": round(age(h.stat.ctime), 3)}


def holder_text(h: HolderView | None, online: dict[str, OnlineView]) -> str:
    if h is None:
        return "free"
    state = "online" if h.instance in online else "OFFLINE"
    return f"held by {h.instance} ({state}) for {fmt_age(age(h.stat.ctime))}"


# -- cluster status -------------------------------------------------------------------------------

def cluster_status(ops: ZkOps, target: Target, out: Output, args: argparse.Namespace) -> int:
    """Online instances, the syncMeta/reconcile lock holders, DDL in flight."""
    online = ops.online()
    sync = ops.sync_meta_holder()
    reconcile = ops.reconcile_holder()
    tables: list[TableDdl] = ops.tables()
    orphaned = [t for t in tables if not t.owner_online(online)]
    if out.as_json:
        out.json({"cluster": target.describe(),
                  "online": [online_json(v) for v in online.values()],
                  "sync_meta_lock": holder_json(sync, online),
                  "reconcile_lock": holder_json(reconcile, online),
                  "ddl_in_flight": len(tables),
                  "ddl_owner_offline": len(orphaned)})
        return EXIT_OK
    out.line(f"cluster {target.paths.base} on ZooKeeper {target.hosts}")
    out.line()
    if online:
        rows = []
        for v in online.values():
            i = v.info
            if i is None:
                rows.append([v.name, "?", "?", "?", "?", "?", f"unreadable: {v.error}"])
                continue
            rows.append([v.name, f"{i.host}:{i.port}", i.manager_port, i.meta_version, fmt_time(i.started_at),
                         fmt_age(age(i.started_at)), i.pid or "-"])
        out.table(["INSTANCE", "ADDRESS", "MANAGER", "META_VERSION", "STARTED", "UPTIME", "PID"], rows)
    else:
        out.line("no instance online")
    out.line()
    ddl = f"{len(tables)}"
    if orphaned:
        ddl += f" ({len(orphaned)} with an offline owner: see `pydble ddl list`)"
    out.pairs([("syncMeta.lock", holder_text(sync, online)),
               ("reconcile.lock", holder_text(reconcile, online)),
               ("ddl in flight", ddl)])
    return EXIT_OK


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`pydble cluster status`."""
    c = sub.add_parser("cluster", help="cluster membership and state, read from ZooKeeper")
    csub = c.add_subparsers(dest="cluster_command", required=True)
    s = csub.add_parser("status", help="online instances, syncMeta.lock holder, DDL in flight")
    add_connection_options(s)
    s.set_defaults(func=lambda args: run_command(args, cluster_status))
