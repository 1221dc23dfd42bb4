"""GET_LOCK and kin: a session's user locks live on one backend connection it holds until it ends.

MariaDB keeps user locks per connection and per server. Run on pooled connections, a lock would stay
on a connection given back to the pool (and be "held" by whichever session takes it next), and two
sessions in different schemas would ask different servers. So every session runs its lock functions
on one fixed shardingNode (the same for all sessions, so they contend as on one MySQL), on a
connection of its own that it keeps until the session ends or COM_RESET_CONNECTION, which release
the locks as MySQL does. IS_USED_LOCK names the pydble session holding the lock, as CONNECTION_ID()
does.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from meta.errors import BackendUnavailable, NotSupported

from proxy.plan.sqltok import first_keyword, tokenize

if TYPE_CHECKING:
    from proxy.backends.backend import BackendConnection
    from proxy.runtime import ExecContext
    from proxy.wire.reply import Reply
    from proxy.plan.plan import Plan

_MAYBE = re.compile(r"_lock", re.I)
FUNCTIONS = frozenset(("GET_LOCK", "RELEASE_LOCK", "RELEASE_ALL_LOCKS", "IS_FREE_LOCK", "IS_USED_LOCK"))


def calls(sql: str) -> frozenset[str]:
    """The user-lock functions a statement calls (a name followed by '(')."""
    if _MAYBE.search(sql) is None:   # no copy of a 16 MB INSERT just to look
        return frozenset()
    toks = tokenize(sql)
    return frozenset(t[1].upper() for t, nxt in zip(toks, toks[1:])
                     if t[0] == "w" and nxt[1] == "(" and nxt[0] == "o" and t[1].upper() in FUNCTIONS)


def _longest_wait(sql: str) -> float:
    """The seconds GET_LOCK(name, N) calls may wait, from their literal N (0 when not a literal or
    negative, 'forever': such a wait is bounded by backend_timeout_s, which ends the lock connection)."""
    toks = tokenize(sql)
    longest = 0.0
    for i, t in enumerate(toks):
        if t[0] == "w" and t[1].upper() == "GET_LOCK" and i + 5 < len(toks) and toks[i + 1][1] == "(":
            if toks[i + 3][1] == "," and toks[i + 4][0] == "n" and toks[i + 5][1] == ")":
                longest = max(longest, min(float(toks[i + 4][1]), 86400.0))
    return longest


def lock_node(executor: ExecContext) -> str:
    """The shardingNode every session runs its lock functions on: its server holds the lock namespace."""
    return min(executor.runtime.config.sharding_nodes)


def _is_used_columns(sql: str) -> list[int] | None:
    """The select-list positions that are exactly IS_USED_LOCK(...) [[AS] alias]; None when the function
    appears anywhere else (its value, a backend thread id, could not be mapped to a session)."""
    toks = tokenize(sql)
    if not toks or toks[0][1].upper() != "SELECT":
        return None
    items: list[list] = [[]]
    depth = 0
    for t in toks[1:]:
        if t[0] == "o" and t[1] == ";":
            break
        if t[0] == "o" and t[1] == "(":
            depth += 1
        elif t[0] == "o" and t[1] == ")":
            depth -= 1
        elif depth == 0 and t[0] == "w" and t[1].upper() in ("FROM", "WHERE", "INTO", "FOR", "LOCK"):
            break
        if depth == 0 and t[0] == "o" and t[1] == ",":
            items.append([])
        else:
            items[-1].append(t)
    found = []
    total = sum(1 for t in toks if t[0] == "w" and t[1].upper() == "IS_USED_LOCK")
    for i, item in enumerate(items):
        if item and item[0][1].upper() == "IS_USED_LOCK" and len(item) >= 3 and item[1][1] == "(":
            depth, end = 0, len(item)
            for j, t in enumerate(item[1:], 1):
                depth += {"(": 1, ")": -1}.get(t[1], 0) if t[0] == "o" else 0
                if depth == 0:
                    end = j + 1
                    break
            rest = item[end:]
            inner = sum(1 for t in item[1:end] if t[0] == "w" and t[1].upper() == "IS_USED_LOCK")
            if inner == 0 and (not rest or (len(rest) == 1 and rest[0][0] in "wqs")
                               or (len(rest) == 2 and rest[0][1].upper() == "AS")):
                found.append(i)
    return found if len(found) == total else None


class UserLocks:
    """The connection holding one session's user locks, and the running of its lock functions."""

    def __init__(self, executor: ExecContext) -> None:
        self.executor = executor
        self.node = ""
        self.conn: BackendConnection | None = None

    async def run(self, plan: Plan, sql: str, packet: bytes, r: Reply, more: bool) -> None:
        """Run a table-less statement calling lock functions on the session's lock connection."""
        if plan.tables or plan.hint or first_keyword(sql) not in ("SELECT", "DO"):
            raise NotSupported(ONLY_WITHOUT_TABLES)
        if any(t[0] == "w" and t[1].upper() == "INTO" for t in tokenize(sql)):
            raise NotSupported("SELECT ... INTO with a user-lock function is not supported by pydble: the variable "
                               "would be set on the lock connection only")
        mapped: list[int] = []
        if "IS_USED_LOCK" in calls(sql):
            cols = _is_used_columns(sql)
            if cols is None:
                raise NotSupported("IS_USED_LOCK is supported by pydble only as a whole select item: its value "
                                   "names a connection, which pydble maps to its own session id")
            mapped = cols
        ex = self.executor
        if self.conn is not None and self.conn.broken:
            self.drop()   # told once; the next lock function starts afresh
            raise BackendUnavailable(f"shardingNode[{self.node}]: the connection holding this session's user "
                                     f"locks (GET_LOCK) was lost: they were released")
        if self.conn is None:
            self.node = lock_node(ex)
            self.conn = await ex.runtime.backends.acquire(self.node, ex.session.format_flags)
        await ex.run_single(self.node, packet, r, more, False, conn=self.conn, rewrite=(
            (lambda rows: self._map_ids(rows, mapped)) if mapped else None),
            timeout=ex.runtime.backends.timeout_s + _longest_wait(sql))

    def _map_ids(self, rows: list, cols: list[int]) -> None:
        """IS_USED_LOCK's backend thread ids become the ids of the pydble sessions holding the locks."""
        owners = {}
        for s in self.executor.runtime.sessions:
            held = getattr(getattr(s, "executor", None), "user_locks", None)
            if held is not None and held.conn is not None and not held.conn.broken:
                owners[str(held.conn.thread_id).encode()] = str(s.conn_id).encode()
        for row in rows:
            for c in cols:
                if row[c] is not None:
                    row[c] = owners.get(bytes(row[c]), row[c])

    async def release(self) -> None:
        """COM_RESET_CONNECTION: the session's user locks are released; the connection goes back."""
        conn, self.conn = self.conn, None
        if conn is None:
            return
        ex = self.executor
        try:
            if not conn.broken:
                await conn.query("SELECT RELEASE_ALL_LOCKS()", ex.runtime.backends.timeout_s)
        except BaseException:  # noqa: BLE001 - a connection that may still hold locks is dropped
            conn.close()
        finally:
            ex.runtime.backends.release(self.node, conn)

    def drop(self) -> None:
        """The session is gone: closing the connection releases its locks on the server."""
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()
            self.executor.runtime.backends.release(self.node, conn)



