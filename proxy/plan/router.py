"""The router: a pure planner (no I/O) that turns one SQL statement into per-shardingNode SQL.

Work is split so the per-query hot path stays small:
- analysis (parse the token stream, resolve tables, build the WHERE condition trees, check what does
  not depend on literal values) is cached per statement *shape* (the token stream with literals
  blanked out);
- planning (compute partitions from the literal values, pick the nodes, render the physical SQL) runs
  on every call.
What cannot be routed correctly raises NotSupported (1235) with a sentence saying why.

Reading order: proxy/plan/sqltok.py (tokens), proxy/plan/parser.py (structure), proxy/plan/analysis.py (its records),
proxy/plan/analyzer.py (a statement's Analysis), proxy/plan/conditions.py (partitions, co-location), then the
planning here.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import replace
from decimal import Decimal
from typing import Any, Callable, Collection, Sequence

from meta.config import Config
from meta.errors import NotSupported, ParseError, ProxyError, UnknownDatabase, syntax_error
from meta.sharding import node_index
from proxy.plan.analysis import (LOCAL_TYPES, SELECT, Analysis, Query, Ref, Scope, literal_value, not_supported,
                                 same_literal, shard_update_error)
from proxy.plan.analyzer import (STATEMENT_WORDS, Analyzer, Grants, HiddenSchema, Refused, UnknownSchema,
                                 UnknownTable)
from proxy.plan.conditions import has_sharding, query_refs, ref_partitions, table_names
from proxy.plan.plan import Plan, Target
from proxy.plan.sqltok import Token, first_keyword, hex_value, tokenize, unquote_string



_HINT_RE = re.compile(r"/\*!\s*(pydble|dble)\s*:\s*([A-Za-z_]+)\s*=\s*([^*\s]+)\s*\*/\Z", re.I)
_HINT_PREFIX_RE = re.compile(r"/\*!\s*(pydble|dble)\s*:", re.I)
_CACHE_MAX_TOKENS = 512
# The point read sysbench and OLTP applications send most: plain column names, one unqualified table,
# one `column = integer` condition, nothing after it (see Router._fast_select).
POINT_KEY_MAX = 10 ** 18   # a point read's key is 1 to 18 digits (_FAST_SELECT)
POINT_TEXT_MAX = 200      # and its text shorter than this
_POINT_COLUMN = r"(?!current_user\b)[A-Za-z_][\w$]*"   # (CURRENT_USER is a function, which the session answers)
_FAST_SELECT = re.compile(rf"\s*SELECT\s+(?:\*|{_POINT_COLUMN}(?:\s*,\s*{_POINT_COLUMN})*)\s+FROM\s+"
                          r"(?P<t>[A-Za-z_][\w$]*)\s+WHERE\s+(?P<c>[A-Za-z_][\w$]*)\s*=\s*(?P<v>[0-9]{1,18})\s*\Z",
                          re.I)


class PointTable:
    """What a point read of one table needs, worked out once: its nodes, the sharding function (None: one
    node answers), the grant it takes, and each node's database as the routed text names it."""

    __slots__ = ("nodes", "fn", "table", "access", "configured", "heads")

    def __init__(self, config: Config, nodes: Sequence[str], fn: Any, table: tuple[str, str]) -> None:
        self.nodes = nodes
        self.fn = fn
        self.table = table
        self.access = (("SELECT", SELECT, table[0], table[1]),)
        self.configured = config.table(*table) is not None   # (a default node's table has no metadata check)
        self.heads = tuple(f"`{config.sharding_nodes[n].database}`." for n in nodes)

    def index(self, key: int, grants: Grants | None) -> int | None:
        """The index of the node holding key (refused by grants: raises), None when the planner must decide."""
        if grants is not None and grants.dml_limited:  # (the current schema is one the user may USE)
            grants.check(self.access)
        if self.fn is None:
            return 0
        try:
            idx = self.fn.partition(key)
        except (ProxyError, ValueError):
            return None
        return idx if 0 <= idx < len(self.nodes) else None


