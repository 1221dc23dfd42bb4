"""SQL-level prepared statements: PREPARE name FROM ..., EXECUTE name [USING ...], DEALLOCATE / DROP PREPARE.

They live beside the binary ones (proxy/session/prepared.py) and use the same machinery: PREPARE learns the
statement's shape (placeholders, validated on a backend as MariaDB validates it), EXECUTE writes the
values in as literals and runs the text like any statement, so a bound sharding key routes each
execution. The values must be the ones MariaDB would bind: a literal is read here; a user variable is
read from the `SET @v = ...` the session recorded (a literal) or, for a constant expression, asked of a
backend connection that replayed it; anything whose value could differ (NOW(), RAND(), another
variable, a variable never SET in the session) is refused (1235) rather than guessed.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from meta.errors import BackendError, NotSupported, ParseError, ProxyError, syntax_error

from proxy.session.prepared import Statement
from proxy.wire import constants as C
from proxy.wire.messages import ColumnDef
from proxy.plan.sqltok import Token, first_keyword, hex_value, tokenize, top_level, unquote_ident, unquote_string

if TYPE_CHECKING:
    from proxy.wire.reply import Reply
    from proxy.runtime import SessionPort

WORDS = frozenset({"PREPARE", "EXECUTE", "DEALLOCATE"})
_NESTED = frozenset({"PREPARE", "EXECUTE", "DEALLOCATE"})
# Words a constant expression may use: its value is the same on every connection, at any time.
_CONSTANT_WORDS = frozenset({
    "NULL", "TRUE", "FALSE", "DIV", "MOD", "AND", "OR", "XOR", "NOT", "IS", "IN", "BETWEEN", "LIKE", "COLLATE",
    "BINARY", "AS", "CAST", "CONVERT", "USING", "CONCAT", "CONCAT_WS", "CHAR", "SIGNED", "UNSIGNED", "INTEGER",
    "INT", "DECIMAL", "DOUBLE", "FLOAT", "UPPER", "LOWER", "UCASE", "LCASE", "ABS", "ROUND", "FLOOR", "CEIL",
    "CEILING", "HEX", "UNHEX", "LENGTH", "CHAR_LENGTH", "SUBSTRING", "SUBSTR", "LEFT", "RIGHT", "REPEAT",
    "REPLACE", "TRIM", "LTRIM", "RTRIM", "LPAD", "RPAD", "COALESCE", "IFNULL", "IF", "NULLIF", "CASE", "WHEN",
    "THEN", "ELSE", "END", "GREATEST", "LEAST", "REVERSE", "POW", "POWER", "SQRT", "MD5", "SHA1", "SHA2", "CRC32",
})


def is_statement(kw: str, sql: str) -> bool:
    """PREPARE, EXECUTE, DEALLOCATE PREPARE or DROP PREPARE."""
    if kw in WORDS:
        return True
    if kw != "DROP":
        return False
    toks = tokenize(sql[:200])
    return len(toks) > 1 and toks[1][0] == "w" and toks[1][1].upper() == "PREPARE"


def _name(toks: list[Token], i: int, sql: str) -> tuple[str, str]:
    """(the statement name as given, its key: names are case-insensitive)."""
    if i >= len(toks) or toks[i][0] not in "wq":
        raise syntax_error(sql, toks[i][2] if i < len(toks) else None)
    name = unquote_ident(toks[i][1])
    return name, name.lower()


def _literal(toks: list[Token], backslashes: bool) -> tuple[bool, object]:
    """(True, value) when the tokens are one literal (a signed number, string, hex, NULL, TRUE/FALSE)."""
    sign = 1
    if len(toks) == 2 and toks[0][0] == "o" and toks[0][1] in "+-" and toks[1][0] == "n":
        sign = -1 if toks[0][1] == "-" else 1
        toks = toks[1:]
    if len(toks) != 1:
        return False, None
    kind, text = toks[0][0], toks[0][1]
    if kind == "n":
        try:
            if text.isdigit():
                return True, sign * int(text)
            if "e" in text.lower():
                return True, sign * float(text)
            return True, sign * Decimal(text)
        except (ValueError, InvalidOperation):
            return False, None
    if sign != 1:
        return False, None
    if kind == "s":
        if not backslashes and "\\" in text:
            return False, None  # NO_BACKSLASH_ESCAPES: the backend reads it, not unquote_string
        return True, unquote_string(text)
    if kind == "x":
        return True, hex_value(text)
    if kind == "w" and text.upper() in ("NULL", "TRUE", "FALSE"):
        return True, {"NULL": None, "TRUE": 1, "FALSE": 0}[text.upper()]
    return False, None


def _constant(toks: list[Token]) -> bool:
    """Literals, operators and deterministic functions only: the same value on any connection, any time."""
    after_collate = False
    for kind, text, _, _ in toks:
        if kind in "nsxo":
            pass
        elif kind == "w":
            up = text.upper()
            if not (up in _CONSTANT_WORDS or up.startswith("_") or after_collate):
                return False
        else:
            return False
        after_collate = kind == "w" and text.upper() == "COLLATE"
    return True


def _typed(col: ColumnDef, raw: bytes | None) -> object:
    """A value from a text result as the Python value the binary protocol would carry."""
    if raw is None or col.type == C.T_NULL:
        return None
    if col.type in C.INTEGER_TYPES:
        return int(raw)
    if col.type in C.DECIMAL_TYPES:
        return Decimal(raw.decode())
    if col.type in C.FLOAT_TYPES:
        return float(raw)  # MariaDB prints a DOUBLE with the digits that read back to the same value
    if col.charset == C.CHARSET_BINARY:
        return bytes(raw)
    return bytes(raw).decode("utf-8", "surrogateescape")  # the session's own bytes, written back as they came


class _Values:
    """Evaluates EXECUTE's USING items and PREPARE's FROM item exactly, or refuses."""

    def __init__(self, session: SessionPort) -> None:
        self.session = session
        self.backslashes = "NO_BACKSLASH_ESCAPES" not in session.vars.get("sql_mode", "").upper()

    async def of(self, items: list[tuple[str, list[Token]]]) -> list[object]:
        """The values of the items (text, tokens): literals here, the rest in one backend round trip."""
        out: list[object] = [None] * len(items)
        remote: list[tuple[int, str]] = []
        for i, (text, toks) in enumerate(items):
            if len(toks) == 1 and toks[0][0] == "v" and not toks[0][1].startswith("@@"):
                ok, value, expr = self._variable(toks[0][1])
                if ok:
                    out[i] = value
                else:
                    remote.append((i, expr))
                continue
            ok, value = _literal(toks, self.backslashes)
            if ok:
                out[i] = value
                continue
            if any(t[0] == "w" and t[1].upper() in ("SELECT", "WITH") for t in toks):
                raise ProxyError("EXECUTE..USING does not support subqueries or stored functions", 1970, "42000")
            if not toks or not _constant(toks):
                raise NotSupported(f"EXECUTE ... USING {text[:60]}: pydble writes the values into the statement "
                                   f"and can only do so exactly for literals, user variables and constant "
                                   f"expressions")
            remote.append((i, text))
        if remote:
            for (i, _), value in zip(remote, await self._ask([e for _, e in remote])):
                out[i] = value
        return out

    def _variable(self, token: str) -> tuple[bool, object, str]:
        """(known here, value, what to ask a backend) for @name, from the SET the session recorded."""
        key = var_key(token)
        recorded = self.session.vars.get(key)
        if key in self.session.prepared.assigned:
            raise NotSupported(f"the value of {token} is not known to pydble: a statement assigned it with := (or "
                               f"CALL), on one backend connection only; SET {token} = ... before EXECUTE ... "
                               f"USING it")
        if recorded is None:  # never SET here; a `:=` inside a statement may have set it on one backend connection
            raise NotSupported(f"the value of {token} is not known to pydble: it tracks user variables set with "
                               f"SET only (an assignment with := inside a statement stays on one backend "
                               f"connection); SET {token} = ... before EXECUTE ... USING it")
        expr = recorded.split(" = ", 1)[1] if " = " in recorded else ""
        toks = tokenize(expr)
        ok, value = _literal(toks, self.backslashes)
        if ok:
            return True, value, ""
        if not toks or not _constant(toks):
            raise NotSupported(f"the value of {token} cannot be known exactly: pydble replays `SET {token} = "
                               f"{expr[:60]}` on each backend connection, and that expression is not constant; "
                               f"assign the variable a literal before EXECUTE ... USING it")
        return False, None, token  # the backend's own assignment rules (a DECIMAL keeps its scale)

    async def _ask(self, exprs: list[str]) -> list[object]:
        """SELECT the expressions on a connection in the session's state (the session's variables replayed)."""
        s = self.session
        ex = s.executor
        node = next(iter(ex.pinned), None) or s.runtime.any_node(s.schema)
        sc = (await ex._run_on([(node, "SELECT " + ", ".join(exprs))]))[0]
        if sc.error is not None:
            raise BackendError(sc.error.message, sc.error.code, sc.error.sqlstate)
        rs = sc.results[0]
        return [_typed(col, raw) for col, raw in zip(rs.columns, rs.rows[0])]


def var_key(token: str) -> str:
    """The session's key of a user variable token (@a, @`a`, @'a'): names are case-insensitive."""
    name = token[1:]
    if name[:1] in "`'\"":
        name = name[1:-1]
    return "@" + name.lower()


