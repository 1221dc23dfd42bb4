"""The differential engine: the same seeded rows through pydble and into one plain MariaDB database,
then every generated statement run on both and the answers compared exactly.

A pydble refusal (1235) is counted by kind; any other difference is a wrong answer. After a write
the whole table is compared; a table that differs is re-synchronised from the reference so one wrong
answer does not cascade into the rest of the run.
"""

from __future__ import annotations

import copy
import re
import time
from concurrent.futures import ThreadPoolExecutor
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import MySQLdb

from .gen import (COLS, DDL, NAMES, TABLES, VIEWS, Case, Generator, as_prepared, insert_sql,
                  seed_rows)

SCHEMA = "diff"
REF_DB = SCHEMA   # same name, so schema-qualified statements run on both
NODE_DB = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2"), "dn5": (0, "db3")}
DOUBLE_TYPES = (4, 5)          # FLOAT, DOUBLE: the last digits depend on the summation order
SCALED_TYPES = (0, 4, 5, 246)  # DECIMAL, FLOAT, DOUBLE, NEWDECIMAL: the decimals count is seen
LOST = (2006, 2013, 2055)      # the connection went away
RELOAD_EVERY = 500
PREPARED_EVERY = 10   # one SELECT in this many runs as PREPARE ... FROM '...' / EXECUTE ... USING on both sides
REF_STATEMENT_TIME_S = 60
LONG_BLOB, BLOB = 251, 252
LONGBLOB_LENGTH = 4294967295   # the length a BLOB-typed (252) column of LONGBLOB / LONGTEXT size carries
# Issue 18 item 4, being fixed in the executor (all-or-nothing multi-node writes): a write that
# fails on one node (a duplicate key) and still leaves its rows on the others.


def proxy_config_for(base: dict[str, Any]) -> dict[str, Any]:
    """proxy_config() plus the differential schema (default node dn5) and its tables."""
    cfg = copy.deepcopy(base)
    tables = {}
    for name, (typ, nodes, fn) in TABLES.items():
        if typ == "default":
            continue
        t: dict[str, Any] = {"type": typ, "nodes": list(nodes)}
        if typ == "sharding":
            t.update(function=fn, column="id")
        tables[name] = t
    cfg["schemas"][SCHEMA] = {"default_node": "dn5", "tables": tables}
    for u in cfg["users"]:
        u["schemas"] = list(u["schemas"]) + [SCHEMA]
    return cfg


@dataclass
class Answer:
    """What one server answered to one statement."""

    error: tuple[int, str] | None = None
    names: tuple[str, ...] = ()
    types: tuple[tuple[int, int | None], ...] = ()
    lengths: tuple[int, ...] = ()
    rows: list[tuple[Any, ...]] | None = None
    affected: int = -1
    info: str | None = None   # an OK's info ("Records: ..", "Rows matched: ..") with its warning count blurred:
                              # a constant's warning comes once from each node of a multi-node statement


@dataclass
class Wrong:
    """One wrong answer: where, what and how it differed."""

    seed: int
    index: int
    sql: str
    why: str
    known: str | None = None   # a difference another change is fixing (named, still reported)


@dataclass
class Stats:
    """What a run did."""

    queries: int = 0
    seconds: float = 0.0
    refusals: Counter[str] = field(default_factory=Counter)
    both_error: Counter[int] = field(default_factory=Counter)
    shapes: Counter[str] = field(default_factory=Counter)
    wrong: list[Wrong] = field(default_factory=list)
    wrong_kinds: Counter[str] = field(default_factory=Counter)

    @property
    def unknown(self) -> list[Wrong]:
        """Wrong answers no other change is known to be fixing."""
        return [w for w in self.wrong if w.known is None]

    def summary(self) -> str:
        """A few lines for the log and for bench/RESULTS.md."""
        lines = [f"{self.queries} statements in {self.seconds:.1f} s "
                 f"({self.queries / max(self.seconds, 1e-9):.0f}/s), "
                 f"{sum(self.refusals.values())} refused (1235), {len(self.wrong)} wrong "
                 f"({len(self.unknown)} not yet named as known)"]
        for kind, n in self.refusals.most_common(25):
            lines.append(f"  refused {n:6d}  {kind}")
        for kind, n in self.wrong_kinds.most_common():
            lines.append(f"  WRONG   {n:6d}  {kind}")
        return "\n".join(lines)


