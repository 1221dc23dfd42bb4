"""A shardingNode's MariaDB as the DDL protocol sees it: tables (columns in order, then indexes), a
processlist, metadata locks held by open transactions (a DDL waits behind them), slow DDL (a copying
ALTER slow on one node), silence (no answer for a while), KILL QUERY, and connections that die with
their client. Each DDL is applied, or refused with MariaDB's error, on each node on its own: one that
fails on a node after succeeding on another leaves the table half-altered, as production sees it."""

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


KEY = "KEY "   # a structure is a tuple: the columns in order, then the indexes as "KEY name(column)"


@dataclass(frozen=True)
class Ddl:
    """One DDL of the workload on a table: `kind` with its column or index `name` (and `column` for an
    index); a copying ALTER takes seconds more on the node `slow_on`."""

    kind: str            # add | add_copy | drop | add_index | drop_index | create | drop_table
    name: str = ""
    column: str = ""
    slow_on: str = ""

    def sql(self, table: str) -> str:
        return {"add": f"ALTER TABLE {table} ADD COLUMN {self.name} INT",
                "add_copy": f"ALTER TABLE {table} ADD COLUMN {self.name} INT, ALGORITHM=COPY",
                "drop": f"ALTER TABLE {table} DROP COLUMN {self.name}",
                "add_index": f"ALTER TABLE {table} ADD INDEX {self.name} ({self.column})",
                "drop_index": f"ALTER TABLE {table} DROP INDEX {self.name}",
                "create": f"CREATE TABLE {table} (id INT)",
                "drop_table": f"DROP TABLE {table}"}[self.kind]

    @property
    def ddl_type(self) -> str:
        return {"create": "CREATE_TABLE", "drop_table": "DROP_TABLE"}.get(self.kind, "ALTER_TABLE")


def apply(table: str, have: tuple | None, ddl: Ddl) -> tuple | None | BackendError:
    """The structure after `ddl` on a node whose table is `have` (None: absent), or MariaDB's error."""
    if ddl.kind == "create":
        return BackendError(1050, f"Table '{table}' already exists") if have is not None else ("id",)
    if have is None:
        if ddl.kind == "drop_table":
            return BackendError(1051, f"Unknown table 'db.{table}'")
        return BackendError(1146, f"Table 'db.{table}' doesn't exist")
    if ddl.kind == "drop_table":
        return None
    cols = [e for e in have if not e.startswith(KEY)]
    keys = [e for e in have if e.startswith(KEY)]
    if ddl.kind in ("add", "add_copy"):
        if ddl.name in cols:
            return BackendError(1060, f"Duplicate column name '{ddl.name}'")
        return tuple(cols + [ddl.name] + keys)
    if ddl.kind == "drop":
        if ddl.name not in cols:
            return BackendError(1091, f"Can't DROP COLUMN `{ddl.name}`; check that it exists")
        if len(cols) == 1:
            return BackendError(1090, "You can't delete all columns with ALTER TABLE; use DROP TABLE instead")
        # an index whose only column is dropped goes with it
        return tuple([c for c in cols if c != ddl.name] + [k for k in keys if not k.endswith(f"({ddl.name})")])
    names = [k[len(KEY):].split("(", 1)[0] for k in keys]
    if ddl.kind == "add_index":
        if ddl.name in names:
            return BackendError(1061, f"Duplicate key name '{ddl.name}'")
        if ddl.column not in cols:
            return BackendError(1072, f"Key column '{ddl.column}' doesn't exist in table")
        return tuple(cols + keys + [f"{KEY}{ddl.name}({ddl.column})"])
    if ddl.kind == "drop_index":
        if ddl.name not in names:
            return BackendError(1091, f"Can't DROP INDEX `{ddl.name}`; check that it exists")
        return tuple(cols + [k for k, n in zip(keys, names) if n != ddl.name])
    raise ValueError(ddl.kind)


@dataclass
class Query:
    conn: int
    client: str          # the instance (name#incarnation) whose connection runs it
    table: str
    sql: str             # carries the DDL's marker
    ddl: Ddl
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
        # every structure each table went through on this node, in order (the checker's yardstick)
        self.history: dict[str, list[tuple | None]] = {t: [s] for t, s in self.tables.items()}
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

    def alter(self, client: str, table: str, ddl: Ddl, marker: str, cb: Callable[[Any], None]) -> SentDdl:
        """`ddl` on table /* marker */; cb gets None (done) or a BackendError."""
        sent = SentDdl(self, 0)

        def run() -> None:
            sent.query = None
            if not self.reachable():
                self._reply(cb, Unreachable(self.name))
                return
            self._conn += 1
            q = Query(self._conn, client, table, f"{ddl.sql(table)} /* {marker} */", ddl, marker)
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
        if q.ddl.slow_on == self.name:
            d += self.world.rng.uniform(2.0, 6.0)   # the copy of a big table
        q.ends_at = self.world.now + d
        self.world.at(d, self._finish, q)

    def _finish(self, q: Query) -> None:
        if self.processlist.get(q.conn) is not q:
            return   # killed meanwhile
        got = apply(q.table, self.tables.get(q.table), q.ddl)
        if isinstance(got, BackendError):
            self._end(q, got)
        elif self.fail_p and self.world.chance(self.fail_p):
            self._end(q, BackendError(1030, "Got error from storage engine"))
        else:
            if got is None:
                self.tables.pop(q.table, None)
            else:
                self.tables[q.table] = got
            self.history.setdefault(q.table, [None]).append(got)
            self._end(q, None)

    def _end(self, q: Query, result: BackendError | None) -> None:
        self.processlist.pop(q.conn, None)
        if q.sent is not None:
            # SHOW CREATE TABLE on the DDL's own connection right after it (proxy/ddl/ddl.py reads it back there)
            q.sent.after = self.tables.get(q.table)
            q.sent.after_at = len(self.history.setdefault(q.table, [None])) - 1
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
    after_at: int = 0    # its index in the node's history of the table
    query: Any = None
