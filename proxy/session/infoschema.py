"""`information_schema` as one MySQL holding the logical schemas would show it.

A backend's information_schema speaks of physical databases (`db1`, `db2`) and of everything on the
server, so a client's query on it is never sent as it is. Instead pydble:

1. reads the rows of the information_schema tables the query names from every shardingNode of the
   user's logical schemas (one multi-statement per node, filtered on the node's physical database);
2. keeps the rows of the tables each schema owns there (a configured table on its nodes, anything
   else on the schema's default node), one copy per logical table (its first node that has it; a
   sharding table's TABLES row sums the row and byte counts of all its nodes), and renames the
   physical database to the logical schema;
3. loads these rows into temporary tables that copy the information_schema tables' own column types,
   on one backend connection, and runs the client's query there with each `information_schema.X`
   replaced by its copy: MariaDB itself evaluates WHERE, joins, ORDER BY and functions exactly.

PROCESSLIST's rows are pydble's own client sessions (as SHOW PROCESSLIST's), never a backend's threads.
A query that mixes information_schema with other tables, writes, or names an information_schema table
pydble cannot answer from the logical schemas (privileges, status, engines' internals) is refused with
1235: a wrong answer is worse than none.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import structlog

from meta import scratch
from meta.config import SYSTEM_SCHEMAS
from meta.errors import NotSupported

from proxy.plan.local import PROCESSLIST_TABLE_COLUMNS, processlist_table_rows, substitute_database
from proxy.exec.materialize import chunks, inserts, quote, scratch_connection, setup_error
from proxy.exec.user_locks import ONLY_WITHOUT_TABLES, calls as user_lock_calls, refuse_assignment
from proxy.wire.constants import NOT_NULL_FLAG
from proxy.wire.messages import ColumnDef, ResultSet
from proxy.wire.packets import com_query, splice
from proxy.wire.reply import Reply
from proxy.plan.router import _HINT_PREFIX_RE
from proxy.plan.sqltok import first_keyword, tokenize

if TYPE_CHECKING:
    from proxy.runtime import SessionPort

log = structlog.get_logger("pydble.infoschema")


@dataclass(frozen=True)
class Mapped:
    """An information_schema table whose rows belong to tables: how to find and rename them."""

    schema_columns: tuple[str, ...]   # the first one filters on the node's physical database
    table_column: str | None          # None: rows belong to the schema itself (SCHEMATA)
    refuse_rows: bool = False         # pydble cannot rename what these rows hold (view and trigger bodies)
    referenced: tuple[str, str] | None = None   # (schema, table) columns of a foreign key's referenced table


MAPPED: dict[str, Mapped] = {
    "SCHEMATA": Mapped(("SCHEMA_NAME",), None),
    "TABLES": Mapped(("TABLE_SCHEMA",), "TABLE_NAME"),
    "COLUMNS": Mapped(("TABLE_SCHEMA",), "TABLE_NAME"),
    "STATISTICS": Mapped(("TABLE_SCHEMA", "INDEX_SCHEMA"), "TABLE_NAME"),
    "KEY_COLUMN_USAGE": Mapped(("TABLE_SCHEMA", "CONSTRAINT_SCHEMA"), "TABLE_NAME",
                               referenced=("REFERENCED_TABLE_SCHEMA", "REFERENCED_TABLE_NAME")),
    "TABLE_CONSTRAINTS": Mapped(("TABLE_SCHEMA", "CONSTRAINT_SCHEMA"), "TABLE_NAME"),
    "REFERENTIAL_CONSTRAINTS": Mapped(("CONSTRAINT_SCHEMA",), "TABLE_NAME",
                                      referenced=("UNIQUE_CONSTRAINT_SCHEMA", "REFERENCED_TABLE_NAME")),
    "CHECK_CONSTRAINTS": Mapped(("CONSTRAINT_SCHEMA",), "TABLE_NAME"),
    "PARTITIONS": Mapped(("TABLE_SCHEMA",), "TABLE_NAME"),
    "VIEWS": Mapped(("TABLE_SCHEMA",), "TABLE_NAME", refuse_rows=True),
    "TRIGGERS": Mapped(("TRIGGER_SCHEMA", "EVENT_OBJECT_SCHEMA"), "EVENT_OBJECT_TABLE", refuse_rows=True),
}
# Stored programs cannot be called through pydble (CALL is refused): the logical schemas have none.
# FILES is always empty on MariaDB (mysqldump asks it for tablespaces).
EMPTY = frozenset({"ROUTINES", "PARAMETERS", "EVENTS", "FILES"})
# Facts of the server, not of any database: the backend's own rows are the answer.
SERVER_WIDE = frozenset({"CHARACTER_SETS", "COLLATIONS", "COLLATION_CHARACTER_SET_APPLICABILITY", "ENGINES",
                         "KEYWORDS", "SQL_FUNCTIONS"})
# pydble's own client sessions, not the nodes'.
SESSIONS = frozenset({"PROCESSLIST"})
# Summed over a sharding table's nodes in its TABLES and PARTITIONS rows; the largest of its nodes; the
# rest is its first node's.
SUMMED = ("TABLE_ROWS", "DATA_LENGTH", "INDEX_LENGTH", "DATA_FREE")
LARGEST = ("AUTO_INCREMENT", "UPDATE_TIME")
_OTHER_SYSTEM = SYSTEM_SCHEMAS - {"information_schema"}
_PASS_KEYWORDS = frozenset({"SHOW", "DESC", "DESCRIBE", "USE"})   # structure of the views only, never rows


@dataclass(frozen=True)
class Ref:
    """One `information_schema.X` in the statement text."""

    start: int
    end: int
    table: str      # upper-case name
    spelling: str   # as the client wrote it (the copy's name, so `X.col` keeps resolving)


NAME = "information_schema"
# What runs while information_schema is the current database (USE information_schema, which MariaDB allows
# every user): its tables named as information_schema.<table>, statements that name no table, the session's own
_AS_CURRENT = frozenset({"SELECT", "WITH", "DO", "SET", "USE", "BEGIN", "START", "COMMIT", "ROLLBACK", "SAVEPOINT",
                         "RELEASE", "KILL", "SHOW", "DESC", "DESCRIBE"})


def refuse_as_current(kw: str) -> None:
    """Refuse what pydble does not run while information_schema is the current database."""
    if kw not in _AS_CURRENT:
        raise NotSupported(f"{kw or 'this statement'} is not supported by pydble while information_schema is the "
                           f"current database: USE a logical schema first")


def mentions(sql: str) -> bool:
    """True when a statement must be answered (or refused) here rather than sent to a backend."""
    return "information_schema" in sql.lower() and first_keyword(sql) not in _PASS_KEYWORDS


def _ident(tok: tuple[str, str, int, int]) -> str | None:
    kind, text = tok[0], tok[1]
    if kind == "w":
        return text
    if kind == "q":
        return text[1:-1].replace("``", "`")
    return None


def find_refs(sql: str) -> list[Ref]:
    """The information_schema tables a statement names; NotSupported for a use pydble cannot rewrite."""
    toks = tokenize(sql)
    refs: list[Ref] = []
    n = len(toks)
    for i, tok in enumerate(toks):
        if tok[0] in "he" and "information_schema" in tok[1].lower():
            raise NotSupported("information_schema inside an executable comment is not supported by pydble")
        name = _ident(tok)
        if name is None:
            continue
        low = name.lower()
        qualifies = i + 2 < n and toks[i + 1][:2] == ("o", ".") and (i == 0 or toks[i - 1][1] != ".")
        if low in _OTHER_SYSTEM and qualifies:
            raise NotSupported(f"a query naming {low} with information_schema is not supported by pydble")
        if low != "information_schema":
            continue
        table = _ident(toks[i + 2]) if qualifies else None
        if table is None:
            raise NotSupported("information_schema is answered by pydble only as information_schema.<table>")
        refs.append(Ref(tok[2], toks[i + 2][3], table.upper(), table))
    return refs


def _literal(v: bytes | None) -> str:
    # hex and an explicit character set: exact bytes whatever the session's sql_mode or charset
    return "NULL" if v is None else f"CONVERT(X'{v.hex()}' USING utf8mb4)"


class InfoSchema:
    """Answers one client query on information_schema for a session."""

    def __init__(self, session: SessionPort) -> None:
        self.session = session
        self.runtime = session.runtime
        self.config = session.runtime.config

    # -- which rows belong to which logical table --------------------------------------------------
    def _schemas(self) -> list[str]:
        return [s for s in self.session.schemas if s in self.config.schemas]

    def _nodes_of(self, schema: str) -> list[str]:
        sc = self.config.schemas[schema]
        nodes = dict.fromkeys(n for t in sc.tables.values() for n in t.nodes)
        if sc.default_node:
            nodes[sc.default_node] = None
        return list(nodes)

    def _owner_nodes(self, schema: str, table: str) -> tuple[str, ...]:
        """The nodes whose physical table is (a copy or a part of) the logical schema.table."""
        t = self.config.table(schema, table)
        if t is not None:
            return t.nodes
        default = self.config.default_home(schema, table)
        return (default,) if default else ()

    # -- reading the nodes -------------------------------------------------------------------------
    async def _read_node(self, node: str, tables: list[str]) -> list[ResultSet]:
        """This node's rows of each table (filtered on its physical database), in a clean session."""
        backends = self.runtime.backends
        db = backends.database_of(node).replace("\\", "\\\\").replace("'", "''")
        sql = ";".join(f"SELECT * FROM information_schema.{t} WHERE {MAPPED[t].schema_columns[0]} = '{db}'"
                       for t in tables)
        conn = await backends.acquire(node, self.session.format_flags)
        ok = False
        try:
            if conn.vars or not conn.autocommit:
                await conn.reset(backends.timeout_s)
            sc = await conn.query(sql, backends.timeout_s)
            ok = True
        finally:
            if not ok:
                conn.close()
            backends.release(node, conn)
        return [r for r in sc.results if r.columns]

    async def _logical_rows(self, tables: list[str]) -> dict[str, tuple[list[str], list[list[bytes | None]]]]:
        """Per information_schema table: (column names, rows) of the user's logical schemas."""
        schemas = self._schemas()
        homes = [self.config.home_node(s) for s in schemas]   # SCHEMATA's row, even for a schema with no table
        nodes = list(dict.fromkeys([n for s in schemas for n in self._nodes_of(s)] + [h for h in homes if h]))
        answers = await asyncio.gather(*(self._read_node(n, tables) for n in nodes))
        per_node = dict(zip(nodes, answers))
        out: dict[str, tuple[list[str], list[list[bytes | None]]]] = {}
        for i, t in enumerate(tables):
            columns = per_node[nodes[0]][i].columns if nodes else []
            names = [c.name.upper() for c in columns]
            if any([c.name.upper() for c in per_node[n][i].columns] != names for n in nodes):
                raise NotSupported(f"information_schema.{t} differs between the backend servers (different "
                                   f"versions); pydble cannot answer it as one server")
            rows: list[list[bytes | None]] = []
            for schema in schemas:
                node_rows, view_rows = await self.runtime.views.infoschema_rows(   # views pydble knows (proxy/session/views.py)
                    t, schema, names, {n: per_node[n][i].rows for n in nodes}, self.session.format_flags,
                    self.session.grants)
                rows += self._rows_of_schema(schema, MAPPED[t], names, node_rows, t) + view_rows
            out[t] = (names, rows)
        return out

    def _rows_of_schema(self, schema: str, spec: Mapped, names: list[str],
                        node_rows: dict[str, list[list[bytes | None]]], table: str) -> list[list[bytes | None]]:
        backends = self.runtime.backends
        sidx = [names.index(c) for c in spec.schema_columns if c in names]
        logical = schema.encode()
        if spec.table_column is None:  # SCHEMATA: the home node's database is the schema
            home = self.config.home_node(schema)
            rows = [list(r) for r in node_rows.get(home or "", [])[:1]]
            for r in rows:
                r[sidx[0]] = logical
            return rows
        tidx = names.index(spec.table_column)
        # (logical table) -> node -> rows, for the nodes that own that table in this schema
        owned: dict[str, dict[str, list[list[bytes | None]]]] = {}
        for node in self._nodes_of(schema):
            for r in node_rows[node]:
                name = (r[tidx] or b"").decode("utf-8", "replace")
                if scratch.is_scratch(name):
                    continue   # pydble's own view for a moment (or left behind): never listed
                if node in self._owner_nodes(schema, name) and self.session.sees(schema, name):
                    owned.setdefault(name.lower(), {}).setdefault(node, []).append(r)
        out: list[list[bytes | None]] = []
        for key in sorted(owned):
            by_node = owned[key]
            first_name = (next(iter(by_node.values()))[0][tidx] or b"").decode("utf-8", "replace")
            order = [n for n in self._owner_nodes(schema, first_name) if n in by_node]
            rep = order[0]
            if spec.refuse_rows:
                raise NotSupported(f"information_schema.{table} of schema {schema} lists objects whose "
                                   f"definitions name physical databases; pydble does not answer it")
            t = self.config.table(schema, first_name)
            parts = len(order) > 1 and table in ("TABLES", "PARTITIONS") and t is not None and t.type == "sharding"
            if parts and len({len(by_node[n]) for n in order}) > 1:
                raise NotSupported(f"information_schema.{table}: the parts of {schema}.{first_name} are "
                                   f"partitioned differently on its nodes; pydble cannot add them up")
            db = backends.database_of(rep).encode()
            for i, r in enumerate(by_node[rep]):
                r = list(r)
                for j in sidx:
                    if r[j] == db:
                        r[j] = logical
                if spec.referenced is not None:
                    self._rename_referenced(r, names, spec.referenced, rep, table)
                if parts:
                    self._sum_parts(r, names, [by_node[n][i] for n in order])
                out.append(r)
        return out

    def _rename_referenced(self, row: list[bytes | None], names: list[str], cols: tuple[str, str], node: str,
                           table: str) -> None:
        """A foreign key's referenced table named by its logical schema (it may be another schema's
        table in the same physical database); refused when no logical schema holds it."""
        sj, tj = names.index(cols[0]), names.index(cols[1])
        db, ref = row[sj], row[tj]
        if db is None or ref is None:
            return
        group = self.runtime.backends.pool_of(node).names
        logical = group.schema_of(db.decode("utf-8", "replace"), ref.decode("utf-8", "replace")) if group else None
        if logical is None:
            raise NotSupported(f"information_schema.{table} lists a foreign key to a table outside the logical "
                               f"schemas; pydble does not answer it")
        row[sj] = logical.encode()

    @staticmethod
    def _sum_parts(row: list[bytes | None], names: list[str], parts: list[list[bytes | None]]) -> None:
        """A sharding table's TABLES (or PARTITIONS) row: row and byte counts of all its parts, its
        latest update and the largest next AUTO_INCREMENT."""
        for col in SUMMED:
            if col in names:
                j = names.index(col)
                vals = [p[j] for p in parts]
                if all(v is not None for v in vals):
                    row[j] = str(sum(int(v) for v in vals)).encode()  # type: ignore[arg-type]
        for col in LARGEST:
            if col in names:
                j = names.index(col)
                vals = [p[j] for p in parts if p[j] is not None]
                if vals:  # times as 'YYYY-MM-DD HH:MM:SS' are ordered as text
                    row[j] = max(vals, key=lambda v: int(v) if col == "AUTO_INCREMENT" else v)  # type: ignore
        if "AVG_ROW_LENGTH" in names and "TABLE_ROWS" in names and "DATA_LENGTH" in names:
            rows, data = row[names.index("TABLE_ROWS")], row[names.index("DATA_LENGTH")]
            if rows is not None and data is not None:
                row[names.index("AVG_ROW_LENGTH")] = str(int(data) // int(rows) if int(rows) else 0).encode()

    # -- answering ---------------------------------------------------------------------------------
    async def answer(self, sql: str, r: Reply, more: bool) -> bool:
        """Run the client's query over the logical rows; refuse what cannot be answered exactly.
        False when the statement names information_schema only in a string or a comment."""
        refs = find_refs(sql)
        if not refs:
            return False
        kw = first_keyword(sql)
        if kw in ("SELECT", "WITH"):
            # a backend would answer 'db3', its own thread id and its own account
            s = self.session
            sql = substitute_database(sql, s.schema, s.conn_id, f"{s.user}@{s.peer}")
            refs = find_refs(sql)
        if kw not in ("SELECT", "WITH"):
            raise NotSupported("pydble answers information_schema in SELECT statements only")
        for ref in refs:
            if not any(ref.table in known for known in (MAPPED, EMPTY, SERVER_WIDE, SESSIONS)):
                raise NotSupported(f"information_schema.{ref.table} is not answered by pydble: it describes the "
                                   f"backend servers, not the logical schemas")
        plan = self.runtime.router.route(sql, self.session.schema)
        if plan.is_write or plan.tables:
            raise NotSupported("a query that mixes information_schema with tables is not supported by pydble")
        refuse_assignment(sql)   # as for any statement: nothing may stay on the shared backend connection
        if user_lock_calls(sql):
            raise NotSupported(ONLY_WITHOUT_TABLES)
        copies = {ref.spelling: ref.table for ref in refs if ref.table not in SERVER_WIDE}
        mapped = sorted({t for t in copies.values() if t in MAPPED})
        data = await self._logical_rows(mapped) if mapped else {}
        if "PROCESSLIST" in copies.values():
            s = self.session
            data["PROCESSLIST"] = (list(PROCESSLIST_TABLE_COLUMNS), processlist_table_rows(
                s.client_sessions(), s.user, s.admin, time.perf_counter()))
        text = self._rewrite(sql, refs)
        parts = chunks(self._setup(copies, data))
        drop = ("DROP TEMPORARY TABLE IF EXISTS " + ", ".join(quote(m) for m in copies)) if copies else ""
        timeout = self.runtime.backends.timeout_s
        ex = self.session.executor
        node = self.runtime.any_node(self.session.schema)
        conn = await scratch_connection(ex, node)   # (the session's own would start its transaction, autocommit=0)
        clean = not copies
        try:
            for chunk in parts[:-1]:
                sc = await conn.run(com_query(";".join(chunk)), timeout, collect=True)
                setup_error(sc, len(chunk), "information_schema")
            # In one round trip: the column definitions of the tables copied, as this session sees them
            # (a copy's TEXT columns are LONGTEXT, information_schema's declare a smaller length), the
            # last chunk of rows, the client's query and the DROP.
            tables = sorted(set(copies.values()))
            probes = [f"SELECT * FROM information_schema.{t} WHERE 0" for t in tables]
            last = parts[-1] if parts else []
            sc = await conn.run(com_query(";".join(probes + last + [text] + ([drop] if drop else []))), timeout,
                                collect=True)
            n = len(probes) + len(last)
            setup_error(sc, n, "information_schema")
            real = {(t, c.org_name.upper()): c for t, res in zip(tables, sc.results) for c in res.columns}
            if sc.error is None:
                clean = True
                sc.results = sc.results[n:n + 1]
            else:  # the client's query failed: its error is the answer, the DROP did not run
                sc.results = []
                await conn.query(drop, timeout)
                clean = True
        finally:
            if not clean:
                conn.close()  # its temporary copies go with it
            self.runtime.backends.release(node, conn)
        upper = {k.lower(): v for k, v in copies.items()}
        for res in sc.results:
            res.columns = [c if c.org_table.lower() not in upper
                           else _as_infoschema(c, upper[c.org_table.lower()], real) for c in res.columns]
        ex.add_results(sc, r, more)
        log.debug("information_schema answered", tables=sorted(set(copies.values())), node=node,
                  rows={t: len(rows) for t, (_, rows) in data.items()})
        return True

    @staticmethod
    def _setup(copies: dict[str, str], data: dict[str, tuple[list[str], list[list[bytes | None]]]]) -> list[str]:
        """The statements that create the temporary copies and fill them with the logical rows."""
        stmts: list[str] = []
        for spelling, table in copies.items():
            q = quote(spelling)
            stmts.append(f"CREATE TEMPORARY TABLE {q} AS SELECT * FROM information_schema.{table} WHERE 0")
            columns, rows = data.get(table, ([], []))
            into = f"INSERT INTO {q} (" + ",".join(quote(c) for c in columns) + ") VALUES "
            stmts += inserts(into, ("(" + ",".join(_literal(x) for x in row) + ")" for row in rows))
        return stmts

    @staticmethod
    def _rewrite(sql: str, refs: list[Ref]) -> str:
        """The statement on the copies; a shardingNode hint goes (the answer is the logical one anyway)."""
        spans = [(f.start, f.end, quote(f.spelling)) for f in refs if f.table not in SERVER_WIDE]
        spans += [(t[2], t[3], "") for t in tokenize(sql) if t[0] == "h" and _HINT_PREFIX_RE.match(t[1])]
        return splice(sql, sorted(spans))


def _as_infoschema(c: ColumnDef, table: str, real: dict[tuple[str, str], ColumnDef]) -> ColumnDef:
    """A column of a copy, described as the information_schema column it copies; nullable where the query
    made it so (the inner side of an outer join), as the copy (made NOT NULL where the original is) tells."""
    r = real.get((table, c.org_name.upper()))
    if r is None:
        return replace(c, schema="information_schema", org_table=table, raw=None)
    flags = r.flags if c.flags & NOT_NULL_FLAG else r.flags & ~NOT_NULL_FLAG
    return replace(c, schema="information_schema", org_table=table, type=r.type, charset=r.charset,
                   length=r.length, flags=flags, decimals=r.decimals, raw=None)


async def answer(session: SessionPort, sql: str, r: Reply, more: bool) -> bool:
    """Answer (or refuse) a statement that names information_schema; False if it names none of its tables."""
    return await InfoSchema(session).answer(sql, r, more)


__all__ = ["MAPPED", "NAME", "answer", "find_refs", "mentions", "refuse_as_current"]
