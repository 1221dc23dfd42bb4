"""`pydble ddl list|show|release|gc`: look at and clean up the cluster's DDL records and locks by hand.

Recovery normally needs no operator (an elected survivor reconciles a dead originator's record),
but when no instance is left to do it, or one is stuck, these commands read and delete the same
znodes the proxies use (zk.paths, zk.records) through zk.ops. Deletes are conditional on what was
read, so a DDL that starts meanwhile is never touched.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import AuthFailedError

from meta.config import Config
from meta.consistency import Consistency
from zk.aio import Zk, ZkTimeout
from zk.ops import LockView, OnlineView, RecordView, TableDdl, ZkOps, ZkUnreachable, age
from zk.paths import table_node
from zk.release import ReleaseRefused, Released, release_ddl

from .cluster_ops import (EXIT_NOTHING, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, Output, Target, UsageError,
                          add_connection_options, add_manager_options, fmt_age, fmt_time, manager_connect,
                          quiet_logs, resolve_manager, run_command, yes_no)

if TYPE_CHECKING:
    from meta.model import TableMeta

SQL_WIDTH = 60


def parse_table_arg(text: str) -> tuple[str, str]:
    """SCHEMA.TABLE (backquotes allowed) into its parts; argparse reports anything else (exit 2)."""
    clean = text.replace("`", "").strip()
    schema, dot, table = clean.partition(".")
    if not dot or not schema or not table or "." in table or "/" in clean:
        raise argparse.ArgumentTypeError(f"expected SCHEMA.TABLE, got {text!r}")
    return schema, table.lower()


def _short(sql: str, width: int = SQL_WIDTH) -> str:
    one = " ".join(sql.split())
    return one if len(one) <= width else one[:width - 3] + "..."


# -- JSON shapes ----------------------------------------------------------------------------------

def record_json(rv: RecordView | None, online: dict[str, OnlineView]) -> dict[str, Any] | None:
    if rv is None:
        return None
    d: dict[str, Any] = {"version": rv.stat.version, "ctime": rv.stat.ctime, "mtime": rv.stat.mtime}
    rec = rv.record
    if rec is None:
        d["error"] = rv.error
    else:
        d.update(instance=rec.instance, instance_online=rec.instance in online, type=rec.type, sql=rec.sql,
                 status=rec.status, created_at=rec.created_at, message=rec.message,
                 reconciled_by=rec.reconciled_by or None, api_version=rec.api_version)
    d["acks"] = [{"instance": a.instance, "online": a.instance in online,
                  **({"status": a.ack.status, "ok": a.ack.ok, "message": a.ack.message,
                      "meta_version": a.ack.meta_version} if a.ack is not None else {"error": a.error})}
                 for a in rv.acks]
    return d


def lock_json(lv: LockView | None, online: dict[str, OnlineView]) -> dict[str, Any] | None:
    if lv is None:
        return None
    d: dict[str, Any] = {"session": hex(lv.stat.ephemeral_owner), "ctime": lv.stat.ctime}
    if lv.info is None:
        d["error"] = lv.error
    else:
        d.update(instance=lv.info.instance, instance_online=lv.info.instance in online, sql=lv.info.sql,
                 since=lv.info.since)
    return d


def table_json(t: TableDdl, online: dict[str, OnlineView]) -> dict[str, Any]:
    return {"schema": t.schema, "table": t.table, "phase": t.phase, "owner": t.owner,
            "owner_online": t.owner_online(online), "age_s": round(age(t.since), 3), "sql": t.sql,
            "record": record_json(t.record, online), "lock": lock_json(t.lock, online)}


def _held(t: TableDdl) -> str:
    return "+".join(k for k, v in (("record", t.record), ("lock", t.lock)) if v is not None)


# -- ddl list -------------------------------------------------------------------------------------

def ddl_list(ops: ZkOps, target: Target, out: Output, args: argparse.Namespace) -> int:
    """Every DDL record and lock, with its owner and whether that owner is online."""
    online = ops.online()
    tables = ops.tables()
    if out.as_json:
        out.json({"cluster": target.describe(), "online": sorted(online),
                  "ddl": [table_json(t, online) for t in tables]})
        return EXIT_OK
    if not tables:
        out.line(f"no DDL record or lock in {target.paths.base}")
        return EXIT_OK
    rows = []
    for t in tables:
        acks = len(t.record.acks) if t.record is not None else "-"
        rows.append([t.name, t.phase, t.owner, yes_no(t.owner_online(online)), fmt_age(age(t.since)),
                     _held(t), acks, _short(t.sql)])
    out.table(["TABLE", "PHASE", "OWNER", "ONLINE", "AGE", "ZNODES", "ACKS", "SQL"], rows)
    stale = sum(1 for t in tables if not t.owner_online(online))
    if stale:
        out.line()
        out.line(f"{stale} with an offline owner: `pydble ddl gc` reconciles and removes them")
    return EXIT_OK


# -- ddl show -------------------------------------------------------------------------------------

def ddl_show(ops: ZkOps, target: Target, out: Output, args: argparse.Namespace) -> int:
    """One table's record, acks and lock."""
    schema, table = args.table
    online = ops.online()
    t = ops.table(schema, table)
    if out.as_json:
        out.json({"cluster": target.describe(), "exists": t.exists, **table_json(t, online)})
        return EXIT_OK if t.exists else EXIT_NOTHING
    if not t.exists:
        out.line(f"no DDL record or lock for {t.name}")
        return EXIT_NOTHING
    owner_state = "online" if t.owner_online(online) else "OFFLINE"
    out.pairs([("table", t.name), ("phase", t.phase), ("owner", f"{t.owner} ({owner_state})"),
               ("age", fmt_age(age(t.since))), ("sql", t.sql)])
    out.line()
    rv = t.record
    if rv is None:
        out.line("record: none")
    else:
        out.line(f"record: {target.paths.ddl_record(schema, table)} (znode version {rv.stat.version})")
        rec = rv.record
        if rec is None:
            out.pairs([("error", f"unreadable: {rv.error}")], "  ")
        else:
            items: list[tuple[str, Any]] = [
                ("instance", f"{rec.instance} ({'online' if rec.instance in online else 'OFFLINE'})"),
                ("type", rec.type), ("status", rec.status), ("created", fmt_time(rec.created_at))]
            if rec.message:
                items.append(("message", rec.message))
            if rec.reconciled_by:
                items.append(("reconciled_by", rec.reconciled_by))
            out.pairs(items, "  ")
        out.line()
        if rv.acks:
            out.line("acks:")
            rows = []
            for a in rv.acks:
                if a.ack is None:
                    rows.append([a.instance, "?", "?", yes_no(a.instance in online), f"unreadable: {a.error}"])
                else:
                    rows.append([a.instance, a.ack.status, yes_no(a.ack.ok), yes_no(a.instance in online),
                                 a.ack.message])
            out.table(["INSTANCE", "STATUS", "OK", "ONLINE", "MESSAGE"], rows, "  ")
        else:
            out.line("acks: none")
    out.line()
    lv = t.lock
    if lv is None:
        out.line("lock: none")
    else:
        out.line(f"lock: {target.paths.ddl_lock(schema, table)}")
        if lv.info is None:
            out.pairs([("error", f"unreadable: {lv.error}")], "  ")
        else:
            out.pairs([("instance", f"{lv.info.instance} ({'online' if lv.info.instance in online else 'OFFLINE'})"),
                       ("since", f"{fmt_time(lv.info.since)} ({fmt_age(age(lv.info.since))} ago)"),
                       ("session", hex(lv.stat.ephemeral_owner))], "  ")
    return EXIT_OK


