"""A shardingNode's MariaDB as the DDL protocol sees it: tables with columns, a processlist, metadata
locks held by open transactions (an ALTER waits behind them), slow DDL, silence (no answer for a
while), KILL QUERY, and connections that die with their client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .world import World


class BackendError(Exception):
    """An error packet from the backend: (MySQL code, message)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code} {message}")
        self.code = code


class Unreachable(BackendError):
    """The node could not be reached (connection refused or lost)."""

    def __init__(self, node: str) -> None:
        super().__init__(2003, f"cannot reach {node}")


class RefreshIncomplete(BackendError):
    """meta.errors.RefreshIncomplete: a reload published with a node's old part carried over."""


@dataclass
class Query:
    conn: int
    client: str          # the instance (name#incarnation) whose connection runs it
    table: str
    sql: str             # carries the DDL's marker
    column: str          # ADD COLUMN column
    marker: str
    state: str = "mdl"   # "mdl": waiting for the metadata lock; "run": altering
    ends_at: float = 0.0
    sent: Any = None     # the SentDdl to give the structure read back after it


class Backend:
    """One node. Answers travel back after a latency, or after the node's silence ends."""

    def __init__(self, world: World, name: str, tables: dict[str, tuple[str, ...]],
                 latency: tuple[float, float] = (0.0005, 0.003)) -> None:
        self.world = world
        self.name = name
        self.tables = dict(tables)
        self.latency = latency
        self.processlist: dict[int, Query] = {}
        self.mdl_until: dict[str, float] = {}   # table -> an open transaction holds it until then
        self.silent_until = 0.0
        self.down_until = 0.0
        self._conn = 0
        self._answers: dict[int, Callable[[Any], None]] = {}
        self.ddl_time = (0.001, 0.05)
        self.fail_p = 0.0
        self.reads_fail_when_down = True   # False: metadata reads still answer while DDL connections are refused
        # checker hooks: on_start(q) when a DDL enters the processlist, on_end(q, applied)
        self.on_start: list[Callable[[Query], None]] = []
        self.on_end: list[Callable[[Query, bool], None]] = []

    # -- faults the schedule injects ----------------------------------------------------------------
    def hold_mdl(self, table: str, seconds: float) -> None:
        """An open transaction on the table: an ALTER waits for it (up to lock_wait_timeout)."""
        until = self.world.now + seconds
        self.mdl_until[table] = max(self.mdl_until.get(table, 0.0), until)
        self.world.at(seconds, self._mdl_free, table)

    def silence(self, seconds: float) -> None:
        """The node answers nothing for a while (a stall); what it computes meanwhile comes later."""
        self.silent_until = max(self.silent_until, self.world.now + seconds)

    def go_down(self, seconds: float) -> None:
        """Unreachable: new requests are refused until then (running queries go on)."""
        self.down_until = max(self.down_until, self.world.now + seconds)

    # -- the wire -----------------------------------------------------------------------------------
    def reachable(self) -> bool:
        return self.world.now >= self.down_until

    def _reply(self, cb: Callable[[Any], None], value: Any) -> None:
        w = self.world
        d = w.rng.uniform(*self.latency)
        at = max(w.now + d, self.silent_until + d)
        w.at(at - w.now, cb, value)

    def _arrive(self, fn: Callable[[], None]) -> None:
        w = self.world
        w.at(w.rng.uniform(*self.latency), fn)

    def ping(self, cb: Callable[[Any], None]) -> None:
        def run() -> None:
            self._reply(cb, True if self.reachable() else Unreachable(self.name))
        self._arrive(run)

    def read(self, table: str, cb: Callable[[Any], None]) -> None:
        """SHOW CREATE TABLE: the structure now (None: no such table)."""
        def run() -> None:
            if not self.reachable() and self.reads_fail_when_down:
                self._reply(cb, Unreachable(self.name))
            else:
                self._reply(cb, self.tables.get(table))
        self._arrive(run)

    def show_processlist(self, cb: Callable[[Any], None]) -> None:
        def run() -> None:
            if not self.reachable():
                self._reply(cb, Unreachable(self.name))
            else:
                self._reply(cb, [(q.conn, q.sql, q.state) for q in self.processlist.values()])
        self._arrive(run)

    def alter(self, client: str, table: str, column: str, marker: str, cb: Callable[[Any], None]) -> SentDdl:
        """ALTER TABLE table ADD COLUMN column /* marker */; cb gets None (done) or a BackendError."""
        sent = SentDdl(self, 0)

        def run() -> None:
            sent.query = None
            if not self.reachable():
                self._reply(cb, Unreachable(self.name))
                return
            self._conn += 1
            q = Query(self._conn, client, table, f"ALTER TABLE {table} ADD COLUMN {column} /* {marker} */",
                      column, marker)
            sent.conn = q.conn
            q.sent = sent
            self.processlist[q.conn] = q
            self._answers[q.conn] = cb
            for h in self.on_start:
                h(q)
            self._try_start(q)
        self._arrive(run)
        return sent

    def kill_query(self, conn: int, cb: Callable[[Any], None] | None = None) -> None:
        """KILL QUERY conn: a DDL waiting or altering stops with no change (MariaDB rolls an ALTER back)."""
        def run() -> None:
            if not self.reachable():
                if cb:
                    self._reply(cb, Unreachable(self.name))
                return
            q = self.processlist.get(conn)
            if q is not None:
                self._end(q, BackendError(1317, "Query execution was interrupted"))
            if cb:
                self._reply(cb, None)
        self._arrive(run)

    def client_gone(self, client: str) -> None:
        """The client's connections closed (it crashed): a DDL still waiting on its metadata lock
        notices and stops; one already altering may finish anyway (the server sees the close late)."""
        for q in list(self.processlist.values()):
            if q.client == client and (q.state == "mdl" or self.world.chance(0.5)):
                self._end(q, BackendError(2013, "Lost connection"))

    # -- the engine ---------------------------------------------------------------------------------
    def _mdl_free(self, table: str) -> None:
        if self.mdl_until.get(table, 0.0) <= self.world.now:
            self.mdl_until.pop(table, None)
            for q in sorted(self.processlist.values(), key=lambda q: q.conn):
                if q.table == table and q.state == "mdl":
                    self._try_start(q)
                    break

    def _try_start(self, q: Query) -> None:
        if self.mdl_until.get(q.table, 0.0) > self.world.now:
            return
        if any(o.table == q.table and o.state == "run" for o in self.processlist.values()):
            return   # another ALTER holds the table's exclusive lock: wait behind it
        q.state = "run"
        d = self.world.rng.uniform(*self.ddl_time)
        q.ends_at = self.world.now + d
        self.world.at(d, self._finish, q)

    def _finish(self, q: Query) -> None:
        if self.processlist.get(q.conn) is not q:
            return   # killed meanwhile
        cols = self.tables.get(q.table)
        if cols is None:
            self._end(q, BackendError(1146, f"Table '{q.table}' doesn't exist"))
        elif q.column in cols:
            self._end(q, BackendError(1060, f"Duplicate column name '{q.column}'"))
        elif self.fail_p and self.world.chance(self.fail_p):
            self._end(q, BackendError(1030, "Got error from storage engine"))
        else:
            self.tables[q.table] = cols + (q.column,)
            self._end(q, None)

    def _end(self, q: Query, result: BackendError | None) -> None:
        self.processlist.pop(q.conn, None)
        if q.sent is not None:
            # SHOW CREATE TABLE on the DDL's own connection right after it (proxy/ddl/ddl.py reads it back there)
            q.sent.after = self.tables.get(q.table)
        for h in self.on_end:
            h(q, result is None)
        cb = self._answers.pop(q.conn, None)
        if cb is not None:
            self._reply(cb, result)
        self._mdl_free(q.table)


@dataclass
class SentDdl:
    """A DDL sent to a node: its connection id, known once the node took it (0 before), and the table's
    structure read back on the same connection once it ended."""

    backend: Backend
    conn: int
    after: tuple | None = None
    query: Any = None
