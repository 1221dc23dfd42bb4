"""Temporary tables: a session's live on one backend connection per shardingNode, held until they are gone.

MariaDB keeps a temporary table on the connection that created it. pydble's backend connections are
pooled, so a session that creates one holds that connection (never given back to the pool while a
temporary table is on it, see BackendConnection.held) and sends there every statement it runs on that
shardingNode, transactions included (Executor._get). While a session has temporary tables, a statement
that names one is planned with the session's names shadowing every other table of that name in their
schema, as in MySQL (Router.route_shadowed): the temporary table is a one-node table, so it joins with
global tables on its node and with what else lives there; across nodes it is refused (1235).
DROP [TEMPORARY] TABLE, COM_RESET_CONNECTION / COM_CHANGE_USER and the end of the session drop them
and release the connection.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from meta.errors import BackendUnavailable, NoDatabaseSelected, NotSupported, ProxyError, ReadOnly

from proxy.plan.analysis import ANY, Table
from proxy.wire.packets import frame
from proxy.wire.reply import Reply
from proxy.plan.sqltok import Token, first_keyword, tokenize, top_level, unquote_ident

if TYPE_CHECKING:
    from proxy.backends.backend import BackendConnection
    from proxy.runtime import ExecContext as Executor
    from proxy.plan.plan import Plan

Key = tuple[str, str]   # (logical schema, lower-cased table name)

# DDL that a temporary table takes on its own connection (outside a transaction); renames are refused
# (the session's names would go stale), CREATE TABLE ... LIKE/SELECT of one as a real table too
_OWN_DDL = frozenset(("DROP_TABLE", "TRUNCATE_TABLE", "ALTER_TABLE", "CREATE_INDEX", "DROP_INDEX"))


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def is_temporary_ddl(sql: str) -> bool:
    """CREATE [OR REPLACE] TEMPORARY TABLE or DROP TEMPORARY TABLE."""
    if first_keyword(sql) not in ("CREATE", "DROP") or "temporary" not in sql[:200].lower():
        return False
    toks = tokenize(sql[:200])[:5]
    if not toks or toks[0][0] != "w":
        return False   # a hinted one goes to the router, which refuses it
    words = [t[1].upper() for t in toks if t[0] == "w"]
    return "TEMPORARY" in words[1:4]


class TempTables:
    """One session's temporary tables: where each lives, and the connections holding them."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.tables: dict[Key, str] = {}                  # -> the shardingNode it lives on
        self.conns: dict[str, BackendConnection] = {}    # shardingNode -> the connection holding them

    # -- lookups --------------------------------------------------------------------------------
    def shadow_for(self, sql: str) -> dict[Key, Table] | None:
        """The session's temporary tables as one-node tables, when the statement may name one; else None."""
        if not self.tables:
            return None
        low = sql.lower()
        if not any(name in low for _, name in self.tables):
            return None
        return self._shadow()

    def _shadow(self) -> dict[Key, Table]:
        return {k: Table(k[0], k[1], "single", (node,)) for k, node in self.tables.items()}

    def conn(self, node: str) -> BackendConnection | None:
        """The connection holding the session's temporary tables on a node (the session's there), or None."""
        c = self.conns.get(node)
        if c is not None and c.broken:
            names = ", ".join(f"{s}.{t}" for (s, t), n in self.tables.items() if n == node)
            self._forget(node)
            raise BackendUnavailable(f"shardingNode[{node}]: the connection holding this session's temporary "
                                     f"tables was lost: {names} are gone")
        return c

    # -- planning -------------------------------------------------------------------------------
    def route(self, sql: str, shadow: dict[Key, Table]) -> tuple[Plan, tuple[Key, ...]]:
        """Plan a statement naming temporary tables: the plan (temporary tables left out of its tables, which
        metadata and grants know nothing of) and the temporary tables it names."""
        ex = self.executor
        s = ex.session
        plan = ex.runtime.router.route_shadowed(sql, s.schema, s.grants, shadow)
        temps = tuple(t for t in plan.tables if t in self.tables)
        real = tuple(t for t in plan.tables if t not in self.tables)
        self._refuse_hidden(real)
        if temps and plan.kind in ("insert", "replace") and any(t in ex.runtime.sequences.columns for t in real):
            raise NotSupported("an INSERT reading a temporary table into a table filled from a global sequence "
                               "is not supported by pydble")
        return replace(plan, tables=real), temps

    def refuse_in_view(self, select: str) -> None:
        """CREATE/ALTER VIEW reading one of the session's temporary tables: MySQL's 1352."""
        shadow = self.shadow_for(select)
        if shadow is None:
            return
        try:
            _, temps = self.route(select, shadow)
        except ProxyError:
            return   # the view statement's own checks answer
        if temps:
            raise ProxyError(f"View's SELECT refers to a temporary table '{temps[0][1]}'", 1352, "HY000")

    def _refuse_hidden(self, real: tuple[Key, ...]) -> None:
        """A table of another schema whose physical name is a temporary table's, on that table's node, would
        be read on the connection where the temporary table hides it: refused."""
        hiding = {(name, node) for (_, name), node in self.tables.items()}
        for schema, name in real:
            node = next((n for n in self._nodes_of(schema, name) if (name, n) in hiding), None)
            if node is not None:
                raise NotSupported(f"{schema}.{name} is not reachable by pydble while this session has a temporary "
                                   f"table {name} on shardingNode {node}: it hides {schema}.{name} there")

    def _nodes_of(self, schema: str, name: str) -> tuple[str, ...]:
        try:
            return self.executor.runtime.router.analyzer.resolve([schema, name], None).nodes
        except ProxyError:
            return ()

    def _home(self, schema: str) -> str:
        """Where a new temporary table of a schema goes: a node holding every global table of the schema
        (so it joins with them), the node of the session's other temporary tables of the schema when it
        does, the default node when it does; with no global tables, the schema's default (home) node."""
        cfg = self.executor.runtime.config
        sc = cfg.schemas[schema]
        glob = [t.nodes for t in sc.tables.values() if t.type == "global"]
        common = [n for n in glob[0] if all(n in g for g in glob[1:])] if glob else []
        mine = [n for (s, _), n in self.tables.items() if s == schema]
        for node in mine:
            if not glob or node in common:
                return node
        if common:
            return sc.default_node if sc.default_node in common else common[0]
        home = cfg.home_node(schema)
        if home is None:
            raise ProxyError("no shardingNode is configured", 1105, "HY000")
        return home

    # -- CREATE / DROP TEMPORARY TABLE ----------------------------------------------------------
    async def statement(self, sql: str, r: Reply, more: bool) -> None:
        """CREATE [OR REPLACE] TEMPORARY TABLE ... or DROP TEMPORARY TABLE ..."""
        ex = self.executor
        if ex.locked:
            raise NotSupported("temporary tables while LOCK TABLES is held are not supported by pydble: "
                               "UNLOCK TABLES first")
        if ex.session.read_only:
            raise ReadOnly.of(ex.session.user)
        toks = tokenize(sql)
        while toks and toks[-1][0] == "o" and toks[-1][1] == ";":
            toks.pop()
        if first_keyword(sql) == "DROP":
            await self._drop_statement(toks, r, more)
        else:
            await self._create(sql, toks, r, more)

    def _name(self, toks: list[Token], k: int) -> tuple[str, str, int]:
        """[schema.]name at token k: (logical schema, name as written, next token index)."""
        if k >= len(toks) or toks[k][0] not in "wq":
            raise ProxyError("You have an error in your SQL syntax near a temporary table's name", 1064, "42000")
        parts = [unquote_ident(toks[k][1])]
        k += 1
        if k + 1 < len(toks) and toks[k][1] == "." and toks[k + 1][0] in "wq":
            parts.append(unquote_ident(toks[k + 1][1]))
            k += 2
        ex = self.executor
        if len(parts) == 2:
            schema = next((s for s in ex.runtime.config.schemas if s.lower() == parts[0].lower()), None)
            if schema is None or schema not in ex.session.schemas:
                grants = ex.session.grants
                if grants is not None:
                    raise grants.db_denied(parts[0])
                raise ProxyError(f"Unknown database '{parts[0]}'", 1049, "42000")
        else:
            schema = ex.session.schema
            if schema is None:
                raise NoDatabaseSelected("No database selected")
        if ex.session.grants is not None:
            ex.session.grants.check((("CREATE", ANY, schema, ""),))
        return schema, parts[-1], k

    async def _create(self, sql: str, toks: list[Token], r: Reply, more: bool) -> None:
        ex = self.executor   # its table options go to the node as written: none may reach the host or other databases
        ex.runtime.router.analyzer.host_reach(toks, ex.session.schema, ex.session.grants)
        up = [t[1].upper() if t[0] == "w" else t[1] for t in toks]
        k = 1
        replace_ = up[1:3] == ["OR", "REPLACE"]
        if replace_:
            k = 3
        k += 2   # TEMPORARY TABLE
        if up[k - 1] != "TABLE":
            raise NotSupported(f"CREATE TEMPORARY {up[k - 1] if k - 1 < len(up) else ''} is not supported by pydble")
        if_not_exists = up[k:k + 3] == ["IF", "NOT", "EXISTS"]
        if if_not_exists:
            k += 3
        schema, name, k = self._name(toks, k)
        key = (schema, name.lower())
        head = (f"CREATE {'OR REPLACE ' if replace_ else ''}TEMPORARY TABLE {'IF NOT EXISTS ' if if_not_exists else ''}"
                f"{_q(name)} ")
        rest = toks[k:]
        if rest and (up[k] == "LIKE" or (up[k] == "(" and k + 1 < len(up) and up[k + 1] == "LIKE")):
            at = k + 1 if up[k] == "LIKE" else k + 2
            src_schema, src_name, _ = self._name(toks, at)
            src_key = (src_schema, src_name.lower())
            # the source is read like any table: grants, existence of its schema, its nodes
            probe = f"SELECT * FROM {_q(src_schema)}.{_q(src_name)}"
            self.route(probe, self._shadow())
            nodes = (self.tables[src_key],) if src_key in self.tables else self._nodes_of(src_schema, src_key[1])
            if not nodes:
                raise NotSupported(f"CREATE TEMPORARY TABLE ... LIKE {src_schema}.{src_name} is not supported by "
                                   f"pydble")
            home = self.tables.get(key) or self._home(schema)
            node = home if home in nodes else nodes[0]
            phys = f"{head}LIKE {_q(src_name)}"
        else:
            body = next((i for i in top_level(toks, k) if up[i] in ("SELECT", "WITH")), None)
            if body is None and k < len(toks) and up[k] == "(" and k + 1 < len(up) and up[k + 1] in ("SELECT", "WITH"):
                body = k
            if body is None:
                body = next((i + 1 for i in top_level(toks, k) if up[i] == "AS" and i + 1 < len(toks)
                             and up[i + 1] == "("), None)
            if body is None:   # a plain definition
                node = self.tables.get(key) or self._home(schema)
                phys = head + sql[toks[k][2]:] if k < len(toks) else head
            else:
                node, text = self._body_node(sql[toks[body][2]:], schema, key)
                phys = head + (sql[toks[k][2]:toks[body][2]] if body > k else "") + text
        if key in self.tables and self.tables[key] != node:
            if not if_not_exists and not replace_:
                raise ProxyError(f"Table '{name}' already exists", 1050, "42S01")
            raise NotSupported(f"this CREATE TEMPORARY TABLE would move {schema}.{name} to shardingNode {node}: not "
                               f"supported by pydble, DROP TEMPORARY TABLE first")
        clash = next((s for (s, t), n in self.tables.items() if t == key[1] and s != schema and n == node), None)
        if clash is not None:
            raise NotSupported(f"a temporary table {schema}.{name} is not supported by pydble while this session has "
                               f"temporary table {clash}.{name}: both would live in one database of shardingNode "
                               f"{node}")
        await self._run(node, phys, r, more, add=key)

    def _body_node(self, body: str, schema: str, key: Key) -> tuple[str, str]:
        """CREATE TEMPORARY TABLE ... SELECT: the node that reads all the SELECT reads and its SQL there."""
        plan, temps = self.route(body, self._shadow())
        if plan.kind != "select" or plan.setop is not None or len(plan.targets) != 1 or plan.merge is not None:
            raise NotSupported("CREATE TEMPORARY TABLE ... SELECT reading several shardingNodes is not supported by "
                               "pydble: the temporary table lives on one shardingNode, and its SELECT must too")
        node, text = plan.targets[0].node, plan.targets[0].sql
        # reading only global tables (and temporary tables there): the table goes where the session's others are
        home = self.tables.get(key) or self._home(schema)
        cfg = self.executor.runtime.config
        if home != node and all(self.tables[t] == home for t in temps) and all(
                (c := cfg.table(*t)) is not None and c.type == "global" and home in c.nodes for t in plan.tables):
            node = home
        return node, text

    async def _drop_statement(self, toks: list[Token], r: Reply, more: bool) -> None:
        up = [t[1].upper() if t[0] == "w" else t[1] for t in toks]
        k = 2
        if k < len(up) and up[k] in ("TABLE", "TABLES"):
            k += 1
        else:
            raise NotSupported("DROP TEMPORARY without TABLE is not supported by pydble")
        if_exists = up[k:k + 2] == ["IF", "EXISTS"]
        if if_exists:
            k += 2
        names: list[tuple[Key, str]] = []
        while k < len(toks):
            schema, name, k = self._name(toks, k)
            names.append(((schema, name.lower()), name))
            if k < len(toks) and toks[k][1] == ",":
                k += 1
            elif k < len(toks) and up[k] in ("RESTRICT", "CASCADE") and k + 1 == len(toks):
                break
            elif k < len(toks):
                raise ProxyError("You have an error in your SQL syntax near "
                                 f"'{toks[k][1]}' in DROP TEMPORARY TABLE", 1064, "42000")
        await self.drop(names, if_exists, r, more)

    async def drop(self, names: list[tuple[Key, str]], if_exists: bool, r: Reply, more: bool) -> None:
        """Drop the named temporary tables on their connections; unknown ones are MariaDB's 1051 (a note
        with IF EXISTS). A connection left with none goes back to the pool."""
        per_node: dict[str, list[tuple[Key, str]]] = {}
        unknown: list[Key] = []
        for key, name in names:
            node = self.tables.get(key)
            if node is None:
                unknown.append(key)
            else:
                per_node.setdefault(node, []).append((key, name))
        for node, items in per_node.items():
            sub = Reply(self.executor.session.deprecate_eof)
            await self._run(node, "DROP TEMPORARY TABLE " + ", ".join(_q(n) for _, n in items), sub, False,
                            drop=[k for k, _ in items])
            if sub.out and sub.out[-1][4:5] == b"\xff":
                r.out.extend(sub.out)
                return
        session = self.executor.session
        listed = ",".join(f"{s}.{t}" for s, t in unknown)
        if unknown and not if_exists:
            raise ProxyError(f"Unknown table '{listed}'", 1051, "42S02")
        session.warnings = [("Note", 1051, f"Unknown table '{s}.{t}'") for s, t in unknown]
        r.ok(session.status(), warnings=len(unknown), more=more)

    async def _run(self, node: str, phys: str, r: Reply, more: bool, add: Key | None = None,
                   drop: list[Key] | None = None) -> None:
        """One statement on the node's session connection; on success the connection is held (add) or the
        dropped names are forgotten and a connection holding nothing more goes back."""
        ex = self.executor
        conn = await ex._get(node)
        mine = self.conns.get(node) is conn
        conn.held = True   # from now on never given back to the pool with a temporary table on it
        try:
            sc = await conn.run(_com_query(phys), ex.runtime.backends.timeout_s, collect=True)
            await ex.keep_warnings([(conn, sc)])
        except BaseException:
            if not mine:
                conn.held = False
                ex._done_with(node, conn)
            raise   # (a lost connection of ours is reported, and its tables forgotten, at its next use)
        if sc.error is None:
            self.conns[node] = conn
            if add is not None:
                self.tables[add] = node
            for key in drop or ():
                self.tables.pop(key, None)
            if node not in self.tables.values():
                self._release_conn(node)
        elif not mine:
            conn.held = False
            ex._done_with(node, conn)
        ex.add_results(sc, r, more)

    # -- ends -----------------------------------------------------------------------------------
    def _release_conn(self, node: str) -> None:
        """The node's connection holds no temporary table any more: back to the pool (after the transaction
        when it serves one)."""
        conn = self.conns.pop(node)
        conn.held = False
        ex = self.executor
        if ex.pinned.get(node) is not conn:
            ex.runtime.backends.release(node, conn)

    def _forget(self, node: str) -> None:
        """A lost connection: its tables are gone with it."""
        self.tables = {k: n for k, n in self.tables.items() if n != node}
        conn = self.conns.pop(node, None)
        if conn is not None:
            conn.held = False
            conn.close()
            if self.executor.pinned.get(node) is not conn:
                self.executor.runtime.backends.release(node, conn)

    async def release(self) -> None:
        """COM_RESET_CONNECTION / COM_CHANGE_USER: the temporary tables are dropped, the connections go back."""
        timeout = self.executor.runtime.backends.timeout_s
        for node in list(self.conns):
            conn = self.conns[node]
            names = [k for k, n in self.tables.items() if n == node]
            try:
                if not conn.broken:
                    await conn.query("DROP TEMPORARY TABLE IF EXISTS " + ", ".join(_q(t) for _, t in names), timeout)
            except BaseException:  # noqa: BLE001 - a connection that may still hold them is dropped
                conn.close()
            self.tables = {k: n for k, n in self.tables.items() if n != node}
            self._release_conn(node)

    def drop_all(self) -> None:
        """The session is gone: closing the connections drops the tables on the servers."""
        for node in list(self.conns):
            self._forget(node)

    async def ddl(self, plan: Plan, temps: tuple[Key, ...], sql: str, r: Reply, more: bool) -> None:
        """DDL naming temporary tables: DROP TABLE of only temporary ones drops them; TRUNCATE, ALTER and
        index DDL of one run on its connection outside a transaction; anything else is refused."""
        if plan.tables:
            raise NotSupported(f"a DDL statement naming temporary table {'.'.join(temps[0])} and table "
                               f"{'.'.join(plan.tables[0])} is not supported by pydble")
        if plan.ddl not in _OWN_DDL or any(t[0] == "w" and t[1].upper() == "RENAME" for t in tokenize(sql)):
            raise NotSupported(f"{plan.ddl or 'this DDL'} of temporary table {'.'.join(temps[0])} is not supported "
                               f"by pydble")
        if plan.ddl == "DROP_TABLE":
            toks = tokenize(sql)
            words = [t for t in toks if t[0] in "wq"]
            written = {unquote_ident(t[1]).lower(): unquote_ident(t[1]) for t in words}
            await self.drop([(k, written.get(k[1], k[1])) for k in temps], plan.if_exists, r, more)
            return
        ex = self.executor
        if ex.session.explicit_txn or not ex.session.autocommit:
            raise NotSupported(f"{plan.ddl} of temporary table {'.'.join(temps[0])} inside a transaction is not "
                               f"supported by pydble")
        nodes = {self.tables[t] for t in temps}
        if len(nodes) != 1 or len(plan.targets) != 1:
            raise NotSupported(f"{plan.ddl} of temporary tables on several shardingNodes is not supported by pydble")
        ex.session.route = "single"
        await ex.run_single(plan.targets[0].node, _com_query(plan.targets[0].sql), r, more, False)


def _com_query(sql: str) -> bytes:
    return frame(0, b"\x03" + sql.encode("utf-8", "surrogateescape"))