# -- ddl release ----------------------------------------------------------------------------------

def ddl_release(ops: ZkOps, target: Target, out: Output, args: argparse.Namespace) -> int:
    """Release one table's DDL record and lock (zk/release.py, what `kill @@ddl_lock` runs too): refused
    while an owner is online or the DDL still runs on a backend, unless --force (which stops it first)."""
    schema, table = args.table
    name = table_node(schema, table)
    result: dict[str, Any] = {"cluster": target.describe(), "schema": schema, "table": table,
                              "forced": bool(args.force)}
    try:
        done = asyncio.run(_release(target, (schema, table), args))
    except ReleaseRefused as e:
        return _finish(out, result, "refused", e.message, EXIT_REFUSED)
    except (ZkTimeout, AuthFailedError) as e:
        raise ZkUnreachable(f"ZooKeeper at {target.hosts}: {e}") from None
    result.update(phase=done.phase or None, owner=done.owner or None, record_deleted=done.record_deleted,
                  lock_deleted=done.lock_deleted, stopped_on=done.stopped)
    stopped = f"; its DDL was stopped on dbGroup(s) {', '.join(done.stopped)}" if done.stopped else ""
    if done.nothing:
        if done.stopped:
            return _finish(out, result, "stopped", f"{name}: its DDL was stopped on dbGroup(s) "
                           f"{', '.join(done.stopped)} and its owner ended it", EXIT_OK)
        return _finish(out, result, "nothing", f"nothing to release: no DDL record or lock for {name}",
                       EXIT_NOTHING)
    what = " and ".join(w for w, f in (("record", done.record_deleted), ("lock", done.lock_deleted)) if f)
    msg = f"released {name}: {what} deleted (was {done.phase}, owner {done.owner}){stopped}"
    if done.record_deleted:
        msg += "; every instance reloads the table from the backends"
    if done.live:
        msg += f"; forced while {', '.join(done.live)} online"
    return _finish(out, result, "released", msg, EXIT_OK)