def _refusal_kind(msg: str) -> str:
    """A refusal message with its literals and names blurred, so kinds can be counted."""
    msg = re.sub(r"'[^']*'|`[^`]*`|\b\d+\b", "?", msg)
    return re.sub(r"\bdx_\w+", "T", msg)[:110]


def run_sql(conn: Any, sql: str) -> Answer:
    """One statement on one connection, every value as the text the server sent."""
    cur = conn.cursor()
    try:
        cur.execute(sql)
        desc = cur.description
        if desc:
            return Answer(names=tuple(d[0] for d in desc), types=tuple((d[1], d[5] if d[1] in SCALED_TYPES else None)
                                          for d in desc),
                          lengths=tuple((d[3] or 0) & 0xFFFFFFFF for d in desc),   # mysqlclient: -1 is 2**32-1
                          rows=list(cur.fetchall()), affected=cur.rowcount)
        info = conn.info()
        return Answer(affected=cur.rowcount, info=None if info is None else re.sub(r"Warnings: \d+", "Warnings: N", info))
    except MySQLdb.Error as e:
        code = e.args[0] if e.args and isinstance(e.args[0], int) else -1
        return Answer(error=(code, str(e.args[1] if len(e.args) > 1 else e)))
    finally:
        cur.close()


def _norm(v: Any, fuzzy: bool, double: bool) -> Any:
    if v is None:
        return None
    if isinstance(v, bytes):
        v = v.decode()
    if double:
        try:
            return float(f"{float(v):.9g}")
        except ValueError:
            return v
    if fuzzy:   # utf8mb4_general_ci: case, accents and trailing spaces do not count
        v = unicodedata.normalize("NFD", v.rstrip(" "))
        return "".join(c for c in v if not unicodedata.combining(c)).casefold()
    return v


def normalize(ans: Answer, case: Case) -> list[tuple[Any, ...]]:
    """Rows as comparable tuples (collation-fuzzy columns folded, doubles rounded)."""
    doubles = {i for i, t in enumerate(ans.types) if t[0] in DOUBLE_TYPES}
    return [tuple(_norm(v, i in case.fuzzy, i in doubles) for i, v in enumerate(row))
            for row in ans.rows or []]


def _multiset(rows: list[tuple[Any, ...]]) -> Counter[str]:
    return Counter(repr(r) for r in rows)


def same_column_type(got: tuple[int, int | None], got_length: int,
                     ref: tuple[int, int | None], ref_length: int) -> bool:
    """Whether two column types count as the same answer.

    One pair differs and still counts as the same: LONG_BLOB (251) and BLOB (252) with length 2**32-1,
    the type of a TEXT/JSON expression (JSON_EXTRACT, COALESCE over JSON, ...). MariaDB itself sends 251
    when the rows come straight from the expression and 252 (length 2**32-1, decimals 0, BLOB_FLAG) when
    its plan puts them through a temporary table, and that plan depends on how many rows the server
    holds: the same JOIN ... ORDER BY answers 251 on one MariaDB with six rows and 252 with three
    (issue 18, seeds 124 #33703 and 125 #15875). A node holding a share of the rows may plan otherwise
    than one server holding them all, so neither pydble nor that server can promise either code. The
    values are the same and every driver decodes them alike (PyMySQL and mysqlclient: str; Connector/J:
    String, type name LONGTEXT; mysql2: string), although the raw code (and Connector/J's
    getColumnType for the 251 of length 67108864: VARCHAR against LONGVARCHAR) shows the plan.
    """
    if got == ref:
        return True
    if {got[0], ref[0]} != {LONG_BLOB, BLOB}:
        return False
    return (got_length if got[0] == BLOB else ref_length) == LONGBLOB_LENGTH


