"""The analyzer: turns one statement's tokens into an Analysis, everything about it that does not
depend on its literal values (the router caches it per statement shape). It resolves tables against
the config, reads the statement's structure through the parser and refuses what cannot be routed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from meta import scratch
from meta.config import SYSTEM_SCHEMAS, Config, UserConfig
from meta.errors import (DbAccessDenied, NoDatabaseSelected, NoSuchTable, NotSupported, ProxyError, ReadOnly,
                         TableAccessDenied, UnknownColumn, UnknownDatabase)
from meta.sharding import make_function
from proxy.plan.analysis import (ALL, ANY, DELETE, HIDDEN_SCHEMAS, INSERT, LOCAL_TYPES, SELECT, SESSION_WORDS,
                            UNSUPPORTED, UPDATE, Analysis, Query, Ref, Scope, Table, not_supported,
                            shard_update_error)
from proxy.plan.conditions import conjuncts, join_edges, names_shard_column
from proxy.plan.parser import Parser
from proxy.plan.sqltok import Token, unquote_ident, unquote_string

if TYPE_CHECKING:  # pragma: no cover
    from proxy.plan.plan import Plan


class HiddenSchema(DbAccessDenied):
    """A name in mysql, performance_schema or sys: refused for every client (the router names the user)."""

    def __init__(self, schema: str) -> None:
        super().__init__(f"Access denied to database '{schema}'")
        self.schema = schema


# SHOW forms a backend may answer for any client: they describe the session or the server's
# capabilities, never a database's objects or sessions (the rest is refused, see _an_show; SHOW TABLE
# STATUS and SHOW TRIGGERS are answered by the session over the logical schemas, any other spelling of
# them would list a node's physical database, which may hold other schemas' tables)
_SHOW_PASS = frozenset({"VARIABLES", "STATUS", "WARNINGS", "ERRORS", "COUNT", "CHARACTER", "CHARSET",
                        "COLLATION", "ENGINES", "STORAGE", "PRIVILEGES", "SESSION", "GLOBAL", "LOCAL"})
# functions and clauses that act on the backend's host (its files), not on the logical schemas
_HOST_WORDS = frozenset({"LOAD_FILE", "OUTFILE", "DUMPFILE", "SYS_EXEC", "SYS_EVAL"})
# table options that put a table's files elsewhere on the backend's host or make it read another server
# (MERGE / MRG_MyISAM and its UNION=(db.t, ...) read and write any MyISAM table of any database of the server)
_HOST_TABLE_OPTIONS = frozenset({"DIRECTORY", "CONNECTION", "FILE_NAME", "CONNECT", "FEDERATED", "FEDERATEDX",
                                 "SPIDER", "MERGE", "MRG_MYISAM", "UNION"})
_HOST_ENGINES = frozenset({"CONNECT", "FEDERATED", "FEDERATEDX", "SPIDER", "MERGE", "MRG_MYISAM"})
# MariaDB SEQUENCE objects (CREATE SEQUENCE is refused): their functions name a table no grant check reads
_SEQUENCE_FUNCTIONS = frozenset({"NEXTVAL", "LASTVAL", "SETVAL"})
_DDL_WORDS = {"CREATE_TABLE": "CREATE", "DROP_TABLE": "DROP", "TRUNCATE_TABLE": "DROP", "ALTER_TABLE": "ALTER",
              "CREATE_INDEX": "INDEX", "DROP_INDEX": "INDEX", "RENAME_TABLE": "ALTER"}


class UnknownTable(NoSuchTable):
    """A name neither configured nor on a default node; for a schema outside the grants the router
    answers 1142 instead, as MySQL does not tell such a user which tables exist."""

    def __init__(self, schema: str, table: str) -> None:
        super().__init__(f"Table '{schema}.{table}' doesn't exist in the config of sharding")
        self.schema, self.table = schema, table


class UnknownSchema(UnknownDatabase):
    """db.table with a db no logical schema is named (a physical database, say): 1049, or for a client
    1142 on the table, as MySQL tells a user nothing about databases outside its grants."""

    def __init__(self, schema: str, table: str) -> None:
        super().__init__(f"Unknown database '{schema}'")
        self.schema, self.table = schema, table


# the clause MariaDB names in 1054 by the word that opens it
_CLAUSES = {"SELECT": "SELECT", "WHERE": "WHERE", "HAVING": "HAVING", "ON": "ON", "SET": "SET", "VALUES": "VALUES",
            "VALUE": "VALUES"}


def _clause_of(toks: list[Token], at: int) -> str | None:
    """The clause a column reference at token `at` is in, as MariaDB names it in 1054 (its own or, inside
    parentheses that are no subquery, the enclosing one's), or None where pydble cannot tell."""
    depth = 0
    for j in range(at - 1, -1, -1):
        kind, text = toks[j][0], toks[j][1]
        if kind == "o" and text == ")":
            depth += 1
        elif kind == "o" and text == "(":
            depth = max(depth - 1, 0)
        elif depth == 0 and kind == "w":
            up = text.upper()
            if up == "BY" and j and toks[j - 1][0] == "w" and toks[j - 1][1].upper() in ("ORDER", "GROUP"):
                return f"{toks[j - 1][1].upper()} BY"
            if up in _CLAUSES:
                return _CLAUSES[up]
            if up in ("UPDATE", "LIMIT", "RETURNING", "USING", "PARTITION", "DUPLICATE", "INTO", "FROM", "JOIN"):
                return None
    return None


def three_part_names(toks: list[Token]) -> list[int]:
    """Where each `db.table.column` (or `db.table.*`) column reference starts: the token index of its db."""
    return [i for i in range(len(toks) - 4)
            if toks[i][0] in "wq" and toks[i + 1][:2] == ("o", ".") and toks[i + 2][0] in "wq"
            and toks[i + 3][:2] == ("o", ".") and (toks[i + 4][0] in "wq" or toks[i + 4][:2] == ("o", "*"))
            and not (i and toks[i - 1][:2] == ("o", "."))]


# statements whose every table the analysis knows (Parser.refs, the INSERT's target): a `schema.t.c` must name one
_NAMED_KINDS = frozenset({"SELECT", "WITH", "(", "INSERT", "REPLACE", "UPDATE", "DELETE"})


def _named_tables(p: Parser, an: Analysis) -> set[tuple[str, str]]:
    """(schema, name), lower-cased, that `schema.name.column` can name in the statement, as in MariaDB: each
    table's schema with its alias (its own name when it has none), and the INSERT's target."""
    out = {(r.table.schema.lower(), r.alias) for r in p.refs}
    if an.target is not None:
        out.add((an.target.schema.lower(), an.target.name.lower()))
    return out


# the command word of a refusal (1142) by a statement's first word
COMMAND_WORDS = {"WITH": "SELECT", "(": "SELECT", "REPLACE": "INSERT", "TRUNCATE": "DROP", "RENAME": "ALTER",
                 "DESC": "SELECT", "DESCRIBE": "SELECT", "EXPLAIN": "SELECT", "CHECKSUM": "SELECT",
                 "CHECK": "SELECT", "DO": "SELECT", "ANALYZE": "INSERT", "OPTIMIZE": "INSERT", "REPAIR": "INSERT"}


# the first words of the statements analyze() reads: a hint sends no other (its body must be checked)
STATEMENT_WORDS = frozenset({"SELECT", "WITH", "(", "INSERT", "REPLACE", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP",
                             "TRUNCATE", "RENAME", "SHOW", "DESC", "DESCRIBE", "EXPLAIN", "ANALYZE", "OPTIMIZE",
                             "REPAIR", "CHECK", "CHECKSUM", "DO"})


class Refused(NotSupported):
    """Refused at the access boundary (it would act on the backend's host, or cannot be checked against
    the grants): whoever sends it, hinted or not, and never handed to a backend, not even to EXPLAIN."""


class Grants:
    """One client user's reach, checked on every table a statement names before anything reaches a
    backend: its schemas, and DBLE's dml bits per schema or table (INSERT, UPDATE, SELECT, DELETE)."""

    def __init__(self, user: UserConfig, host: str, config: Config) -> None:
        self.user = user
        self.who = f"'{user.name}'@'{host}'"
        # restricted: some logical schema or some DML is off limits; hints it cannot read are refused
        self.dml_limited = bool(user.privileges)
        self.restricted = self.dml_limited or set(user.schemas) != set(config.schemas)
        self.nodes = frozenset(n for s in user.schemas for n in config.all_nodes_of_schema(s))

    def db_denied(self, schema: str) -> DbAccessDenied:
        """1044, as MySQL answers a database the user has no grant on."""
        return DbAccessDenied(f"Access denied for user {self.who} to database '{schema}'")

    def check(self, access: tuple[tuple[str, int, str, str], ...]) -> None:
        """Refuse (1142/1044) unless the user may run the statement on every table it names."""
        user = self.user
        for word, bit, schema, table in access:
            if schema == "information_schema":
                continue   # answered for the user's own schemas only (the information_schema module)
            if schema in HIDDEN_SCHEMAS:
                raise self.db_denied(schema)
            if not table:
                if schema not in user.schemas:
                    raise self.db_denied(schema)
                continue
            bits = user.dml(schema, table)
            if not (bits == "1111" if bit == ALL else "1" in bits if bit == ANY else bits[bit] == "1"):
                raise TableAccessDenied(f"{word} command denied to user {self.who} for table '{table}'")

    def sees(self, schema: str, table: str) -> bool:
        """Is the table listed to this user (SHOW TABLES, information_schema)? As MySQL lists only the
        tables a user holds some privilege on, one with none of the four dml bits is not."""
        return not self.dml_limited or self.user.dml(schema, table) != "0000"

    def check_lock(self, items: Sequence[tuple[str, str, bool]]) -> None:
        """LOCK TABLES of (schema, table, write) items, as MariaDB checks it: the database granted (1044),
        SELECT on the table (1142), no WRITE lock for a read-only user (1290): a lock blocks other users."""
        for schema, table, write in items:
            self.check((("LOCK", ANY, schema, ""), ("SELECT", SELECT, schema, table)))
            if write and self.user.read_only:
                raise ReadOnly.of(self.user.name)

    def unknown_table(self, e: UnknownTable | UnknownSchema, first_word: str) -> ProxyError:
        """An unknown table in a schema outside the grants is refused, not reported missing."""
        if e.schema in self.user.schemas and self.user.dml(e.schema, e.table) != "0000":
            return e
        word = COMMAND_WORDS.get(first_word, first_word)
        return TableAccessDenied(f"{word} command denied to user {self.who} for table '{e.table}'")

    def check_node(self, node: str) -> None:
        """A hint may name only a shardingNode of the user's schemas."""
        if node not in self.nodes:
            raise Refused(f"shardingNode '{node}' named in the hint holds none of the user's schemas")


class Analyzer:
    """Statement analysis against one Config (no I/O); resolved tables are kept."""

    def __init__(self, config: Config, table_columns: Callable[[str, str], Sequence[str] | None] | None,
                 route_explained: Callable[[str, str | None], Plan]) -> None:
        self.config = config
        self.table_columns = table_columns       # a table's column names from metadata (INSERT without a list)
        self.route_explained = route_explained   # the router's route(): the statement an EXPLAIN explains
        self._tables: dict[tuple[str, str], Table] = {}
        self.views: Any = None   # the server's ViewService (proxy/session/views.py): names that are views
        # while one session's statement is routed: its temporary tables, which shadow every other table of
        # their name in their schema, as in MySQL (proxy/exec/temp_tables.py; the router caches nothing then)
        self.shadow: dict[tuple[str, str], Table] | None = None
        self._schema_names = {name.lower(): name for name in config.schemas}

    # -- tables ------------------------------------------------------------------------------------

    def resolve(self, parts: list[str], schema: str | None) -> Table:
        """Resolve [schema.]table to its configuration (or the schema's default node)."""
        if len(parts) == 2:
            real = self._schema_names.get(parts[0].lower())
            if real is None:
                if parts[0].lower() in HIDDEN_SCHEMAS:
                    raise HiddenSchema(parts[0].lower())
                if parts[0].lower() in SYSTEM_SCHEMAS:
                    return Table(parts[0].lower(), parts[1].lower(), "system", ())
                raise UnknownSchema(parts[0], parts[1].lower())
            schema = real
        elif schema is None:
            raise NoDatabaseSelected("No database selected")
        elif schema not in self.config.schemas:   # information_schema, the current database (USE)
            raise NotSupported(f"{parts[-1]}: pydble answers information_schema only as "
                               f"information_schema.<table>: name the table so")
        name = parts[-1].lower()
        key = (schema, name)
        if self.shadow is not None and (tmp := self.shadow.get(key)) is not None:
            return tmp
        if self.views is not None and (v := self.views.table(schema, name)) is not None:
            return v   # a view (proxy/session/views.py): never cached, views come and go
        t = self._tables.get(key)
        if t is not None:
            return t
        scratch.refuse(name)   # pydble's own scratch views (never cached: checked on a miss only)
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
        elif (home := self.config.default_home(schema, name)) is not None:
            t = Table(schema, name, "default", (home,))
        else:
            raise UnknownTable(schema, name)
        self._tables[key] = t
        return t

    def home(self, schema: str | None) -> str:
        """The node for statements that touch no table: default node, else the schema's first node."""
        node = self.config.home_node(schema)
        if node is None:
            raise ProxyError("no shardingNode is configured", code=1105)
        return node

    def refuse_other_databases(self, toks: list[Token], named: set[tuple[str, str]] | None = None) -> None:
        """`db.t.c` (or `db.t.*`) that names no table of the statement: db is no logical schema (a backend's
        physical database, say), or, where the statement's tables are known (named: lower-cased schema and
        name of each table known by its own name), no table of it is db.t: 1054 (1051) as MariaDB answers it,
        never stripped to `t.c` nor sent to a node whose own database might be that db."""
        names = self._schema_names
        for i in three_part_names(toks):
            db = unquote_ident(toks[i][1])
            table = unquote_ident(toks[i + 2][1])
            if db.lower() in SYSTEM_SCHEMAS or db.lower() in HIDDEN_SCHEMAS:
                continue
            if db.lower() in names and (named is None or (db.lower(), table.lower()) in named):
                continue
            if toks[i + 4][0] == "o":
                raise NoSuchTable(f"Unknown table '{db}.{table}'", 1051)
            clause = _clause_of(toks, i)
            if clause is None:
                raise Refused(f"the column {db}.{table}.{unquote_ident(toks[i + 4][1])} names no table of the "
                              f"statement: name the column by its table (or schema.table)")
            raise UnknownColumn(f"{db}.{table}.{unquote_ident(toks[i + 4][1])}", clause)

    def strips(self, toks: list[Token]) -> list[tuple[int, int]]:
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

    def analyze(self, sql: str, toks: list[Token], schema: str | None) -> Analysis:
        """The statement's analysis, with what it needs of the user's grants (an.access)."""
        p = Parser(self.resolve, toks, schema, sql)
        first = p.up[0] if toks[0][0] == "w" else toks[0][1]
        self._host_reach(p)
        if first in ("SELECT", "WITH", "("):
            an = self._an_select(p)
        elif first in ("INSERT", "REPLACE"):
            an = self._returning(p, lambda: self._an_insert(p, first.lower()))
        elif first == "UPDATE":
            an = self._an_update(p)
        elif first == "DELETE":
            an = self._returning(p, lambda: self._an_delete(p))
        elif first in ("CREATE", "ALTER", "DROP", "TRUNCATE", "RENAME"):
            an = self._an_ddl(p, first)
        elif first in ("SHOW", "DESC", "DESCRIBE", "EXPLAIN"):
            an = self._an_show(p, sql, first)
        elif first in ("ANALYZE", "OPTIMIZE", "REPAIR", "CHECK", "CHECKSUM"):
            an = self._an_maintenance(p, sql, first)
        elif first == "DO":
            p.subqueries(1, p.n, p.new_scope(None, {}))
            an = Analysis("other", False, (), nodes=(self.home(schema),))
        elif first in UNSUPPORTED:
            raise not_supported(f"{UNSUPPORTED[first]} is not supported by pydble")
        elif first in SESSION_WORDS:
            raise not_supported(f"{first} is not supported by pydble in this form")
        else:
            raise p.syntax(0)
        self.refuse_other_databases(toks, _named_tables(p, an) if first in _NAMED_KINDS else None)
        if not an.deletions:
            an.deletions = tuple(self.strips(toks))
        else:
            an.deletions = tuple(sorted(set(an.deletions) | set(self.strips(toks))))
        an.access = self._access(an, p) + self._routines(toks)
        return an

    def _routines(self, toks: list[Token]) -> tuple[tuple[str, int, str, str], ...]:
        """`schema.f(...)`, a stored function of a logical schema: the schema must be the user's (1044), as
        the backend would run it with its definer's rights in a database other schemas share."""
        out = []
        for i in range(len(toks) - 3):
            if (toks[i][0] in "wq" and toks[i + 1][:2] == ("o", ".") and toks[i + 2][0] in "wq"
                    and toks[i + 3][:2] == ("o", "(") and not (i and toks[i - 1][:2] == ("o", "."))):
                real = self._schema_names.get(unquote_ident(toks[i][1]).lower())
                if real is not None:
                    out.append(("EXECUTE", ANY, real, ""))
        return tuple(dict.fromkeys(out))

    def _returning(self, p: Parser, analyze: Callable[[], Analysis]) -> Analysis:
        """MariaDB's `... RETURNING select_list` ends an INSERT, REPLACE or DELETE: the statement is read
        up to it (the parser's end moved there), the list goes to the backend as written: so a subquery in
        it, which would read any table of that node's database past the grants, is refused."""
        at = p.skip_to(1, p.n, ("RETURNING",), None)
        if at >= p.n:
            return analyze()
        if at + 1 >= p.n:
            raise p.syntax(at)
        if any(p.toks[i][0] == "o" and p.up[i] == "(" and p.is_query(i + 1) for i in range(at + 1, p.n)):
            raise Refused("a subquery in RETURNING is not supported by pydble: the list runs as written on the "
                          "written table's node")
        n, p.n = p.n, at
        try:
            an = analyze()
        finally:
            p.n = n
        an.returning = True
        an.returning_rows = (an.kind == "insert" and an.mode == "insert"
                             and p.skip_to(1, at, ("IGNORE", "DUPLICATE"), None) >= at)
        return an

    def _access(self, an: Analysis, p: Parser) -> tuple[tuple[str, int, str, str], ...]:
        """Every table the statement names with the privilege it needs: the written ones their DML bit
        (or, for DDL, all four), everything read SELECT."""
        out = list(an.access)
        if an.target is not None:
            t = an.target
            out.append(("INSERT", INSERT, t.schema, t.name))
            if an.kind == "replace":
                out.append(("DELETE", DELETE, t.schema, t.name))
        if an.kind == "ddl":
            word = _DDL_WORDS.get(an.ddl or "", "ALTER")
            out += [(word, ALL, s, t) for s, t in an.tables]
        written = {id(r) for r in an.modified} if an.modified is not None else set()
        word, bit = ("UPDATE", UPDATE) if an.kind == "update" else ("DELETE", DELETE)
        for r in p.refs:
            t = r.table
            out.append((word, bit, t.schema, t.name) if id(r) in written else ("SELECT", SELECT, t.schema, t.name))
        return tuple(dict.fromkeys(out))

    def _table_option(self, p: Parser, i: int, w: str) -> bool:
        """Is the word at i that table option (not a column of that name)?"""
        if w == "DIRECTORY":
            return p.at(i - 1) in ("DATA", "INDEX")
        if w in _HOST_ENGINES:
            j = i - 2 if p.at(i - 1) == "=" else i - 1
            return p.at(j) == "ENGINE"
        if w == "UNION":   # UNION [=] (t1, t2): the MERGE table option, not a set operation's UNION (SELECT ...)
            j = i + 2 if p.at(i + 1) == "=" else i + 1
            return p.at(j) == "(" and not p.is_query(j + 1)
        return p.at(i + 1) == "=" or (i + 1 < p.n and p.toks[i + 1][0] == "s")

    def _ddl_names(self, p: Parser, an: Analysis) -> Analysis:
        """The other tables a CREATE/ALTER names (REFERENCES, RENAME TO, EXCHANGE ... WITH TABLE):
        each needs the user's grant as well."""
        out = []
        for i in range(1, p.n):
            w = p.at(i) if p.toks[i][0] == "w" else ""
            k = -1
            if w == "REFERENCES" or (w == "TABLE" and p.at(i - 1) == "WITH"):
                k = i + 1
            elif w == "RENAME" and p.at(i + 1) not in ("COLUMN", "INDEX", "KEY", "TABLE"):
                k = i + 2 if p.at(i + 1) in ("TO", "AS") else i + 1
            if k > 0:
                parts, _ = p.dotted(k)
                if 0 < len(parts) <= 2:
                    t = self.resolve(parts, p.schema)
                    out.append(("REFERENCES", SELECT, t.schema, t.name) if w == "REFERENCES"
                               else ("ALTER", ALL, t.schema, t.name))
        an.access = an.access + tuple(out)
        return an

    def host_reach(self, toks: list[Token], schema: str | None, grants: Grants | None) -> None:
        """_host_reach for a statement planned outside analyze() (a session's temporary table DDL)."""
        try:
            self._host_reach(Parser(self.resolve, toks, schema))
        except HiddenSchema as e:
            raise (grants.db_denied(e.schema) if grants is not None else e) from None

    def _host_reach(self, p: Parser) -> None:
        """Refuse what acts on the backend's host (files, other servers) or names a hidden schema,
        wherever it sits in the statement (read from the tokens: no clause of it is skipped)."""
        toks, up = p.toks, p.up
        ddl = up[0] in ("CREATE", "ALTER") if toks else False
        for i, t in enumerate(toks):
            kind = t[0]
            if kind == "s" and ddl and "ENGINE" in (p.at(i - 1), p.at(i - 2)):   # ENGINE [=] 'name'
                kind, t = "q", (kind, "`" + unquote_string(t[1]).replace("`", "``") + "`", t[2], t[3])
            if kind not in "wq":
                continue
            w = up[i] if kind == "w" else unquote_ident(t[1]).upper()
            if w in _HOST_WORDS:
                raise Refused(f"{w} is not supported by pydble: it would act on the backend server's host")
            if (kind == "w" and ((w in _SEQUENCE_FUNCTIONS and p.at(i + 1) == "(")
                                 or (w == "VALUE" and p.at(i - 1) in ("NEXT", "PREVIOUS") and p.at(i + 1) == "FOR"))):
                raise Refused(f"{w if w != 'VALUE' else p.at(i - 1) + ' VALUE FOR'} is not supported by pydble: "
                              f"MariaDB SEQUENCE objects are not (pydble's own sequences fill increment columns)")
            if ddl and w in _HOST_TABLE_OPTIONS and self._table_option(p, i, w):
                raise Refused(f"the table option {w} is not supported by pydble: it would reach the backend "
                                f"server's files, other databases or another server")
            if i + 2 < p.n and toks[i + 1][1] == "." and toks[i + 1][0] == "o" and w.lower() in HIDDEN_SCHEMAS:
                if not (i and toks[i - 1][1] == "." and toks[i - 1][0] == "o"):
                    raise HiddenSchema(w.lower())

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
        if any(t[0] == "w" and w == "PROCEDURE" for t, w in zip(p.toks, p.up)):
            raise Refused("PROCEDURE ANALYSE is not supported by pydble: its rows name a node's physical "
                          "database and describe one part of the table")
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
                raise shard_update_error(r)
        return an


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
            b = p.comma(m + 1, end)
            out.append((col, (m + 1, b)))
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
        table = self.resolve(parts, p.schema)
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
            an.access += (("UPDATE", UPDATE, table.schema, table.name),)   # it rewrites a row, as MySQL checks it
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
        """The top-level comma-separated token ranges of [a, b)."""
        out = []
        while True:
            j = p.comma(a, b)
            out.append((a, j))
            if j >= b:
                return out
            a = j + 1

    # -- DDL ---------------------------------------------------------------------------------------

    def _ddl_table(self, p: Parser, k: int) -> tuple[Table, int]:
        parts, k2 = p.dotted(k)
        if not parts or len(parts) > 2:
            raise p.syntax(k)
        table = self.resolve(parts, p.schema)
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
                return self._ddl_names(p, self._an_create_table(p, k + 1))
            if p.word(k, "INDEX"):
                on = p.skip_to(k + 1, p.n, ("ON",), None)
                table, _ = self._ddl_table(p, on + 1)
                return self._ddl(table, "CREATE_INDEX")
            raise self._other_object(p, k, "CREATE")
        if first == "ALTER":
            while p.at(k) in ("ONLINE", "OFFLINE", "IGNORE"):
                k += 1
            if not p.word(k, "TABLE"):
                raise self._other_object(p, k, "ALTER")
            table, k = self._ddl_table(p, k + 1)
            if p.at(k) in ("DISABLE", "ENABLE") and p.word(k + 1, "KEYS") and k + 2 == p.n:
                # what dumps wrap their rows in: no structure change, so no DDL lock and no refresh
                return Analysis("other", True, ((table.schema, table.name),), nodes=table.nodes)
            j = k
            while j < p.n:
                j = p.skip_to(j, p.n, ("RENAME",), None)
                if j < p.n and p.at(j + 1) not in ("COLUMN", "INDEX", "KEY") and table.type != "default":
                    raise not_supported(f"renaming {table.full} is not supported: it would leave its "
                                         f"sharding configuration behind")
                j += 1
            return self._ddl_names(p, self._ddl(table, "ALTER_TABLE"))
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
            raise self._other_object(p, k, "DROP")
        if first == "TRUNCATE":
            if p.word(k, "TABLE"):
                k += 1
            table, _ = self._ddl_table(p, k)
            return self._ddl(table, "TRUNCATE_TABLE")
        # RENAME TABLE a TO b [, c TO d]
        if p.at(k) not in ("TABLE", "TABLES"):
            raise self._other_object(p, k, "RENAME")
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

    def _other_object(self, p: Parser, k: int, verb: str) -> Refused:
        """DDL on what is no table (a user, role, database, server, stored program...): refused even through a
        hint, as the backend would run it with its own account's rights (a stored program as its definer)."""
        return Refused(f"{verb} {self._what(p, k)} is not supported by pydble")

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
            an = self._ddl(table, "CREATE_TABLE", if_exists)
            an.access = (("SELECT", SELECT, src.schema, src.name),)
            return an
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
                self.refuse_other_databases(p.toks[sel:p.n], _named_tables(p, sub))   # checked as the SELECT is
                src_nodes = {n for r in sub.refs if r.table.type in LOCAL_TYPES for n in r.table.nodes}
                globals_ok = all(set(table.nodes) <= set(r.table.nodes) for r in sub.refs
                                 if r.table.type == "global")
                if len(table.nodes) != 1 or not src_nodes <= set(table.nodes) or not globals_ok:
                    raise not_supported(f"CREATE TABLE {table.full} ... SELECT is only supported when the new "
                                         f"table and every table it reads live on one shardingNode")
        return self._ddl(table, "CREATE_TABLE", if_exists)

    # -- LOCK TABLES -------------------------------------------------------------------------------

    def lock_tables(self, toks: list[Token], schema: str | None) -> list[tuple[Table, str, str | None, str]]:
        """LOCK TABLE[S] t [[AS] a] {READ [LOCAL] | [LOW_PRIORITY] WRITE [CONCURRENT]}, ...:
        each table with its name as written, its alias and its lock type (normalized words)."""
        p = Parser(self.resolve, toks, schema)
        if not p.word(0, "LOCK") or p.at(1) not in ("TABLE", "TABLES"):
            raise p.syntax(0)
        k = 2
        out: list[tuple[Table, str, str | None, str]] = []
        while True:
            table, k = self._ddl_or_system(p, k, schema)
            name = p.ident(k - 1) or table.name
            if table.type == "system":
                raise not_supported(f"LOCK TABLES on {table.full} is not supported by pydble")
            alias = None
            if p.word(k, "AS"):
                alias, k = p.ident(k + 1), k + 2
                if alias is None:
                    raise p.syntax(k - 1)
            elif k < p.n and p.toks[k][0] in "wq" and p.at(k) not in ("READ", "WRITE", "LOW_PRIORITY"):
                alias, k = p.ident(k), k + 1
            j = k
            while j < p.n and p.at(j) != ",":
                j += 1
            mode = " ".join(p.up[k:j])
            if mode not in ("READ", "READ LOCAL", "WRITE", "LOW_PRIORITY WRITE", "WRITE CONCURRENT"):
                raise p.syntax(k)
            out.append((table, name, alias, mode))
            if j >= p.n:
                return out
            k = j + 1

    # -- SHOW / DESC / EXPLAIN / maintenance -------------------------------------------------------

    def _one(self, table: Table, schema: str | None) -> str:
        return table.nodes[0] if table.nodes else self.home(schema)

    def _an_show(self, p: Parser, sql: str, first: str) -> Analysis:
        k = 1
        if first == "SHOW":
            if "SELECT" in p.up:   # SHOW ... WHERE runs on a node as written: a subquery would read past the grants
                raise Refused("SHOW ... WHERE with a subquery is not supported by pydble: it would run on a node's "
                              "database as written")
            while p.at(k) in ("EXTENDED", "FULL"):
                k += 1
            if p.word(k, "CREATE") and p.word(k + 1, "TABLE"):
                table, _ = self._ddl_or_system(p, k + 2, p.schema)
                return Analysis("other", False, self._names_of(table), nodes=(self._one(table, p.schema),),
                                access=(("SHOW", ANY, table.schema, table.name),))
            if p.at(k) in ("COLUMNS", "FIELDS", "INDEX", "INDEXES", "KEYS") and p.at(k + 1) in ("FROM", "IN"):
                parts, j = p.dotted(k + 2)
                if not parts or len(parts) > 2:
                    raise p.syntax(k + 2)
                dels: list[tuple[int, int]] = []
                if p.at(j) in ("FROM", "IN") and p.ident(j + 1) is not None and len(parts) == 1:
                    parts = [p.ident(j + 1) or "", parts[0]]
                    dels.append((j, j + 2))
                table = self.resolve(parts, p.schema)
                if dels and table.type == "system":
                    dels = []
                return Analysis("other", False, self._names_of(table), nodes=(self._one(table, p.schema),),
                                 deletions=tuple(dels), access=(("SELECT", ANY, table.schema, table.name),))
            if p.at(k) not in _SHOW_PASS:
                raise Refused(f"SHOW {p.at(k)} is not supported by pydble: it would describe the backend "
                              f"server rather than the logical schemas")
            return Analysis("other", False, (), nodes=(self.home(p.schema),))
        # DESC/DESCRIBE/EXPLAIN: a table, or a statement to explain
        while p.at(k) in ("EXTENDED", "PARTITIONS", "ANALYZE", "FORMAT"):
            if p.word(k, "FORMAT") and p.at(k + 1) == "=":
                k += 3
            else:
                k += 1
        if p.word(k, "FOR"):
            raise not_supported("EXPLAIN FOR CONNECTION is not supported by pydble")
        if k < p.n and p.at(k) in ("SELECT", "WITH", "(", "INSERT", "REPLACE", "UPDATE", "DELETE", "TABLE"):
            inner = self.route_explained(sql[p.toks[k][2]:], p.schema)
            if not inner.targets:
                raise not_supported("EXPLAIN of a set operation whose branches run on different shardingNodes "
                                    "is not supported")
            t0 = inner.targets[0]
            # EXPLAIN needs what running the statement needs
            explained = self.analyze(sql, p.toks[k:], p.schema).access
            return Analysis("other", False, inner.tables, mode="explain", cacheable=False, nodes=(t0.node,),
                             explain=(p.toks[k][2], t0.sql), access=explained)
        table, _ = self._ddl_or_system(p, k, p.schema)
        return Analysis("other", False, self._names_of(table), nodes=(self._one(table, p.schema),),
                        access=(("SELECT", ANY, table.schema, table.name),))

    def _ddl_or_system(self, p: Parser, k: int, schema: str | None) -> tuple[Table, int]:
        parts, k2 = p.dotted(k)
        if not parts or len(parts) > 2:
            raise p.syntax(k)
        return self.resolve(parts, schema), k2

    def _names_of(self, table: Table) -> tuple[tuple[str, str], ...]:
        return () if table.type == "system" else ((table.schema, table.name),)

    def _an_maintenance(self, p: Parser, sql: str, first: str) -> Analysis:
        k = 1
        while p.at(k) in ("NO_WRITE_TO_BINLOG", "LOCAL"):
            k += 1
        if first == "ANALYZE" and p.at(k) in ("SELECT", "UPDATE", "DELETE", "INSERT", "REPLACE", "FORMAT"):
            return self._an_show(p, sql, "EXPLAIN")
        if not p.word(k, "TABLE"):
            raise self._other_object(p, k, first)
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
        word, bit = ("SELECT", SELECT) if first in ("CHECK", "CHECKSUM") else ("INSERT", ALL)
        return Analysis("other", first in ("ANALYZE", "OPTIMIZE", "REPAIR"),
                         tuple(dict.fromkeys((t.schema, t.name) for t in tables)), nodes=tables[0].nodes,
                         access=tuple((word, bit, t.schema, t.name) for t in tables), maintenance=True)