def note_assignments(session: SessionPort, sql: str, kw: str) -> None:
    """Variables a CALL may assign (its OUT parameters) on one backend connection: their recorded SET no
    longer tells their value. (`@a := ...` inside a statement is refused before it runs: user_locks.)"""
    if kw != "CALL":
        return
    for t in tokenize(sql):
        if t[0] == "v" and not t[1].startswith("@@"):
            session.prepared.assigned.add(var_key(t[1]))


def _split_items(sql: str, toks: list[Token]) -> list[tuple[str, list[Token]]]:
    """Top-level comma-separated items: (text, tokens)."""
    items: list[tuple[str, list[Token]]] = []
    start = 0
    for i in [i for i in top_level(toks) if toks[i][0] == "o" and toks[i][1] == ","] + [len(toks)]:
        cur = toks[start:i]
        if not cur:
            raise syntax_error(sql, toks[i][2] if i < len(toks) else None)
        items.append((sql[cur[0][2]:cur[-1][3]], cur))
        start = i + 1
    return items


async def run(session: SessionPort, sql: str, r: Reply, more: bool, may_relay: bool) -> bool:
    """Answer one PREPARE / EXECUTE / DEALLOCATE PREPARE / DROP PREPARE; True if relayed."""
    toks = tokenize(sql)
    while toks and toks[-1][0] == "o" and toks[-1][1] == ";":
        toks.pop()
    word = toks[0][1].upper()
    pre = session.prepared
    if word in ("DEALLOCATE", "DROP"):
        if len(toks) != 3 or toks[1][1].upper() != "PREPARE":
            raise syntax_error(sql, toks[1][2] if len(toks) > 1 else None)
        name, key = _name(toks, 2, sql)
        if pre.named.pop(key, None) is None:
            raise ProxyError(f"Unknown prepared statement handler ({name}) given to DEALLOCATE PREPARE", 1243, "HY000")
        r.ok(session.status(), more=more)
        return False
    if (word == "EXECUTE" and len(toks) > 2 and toks[1][0] == "w" and toks[1][1].upper() == "IMMEDIATE"
            and not (toks[2][0] == "w" and toks[2][1].upper() == "USING")):
        raise NotSupported("EXECUTE IMMEDIATE is not supported by pydble: PREPARE the statement, then EXECUTE it")
    name, key = _name(toks, 1, sql)
    if word == "PREPARE":
        if len(toks) < 4 or not (toks[2][0] == "w" and toks[2][1].upper() == "FROM"):
            raise syntax_error(sql, toks[2][2] if len(toks) > 2 else None)
        await prepare(session, key, await _statement_text(session, sql, toks[3:]))
        r.ok(session.status(), info=b"Statement prepared", more=more)
        return False
    stmt = pre.named.get(key)
    if stmt is None:
        raise ProxyError(f"Unknown prepared statement handler ({name}) given to EXECUTE", 1243, "HY000")
    items: list[tuple[str, list[Token]]] = []
    if len(toks) > 2:
        if not (toks[2][0] == "w" and toks[2][1].upper() == "USING") or len(toks) == 3:
            raise syntax_error(sql, toks[2][2])
        items = _split_items(sql, toks[3:])
    if len(items) != stmt.params:
        raise ProxyError("Incorrect arguments to EXECUTE", 1210, "HY000")
    if any(len(t) == 1 and t[0][0] == "w" and t[0][1].upper() in ("DEFAULT", "IGNORE") for _, t in items):
        raise NotSupported("EXECUTE ... USING DEFAULT/IGNORE is not supported by pydble: the value depends on "
                           "where the parameter stands in the statement")
    values = await _Values(session).of(items)
    text = pre.bound_text(stmt.shape, values, "EXECUTE")
    return await session.statement(text, r, more=more, may_relay=may_relay)


