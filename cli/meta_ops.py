"""`pydble meta check|reload`: a running instance's table metadata, through its manager port.

They send `check full @@metadata` and `reload @@metadata` (with their `where` forms) as an operator
would with the mysql CLI. Exit codes: 0 done (check: every table listed is consistent on its nodes and
in memory), 1 check found a table that is not, 2 bad arguments / config / instance unreachable or
refusing the login, 3 refused by the instance (see the message).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from .cluster_ops import (EXIT_OK, EXIT_REFUSED, EXIT_USAGE, Output, UsageError, add_manager_options,
                          manager_connect, quiet_logs, resolve_manager)

EXIT_INCONSISTENT = 1
RELOAD_TIMEOUT_S = 3600.0   # a reload of many tables over slow backends may take long
SHOWN = ("schema", "table", "reload_time", "consistent_in_sharding_nodes", "consistent_in_memory",
         "differing_sharding_nodes")


def _quoted(name: str, what: str) -> str:
    if not name or "'" in name or "\\" in name:
        raise UsageError(f"{what} {name!r} is not a name")
    return f"'{name}'"


def where_clause(args: argparse.Namespace) -> str:
    """The manager command's `where` from --schema/--table (and reload's --tables); '' for every table."""
    tables = getattr(args, "tables", None)
    if tables:
        if args.schema or args.table:
            raise UsageError("--tables goes without --schema/--table")
        names = []
        for t in tables.split(","):
            schema, dot, table = t.strip().partition(".")
            if not dot or not schema or not table:
                raise UsageError(f"--tables takes SCHEMA.TABLE names separated by commas, not {t.strip()!r}")
            names.append(_quoted(f"{schema}.{table}", "table"))
        return f" where table in ({', '.join(names)})"
    if args.table and not args.schema:
        raise UsageError("--table needs --schema")
    if not args.schema:
        return ""
    where = f" where schema={_quoted(args.schema, 'schema')}"
    return where + (f" and table={_quoted(args.table, 'table')}" if args.table else "")


def _ask(args: argparse.Namespace, sql_of: Callable[[argparse.Namespace], str]
         ) -> tuple[Output, int, list[str], list[tuple[Any, ...]]]:
    """Run one manager command: (output, exit code, columns, rows); a failure is one line on stderr."""
    import pymysql

    quiet_logs(args.verbose)
    out = Output(args.json)
    try:
        sql = sql_of(args)
        m = resolve_manager(args)
        conn = manager_connect(m, args.timeout, RELOAD_TIMEOUT_S)
    except UsageError as e:
        out.error(str(e))
        return out, EXIT_USAGE, [], []
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            cols = [d[0] for d in cur.description] if cur.description else []
            return out, EXIT_OK, cols, list(cur.fetchall())
    except pymysql.MySQLError as e:
        out.error(f"{m.describe()} refused `{sql}`: ({e.args[0]}) {e.args[-1]}")
        return out, EXIT_REFUSED, [], []
    finally:
        conn.close()


def _check_sql(args: argparse.Namespace) -> str:
    if not args.inconsistent:
        return "check full @@metadata_nodes" + where_clause(args)
    if args.schema or args.table:
        raise UsageError("--inconsistent goes without --schema/--table")
    return "check full @@metadata_nodes where consistent_in_sharding_nodes=0"


def meta_check(args: argparse.Namespace) -> int:
    """`check full @@metadata_nodes`: per table its reload time, whether its nodes and memory agree, and which
    nodes differ."""
    out, code, cols, rows = _ask(args, _check_sql)
    if code != EXIT_OK:
        return code
    records = [dict(zip(cols, r)) for r in rows]
    bad = [r for r in records if not (r.get("consistent_in_sharding_nodes") == 1 and r.get("consistent_in_memory") == 1)]
    if out.as_json:
        out.json({"tables": records, "inconsistent": len(bad)})
    elif records:
        shown = [c for c in SHOWN if c in cols]
        out.table([c.upper() for c in shown], [[r[c] for c in shown] for r in records])
    else:
        out.line("no table matches")
    return EXIT_INCONSISTENT if bad else EXIT_OK


def meta_reload(args: argparse.Namespace) -> int:
    """`reload @@metadata`: read the tables' structure from the backends again, on that instance."""
    out, code, _cols, _rows = _ask(args, lambda a: "reload @@metadata" + where_clause(a))
    if code != EXIT_OK:
        return code
    if out.as_json:
        out.json({"reloaded": True})
    else:
        out.line("reload metadata success")
    return EXIT_OK


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`pydble meta check|reload`."""
    m = sub.add_parser("meta", help="a running instance's table metadata (through its manager port)")
    msub = m.add_subparsers(dest="meta_command", required=True)
    c = msub.add_parser("check", help="per table: reload time, consistent on its nodes and in memory "
                                      "(exit 1 when a table is not)")
    c.add_argument("--schema", help="only this schema's tables")
    c.add_argument("--table", help="only this table (with --schema)")
    c.add_argument("--inconsistent", action="store_true", help="only the tables whose nodes disagree")
    add_manager_options(c)
    c.set_defaults(func=meta_check)
    r = msub.add_parser("reload", help="reload the tables' metadata from the backends (reload @@metadata)")
    r.add_argument("--schema", help="only this schema's tables")
    r.add_argument("--table", help="only this table (with --schema)")
    r.add_argument("--tables", metavar="S.T,S.T", help="only these tables")
    add_manager_options(r)
    r.set_defaults(func=meta_reload)
