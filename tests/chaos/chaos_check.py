"""The checker of a chaos run: what must hold once every fault is healed and the cluster settled.

DDL overlap is judged on the backends' own clocks. Each backend runs with its slow log in the
``mysql.slow_log`` table, filtered to admin statements (ALTER TABLE, CREATE/DROP INDEX) and with
``long_query_time=0``: MariaDB writes a row when a statement *ends*, with the statement's start time
(microseconds) and its duration, so each DDL is an exact interval on one node, its waits for
metadata locks included. Two DDLs on the same table of the same node whose intervals intersect ran
at the same time. Why not the alternatives: the general log has only start times; a side table
cannot be written by an ALTER the proxy relays verbatim, nor by a trigger (DDL fires none);
performance_schema's statement history is a ring buffer that a restart empties. The slow log is a
CSV table that survives a clean backend restart. Blind spot: a DDL cut off by a backend shutdown is
not logged; the checker also asserts that every DDL the clients saw succeed is in the log, so a
detector that silently sees nothing fails the run.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pymysql
from chaos_env import GLOBAL_TABLE, INSTANCES, NODE_PLACES, SCHEMA, SHARDING_TABLES, TABLE_NODES, TABLES
from chaos_workload import ABSENT, DDL_BOUND_S, DML_BOUND_S, PRESENT, classify

OVERLAP_EPS_S = 0.0005
TRANSIENT = ("rejoining", "syncmeta", "zk-down", "connection", "timeout")
LOCK_FOLDERS = {"ddl_lock", "view_lock"}   # the persistent parents of the DDL and view locks

_COLUMN = re.compile(r"^\s+`([^`]+)`\s", re.M)
_KEY = re.compile(r"^\s+(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?KEY\s+`([^`]+)`", re.M)
_DDL_TABLE = (re.compile(r"^\s*ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+(?:`?\w+`?\.)?`?(\w+)`?", re.I),
              re.compile(r"^\s*(?:CREATE|DROP)\s+(?:ONLINE\s+|UNIQUE\s+)*INDEX\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
                         r"`?\w+`?\s+ON\s+(?:`?\w+`?\.)?`?(\w+)`?", re.I))
BASE_COLUMNS = {"id", "k", "v"}


def extra_names(create_sql: str) -> set[str]:
    """The workload's columns and indexes in a SHOW CREATE TABLE text."""
    body = create_sql.split("\n)", 1)[0]
    cols = {m for m in _COLUMN.findall(body)} - BASE_COLUMNS
    return cols | set(_KEY.findall(body))


def ddl_table(sql: str) -> str | None:
    """The table a logged DDL statement is about (None for anything else)."""
    for rx in _DDL_TABLE:
        m = rx.match(sql)
        if m:
            return m.group(1).lower()
    return None


_DDL_MARKER = re.compile(r"/\*\s*pydble-ddl:\w+\s*\*/")


def norm_sql(sql: str) -> str:
    """A statement with its whitespace and case folded, for matching logs to client statements (the
    marker comment pydble appends to a DDL it runs, `/* pydble-ddl:<id> */`, left out)."""
    return " ".join(_DDL_MARKER.sub(" ", sql).split()).lower()


