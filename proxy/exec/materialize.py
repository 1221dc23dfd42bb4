"""Cross-node reads answered by one MariaDB: the rows a SELECT reads are copied into temporary tables.

A SELECT whose tables are not co-located (window functions over several nodes, JOINs of three tables,
non-equi joins, subqueries over tables on other nodes, correlated or not) cannot be split into per-node
statements whose answers pydble could merge exactly. `Materialize` answers it as one MariaDB holding all
the rows would, by letting one MariaDB evaluate it:

1. every table the statement reads is read from its nodes (through the session's own connections, so a
   transaction sees its own writes), only the rows its WHERE keeps where that is exact (a conjunct on
   that table alone, in the top SELECT, on a table read once and not NULL-extended by an outer join);
2. on one scratch connection (borrowed from a pool, not the session's) each table becomes a TEMPORARY
   table of its real definition (the SHOW CREATE TABLE text pydble keeps in memory) named by its logical
   schema and name, so columns, collations and the result's column metadata are the table's own;
3. the rows go in as hex literals (exact bytes, whatever the session's character set) and TIMESTAMPs as
   epoch seconds loaded in UTC, and the client's statement runs there, its tables qualified by their
   logical schema; the temporary tables are dropped (or the connection closed) whatever happens.

Rows held (read and answered) count against `[server] merge_memory_mb`. What one MariaDB evaluating the
statement on the scratch connection would answer differently from the client's session (NOW(), RAND(),
user variables, FOUND_ROWS(), ...) or what must not run there (FOR UPDATE, INTO) is refused with 1235.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterable

from meta.errors import NotSupported, ProxyError

from proxy.plan.analysis import Ref
from proxy.exec.join import _aliases, _is_and, _read, _split
from proxy.wire import constants as C
from proxy.wire.packets import frame, splice
from proxy.wire.response import Budget, BudgetExceeded
from proxy.plan.sqltok import Token, tokenize

if TYPE_CHECKING:  # pragma: no cover
    from proxy.runtime import ExecContext
    from proxy.backends.backend import BackendConnection
    from proxy.wire.response import ResponseScanner
    from proxy.wire.reply import Reply

MAX_VIEW_DEPTH = 8
INSERT_CHUNK = 1 << 20          # bytes of one INSERT statement
STATEMENTS_CHUNK = 4 * INSERT_CHUNK   # bytes of one multi-statement round trip

# Functions whose value depends on the session, the server or the moment: evaluated on the scratch
# connection they would be its own (DATABASE(), USER(), CONNECTION_ID() are substituted before this).
SESSION_FUNCTIONS = frozenset({
    "NOW", "SYSDATE", "CURDATE", "CURTIME", "CURRENT_DATE", "CURRENT_TIME", "CURRENT_TIMESTAMP", "LOCALTIME",
    "LOCALTIMESTAMP", "UTC_DATE", "UTC_TIME", "UTC_TIMESTAMP", "UNIX_TIMESTAMP", "RAND", "UUID", "UUID_SHORT",
    "SYS_GUID", "LAST_INSERT_ID", "FOUND_ROWS", "ROW_COUNT", "GET_LOCK", "RELEASE_LOCK", "RELEASE_ALL_LOCKS",
    "IS_FREE_LOCK", "IS_USED_LOCK", "SLEEP", "BENCHMARK", "NEXTVAL", "LASTVAL", "SETVAL",
    "MASTER_POS_WAIT", "MASTER_GTID_WAIT", "LOAD_FILE", "CURRENT_ROLE", "DATABASE", "SCHEMA", "USER",
    "CURRENT_USER", "SESSION_USER", "SYSTEM_USER", "CONNECTION_ID", "VERSION", "BINLOG_GTID_POS"})
# the same without parentheses
_BARE_SESSION = frozenset({"CURRENT_DATE", "CURRENT_TIME", "CURRENT_TIMESTAMP", "LOCALTIME", "LOCALTIMESTAMP",
                           "CURRENT_USER", "CURRENT_ROLE", "UTC_DATE", "UTC_TIME", "UTC_TIMESTAMP"})
_NUMERIC = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal", "numeric",
                      "float", "double", "real", "year", "dec", "fixed"})
# a plan with these may go through a temporary table, which changes the type reported for long text expressions
_SORTING = frozenset({"ORDER", "GROUP", "DISTINCT", "UNION", "INTERSECT", "EXCEPT", "OVER", "DISTINCTROW"})
_MODIFIERS = frozenset({"ALL", "DISTINCT", "DISTINCTROW", "HIGH_PRIORITY", "STRAIGHT_JOIN"})   # and SQL_*
_BLOBS = frozenset({C.T_TINY_BLOB, C.T_BLOB, C.T_MEDIUM_BLOB, C.T_LONG_BLOB})
_HEADER = re.compile(r"\A\s*CREATE\s+TABLE\s+(`(?:[^`]|``)+`)\s*\(", re.I)
_COLUMN = re.compile(r"\s*(`(?:[^`]|``)+`)\s+([A-Za-z]+)")
_GENERATED = re.compile(r"\sGENERATED\s+ALWAYS\s+AS\s|\sAS\s+\(.*\)\s+(?:VIRTUAL|PERSISTENT|STORED)\b", re.I)
_DROPPED_KEYS = re.compile(r"\s*(?:CONSTRAINT\s+\S+\s+)?FOREIGN\s+KEY\b|\s*(?:FULLTEXT|SPATIAL)\s+(?:KEY|INDEX)\b",
                           re.I)
_PARTITIONS = re.compile(r"\s*(?:/\*!\d+\s*)?PARTITION\s+BY\b", re.I)


def _refuse(why: str) -> NotSupported:
    return NotSupported(f"this cross-node query cannot be answered by pydble: {why}")


def quote(name: str) -> str:
    """A backquoted identifier."""
    return "`" + name.replace("`", "``") + "`"


def chunks(stmts: list[str], size: int = STATEMENTS_CHUNK) -> list[list[str]]:
    """Statements grouped into multi-statements of a few MB (well under max_allowed_packet)."""
    out: list[list[str]] = []
    total = 0
    for st in stmts:
        if not out or total + len(st) > size:
            out.append([])
            total = 0
        out[-1].append(st)
        total += len(st)
    return out


def inserts(head: str, values: Iterable[str], budget: Budget | None = None) -> list[str]:
    """INSERT statements of about INSERT_CHUNK bytes each: `head` (INSERT INTO t (...) VALUES) and row
    literals; with a budget, their text is charged to it."""
    out: list[str] = []
    batch: list[str] = []
    size = 0
    for v in values:
        batch.append(v)
        size += len(v)
        if size > INSERT_CHUNK:
            if budget is not None:
                budget.take(size)
            out.append(head + ",".join(batch))
            batch, size = [], 0
    if batch:
        if budget is not None:
            budget.take(size)
        out.append(head + ",".join(batch))
    return out


def setup_error(sc: ResponseScanner, n: int, what: str) -> None:
    """Raise when one of the first n statements of a response (pydble's own set-up) failed."""
    if sc.error is not None and len(sc.results) < n:
        raise ProxyError(f"{what} could not be prepared on a backend: {sc.error.message}", sc.error.code,
                         sc.error.sqlstate)


@dataclass
class Column:
    """One column of a copied table and how its values travel."""

    name: str
    kind: str       # "num": as its text, "ts": epoch seconds, "bytes": hex of its bytes


@dataclass
class Copy:
    """One table the statement reads: its temporary twin and the rows it needs."""

    schema: str
    name: str                                  # as the table was created (SHOW CREATE TABLE)
    create: str                                # CREATE TEMPORARY TABLE text
    columns: list[Column]
    where: list[str] = field(default_factory=list)   # conjuncts pushed down to its nodes
    alias: str = ""                            # how the pushed conjuncts name it

    @property
    def full(self) -> str:
        return f"{quote(self.schema)}.{quote(self.name)}"


def temporary_definition(schema: str, create: str) -> tuple[str, str, list[Column]]:
    """(table name, CREATE TEMPORARY TABLE text, copied columns) from a SHOW CREATE TABLE text: foreign
    keys, FULLTEXT/SPATIAL indexes and partitioning go (temporary tables have none); generated columns
    are created and recomputed, never copied."""
    m = _HEADER.match(create)
    if m is None:
        raise _refuse("the table's definition in memory is not a CREATE TABLE pydble can read")
    name = m.group(1)[1:-1].replace("``", "`")
    body_start = m.end()
    close = create.rfind("\n)")
    if close < body_start:
        raise _refuse(f"the definition of {schema}.{name} in memory is not one pydble can read")
    options = create[close + 2:]
    part = _PARTITIONS.search(options)
    if part is not None:
        options = options[:part.start()]
    lines = [ln.rstrip().rstrip(",") for ln in create[body_start:close].split("\n") if ln.strip()]
    kept: list[str] = []
    columns: list[Column] = []
    for ln in lines:
        if _DROPPED_KEYS.match(ln):
            continue
        kept.append(ln)
        c = _COLUMN.match(ln)
        if c is None:
            continue
        if _GENERATED.search(ln):
            continue
        ctype = c.group(2).lower()
        kind = "num" if ctype in _NUMERIC else "ts" if ctype == "timestamp" else "bytes"
        columns.append(Column(c.group(1)[1:-1].replace("``", "`"), kind))
    text = (f"CREATE TEMPORARY TABLE {quote(schema)}.{quote(name)} (\n" + ",\n".join(kept) + "\n)"
            + options.rstrip())
    return name, text, columns


def _value(v: bytes | None, kind: str) -> str:
    if v is None:
        return "NULL"
    if kind == "num":
        return v.decode("ascii")
    if kind == "ts":
        return f"FROM_UNIXTIME({v.decode('ascii')})"
    return f"X'{v.hex()}'"


def _select_item(c: Column) -> str:
    q = quote(c.name)
    if c.kind == "ts":
        return f"UNIX_TIMESTAMP({q})"
    if c.kind == "bytes":
        return f"CAST({q} AS BINARY)"   # no conversion to the session's character set: the column's bytes
    return q


def _query(sql: str) -> bytes:
    return frame(0, bytes((C.COM_QUERY,)) + sql.encode("utf-8", "surrogateescape"))


def _item_names(an: object, toks: list[Token], sql: str, spans: list[tuple[int, int, str]]) -> dict[str, str]:
    """MariaDB names an unaliased select item by its text (its first 255 characters), which qualifying the
    tables of a subquery in it changes: the name it gets over the copies -> the name the client's text gives."""
    top = an.top  # type: ignore[attr-defined]
    if top is None or not top.branches or top.branches[0].select_list is None or not spans:
        return {}
    a, b = top.branches[0].select_list
    while a < b and toks[a][0] == "w" and (toks[a][1].upper() in _MODIFIERS or toks[a][1].upper().startswith("SQL_")):
        a += 1
    names: dict[str, str] = {}
    depth, first = 0, a
    for k in range(a, b + 1):
        if k < b and toks[k][0] == "o":
            depth += toks[k][1] == "("
            depth -= toks[k][1] == ")"
        if k < b and not (depth == 0 and toks[k][:2] == ("o", ",")):
            continue
        if first < k:
            start, end = toks[first][2], toks[k - 1][3]
            inside = sorted(x for x in spans if start <= x[0] and x[1] <= end)
            if inside:
                text = sql[start:end]
                names[splice(text, [(x - start, y - start, t) for x, y, t in inside])[:255]] = text[:255]
        first = k + 1
    return names


async def scratch_connection(ex: ExecContext, node: str) -> BackendConnection:
    """A pooled connection of node with the session's variables, in autocommit and never one the session holds:
    what the proxy loads and reads there opens no transaction of the client's (nor its snapshot). The caller
    gives it back to the pool (closing it first when temporary tables may be left on it)."""
    backends = ex.runtime.backends
    session = ex.session
    conn = await backends.acquire(node, session.format_flags)
    try:
        if conn.vars or not conn.autocommit:
            await conn.reset(backends.timeout_s)
        state = [sql for sql in session.vars.values() if sql]
        if state:
            await conn.query(";".join(state), backends.timeout_s)
        conn.vars = dict(session.vars)
    except BaseException:
        backends.release(node, conn)
        raise
    return conn


class Materialize:
    """One SELECT answered on a scratch connection over temporary copies of the rows it reads."""

    def __init__(self, executor: ExecContext, sql: str) -> None:
        self.ex = executor
        self.runtime = executor.runtime
        session = executor.session
        router = self.runtime.router
        for _ in range(MAX_VIEW_DEPTH):
            if router.views is not None:    # views pydble keeps become derived tables, their grants checked
                sql = router.views.expand(router, sql, session.schema, session.grants)
            toks = tokenize(sql)
            while toks and toks[-1][:2] == ("o", ";"):
                toks.pop()
            self._check_tokens(toks)
            an = router.analyzer.analyze(sql, toks, session.schema)
            if session.grants is not None:   # the access boundary, again, before any row is read
                session.grants.check(an.access)
            inlined = self._inline_node_views(sql, toks, an.refs)
            if inlined is None:
                break
            sql = inlined
        else:
            raise _refuse(f"views nested more than {MAX_VIEW_DEPTH} deep")
        if an.kind != "select" or an.is_write or an.mode != "query" or not an.refs:
            raise _refuse("only SELECT statements are answered over copies of their tables")
        if self.ex.locked:
            raise _refuse("it would read tables outside the session's LOCK TABLES")
        if any(sc.into for sc in an.scopes):
            raise _refuse("SELECT ... INTO is not supported over tables on several shardingNodes")
        self.copies: dict[tuple[str, str], Copy] = {}
        uses: dict[tuple[str, str], int] = {}
        for ref in an.refs:
            t = ref.table
            if t.type not in ("sharding", "global", "single", "default"):
                raise _refuse(f"{t.full} is not a table whose rows pydble can copy")
            key = (t.schema, t.name)
            uses[key] = uses.get(key, 0) + 1
            if key not in self.copies:
                self.copies[key] = self._copy_of(t.schema, t.name)
        self._push_down(an, toks, sql, uses)
        spans = []
        for ref in an.refs:
            a, b = ref.span
            if a < 0:
                raise _refuse("pydble could not find a table's name in the statement text")
            spans.append((toks[a][2], toks[b - 1][3], self.copies[(ref.table.schema, ref.table.name)].full))
        self.sql = splice(sql[:toks[-1][3]], sorted(spans))
        self.names = _item_names(an, toks, sql, spans)
        self.sorts = any(t[0] == "w" and t[1].upper() in _SORTING for t in toks)
        self.node = an.refs[0].table.nodes[0]

    # -- planning ----------------------------------------------------------------------------------
    @staticmethod
    def _check_tokens(toks: list[Token]) -> None:
        """Refuse what the scratch connection would evaluate differently from the client's session."""
        n = len(toks)
        for i, (kind, text, _, _) in enumerate(toks):
            if kind == "v":
                raise _refuse(f"it reads the variable {text}, whose value on the scratch connection would not "
                              f"be the session's")
            if kind in "hpe":
                raise _refuse("hints, placeholders and unterminated text are not supported over copies")
            if kind != "w":
                continue
            up = text.upper()
            call = i + 1 < n and toks[i + 1][1] == "("
            after_dot = i > 0 and toks[i - 1][1] == "."
            if up == "UNIX_TIMESTAMP" and call and i + 2 < n and toks[i + 2][1] != ")":
                continue   # of a value: the session's time_zone, which the scratch connection has
            if not after_dot and ((call and up in SESSION_FUNCTIONS) or up in _BARE_SESSION):
                raise _refuse(f"{up}() depends on the session, the server or the moment; evaluated on another "
                              f"connection its value would not be the one MariaDB gives the client")
            if up in ("FOR", "LOCK") and i + 1 < n and toks[i + 1][1].upper() in ("UPDATE", "IN", "SHARE"):
                raise _refuse("FOR UPDATE / LOCK IN SHARE MODE would lock copies, not the tables' rows")
            if up in ("SQL_CALC_FOUND_ROWS", "INTO", "PROCEDURE", "NEXT", "PREVIOUS") and not after_dot:
                if up in ("NEXT", "PREVIOUS") and not (i + 1 < n and toks[i + 1][1].upper() == "VALUE"):
                    continue
                raise _refuse(f"{up} is not supported over copies of the tables")

    def _inline_node_views(self, sql: str, toks: list[Token], refs: list[Ref]) -> str | None:
        """The statement with each view that lives on a node replaced by its SELECT (a derived table over
        its tables, whose rows are copied like any table's); None when it reads no such view."""
        views = self.runtime.router.views
        if views is None:
            return None
        spans = []
        for ref in refs:
            v = views.catalog.get(ref.table.schema, ref.table.name)
            if v is None or v.node is None:
                continue
            if v.columns or ref.span[0] < 0:
                raise _refuse(f"the view {v.schema}.{v.name} names its columns; pydble cannot read it as a "
                              f"derived table")
            a, b = ref.span
            text = f"({v.select})" + ("" if ref.has_alias else f" AS {quote(v.name)}")
            spans.append((toks[a][2], toks[b - 1][3], text))
        return splice(sql, sorted(spans)) if spans else None

    def _copy_of(self, schema: str, table: str) -> Copy:
        meta = self.runtime.registry.get(schema, table)
        if meta is None or meta.structure is None:
            raise _refuse(f"pydble has no definition of {schema}.{table} in memory (a view on a node, or a "
                          f"table whose metadata is not loaded)")
        name, create, columns = temporary_definition(schema, meta.structure)
        if not columns:
            raise _refuse(f"{schema}.{table} has no column pydble can copy")
        return Copy(schema, name, create, columns)

    def _push_down(self, an: object, toks: list[Token], sql: str, uses: dict[tuple[str, str], int]) -> None:
        """The top SELECT's WHERE conjuncts that read one table only, sent to that table's nodes where it
        is exact: the table is read once and its rows are never NULL-extended by an outer join."""
        top = an.top  # type: ignore[attr-defined]
        if top is None or top.union or len(top.branches) != 1:
            return
        sc = top.branches[0]
        if sc.where is None or not sc.refs or len(sc.refs) > 8:
            return
        nullable = {id(it) for _, items in sc.outer for it in items}
        refs: list[Ref] = list(sc.refs)
        names = tuple(r.alias for r in refs)
        if len(set(names)) != len(names):
            return
        cols = tuple(frozenset(c.name.lower() for c in self.copies[(r.table.schema, r.table.name)].columns)
                     if not sc.derived else None for r in refs)
        a, b = sc.where
        for x, y in _split(toks, a, b, _is_and):
            if y <= x or any(toks[i][0] == "w" and toks[i][1].upper() == "SELECT" for i in range(x, y)):
                continue
            used = _aliases(toks, x, y, names, cols)   # type: ignore[arg-type]
            if not used or len(used) != 1:
                continue
            ref = refs[next(iter(used))]
            key = (ref.table.schema, ref.table.name)
            if uses[key] != 1 or id(ref) in nullable:
                continue
            copy = self.copies[key]
            copy.where.append(sql[toks[x][2]:toks[y - 1][3]])
            copy.alias = ref.alias

    def explain(self) -> str:
        """One line for EXPLAIN: what is copied where."""
        tables = ", ".join(f"{c.schema}.{c.name}" + (" (filtered)" if c.where else "") for c in self.copies.values())
        return f"materialize {tables} into temporary tables on {self.node} and run the statement there"

    # -- running -----------------------------------------------------------------------------------
    async def run(self, r: Reply, more: bool) -> None:
        """Copy the rows, answer the statement on the scratch connection, send its result."""
        budget = Budget(self.runtime.config.server.merge_memory_mb << 20)
        try:
            await self._run(budget, r, more)
        except BudgetExceeded:
            raise self._over_budget(budget) from None

    def _over_budget(self, budget: Budget) -> ProxyError:
        return ProxyError(f"the rows this cross-node query copies exceed the merge memory budget "
                          f"({budget.limit >> 20} MB, [server] merge_memory_mb); add a narrower WHERE",
                          1038, "HY001")

    async def _read(self, copy: Copy, budget: Budget) -> list[list[bytes | None]]:
        items = ", ".join(_select_item(c) for c in copy.columns)
        alias = quote(copy.alias or copy.name)
        sql = f"SELECT {items} FROM {copy.full} AS {alias}"
        if copy.where:
            sql += " WHERE " + " AND ".join(f"({w})" for w in copy.where)
        try:
            return (await _read(self.ex, sql, budget)).rows
        except ProxyError as e:
            if e.code == 1038:
                raise self._over_budget(budget) from None
            raise

    @staticmethod
    def _inserts(copy: Copy, rows: list[list[bytes | None]], budget: Budget) -> list[str]:
        head = f"INSERT INTO {copy.full} ({', '.join(quote(c.name) for c in copy.columns)}) VALUES "
        kinds = [c.kind for c in copy.columns]
        return inserts(head, ("(" + ",".join(_value(x, k) for x, k in zip(row, kinds)) + ")" for row in rows),
                       budget)

    async def _run(self, budget: Budget, r: Reply, more: bool) -> None:
        ex = self.ex
        backends = self.runtime.backends
        timeout = backends.timeout_s
        data = {key: await self._read(copy, budget) for key, copy in self.copies.items()}
        conn = await scratch_connection(ex, self.node)
        clean = False
        try:
            # loading: UTC for TIMESTAMPs given as epoch seconds, no strictness about values that came
            # out of these very columns (zero dates), then the session's own settings again
            setup = ["SET @pydble_tz = @@session.time_zone, @pydble_mode = @@session.sql_mode, "
                     "SESSION time_zone = '+00:00', SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'"]
            setup += [c.create for c in self.copies.values()]
            for key, copy in self.copies.items():
                setup += self._inserts(copy, data.pop(key), budget)
            setup.append("SET SESSION time_zone = @pydble_tz, SESSION sql_mode = @pydble_mode, "
                         "@pydble_tz = NULL, @pydble_mode = NULL")
            for chunk in chunks(setup):
                sc = await conn.run(_query(";".join(chunk)), timeout, collect=True)
                if sc.error is not None:   # a definition a temporary table cannot have (system versioning...)
                    raise _refuse(f"its tables could not be copied into temporary tables: {sc.error.message}")
            del setup
            sc = await conn.run(_query(self.sql), timeout, collect=True, budget=budget)
            await ex.keep_warnings([(conn, sc)])
            await conn.query("DROP TEMPORARY TABLE IF EXISTS " + ", ".join(c.full for c in self.copies.values()),
                             timeout)
            clean = True
        except ProxyError as e:
            if e.code == 1038 and "merge memory" in e.message:
                raise self._over_budget(budget) from None
            raise
        finally:
            if not clean:
                conn.close()   # its temporary tables go with it
            backends.release(self.node, conn)
        for res in sc.results if self.sorts else ():
            for c in res.columns:
                if c.type in _BLOBS and not c.org_table:
                    raise _refuse(f"the type MariaDB reports for the TEXT/BLOB/JSON expression {c.name} depends on "
                                  f"whether its plan sorts through a temporary table, which one server holding all "
                                  f"the rows may decide otherwise; select it without ORDER BY/GROUP BY/DISTINCT")
        for res in sc.results if self.names else ():
            res.columns = [replace(c, name=self.names[c.name], raw=None) if c.name in self.names else c
                           for c in res.columns]
        ex.last_node = self.node
        ex.add_results(sc, r, more)


__all__ = ["Materialize", "SESSION_FUNCTIONS", "scratch_connection", "chunks", "inserts", "quote", "setup_error", "temporary_definition"]
