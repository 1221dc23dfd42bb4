"""Views through pydble, as DBLE has them: CREATE [OR REPLACE] / ALTER / DROP VIEW, SHOW CREATE VIEW.

- A view whose tables all live on one shardingNode (single tables, tables of a default node, sharding
  tables with one node, other views pushed there) is *pushed down*: created on that node, which keeps
  its definition and answers it; pydble records only where it is, so every instance routes its name.
- Any other view is *kept by pydble*: its SELECT (table names qualified with the view's schema) is
  stored, and a statement reading the view reads the derived table `(SELECT ...) AS v` instead, then
  routed and merged like any query; what pydble cannot answer exactly that way is refused (1235), at
  CREATE already when the view could never be answered.

Views are stored in ZooKeeper in a cluster (zk/views.py: a change is acknowledged by every online
instance before the client hears OK) and in `<data_dir>/views.json` otherwise; both are read at start.
Privileges: a statement on a view needs the user's grants on the view and on every base table it reads.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import structlog

from meta import scratch
from meta.errors import (BackendError, BackendUnavailable, DbAccessDenied, NoDatabaseSelected, NoSuchTable,
                         NotSupported, ParseError, ProxyError, ReadOnly, TableExists, UnknownDatabase)
from meta.config import StartRefused
from meta.views import BadView, ViewCatalog, ViewDef, ViewFile

from proxy.plan.analysis import ALL, ANY, LOCAL_TYPES, SELECT, Analysis, Ref, Table
from proxy.plan.local import substitute_database
from proxy.wire.messages import ColumnDef, ResultSet, eof_packet, ok_packet
from proxy.wire.packets import frame, lenenc_str, read_lenenc_int, splice
from proxy.plan.analyzer import three_part_names
from proxy.plan.sqltok import tokenize, unquote_ident
from proxy.plan.view_parse import KEYWORDS, ViewStmt, parse
from proxy.exec.xa import refuse_implicit_commit

if TYPE_CHECKING:
    from proxy.plan.analyzer import Grants
    from proxy.wire.reply import Reply
    from proxy.runtime import Planner, Runtime, SessionPort

log = structlog.get_logger("pydble.views")

MAX_DEPTH = 16            # views over views, expanded at most this deep (a cycle is refused)
EXPANDED_CACHE = 1024     # statements whose expansion is kept
ER_BAD_TABLE = 1051
ER_UNKNOWN_VIEW = 4092   # MariaDB's answer to DROP VIEW of a missing view (MySQL says 1051)
ER_WRONG_OBJECT = 1347
ER_WRONG_COLUMN_NAME = 1166
ER_WRONG_NUMBER_OF_COLUMNS = 1222
ER_VIEW_SELECT_VARIABLE = 1351

_SHOW_CREATE_COLUMNS = ("View", "Create View", "character_set_client", "collation_connection")


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _refs(an: Analysis) -> list[Ref]:
    """Every table occurrence of a statement, its subqueries' and INSERT ... SELECT's included."""
    out = list(an.refs)
    sub = an.sub
    while sub is not None:
        out += [r for r in sub.refs if r not in out]
        sub = sub.sub
    return out


class ViewService:
    """The instance's views: the catalog queries consult, and the statements that change it."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.catalog = ViewCatalog()
        self.file = ViewFile(runtime.config.server.data_dir or None)
        self.sync: Any = None            # zk.views.ViewSync in a cluster
        self._pattern: re.Pattern[str] | None = None
        self._plain: set[tuple[str | None, str]] = set()   # statement shapes that read no view
        self._named: list[tuple[str, tuple[str, str]]] = []   # (dbGroup, (database, view)) entries of its names
        self._expanded: dict[tuple[str | None, str], tuple[str, tuple[tuple[str, int, str, str], ...]]] = {}
        self._lock = asyncio.Lock()      # one view change at a time on this instance
        self._swept: dict[str, float] = {}   # node -> when this instance last looked there for stale scratch views
        if runtime.cluster is not None:
            from zk.views import ViewSync
            self.sync = ViewSync(runtime.cluster, self._install)
        runtime.router.views = self
        runtime.router.analyzer.views = self

    # -- the catalog ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Read the views kept (ZooKeeper or the local file) before the client port opens."""
        if self.sync is None:
            try:
                self._install(self.file.load())
            except BadView as e:
                raise StartRefused(str(e)) from None
            return
        cluster = self.runtime.cluster
        assert cluster is not None
        if cluster.zk is not None and cluster.zk.connected:
            try:
                await self.sync.load()
            except Exception as e:  # noqa: BLE001 - the follower keeps trying
                log.warning("views not read at start; they are read once ZooKeeper answers", error=str(e))
        self.sync.start()

    def _install(self, views: list[ViewDef]) -> None:
        """A new full set of views (at start, or from the cluster)."""
        if self.catalog.replace_all(views):
            self._changed()

    def _changed(self) -> None:
        names = sorted(self.catalog.names(), key=len, reverse=True)
        self._pattern = (re.compile(r"(?<![\w$])(?:" + "|".join(re.escape(n) for n in names) + r")(?![\w$])", re.I)
                         if names else None)
        self._expanded = {}
        self._plain = set()
        self.runtime.router.forget()
        self._name_views()

    def _name_views(self) -> None:
        """Column definitions of a view's rows name the view's logical schema, never the node's database
        (a kept view's rows come from a derived table of the view's name on each node it reads)."""
        cfg = self.runtime.config
        pools = self.runtime.backends.pools
        for group, key in self._named:
            pools[group].names.by_table.pop(key, None)   # type: ignore[union-attr]
        self._named = []
        for v in self.catalog.all():
            if v.schema not in cfg.schemas:
                continue
            for node in dict.fromkeys((*cfg.all_nodes_of_schema(v.schema), *((v.node,) if v.node else ()))):
                sn = cfg.sharding_nodes[node]
                names = pools[sn.db_group].names
                key = (sn.database, v.name)
                if names is not None and key not in names.by_table:
                    names.by_table[key] = v.schema
                    self._named.append((sn.db_group, key))
        for pool in pools.values():
            if pool.names is not None:   # what was renamed (or not) before may read otherwise now
                pool.names._cache, pool.names._coldefs, pool.names._heads = {}, {}, {}

    def table(self, schema: str, name: str) -> Table | None:
        """What a name resolves to when it is a view (Analyzer.resolve): a pushed view is a single
        table on its node, a kept one a 'view' that only expansion may meet."""
        v = self.catalog.get(schema, name)
        if v is None:
            return None
        if v.node is not None:
            return Table(schema, v.name, "single", (v.node,))
        return Table(schema, v.name, "view", ())

    # -- expansion --------------------------------------------------------------------------------
    def expand(self, router: Planner, sql: str, schema: str | None, grants: Grants | None) -> str:
        """The statement with every view pydble keeps replaced by its derived table; the grants on the
        views and their base tables checked; writes and DDL on views refused."""
        pattern = self._pattern
        if pattern is None or pattern.search(sql) is None:
            return sql
        key = (schema, sql)
        done = self._expanded.get(key)
        if done is None:
            # a view's name may well be a column's too: a statement shape found to read no view is
            # passed on after one tokenization, whatever its literals
            toks = tokenize(sql)
            shape = (schema, "\x00".join(["\x01" if t[0] in "snx" else t[1] for t in toks]))
            if shape in self._plain:
                return sql
            done = self._expand(router, sql, schema)
            if len(self._expanded) >= EXPANDED_CACHE:
                self._expanded = {}
            self._expanded[key] = done
            if done[0] == sql and not done[1] and len(toks) <= 512:
                if len(self._plain) >= EXPANDED_CACHE:
                    self._plain = set()
                self._plain.add(shape)
        out, access = done
        if grants is not None and access:
            grants.check(access)
        return out

    def _expand(self, router: Planner, sql: str, schema: str | None
                ) -> tuple[str, tuple[tuple[str, int, str, str], ...]]:
        out = sql
        access: list[tuple[str, int, str, str]] = []
        for _ in range(MAX_DEPTH):
            toks = tokenize(out)
            while toks and toks[-1][:2] == ("o", ";"):
                toks.pop()
            if not toks or toks[0][0] == "h" or any(t[:2] == ("o", ";") for t in toks):
                break   # hinted (sent as is) or several statements: the router decides
            if schema is not None and schema not in self.runtime.config.schemas:
                break   # the router reports the unknown database
            an = router.analyzer.analyze(out, toks, schema)
            kept = self._check(an, access)
            if not kept:
                return out, tuple(dict.fromkeys(access))
            spans = []
            for r, v in kept:
                a, b = r.span
                # DATABASE() in a view is the session's database, as MariaDB answers it, never the node's
                text = f"({substitute_database(v.select, schema)})" + ("" if r.has_alias else f" AS {_q(v.name)}")
                spans.append((toks[a][2], toks[b - 1][3], text))
            # `schema.view.column` names the derived table the view becomes by its name alone
            named = {(r.table.schema.lower(), r.alias) for r, _ in kept}
            spans += [(toks[i][2], toks[i + 2][2], "") for i in three_part_names(toks)
                      if (unquote_ident(toks[i][1]).lower(), unquote_ident(toks[i + 2][1]).lower()) in named]
            out = splice(out, sorted(spans))
        else:
            raise NotSupported("views nested more than 16 deep (or a view that reads itself) are not supported "
                               "by pydble")
        return out, tuple(dict.fromkeys(access))

    def _check(self, an: Analysis, access: list[tuple[str, int, str, str]]) -> list[tuple[Ref, ViewDef]]:
        """The kept views a statement reads, after refusing what cannot be done to views; what the
        statement needs of the grants on views and their base tables is added to access."""
        cat = self.catalog
        views = {(s, t): v for s, t in an.tables if (v := cat.get(s, t)) is not None}
        if an.kind == "ddl":
            for v in views.values():
                if an.ddl == "CREATE_TABLE":
                    raise TableExists(f"Table '{v.name}' already exists")
                if an.ddl == "DROP_TABLE":   # as MySQL: DROP TABLE does not see views
                    raise ProxyError(f"Unknown table '{v.schema}.{v.name}'", ER_BAD_TABLE, "42S02")
                raise ProxyError(f"'{v.schema}.{v.name}' is not BASE TABLE", ER_WRONG_OBJECT, "HY000")
        written = [an.target] if an.target is not None else [r.table for r in an.modified or ()]
        for t in written:
            v = cat.get(t.schema, t.name)
            if v is not None and v.node is None:
                raise NotSupported(f"writing view {v.schema}.{v.name} is not supported by pydble: it is kept by "
                                   f"pydble and expanded into queries; write its tables instead")
        for word, bit, s, t in an.access:
            v = cat.get(s, t) if t else None
            if v is not None:
                access.append((word, bit, s, t))
                access.extend((word, bit, bs, bt) for bs, bt in v.tables)
        kept = []
        for r in _refs(an):
            if r.table.type == "view":
                v = cat.get(r.table.schema, r.table.name)
                if v is not None and r.span[0] >= 0:
                    kept.append((r, v))
        if an.kind == "other" and not kept:
            for (s, t), v in views.items():
                if v.node is None:
                    raise NotSupported(f"this statement on view {s}.{t} is not supported by pydble: the view is "
                                       f"kept by pydble (DESC {t} shows its columns)")
        return kept

    def lock_items(self, analyzer: Any, items: list[tuple[Table, str, str | None, str]]
                   ) -> list[tuple[Table, str, str | None, str]]:
        """LOCK TABLES naming a view pydble keeps locks the tables it reads instead, as MySQL does (each
        once: a table also named in the statement keeps its own lock type)."""
        if not any(t.type == "view" for t, _, _, _ in items):
            return items
        named = {(t.schema, t.name) for t, _, alias, _ in items if t.type != "view" and alias is None}
        out = []
        for table, name, alias, mode in items:
            v = self.catalog.get(table.schema, table.name) if table.type == "view" else None
            if v is None:
                out.append((table, name, alias, mode))
                continue
            for s, t in v.tables:
                if (s, t) not in named:
                    named.add((s, t))
                    out.append((analyzer.resolve([s, t], None), t, None, mode))
        return out

    # -- statements -------------------------------------------------------------------------------
    async def run(self, session: SessionPort, st: ViewStmt, r: Reply, more: bool) -> bool:
        """Answer a view statement; False for SHOW CREATE TABLE of something that is not a view."""
        if st.op == "SHOW":
            parts = st.names[0]
            if len(parts) == 2 and parts[0].lower() not in {x.lower() for x in self.runtime.config.schemas}:
                if st.show_table:
                    return False   # the router answers (and refuses) names outside the logical schemas
                raise NoSuchTable(f"Table '{parts[0]}.{parts[1]}' doesn't exist")
            schema, name = self._target(session, parts, granted=False)
            v = self.catalog.get(schema, name)
            if session.grants is not None and (v is not None or not st.show_table):
                session.grants.check((("SHOW", ANY, schema, name),))   # 1142 outside the grants
            if v is None:
                if st.show_table:
                    return False
                raise NoSuchTable(f"Table '{schema}.{name}' doesn't exist")
            cols = [ColumnDef(c, length=1024) for c in _SHOW_CREATE_COLUMNS]
            r.resultset(ResultSet(cols, [[v.name.encode(), v.create.encode(), b"utf8mb4", b"utf8mb4_general_ci"]]),
                        session.status(), more)
            return True
        if st.op == "DESC":
            return await self._describe(session, st, r, more)
        if st.op == "DROP_TABLE":
            # DROP TABLE IF EXISTS of views only (a dump's placeholder), or of names no node can hold (not
            # configured, in a schema without a default node): nothing to do, a Note each, as MySQL (and DBLE)
            cfg = self.runtime.config.schemas
            if any(len(p) == 2 and p[0] not in cfg for p in st.names) or (session.schema is None and
                                                                          any(len(p) == 1 for p in st.names)):
                return False
            keys = [self._target(session, p, granted=False) for p in st.names]
            if not all(self.catalog.get(s, n) is not None or self._nowhere(s, n) for s, n in keys):
                return False
            if session.grants is not None:
                session.grants.check(tuple(("DROP", ALL, s, n) for s, n in keys))
            if session.read_only:
                raise ReadOnly(f"User '{session.user}' is read only")
            refuse_implicit_commit(session.executor.xa, "a DDL statement")
            session.warnings = [("Note", ER_BAD_TABLE, f"Unknown table '{s}.{n}'") for s, n in keys]
            r.ok(session.status(), warnings=len(keys), more=more)
            return True
        if session.read_only:
            raise ReadOnly.of(session.user)
        ex = session.executor
        if ex.locked_tables:
            raise NotSupported("DDL while LOCK TABLES is held is not supported by pydble: UNLOCK TABLES first")
        refuse_implicit_commit(ex.xa, "a view statement")   # as MySQL: 1399 inside an XA transaction
        await ex.commit_all()   # as MySQL: a view statement ends the open transaction
        session.explicit_txn = False
        session.route = "ddl"
        session.warnings = []
        async with self._lock:
            if st.op == "DROP":
                notes = await self._drop(session, st)
            else:
                notes = await self._create(session, st)
        session.warnings = notes
        r.ok(session.status(), warnings=len(notes), more=more)
        return True

    async def _describe(self, session: SessionPort, st: ViewStmt, r: Reply, more: bool) -> bool:
        """DESC / SHOW [FULL] COLUMNS / SHOW INDEX of a view pydble keeps: MariaDB describes the view's statement
        as one node runs it (every node's tables have the same structure), from a view made for the moment on a
        connection of its own; False for anything else (the router routes it)."""
        parts = st.names[0]
        if len(parts) == 2 and parts[0].lower() not in {x.lower() for x in self.runtime.config.schemas}:
            return False
        if len(parts) == 1 and session.schema is None:
            return False
        schema, name = self._target(session, parts, granted=False)
        v = self.catalog.get(schema, name)
        if v is None or v.node is not None:
            return False
        async def ask(conn: Any, view: str, sql: str) -> Any:
            return await conn.query(f"CREATE VIEW {_q(view)} AS {sql};{st.select.format(_q(view))}",
                                    self.runtime.backends.timeout_s)

        sc = await self._on_scratch_view(session, schema, name, ask)
        r.resultset(sc.results[1], session.status(), more)
        return True

    async def field_list(self, session: SessionPort, schema: str, name: str, wild: bytes, r: Reply) -> bool:
        """COM_FIELD_LIST of a view pydble keeps: the columns MariaDB lists for such a view (its node's answer for
        a view made for the moment there, as DESC does, with the client's wildcard), under the view's own name
        and schema; False for any other name (the node holding it answers)."""
        v = self.catalog.get(schema, name.lower())
        if v is None or v.node is not None:
            return False
        async def ask(conn: Any, view: str, sql: str) -> Any:
            timeout = self.runtime.backends.timeout_s
            await conn.query(f"CREATE VIEW {_q(view)} AS {sql}", timeout)
            return await conn.run(frame(0, b"\x04" + view.encode() + b"\x00" + wild), timeout,
                                  kind="field_list", collect=True)

        sc = await self._on_scratch_view(session, schema, v.name, ask)
        head = lenenc_str(b"def") + lenenc_str(schema.encode()) + lenenc_str(v.name.encode()) * 2
        seq = 1
        for col in sc.results[0].columns if sc.results else []:
            raw = col.raw or col.encode()
            pos = 0
            for _ in range(4):   # catalog, schema, table, org_table: the view's; the rest (name, type, default) as is
                n, pos = read_lenenc_int(raw, pos)
                pos += n or 0
            r.raw(frame(seq, head + raw[pos:]))
            seq += 1
        status = session.status()
        r.raw(frame(seq, ok_packet(0, 0, status, 0, header=0xFE) if session.deprecate_eof else eof_packet(0, status)))
        return True

    async def _on_scratch_view(self, session: SessionPort, schema: str, name: str,
                               ask: Callable[[Any, str, str], Awaitable[Any]]) -> Any:
        """What one node answers `ask(conn, view, sql)`: sql is the kept view's statement as that node runs it,
        view the scratch name ask creates a view of it under on conn (dropped after); a node's error raised."""
        plan = self.runtime.router.route(f"SELECT * FROM {_q(schema)}.{_q(name)}", schema, session.grants)
        node, sql = plan.targets[0].node, plan.targets[0].sql
        return await self._ask_node(node, session.format_flags, lambda conn, make: ask(conn, make(), sql))

    async def _ask_node(self, node: str, flags: int, ask: Callable[[Any, Callable[[], str]], Awaitable[Any]]) -> Any:
        """What a pooled connection of node answers `ask(conn, make)`, where make() names a scratch view
        (meta/scratch.py) for ask to create on conn; a node's error raised. The views named are dropped after, a
        statement's error or not; a connection that failed is closed, never pooled with a scratch view or half a
        statement on it: one that broke, or outlived scratch.USE_S, leaves its views to a later sweep of the node."""
        backends = self.runtime.backends
        timeout = backends.timeout_s
        made: list[str] = []

        def make() -> str:
            made.append(scratch.name())   # its time: after the connection is had, within the deadline
            return made[-1]

        conn = await backends.acquire(node, flags)
        ok = False
        try:
            async with asyncio.timeout(scratch.USE_S):
                if conn.vars or not conn.autocommit:
                    await conn.reset(timeout)
                await self._sweep(node, conn)
                try:
                    sc = await ask(conn, make)
                finally:
                    if made and not conn.broken:
                        await conn.query("DROP VIEW IF EXISTS " + ", ".join(_q(n) for n in made), timeout)
            ok = True
        except TimeoutError:
            raise BackendUnavailable(f"shardingNode {node} did not describe the view within "
                                     f"{scratch.USE_S:g}s") from None
        finally:
            if not ok:
                conn.close()
            backends.release(node, conn)
        if sc.error is not None:
            raise BackendError(sc.error.message, sc.error.code, sc.error.sqlstate)
        return sc

    async def _sweep(self, node: str, conn: Any) -> None:
        """Drop the stale scratch views in node's database (left by a connection lost before its DROP, by any
        instance): at most once every scratch.SWEEP_S per node; a view another instance may still use is kept."""
        now = time.monotonic()
        last = self._swept.get(node)
        if last is not None and now - last < scratch.SWEEP_S:
            return
        self._swept[node] = now
        timeout = self.runtime.backends.timeout_s
        try:
            listed = await conn.query(f"SHOW FULL TABLES LIKE '{scratch.LIKE}'", timeout)
            stale = [n for row in (listed.results[0].rows if listed.results else [])
                     if row[1] == b"VIEW" and scratch.stale(n := (row[0] or b"").decode("utf-8", "replace"))]
            if stale:
                await conn.query("DROP VIEW IF EXISTS " + ", ".join(_q(n) for n in stale), timeout)
                log.info("stale scratch views dropped", node=node, views=stale)
        except BackendError as e:   # the describing goes on; the next sweep tries again
            log.warning("stale scratch views not swept", node=node, error=e.message)

    def _nowhere(self, schema: str, name: str) -> bool:
        """A name no shardingNode can hold: not configured, in a schema without a default node."""
        cfg = self.runtime.config
        return cfg.table(schema, name) is None and cfg.schemas[schema].default_node is None

    def _target(self, session: SessionPort, parts: list[str], granted: bool = True,
                word: str = "") -> tuple[str, str]:
        """The (schema, name) a view statement is about, checked against the user's schemas and, for the
        statement `word` (CREATE VIEW, DROP), its grants on that name: a view is DDL, it needs all four bits."""
        cfg = self.runtime.config
        if len(parts) == 2:
            real = {s.lower(): s for s in cfg.schemas}.get(parts[0].lower())
            if real is None:
                raise UnknownDatabase(f"Unknown database '{parts[0]}'")
            schema = real
        elif session.schema is None:
            raise NoDatabaseSelected("No database selected")
        else:
            schema = session.schema
        if granted and schema not in session.schemas:
            raise DbAccessDenied(f"Access denied for user '{session.user}'@'{session.peer}' to database '{schema}'")
        name = parts[-1].lower()
        scratch.refuse(name)   # pydble's own, never a view's name
        if word and session.grants is not None:
            session.grants.check(((word, ALL, schema, name),))
        return schema, name

    def _is_table(self, schema: str, name: str) -> bool:
        return (self.runtime.config.table(schema, name) is not None
                or name in {t.lower() for t in self.runtime.registry.tables_of(schema)})

    async def _create(self, session: SessionPort, st: ViewStmt) -> list[tuple[str, int, str]]:
        schema, name = self._target(session, st.names[0], word="CREATE VIEW")
        old = self.catalog.get(schema, name)
        if st.op == "ALTER" and old is None:
            raise NoSuchTable(f"Table '{name}' doesn't exist")
        if self._is_table(schema, name):
            raise TableExists(f"Table '{name}' already exists")
        if old is not None and st.op == "CREATE" and not st.or_replace:
            if st.if_exists:
                return [("Note", 1050, f"Table '{name}' already exists")]
            raise TableExists(f"Table '{name}' already exists")
        seen: set[str] = set()
        for c in st.columns:
            if c.lower() in seen:
                raise ProxyError(f"Duplicate column name '{c}'", ER_WRONG_COLUMN_NAME, "HY000")
            seen.add(c.lower())
        view = await self._define(session, st, schema, name)
        lock = await self.sync.lock(schema, name, st.select) if self.sync is not None else None
        try:
            if self.sync is not None:   # the cluster's record is the truth: read it again under the lock
                await self.sync.refresh()
                old = self.catalog.get(schema, name)
                if old is not None and st.op == "CREATE" and not st.or_replace:
                    raise TableExists(f"Table '{name}' already exists")
                if old is None and st.op == "ALTER":
                    raise NoSuchTable(f"Table '{name}' doesn't exist")
            if view.node is not None:
                again = st.or_replace or (old is not None and old.node == view.node)
                await self._on_node(session, view.node, self._physical_create(st, view, again))
            if old is not None and old.node is not None and old.node != view.node:
                await self._on_node(session, old.node, f"DROP VIEW IF EXISTS {_q(name)}")
            notes = await self._publish(schema, name, view, must_create=old is None)
        finally:
            if lock is not None:
                await self.sync.unlock(lock)
        log.info("view defined", view=f"{schema}.{name}", node=view.node or "kept by pydble")
        return notes

    async def _define(self, session: SessionPort, st: ViewStmt, schema: str, name: str) -> ViewDef:
        """Where the view lives and what it reads; a kept view is tried once (LIMIT 0) for its columns."""
        router = self.runtime.router
        toks = tokenize(st.select)
        if not toks or (toks[0][1].upper() if toks[0][0] == "w" else toks[0][1]) not in ("SELECT", "WITH", "("):
            raise ParseError(f"You have an error in your SQL syntax; a view is defined by a SELECT, near "
                             f"'{st.select[:40]}'")
        if any(t[0] == "p" or (t[0] == "v" and not t[1].startswith("@@")) for t in toks):
            raise ProxyError("View's SELECT contains a variable or parameter", ER_VIEW_SELECT_VARIABLE, "HY000")
        an = router.analyzer.analyze(st.select, toks, schema)
        if an.kind != "select":
            raise ParseError(f"You have an error in your SQL syntax near '{st.select[:40]}'")
        refs = _refs(an)
        if any(r.table.type == "system" for r in refs):
            raise NotSupported("a view over information_schema or other system tables is not supported by pydble")
        if any(r.table.type == "view" and r.table.schema == schema and r.table.name == name for r in refs):
            raise NoSuchTable(f"Table '{schema}.{name}' doesn't exist")   # as MySQL: a view cannot read itself
        create = (f"CREATE VIEW {_q(name)}" + (" (" + ",".join(_q(c) for c in st.columns) + ")" if st.columns else "")
                  + f" AS {st.select}" + (f" {st.check_option}" if st.check_option else ""))
        base: dict[tuple[str, str], None] = {}
        for r in refs:
            v = self.catalog.get(r.table.schema, r.table.name)
            for key in (v.tables if v is not None else ((r.table.schema, r.table.name),)):
                base[key] = None
        # the SELECT as the view's schema reads it, wherever it is expanded
        qualified = splice(st.select, sorted((toks[r.span[0]][2], toks[r.span[0]][2], f"{_q(r.table.schema)}.")
                                            for r in refs if r.span[1] - r.span[0] == 1))
        node = self._one_node(schema, refs)
        if node is not None:
            if session.grants is not None:
                session.grants.check(an.access)
            return ViewDef(schema, name, create, qualified, st.columns, node, tuple(base),
                           definer=f"{session.user}@%")
        if st.check_option:
            raise NotSupported("WITH CHECK OPTION on a view kept by pydble is not supported: such a view cannot "
                               "be written through")
        probe = f"SELECT * FROM ({qualified}) AS {_q(name)} LIMIT 0"
        try:
            plan = router.route(probe, schema, session.grants)
        except NotSupported as e:
            if e.code != 1235:
                raise
            raise NotSupported(f"view {schema}.{name} could never be answered exactly by pydble: {e.message}") from None
        scanners = await session.executor._run_on([(t.node, t.sql) for t in plan.targets])
        for sc in scanners:
            if sc.error is not None:
                raise BackendError(sc.error.message, sc.error.code, sc.error.sqlstate)
        found = [c.name for c in scanners[0].results[0].columns] if scanners[0].results else []
        select = qualified
        if st.columns:
            if len(st.columns) != len(found):
                raise ProxyError("The Column_list Size and Select_statement Size Not Match",
                                 ER_WRONG_NUMBER_OF_COLUMNS, "HY000")
            if [c.lower() for c in found] != [c.lower() for c in st.columns]:
                select = ("SELECT " + ", ".join(f"{_q(f)} AS {_q(c)}" for f, c in zip(found, st.columns))
                          + f" FROM ({qualified}) AS {_q('_pydble_' + name)}")
        return ViewDef(schema, name, create, select, st.columns or tuple(found), None, tuple(base),
                       definer=f"{session.user}@%")

    def _one_node(self, schema: str, refs: list[Ref]) -> str | None:
        """The node a view is pushed down to: the one node every table it reads lives on (a view that
        reads no table goes to the schema's default node); None: pydble keeps it."""
        if not refs:
            return self.runtime.config.schemas[schema].default_node
        nodes = set()
        for r in refs:
            t = r.table
            if t.type not in LOCAL_TYPES or len(t.nodes) != 1:
                return None
            nodes.add(t.nodes[0])
        return nodes.pop() if len(nodes) == 1 else None

    def _physical_create(self, st: ViewStmt, view: ViewDef, again: bool) -> str:
        """The CREATE sent to the node: logical schema names dropped (every table is in its database)."""
        router = self.runtime.router
        toks = tokenize(st.select)
        select = router._render(st.select, toks, tuple(router.analyzer.strips(toks)))
        head = ("CREATE OR REPLACE" if again else "CREATE") + (f" ALGORITHM={st.algorithm}" if st.algorithm else "")
        cols = " (" + ",".join(_q(c) for c in st.columns) + ")" if st.columns else ""
        return f"{head} VIEW {_q(view.name)}{cols} AS {select}" + (f" {st.check_option}" if st.check_option else "")

    async def _on_node(self, session: SessionPort, node: str, sql: str) -> None:
        (sc,) = await session.executor._run_on([(node, sql)])
        if sc.error is not None:
            raise BackendError(sc.error.message, sc.error.code, sc.error.sqlstate)

    async def _drop(self, session: SessionPort, st: ViewStmt) -> list[tuple[str, int, str]]:
        targets = [self._target(session, parts, word="DROP") for parts in st.names]
        missing = [f"{s}.{n}" for s, n in targets if self.catalog.get(s, n) is None]
        notes: list[tuple[str, int, str]] = []
        for schema, name in dict.fromkeys(targets):
            lock = await self.sync.lock(schema, name, "DROP VIEW") if self.sync is not None else None
            try:
                if self.sync is not None:
                    await self.sync.refresh()   # the cluster's record is the truth
                v = self.catalog.get(schema, name)
                if v is None:
                    continue
                if v.node is not None:
                    await self._on_node(session, v.node, f"DROP VIEW IF EXISTS {_q(name)}")
                notes += await self._publish(schema, name, None, must_create=False)
            finally:
                if lock is not None:
                    await self.sync.unlock(lock)
            log.info("view dropped", view=f"{schema}.{name}")
        # as MariaDB: the views that exist are dropped, then the missing ones are named (a note with IF EXISTS)
        if missing and not st.if_exists:
            raise ProxyError(f"Unknown VIEW: '{','.join(missing)}'", ER_UNKNOWN_VIEW, "42S02")
        return [("Note", ER_UNKNOWN_VIEW, f"Unknown VIEW: '{m}'") for m in missing] + notes

    async def _publish(self, schema: str, name: str, view: ViewDef | None,
                       must_create: bool) -> list[tuple[str, int, str]]:
        """Persist the change (ZooKeeper, acknowledged by every instance; or the local file), then use it;
        a warning naming the instances that did not acknowledge it in time."""
        if self.sync is not None:
            revision = await self.sync.change(schema, name, view, must_create)
        else:
            views = {v.key: v for v in self.catalog.all()}
            if view is None:
                views.pop((schema, name), None)
            else:
                views[view.key] = view
            try:
                await asyncio.to_thread(self.file.save, list(views.values()))
            except OSError as e:
                raise ProxyError(f"the view could not be saved in {self.file.path}: {e}", 1105, "HY000") from None
        if view is None:
            self.catalog.remove(schema, name)
        else:
            self.catalog.put(view)
        self._changed()
        if self.sync is not None:
            cc = self.runtime.config.cluster
            assert cc is not None
            laggards = await self.sync.wait_acks(revision, cc.ack_timeout_s)
            if laggards:
                log.warning("instances did not acknowledge a view change in time", view=f"{schema}.{name}",
                            laggards=laggards)
                return [("Warning", 1105, f"instance(s) {', '.join(laggards)} did not acknowledge the change of "
                                          f"view {schema}.{name} within ack_timeout_s; they apply it when they can")]
        return []

    # -- listings ---------------------------------------------------------------------------------
    def status_rows(self, schema: str, like: str | None, columns: list[ColumnDef]
                    ) -> dict[str, list[list[bytes | None]]]:
        """SHOW TABLE STATUS rows of the views of a schema: the name, Comment VIEW, nothing else."""
        from proxy.plan.local import like_match
        names = [c.name for c in columns]
        out = {}
        for v in self.catalog.of_schema(schema):
            if like is None or like_match(like, v.name):
                row: list[bytes | None] = [None] * len(names)
                if "Comment" in names:
                    row[names.index("Comment")] = b"VIEW"
                out[v.name] = [row]
        return out

    def names_of(self, schema: str) -> list[str]:
        """The views SHOW FULL TABLES lists in a schema."""
        return [v.name for v in self.catalog.of_schema(schema)]

    async def infoschema_rows(self, table: str, schema: str, names: list[str],
                              node_rows: dict[str, list[list[bytes | None]]], flags: int = 0,
                              grants: Grants | None = None
                              ) -> tuple[dict[str, list[list[bytes | None]]], list[list[bytes | None]]]:
        """information_schema TABLES / VIEWS / COLUMNS of a schema: the nodes' rows without the views pydble
        knows, and the rows of those views (TABLE_TYPE VIEW; the definition as written; their columns as
        MariaDB describes them on a node)."""
        views = [v for v in self.catalog.of_schema(schema) if grants is None or grants.sees(schema, v.name)]
        if not views or table not in ("TABLES", "VIEWS", "COLUMNS") or "TABLE_NAME" not in names:
            return node_rows, []
        ti = names.index("TABLE_NAME")
        known = {v.name for v in views}
        kept = {n: [r for r in rows if (r[ti] or b"").decode("utf-8", "replace").lower() not in known]
                for n, rows in node_rows.items()}
        if table == "COLUMNS":
            return kept, await self._column_rows(schema, views, names, flags)
        extra: list[list[bytes | None]] = []
        for v in views:
            if table == "TABLES":
                values = {"TABLE_CATALOG": "def", "TABLE_SCHEMA": schema, "TABLE_NAME": v.name,
                          "TABLE_TYPE": "VIEW", "TABLE_COMMENT": "VIEW"}
            else:
                values = {"TABLE_CATALOG": "def", "TABLE_SCHEMA": schema, "TABLE_NAME": v.name,
                          "VIEW_DEFINITION": self._definition_for(v, grants),
                          "CHECK_OPTION": "NONE", "IS_UPDATABLE": "YES" if v.node else "NO", "DEFINER": v.definer,
                          "SECURITY_TYPE": "INVOKER", "CHARACTER_SET_CLIENT": "utf8mb4",
                          "COLLATION_CONNECTION": "utf8mb4_general_ci", "ALGORITHM": "UNDEFINED"}
            extra.append([values[c].encode() if c in values else None for c in names])
        return kept, extra

    @staticmethod
    def _definition_for(v: ViewDef, grants: Grants | None) -> str:
        """VIEW_DEFINITION as MySQL shows it: empty to a user who may not read everything the view reads."""
        if grants is not None:
            try:
                grants.check((("SELECT", SELECT, v.schema, v.name),
                              *(("SELECT", SELECT, s, t) for s, t in v.tables)))
            except ProxyError:
                return ""
        return v.create.split(" AS ", 1)[1] if " AS " in v.create else v.select

    async def _column_rows(self, schema: str, views: list[ViewDef], names: list[str],
                           flags: int) -> list[list[bytes | None]]:
        """information_schema.COLUMNS rows of views: a pushed view's from its node, a kept view's from a view
        made for the moment on one node (as DESC does)."""
        if "TABLE_SCHEMA" not in names:
            return []
        si, ti = names.index("TABLE_SCHEMA"), names.index("TABLE_NAME")
        per_node: dict[str, list[tuple[str, str | None]]] = {}   # node -> (view, its SELECT there; None: pushed)
        for v in views:
            if v.node is not None:
                per_node.setdefault(v.node, []).append((v.name, None))
                continue
            try:
                plan = self.runtime.router.route(f"SELECT * FROM {_q(schema)}.{_q(v.name)}", schema)
            except ProxyError:
                continue   # a view whose tables are gone has no columns to list
            per_node.setdefault(plan.targets[0].node, []).append((v.name, plan.targets[0].sql))
        backends = self.runtime.backends
        out: list[list[bytes | None]] = []
        for node, items in per_node.items():
            db = backends.database_of(node).replace("\\", "\\\\").replace("'", "''")
            real: dict[str, str] = {}   # the name a view's columns are listed under there -> the view

            async def ask(conn: Any, make: Callable[[], str], items: list[tuple[str, str | None]] = items,
                          real: dict[str, str] = real) -> Any:
                stmts = []
                for view, sql in items:
                    there = view if sql is None else make()
                    real[there] = view
                    if sql is not None:
                        stmts.append(f"CREATE VIEW {_q(there)} AS {sql}")
                listed = ", ".join("'" + n.replace("'", "''") + "'" for n in real)
                stmts.append(f"SELECT * FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{db}' AND TABLE_NAME "
                             f"IN ({listed}) ORDER BY TABLE_NAME, ORDINAL_POSITION")
                return await conn.query(";".join(stmts), backends.timeout_s)

            sc = await self._ask_node(node, flags, ask)
            rows = sc.results[-1].rows if sc.results and sc.results[-1].columns else []
            for row in rows:
                r = list(row)
                r[si] = schema.encode()
                r[ti] = real.get((r[ti] or b"").decode("utf-8", "replace"), "").encode()
                out.append(r)
        return out


__all__ = ["KEYWORDS", "ViewService", "ViewStmt", "parse"]