class Checker:
    """Runs every end-of-run check; collects violations and notes."""

    def __init__(self, env: Any, workload: Any, faults: Any, emit: Any) -> None:
        self.env = env
        self.w = workload
        self.faults = faults
        self.emit = emit
        self.violations: list[str] = []
        self.notes: dict[str, Any] = {}

    def fail(self, msg: str) -> None:
        """Record a violation (and say it at once)."""
        self.violations.append(msg)
        self.emit(f"VIOLATION: {msg}")

    # -- settling ----------------------------------------------------------------------------------
    def settle(self, timeout: float) -> bool:
        """Wait (bounded) until ZooKeeper is clean and every instance is online and answers."""
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        last: Any = None
        while time.monotonic() < deadline:
            try:
                st = self.env.zk_state()
                clean = (not st["ddl"] and not st["lock/ddl_lock"] and not st["lock/view_lock"]
                         and set(st["lock"]) <= LOCK_FOLDERS
                         and set(st["online"]) == set(INSTANCES))
                rows = [len(self.env.manager_rows(p, "show @@cluster")) for p in self.env.proxies]
                ddl = [len(self.env.manager_rows(p, "show @@ddl")) for p in self.env.proxies]
                last = (st, rows, ddl)
                if clean and all(r == len(INSTANCES) for r in rows) and not any(ddl):
                    self.notes["settle_s"] = round(time.monotonic() - started, 1)
                    return True
            except Exception as e:  # noqa: BLE001 - retried until the deadline
                last = e
            time.sleep(0.5)
        self.fail(f"cluster did not settle within {timeout:.0f}s: last seen {last!r}")
        return False

    def zk_clean(self, when: str) -> None:
        """No ddl record, no ddl lock, no syncMeta/reconcile lock left in ZooKeeper."""
        st = self.env.zk_state()
        if st["ddl"] or st["lock/ddl_lock"] or st["lock/view_lock"] or set(st["lock"]) - LOCK_FOLDERS:
            self.fail(f"ZooKeeper not clean {when}: ddl={st['ddl']} ddl_lock={st['lock/ddl_lock']} "
                      f"view_lock={st['lock/view_lock']} lock={st['lock']}")

    # -- structure --------------------------------------------------------------------------------
    def structure_vs_clients(self) -> set[str]:
        """Every DDL the clients saw succeed is on every node, nothing else is; returns divergent tables."""
        structures = self.env.node_structures()
        divergent: set[str] = set()
        model = self.w.schema
        for t in TABLES:
            per_node = {}
            for node in TABLE_NODES:
                sql = structures[t].get(node)
                if sql is None:
                    self.fail(f"{t} is missing on {node}")
                    continue
                per_node[node] = extra_names(sql)
            with model.lock:
                state = dict(model.state[t])
            for node, names in per_node.items():
                for n in sorted(names - set(state)):
                    self.fail(f"{t} on {node} has {n}, which no client ever asked for")
                for n, s in state.items():
                    if s == PRESENT and n not in names:
                        self.fail(f"{t}: the DDL adding {n} answered OK but {node} lacks it")
                    if s == ABSENT and n in names:
                        self.fail(f"{t}: {node} has {n}, which the clients were told is not there (its DROP "
                                  f"answered OK, or its ADD was refused as never run)")
            if len({frozenset(v) for v in per_node.values()}) > 1 or len(
                    {structures[t][n] for n in per_node}) > 1:
                divergent.add(t)
        self.notes["divergent_tables_before_repair"] = sorted(divergent)
        return divergent

    def metadata(self, tables: list[str], when: str, expect_names: bool = False) -> None:
        """Every instance's `check full @@metadata` row of each table says 1/1 (and has the right names)."""
        for p in self.env.proxies:
            try:
                rows = self.env.manager_rows(p, f"check full @@metadata where schema='{SCHEMA}'")
            except Exception as e:  # noqa: BLE001
                self.fail(f"{p.instance}: check full @@metadata failed {when}: {e!r}")
                continue
            by_table = {r[1]: r for r in rows}
            for t in tables:
                r = by_table.get(t)
                if r is None:
                    self.fail(f"{p.instance}: no metadata row for {t} {when}")
                    continue
                if (int(r[4]), int(r[5])) != (1, 1):
                    self.fail(f"{p.instance}: {t} consistent_in_sharding_nodes={r[4]} consistent_in_memory={r[5]} "
                              f"{when}; memory has {sorted(extra_names(str(r[3])))}")
                if expect_names:
                    want = self.w.schema.names(t, PRESENT)
                    have = extra_names(str(r[3]))
                    if have != want:
                        self.fail(f"{p.instance}: {t} metadata has {sorted(have)}, clients were told {sorted(want)}")

    def metadata_vs_clients(self) -> None:
        """Before any DDL of the checker: every instance serves every OK'd ADD and no OK'd DROP.

        This holds for every table, including those whose nodes differ after failed DDLs (there the
        text memory keeps is a choice among variants, so only the names the clients know are judged).
        """
        for p in self.env.proxies:
            try:
                rows = self.env.manager_rows(p, f"check full @@metadata where schema='{SCHEMA}'")
            except Exception as e:  # noqa: BLE001
                self.fail(f"{p.instance}: check full @@metadata failed: {e!r}")
                continue
            by_table = {r[1]: r for r in rows}
            for t in TABLES:
                r = by_table.get(t)
                have = extra_names(str(r[3])) if r is not None else set()
                lacks = sorted(self.w.schema.names(t, PRESENT) - have)
                stale = sorted(self.w.schema.names(t, ABSENT) & have)
                if lacks or stale:
                    self.fail(f"{p.instance}: {t} metadata lacks {lacks} (added, OK) and still has {stale} "
                              f"(dropped, OK) after settling")

    # -- DDL through the cluster after the storm ---------------------------------------------------
    def ddl(self, inst: int, sql: str, what: str, budget_s: float = 30.0) -> bool:
        """Run a DDL on an instance; transient refusals are retried within a budget, others fail the run."""
        deadline = time.monotonic() + budget_s
        tries = 0
        while True:
            tries += 1
            try:
                conn = self.env.proxies[inst].connect(connect_timeout=5, read_timeout=120, write_timeout=60)
                try:
                    with conn.cursor() as cur:
                        cur.execute(sql)
                finally:
                    conn.close()
                if tries > 1:
                    self.notes.setdefault("post_heal_ddl_retries", []).append(f"{what}: {tries} tries")
                return True
            except pymysql.MySQLError as e:
                code, label = classify(e)
                if time.monotonic() > deadline or not any(label.startswith(x) for x in TRANSIENT):
                    self.fail(f"{what}: {sql!r} on {INSTANCES[inst]} failed after {tries} tries: {e.args!r}")
                    return False
                time.sleep(0.5)

    def half_applied(self, divergent: set[str]) -> None:
        """A table whose nodes differ once quiescent must be reported: every instance's `check full
        @@metadata` names the differing nodes. Then `repair @@ddl` is asked on every instance: the one
        that ran the table's last DDL re-runs it on the lagging nodes where that is safe; the others
        must refuse with the reason (never answer "nothing to repair" for a table that differs). What
        no instance repairs (e.g. a later DDL succeeded everywhere: "fix by hand") is left to repair()."""
        repaired: list[str] = []
        refused: dict[str, str] = {}
        for t in sorted(divergent):
            for p in self.env.proxies:
                try:
                    rows = self.env.manager_rows(p, f"check full @@metadata_nodes where schema='{SCHEMA}' and table='{t}'")
                except Exception as e:  # noqa: BLE001
                    self.fail(f"{p.instance}: check full @@metadata of {t} failed: {e!r}")
                    continue
                if len(rows) != 1 or int(rows[0][4]) != 0 or not str(rows[0][6] or ""):
                    self.fail(f"{p.instance}: {t} differs across its nodes but check full @@metadata says {rows!r}")
            for p in self.env.proxies:
                try:
                    rows = self.env.manager_rows(p, f"repair @@ddl where schema='{SCHEMA}' and table='{t}'")
                except pymysql.MySQLError as e:
                    refused[t] = f"{p.instance}: {e.args[1] if len(e.args) > 1 else e!r}"[:200]
                    continue
                if rows and rows[0][2] == "repaired":
                    repaired.append(f"{t} by {p.instance}: {rows[0][3]}"[:200])
                    refused.pop(t, None)
                    break
                self.fail(f"{p.instance}: repair @@ddl of {t}, whose nodes differ, answered {rows!r}")
        self.notes["half_applied_repaired_by_repair_ddl"] = repaired
        self.notes["half_applied_repair_ddl_refused"] = refused
        self.emit(f"repair @@ddl: repaired {len(repaired)}, refused {sorted(refused)}")

    def repair(self, divergent: set[str]) -> None:
        """Drop (IF EXISTS) every name whose DDL had an unknown outcome and that is on some node."""
        structures = self.env.node_structures()
        repaired = 0
        for i, t in enumerate(TABLES):
            on_nodes = set().union(*(extra_names(s) for s in structures[t].values() if s))
            names = [n for n in self.w.schema.unknown(t) if n in on_nodes]
            still = len({structures[t][n] for n in TABLE_NODES}) > 1   # repair @@ddl may have fixed it
            if t in divergent and still and not names:
                self.fail(f"{t} differs across nodes but no failed DDL explains it")
            if not names:
                continue
            parts = [f"DROP {'COLUMN' if self.w.schema.kind[n] == 'col' else 'INDEX'} IF EXISTS {n}" for n in names]
            if self.ddl(i % len(INSTANCES), f"ALTER TABLE {t} " + ", ".join(parts), f"repair of {t}"):
                for n in names:
                    self.w.schema.settle(t, n, "drop", "ok")
                repaired += len(names)
        for t in TABLES:  # names unknown to the clients but on no node: settled as absent
            for n in self.w.schema.unknown(t):
                self.w.schema.settle(t, n, "drop", "ok")
        self.notes["names_repaired"] = repaired

    def probe(self) -> None:
        """From every instance, a DDL on every table must work at once: no lock is left anywhere."""
        for t in TABLES:
            for i in range(len(INSTANCES)):
                col = f"probe_{i}"
                if self.ddl(i, f"ALTER TABLE {t} ADD COLUMN {col} INT", f"probe add on {t}", budget_s=15):
                    self.ddl((i + 1) % len(INSTANCES), f"ALTER TABLE {t} DROP COLUMN {col}",
                             f"probe drop on {t}", budget_s=15)

    # -- data --------------------------------------------------------------------------------------
    def rows(self) -> None:
        """Acknowledged INSERTs present (once, on the right node / on every copy); UPDATE counts in bounds."""
        data = self.w.data
        got = self.env.node_rows()
        missing = wrong_node = dupes = phantoms = out_of_bounds = 0
        examples: list[str] = []

        def note(msg: str) -> None:
            if len(examples) < 10:
                examples.append(msg)

        for t in SHARDING_TABLES:
            where: dict[int, list[str]] = {}
            value: dict[int, int] = {}
            for node, rows in got[t].items():
                for rid, v in rows.items():
                    where.setdefault(rid, []).append(node)
                    value[rid] = v
            acked = set(data.acked[t])
            for rid in acked:
                if rid not in where:
                    missing += 1
                    note(f"{t} id {rid} acknowledged but on no node")
            for rid, nodes in where.items():
                if len(nodes) > 1:
                    dupes += 1
                    note(f"{t} id {rid} on several nodes {nodes}")
                elif nodes[0] != TABLE_NODES[rid % 4]:
                    wrong_node += 1
                    note(f"{t} id {rid} on {nodes[0]}, hash-four says {TABLE_NODES[rid % 4]}")
                if rid not in acked and rid not in data.maybe[t]:
                    phantoms += 1
                    note(f"{t} id {rid} was never inserted by a client")
                lo = data.upd_ok[(t, rid)]
                hi = lo + data.upd_unknown[(t, rid)]
                if not lo <= value[rid] <= hi:
                    out_of_bounds += 1
                    note(f"{t} id {rid}: v={value[rid]}, clients allow [{lo}, {hi}]")
        t = GLOBAL_TABLE
        for rid in data.acked[t]:
            for node in TABLE_NODES:
                v = got[t][node].get(rid)
                if v is None:
                    missing += 1
                    note(f"{t} id {rid} acknowledged but missing on {node}")
                    continue
                lo = data.upd_ok[(t, rid)]
                hi = lo + data.upd_unknown[(t, rid)]
                if not lo <= v <= hi:
                    out_of_bounds += 1
                    note(f"{t} id {rid} on {node}: v={v}, clients allow [{lo}, {hi}]")
        for node in TABLE_NODES:
            for rid in got[t][node]:
                if rid not in data.maybe[t] and rid not in set(data.acked[t]):
                    phantoms += 1
                    note(f"{t} id {rid} on {node} was never inserted by a client")
        self.notes["rows_acknowledged"] = sum(len(v) for v in data.acked.values())
        self.notes["rows_unknown_outcome"] = sum(len(v) for v in data.maybe.values())
        for n, what in ((missing, "acknowledged rows missing"), (wrong_node, "rows on the wrong node"),
                        (dupes, "rows on several nodes"), (phantoms, "rows no client inserted"),
                        (out_of_bounds, "rows whose v is outside what the clients allow")):
            if n:
                self.fail(f"{n} {what}; e.g. " + "; ".join(examples))

    # -- DDL overlap on the backends ------------------------------------------------------------------
    def overlaps(self) -> None:
        """No two DDLs on one table of one node ran at the same time; every OK'd DDL is in the log."""
        logged: dict[str, set[str]] = {}
        intervals: dict[tuple[int, str, str], list[tuple[float, float, int, str]]] = {}
        total = 0
        for bi in range(len(self.env.backends)):
            for start, dur, thread, db, sql in self.env.slow_log(bi):
                t = ddl_table(sql)
                if t not in TABLES:
                    continue
                total += 1
                intervals.setdefault((bi, db, t), []).append((start, start + dur, thread, sql))
                node = next(n for n, (b, d) in NODE_PLACES.items() if b == bi and d == db)
                logged.setdefault(node, set()).add(norm_sql(sql))
        self.notes["backend_ddl_statements"] = total
        found = excused_forced = 0
        forced = {norm_sql(x) for x in self.w.forced}
        for (bi, db, t), ivs in sorted(intervals.items()):
            ivs.sort()
            cur_end, cur = ivs[0][1], ivs[0]
            for iv in ivs[1:]:
                if iv[0] < cur_end - OVERLAP_EPS_S and (norm_sql(cur[3]) in forced or norm_sql(iv[3]) in forced):
                    excused_forced += 1   # an operator released the lock of a running DDL: it allowed this
                elif iv[0] < cur_end - OVERLAP_EPS_S:
                    found += 1
                    if found <= 10:
                        self.fail(f"DDL overlap on backend{bi + 1}.{db}.{t}: [{cur[3]!r} thread {cur[2]} "
                                  f"{cur[0]:.6f}..{cur[1]:.6f}] and [{iv[3]!r} thread {iv[2]} {iv[0]:.6f}..{iv[1]:.6f}]")
                if iv[1] > cur_end:
                    cur_end, cur = iv[1], iv
        self.notes["overlaps_after_kill_force"] = excused_forced
        if found > 10:
            self.fail(f"{found} DDL overlaps in all")
        unseen, excused = [], 0
        stops = [(int(r.target.split(":")[1]), r.start_wall) for r in self.faults.records if r.kind == "backend"]
        for d in self.w.schema.ok_ddls:
            for node in TABLE_NODES:
                if norm_sql(d.sql) not in logged.get(node, set()):
                    bi = NODE_PLACES[node][0]
                    # MariaDB sends OK before it writes the slow log: a shutdown right then loses the row
                    if any(b == bi and d.start_wall - 1 <= at <= d.end_wall + 2 for b, at in stops):
                        excused += 1
                        continue
                    unseen.append(f"{d.sql!r} on {node} (client saw {d.start_wall:.3f}..{d.end_wall:.3f})")
        self.notes["ok_ddls_unlogged_at_a_backend_stop"] = excused
        if unseen:
            self.fail(f"{len(unseen)} DDLs answered OK are not in the backends' slow log (the overlap "
                      f"detector would be blind): e.g. {unseen[:5]}")

    # -- call bounds ---------------------------------------------------------------------------------
    def bounds(self) -> None:
        """No call took longer than its bound, beyond the time its own instance was paused or down."""
        over = []
        for c in self.w.calls:
            bound = DDL_BOUND_S if c.op == "ddl" else DML_BOUND_S
            excused = 0.0
            windows = self.faults.pauses[c.instance] + self.faults.down[c.instance]
            if c.op == "ddl":   # a DDL waits for a silent node until the liveness check gives up on it
                windows = windows + self.faults.silences
            for a, b in windows:
                excused += max(0.0, min(b, c.end) - max(a, c.start))
            took = c.end - c.start
            if took > bound + excused:
                over.append(f"{c.op} on {INSTANCES[c.instance]} took {took:.1f}s (bound {bound:.0f}s, "
                            f"excused {excused:.1f}s paused/down/silent): {c.outcome}")
        longest = max((c.end - c.start for c in self.w.calls), default=0.0)
        self.notes["longest_call_s"] = round(longest, 1)
        self.notes["calls_over_1s"] = len(self.w.calls)
        if over:
            self.fail(f"{len(over)} calls past their bound: " + "; ".join(over[:10]))