class Router:
    """Plans statements against a Config; thread-compatible, with a bounded shape cache."""

    def __init__(self, config: Config, default_tables: Callable[[str], Collection[str]] | None = None,
                 table_columns: Callable[[str, str], Sequence[str] | None] | None = None,
                 cache_size: int = 4096) -> None:
        self.config = config
        # Tables found on each schema's default node (from metadata). Unconfigured tables route to the
        # default node whether listed or not, so the backend reports a missing one; kept for callers.
        self.default_tables = default_tables
        self.table_columns = table_columns
        self.cache_size = cache_size
        self._cache: dict[tuple[str | None, str], Analysis] = {}
        self._points: dict[tuple[str, str, str], PointTable | bool] = {}   # point_read's table entries
        self.generation = 0   # bumped by forget()
        self._schema_names = {name.lower(): name for name in config.schemas}
        self.analyzer = Analyzer(config, table_columns, self.route)
        self.views: Any = None   # the server's ViewService, when views exist (proxy/session/views.py)

    def forget(self) -> None:
        """Drop the cached analyses: a view was created or dropped, names may resolve elsewhere now. What
        callers keep of a PointTable is valid while `generation` is the one they saw."""
        self._cache = {}
        self._points = {}
        self.generation += 1

    # -- public ------------------------------------------------------------------------------------

    def route(self, sql: str, schema: str | None, grants: Grants | None = None) -> Plan:
        """Plan one statement run with `schema` as the current database (None: no USE yet); with a
        client's grants, refuse (1142/1044) what names a table outside them before any plan exists."""
        try:
            if self.views is not None:   # a view pydble keeps becomes a derived table (proxy/session/views.py)
                sql = self.views.expand(self, sql, schema, grants)
            return self._route(sql, schema, grants)
        except HiddenSchema as e:
            raise (grants.db_denied(e.schema) if grants is not None else e) from None
        except (UnknownTable, UnknownSchema) as e:
            if grants is None:
                raise
            raise grants.unknown_table(e, first_keyword(sql)) from None

    def route_shadowed(self, sql: str, schema: str | None, grants: Grants | None,
                       shadow: dict[tuple[str, str], Any]) -> Plan:
        """route() for a statement naming a session's temporary tables: those names resolve to the given
        tables (nested routes too), and nothing planned meanwhile is cached for other sessions."""
        self.analyzer.shadow = shadow
        try:
            return self.route(sql, schema, grants)
        finally:
            self.analyzer.shadow = None

    def _route(self, sql: str, schema: str | None, grants: Grants | None) -> Plan:
        if schema is not None and schema not in self.config.schemas and schema != "information_schema":
            real = self._schema_names.get(schema.lower())   # (information_schema, USE'd: Analyzer.resolve)
            if real is None:
                raise UnknownDatabase(f"Unknown database '{schema}'")
            schema = real
        shadowed = self.analyzer.shadow is not None   # a session's own names: no shared caches
        point = None if shadowed else self.point_read(sql, schema, grants)
        if point is not None:
            return Plan("select", (Target(point[0], sql),), False, (point[1],))
        if not shadowed and len(sql) > _BULK_MIN and "/*" not in sql and sql[:12].lstrip()[:6].upper() in ("INSERT", "REPLAC"):
            bulk = self._bulk_insert(sql, schema, grants)
            if bulk is not None:
                return bulk
        toks = tokenize(sql)
        if ";" in sql:
            toks = one_statement(sql, toks)
        if not toks:
            raise ProxyError("Query was empty", code=1065, sqlstate="42000")
        first = toks[0]
        if first[0] == "h" and _HINT_PREFIX_RE.match(first[1]):
            return self._hint(sql, toks, schema, grants)
        try:
            if len(toks) <= _CACHE_MAX_TOKENS and not shadowed:
                key = (schema, "\x00".join([_SHAPE.get(t[0]) or t[1] for t in toks]))
                an = self._cache.get(key)
                if an is None:
                    an = self.analyzer.analyze(sql, toks, schema)
                    if an.cacheable:
                        if len(self._cache) >= self.cache_size:
                            self._cache.clear()
                        self._cache[key] = an
            else:
                an = self.analyzer.analyze(sql, toks, schema)
            if grants is not None:
                grants.check(an.access)
            try:
                plan = self._plan(an, sql, toks, schema)
            except NotSupported:
                if an.kind != "select" or an.top is None or not an.top.union:
                    raise
                from proxy.plan.setplan import plan_set_operation   # each branch on its own, combined in the proxy
                return plan_set_operation(self, sql, toks, schema, grants, an.tables)
            if an.returning and len(plan.targets) > 1 and plan.row_order is None:
                written = [an.target] if an.target is not None else [r.table for r in an.modified or ()]
                if written and all(t.type == "global" for t in written):
                    return replace(plan, returning_copies=True)
                raise not_supported(f"{an.kind.upper()} ... RETURNING that writes on several shardingNodes is not "
                                     f"supported: the rows could not come back in the order MariaDB returns them")
            return plan
        except RecursionError:
            raise ParseError("You have an error in your SQL syntax: the statement nests parentheses or "
                             "subqueries too deeply to route") from None

    def lock_plan(self, sql: str, schema: str | None, grants: Grants | None = None
                  ) -> tuple[dict[str, str], frozenset[tuple[str, str]]]:
        """LOCK TABLES: the statement each shardingNode of the locked tables runs, and the tables locked;
        with a client's grants, refused (1044/1142/1290) unless the user may lock every table it names."""
        per_node: dict[str, list[str]] = {}
        tables: dict[tuple[str, str], None] = {}
        try:
            items = self.analyzer.lock_tables(tokenize(sql), schema)
        except (HiddenSchema, UnknownTable, UnknownSchema) as e:
            if grants is None or (isinstance(e, UnknownTable) and e.schema in grants.user.schemas):
                raise
            raise grants.db_denied(e.schema) from None   # as MariaDB: the database is refused
        if grants is not None:
            grants.check_lock([(t.schema, t.name, "WRITE" in mode) for t, _, _, mode in items])
        if self.views is not None:   # a view pydble keeps: its base tables are locked (proxy/session/views.py)
            items = self.views.lock_items(self.analyzer, items)
        for table, name, alias, mode in items:
            tables[(table.schema, table.name)] = None
            item = f"`{name.replace('`', '``')}`" + (f" AS `{alias.replace('`', '``')}`" if alias else "") + f" {mode}"
            for node in table.nodes:
                per_node.setdefault(node, []).append(item)
        return {n: "LOCK TABLES " + ", ".join(items) for n, items in per_node.items()}, frozenset(tables)

    def point_read(self, sql: str, schema: str | None,
                   grants: Grants | None = None) -> tuple[str, tuple[str, str], int] | None:
        """(node, (schema, table), offset of the table name in sql) for `SELECT cols FROM t WHERE key =
        <integer>`, the commonest OLTP read, planned without tokenizing; None for anything else (the full
        planner then decides, errors too).

        Only the answer the full planner would give: one unqualified table, its sharding column (or a
        single, default-node or global table), a plain integer."""
        hit = self.point(sql, schema, grants)
        if hit is None:
            return None
        pt, i, at = hit
        return pt.nodes[i], pt.table, at

    def point(self, sql: str, schema: str | None, grants: Grants | None = None) -> tuple[PointTable, int, int] | None:
        """point_read's answer as (the table's PointTable, the node's index, offset of the table name)."""
        hit = self.point_match(sql, schema)
        if hit is None:
            return None
        pt, at, start, end = hit
        i = pt.index(int(sql[start:end]), grants)
        return None if i is None else (pt, i, at)

    def point_match(self, sql: str, schema: str | None) -> tuple[PointTable, int, int, int] | None:
        """For a text point_read plans: (its PointTable, offset of the table name, start and end of the key)."""
        if schema is None or len(sql) >= POINT_TEXT_MAX:
            return None
        m = _FAST_SELECT.match(sql)
        if m is None:
            return None
        pt = self.point_table(schema, m.group("t"), m.group("c"))
        return None if pt is None else (pt, m.start("t"), *m.span("v"))

    def point_table(self, schema: str, name: str, col: str) -> PointTable | None:
        """The cached PointTable of `SELECT .. FROM name WHERE col = ..` in schema, None: not a point read."""
        key = (schema, name, col)
        hit = self._points.get(key)
        if hit is None:
            hit = self._point_entry(schema, name, col)
            if len(self._points) >= self.cache_size:
                self._points.clear()
            self._points[key] = hit
        return hit or None

    def _point_entry(self, schema: str, name: str, col: str) -> PointTable | bool:
        """What point_read needs of a table, or False."""
        if schema not in self.config.schemas:
            return False
        try:
            t = self.analyzer.resolve([name], schema)
        except ProxyError:
            return False
        if t.type == "sharding":
            if t.fn is None or t.column is None or col.lower() != t.column.lower():
                return False
            return PointTable(self.config, t.nodes, t.fn, (t.schema, t.name))
        if t.type in ("single", "default", "global"):
            return PointTable(self.config, t.nodes, None, (t.schema, t.name))
        return False

    # -- bulk INSERT -------------------------------------------------------------------------------

    def _bulk_insert(self, sql: str, schema: str | None, grants: Grants | None) -> Plan | None:
        """A big `INSERT ... VALUES (literals), ...` planned without a token per value: the statement's
        head is analysed (and checked) with its first row like any INSERT, the rows are matched by one
        regex and grouped per node as offsets. A token tuple per value costs ~50x the statement's size
        (mysqldump's 1 MB INSERTs, or a hostile 16 MB one); this costs ~2x. None: not this shape,
        the general path decides (and reports any error)."""
        head_toks = tokenize(sql[:_BULK_HEAD_MAX])
        at = next((i for i, t in enumerate(head_toks[:-1]) if t[0] == "w" and t[1].upper() in ("VALUES", "VALUE")),
                  -1)
        if at < 0:
            return None
        row, sep, end = _BULK_ROW.match, _BULK_SEP.match, _BULK_END.match
        m = row(sql, head_toks[at][3])
        if m is None or m.end() - m.start() > _BULK_HEAD_MAX:
            return None   # not literals, or a few big rows: tokens cost little there
        first = sql[:m.end(1)]
        toks = tokenize(first)
        an = self.analyzer.analyze(first, toks, schema)
        if an.mode != "insert" or an.sub is not None or len(an.rows) != 1:
            return None
        if grants is not None:
            grants.check(an.access)
        table = an.target
        assert table is not None
        rows_start = m.start(1)
        prefix = self._render(first, toks, an.deletions, 0, rows_start)
        sharded = table.type == "sharding"
        key_idx = width = 0
        if sharded:
            assert table.cfg is not None and table.fn is not None
            _, row_open, row_close = an.rows[0]
            key_idx = sum(1 for t in toks[row_open + 1:an.keys[0][1]] if t[0] == "o" and t[1] == ",")
            width = sum(1 for t in toks[row_open + 1:row_close] if t[0] == "o" and t[1] == ",") + 1
        del toks, first
        groups: dict[str, array] = {}
        numbers: dict[str, array] = {}   # each node's rows, as positions in the statement
        n_row = 0
        nodes = table.nodes
        lit = _BULK_LIT.findall
        while True:
            if sharded:
                a, b = m.start(1), m.end(1)
                values = lit(sql, a, b)
                if len(values) != width:
                    return None
                node = nodes[node_index(table.cfg, table.fn, _bulk_value(values[key_idx]))]  # type: ignore[arg-type]
                g = groups.get(node)
                if g is None:
                    g = groups[node] = array("q")
                    numbers[node] = array("q")
                g.append(a)
                g.append(b)
                numbers[node].append(n_row)
                n_row += 1
            pos = m.end()
            m2 = sep(sql, pos)
            if m2 is None:
                if end(sql, pos) is None:
                    return None   # ON DUPLICATE KEY UPDATE, a row alias, a comment...: the general path
                break
            m = row(sql, m2.end())
            if m is None:
                return None
        if not sharded:
            phys = prefix + sql[rows_start:]
            return Plan(an.kind, tuple(Target(node, phys) for node in nodes), True, an.tables)
        if len(groups) == 1:
            return Plan(an.kind, (Target(next(iter(groups)), prefix + sql[rows_start:]),), True, an.tables)
        tail = sql[pos:]
        targets = tuple(Target(node, prefix + _join_spans(sql, g) + tail) for node, g in groups.items())
        return Plan(an.kind, targets, True, an.tables, row_groups=tuple(numbers[node] for node in groups))

    # -- hints -------------------------------------------------------------------------------------

    def _hint(self, sql: str, toks: list[Token], schema: str | None, grants: Grants | None) -> Plan:
        m = _HINT_RE.match(toks[0][1])
        if m is None or m.group(2).lower() not in ("shardingnode", "datanode"):
            raise not_supported(f"hint {toks[0][1]} is not supported: use /*!pydble:shardingNode=<name>*/")
        node = m.group(3)
        if node not in self.config.sharding_nodes:
            raise ProxyError(f"shardingNode '{node}' named in the hint does not exist", code=1105)
        body = sql[toks[0][3]:].strip()
        if len(toks) < 2:
            raise ProxyError("Query was empty", code=1065, sqlstate="42000")
        word = toks[1][1].upper() if toks[1][0] == "w" else toks[1][1]
        if word not in STATEMENT_WORDS:   # (what analyze() cannot read could not be checked)
            raise not_supported(f"{word} cannot be sent through a shardingNode hint")
        if word in ("CREATE", "DROP") and any(t[0] == "w" and t[1].upper() == "TEMPORARY" for t in toks[2:5]):
            # a pooled connection would keep it after the statement, seen by whichever session comes next
            raise not_supported("a TEMPORARY table cannot be sent through a shardingNode hint")
        kind, is_write, ddl = "other", True, None
        if word in ("SELECT", "WITH", "("):
            kind, is_write = "select", False
        elif word in ("INSERT", "REPLACE", "UPDATE", "DELETE"):
            kind = word.lower()
        elif word in ("CREATE", "ALTER", "DROP", "TRUNCATE", "RENAME"):
            kind = "ddl"
            ddl = _ddl_kind(word, [t[1].upper() for t in toks[2:5] if t[0] == "w"])
        elif word in ("SHOW", "DESC", "DESCRIBE", "EXPLAIN", "CHECK", "CHECKSUM", "DO"):
            is_write = False
        # The body goes to the node as it is, so it is read like any statement: what it names must be
        # inside the client's grants. A body pydble cannot read is refused for a user with restricted
        # grants; for the others only what names mysql/performance_schema/sys or the host is.
        tables: tuple[tuple[str, str], ...] = ()
        try:
            an = self.analyzer.analyze(body, tokenize(body), schema)
        except ProxyError as e:
            if isinstance(e, (Refused, HiddenSchema, UnknownSchema)):   # (UnknownSchema: a database no schema maps)
                raise
            if grants is not None and grants.restricted:
                raise Refused(f"this hinted statement cannot be checked against the user's grants: "
                              f"{e.message}") from None
        else:
            tables = an.tables if kind == "ddl" else ()
            if grants is not None:
                grants.check(an.access)
                if grants.restricted:  # the body runs on that node as written: its tables must live there
                    for _, _, s, t in an.access:
                        if t and s != "information_schema" and node not in self.analyzer.resolve([s, t], None).nodes:
                            raise Refused(f"the hint sends {s}.{t} to shardingNode '{node}', where that table "
                                          f"does not live")
        if grants is not None:
            grants.check_node(node)
        return Plan(kind, (Target(node, body),), is_write, tables, None, ddl, False, True)

    # -- planning ----------------------------------------------------------------------------------

    def _render(self, sql: str, toks: list[Token], dels: tuple[tuple[int, int], ...], a: int = 0,
                b: int | None = None) -> str:
        """sql[a:b] without the deleted token ranges."""
        end = len(sql) if b is None else b
        if not dels:
            return sql[a:end]
        out = []
        pos = a
        n = len(toks)
        for i, j in dels:
            if j < n:
                s, e = toks[i][2], toks[j][2]
            else:  # a trailing range also takes the blank before it
                s, e = (toks[i - 1][3] if i else toks[i][2]), toks[n - 1][3]
            if e <= a or s >= end:
                continue
            s, e = max(s, pos), min(e, end)
            if s > pos:
                out.append(sql[pos:s])
            pos = max(pos, e)
        out.append(sql[pos:end])
        return "".join(out)

    def _plan(self, an: Analysis, sql: str, toks: list[Token], schema: str | None) -> Plan:
        mode = an.mode
        if mode == "query":
            return self._plan_query(an, sql, toks, schema)
        if mode == "insert":
            return self._plan_insert(an, sql, toks, schema)
        if mode == "insert_select":
            return self._plan_insert_select(an, sql, toks, schema)
        if mode == "explain":
            assert an.explain is not None
            at, inner = an.explain
            return Plan(an.kind, (Target(an.nodes[0], sql[:at] + inner),), an.is_write, an.tables)
        phys = self._render(sql, toks, an.deletions)
        return Plan(an.kind, tuple(Target(n, phys) for n in an.nodes), an.is_write, an.tables, None, an.ddl,
                    an.if_exists, maintenance=an.maintenance)

    def _plan_query(self, an: Analysis, sql: str, toks: list[Token], schema: str | None) -> Plan:
        ref = an.single
        if ref is not None and not an.has_limit and not an.queries[1:]:
            t = ref.table
            nodes = t.nodes
            if t.type == "sharding":
                parts = ref_partitions(ref.scope.cond, ref, toks, bool(ref.scope.outer))
                if parts is None:
                    targets = nodes
                elif len(parts) == 1:
                    targets = (nodes[next(iter(parts))],)
                else:
                    targets = tuple(nodes[i] for i in sorted(parts)) or nodes[:1]
                if an.set_checks:
                    self._check_sets(an, toks)
            elif t.type == "global":
                targets = nodes if an.is_write else nodes[:1]
            elif t.type == "system":
                if an.is_write:
                    raise not_supported(f"writing {t.full} is not supported by pydble")
                targets = (self.analyzer.home(schema),)
            else:
                targets = nodes
        else:
            targets = self._decide(an, toks, schema)
        phys = self._render(sql, toks, an.deletions)
        if len(targets) > 1 and not an.is_write:
            from proxy.plan.scatter import plan_scatter_select
            send, merge = plan_scatter_select(phys)
            return Plan(an.kind, tuple(Target(n, send) for n in targets), False, an.tables, merge)
        return Plan(an.kind, tuple(Target(n, phys) for n in targets), an.is_write, an.tables)

    def _check_sets(self, an: Analysis, toks: list[Token]) -> None:
        """UPDATE may set the sharding column only to the value its WHERE already pins (DBLE's rule)."""
        for r, v, wheres in an.set_checks:
            new = literal_value(v, toks)
            if not any(same_literal(new, literal_value(w, toks)) for w in wheres):
                raise shard_update_error(r)

    def _decide(self, an: Analysis, toks: list[Token], schema: str | None) -> tuple[str, ...]:
        """Pick the nodes for a query or write touching several tables, or refuse with 1235."""
        if an.set_checks:
            self._check_sets(an, toks)
        refs = an.refs
        nodesets: dict[int, tuple[str, ...]] = {}
        local: list[Ref] = []
        glob: list[Ref] = []
        for r in refs:
            t = r.table
            if t.type == "sharding":
                parts = ref_partitions(r.scope.cond, r, toks, bool(r.scope.outer))
                nodesets[id(r)] = t.nodes if parts is None else tuple(t.nodes[i] for i in sorted(parts))
                local.append(r)
            elif t.type in LOCAL_TYPES:
                nodesets[id(r)] = t.nodes
                local.append(r)
            elif t.type == "global":
                glob.append(r)
        modified = an.modified
        if modified is not None and any(r.table.type == "system" for r in modified):
            raise not_supported(f"writing {modified[0].table.full} is not supported by pydble")
        if modified is not None and any(r.table.type == "global" for r in modified):
            return self._global_write(an, modified, local, glob)
        if not local:
            if not glob:
                return (self.analyzer.home(schema),)
            common = [n for n in glob[0].table.nodes if all(n in g.table.nodes for g in glob)]
            if not common:
                raise not_supported(f"JOIN of global tables {table_names(glob)} is not supported: they share no "
                                     f"shardingNode")
            return (common[0],)
        union: dict[str, None] = {}
        for r in local:
            for n in nodesets[id(r)]:
                union[n] = None
        if len(union) <= 1:
            node = next(iter(union)) if union else self._empty_choice(local, glob)
            for r in local:
                if node not in r.table.nodes:
                    other = next(x for x in local if node in x.table.nodes)
                    raise not_supported(f"cross-node JOIN of {other.table.full} and {r.table.full} is not "
                                         f"supported: {r.table.full} is not on shardingNode {node}")
            for g in glob:
                if node not in g.table.nodes:
                    other = next((r for r in local if node in r.table.nodes), local[0])
                    raise not_supported(f"cross-node JOIN of {g.table.full} and {other.table.full} is not "
                                         f"supported: global table {g.table.full} is not on shardingNode {node}")
            return (node,)
        return self._co_located(an, local, glob, nodesets)

    def _empty_choice(self, local: list[Ref], glob: list[Ref]) -> str:
        """No row can match: any node that every table of the statement exists on answers correctly."""
        for n in local[0].table.nodes:
            if all(n in r.table.nodes for r in local) and all(n in g.table.nodes for g in glob):
                return n
        names = table_names(local + glob)
        raise not_supported(f"cross-node JOIN of {names} is not supported: no shardingNode holds all of them")

    def _global_write(self, an: Analysis, modified: list[Ref], local: list[Ref], glob: list[Ref]) -> tuple[str, ...]:
        if local:
            raise not_supported(f"writing global table {modified[0].table.full} together with "
                                 f"{local[0].table.full} is not supported: every copy of a global table must "
                                 f"get the same change, so it can only be written with other global tables")
        nodes = modified[0].table.nodes
        for r in modified[1:]:
            if set(r.table.nodes) != set(nodes):
                raise not_supported(f"writing global tables {table_names(modified)} in one statement is not "
                                     f"supported: they live on different shardingNodes")
        for g in glob:
            if not set(nodes) <= set(g.table.nodes):
                raise not_supported(f"writing global table {modified[0].table.full} using {g.table.full} is "
                                     f"not supported: {g.table.full} is not on every node of "
                                     f"{modified[0].table.full}")
        return nodes

    def _co_located(self, an: Analysis, local: list[Ref], glob: list[Ref],
                    nodesets: dict[int, tuple[str, ...]]) -> tuple[str, ...]:
        """A multi-node plan is correct only when every row's partners live on the same node."""
        top = an.top
        assert top is not None
        kind = "JOIN" if an.kind == "select" else an.kind.upper()
        if any(q.union for q in an.queries):
            raise not_supported("UNION across shardingNodes is not supported: each branch must route to the "
                                 "same single shardingNode")
        if any(q.has_ctes for q in an.queries):
            raise not_supported("WITH (common table expressions) over sharding tables on several "
                                 "shardingNodes is not supported")
        shard = [r for r in local if r.table.type == "sharding"]
        for r in local:
            if r.table.type != "sharding":
                other = shard[0] if shard else next(x for x in local if x.table.nodes != r.table.nodes)
                raise not_supported(f"cross-node {kind} of {other.table.full} and {r.table.full} is not "
                                     f"supported: {r.table.full} lives on shardingNode {r.table.nodes[0]} only")
        base = shard[0]
        for r in shard[1:]:
            if r.table.dist != base.table.dist:
                raise not_supported(f"cross-node {kind} of {base.table.full} and {r.table.full} is not "
                                     f"supported: they are not sharded alike")
        parent = {id(r): id(r) for r in shard}

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x
        for a, b in an.edges:
            if id(a) in parent and id(b) in parent:
                parent[find(id(a))] = find(id(b))
        root = find(id(base))
        for r in shard[1:]:
            if find(id(r)) != root:
                raise not_supported(f"cross-node {kind} of {base.table.full} and {r.table.full} is not "
                                     f"supported: they are not joined on their sharding columns")
        for q in an.queries:
            if any(r.table.type == "sharding" for r in query_refs(q)) and q is not top and self._is_derived(an, q):
                if q.union or any(not sc.simple for sc in q.branches):
                    raise not_supported(f"a derived table over {base.table.full} on several shardingNodes is "
                                         f"not supported when it aggregates, groups, uses DISTINCT or LIMIT")
        driver = an.modified if an.modified is not None else None
        top_scope = top.branches[0]
        if driver is None:
            items: list[Any] = list(top_scope.refs) + [q for _, q in top_scope.derived]
            if not has_sharding(items, subs=False):   # a derived table's subquery drives no rows
                raise not_supported(f"subquery on {base.table.full} is not supported here: the outer query "
                                     f"reads no sharding table, so its rows would repeat on every shardingNode")
        for sc in an.scopes:
            for preserved, nullable in sc.outer:
                if has_sharding(nullable) and not has_sharding(preserved):
                    names = ", ".join(it.table.full for it in preserved if isinstance(it, Ref)) or "a derived table"
                    raise not_supported(f"outer JOIN keeping every row of {names} with sharding table "
                                         f"{base.table.full} on several shardingNodes is not supported")
        targets = self._driver_targets(top_scope, nodesets)
        if targets is None:
            targets = base.table.nodes
        order = base.table.nodes
        chosen = [n for n in order if n in targets]
        if not chosen:
            chosen = [self._empty_choice(local, glob)]
        for g in glob:
            missing = [n for n in chosen if n not in g.table.nodes]
            if missing:
                raise not_supported(f"cross-node {kind} of {base.table.full} and {g.table.full} is not "
                                     f"supported: global table {g.table.full} is not on shardingNode {missing[0]}")
        if an.is_write and an.has_limit and len(chosen) > 1:
            raise not_supported(f"{an.kind.upper()} with LIMIT on {base.table.full} across several "
                                 f"shardingNodes is not supported")
        return tuple(chosen)

    def _is_derived(self, an: Analysis, q: Query) -> bool:
        return any(d is q for sc in an.scopes for _, d in sc.derived)

    def _driver_targets(self, sc: Scope, nodesets: dict[int, tuple[str, ...]]) -> set[str] | None:
        acc: set[str] | None = None
        for r in sc.refs:
            if r.table.type == "sharding":
                s = set(nodesets[id(r)])
                acc = s if acc is None else acc & s
        for _, q in sc.derived:
            if not q.union and q.branches and any(r.table.type == "sharding" for r in query_refs(q)):
                s2 = self._driver_targets(q.branches[0], nodesets)
                if s2 is not None:
                    acc = s2 if acc is None else acc & s2
        return acc

    def _plan_insert(self, an: Analysis, sql: str, toks: list[Token], schema: str | None) -> Plan:
        table = an.target
        assert table is not None
        if table.type != "sharding":
            nodes = table.nodes
            if an.sub is not None:
                self._sub_on(an.sub, toks, schema, nodes)
            phys = self._render(sql, toks, an.deletions)
            return Plan(an.kind, tuple(Target(n, phys) for n in nodes), True, an.tables)
        assert table.cfg is not None and table.fn is not None
        groups: dict[str, list[int]] = {}
        nodes = table.nodes
        for i, ref in enumerate(an.keys):
            node = nodes[node_index(table.cfg, table.fn, literal_value(ref, toks))]
            g = groups.get(node)
            if g is None:
                groups[node] = [i]
            else:
                g.append(i)
        if an.sub is not None:
            if len(groups) != 1:
                raise not_supported(f"INSERT into {table.full} with a subquery in VALUES is only supported when "
                                     f"all rows go to one shardingNode")
            self._sub_on(an.sub, toks, schema, tuple(groups))
        if len(groups) == 1:
            phys = self._render(sql, toks, an.deletions)
            return Plan(an.kind, (Target(next(iter(groups)), phys),), True, an.tables)
        first_row, last_row = an.rows[0], an.rows[-1]
        prefix = self._render(sql, toks, an.deletions, 0, toks[first_row[0]][2])
        tail = self._render(sql, toks, an.deletions, toks[last_row[2]][3])
        rows = [self._render(sql, toks, an.deletions, toks[a][2], toks[c][3]) for a, _, c in an.rows]
        targets = tuple(Target(node, prefix + ", ".join(rows[i] for i in idx) + tail)
                        for node, idx in groups.items())
        order = tuple(tuple(idx) for idx in groups.values()) if an.returning_rows else None
        return Plan(an.kind, targets, True, an.tables, row_order=order, row_groups=tuple(groups.values()))

    def _sub_on(self, sub: Analysis, toks: list[Token], schema: str | None, nodes: tuple[str, ...]) -> None:
        """The tables a write reads (subqueries, INSERT ... SELECT) must all be on the written node."""
        sub.modified = None
        local = [r for r in sub.refs if r.table.type in LOCAL_TYPES]
        glob = [r for r in sub.refs if r.table.type == "global"]
        if len(nodes) == 1:
            if local:
                got = self._decide(sub, toks, schema)
                if got != nodes:
                    raise not_supported(f"{sub.kind.upper()} into a table on {nodes[0]} reading "
                                         f"{table_names(local)} on {', '.join(got)} is not supported: it must run on "
                                         f"one shardingNode")
            for g in glob:
                if nodes[0] not in g.table.nodes:
                    raise not_supported(f"{sub.kind.upper()} reading global table {g.table.full} is not supported "
                                         f"on shardingNode {nodes[0]}, which it does not cover")
            return
        if local:
            raise not_supported(f"{sub.kind.upper()} into a global table reading {table_names(local)} is not "
                                 f"supported: every copy of the global table must get the same rows")
        for g in glob:
            if not set(nodes) <= set(g.table.nodes):
                raise not_supported(f"{sub.kind.upper()} reading global table {g.table.full} is not supported: "
                                     f"it is not on every node written")

    def _plan_insert_select(self, an: Analysis, sql: str, toks: list[Token], schema: str | None) -> Plan:
        table = an.target
        assert table is not None and an.sub is not None
        if table.type == "global":
            nodes = table.nodes
        elif len(table.nodes) == 1:
            nodes = table.nodes
        else:
            raise not_supported(f"INSERT ... SELECT into sharding table {table.full} is not supported: the "
                                 f"rows would have to be routed one by one")
        self._sub_on(an.sub, toks, schema, nodes)
        phys = self._render(sql, toks, an.deletions)
        return Plan(an.kind, tuple(Target(n, phys) for n in nodes), True, an.tables)