async def _release(target: Target, key: tuple[str, str], args: argparse.Namespace) -> Released:
    """One ZooKeeper session and, with --config, the backends (to find and stop the DDL) for the release."""
    from proxy.ddl.ddl_marker import ddl_running
    from proxy.backends.pool import Backends

    config = target.config
    zk = Zk(target.hosts, args.timeout, asyncio.get_running_loop(),
            config.cluster.auth if config is not None and config.cluster is not None else None)
    await zk.start(timeout=args.timeout)
    backends = Backends(config) if config is not None else None
    try:
        running = ((lambda marker, kill: ddl_running(backends, marker, kill)) if backends is not None else None)
        return await release_ddl(zk, target.paths, key, running, bool(args.force), "pydble ddl release",
                                 "--force")
    finally:
        if backends is not None:
            backends.close()
        await zk.stop()


def _finish(out: Output, result: dict[str, Any], action: str, message: str, code: int) -> int:
    result.update(action=action, message=message)
    if out.as_json:
        out.json(result)
    elif code == EXIT_OK:
        out.line(message)
    else:
        out.error(message)
    return code


# -- ddl gc ---------------------------------------------------------------------------------------

@dataclass
class Finding:
    """What the backends say about one table (the reconcile step of gc)."""

    state: str                                   # consistent | inconsistent | unknown | lost | ...
    detail: str
    deletable: bool
    variants: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unknown: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"state": self.state, "detail": self.detail, "variants": self.variants, "missing": self.missing,
                "unknown": self.unknown}


def _columns(sql: str) -> list[str]:
    from meta.model import parse_create  # sqlglot: only gc's report needs it

    try:
        return list(parse_create(sql).column_names)
    except Exception:  # noqa: BLE001 - a report must not fail on a parse gap
        return []


def _finding(meta: TableMeta) -> Finding:
    v = meta.verdict()
    variants = [{"nodes": list(x.nodes), "columns": _columns(x.sql)} for x in v.variants]
    unknown = dict(meta.unknown)
    if v.state is Consistency.CONSISTENT:
        detail = f"same structure on {','.join(meta.nodes)}; columns {', '.join(variants[0]['columns'])}"
        return Finding("consistent", detail, True, variants)
    if v.state is Consistency.LOST:
        return Finding("absent", f"no node of {','.join(meta.nodes)} has the table", True)
    if v.state is Consistency.UNKNOWN:
        why = "; ".join(f"{n}: {r}" for n, r in unknown.items())
        return Finding("unknown", f"could not read every node ({why}); kept", False, variants,
                       list(v.missing), unknown)
    parts = [f"{{{','.join(x['nodes'])}}}: columns {', '.join(x['columns'])}" for x in variants]
    if v.missing:
        parts.append(f"{{{','.join(v.missing)}}}: missing")
    if unknown:
        parts.append(f"{{{','.join(unknown)}}}: unreadable")
    return Finding("inconsistent", "; ".join(parts) + " (fix the nodes by hand; instances will report it)",
                   True, variants, list(v.missing), unknown)


