"""Client workers for a chaos run: DML and DDL from every instance, every outcome written down.

Each worker is a thread with its own seeded RNG and its own PyMySQL connections (one for DML and
one for DDL per instance, every socket with connect/read/write timeouts). What the clients were
told is the ground truth the checker holds the cluster to:

- an INSERT that got OK must be on the backends at the end (once, on the right node / on every copy
  of a global table); one that failed may or may not be;
- an UPDATE ``v = v + 1`` that got OK counts towards a row's lower bound, one that failed towards
  its upper bound; reads of acknowledged rows must see them (read-your-writes, no replication here);
- a DDL that got OK fixes the state of its column or index on every node; a failed one leaves it
  *unknown* (it may have run on some nodes); the workload later repairs unknown names with
  ``DROP ... IF EXISTS`` the way an application retries a failed migration, and so does the checker.

Slow DDLs: every DDL on the bigger table is a copying ALTER (``ALGORITHM=COPY`` on tens of thousands of
rows), and some DDLs are sent while an application transaction straight on one node holds the
table's metadata lock for a few seconds (``Holder``), so the ALTER waits there with the table locked.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pymysql
from chaos_env import (ACK_TIMEOUT_S, BACKEND_TIMEOUT_S, BIG_TABLE, CONNECT_TIMEOUT_S, GLOBAL_TABLE, SHARDING_TABLES,
                       TABLE_NODES, TABLES)

ZK_OP_TIMEOUT_S = 5.0      # zk/aio.py OP_TIMEOUT_S: every ZooKeeper call of the proxy is bounded by it
SLACK_S = 5.0              # a noisy shared 2-core machine
CLIENT_CONNECT_TIMEOUT_S = 5.0
DML_READ_TIMEOUT_S = 45.0  # hard caps, above the bounds: a slow call is measured, not cut short
DDL_READ_TIMEOUT_S = 120.0

# The longest a call may take while its instance is not paused, from the timeouts the instance runs
# with. DML: one backend query plus the pool's wait for a connection (2 x connect timeout).
DML_BOUND_S = BACKEND_TIMEOUT_S + 2 * CONNECT_TIMEOUT_S + SLACK_S
P_BLOCKED = 0.25           # share of the workers' DDLs sent while a transaction holds the table on one node
HOLD_S = (0.5, 5.0)        # how long a worker's holder keeps the metadata lock
HOLD_BOUND_S = 15.0        # the longest any holder (the faults' included) keeps it
COPY_ALLOWANCE_S = 20.0    # a copying ALTER of the bigger table on a loaded machine
# DDL: two rounds of acknowledgements, the backend execution and the metadata refresh, the pool wait,
# and a few ZooKeeper calls that may each run to their own bound while ZooKeeper goes away; plus a
# holder's metadata lock, a copying ALTER, and the liveness check that finds a silent node (2 rounds).
DDL_BOUND_S = (2 * ACK_TIMEOUT_S + 2 * BACKEND_TIMEOUT_S + 2 * CONNECT_TIMEOUT_S + 4 * ZK_OP_TIMEOUT_S + SLACK_S
               + HOLD_BOUND_S + COPY_ALLOWANCE_S + 2 * BACKEND_TIMEOUT_S)
KEEP_CALLS_OVER_S = 1.0    # shorter calls cannot break any bound; only longer ones are kept

MAX_COLUMNS = 5
MAX_INDEXES = 3
CONN_ERRORS = {0, 2003, 2006, 2013, 2014, 2055}

PRESENT, ABSENT, UNKNOWN = "present", "absent", "unknown"
# 4006 answers that say the DDL never reached a backend: the clients hold the proxy to that.
NOT_RUN = {"fenced", "init-failed", "busy", "syncmeta", "rejoining", "refused", "zk-down"}


@dataclass
class Call:
    """One client call that took long enough to be checked against its bound."""

    worker: int
    instance: int
    op: str
    start: float
    end: float
    outcome: str


@dataclass
class DdlDone:
    """A DDL the clients saw answered OK: it must be on every node (and in the backends' slow log)."""

    table: str
    sql: str
    start_wall: float
    end_wall: float


def classify(e: BaseException) -> tuple[int, str]:
    """(MySQL code, short label) of a failed call."""
    args = getattr(e, "args", ())
    code = args[0] if args and isinstance(args[0], int) else -1
    msg = str(args[1]) if len(args) > 1 else repr(e)
    if code == 4006:
        for needle, label in (("was not run", "fenced"), ("could not write the INIT", "init-failed"),
                              ("reconcile", "lost-decision"), ("could not publish", "lost-decision"),
                              ("ddlLock is exists", "busy"), ("is doing DDL", "busy"),
                              ("initializing metadata", "syncmeta"), ("re-joining", "rejoining"),
                              ("refused by another", "refused"), ("unreachable", "zk-down")):
            if needle in msg:
                return code, label
        return code, "other:" + msg[:60]
    if "shardingNode" in msg or "dbGroup" in msg:
        return code, "backend"  # the proxy's answer about a backend, on a client connection that is fine
    if code == 2013 and "timed out" in msg:
        return code, "timeout"
    if code in CONN_ERRORS:
        return code, "connection"
    return code, msg[:60]


def copying(table: str, sql: str) -> str:
    """The statement as a copying ALTER when it is about the bigger table (MariaDB takes no ALGORITHM
    clause on DROP INDEX ... ON: that form stays as it is)."""
    if table != BIG_TABLE:
        return sql
    if sql.upper().startswith("ALTER"):
        return sql + ", ALGORITHM=COPY"
    return sql + " ALGORITHM=COPY" if sql.upper().startswith("CREATE") else sql


class Holder:
    """An application's open transaction straight on one node: it holds the table's metadata lock
    (any ALTER there waits) until released or `max_s` passed; every socket call is bounded."""

    def __init__(self, env: Any, node: str, table: str, max_s: float) -> None:
        self.node = node
        self.conn = env.node_conn(node, timeout=max_s + 10)
        try:
            with self.conn.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute(f"SELECT id FROM `{table}` LIMIT 1")
        except BaseException:
            self.conn.close()
            raise
        self.released = threading.Event()
        self.thread = threading.Thread(target=self._hold, args=(max_s,), name=f"chaos-holder-{node}", daemon=True)
        self.thread.start()

    def _hold(self, max_s: float) -> None:
        self.released.wait(max_s)
        try:
            with self.conn.cursor() as cur:
                cur.execute("COMMIT")
        except Exception:  # noqa: BLE001 - the backend may be down: the lock goes with the connection
            pass
        finally:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001
                pass

    def release(self) -> None:
        """End the transaction now (idempotent)."""
        self.released.set()

    def join(self, timeout: float) -> None:
        """Release and wait (bounded) until the connection is closed."""
        self.release()
        self.thread.join(timeout)


@dataclass
class BlockedDdl:
    """A DDL sent through one instance while a holder keeps it waiting on one node (for the faults)."""

    table: str
    sql: str
    inst: int
    holder: Holder
    thread: threading.Thread


class SchemaModel:
    """What the clients know about each table's extra columns and indexes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state: dict[str, dict[str, str]] = {t: {} for t in TABLES}   # name -> present/absent/unknown
        self.kind: dict[str, str] = {}                                      # name -> col/idx
        self.busy: set[str] = set()
        self.before: dict[str, str] = {}                                     # state of a busy name before its DDL
        self.counter = itertools.count(1)
        self.ok_ddls: list[DdlDone] = []

    def plan(self, rng: random.Random, table: str) -> tuple[str, str, str] | None:
        """Pick a DDL for a table: (sql, name, action), reserving the name; None if nothing fits."""
        with self.lock:
            st = self.state[table]
            free = [n for n in st if n not in self.busy]
            unknown = [n for n in free if st[n] == UNKNOWN]
            cols = [n for n in free if st[n] == PRESENT and self.kind[n] == "col"]
            idxs = [n for n in free if st[n] == PRESENT and self.kind[n] == "idx"]
            n_cols = sum(1 for n in st if st[n] != ABSENT and self.kind[n] == "col")
            n_idxs = sum(1 for n in st if st[n] != ABSENT and self.kind[n] == "idx")
            r = rng.random()
            if unknown and r < 0.2:
                name = rng.choice(unknown)
                what = "COLUMN" if self.kind[name] == "col" else "INDEX"
                sql, action = f"ALTER TABLE {table} DROP {what} IF EXISTS {name}", "repair"
            elif r < 0.6:
                if cols and (n_cols >= MAX_COLUMNS or rng.random() < 0.4):
                    name = rng.choice(cols)
                    sql, action = f"ALTER TABLE {table} DROP COLUMN {name}", "drop"
                elif n_cols < MAX_COLUMNS:
                    name = f"c{next(self.counter)}"
                    self.kind[name] = "col"
                    sql, action = f"ALTER TABLE {table} ADD COLUMN {name} INT", "add"
                else:
                    return None
            else:
                if idxs and (n_idxs >= MAX_INDEXES or rng.random() < 0.4):
                    name = rng.choice(idxs)
                    sql = (f"ALTER TABLE {table} DROP INDEX {name}" if rng.random() < 0.5
                           else f"DROP INDEX {name} ON {table}")
                    action = "drop"
                elif n_idxs < MAX_INDEXES:
                    name = f"ix{next(self.counter)}"
                    self.kind[name] = "idx"
                    sql = (f"ALTER TABLE {table} ADD INDEX {name} (k)" if rng.random() < 0.5
                           else f"CREATE INDEX {name} ON {table} (k)")
                    action = "add"
                else:
                    return None
            self.busy.add(name)
            self.before[name] = st.get(name, ABSENT)
            if action == "add":
                st[name] = UNKNOWN  # until the answer: a crash of the client thread leaves it unknown
            return sql, name, action

    def settle(self, table: str, name: str, action: str, outcome: str) -> None:
        """Record what the client was told about one DDL: 'ok', 'not-run' or 'unknown'."""
        with self.lock:
            self.busy.discard(name)
            before = self.before.pop(name, UNKNOWN)
            if outcome == "ok":
                self.state[table][name] = PRESENT if action == "add" else ABSENT
            elif outcome == "not-run":
                self.state[table][name] = before
            else:
                self.state[table][name] = UNKNOWN

    def unknown(self, table: str) -> list[str]:
        """Names whose state the clients cannot know."""
        with self.lock:
            return [n for n, s in self.state[table].items() if s == UNKNOWN]

    def names(self, table: str, state: str) -> set[str]:
        """Names of a table in a state."""
        with self.lock:
            return {n for n, s in self.state[table].items() if s == state}


@dataclass
class DataModel:
    """Which rows and updates the clients were told about."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    ids: Any = field(default_factory=lambda: itertools.count(1))
    acked: dict[str, list[int]] = field(default_factory=lambda: {t: [] for t in TABLES})
    maybe: dict[str, set[int]] = field(default_factory=lambda: {t: set() for t in TABLES})
    upd_ok: Counter = field(default_factory=Counter)        # (table, id) -> acknowledged increments
    upd_unknown: Counter = field(default_factory=Counter)   # (table, id) -> failed increments


class Workload:
    """The client threads and everything they saw."""

    def __init__(self, env: Any, seed: int, workers: int = 6) -> None:
        self.env = env
        self.seed = seed
        self.n_workers = workers
        self.schema = SchemaModel()
        self.data = DataModel()
        self.stats: Counter = Counter()
        self.stats_lock = threading.Lock()
        self.calls: list[Call] = []
        self.violations: list[str] = []
        self.inflight_ddl: dict[int, int] = {}   # worker -> instance it is running a DDL on now
        self.forced: set[str] = set()            # DDLs whose lock an operator released (force) while they ran
        self.side_threads: list[threading.Thread] = []   # DDL clients the faults started
        self._side_ids = itertools.count(1000)
        self.data.acked[BIG_TABLE].extend(env.big_ids())
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.ops = 0

    def start(self) -> None:
        """Start the workers."""
        for i in range(self.n_workers):
            t = threading.Thread(target=self._worker, args=(i,), name=f"chaos-worker-{i}", daemon=True)
            self.threads.append(t)
            t.start()

    def stop(self, timeout: float) -> list[str]:
        """Stop the workers; names of those still stuck after timeout."""
        self.stop_event.set()
        deadline = time.monotonic() + timeout
        for t in self.threads + self.side_threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in self.threads + self.side_threads if t.is_alive()]

    def _note(self, key: str) -> None:
        """Count something that is not a client operation (shown beside them in the report)."""
        with self.stats_lock:
            self.stats[key] += 1

    def _count(self, key: str) -> None:
        with self.stats_lock:
            self.stats[key] += 1
            self.ops += 1

    # -- one worker ----------------------------------------------------------------------------
    def _worker(self, idx: int) -> None:
        rng = random.Random(f"{self.seed}-worker-{idx}")
        conns: dict[tuple[int, bool], Any] = {}
        while not self.stop_event.is_set():
            inst = rng.randrange(len(self.env.proxies))
            r = rng.random()
            op = ("insert" if r < 0.40 else "select" if r < 0.62 else "update" if r < 0.82
                  else "count" if r < 0.90 else "ddl")
            try:
                getattr(self, f"_op_{op}")(idx, rng, conns, inst)
            except Exception as e:  # noqa: BLE001 - a bug in the workload must not pass silently
                self.violations.append(f"worker {idx} crashed in {op}: {e!r}")
                self._count(f"{op}:worker-crash")
            time.sleep(rng.uniform(0, 0.02))
        for c in conns.values():
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass

    def _call(self, idx: int, conns: dict, inst: int, ddl: bool, op: str, sql: str,
              args: Any = None) -> tuple[bool, Any, str, float, float]:
        """Run one statement; (ok, (rowcount, rows, warnings) or exception, label, start, end)."""
        key = (inst, ddl)
        t0 = time.monotonic()
        w0 = time.time()
        try:
            conn = conns.get(key)
            if conn is None:
                conn = self.env.proxies[inst].connect(
                    connect_timeout=CLIENT_CONNECT_TIMEOUT_S,
                    read_timeout=DDL_READ_TIMEOUT_S if ddl else DML_READ_TIMEOUT_S,
                    write_timeout=DDL_READ_TIMEOUT_S if ddl else DML_READ_TIMEOUT_S)
                conns[key] = conn
            with conn.cursor() as cur:
                n = cur.execute(sql, args)
                rows = cur.fetchall()
                warnings = cur._result.warning_count if cur._result is not None else 0
            res: tuple[bool, Any, str] = (True, (n, rows, warnings), "ok" if not warnings else "ok-warning")
        except (pymysql.MySQLError, OSError) as e:
            code, label = classify(e)
            if label in ("connection", "timeout") or code == -1 or isinstance(e, (pymysql.InterfaceError, OSError)):
                bad = conns.pop(key, None)
                if bad is not None:
                    try:
                        bad.close()
                    except Exception:  # noqa: BLE001
                        pass
            res = (False, e, f"err:{code}:{label}")
        t1 = time.monotonic()
        if t1 - t0 > KEEP_CALLS_OVER_S:
            with self.stats_lock:
                self.calls.append(Call(idx, inst, op, t0, t1, res[2]))
        self._count(f"{op}:{res[2]}")
        return res[0], res[1], res[2], w0, time.time()

    def _op_insert(self, idx: int, rng: random.Random, conns: dict, inst: int) -> None:
        table = rng.choice(TABLES)
        with self.data.lock:
            rid = next(self.data.ids)
        ok, _, _, _, _ = self._call(idx, conns, inst, False, "insert",
                                    f"INSERT INTO {table} (id, k, v) VALUES (%s, %s, 0)", (rid, rng.randrange(100)))
        with self.data.lock:
            if ok:
                self.data.acked[table].append(rid)
            else:
                self.data.maybe[table].add(rid)

    def _pick_acked(self, rng: random.Random, table: str) -> int | None:
        with self.data.lock:
            ids = self.data.acked[table]
            return rng.choice(ids) if ids else None

    def _op_select(self, idx: int, rng: random.Random, conns: dict, inst: int) -> None:
        table = rng.choice(TABLES)
        rid = self._pick_acked(rng, table)
        if rid is None:
            return
        with self.data.lock:
            floor = self.data.upd_ok[(table, rid)]
        ok, res, _, _, _ = self._call(idx, conns, inst, False, "select",
                                      f"SELECT id, v FROM {table} WHERE id = %s", (rid,))
        if ok:
            rows = res[1]
            if len(rows) != 1:
                self.violations.append(f"read-your-writes: {table} id {rid} acknowledged, SELECT on "
                                       f"instance {inst} returned {len(rows)} rows")
            elif int(rows[0][1]) < floor:
                self.violations.append(f"read-your-writes: {table} id {rid} had {floor} acknowledged "
                                       f"increments, SELECT on instance {inst} saw v={rows[0][1]}")

    def _op_update(self, idx: int, rng: random.Random, conns: dict, inst: int) -> None:
        table = rng.choice(TABLES)
        rid = self._pick_acked(rng, table)
        if rid is None:
            return
        ok, res, _, _, _ = self._call(idx, conns, inst, False, "update",
                                      f"UPDATE {table} SET v = v + 1 WHERE id = %s", (rid,))
        with self.data.lock:
            if ok:
                self.data.upd_ok[(table, rid)] += 1
            else:
                self.data.upd_unknown[(table, rid)] += 1
        if ok and res[0] != 1:
            self.violations.append(f"read-your-writes: UPDATE of acknowledged {table} id {rid} on instance "
                                   f"{inst} affected {res[0]} rows")

    def _op_count(self, idx: int, rng: random.Random, conns: dict, inst: int) -> None:
        table = rng.choice(SHARDING_TABLES)
        with self.data.lock:
            floor = len(self.data.acked[table])
        ok, res, _, _, _ = self._call(idx, conns, inst, False, "count", f"SELECT COUNT(*) FROM {table}")
        if ok and int(res[1][0][0]) < floor:
            self.violations.append(f"read-your-writes: {table} had {floor} acknowledged rows, COUNT(*) on "
                                   f"instance {inst} said {res[1][0][0]}")

    def _op_ddl(self, idx: int, rng: random.Random, conns: dict, inst: int) -> None:
        table = rng.choice((*SHARDING_TABLES, GLOBAL_TABLE))
        planned = self.schema.plan(rng, table)
        if planned is None:
            return
        holder = None
        if rng.random() < P_BLOCKED:
            try:
                holder = Holder(self.env, rng.choice(TABLE_NODES), table, rng.uniform(*HOLD_S))
                self._note("holder ok")
            except Exception:  # noqa: BLE001 - the node may be down or silent: the DDL goes on unheld
                self._note("holder failed")
        try:
            self._ddl(idx, conns, inst, table, planned)
        finally:
            if holder is not None:
                holder.join(HOLD_BOUND_S)

    def _ddl(self, idx: int, conns: dict, inst: int, table: str, planned: tuple[str, str, str]) -> None:
        """Send one planned DDL and write down what the client was told."""
        sql, name, action = planned
        sql = copying(table, sql)
        self.inflight_ddl[idx] = inst
        try:
            ok, _, label, w0, w1 = self._call(idx, conns, inst, True, "ddl", sql)
        finally:
            self.inflight_ddl.pop(idx, None)
        not_run = label.startswith("err:4006:") and label.split(":", 2)[2] in NOT_RUN
        self.schema.settle(table, name, action, "ok" if ok else "not-run" if not_run else "unknown")
        if ok:
            with self.schema.lock:
                self.schema.ok_ddls.append(DdlDone(table, sql, w0, w1))
        if table == BIG_TABLE:
            self._note(f"copying-ddl {label}")   # a breakdown of the ddl counts

    # -- DDLs the faults start -----------------------------------------------------------------
    def side_ddl(self, rng: random.Random, inst: int, table: str) -> tuple[str, str, threading.Thread] | None:
        """A planned DDL on `table` sent through `inst` from a thread of its own (its own connection)."""
        planned = self.schema.plan(rng, table)
        if planned is None:
            return None
        idx = next(self._side_ids)

        def go() -> None:
            conns: dict = {}
            try:
                self._ddl(idx, conns, inst, table, planned)
            except Exception as e:  # noqa: BLE001 - a bug in the workload must not pass silently
                self.violations.append(f"fault DDL thread crashed: {e!r}")
            finally:
                for c in conns.values():
                    try:
                        c.close()
                    except Exception:  # noqa: BLE001
                        pass

        t = threading.Thread(target=go, name=f"chaos-fault-ddl-{idx}", daemon=True)
        self.side_threads.append(t)
        t.start()
        return copying(table, planned[0]), planned[1], t

    def blocked_ddl(self, rng: random.Random, inst: int, hold_max_s: float) -> BlockedDdl | None:
        """A DDL through `inst` waiting on one node behind a holder (seen in the node's processlist,
        bounded); None when no table, node or instance lends itself to one now."""
        for _ in range(6):   # a worker's DDL may hold the table, a backend may be away
            table = rng.choice(TABLES)
            node = rng.choice(TABLE_NODES)
            try:
                holder = Holder(self.env, node, table, hold_max_s)
            except Exception:  # noqa: BLE001 - that node is down or silent now
                continue
            side = self.side_ddl(rng, inst, table)
            if side is None:
                holder.join(5)
                continue
            sql, name, thread = side
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and thread.is_alive():
                try:
                    if self.env.ddl_waiting_on(node, name):
                        return BlockedDdl(table, sql, inst, holder, thread)
                except Exception:  # noqa: BLE001 - retried until the deadline
                    pass
                time.sleep(0.05)
            holder.join(5)   # refused (table busy, ZooKeeper away...) or never reached the node
        return None