def compare(got: Answer, ref: Answer, case: Case) -> str | None:
    """None when pydble answered as MariaDB did; else why not (refusals are handled by the caller)."""
    if ref.error or got.error:
        if ref.error and got.error and ref.error[0] == got.error[0]:
            return None
        return f"pydble {got.error or 'OK'} / MariaDB {ref.error or 'OK'}"
    if got.names != ref.names:
        return f"column names {got.names} / {ref.names}"
    if (got.rows is None) != (ref.rows is None):
        return f"result set {got.rows is not None} / {ref.rows is not None}"
    if got.rows is None:
        if got.affected != ref.affected:
            return f"affected rows {got.affected} / {ref.affected}"
        if got.info != ref.info:
            return f"info {got.info!r} / {ref.info!r}"
        return None
    a, b = normalize(got, case), normalize(ref, case)
    if case.ordered:
        if a != b:
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return f"rows (in order, {len(a)} / {len(b)}) from #{i}: {a[i:i + 4]} / {b[i:i + 4]}"
    elif _multiset(a) != _multiset(b):
        return (f"rows (multiset, {len(a)} / {len(b)}) only pydble: {list((_multiset(a) - _multiset(b)))[:5]}"
                f" only MariaDB: {list((_multiset(b) - _multiset(a)))[:5]}")
    if len(got.types) != len(ref.types) or not all(
            same_column_type(g, gl, r, rl) for g, gl, r, rl in zip(
                got.types, got.lengths or (0,) * len(got.types), ref.types, ref.lengths or (0,) * len(ref.types))):
        return f"column types {got.types} / {ref.types}"
    return None


def _kind_of(why: str, case: Case) -> str:
    return f"{case.shape}: {why.split(' ', 2)[0]} {why.split(' ', 2)[1] if ' ' in why else ''}"