def reconcile(config: Config, tables: list[TableDdl]) -> dict[tuple[str, str], Finding]:
    """Read each table's real structure from its shardingNodes (meta.loader.load_tables)."""
    from meta.loader import load_tables
    from proxy.backends.meta_link import MetaLink

    findings: dict[tuple[str, str], Finding] = {}
    keys = []
    for t in tables:
        sc = config.schemas.get(t.schema)
        if sc is None:
            findings[(t.schema, t.table)] = Finding("not checked", f"schema {t.schema} is not in this config", False)
        elif t.table not in sc.tables and sc.default_node is None:
            findings[(t.schema, t.table)] = Finding(
                "not checked", f"{t.name} is not a table of this config (and {t.schema} has no default node)", False)
        else:
            keys.append((t.schema, t.table))
    if not keys:
        return findings
    result = asyncio.run(load_tables(config, keys, backend=MetaLink(idle_per_node=0)))
    for key in keys:
        meta = result.tables.get(key)
        if meta is None:  # an unconfigured table not found on its schema's default node
            node = config.schemas[key[0]].default_node
            failed = result.failed_nodes.get(node or "")
            findings[key] = (Finding("unknown", f"default node {node} could not be read ({failed}); kept", False)
                             if failed else Finding("absent", f"not on the default node {node}", True))
        else:
            findings[key] = _finding(meta)
    return findings


def still_running(config: Config, tables: list[TableDdl]) -> dict[tuple[str, str], list[str]]:
    """The dbGroups where each table's DDL (its record's marker) still runs (proxy/ddl/ddl_marker.py): gc
    keeps those, since the structure read now would miss what the DDL is about to change."""
    marked = [(t, t.record.record.marker) for t in tables
              if t.record is not None and t.record.record is not None and t.record.record.ddl_id]
    if not marked:
        return {}

    async def ask() -> dict[tuple[str, str], list[str]]:
        from proxy.ddl.ddl_marker import ddl_running
        from proxy.backends.pool import Backends

        backends = Backends(config)
        try:
            return {(t.schema, t.table): await ddl_running(backends, marker) for t, marker in marked}
        finally:
            backends.close()
    return asyncio.run(ask())


NOT_RECONCILED = "not reconciled: needs the backends (--config FILE)"
NEEDS_BACKENDS = ("reconciling needs the backends, and --zk alone does not say where they are: pass "
                  "--config FILE (the table's structure is read from its shardingNodes first), or "
                  "--no-reconcile to delete without checking")


def ddl_gc(ops: ZkOps, target: Target, out: Output, args: argparse.Namespace) -> int:
    """Reconcile, then delete, the DDL records and locks whose owner is offline."""
    online = ops.online()
    tables = ops.tables()
    stale = [t for t in tables if not t.owner_online(online)]
    live = len(tables) - len(stale)
    rows: list[dict[str, Any]] = []
    refused = False
    can_reconcile = target.config is not None and not args.no_reconcile
    running = still_running(target.config, stale) if can_reconcile and stale else {}  # type: ignore[arg-type]
    findings = (reconcile(target.config, [t for t in stale if not running.get((t.schema, t.table))])  # type: ignore[arg-type]
                if can_reconcile and stale else {})
    for t in stale:
        row: dict[str, Any] = {"schema": t.schema, "table": t.table, "phase": t.phase, "owner": t.owner,
                               "age_s": round(age(t.since), 3), "sql": t.sql, "backends": None}
        finding = findings.get((t.schema, t.table))
        if running.get((t.schema, t.table)):
            ok, reason = False, (f"its DDL still runs on dbGroup(s) {', '.join(running[(t.schema, t.table)])}: "
                                 f"collected once it has ended (`pydble ddl release --force` stops it)")
        elif finding is not None:
            row["backends"] = finding.as_json()
            ok, reason = finding.deletable, finding.detail
        elif args.no_reconcile:
            ok, reason = True, "not reconciled (--no-reconcile)"
        elif t.record is None:
            ok, reason = True, "lock only, no DDL record: nothing to reconcile"
        else:
            ok, reason = False, NOT_RECONCILED
        if not ok:
            refused = True
            row.update(action="kept", reason=reason)
        elif args.dry_run:
            row.update(action="would delete", reason=reason)
        else:
            outcome = ops.delete_table(t, f"pydble ddl gc: {reason}")
            if outcome.changed:
                refused = True
                row.update(action="kept", reason="; ".join(outcome.notes))
            elif outcome.record_deleted or outcome.lock_deleted:
                row.update(action="deleted", reason=reason, notes=outcome.notes)
            else:
                row.update(action="gone", reason="already deleted (by a recovering instance?)")
        rows.append(row)
    code = EXIT_REFUSED if refused else EXIT_OK
    if out.as_json:
        for r in rows:
            if r["reason"] == NOT_RECONCILED:
                r["reason"] = NEEDS_BACKENDS
        out.json({"cluster": target.describe(), "dry_run": bool(args.dry_run), "reconciled": bool(findings),
                  "online": sorted(online), "skipped_owner_online": live, "tables": rows})
        return code
    if not stale:
        out.line(f"nothing to collect: {len(tables)} DDL(s) in flight, all with an online owner" if tables
                 else "nothing to collect: no DDL record or lock")
        return EXIT_OK
    out.table(["TABLE", "PHASE", "OWNER", "AGE", "BACKENDS", "ACTION", "DETAIL"],
              [[f"{r['schema']}.{r['table']}", r["phase"], r["owner"], fmt_age(r["age_s"]),
                r["backends"]["state"] if r["backends"] else "not checked", r["action"], r["reason"]]
               for r in rows])
    if live:
        out.line()
        out.line(f"{live} DDL(s) with an online owner left alone")
    unreconciled = sum(1 for r in rows if r["reason"] == NOT_RECONCILED)
    if unreconciled:
        out.error(f"kept {unreconciled} DDL record(s) whose owner is offline: {NEEDS_BACKENDS}")
    elif refused:
        out.error("some DDL records were kept: see DETAIL")
    return code


