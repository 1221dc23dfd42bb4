"""The router: a pure planner (no I/O) that turns one SQL statement into per-shardingNode SQL.

Work is split so the per-query hot path stays small:
- analysis (parse the token stream, resolve tables, build the WHERE condition trees, check what does
  not depend on literal values) is cached per statement *shape* (the token stream with literals
  blanked out);
- planning (compute partitions from the literal values, pick the nodes, render the physical SQL) runs
  on every call.
What cannot be routed correctly raises NotSupported (1235) with a sentence saying why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Collection, Sequence

from meta.config import Config
from meta.errors import NoDatabaseSelected, NoSuchTable, NotSupported, ParseError, ProxyError, UnknownDatabase
from meta.sharding import make_function, node_index
from proxy.analysis import Analysis, Query, Ref, Scope, Table, literal_value, not_supported, same_literal
from proxy.conditions import (conjuncts, has_sharding, join_edges, names_shard_column, query_refs,
                              ref_partitions, table_names)
from proxy.parser import Parser
from proxy.sqltok import Token, tokenize, unquote_ident

if TYPE_CHECKING:  # pragma: no cover
    from proxy.merge import MergePlan


@dataclass(frozen=True)
class Target:
    node: str      # shardingNode name
    sql: str       # the exact SQL to send to that node (physical: schema qualifiers stripped)


@dataclass(frozen=True)
class Plan:
    kind: str                      # 'select' | 'insert' | 'replace' | 'update' | 'delete' | 'ddl' | 'other'
    targets: tuple[Target, ...]
    is_write: bool
    tables: tuple[tuple[str, str], ...]   # (schema, table) referenced, table lower-cased
    merge: "MergePlan | None" = None      # set for a read on 2+ targets
    ddl: str | None = None         # CREATE_TABLE, DROP_TABLE, ALTER_TABLE, TRUNCATE_TABLE, CREATE_INDEX, ...
    if_exists: bool = False        # DROP TABLE IF EXISTS / CREATE TABLE IF NOT EXISTS
    hint: bool = False             # came from a shardingNode hint


SYSTEM_SCHEMAS = frozenset({"information_schema", "mysql", "performance_schema", "sys"})
_HINT_RE = re.compile(r"/\*!\s*(pydble|dble)\s*:\s*([A-Za-z_]+)\s*=\s*([^*\s]+)\s*\*/\Z", re.I)
_HINT_PREFIX_RE = re.compile(r"/\*!\s*(pydble|dble)\s*:", re.I)
_VERSION_COMMENT_RE = re.compile(r"/\*!(?:M!)?[0-9]*([\s\S]*)\*/\Z")
_SESSION_WORDS = frozenset({"SET", "USE", "BEGIN", "START", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE",
                            "KILL", "RESET", "PING"})
_UNSUPPORTED = {
    "LOCK": "LOCK TABLES", "UNLOCK": "UNLOCK TABLES", "LOAD": "LOAD DATA", "HANDLER": "HANDLER",
    "CALL": "CALL (stored procedures)", "GRANT": "GRANT", "REVOKE": "REVOKE", "XA": "XA transactions",
    "PREPARE": "SQL-level PREPARE", "EXECUTE": "SQL-level EXECUTE", "DEALLOCATE": "DEALLOCATE PREPARE",
    "FLUSH": "FLUSH", "PURGE": "PURGE", "INSTALL": "INSTALL", "UNINSTALL": "UNINSTALL", "CHANGE": "CHANGE",
    "CACHE": "CACHE INDEX", "BINLOG": "BINLOG", "SHUTDOWN": "SHUTDOWN", "IMPORT": "IMPORT TABLE",
    "CLONE": "CLONE", "RESTART": "RESTART", "HELP": "HELP", "SIGNAL": "SIGNAL", "RESIGNAL": "RESIGNAL",
    "GET": "GET DIAGNOSTICS", "TABLE": "the TABLE statement", "VALUES": "the VALUES statement",
    "BACKUP": "BACKUP",
}
_LOCAL = frozenset({"sharding", "single", "default"})
_CACHE_MAX_TOKENS = 512
# The point read sysbench and OLTP applications send most: plain column names, one unqualified table,
# one `column = integer` condition, nothing after it (see Router._fast_select).
_FAST_SELECT = re.compile(r"\s*SELECT\s+(?:\*|[A-Za-z_][\w$]*(?:\s*,\s*[A-Za-z_][\w$]*)*)\s+FROM\s+"
                          r"(?P<t>[A-Za-z_][\w$]*)\s+WHERE\s+(?P<c>[A-Za-z_][\w$]*)\s*=\s*(?P<v>[0-9]{1,18})\s*\Z",
                          re.I)


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
        self._tables: dict[tuple[str, str], Table] = {}
        self._points: dict[tuple[str, str, str], Any] = {}   # point_read's table entries
        self._schema_names = {name.lower(): name for name in config.schemas}

    # -- public ------------------------------------------------------------------------------------

    def route(self, sql: str, schema: str | None) -> Plan:
        """Plan one statement run with `schema` as the current database (None: no USE yet)."""
        if schema is not None and schema not in self.config.schemas:
            real = self._schema_names.get(schema.lower())
            if real is None:
                raise UnknownDatabase(f"Unknown database '{schema}'")
            schema = real
        point = self.point_read(sql, schema)
        if point is not None:
            return Plan("select", (Target(point[0], sql),), False, (point[1],))
        toks = tokenize(sql)
        if ";" in sql:
            while toks and toks[-1][1] == ";" and toks[-1][0] == "o":
                toks.pop()
            for t in toks:
                if t[1] == ";" and t[0] == "o":
                    raise ParseError("route() takes one statement: split multi-statement text with "
                                     "proxy.sqltok.split_statements first")
        if not toks:
            raise ProxyError("Query was empty", code=1065, sqlstate="42000")
        first = toks[0]
        if first[0] == "h":
            if _HINT_PREFIX_RE.match(first[1]):
                return self._hint(sql, toks, schema)
            if len(toks) == 1:
                m = _VERSION_COMMENT_RE.match(first[1])
                if m and m.group(1).strip():
                    return self.route(m.group(1).strip(), schema)
        try:
            if len(toks) <= _CACHE_MAX_TOKENS:
                key = (schema, "\x00".join([_SHAPE.get(t[0]) or t[1] for t in toks]))
                an = self._cache.get(key)
                if an is None:
                    an = self._analyze(sql, toks, schema)
                    if an.cacheable:
                        if len(self._cache) >= self.cache_size:
                            self._cache.clear()
                        self._cache[key] = an
            else:
                an = self._analyze(sql, toks, schema)
            return self._plan(an, sql, toks, schema)
        except RecursionError:
            raise ParseError("You have an error in your SQL syntax: the statement nests parentheses or "
                             "subqueries too deeply to route") from None

    def point_read(self, sql: str, schema: str | None) -> tuple[str, tuple[str, str], int] | None:
        """(node, (schema, table), offset of the table name in sql) for `SELECT cols FROM t WHERE key =
        <integer>`, the commonest OLTP read, planned without tokenizing; None for anything else (the full
        planner then decides, errors too).

        Only the answer the full planner would give: one unqualified table, its sharding column (or a
        single, default-node or global table), a plain integer."""
        if schema is None or len(sql) >= 200:
            return None
        m = _FAST_SELECT.match(sql)
        if m is None:
            return None
        name, col, value = m.group("t", "c", "v")
        key = (schema, name, col)
        hit = self._points.get(key)
        if hit is None:
            hit = self._point_entry(schema, name, col)
            if len(self._points) >= self.cache_size:
                self._points.clear()
            self._points[key] = hit
        if hit is False:
            return None
        nodes, fn, table = hit
        if fn is None:
            return nodes[0], table, m.start("t")
        try:
            idx = fn.partition(int(value))
        except (ProxyError, ValueError):
            return None
        if not 0 <= idx < len(nodes):
            return None
        return nodes[idx], table, m.start("t")

    def _point_entry(self, schema: str, name: str, col: str) -> Any:
        """What point_read needs of a table: (nodes, function or None, (schema, table)), or False."""
        if schema not in self.config.schemas:
            return False
        try:
            t = self._resolve([name], schema)
        except ProxyError:
            return False
        if t.type == "sharding":
            if t.fn is None or t.column is None or col.lower() != t.column.lower():
                return False
            return t.nodes, t.fn, (t.schema, t.name)
        if t.type in ("single", "default", "global"):
            return t.nodes, None, (t.schema, t.name)
        return False

    # -- tables ------------------------------------------------------------------------------------

    def _resolve(self, parts: list[str], schema: str | None) -> Table:
        """Resolve [schema.]table to its configuration (or the schema's default node)."""
        if len(parts) == 2:
            real = self._schema_names.get(parts[0].lower())
            if real is None:
                if parts[0].lower() in SYSTEM_SCHEMAS:
                    return Table(parts[0].lower(), parts[1].lower(), "system", ())
                raise UnknownDatabase(f"Unknown database '{parts[0]}'")
            schema = real
        elif schema is None:
            raise NoDatabaseSelected("No database selected")
        name = parts[-1].lower()
        key = (schema, name)
        t = self._tables.get(key)
        if t is not None:
            return t
        sc = self.config.schemas[schema]
        cfg = sc.tables.get(name)
        if cfg is not None:
            fn = dist = None
            if cfg.type == "sharding":
                fcfg = self.config.functions[cfg.function or ""]
                fn = make_function(fcfg)
                dist = (cfg.nodes, fcfg.type, fcfg.partition_count, fcfg.partition_length,
                        fcfg.hash_slice if fcfg.type == "stringhash" else None, fcfg.ranges,
                        fcfg.default_partition)
            t = Table(schema, name, cfg.type, cfg.nodes, cfg.column, fn, dist, cfg)
        elif sc.default_node is not None:
            t = Table(schema, name, "default", (sc.default_node,))
        else:
            raise NoSuchTable(f"Table '{schema}.{name}' doesn't exist in the config of sharding")
        self._tables[key] = t
        return t

    def _home(self, schema: str | None) -> str:
        """The node for statements that touch no table: default node, else the schema's first node."""
        node = self.config.home_node(schema)
        if node is None:
            raise ProxyError("no shardingNode is configured", code=1105)
        return node

    def _strips(self, toks: list[Token]) -> list[tuple[int, int]]:
        """Token ranges of `schema.` qualifiers naming a logical schema: physical SQL drops them."""
        out = []
        names = self._schema_names
        n = len(toks)
        for i in range(n - 2):
            t = toks[i]
            if t[0] in "wq" and toks[i + 1][1] == "." and toks[i + 1][0] == "o" and toks[i + 2][0] in "wq":
                if i and toks[i - 1][1] == "." and toks[i - 1][0] == "o":
                    continue
                name = unquote_ident(t[1]).lower()
                if name in names:
                    out.append((i, i + 2))
        return out

    # -- analysis ----------------------------------------------------------------------------------

    def _analyze(self, sql: str, toks: list[Token], schema: str | None) -> Analysis:
        p = Parser(self._resolve, toks, schema)
        first = p.up[0] if toks[0][0] == "w" else toks[0][1]
        if first in ("SELECT", "WITH", "("):
            an = self._an_select(p)
        elif first in ("INSERT", "REPLACE"):
            an = self._an_insert(p, first.lower())
        elif first == "UPDATE":
            an = self._an_update(p)
        elif first == "DELETE":
            an = self._an_delete(p)
        elif first in ("CREATE", "ALTER", "DROP", "TRUNCATE", "RENAME"):
            an = self._an_ddl(p, first)
        elif first in ("SHOW", "DESC", "DESCRIBE", "EXPLAIN"):
            an = self._an_show(p, sql, first)
        elif first in ("ANALYZE", "OPTIMIZE", "REPAIR", "CHECK", "CHECKSUM"):
            an = self._an_maintenance(p, sql, first)
        elif first == "DO":
            an = Analysis("other", False, (), nodes=(self._home(schema),))
        elif first in _UNSUPPORTED:
            raise not_supported(f"{_UNSUPPORTED[first]} is not supported by pydble")
        elif first in _SESSION_WORDS:
            raise not_supported(f"{first} is a session statement: the session handles it, the router does not")
        else:
            raise p.syntax(0)
        if not an.deletions:
            an.deletions = tuple(self._strips(toks))
        else:
            an.deletions = tuple(sorted(set(an.deletions) | set(self._strips(toks))))
        return an

    def _finish_query(self, p: Parser, an: Analysis) -> Analysis:
        for sc in p.scopes:
            if sc.where is not None:
                sc.cond = p.cond(sc.where[0], sc.where[1], sc)
        an.mode = "query"
        an.refs = p.refs
        an.scopes = p.scopes
        an.queries = p.queries
        an.edges = join_edges(p)
        if not an.tables:
            an.tables = tuple(dict.fromkeys((r.table.schema, r.table.name) for r in p.refs
                                            if r.table.type != "system"))
        if len(p.refs) == 1 and len(p.scopes) == 1 and not p.scopes[0].derived and not p.scopes[0].subs:
            an.single = p.refs[0]
        return an

    def _an_select(self, p: Parser) -> Analysis:
        q = p.query(0, p.n, None, {})
        an = Analysis("select", False, ())
        an.top = q
        return self._finish_query(p, an)

    def _an_update(self, p: Parser) -> Analysis:
        k = 1
        while p.at(k) in ("LOW_PRIORITY", "IGNORE"):
            k += 1
        sc = p.new_scope(None, {})
        k, items = p.from_(k, p.n, sc)
        if not p.word(k, "SET"):
            raise p.syntax(k)
        end = p.skip_to(k + 1, p.n, ("WHERE", "ORDER", "LIMIT"), sc)
        assigns = self._assignments(p, k + 1, end)
        an = Analysis("update", True, ())
        multi = len(sc.refs) > 1 or bool(sc.derived)
        modified: list[Ref] = []
        for col, (a, b) in assigns:
            target = self._assign_target(col, sc.refs, multi)
            for r in target:
                if r not in modified:
                    modified.append(r)
                if r.table.type == "sharding" and col[1] == r.table.column:
                    v, m = p.literal(a, b)
                    an.set_checks.append((r, v if m == b else None, []))
        an.modified = modified or list(sc.refs)
        self._tail(p, end, sc, an)
        q = Query(None, [sc])
        an.top = q
        self._finish_query(p, an)
        for r, v, wheres in an.set_checks:
            for atom in conjuncts(r.scope.cond):
                if atom is not None and atom[0] == "eq" and names_shard_column(atom[1], r):
                    wheres.append(atom[2])
            if v is None or not wheres:
                raise self._shard_update(r)
        return an

    def _shard_update(self, r: Ref) -> NotSupported:
        return not_supported(f"Sharding column can't be updated {r.table.name}->{(r.table.column or '').upper()}")

    def _assign_target(self, col: tuple[tuple[str, ...], str], refs: list[Ref], multi: bool) -> list[Ref]:
        quals, name = col
        if not quals:
            if not multi:
                return list(refs)
            shard = [r for r in refs if r.table.column == name]
            return shard or list(refs)
        return [r for r in refs if (len(quals) == 1 and r.alias == quals[0]) or
                (len(quals) == 2 and r.table.name == quals[1])] or list(refs)

    def _assignments(self, p: Parser, k: int, end: int) -> list[tuple[tuple[tuple[str, ...], str], tuple[int, int]]]:
        """col = expr, ... in [k, end): each column with the token range of its value."""
        out = []
        while k < end:
            col, m = p.colref(k, end)
            if col is None or p.at(m) not in ("=", ":="):
                raise p.syntax(k)
            a = m + 1
            j = a
            while j < end:
                if p.toks[j][0] == "o":
                    if p.up[j] == "(":
                        j = p.close[j] + 1
                        continue
                    if p.up[j] == ",":
                        break
                j += 1
            b = j
            out.append((col, (a, b)))
            k = b + 1
        return out

    def _tail(self, p: Parser, k: int, sc: Scope, an: Analysis) -> None:
        """WHERE / ORDER BY / LIMIT of an UPDATE or DELETE."""
        if p.word(k, "WHERE"):
            end = p.skip_to(k + 1, p.n, ("ORDER", "LIMIT"), sc)
            sc.where = (k + 1, end)
            k = end
        if p.word(k, "ORDER"):
            k = p.skip_to(k + 1, p.n, ("LIMIT",), sc)
        if p.word(k, "LIMIT"):
            an.has_limit = True
            k = p.skip_to(k + 1, p.n, (), sc)
        if k < p.n:
            raise p.syntax(k)

    def _an_delete(self, p: Parser) -> Analysis:
        k = 1
        while p.at(k) in ("LOW_PRIORITY", "QUICK", "IGNORE"):
            k += 1
        sc = p.new_scope(None, {})
        an = Analysis("delete", True, ())
        using = p.skip_to(k, p.n, ("USING",), None)
        names: list[list[str]] = []
        if p.word(k, "FROM") and using == p.n:
            k, _ = p.from_(k + 1, p.n, sc)
            multi = False
        else:
            if p.word(k, "FROM"):
                k += 1
                stop = using
            else:
                stop = p.skip_to(k, p.n, ("FROM",), None)
                if stop == p.n:
                    raise p.syntax(k)
            while k < stop:
                parts, k2 = p.dotted(k, stop)
                if not parts:
                    raise p.syntax(k)
                if p.at(k2) == "." and p.at(k2 + 1) == "*":
                    k2 += 2
                names.append([x.lower() for x in parts])
                k = k2 + 1 if p.at(k2) == "," else k2
            k, _ = p.from_(stop + 1, p.n, sc)
            multi = True
        if multi:
            modified = []
            for parts in names:
                hit = [r for r in sc.refs if (len(parts) == 1 and r.alias == parts[0]) or
                       (len(parts) == 2 and r.table.name == parts[1] and not r.has_alias)]
                if not hit:
                    raise NoSuchTable(f"Unknown table '{'.'.join(parts)}' in MULTI DELETE")
                modified.extend(hit)
            an.modified = modified
        else:
            an.modified = list(sc.refs)
        self._tail(p, k, sc, an)
        an.top = Query(None, [sc])
        return self._finish_query(p, an)

    # -- INSERT / REPLACE --------------------------------------------------------------------------

    def _an_insert(self, p: Parser, kind: str) -> Analysis:
        k = 1
        while p.at(k) in ("LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE"):
            k += 1
        if p.word(k, "INTO"):
            k += 1
        parts, k = p.dotted(k)
        if not parts or len(parts) > 2:
            raise p.syntax(k)
        table = self._resolve(parts, p.schema)
        if table.type == "system":
            raise not_supported(f"writing to {table.full} is not supported by pydble")
        if p.word(k, "PARTITION") and p.at(k + 1) == "(":
            k = p.close[k + 1] + 1
        cols: list[str] | None = None
        if p.at(k) == "(" and not p.is_query(k + 1):
            c = p.close[k]
            cols = []
            j = k + 1
            while j < c:
                col, j = p.colref(j, c)
                if col is None:
                    raise p.syntax(j)
                cols.append(col[1])
                if j < c and p.at(j) == ",":
                    j += 1
            k = c + 1
        an = Analysis(kind, True, ((table.schema, table.name),), mode="insert", target=table)
        sc = p.new_scope(None, {})
        if p.at(k) in ("VALUES", "VALUE"):
            k = self._rows(p, k + 1, an, sc)
            key_idx = self._key_index(table, cols, an) if table.type == "sharding" else -1
            for _, row_open, row_end in an.rows:
                values = self._split_commas(p, row_open + 1, row_end)
                if cols is not None and len(values) != len(cols):
                    raise ProxyError(f"Column count doesn't match value count at row {len(an.keys) + 1}",
                                     code=1136, sqlstate="21S01")
                if key_idx >= 0:
                    if key_idx >= len(values):
                        raise ProxyError(f"Column count doesn't match value count at row {len(an.keys) + 1}",
                                         code=1136, sqlstate="21S01")
                    a, b = values[key_idx]
                    v, m = p.literal(a, b)
                    if v is None or m != b:
                        text = " ".join(t[1] for t in p.toks[a:b])
                        raise not_supported(f"Not Supported of Sharding Value EXPR :{text}")
                    an.keys.append(v)
        elif p.word(k, "SET"):
            end = self._odku(p, k + 1, sc)
            assigns = self._assignments(p, k + 1, end)
            key = None
            for col, (a, b) in assigns:
                if table.type == "sharding" and col[1] == table.column:
                    v, m = p.literal(a, b)
                    if v is None or m != b:
                        text = " ".join(t[1] for t in p.toks[a:b])
                        raise not_supported(f"Not Supported of Sharding Value EXPR :{text}")
                    key = v
            if table.type == "sharding" and key is None:
                raise self._no_key(table)
            an.rows = [(k, k, k)]
            an.keys = [key] if key is not None else []
            k = end
        elif p.is_query(k) or p.word(k, "WITH"):
            end = self._odku(p, k, None)
            q = p.query(k, end, None, {})
            sub = Analysis(kind, True, ())
            sub.top = q
            self._finish_query(p, sub)
            an.sub = sub
            an.mode = "insert_select"
            an.tables = an.tables + tuple(t for t in sub.tables if t not in an.tables)
            k = end
        else:
            raise p.syntax(k)
        if p.word(k, "AS"):  # MySQL 8 row alias: INSERT ... VALUES (...) AS new [(cols)]
            k += 2
            if p.at(k) == "(":
                k = p.close[k] + 1
        if p.word(k, "ON"):
            if not (p.word(k + 1, "DUPLICATE") and p.word(k + 2, "KEY") and p.word(k + 3, "UPDATE")):
                raise p.syntax(k)
            for col, _ in self._assignments(p, k + 4, p.n):
                if table.type == "sharding" and col[1] == table.column:
                    raise not_supported(f"Sharding column can't be updated: {table.name.upper()} -> "
                                         f"{(table.column or '').upper()}")
            p.skip_to(k + 4, p.n, (), sc)
        elif k < p.n:
            raise p.syntax(k)
        if sc.subs and an.mode == "insert":
            sub = Analysis(kind, True, ())
            sub.top = Query(None, [sc])
            self._finish_query(p, sub)
            an.sub = sub
            an.tables = an.tables + tuple(t for t in sub.tables if t not in an.tables)
        if cols is None and table.type == "sharding" and an.mode == "insert":
            an.cacheable = False  # the key's position came from metadata, which can change
        return an

    def _odku(self, p: Parser, k: int, sc: Scope | None) -> int:
        """Where a top-level ON DUPLICATE KEY UPDATE starts (or the end)."""
        while True:
            k = p.skip_to(k, p.n, ("ON",), sc)
            if k >= p.n or p.word(k + 1, "DUPLICATE"):
                return k
            k += 1

    def _no_key(self, table: Table) -> NotSupported:
        return not_supported(f"bad insert sql, sharding column/joinKey:{(table.column or '').upper()} not provided")

    def _key_index(self, table: Table, cols: list[str] | None, an: Analysis) -> int:
        if cols is None:
            known = self.table_columns(table.schema, table.name) if self.table_columns else None
            if not known:
                raise not_supported(f"bad insert sql, sharding column/joinKey:{(table.column or '').upper()} "
                                     f"not provided: INSERT into {table.full} without a column list needs the "
                                     f"table's metadata, which is not loaded")
            cols = [c.lower() for c in known]
        try:
            return cols.index(table.column or "")
        except ValueError:
            raise self._no_key(table) from None

    def _rows(self, p: Parser, k: int, an: Analysis, sc: Scope) -> int:
        while True:
            start = k
            if p.word(k, "ROW"):
                k += 1
            if p.at(k) != "(":
                raise p.syntax(k)
            c = p.close[k]
            p.subqueries(k + 1, c, sc)
            an.rows.append((start, k, c))
            k = c + 1
            if p.at(k) == "," and p.toks[k][0] == "o":
                k += 1
                continue
            return k

    def _split_commas(self, p: Parser, a: int, b: int) -> list[tuple[int, int]]:
        out = []
        j = s = a
        while j < b:
            if p.toks[j][0] == "o":
                if p.up[j] == "(":
                    j = p.close[j] + 1
                    continue
                if p.up[j] == ",":
                    out.append((s, j))
                    s = j + 1
            j += 1
        out.append((s, b))
        return out

    # -- DDL ---------------------------------------------------------------------------------------

    def _ddl_table(self, p: Parser, k: int) -> tuple[Table, int]:
        parts, k2 = p.dotted(k)
        if not parts or len(parts) > 2:
            raise p.syntax(k)
        table = self._resolve(parts, p.schema)
        if table.type == "system":
            raise not_supported(f"DDL on {table.full} is not supported by pydble")
        return table, k2

    def _ddl(self, table: Table, ddl: str, if_exists: bool = False,
             tables: tuple[tuple[str, str], ...] | None = None) -> Analysis:
        return Analysis("ddl", True, tables or ((table.schema, table.name),), nodes=table.nodes, ddl=ddl,
                         if_exists=if_exists)

    def _an_ddl(self, p: Parser, first: str) -> Analysis:
        k = 1
        if first == "CREATE":
            if p.word(k, "OR") and p.word(k + 1, "REPLACE"):
                k += 2
            while p.at(k) in ("UNIQUE", "FULLTEXT", "SPATIAL", "ONLINE", "OFFLINE"):
                k += 1
            if p.word(k, "TEMPORARY"):
                raise not_supported("CREATE TEMPORARY TABLE is not supported by pydble: backend connections "
                                     "are shared, so a temporary table would not follow the session")
            if p.word(k, "TABLE"):
                return self._an_create_table(p, k + 1)
            if p.word(k, "INDEX"):
                on = p.skip_to(k + 1, p.n, ("ON",), None)
                table, _ = self._ddl_table(p, on + 1)
                return self._ddl(table, "CREATE_INDEX")
            raise not_supported(f"CREATE {self._what(p, k)} is not supported by pydble")
        if first == "ALTER":
            while p.at(k) in ("ONLINE", "OFFLINE", "IGNORE"):
                k += 1
            if not p.word(k, "TABLE"):
                raise not_supported(f"ALTER {self._what(p, k)} is not supported by pydble")
            table, k = self._ddl_table(p, k + 1)
            j = k
            while j < p.n:
                j = p.skip_to(j, p.n, ("RENAME",), None)
                if j < p.n and p.at(j + 1) not in ("COLUMN", "INDEX", "KEY") and table.type != "default":
                    raise not_supported(f"renaming {table.full} is not supported: it would leave its "
                                         f"sharding configuration behind")
                j += 1
            return self._ddl(table, "ALTER_TABLE")
        if first == "DROP":
            if p.word(k, "TEMPORARY"):
                raise not_supported("DROP TEMPORARY TABLE is not supported by pydble")
            if p.at(k) in ("TABLE", "TABLES"):
                k += 1
                if_exists = p.word(k, "IF") and p.word(k + 1, "EXISTS")
                if if_exists:
                    k += 2
                tables: list[Table] = []
                while k < p.n and p.at(k) not in ("RESTRICT", "CASCADE", "WAIT", "NOWAIT"):
                    t, k = self._ddl_table(p, k)
                    tables.append(t)
                    if p.at(k) == ",":
                        k += 1
                if not tables:
                    raise p.syntax(k)
                first_t = tables[0]
                for t in tables[1:]:
                    if set(t.nodes) != set(first_t.nodes):
                        raise not_supported(f"DROP TABLE of {first_t.full} and {t.full} is not supported: they "
                                             f"live on different shardingNodes; drop them one at a time")
                names = tuple(dict.fromkeys((t.schema, t.name) for t in tables))
                return self._ddl(first_t, "DROP_TABLE", if_exists, names)
            if p.word(k, "INDEX"):
                on = p.skip_to(k + 1, p.n, ("ON",), None)
                table, _ = self._ddl_table(p, on + 1)
                return self._ddl(table, "DROP_INDEX")
            raise not_supported(f"DROP {self._what(p, k)} is not supported by pydble")
        if first == "TRUNCATE":
            if p.word(k, "TABLE"):
                k += 1
            table, _ = self._ddl_table(p, k)
            return self._ddl(table, "TRUNCATE_TABLE")
        # RENAME TABLE a TO b [, c TO d]
        if p.at(k) not in ("TABLE", "TABLES"):
            raise not_supported(f"RENAME {self._what(p, k)} is not supported by pydble")
        k += 1
        seen: list[Table] = []
        while k < p.n:
            a, k = self._ddl_table(p, k)
            if not p.word(k, "TO"):
                raise p.syntax(k)
            b, k = self._ddl_table(p, k + 1)
            for t in (a, b):
                if t.type != "default":
                    raise not_supported(f"RENAME TABLE of {t.full} is not supported: it is a configured "
                                         f"{t.type} table and would leave its configuration behind")
            seen += [a, b]
            if p.at(k) == ",":
                k += 1
        if not seen:
            raise p.syntax(k)
        if len({t.nodes for t in seen}) > 1:
            raise not_supported("RENAME TABLE across schemas with different default shardingNodes is not supported")
        return self._ddl(seen[0], "RENAME_TABLE", False, tuple(dict.fromkeys((t.schema, t.name) for t in seen)))

    def _what(self, p: Parser, k: int) -> str:
        w = p.at(k)
        if w in ("DEFINER", "ALGORITHM", "SQL"):
            j = k
            while j < p.n and p.at(j) not in ("VIEW", "PROCEDURE", "FUNCTION", "TRIGGER", "EVENT"):
                j += 1
            w = p.at(j) or w
        return w or "statement"

    def _an_create_table(self, p: Parser, k: int) -> Analysis:
        if_exists = p.word(k, "IF") and p.word(k + 1, "NOT") and p.word(k + 2, "EXISTS")
        if if_exists:
            k += 3
        table, k = self._ddl_table(p, k)
        like_at = k + 1 if p.word(k, "LIKE") else k + 2 if p.at(k) == "(" and p.word(k + 1, "LIKE") else -1
        if like_at > 0:
            src, _ = self._ddl_table(p, like_at)
            if not set(table.nodes) <= set(src.nodes):
                raise not_supported(f"CREATE TABLE {table.full} LIKE {src.full} is not supported: {src.full} "
                                     f"is not on every shardingNode of {table.full}")
        else:
            j = k
            if p.at(j) == "(" and not p.is_query(j + 1):
                j = p.close[j] + 1
            sel = j
            while sel < p.n and not (p.word(sel, "SELECT") or p.word(sel, "WITH") or
                                     (p.at(sel) == "(" and p.is_query(sel + 1))):
                sel = p.close[sel] + 1 if p.at(sel) == "(" else sel + 1
            if sel < p.n:
                q = p.query(sel, p.n, None, {})
                sub = Analysis("select", False, ())
                sub.top = q
                self._finish_query(p, sub)
                src_nodes = {n for r in sub.refs if r.table.type in _LOCAL for n in r.table.nodes}
                globals_ok = all(set(table.nodes) <= set(r.table.nodes) for r in sub.refs
                                 if r.table.type == "global")
                if len(table.nodes) != 1 or not src_nodes <= set(table.nodes) or not globals_ok:
                    raise not_supported(f"CREATE TABLE {table.full} ... SELECT is only supported when the new "
                                         f"table and every table it reads live on one shardingNode")
        return self._ddl(table, "CREATE_TABLE", if_exists)

    # -- SHOW / DESC / EXPLAIN / maintenance -------------------------------------------------------

    def _one(self, table: Table, schema: str | None) -> str:
        return table.nodes[0] if table.nodes else self._home(schema)

    def _an_show(self, p: Parser, sql: str, first: str) -> Analysis:
        k = 1
        if first == "SHOW":
            while p.at(k) in ("EXTENDED", "FULL"):
                k += 1
            if p.word(k, "CREATE") and p.word(k + 1, "TABLE"):
                table, _ = self._ddl_or_system(p, k + 2, p.schema)
                return Analysis("other", False, self._names_of(table), nodes=(self._one(table, p.schema),))
            if p.at(k) in ("COLUMNS", "FIELDS", "INDEX", "INDEXES", "KEYS") and p.at(k + 1) in ("FROM", "IN"):
                parts, j = p.dotted(k + 2)
                if not parts or len(parts) > 2:
                    raise p.syntax(k + 2)
                dels: list[tuple[int, int]] = []
                if p.at(j) in ("FROM", "IN") and p.ident(j + 1) is not None and len(parts) == 1:
                    parts = [p.ident(j + 1) or "", parts[0]]
                    dels.append((j, j + 2))
                table = self._resolve(parts, p.schema)
                if dels and table.type == "system":
                    dels = []
                return Analysis("other", False, self._names_of(table), nodes=(self._one(table, p.schema),),
                                 deletions=tuple(dels))
            return Analysis("other", False, (), nodes=(self._home(p.schema),))
        # DESC/DESCRIBE/EXPLAIN: a table, or a statement to explain
        while p.at(k) in ("EXTENDED", "PARTITIONS", "ANALYZE", "FORMAT"):
            if p.word(k, "FORMAT") and p.at(k + 1) == "=":
                k += 3
            else:
                k += 1
        if p.word(k, "FOR"):
            raise not_supported("EXPLAIN FOR CONNECTION is not supported by pydble")
        if k < p.n and p.at(k) in ("SELECT", "WITH", "(", "INSERT", "REPLACE", "UPDATE", "DELETE", "TABLE"):
            inner = self.route(sql[p.toks[k][2]:], p.schema)
            t0 = inner.targets[0]
            return Analysis("other", False, inner.tables, mode="explain", cacheable=False, nodes=(t0.node,),
                             explain=(p.toks[k][2], t0.sql))
        table, _ = self._ddl_or_system(p, k, p.schema)
        return Analysis("other", False, self._names_of(table), nodes=(self._one(table, p.schema),))

    def _ddl_or_system(self, p: Parser, k: int, schema: str | None) -> tuple[Table, int]:
        parts, k2 = p.dotted(k)
        if not parts or len(parts) > 2:
            raise p.syntax(k)
        return self._resolve(parts, schema), k2

    def _names_of(self, table: Table) -> tuple[tuple[str, str], ...]:
        return () if table.type == "system" else ((table.schema, table.name),)

    def _an_maintenance(self, p: Parser, sql: str, first: str) -> Analysis:
        k = 1
        while p.at(k) in ("NO_WRITE_TO_BINLOG", "LOCAL"):
            k += 1
        if first == "ANALYZE" and p.at(k) in ("SELECT", "UPDATE", "DELETE", "INSERT", "REPLACE", "FORMAT"):
            return self._an_show(p, sql, "EXPLAIN")
        if not p.word(k, "TABLE"):
            raise not_supported(f"{first} {self._what(p, k)} is not supported by pydble")
        k += 1
        tables = []
        while k < p.n:
            t, k = self._ddl_table(p, k)
            tables.append(t)
            if p.at(k) != ",":
                break
            k += 1
        if not tables:
            raise p.syntax(k)
        for t in tables[1:]:
            if set(t.nodes) != set(tables[0].nodes):
                raise not_supported(f"{first} TABLE of {tables[0].full} and {t.full} is not supported: they live "
                                     f"on different shardingNodes")
        return Analysis("other", first in ("ANALYZE", "OPTIMIZE", "REPAIR"),
                         tuple(dict.fromkeys((t.schema, t.name) for t in tables)), nodes=tables[0].nodes)

    # -- hints -------------------------------------------------------------------------------------

    def _hint(self, sql: str, toks: list[Token], schema: str | None) -> Plan:
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
        if word in _UNSUPPORTED or word in _SESSION_WORDS:
            raise not_supported(f"{word} cannot be sent through a shardingNode hint")
        kind, is_write, ddl = "other", True, None
        if word in ("SELECT", "WITH", "("):
            kind, is_write = "select", False
        elif word in ("INSERT", "REPLACE", "UPDATE", "DELETE"):
            kind = word.lower()
        elif word in ("CREATE", "ALTER", "DROP", "TRUNCATE", "RENAME"):
            kind = "ddl"
            ddl = _ddl_kind(word, [t[1].upper() for t in toks[2:5] if t[0] == "w"])
        elif word in ("SHOW", "DESC", "DESCRIBE", "EXPLAIN", "CHECK", "CHECKSUM", "DO", "HELP"):
            is_write = False
        tables: tuple[tuple[str, str], ...] = ()
        if kind == "ddl":
            try:
                an = self._analyze(body, tokenize(body), schema)
                tables = an.tables
            except ProxyError:
                pass
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
                    an.if_exists)

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
                targets = (self._home(schema),)
            else:
                targets = nodes
        else:
            targets = self._decide(an, toks, schema)
        phys = self._render(sql, toks, an.deletions)
        if len(targets) > 1 and not an.is_write:
            from proxy.merge import plan_scatter_select
            send, merge = plan_scatter_select(phys)
            return Plan(an.kind, tuple(Target(n, send) for n in targets), False, an.tables, merge)
        return Plan(an.kind, tuple(Target(n, phys) for n in targets), an.is_write, an.tables)

    def _check_sets(self, an: Analysis, toks: list[Token]) -> None:
        """UPDATE may set the sharding column only to the value its WHERE already pins (DBLE's rule)."""
        for r, v, wheres in an.set_checks:
            new = literal_value(v, toks)
            if not any(same_literal(new, literal_value(w, toks)) for w in wheres):
                raise self._shard_update(r)

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
            elif t.type in _LOCAL:
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
                return (self._home(schema),)
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
            if not has_sharding(items):
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
        return Plan(an.kind, targets, True, an.tables)

    def _sub_on(self, sub: Analysis, toks: list[Token], schema: str | None, nodes: tuple[str, ...]) -> None:
        """The tables a write reads (subqueries, INSERT ... SELECT) must all be on the written node."""
        sub.modified = None
        local = [r for r in sub.refs if r.table.type in _LOCAL]
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