_SHAPE = {"s": "\x01s", "n": "\x01n", "x": "\x01x"}

# bulk INSERT: statements this long with rows of plain literals skip the token-per-value path
_BULK_MIN = 64 * 1024
_BULK_HEAD_MAX = 4096
_LIT = (r"(?:[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?(?![\w$.])"
        r"|'(?:[^'\\]|\\[\s\S]|'')*+'|(?i:NULL|TRUE|FALSE)(?![\w$])|[xX]'[0-9a-fA-F]*'|0x[0-9a-fA-F]+(?![\w$]))")
_BULK_LIT = re.compile(_LIT)
_BULK_ROW = re.compile(rf"\s*(\(\s*{_LIT}(?:\s*,\s*{_LIT})*+\s*\))")
_BULK_SEP = re.compile(r"\s*,")
_BULK_END = re.compile(r"\s*;?\s*\Z")


def one_statement(sql: str, toks: list[Token]) -> list[Token]:
    """The tokens of a text that must be one statement, trailing `;` dropped; 1064 at a `;` with more after it.
    Backend connections run several statements in one COM_QUERY, so one must never reach them inside another
    (`SET @a = 1; DELETE FROM t` would run the DELETE unrouted and unchecked)."""
    end = len(toks)
    while end and toks[end - 1][1] == ";" and toks[end - 1][0] == "o":
        end -= 1
    for t in toks[:end]:
        if t[1] == ";" and t[0] == "o":
            raise syntax_error(sql, t[2])   # near the `;`, in the words of every 1064 pydble raises
    return toks[:end] if end < len(toks) else toks


