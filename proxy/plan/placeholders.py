"""Where a `?` written as a literal would change the statement's meaning, and how pydble keeps it.

- Column names: MariaDB names an unaliased select item after the text as prepared (`? + 1`, not
  `5 + 1`; a bare `?` is `?`, where the literal 'a' would be named `a`), so such items get an alias
  naming them as MariaDB would. Only items that certainly have no alias get one (a missed alias would
  be a syntax error): when the end of an item could be an alias, it is left alone.
- A `?` standing alone as an ORDER BY / GROUP BY item is a constant for MariaDB, but the integer
  written there would be a column position: refused.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.plan.sqltok import Token

_ENDS_ITEM = frozenset({"FROM", "INTO", "WHERE", "GROUP", "HAVING", "WINDOW", "ORDER", "LIMIT", "UNION",
                        "EXCEPT", "INTERSECT", "FOR", "LOCK", "PROCEDURE", "RETURNING"})
_MODIFIERS = frozenset({"ALL", "DISTINCT", "DISTINCTROW", "HIGH_PRIORITY", "STRAIGHT_JOIN", "SQL_SMALL_RESULT",
                        "SQL_BIG_RESULT", "SQL_BUFFER_RESULT", "SQL_CACHE", "SQL_NO_CACHE", "SQL_CALC_FOUND_ROWS"})
_NOT_ALIAS = frozenset({"END", "NULL", "TRUE", "FALSE", "UNKNOWN"})  # words that end an expression
# words after which a string is an operand, never an alias (`x LIKE 'a%'`)
_BEFORE_OPERAND = frozenset({"LIKE", "ESCAPE", "REGEXP", "RLIKE", "AND", "OR", "XOR", "NOT", "DIV", "MOD", "IS",
                             "THEN", "ELSE", "WHEN", "INTERVAL", "BINARY"})
MAX_NAME = 200


def _alias_free(item: list[Token]) -> bool:
    """True when the item certainly has no alias (explicit or implicit)."""
    depth = 0
    for kind, text, _, _ in item:
        if kind == "o" and text == "(":
            depth += 1
        elif kind == "o" and text == ")":
            depth -= 1
        elif depth == 0 and kind == "w" and text.upper() == "AS":
            return False
    last = item[-1]
    if last[0] == "s" and len(item) > 1:
        before = item[-2]
        return (before[0] == "o" and before[1] != ")") or (before[0] == "w" and before[1].upper() in _BEFORE_OPERAND)
    if last[0] == "q" and len(item) > 1:
        return False
    if last[0] == "w" and len(item) > 1 and last[1].upper() not in _NOT_ALIAS:
        return False
    return True


def _name(sql: str, item: list[Token]) -> str:
    """The item's text as MariaDB names it: as written; parentheses around a lone `?` or literal dropped
    (`(?)` is `?`, `(? + 1)` stays `(? + 1)`)."""
    inner = item
    while len(inner) > 2 and inner[0][1] == "(" and inner[-1][1] == ")" and inner[0][0] == "o" and _wraps(inner):
        inner = inner[1:-1]
    named = inner if len(inner) == 1 else item
    return sql[named[0][2]:named[-1][3]]


def _wraps(item: list[Token]) -> bool:
    depth = 0
    for i, t in enumerate(item):
        if t[0] == "o" and t[1] == "(":
            depth += 1
        elif t[0] == "o" and t[1] == ")":
            depth -= 1
            if depth == 0 and i != len(item) - 1:
                return False
    return True


def _holds_placeholder(item: list[Token]) -> bool:
    return any(x[0] == "p" for x in item)


def select_aliases(sql: str, toks: list[Token],
                   wants: Callable[[list[Token]], bool] = _holds_placeholder) -> tuple[tuple[int, str], ...]:
    """(offset, " AS `name`") for each item of a SELECT's select list without an alias that `wants` a name
    (by default those holding a `?`): their text is about to change, the column's name must not."""
    if not toks or toks[0][0] != "w" or toks[0][1].upper() != "SELECT":
        return ()
    i = 1
    while i < len(toks) and toks[i][0] == "w" and toks[i][1].upper() in _MODIFIERS:
        i += 1
    out: list[tuple[int, str]] = []
    item: list[Token] = []
    depth = 0
    for t in toks[i:] + [("o", ",", -1, -1)]:
        kind, text = t[0], t[1]
        if depth == 0 and ((kind == "o" and text in (",", ";")) or (kind == "w" and text.upper() in _ENDS_ITEM)):
            if item and wants(item) and _alias_free(item):
                name = _name(sql, item)
                if len(name) <= MAX_NAME and "`" not in name:
                    out.append((item[-1][3], f" AS `{name}`"))
            if kind == "o" and text == ",":
                item = []
                if t[2] < 0:
                    break
                continue
            break
        if kind == "o" and text == "(":
            depth += 1
        elif kind == "o" and text == ")":
            depth -= 1
        item.append(t)
    return tuple(out)


_CLAUSE_WORDS = frozenset({"SELECT", "FROM", "WHERE", "HAVING", "LIMIT", "ON", "SET", "VALUES", "VALUE", "BY",
                           "WINDOW", "UNION", "RETURNING", "USING", "PARTITION"})
_ITEM_END = frozenset({"ASC", "DESC", "LIMIT", "HAVING", "WINDOW", "ORDER", "UNION", "WITH", "FOR", "LOCK", "INTO"})


def positional_placeholder(toks: list[Token]) -> bool:
    """True when a `?` is a whole ORDER BY / GROUP BY item (a literal there would be a column position).

    One pass: for each parenthesis level, whether its last clause word is ORDER BY / GROUP BY (a statement
    with 65535 placeholders must not cost a walk back from each of them)."""
    frames: list[bool | None] = [None]  # per open parenthesis: in ORDER/GROUP BY (None: no clause word yet)
    for i, t in enumerate(toks):
        k = t[0]
        if k == "o" and t[1] == "(":
            frames.append(None)
            continue
        if k == "o" and t[1] == ")":
            if len(frames) > 1:
                frames.pop()
            else:
                frames[0] = None  # unmatched: nothing before it is at this item's level
            continue
        if k == "w":
            x = t[1].upper()
            if x in _CLAUSE_WORDS:
                frames[-1] = x == "BY" and i > 0 and toks[i - 1][1].upper() in ("ORDER", "GROUP")
            continue
        if k != "p" or not frames[-1]:
            continue
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if nxt is not None and not ((nxt[0] == "o" and nxt[1] in (",", ")", ";"))
                                    or (nxt[0] == "w" and nxt[1].upper() in _ITEM_END)):
            continue
        if i > 0 and (toks[i - 1][1] == "," or (toks[i - 1][0] == "w" and toks[i - 1][1].upper() == "BY")):
            return True
    return False


__all__ = ["positional_placeholder", "select_aliases"]