def assigns_variable(sql: str) -> bool:
    """True for `@v := ...` or `INTO @v` inside a statement: the variable would be set on whichever backend
    connection ran it (shared with other sessions later), not on the session's."""
    # a routine's body (CREATE PROCEDURE ...) runs where it is called; a big INSERT is not tokenized here
    into = "@" in sql and "into" in sql.lower() and first_keyword(sql) in ("SELECT", "WITH", "(")
    if ":=" not in sql and not into:
        return False
    toks = tokenize(sql)
    return any(t[0] == "v" and not t[1].startswith("@@") and nxt[0] == "o" and nxt[1] == ":="
               or into and t[0] == "w" and t[1].upper() == "INTO" and nxt[0] == "v" and not nxt[1].startswith("@@")
               for t, nxt in zip(toks, toks[1:]))


ONLY_WITHOUT_TABLES = ("GET_LOCK and the other user-lock functions are supported by pydble only in a SELECT "
                       "without tables: user locks live on one connection of the session")


def refuse_assignment(sql: str) -> None:
    """1235 for a statement sent to a backend that assigns a user variable with := or INTO."""
    if assigns_variable(sql):
        raise NotSupported("an assignment to a user variable with := or SELECT ... INTO inside a statement is "
                           "not supported by pydble: the variable would stay on a shared backend connection; "
                           "use SET @v = ...")


def sets_insert_id(sql: str) -> bool | None:
    """For a SELECT calling LAST_INSERT_ID(expr): True when that call is the whole statement (its value is
    the session's next LAST_INSERT_ID()), False when it is somewhere else; None when it is not called so."""
    toks = tokenize(sql)
    while toks and toks[-1][0] == "o" and toks[-1][1] == ";":
        toks.pop()
    found = None
    for i, t in enumerate(toks[:-2]):
        if t[0] == "w" and t[1].upper() == "LAST_INSERT_ID" and toks[i + 1][1] == "(" and toks[i + 2][1] != ")":
            found = False
    if found is None:
        return None
    if len(toks) > 4 and toks[0][1].upper() == "SELECT" and toks[1][1].upper() == "LAST_INSERT_ID" \
            and toks[2][1] == "(" and toks[-1][1] == ")":
        depth = 0
        for t in toks[2:-1]:
            depth += {"(": 1, ")": -1}.get(t[1], 0) if t[0] == "o" else 0
            if depth == 0:
                return False   # the call ends before the statement does
        return True
    return False