def _join_spans(sql: str, spans: array) -> str:
    """sql's [a, b) ranges joined by ", ", built in batches: no list of one string per row at once."""
    step = 2000
    parts = [", ".join([sql[spans[j]:spans[j + 1]] for j in range(i, min(i + step, len(spans)), 2)])
             for i in range(0, len(spans), step)]
    return ", ".join(parts)


def _bulk_value(text: str) -> Any:
    """A literal's Python value, as literal_value gives it for the same token."""
    up = text.upper()
    if up == "NULL":
        return None
    if up in ("TRUE", "FALSE"):
        return 1 if up == "TRUE" else 0
    if text[0] == "'":
        return unquote_string(text)
    if up.startswith("X'") or up.startswith("0X"):
        return hex_value(text)
    neg = text[0] == "-"
    body = text.lstrip("+-")
    if body.isdigit() and len(body) <= 20:
        v: Any = int(body)
    else:
        v = Decimal(body)
    return -v if neg else v


def _ddl_kind(word: str, rest: list[str]) -> str:
    """The DDL type of a statement from its first words (for hinted DDL)."""
    if word == "TRUNCATE":
        return "TRUNCATE_TABLE"
    if word == "RENAME":
        return "RENAME_TABLE"
    for w in rest:
        if w in ("TABLE", "INDEX"):
            return f"{word}_{w}"
    return "OTHER"
