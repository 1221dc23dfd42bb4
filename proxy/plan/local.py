"""Statements the proxy answers itself: SET, USE, transaction control, driver probes, SHOW DATABASES/TABLES."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Sequence

from meta.errors import NotSupported, ParseError, SpecificAccessDenied

from proxy.wire.constants import BINARY_FLAG, NOT_NULL_FLAG, T_DOUBLE, T_LONG, T_LONG_BLOB, T_LONGLONG, T_VAR_STRING
from proxy.wire.messages import ColumnDef, ResultSet
from proxy.wire.packets import splice
from proxy.plan.placeholders import select_aliases
from proxy.plan.sqltok import Token, tokenize, unquote_ident


@dataclass(frozen=True)
class Assignment:
    """One session change from a SET statement."""

    key: str          # 'autocommit', 'names', 'isolation', 'tx_read_only', a variable name, or '@user'
    sql: str          # the statement that replays it on a backend ('' for autocommit)
    value: str = ""   # autocommit: '0' or '1'
    next_only: bool = False   # SET TRANSACTION without SESSION: the next transaction's only, never replayed


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on sep outside quotes, backticks and parentheses."""
    parts: list[str] = []
    depth = 0
    quote = ""
    start = 0
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\" and quote != "`":
                i += 2
                continue
            if ch == quote:
                if i + 1 < n and text[i + 1] == quote:
                    i += 2
                    continue
                quote = ""
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


_NAMES = re.compile(r"^NAMES\s+(?P<cs>'[^']*'|\"[^\"]*\"|`[^`]*`|\w+)(?:\s+COLLATE\s+(?P<co>'[^']*'|\"[^\"]*\"|\w+))?\s*$", re.I | re.S)
_CHARSET = re.compile(r"^(?:CHARACTER\s+SET|CHARSET)\s+(?P<cs>'[^']*'|\"[^\"]*\"|\w+)\s*$", re.I | re.S)
_TRANSACTION = re.compile(r"^(?:(?P<scope>SESSION|LOCAL|GLOBAL)\s+)?TRANSACTION\s+(?P<rest>.+)$", re.I | re.S)
_ASSIGN = re.compile(
    r"^(?:(?P<scope>GLOBAL|SESSION|LOCAL|PERSIST)\s+|@@(?P<scope2>global|session|local)\.|@@)?"
    r"(?P<name>@?`?[\w$.]+`?)\s*(?::=|=)\s*(?P<value>.+)$", re.I | re.S)
_ISOLATION_LEVELS = frozenset({"READ UNCOMMITTED", "READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"})
_PASSWORD = re.compile(r"PASSWORD\b", re.I)   # SET PASSWORD [FOR user] = ...
_BOOL = {"0": "0", "1": "1", "off": "0", "on": "1", "false": "0", "true": "1", "'off'": "0", "'on'": "1",
         "'0'": "0", "'1'": "1"}


# Session variables MariaDB lets only SUPER (or the privilege named) set: they change what the backend
# logs and replicates or where it writes files. A client never gets them through the backend's account.
_SUPER, _BINLOG_ADMIN, _BINLOG_REPLAY = "SUPER", "SUPER, BINLOG ADMIN", "SUPER, BINLOG REPLAY"
_PRIVILEGED_VARS = {
    "sql_log_bin": _BINLOG_ADMIN, "binlog_format": _BINLOG_ADMIN, "binlog_row_image": _BINLOG_ADMIN,
    "binlog_annotate_row_events": _BINLOG_ADMIN, "binlog_direct_non_transactional_updates": _BINLOG_ADMIN,
    "pseudo_thread_id": _BINLOG_REPLAY, "server_id": _BINLOG_REPLAY, "gtid_domain_id": _BINLOG_REPLAY,
    "gtid_seq_no": _BINLOG_REPLAY, "sql_log_off": _SUPER, "log_disabled_statements": _SUPER,
    "enforce_storage_engine": _SUPER, "wsrep_on": _SUPER, "debug": _SUPER, "debug_dbug": _SUPER,
    "debug_sync": _SUPER, "innodb_tmpdir": "FILE",
    # MySQL 8 backends: what its SYSTEM_VARIABLES_ADMIN / REPLICATION_APPLIER guard
    "gtid_next": _SUPER, "original_commit_timestamp": _SUPER, "original_server_version": _SUPER,
    "immediate_server_version": _SUPER, "pseudo_replica_mode": _SUPER, "rbr_exec_mode": _SUPER,
    "sql_require_primary_key": _SUPER, "default_table_encryption": _SUPER, "binlog_rows_query_log_events": _SUPER,
    "binlog_row_value_options": _SUPER, "binlog_transaction_compression": _SUPER,
}


def _settable(name: str) -> None:
    """Refuse (1227, MariaDB's words) a session variable only a privileged backend account may set."""
    need = _PRIVILEGED_VARS.get(name)
    if need is not None:
        raise SpecificAccessDenied(f"Access denied; you need (at least one of) the {need} privilege(s) for this "
                                   f"operation")


_NOT_REPLAYED = frozenset({"SELECT", "WITH", "TABLE", "VALUES", "LOAD_FILE", "SYS_EXEC", "SYS_EVAL"})


def _replayable(value: str) -> None:
    """A SET value is replayed on every backend connection the session uses: an expression only, never
    a query (it would read tables past the grant check), an executable comment or a host function."""
    for kind, text, _, _ in tokenize(value):
        if kind == "h" or (kind == "w" and text.upper() in _NOT_REPLAYED):
            raise NotSupported("SET with a subquery, an executable comment or LOAD_FILE is not supported by "
                               "pydble: the value is replayed on backend connections")


def _spans(sql: str, toks: list[tuple[str, str, int, int]]) -> str:
    """The text the tokens cover, a comment between two of them (a version comment's markers, as in
    mysqldump's `SET SQL_QUOTE_SHOW_CREATE=1/*!40102 ,SQL_MODE=...*/`) read as a space."""
    out: list[str] = []
    for i, (_, _, start, end) in enumerate(toks):
        if i:
            gap = sql[toks[i - 1][3]:start]
            out.append(gap if gap.isspace() or not gap else " ")
        out.append(sql[start:end])
    return "".join(out)


_REPLAYED_AS_WRITTEN = frozenset({"names", "isolation", "tx_read_only"})   # statements parse_set wrote itself


def computed_value(a: Assignment) -> bool:
    """Whether a session variable's assignment reads variables or calls functions: its result depends on
    the connection it runs on and when (`CONCAT(@@sql_mode, ',X')`, `@@wait_timeout + 10`), so it is
    computed once and replayed by value; a literal or a bare word is replayed as written."""
    if a.key in _REPLAYED_AS_WRITTEN:
        return False
    value = a.sql.split(" = ", 1)[1] if " = " in a.sql else ""
    return any(kind == "v" or (kind == "o" and text == "(") for kind, text, _, _ in tokenize(value))


def parse_set(sql: str) -> list[Assignment]:
    """Turn a SET statement into session changes; GLOBAL scope is refused."""
    toks = tokenize(sql)  # version comments are opened here: /*!40101 SET NAMES utf8 */
    while toks and toks[-1][1] == ";" and toks[-1][0] == "o":
        toks.pop()
    if toks and toks[0][0] == "h":   # it would change one shared backend connection, not the session
        raise NotSupported("SET cannot be sent through a shardingNode hint: a session's variables apply to every "
                           "node; SET it without the hint")
    if not toks or toks[0][0] != "w" or toks[0][1].upper() != "SET":
        raise ParseError("not a SET statement")
    if len(toks) < 2:
        raise ParseError("You have an error in your SQL syntax near ''")
    body = _spans(sql, toks[1:])
    out: list[Assignment] = []
    tm = _TRANSACTION.match(body)
    if tm:
        if (tm.group("scope") or "").upper() == "GLOBAL":
            raise NotSupported("SET GLOBAL is not supported through the proxy; set it on the backends")
        rest = tm.group("rest").strip()
        scope = "SESSION " if tm.group("scope") else ""
        for item in split_top_level(rest):
            up = " ".join(item.upper().split())
            if up.startswith("ISOLATION LEVEL ") and (scope or up[16:] in _ISOLATION_LEVELS):
                out.append(Assignment("isolation", f"SET {scope}TRANSACTION {up}", next_only=not scope))
            elif up in ("READ ONLY", "READ WRITE"):
                out.append(Assignment("tx_read_only", f"SET {scope}TRANSACTION {up}", next_only=not scope))
            else:
                raise ParseError(f"You have an error in your SQL syntax near '{item}'")
        return out
    if toks[1][0] == "w" and toks[1][1].upper() == "STATEMENT" and (len(toks) < 3 or toks[2][1] != "="):
        raise NotSupported("SET STATEMENT ... FOR is not supported by pydble: SET the variables for the session, "
                           "run the statement, then SET them back")
    if _PASSWORD.match(body):
        raise NotSupported("SET PASSWORD is not supported by pydble: client users' passwords are in its "
                           "configuration, and a backend account's is the operator's")
    for item in split_top_level(body):
        nm = _NAMES.match(item)
        if nm:
            cs = nm.group("cs").strip("'\"`").lower()
            co = (nm.group("co") or "").strip("'\"`").lower()
            if cs == "default":
                out.append(Assignment("names", ""))
            else:
                out.append(Assignment("names", f"SET NAMES {cs}" + (f" COLLATE {co}" if co else "")))
            continue
        cm = _CHARSET.match(item)
        if cm:
            cs = cm.group("cs").strip("'\"").lower()
            out.append(Assignment("names", f"SET CHARACTER SET {cs}"))
            continue
        am = _ASSIGN.match(item)
        if not am:
            raise ParseError(f"You have an error in your SQL syntax near '{item[:40]}'")
        scope = (am.group("scope") or am.group("scope2") or "").upper()
        if scope in ("GLOBAL", "PERSIST"):
            raise NotSupported("SET GLOBAL is not supported through the proxy; set it on the backends")
        name = am.group("name").strip("`")
        value = am.group("value").strip()
        _replayable(value)
        if name.startswith("@"):
            out.append(Assignment(name.lower(), f"SET {name} = {value}"))
            continue
        lname = name.lower()
        _settable(lname)
        if lname == "autocommit":
            v = _BOOL.get(value.lower())
            if v is None:
                raise ParseError(f"Variable 'autocommit' can't be set to the value of '{value}'", 1231, "42000")
            out.append(Assignment("autocommit", "", v))
        elif lname in ("names", "character_set_client", "character_set_results", "character_set_connection",
                       "collation_connection"):
            out.append(Assignment(lname, f"SET SESSION {lname} = {value}"))
        elif lname == "completion_type":
            if value.strip("'\"").upper() not in ("0", "NO_CHAIN", "DEFAULT"):
                raise NotSupported("completion_type other than NO_CHAIN is not supported by pydble: write COMMIT "
                                   "AND CHAIN or COMMIT RELEASE, which it runs on every node of the transaction")
            out.append(Assignment(lname, f"SET SESSION {lname} = {value}"))
        elif lname in ("transaction_isolation", "tx_isolation"):
            out.append(Assignment("isolation", f"SET SESSION tx_isolation = {value}"))
        elif lname in ("transaction_read_only", "tx_read_only"):
            out.append(Assignment("tx_read_only", f"SET SESSION tx_read_only = {value}"))
        else:
            out.append(Assignment(lname, f"SET SESSION {lname} = {value}"))
    return out


# -- driver probes answered locally ---------------------------------------------------------------
_LOCAL_FUNCS = {
    "database()": "database", "schema()": "database", "connection_id()": "connection_id",
    "last_insert_id()": "last_insert_id", "user()": "user", "current_user()": "user",
    "current_user": "user", "session_user()": "user", "system_user()": "user",
    "@@version_comment": "version_comment", "@@session.version_comment": "version_comment",
    "@@identity": "last_insert_id", "@@last_insert_id": "last_insert_id",
    "@@warning_count": "warning_count", "@@session.warning_count": "warning_count",
    "@@error_count": "error_count", "@@session.error_count": "error_count",
    "@@in_transaction": "in_transaction", "@@session.in_transaction": "in_transaction",
}
# the integer probes' columns as MariaDB describes them (type, length, flags); a variable: BIGINT UNSIGNED NOT NULL
_INT_COLUMNS = {"connection_id()": (T_LONG, 10, 0xA1), "last_insert_id()": (T_LONGLONG, 21, 0xA1)}
_INT_VARIABLE = (T_LONGLONG, 21, 0xA0)
_LOCAL_SELECT = re.compile(r"^\s*SELECT\s+(?P<items>.+?)\s*(?:LIMIT\s+\d+\s*)?;?\s*$", re.I | re.S)
_ITEM = re.compile(r"^(?P<expr>[@\w.]+(?:\(\s*\))?)(?:\s+(?:AS\s+)?(?P<alias>`[^`]+`|'[^']+'|\"[^\"]+\"|\w+))?$",
                   re.I | re.S)


def local_select(sql: str, values: dict[str, object]) -> ResultSet | None:
    """Answer `SELECT DATABASE()`, `SELECT @@version_comment LIMIT 1` and friends from `values`, or None to
    route it (an item with no value given)."""
    if len(sql) > 1024 or " from " in sql.lower():
        return None  # probes are short and table-less; a 17 MB literal must not meet the regex below
    m = _LOCAL_SELECT.match(sql)
    if not m:
        return None
    cols: list[ColumnDef] = []
    row: list[bytes | None] = []
    for item in split_top_level(m.group("items")):
        im = _ITEM.match(item)
        if not im:
            return None
        expr = im.group("expr").lower().replace(" ", "")
        key = _LOCAL_FUNCS.get(expr)
        if key is None or key not in values:
            return None
        name = (im.group("alias") or im.group("expr")).strip("`'\"")
        v = values.get(key)
        if isinstance(v, int):
            typ, length, flags = _INT_COLUMNS.get(expr, _INT_VARIABLE)
            cols.append(ColumnDef(name, typ, 63, length, flags))
        else:
            cols.append(ColumnDef(name, T_VAR_STRING, 45, 256))
        row.append(None if v is None else str(v).encode())
    return ResultSet(cols, [row])


# -- BEGIN / START TRANSACTION, COMMIT / ROLLBACK ------------------------------------------------------
def _words(sql: str) -> list[str]:
    """A statement's tokens as MariaDB reads them, keywords upper-cased, without a trailing ';'."""
    return [t[1].upper() if t[0] == "w" else t[1] for t in tokenize(sql) if t[:2] != ("o", ";")]


@dataclass(frozen=True)
class TxnStart:
    """What BEGIN or START TRANSACTION asks of the transaction it opens."""

    access: str | None    # "READ ONLY" | "READ WRITE" | None (the session's)
    snapshot: bool        # WITH CONSISTENT SNAPSHOT


def parse_start(sql: str) -> TxnStart:
    """BEGIN [WORK] or START TRANSACTION [characteristic, ...]: its characteristics, as MariaDB reads them
    (1064 for anything else, READ ONLY with READ WRITE, or one named twice)."""
    words = _words(sql)   # version comments opened: /*!40100 WITH CONSISTENT SNAPSHOT */
    if words[:1] == ["BEGIN"] and words[1:] in ([], ["WORK"]):
        return TxnStart(None, False)
    if words[:2] != ["START", "TRANSACTION"]:
        raise ParseError(f"You have an error in your SQL syntax near '{sql.strip()[:40]}'")
    items = " ".join(words[2:]).split(" , ") if len(words) > 2 else []
    if any(i not in ("READ ONLY", "READ WRITE", "WITH CONSISTENT SNAPSHOT") for i in items) or len(set(items)) < len(
            items) or {"READ ONLY", "READ WRITE"} <= set(items):
        raise ParseError(f"You have an error in your SQL syntax near '{sql.strip()[:40]}'")
    access = next((i for i in items if i.startswith("READ ")), None)
    return TxnStart(access, "WITH CONSISTENT SNAPSHOT" in items)


def names_no_table(sql: str) -> bool:
    """Whether a SELECT, DO or SET names no table (no FROM), sequence or schema-qualified routine: MariaDB
    begins no transaction for it, so SET TRANSACTION's characteristics stay for the next one."""
    toks = tokenize(sql)
    for i, t in enumerate(toks):
        if t[0] in "he" or (t[0] == "w" and t[1].upper() in _TABLE_WORDS):
            return False
        if t[0] == "o" and t[1] == "." and i + 2 < len(toks) and toks[i + 2][1] == "(":   # schema.f(...)
            return False
    return True


# -- savepoints ------------------------------------------------------------------------------------
_SP_NAME = r"(`(?:[^`]|``)+`|[\w$]+)"
_SAVEPOINT = re.compile(rf"^\s*(?:SAVEPOINT\s+{_SP_NAME}|ROLLBACK\s+(?:WORK\s+)?TO\s+(?:SAVEPOINT\s+)?{_SP_NAME}"
                        rf"|RELEASE\s+SAVEPOINT\s+{_SP_NAME})\s*;?\s*$", re.I | re.S)


def parse_savepoint(sql: str) -> tuple[str, str] | None:
    """('SAVEPOINT' | 'ROLLBACK' | 'RELEASE', name) for the savepoint statements, else None."""
    m = _SAVEPOINT.match(sql)
    if not m:
        return None
    op = ("SAVEPOINT", "ROLLBACK", "RELEASE")[next(i for i in range(3) if m.group(i + 1) is not None)]
    name = next(g for g in m.groups() if g is not None)
    if name[0] == "`":
        name = name[1:-1].replace("``", "`")
    return op, name


def parse_end(sql: str) -> tuple[bool, bool]:
    """COMMIT | ROLLBACK [WORK] [AND [NO] CHAIN] [[NO] RELEASE]: (chain, release): whether a transaction
    begins again at once, whether the connection closes after the answer; MariaDB's 1064 for anything else."""
    rest = _words(sql)[1:]
    if rest[:1] == ["WORK"]:
        rest = rest[1:]
    chain = rest[:2] == ["AND", "CHAIN"]
    if chain or rest[:3] == ["AND", "NO", "CHAIN"]:
        rest = rest[2 if chain else 3:]
    release = rest[:1] == ["RELEASE"]
    if release or rest[:2] == ["NO", "RELEASE"]:
        rest = rest[1 if release else 2:]
    if rest or (chain and release):
        raise ParseError(f"You have an error in your SQL syntax near '{' '.join(rest or ['RELEASE'])[:40]}'")
    return chain, release


# -- DATABASE(), CONNECTION_ID() and USER() inside routed statements ---------------------------------
# words of a statement that may open a table (FROM), a sequence (NEXTVAL(s), NEXT VALUE FOR s)
_TABLE_WORDS = frozenset({"FROM", "NEXTVAL", "LASTVAL", "SETVAL", "NEXT", "PREVIOUS"})
# CURRENT_USER is also a function without parentheses (a keyword, never a bare column name)
_DB_CALL = re.compile(r"(?:database|schema|connection_id|user|row_count|found_rows)\s*\(|current_user", re.I)
_USER_CALLS = ("USER", "CURRENT_USER", "SESSION_USER", "SYSTEM_USER")
_ITEM_END = frozenset({",", ";", "FROM", "LIMIT", "ORDER", "WHERE", "GROUP", "HAVING", "UNION", "INTO", "FOR"})


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def calls_session_functions(sql: str, low: str | None = None) -> bool:
    """Whether a statement may call DATABASE()/SCHEMA()/CONNECTION_ID()/USER()..., which pydble answers;
    low: sql.lower() when the caller has it already (the fast path)."""
    low = sql.lower() if low is None else low
    return ("database" in low or "schema" in low or "connection_id" in low or "user" in low or "row_count" in low
            or "found_rows" in low) and _DB_CALL.search(sql) is not None


def substitute_database(sql: str, schema: str | None, conn_id: int | None = None, user: str | None = None,
                        row_count: int | None = None) -> str:
    """Replace DATABASE()/SCHEMA() with the logical schema name: a backend would answer 'db3'; and, when
    given, CONNECTION_ID() and USER()/CURRENT_USER()/... with the client's (a backend would answer its own
    thread and its own backend account), and ROW_COUNT() with the session's. A backend connection's
    ROW_COUNT() or FOUND_ROWS() speaks of whatever ran on it last, maybe another session's statement:
    without the session's value, 1235."""
    if not calls_session_functions(sql):
        return sql
    toks = tokenize(sql)
    # each value in an IF whose branch never taken is the call itself: the column is typed as MariaDB
    # types the call (VARCHAR of the connection's charset, its length, nullable), not as a literal
    lits = {"DATABASE": f"IF(TRUE, {'NULL' if schema is None else _literal(schema)}, DATABASE())"}
    lits["SCHEMA"] = lits["DATABASE"]
    if conn_id is not None:
        # typed as MariaDB types CONNECTION_ID() (INT UNSIGNED, length 10, NOT NULL), the way ROW_COUNT() is
        lits["CONNECTION_ID"] = f"IF(TRUE, CAST({int(conn_id)} AS UNSIGNED), CRC32(''))"
    if user is not None:
        lits.update({call: f"IF(TRUE, {_literal(user)}, {call}())" for call in _USER_CALLS})
    if row_count is not None:
        # typed as MariaDB types ROW_COUNT() (BIGINT, length 21, NOT NULL): a bare literal would be INT of
        # its own length; the branch never taken carries the type and is a constant
        lits["ROW_COUNT"] = f"IF(TRUE, {int(row_count)}, 0 - 9223372036854775807)"
    for i, (kind, text, _, _) in enumerate(toks):
        up = text.upper() if kind == "w" else ""
        if (up in ("ROW_COUNT", "FOUND_ROWS") and up not in lits and i + 1 < len(toks) and toks[i + 1][1] == "("
                and (i == 0 or toks[i - 1][1] != ".")):
            raise NotSupported(f"{up}() is not supported by pydble here: it tells of the session's previous "
                               f"statement, which pydble "
                               + ("does not count the rows of (it may have run on several shardingNodes or "
                                  "another session's connection); run a SELECT COUNT(*) instead"
                                  if up == "FOUND_ROWS" else
                                  "did not see end with an answer it can count; read the affected rows of the "
                                  "statement's own answer instead"))
    # a select item holding a call is named after its text as written (`CONNECTION_ID() > 0`), not the values
    named = dict(select_aliases(sql, toks, lambda item: _holds_call(item, lits)))
    edits: list[tuple[int, int, str]] = [(at, at, alias) for at, alias in named.items()]
    depth = 0
    n = len(toks)
    for i, (kind, text, start, end) in enumerate(toks):
        if kind == "o" and text == "(":
            depth += 1
        elif kind == "o" and text == ")":
            depth -= 1
        after = _call_end(toks, i, lits)
        if after is not None:
            call_end = toks[after - 1][3]
            lit = rep = lits[text.upper()]
            prev = toks[i - 1][1].upper() if i else ""
            nxt = toks[after][1].upper() if after < n else ""
            if (depth == 0 and prev in ("SELECT", ",", "DISTINCT") and (nxt == "" or nxt in _ITEM_END)
                    and call_end not in named):
                name = sql[start:call_end].replace("`", "``")
                rep = f"{lit} AS `{name}`"   # the column keeps the name MySQL would give it
            edits.append((start, call_end, rep))
    if not edits:
        return sql
    out: list[str] = []
    last = 0
    for start, end, rep in sorted(edits):
        out.append(sql[last:start])
        out.append(rep)
        last = end
    out.append(sql[last:])
    return "".join(out)


def _call_end(toks: Sequence[Token], i: int, lits: dict[str, str]) -> int | None:
    """When toks[i] starts a call of one of the session functions pydble answers (`NAME()`, or CURRENT_USER
    alone, a keyword), the index of the token after it; else None."""
    if toks[i][0] != "w" or (up := toks[i][1].upper()) not in lits or (i and toks[i - 1][1] == "."):
        return None
    if i + 2 < len(toks) and toks[i + 1][1] == "(" and toks[i + 2][1] == ")":
        return i + 3
    if up == "CURRENT_USER" and not (i + 1 < len(toks) and toks[i + 1][1] == "("):
        return i + 1
    return None


def _holds_call(item: list[Token], lits: dict[str, str]) -> bool:
    return any(_call_end(item, i, lits) is not None for i in range(len(item)))


# -- SHOW DATABASES / SHOW [FULL] TABLES --------------------------------------------------------------
_SHOW_DATABASES = re.compile(r"^\s*SHOW\s+(?:DATABASES|SCHEMAS)(?:\s+LIKE\s+'(?P<like>[^']*)'"
                             r"|\s+WHERE\s+(?P<where>.+?))?\s*;?\s*$", re.I | re.S)
_SHOW_TABLES = re.compile(
    r"^\s*SHOW\s+(?P<full>FULL\s+)?TABLES(?:\s+(?:FROM|IN)\s+`?(?P<db>[\w$]+)`?)?"
    r"(?:\s+LIKE\s+'(?P<like>[^']*)'|\s+WHERE\s+(?P<where>.+?))?\s*;?\s*$", re.I | re.S)
_WHERE_TYPE = re.compile(r"^\s*`?Table_type`?\s*=\s*'(?P<t>[^']*)'\s*$", re.I)


def like_match(pattern: str, name: str) -> bool:
    """MySQL LIKE (case-insensitive, % and _, backslash escapes) on a name."""
    regex = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            regex.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        regex.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.fullmatch("".join(regex), name, re.I | re.S) is not None


# SHOW forms MariaDB answers from information_schema: reading a table, they start a fresh SHOW WARNINGS as a
# SELECT of a table does (SHOW CREATE DATABASE, GRANTS, PRIVILEGES, PROCESSLIST and the diagnostics do not)
_SHOW_OVER_TABLES = frozenset({"TABLES", "DATABASES", "SCHEMAS", "VARIABLES", "STATUS", "ENGINES", "COLLATION",
                               "CHARSET", "CHARACTER", "TABLE", "OPEN", "COLUMNS", "FIELDS", "INDEX", "INDEXES",
                               "KEYS", "TRIGGERS", "EVENTS", "PLUGINS"})
_SHOW_ROUTINE_KINDS = frozenset({"PROCEDURE", "FUNCTION", "PACKAGE"})
_SHOW_PREFIXES = frozenset({"FULL", "EXTENDED", "GLOBAL", "SESSION", "LOCAL", "STORAGE"})


def show_single_quoted(sql: str) -> str:
    """A SHOW statement with its "..." strings (LIKE "t%", WHERE Db = "s") written '...', as the SHOW forms
    pydble answers read them; MariaDB reads both alike unless ANSI_QUOTES (the caller's to check)."""
    if '"' not in sql:
        return sql
    edits = [(t[2], t[3], "'" + t[1][1:-1].replace('""', '"') + "'") for t in tokenize(sql)
             if t[0] == "s" and t[1][0] == '"' and "'" not in t[1]]
    return splice(sql, edits) if edits else sql


def show_reads_tables(sql: str) -> bool:
    """Whether MariaDB answers this SHOW by reading a table, which clears the last statement's warnings."""
    words = [t[1].upper() for t in tokenize(sql)[:6] if t[0] == "w"]
    i = 1
    while i < len(words) and words[i] in _SHOW_PREFIXES:
        i += 1
    if i >= len(words):
        return False
    if words[i] in _SHOW_ROUTINE_KINDS:
        return "STATUS" in words[i + 1:i + 3]
    return words[i] in _SHOW_OVER_TABLES


def show_databases(sql: str, schemas: list[str]) -> tuple[ResultSet, str | None] | None:
    """SHOW DATABASES lists the logical schemas the user may use; with the WHERE text left to judge."""
    m = _SHOW_DATABASES.match(sql)
    if not m:
        return None
    like = m.group("like")
    rows = [[s.encode()] for s in sorted(schemas) if like is None or like_match(like, s)]
    name = "Database" if like is None else f"Database ({like})"   # MariaDB's heading
    return ResultSet([ColumnDef(name, T_VAR_STRING, 45, 256, 1, schema="information_schema",
                                table="SCHEMATA", org_table="SCHEMATA", org_name="SCHEMA_NAME")], rows), m.group("where")


@dataclass(frozen=True)
class ShowTables:
    """A parsed SHOW [FULL] TABLES statement."""

    full: bool
    schema: str | None
    like: str | None
    table_type: str | None
    where: str | None = None    # any other WHERE: judged by a backend (proxy/session/show_where.py)


def parse_show_tables(sql: str) -> ShowTables | None:
    """Recognize SHOW [FULL] TABLES [FROM db] [LIKE ... | WHERE Table_type=...]."""
    m = _SHOW_TABLES.match(sql)
    if not m:
        return None
    ttype = where = None
    if m.group("where"):
        wm = _WHERE_TYPE.match(m.group("where"))
        if wm and m.group("full"):
            ttype = wm.group("t").upper()
        else:
            where = m.group("where")
    return ShowTables(bool(m.group("full")), m.group("db"), m.group("like"), ttype, where)


def show_tables_result(st: ShowTables, schema: str, tables: list[str], views: Sequence[str] = ()) -> ResultSet:
    """The answer to SHOW [FULL] TABLES from the proxy's own list of tables (and views)."""
    col = f"Tables_in_{schema}" + (f" ({st.like})" if st.like else "")
    # as MariaDB describes them: NOT NULL, NO_DEFAULT_VALUE; a name is VARCHAR(64 + 9) ('#mysql50#' prefixes)
    cols = [ColumnDef(col, T_VAR_STRING, 45, 292, 0x1001, schema="information_schema", table="TABLE_NAMES",
                      org_table="TABLE_NAMES", org_name="TABLE_NAME")]
    if st.full:
        cols.append(ColumnDef("Table_type", T_VAR_STRING, 45, 256, 0x1001, schema="information_schema",
                              table="TABLE_NAMES", org_table="TABLE_NAMES", org_name="TABLE_TYPE"))
    rows: list[list[bytes | None]] = []
    kinds = sorted([(t, "BASE TABLE") for t in set(tables) - set(views)] + [(v, "VIEW") for v in set(views)])
    for t, kind in kinds:
        if st.table_type in (None, kind) and (st.like is None or like_match(st.like, t)):
            rows.append([t.encode(), kind.encode()] if st.full else [t.encode()])
    return ResultSet(cols, rows)



# -- SHOW TABLE STATUS -----------------------------------------------------------------------------
_SHOW_STATUS = re.compile(
    r"^\s*SHOW\s+TABLE\s+STATUS(?:\s+(?:FROM|IN)\s+`?(?P<db>[\w$]+)`?)?(?:\s+LIKE\s+'(?P<like>[^']*)'"
    r"|\s+WHERE\s+(?P<where>.+?))?\s*;?\s*$", re.I | re.S)
_SUMMED = ("Rows", "Data_length", "Index_length", "Data_free")


def parse_show_table_status(sql: str) -> tuple[str | None, str | None, str | None] | None:
    """(schema, LIKE pattern, WHERE text) of SHOW TABLE STATUS [FROM db] [LIKE '...' | WHERE ...], else None."""
    m = _SHOW_STATUS.match(sql)
    if not m:
        return None
    return m.group("db"), m.group("like"), m.group("where")


_SHOW_TRIGGERS = re.compile(
    r"^\s*SHOW\s+TRIGGERS(?:\s+(?:FROM|IN)\s+`?(?P<db>[\w$]+)`?)?(?:\s+LIKE\s+'(?P<like>[^'\\]*)'"
    r"|\s+WHERE\s+(?P<where>.+?))?\s*;?\s*$", re.I | re.S)
# SHOW TRIGGERS' columns, as MariaDB builds them from information_schema.TRIGGERS
_TRIGGER_COLUMNS = (("TRIGGER_NAME", "Trigger"), ("EVENT_MANIPULATION", "Event"), ("EVENT_OBJECT_TABLE", "Table"),
                    ("ACTION_STATEMENT", "Statement"), ("ACTION_TIMING", "Timing"), ("CREATED", "Created"),
                    ("SQL_MODE", "sql_mode"), ("DEFINER", "Definer"), ("CHARACTER_SET_CLIENT", "character_set_client"),
                    ("COLLATION_CONNECTION", "collation_connection"), ("DATABASE_COLLATION", "Database Collation"))


def parse_show_triggers(sql: str) -> tuple[str | None, str | None, str | None] | None:
    """(schema, LIKE pattern, WHERE text) of SHOW TRIGGERS [FROM db] [LIKE '...' | WHERE ...], else None."""
    m = _SHOW_TRIGGERS.match(sql)
    return None if m is None else (m.group("db"), m.group("like"), m.group("where"))


def show_triggers_query(schema: str, like: str | None, where: str | None) -> str:
    """SHOW TRIGGERS as the information_schema.TRIGGERS query it stands for, so the logical schemas'
    triggers are told (or refused) in one place, never a node's physical database."""
    cols = ", ".join(f"{c} AS `{n}`" for c, n in _TRIGGER_COLUMNS)
    db = schema.replace("'", "''")
    q = (f"SELECT {cols} FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = '{db}'"
         + (f" AND EVENT_OBJECT_TABLE LIKE '{like}'" if like is not None else ""))
    return q if where is None else f"SELECT * FROM ({q}) AS `triggers` WHERE {where}"


def table_status_result(columns: list[ColumnDef], rows: dict[str, list[list[bytes | None]]]) -> ResultSet:
    """One row per logical table from its nodes' rows: a table on several nodes (sharding) shows
    the sum of Rows, Data_length, Index_length and Data_free, Avg_row_length from those, the highest
    Auto_increment; every other column as its first node shows it."""
    names = [c.name for c in columns]
    out: list[list[bytes | None]] = []
    for name in sorted(rows):
        parts = rows[name]
        row = list(parts[0])
        row[names.index("Name")] = name.encode()
        if len(parts) > 1:
            for col in _SUMMED:
                if col in names:
                    i = names.index(col)
                    row[i] = str(sum(int(p[i] or 0) for p in parts)).encode()
            if "Avg_row_length" in names and "Rows" in names and "Data_length" in names:
                n = int(row[names.index("Rows")] or 0)
                row[names.index("Avg_row_length")] = str(int(row[names.index("Data_length")] or 0) // n
                                                         if n else 0).encode()
            if "Auto_increment" in names:
                i = names.index("Auto_increment")
                ais = [int(p[i]) for p in parts if p[i] is not None]
                row[i] = str(max(ais)).encode() if ais else None
        out.append(row)
    return ResultSet(list(columns), out)


# -- SHOW forms MariaDB answers from information_schema: answered over the logical schemas ---------
_SHOWN_FROM_INFOSCHEMA = {   # SHOW ... -> (information_schema table, (column AS shown name)..., LIKE column)
    "ROUTINES": ("ROUTINES", (("ROUTINE_SCHEMA", "Db"), ("ROUTINE_NAME", "Name"), ("ROUTINE_TYPE", "Type"),
                              ("DEFINER", "Definer"), ("LAST_ALTERED", "Modified"), ("CREATED", "Created"),
                              ("SECURITY_TYPE", "Security_type"), ("ROUTINE_COMMENT", "Comment"),
                              ("CHARACTER_SET_CLIENT", "character_set_client"),
                              ("COLLATION_CONNECTION", "collation_connection"),
                              ("DATABASE_COLLATION", "Database Collation")), "Name"),
    "TRIGGERS": ("TRIGGERS", (("TRIGGER_NAME", "Trigger"), ("EVENT_MANIPULATION", "Event"),
                              ("EVENT_OBJECT_TABLE", "Table"), ("ACTION_STATEMENT", "Statement"),
                              ("ACTION_TIMING", "Timing"), ("CREATED", "Created"), ("SQL_MODE", "sql_mode"),
                              ("DEFINER", "Definer"), ("CHARACTER_SET_CLIENT", "character_set_client"),
                              ("COLLATION_CONNECTION", "collation_connection"),
                              ("DATABASE_COLLATION", "Database Collation")), "Table"),
    "EVENTS": ("EVENTS", (("EVENT_SCHEMA", "Db"), ("EVENT_NAME", "Name"), ("DEFINER", "Definer"),
                          ("TIME_ZONE", "Time zone"), ("EVENT_TYPE", "Type"), ("EXECUTE_AT", "Execute at"),
                          ("INTERVAL_VALUE", "Interval value"), ("INTERVAL_FIELD", "Interval field"),
                          ("STARTS", "Starts"), ("ENDS", "Ends"), ("STATUS", "Status"),
                          ("ORIGINATOR", "Originator"), ("CHARACTER_SET_CLIENT", "character_set_client"),
                          ("COLLATION_CONNECTION", "collation_connection"),
                          ("DATABASE_COLLATION", "Database Collation")), "Name"),
}
_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_SHOW_ROUTINES = re.compile(r"^\s*SHOW\s+(?P<kind>FUNCTION|PROCEDURE|PACKAGE(?:\s+BODY)?)\s+STATUS"
                            r"(?P<rest>.*?)\s*;?\s*$", re.I | re.S)
_SHOW_OF_SCHEMA = re.compile(rf"^\s*SHOW\s+(?P<kind>TRIGGERS|EVENTS)(?:\s+(?:FROM|IN)\s+(?P<db>{_IDENT}))?"
                             r"(?P<rest>.*?)\s*;?\s*$", re.I | re.S)
_SHOW_FILTER = re.compile(r"^(?:\s+LIKE\s+(?P<like>'(?:[^'\\]|\\.|'')*')|\s+WHERE\s+(?P<where>.+))?$", re.I | re.S)
_SHOW_CREATE_DB = re.compile(rf"^\s*SHOW\s+CREATE\s+(?:DATABASE|SCHEMA)\s+(?P<ine>IF\s+NOT\s+EXISTS\s+)?"
                             rf"(?P<db>{_IDENT})\s*;?\s*$", re.I | re.S)


@dataclass(frozen=True)
class ShowOverInfoSchema:
    """A SHOW answered by a SELECT over information_schema; schema: the one it is about (None: every
    schema the user has, or the current one when `current` is set)."""

    select: str
    schema: str | None
    current: bool

    def sql_for(self, schema: str | None) -> str:
        """The SELECT about that schema."""
        return self.select.replace("{schema}", _literal(schema)) if schema else self.select


def show_over_infoschema(sql: str) -> ShowOverInfoSchema | None:
    """SHOW {FUNCTION|PROCEDURE|PACKAGE [BODY]} STATUS, SHOW {TRIGGERS|EVENTS} [FROM db], SHOW CREATE DATABASE db as the
    SELECT MariaDB answers them by (mysqldump --routines/--events, HeidiSQL, Workbench send them), else None."""
    m = _SHOW_CREATE_DB.match(sql)
    if m is not None:
        ine = "/*!32312 IF NOT EXISTS*/ " if m.group("ine") else ""
        return ShowOverInfoSchema(
            "SELECT SCHEMA_NAME AS `Database`, CONCAT('CREATE DATABASE " + ine + "`', REPLACE(SCHEMA_NAME, '`', "
            "'``'), '` /*!40100 DEFAULT CHARACTER SET ', DEFAULT_CHARACTER_SET_NAME, ' COLLATE ', "
            "DEFAULT_COLLATION_NAME, ' */', IF(SCHEMA_COMMENT = '', '', CONCAT(' COMMENT ', QUOTE(SCHEMA_COMMENT))))"
            " AS `Create Database` FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = {schema}",
            unquote_ident(m.group("db")), False)
    m = _SHOW_ROUTINES.match(sql)
    if m is not None:
        key, db, where = "ROUTINES", None, f"ROUTINE_TYPE = '{' '.join(m.group('kind').upper().split())}'"
    else:
        m = _SHOW_OF_SCHEMA.match(sql)
        if m is None:
            return None
        key = m.group("kind").upper()
        db = unquote_ident(m.group("db")) if m.group("db") else None
        where = ("EVENT_OBJECT_SCHEMA" if key == "TRIGGERS" else "EVENT_SCHEMA") + " = {schema}"
    f = _SHOW_FILTER.match(m.group("rest"))
    if f is None:
        return None
    table, columns, like_column = _SHOWN_FROM_INFOSCHEMA[key]
    shown = ", ".join(f"{c} AS `{name}`" for c, name in columns)
    inner = f"SELECT {shown} FROM information_schema.{table} WHERE {where}"
    outer = (f" WHERE `{like_column}` LIKE {f.group('like')}" if f.group("like")
             else f" WHERE {f.group('where')}" if f.group("where") else "")
    return ShowOverInfoSchema(f"SELECT * FROM ({inner}) AS shown{outer}", db, key != "ROUTINES")


# -- CREATE DATABASE IF NOT EXISTS (dumps made with --databases) ----------------------------------
def create_database_if_not_exists(sql: str) -> str | None:
    """The name in CREATE {DATABASE|SCHEMA} IF NOT EXISTS name [options], else None."""
    toks = tokenize(sql)
    words = [t[1].upper() for t in toks[:5]]
    if len(toks) < 6 or words[0] != "CREATE" or words[1] not in ("DATABASE", "SCHEMA") or \
            words[2:5] != ["IF", "NOT", "EXISTS"] or toks[5][0] not in "wq":
        return None
    return unquote_ident(toks[5][1])
# -- pydble's own users and sessions: SHOW GRANTS, SHOW PROCESSLIST, KILL -----------------------------
_SHOW_GRANTS = re.compile(r"^\s*SHOW\s+GRANTS(?:\s+FOR\s+(?P<who>.+?))?\s*;?\s*$", re.I | re.S)
_KILL = re.compile(r"^\s*KILL\s+(?:(?P<what>CONNECTION|QUERY)\s+)?(?P<id>[0-9]+)\s*;?\s*$", re.I)
_PRIV_NAMES = ("INSERT", "UPDATE", "SELECT", "DELETE")   # DBLE's dml bit order


def parse_show_grants(sql: str) -> str | None:
    """SHOW GRANTS [FOR user]: the user named ('' for the current one), or None if not that statement."""
    m = _SHOW_GRANTS.match(sql)
    if not m:
        return None
    who = (m.group("who") or "").strip()
    if who.upper().replace(" ", "") in ("", "CURRENT_USER", "CURRENT_USER()"):
        return ""
    return who.split("@", 1)[0].strip("'\"` ")


def _granted(bits: str, read_only: bool) -> str:
    names = [n for n, b in zip(_PRIV_NAMES, bits) if b == "1" and (n == "SELECT" or not read_only)]
    if len(names) == 4:
        return "ALL PRIVILEGES"
    order = ("SELECT", "INSERT", "UPDATE", "DELETE")   # as MySQL lists them
    return ", ".join(sorted(names, key=order.index))


def show_grants(user: str, schemas: tuple[str, ...], privileges: dict[str, str], read_only: bool) -> ResultSet:
    """pydble's grants of a client user, in MariaDB's ``GRANT ... ON `db`.* TO `u`@`%` `` form."""
    quoted = user.replace("`", "``")
    to = f"TO `{quoted}`@`%`"
    lines = [f"GRANT USAGE ON *.* {to}"]
    for s in schemas:
        what = _granted(privileges.get(s, "1111"), read_only)
        if what:
            lines.append(f"GRANT {what} ON `{s}`.* {to}")
        for key, bits in privileges.items():
            if key.startswith(s + "."):
                what = _granted(bits, read_only)
                lines.append(f"GRANT {what or 'USAGE'} ON `{s}`.`{key[len(s) + 1:]}` {to}")
    return ResultSet([ColumnDef(f"Grants for {user}@%", T_VAR_STRING, 45, 1024, 1)], [[x.encode()] for x in lines])


def parse_kill(sql: str) -> tuple[bool, int] | None:
    """KILL [CONNECTION | QUERY] id: (query only?, id), or None if malformed."""
    m = _KILL.match(sql)
    if not m:
        return None
    return (m.group("what") or "").upper() == "QUERY", int(m.group("id"))


PROCESSLIST_COLUMNS = ("Id", "User", "Host", "db", "Command", "Time", "State", "Info")
# information_schema.PROCESSLIST on MariaDB: the SHOW columns, then its own (no thread, stage, memory
# or row counts exist in pydble: 0; INFO_BINARY is INFO's bytes).
PROCESSLIST_TABLE_COLUMNS = tuple(c.upper() for c in PROCESSLIST_COLUMNS) + (
    "TIME_MS", "STAGE", "MAX_STAGE", "PROGRESS", "MEMORY_USED", "MAX_MEMORY_USED", "EXAMINED_ROWS", "QUERY_ID",
    "INFO_BINARY", "TID")
_NOT_BMP = re.compile("[\U00010000-\U0010FFFF]")


def _visible(sessions: Iterable[Any], viewer: str, see_all: bool) -> list[Any]:
    """The logged-in sessions a viewer may see (its own only unless see_all), by connection id."""
    return sorted((s for s in sessions if s.user and (see_all or s.user == viewer)), key=lambda x: x.conn_id)


def _processlist_row(s: Any, full: bool, now: float) -> list[bytes | None]:
    peer = s.client.transport.get_extra_info("peername") if s.client.transport is not None else None
    host = f"{peer[0]}:{peer[1]}" if peer else s.peer
    info = s.info if s.command == "Query" else None
    if info is not None and not full:
        info = info[:100]
    return [str(s.conn_id).encode(), s.user.encode(), host.encode(),
            s.schema.encode() if s.schema else None, s.command.encode(),
            str(int(now - s.since)).encode(), b"executing" if info is not None else b"",
            info.encode("utf-8", "surrogateescape") if info is not None else None]


def processlist_rows(sessions: Iterable[Any], viewer: str, see_all: bool, full: bool,
                     now: float) -> list[list[bytes | None]]:
    """pydble's client sessions as MySQL's processlist rows (the viewer's own only unless see_all):
    for SHOW [FULL] PROCESSLIST, with MariaDB's Progress (no statement of pydble reports any: 0)."""
    return [_processlist_row(s, full, now) + [b"0.000"] for s in _visible(sessions, viewer, see_all)]


def processlist_table_rows(sessions: Iterable[Any], viewer: str, see_all: bool,
                           now: float) -> list[list[bytes | None]]:
    """The same sessions as information_schema.PROCESSLIST rows (PROCESSLIST_TABLE_COLUMNS): INFO in
    full, with a character utf8mb3 (its column's charset) cannot hold as '????' as MariaDB shows it."""
    rows: list[list[bytes | None]] = []
    for s in _visible(sessions, viewer, see_all):
        row = _processlist_row(s, True, now)
        raw = row[7]
        if raw is not None:
            row[7] = _NOT_BMP.sub("????", raw.decode("utf-8", "replace")).encode()
        rows.append(row + [f"{(now - s.since) * 1000:.3f}".encode(), b"0", b"0", b"0.000", b"0", b"0", b"0", b"0",
                           raw, b"0"])
    return rows


def show_processlist(rows: list[list[bytes | None]], full: bool) -> ResultSet:
    """The result set of SHOW [FULL] PROCESSLIST, typed as MariaDB types it (Time INT, FULL's Info a LONGTEXT,
    Progress DOUBLE(7,3))."""
    cols = [ColumnDef(name, T_LONGLONG, 63, 21, NOT_NULL_FLAG) if name == "Id"
            else ColumnDef(name, T_LONG, 63, 7, NOT_NULL_FLAG | BINARY_FLAG) if name == "Time"
            else ColumnDef(name, T_LONG_BLOB, 45, 805306368) if name == "Info" and full
            else ColumnDef(name, T_VAR_STRING, 45, 256, NOT_NULL_FLAG if name == "User" else 0)
            for name in PROCESSLIST_COLUMNS]
    cols.append(ColumnDef("Progress", T_DOUBLE, 63, 7, NOT_NULL_FLAG | BINARY_FLAG, 3))
    return ResultSet(cols, rows)