class Differ:
    """Runs seeds against a pydble client port and a reference MariaDB database."""

    def __init__(self, proxy_port: int, ref_port: int, backend_ports: Sequence[int] = ()) -> None:
        self.proxy_port, self.ref_port = proxy_port, ref_port
        self.backend_ports = list(backend_ports)
        self.px = self._proxy()
        self.ref = self._ref()
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="reference")

    def _proxy(self) -> Any:
        return MySQLdb.connect(host="127.0.0.1", port=self.proxy_port, user="test", passwd="111111",
                               db=SCHEMA, charset="utf8mb4", autocommit=True, conv={})

    def _ref(self) -> Any:
        conn = MySQLdb.connect(host="127.0.0.1", port=self.ref_port, user="root", passwd="",
                               db=REF_DB, charset="utf8mb4", autocommit=True, conv={})
        # a reference statement that never ends (a MariaDB bug) is an error in the report, not a stuck run
        self._must(conn, f"SET SESSION max_statement_time = {REF_STATEMENT_TIME_S}")
        return conn

    def _must(self, conn: Any, sql: str) -> Answer:
        ans = run_sql(conn, sql)
        if ans.error:
            raise RuntimeError(f"set-up statement failed: {sql[:200]}: {ans.error}")
        return ans

    def _reference(self, sql: str, dml: bool) -> Answer:
        """The reference's answer; a write stays open in a transaction until pydble's is known."""
        if dml:
            self._must(self.ref, "BEGIN")
        return run_sql(self.ref, sql)

    def _prepared(self, sql: str) -> tuple[Answer, Answer] | None:
        """A SELECT run as PREPARE + EXECUTE ... USING on both sides (None: the reference cannot prepare
        it, e.g. a `?` where MariaDB takes none): pydble's answer, the reference's."""
        text, using = as_prepared(sql)
        quoted = "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
        if run_sql(self.ref, f"PREPARE diff_ps FROM {quoted}").error:
            return None
        execute = "EXECUTE diff_ps" + (f" USING {', '.join(using)}" if using else "")
        got = run_sql(self.px, f"PREPARE diff_ps FROM {quoted}")
        if got.error is None:
            got = run_sql(self.px, execute)
        return got, run_sql(self.ref, execute)

    def create(self) -> None:
        """Drop and create every table on both sides."""
        for t in NAMES:
            for conn in (self.px, self.ref):
                self._must(conn, f"DROP TABLE IF EXISTS {t}")
                self._must(conn, DDL.format(t=t))
        for v, select in VIEWS.items():
            for conn in (self.px, self.ref):
                self._must(conn, f"CREATE OR REPLACE VIEW {v} AS {select}")

    def load(self, seed: int) -> None:
        """The seeded rows of every table, through pydble and into the reference."""
        for t in NAMES:
            rows = seed_rows(seed, t)
            for conn in (self.px, self.ref):
                self._must(conn, f"DELETE FROM {t}")
                self._must(conn, insert_sql(t, rows))

    def contents(self, conn: Any, table: str) -> Answer:
        return run_sql(conn, f"SELECT {', '.join(COLS)} FROM {table} ORDER BY id")

    def resync(self, table: str) -> None:
        """Make pydble's table hold the reference's rows again."""
        rows = [tuple(v.decode() if isinstance(v, bytes) else v for v in r)
                for r in self._must(self.ref, f"SELECT {', '.join(COLS)} FROM {table}").rows or []]
        self._must(self.px, f"DELETE FROM {table}")
        if rows:
            self._must(self.px, insert_sql(table, rows))

    def placement(self) -> list[str]:
        """Problems in where rows live: a sharded row on several nodes, a global table that differs."""
        if not self.backend_ports:
            return []
        conns = {}
        problems = []
        try:
            for node, (i, db) in NODE_DB.items():
                conns[node] = MySQLdb.connect(host="127.0.0.1", port=self.backend_ports[i], user="root",
                                              passwd="", db=db, charset="utf8mb4", conv={})
            for t, (typ, nodes, _) in TABLES.items():
                per = {n: run_sql(conns[n], f"SELECT {', '.join(COLS)} FROM {t} ORDER BY id").rows
                       for n in nodes}
                if typ == "global" and any(per[n] != per[nodes[0]] for n in nodes):
                    problems.append(f"global table {t} differs between its nodes")
                if typ == "sharding":
                    ids = Counter(r[0] for rows in per.values() for r in rows or [])
                    dup = [i for i, c in ids.items() if c > 1]
                    if dup:
                        problems.append(f"sharding table {t}: ids {dup[:5]} on several nodes")
        finally:
            for c in conns.values():
                c.close()
        return problems

    def run(self, seed: int, queries: int, stats: Stats, log: Any = None, first: int = 0) -> None:
        """Run statements `first` to `queries` - 1 of one seed, adding to stats; with `first`, the ones since
        the reload before it run too (the tables then hold what a whole run had), and from `first` on
        every statement's verdict is logged."""
        gen = Generator(seed)
        begin = first - first % RELOAD_EVERY
        for _ in range(begin):
            gen.next()
        self.load(seed)
        start = time.monotonic()
        for index in range(begin, queries):
            if index > begin and index % RELOAD_EVERY == 0:
                self.load(seed)
            case = gen.next()
            stats.shapes[case.shape] += 1
            dml = case.kind == "dml" and case.table
            both = self._prepared(case.sql) if case.kind == "select" and index % PREPARED_EVERY == 3 else None
            if both is not None:
                got, ref = both
            else:
                pending = self.pool.submit(self._reference, case.sql, bool(dml))
                got = run_sql(self.px, case.sql)
                ref = pending.result()   # both servers work at once: half the wall time
            if dml:   # a statement pydble refused must change nothing: neither does the reference
                self._must(self.ref, "ROLLBACK" if got.error and not ref.error else "COMMIT")
            if got.error and got.error[0] in LOST:
                self.px = self._proxy()
            if got.error and got.error[0] == 1235 and not (ref.error and ref.error[0] == 1235):
                stats.refusals[_refusal_kind(got.error[1])] += 1
                why = None
            elif ref.error and got.error:
                stats.both_error[ref.error[0]] += 1
                why = compare(got, ref, case)
            else:
                why = compare(got, ref, case)
            if dml:
                after = compare(self.contents(self.px, case.table), self.contents(self.ref, case.table),
                                Case("", "select", "contents", ordered=True))
                if after:
                    why = (why + "; " if why else "") + "then the table differs: " + after
                    self.resync(case.table)
            if why:
                known = None
                stats.wrong.append(Wrong(seed, index, case.sql, why, known))
                stats.wrong_kinds[known or _kind_of(why, case)] += 1
                if log:
                    log(f"WRONG seed={seed} #{index}: {case.sql}\n    {why}")
            elif log and first and index >= first:
                verdict = "refused" if got.error and got.error[0] == 1235 else "same"
                log(f"{verdict} seed={seed} #{index}: {case.sql}")
        stats.queries += max(queries - begin, 0)
        stats.seconds += time.monotonic() - start
        for p in self.placement():
            stats.wrong.append(Wrong(seed, queries, "(placement check)", p))
            stats.wrong_kinds["placement"] += 1

    def close(self) -> None:
        self.pool.shutdown()
        for c in (self.px, self.ref):
            try:
                c.close()
            except Exception:
                pass