# -- ddl repair -----------------------------------------------------------------------------------

REPAIR_TIMEOUT_S = 3600.0   # a re-run copying ALTER on a big table may take long


def ddl_repair(args: argparse.Namespace) -> int:
    """Ask a running instance (its manager port) to re-run a table's half-applied DDL: `repair @@ddl`."""
    import pymysql

    from proxy.ddl.ddl_repair import NOTHING

    quiet_logs(args.verbose)
    out = Output(args.json)
    schema, table = args.table
    try:
        m = resolve_manager(args)
    except UsageError as e:
        out.error(str(e))
        return EXIT_USAGE
    sql = f"repair @@ddl where schema='{schema}' and table='{table}'"
    result: dict[str, Any] = {"instance": m.describe(), "schema": schema, "table": table}
    try:
        conn = manager_connect(m, args.timeout, REPAIR_TIMEOUT_S)
    except UsageError as e:
        return _finish(out, result, "unreachable", str(e), EXIT_USAGE)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            row = cur.fetchone()
        message = str(row[3]) if row else ""
    except pymysql.MySQLError as e:
        return _finish(out, result, "refused", f"({e.args[0]}) {e.args[-1]}", EXIT_REFUSED)
    finally:
        conn.close()
    if message.startswith(NOTHING):
        return _finish(out, result, "nothing", message, EXIT_NOTHING)
    return _finish(out, result, "repaired", message, EXIT_OK)


# -- wiring ---------------------------------------------------------------------------------------

def add_parser(sub: argparse._SubParsersAction) -> None:
    """`pydble ddl list|show|release|gc`."""
    d = sub.add_parser("ddl", help="cluster DDL records and locks in ZooKeeper")
    dsub = d.add_subparsers(dest="ddl_command", required=True)

    p = dsub.add_parser("list", help="DDL records and locks: owner, phase, age, owner online")
    add_connection_options(p)
    p.set_defaults(func=lambda a: run_command(a, ddl_list))

    p = dsub.add_parser("show", help="one table's DDL record, acks and lock")
    p.add_argument("table", metavar="SCHEMA.TABLE", type=parse_table_arg)
    add_connection_options(p)
    p.set_defaults(func=lambda a: run_command(a, ddl_show))

    p = dsub.add_parser("release", help="delete a table's DDL record and lock (not while its owner is online "
                                        "or its DDL still runs on a backend)")
    p.add_argument("table", metavar="SCHEMA.TABLE", type=parse_table_arg)
    p.add_argument("--force", action="store_true", help="release even though the owner is online or the DDL "
                                                        "still runs: it is stopped on the backends first")
    add_connection_options(p)
    p.set_defaults(func=lambda a: run_command(a, ddl_release))

    p = dsub.add_parser("gc", help="reconcile from the backends, then delete records and locks of offline owners")
    p.add_argument("--no-reconcile", action="store_true",
                   help="delete without reading the tables' structure from the backends")
    p.add_argument("--dry-run", action="store_true", help="report what would be deleted, delete nothing")
    add_connection_options(p)
    p.set_defaults(func=lambda a: run_command(a, ddl_gc))
    p = dsub.add_parser("repair", help="re-run a table's half-applied DDL on the nodes where it failed "
                                       "(through a running instance's manager port)")
    p.add_argument("table", metavar="SCHEMA.TABLE", type=parse_table_arg)
    add_manager_options(p)
    p.set_defaults(func=ddl_repair)
    from .history_ops import add_history_parser
    add_history_parser(dsub)