async def _statement_text(session: SessionPort, sql: str, toks: list[Token]) -> str:
    """PREPARE's FROM item: a string literal (adjacent ones concatenated, as MariaDB reads them), a user
    variable or a constant expression, whose value must be a string."""
    backslashes = "NO_BACKSLASH_ESCAPES" not in session.vars.get("sql_mode", "").upper()
    if all(t[0] == "s" for t in toks) and (backslashes or not any("\\" in t[1] for t in toks)):
        value: object = "".join(unquote_string(t[1]) for t in toks)
    else:
        text = sql[toks[0][2]:toks[-1][3]]
        value = (await _Values(session).of([(text, toks)]))[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", "surrogateescape")
    if not isinstance(value, str):
        shown = "NULL" if value is None else str(value)
        raise ParseError("You have an error in your SQL syntax; check the manual that corresponds to your MariaDB "
                         f"server version for the right syntax to use near '{shown}' at line 1")
    return value


async def prepare(session: SessionPort, key: str, text: str) -> None:
    """Register `text` under `key`, as MariaDB does: an existing statement of that name is dropped first,
    so a failed PREPARE leaves none."""
    pre = session.prepared
    pre.named.pop(key, None)
    toks = tokenize(text)
    while toks and toks[-1][0] == "o" and toks[-1][1] == ";":
        toks.pop()
    if not toks:
        raise ProxyError("Query was empty", 1065, "42000")
    for i, t in enumerate(toks):
        if t[0] == "o" and t[1] == ";":
            raise syntax_error(text, toks[i + 1][2])
    kw = first_keyword(text)
    if kw in _NESTED or (kw == "DROP" and is_statement(kw, text)):
        raise ProxyError("This command is not supported in the prepared statement protocol yet", 1295, "HY000")
    pre.check_room()
    shape = await pre.shape_of(text[:toks[-1][3]])
    pre.named[key] = Statement(0, shape)


__all__ = ["WORDS", "is_statement", "note_assignments", "prepare", "run", "var_key"]
