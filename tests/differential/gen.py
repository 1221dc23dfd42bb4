"""A seeded random SQL generator (in the spirit of SQLancer / go-randgen) over the differential schema.

Every table has the same shape, so any two can be joined or UNIONed; the rows are seeded, with NULLs,
duplicates, case and trailing-space variants under a case-insensitive collation, dates, decimals and
JSON. Each generated statement says how its answer may be compared: in order (its ORDER BY is total)
or as a multiset, and which output columns only hold a value up to the collation (the representative
MariaDB picks for a group of 'a' = 'A' = 'a ' is not determined).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

# table name -> (pydble type, nodes, function) for the proxy config; the reference has them all.
TABLES: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "dx_t2": ("sharding", ("dn1", "dn2"), "hash-two"),
    "dx_t4": ("sharding", ("dn1", "dn2", "dn3", "dn4"), "hash-four"),
    "dx_t4b": ("sharding", ("dn1", "dn2", "dn3", "dn4"), "hash-four"),
    "dx_g": ("global", ("dn1", "dn2", "dn3", "dn4"), None),
    "dx_s": ("single", ("dn2",), None),
    "dx_d": ("default", ("dn5",), None),   # not configured: the schema's default node
}
NAMES = tuple(TABLES)
SHARDED = tuple(t for t, v in TABLES.items() if v[0] == "sharding")
# views over those tables, created on both sides and read like tables (never written): dx_vs lives on
# dx_s's node (pushed down), the others are kept by pydble and expanded into the statements that read them
VIEWS: dict[str, str] = {
    "dx_v4": "SELECT * FROM dx_t4",
    "dx_v2k": "SELECT id, k, s, b, d, dt, m, j FROM dx_t2 WHERE k IS NOT NULL",
    "dx_vg": "SELECT * FROM dx_g",
    "dx_vs": "SELECT * FROM dx_s",
}

DDL = ("CREATE TABLE {t} (id INT NOT NULL PRIMARY KEY, k INT NULL, "
       "s VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NULL, "
       "b VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL, "
       "d DATE NULL, dt DATETIME NULL, m DECIMAL(10,2) NULL, j JSON NULL)")
COLS = ("id", "k", "s", "b", "d", "dt", "m", "j")
INT_COLS = ("id", "k")
NUM_COLS = ("id", "k", "m")

S_VALUES = ["a", "A", "a ", "b", "B", "abc", "ABC", "Zed", "zed", "é", "E", "", None]
B_VALUES = ["a", "A", "b", "B", "B ", "abc", "x y", "Zed", None]   # utf8mb4_bin still pads: 'B' = 'B ' 
D_VALUES = ["2024-01-01", "2024-02-29", "2023-12-31", "2025-06-15", None]
DT_VALUES = ["2024-01-01 00:00:00", "2024-01-01 12:30:00", "2024-02-29 23:59:59",
             "2023-12-31 08:00:00", None]
M_VALUES = ["1.50", "-2.25", "0.00", "100.10", "1.5", "7", "-0.01", None]
J_VALUES = ['{"a": 1, "b": "x"}', '{"a": 2}', '[1, 2]', '{"a": null}', '{"b": "y"}', None]
K_VALUES = [0, 1, 1, 2, 3, 5, -1, None, None]


def lit(v: object) -> str:
    """A SQL literal for a Python value (None is NULL)."""
    if v is None:
        return "NULL"
    if isinstance(v, (int, float)):
        return str(v)
    return "'" + str(v).replace("\\", "\\\\").replace("'", "''") + "'"


def seed_rows(seed: int, table: str, n: int = 36) -> list[tuple[object, ...]]:
    """The seeded rows of one table (ids unique, everything else with NULLs and duplicates)."""
    r = random.Random(f"{seed}:{table}")
    ids = r.sample(range(-6, 90), n)
    return [(i, r.choice(K_VALUES), r.choice(S_VALUES), r.choice(B_VALUES), r.choice(D_VALUES),
             r.choice(DT_VALUES), r.choice(M_VALUES), r.choice(J_VALUES)) for i in ids]


def insert_sql(table: str, rows: list[tuple[object, ...]]) -> str:
    """One multi-row INSERT of rows into table."""
    return (f"INSERT INTO {table} ({', '.join(COLS)}) VALUES "
            + ", ".join("(" + ", ".join(lit(v) for v in row) + ")" for row in rows))


_TEXT = re.compile(r"\b[sb]\b")


def texty(expr: str) -> bool:
    """Whether a value reads a text column: a group or DISTINCT of 'a' and 'a ' (or 'a' and 'A'
    under general_ci) shows whichever of them MariaDB met first, so only its class is determined."""
    return bool(_TEXT.search(expr))


@dataclass
class Case:
    """One generated statement and how to compare its answer."""

    sql: str
    kind: str                      # "select" or "dml"
    shape: str                     # a short name of the generator branch (for statistics)
    ordered: bool = False          # the ORDER BY is total: compare in order
    fuzzy: set[int] = field(default_factory=set)  # output columns equal only up to the collation
    table: str | None = None       # the table a DML statement changes


class Generator:
    """Statements drawn from one seed; the same seed gives the same statements."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.next_id = 1000

    # -- small pieces ---------------------------------------------------------------------------

    def value(self, col: str) -> str:
        r = self.r
        if col == "id":
            v = r.randint(-6, 95)
            form = r.randrange(12)
            if form == 0:
                return f"'{v}'"            # a string compared with the INT sharding key
            if form == 1:
                return f"{v}.0"
            if form == 2:
                return f"{v}.5"
            if form == 3:
                return f"'{v} '"
            return str(v)
        if col == "k":
            return str(r.choice([0, 1, 2, 3, 5, -1, 9]))
        if col == "s":
            return lit(r.choice([v for v in S_VALUES if v is not None] + ["A ", "ZED"]))
        if col == "b":
            return lit(r.choice([v for v in B_VALUES if v is not None]))
        if col == "d":
            return lit(r.choice([v for v in D_VALUES if v is not None]))
        if col == "dt":
            return lit(r.choice([v for v in DT_VALUES if v is not None] + ["2024-01-01"]))
        if col == "m":
            return r.choice(["1.5", "0", "-2.25", "100.1", "7", "1.50"])
        return lit(r.choice([v for v in J_VALUES if v is not None]))

    def atom(self, q: str = "") -> str:
        """One simple predicate on a column (q is a table qualifier like 'a.')."""
        r = self.r
        col = r.choice(["id", "id", "id", "k", "s", "b", "d", "dt", "m", "j"])
        c = q + col
        if r.random() < 0.03:
            return r.choice(["1 = 0", "1 = 1", "NULL", f"{c} = {c}"])
        if col == "j":
            return r.choice([f"JSON_EXTRACT({c}, '$.a') = {r.choice([1, 2])}",
                             f"JSON_TYPE({c}) = 'ARRAY'", f"{c} IS NULL",
                             f"JSON_UNQUOTE(JSON_EXTRACT({c}, '$.b')) = 'x'"])
        form = r.randrange(9)
        if form == 0:
            return f"{c} IS {r.choice(['', 'NOT '])}NULL"
        if form == 1:
            vals = ", ".join(self.value(col) for _ in range(r.randint(1, 5)))
            return f"{c} {r.choice(['', 'NOT '])}IN ({vals})"
        if form == 2:
            a, b = sorted((self.value(col), self.value(col)), key=lambda x: (len(x), x))
            return f"{c} BETWEEN {a} AND {b}"
        if form == 3 and col in ("s", "b"):
            return f"{c} LIKE {lit(r.choice(['a%', 'A%', '%b%', '_', 'z%']))}"
        if form == 4 and col in NUM_COLS:
            return f"{c} % 3 = {r.randint(0, 2)}"
        op = r.choice(["=", "=", "<", "<=", ">", ">=", "<>", "<=>"])
        return f"{c} {op} {self.value(col)}"

    def cond(self, q: str = "", depth: int = 0) -> str:
        r = self.r
        x = r.random()
        if depth < 2 and x < 0.2:
            return f"({self.cond(q, depth + 1)} AND {self.cond(q, depth + 1)})"
        if depth < 2 and x < 0.32:
            return f"({self.cond(q, depth + 1)} OR {self.cond(q, depth + 1)})"
        if depth < 2 and x < 0.36:
            return f"NOT ({self.cond(q, depth + 1)})"
        return self.atom(q)

    def expr(self, q: str = "") -> tuple[str, bool]:
        """A scalar expression over one row; the flag says its value depends on the collation only."""
        r = self.r
        col = r.choice(COLS)
        c = q + col
        form = r.randrange(10)
        if form < 4:
            return c, False
        if form == 4 and col in NUM_COLS:
            return f"{c} {r.choice(['+', '-', '*'])} {r.choice(['1', '2', '0.5'])}", False
        if form == 5:
            return f"COALESCE({c}, {self.value(col)})", False
        if form == 6 and col in ("s", "b"):
            return r.choice([f"UPPER({c})", f"CONCAT({c}, '-', {q}id)", f"LENGTH({c})"]), False
        if form == 7 and col in ("d", "dt"):
            return r.choice([f"YEAR({c})", f"DATE_FORMAT({c}, '%Y/%m')", f"DATEDIFF({c}, '2024-01-01')",
                             f"{c} + INTERVAL 1 DAY"]), False
        if form == 8:
            return f"CASE WHEN {self.atom(q)} THEN 1 ELSE 0 END", False
        if form == 9 and col == "j":
            return f"JSON_EXTRACT({c}, '$.a')", False
        return c, False

    def select_list(self, q: str = "", n: int | None = None) -> tuple[list[str], list[str]]:
        """Output expressions (some with aliases); returns (items, raw columns)."""
        r = self.r
        if r.random() < 0.1 and not q:
            return ["*"], list(COLS)
        items, raws = [], []
        for i in range(n or r.randint(1, 4)):
            e, _ = self.expr(q)
            raws.append(e)
            items.append(f"{e} AS c{i}" if r.random() < 0.4 else e)
        return items, raws

    def table(self) -> str:
        """A table to read: now and then a view over one."""
        r = self.r
        return r.choice(tuple(VIEWS)) if r.random() < 0.15 else r.choice(NAMES)

    def where(self, q: str = "") -> str:
        return f" WHERE {self.cond(q)}" if self.r.random() < 0.75 else ""

    def limit(self) -> str:
        r = self.r
        x = r.random()
        if x < 0.5:
            return ""
        if x < 0.8:
            return f" LIMIT {r.randint(0, 12)}"
        if x < 0.9:
            return f" LIMIT {r.randint(0, 10)}, {r.randint(0, 10)}"
        return f" LIMIT {r.randint(0, 10)} OFFSET {r.randint(0, 10)}"

    # -- statements -----------------------------------------------------------------------------

    def next(self) -> Case:
        r = self.r
        x = r.random()
        if x < 0.22:
            return self.simple()
        if x < 0.30:
            return self.aggregate()
        if x < 0.46:
            return self.group()
        if x < 0.53:
            return self.distinct()
        if x < 0.61:
            return self.union()
        if x < 0.66:
            return self.join()
        if x < 0.71:
            return self.join_agg() if r.random() < 0.6 else self.routing()
        if x < 0.79:
            return self.subquery()
        if x < 0.85:
            return self.materialized()
        return self.dml()

    def simple(self) -> Case:
        r = self.r
        t = self.table()
        items, _ = self.select_list()
        sql = f"SELECT {', '.join(items)} FROM {t}{self.where()}"
        if r.random() < 0.7:
            keys = [r.choice(["k", "s", "b", "d", "m", "dt", "k DESC", "s DESC", "m DESC"])
                    for _ in range(r.randint(0, 2))]
            keys.append(r.choice(["id", "id DESC", "id + 0", "-id"]))
            return Case(sql + " ORDER BY " + ", ".join(keys) + self.limit(), "select", "simple-order",
                        ordered=True)
        return Case(sql, "select", "simple")

    AGGS = ["COUNT(*)", "COUNT({c})", "SUM({n})", "MIN({c})", "MAX({c})", "AVG({n})",
            "COUNT(DISTINCT {c})", "GROUP_CONCAT({c} ORDER BY id)", "STDDEV({n})", "VARIANCE({n})",
            "GROUP_CONCAT(DISTINCT {n} ORDER BY {n})", "BIT_OR(k)", "SUM(DISTINCT {n})",
            "STDDEV_SAMP({n})", "COUNT(*) + 1", "MAX({n}) - MIN({n})",
            "STD({n})", "STDDEV_POP({n})", "VAR_POP({n})", "VAR_SAMP({n})", "BIT_AND(k)", "BIT_XOR(id)",
            "GROUP_CONCAT({c} ORDER BY {c} DESC, id SEPARATOR '|')", "GROUP_CONCAT(DISTINCT k ORDER BY k DESC)",
            "COUNT(DISTINCT k, {c})"]

    def agg(self) -> tuple[str, bool]:
        r = self.r
        a = r.choice(self.AGGS)
        c = r.choice(COLS[:-1])
        n = r.choice(NUM_COLS)
        fuzzy = c in ("s", "b") and (a.startswith("MIN") or a.startswith("MAX"))
        return a.format(c=c, n=n), fuzzy

    def aggregate(self) -> Case:
        r = self.r
        t = self.table()
        outs = [self.agg() for _ in range(r.randint(1, 3))]
        sql = f"SELECT {', '.join(o for o, _ in outs)} FROM {t}{self.where()}"
        return Case(sql, "select", "aggregate", ordered=True,
                    fuzzy={i for i, (_, f) in enumerate(outs) if f})

    def group(self) -> Case:
        r = self.r
        t = self.table()
        keys = r.sample(["k", "s", "b", "d", "YEAR(dt)", "m", "j", "k IS NULL", "LEFT(b, 1)"],
                        r.randint(1, 2))
        outs = [self.agg() for _ in range(r.randint(1, 3))]
        items = keys + [o for o, _ in outs]
        fuzzy = {i for i, k in enumerate(keys) if texty(k)}
        fuzzy |= {len(keys) + i for i, (_, f) in enumerate(outs) if f}
        if "s" in keys:   # a GROUP_CONCAT over a group of 'a' and 'A' still lists both, fine
            pass
        alias = r.random() < 0.3
        sel = [f"{e} AS g{i}" if alias else e for i, e in enumerate(items)]
        sql = f"SELECT {', '.join(sel)} FROM {t}{self.where()} GROUP BY {', '.join(keys)}"
        if r.random() < 0.12:   # super-aggregate rows; MariaDB orders by the keys (ORDER BY is refused)
            sql += " WITH ROLLUP"
            if r.random() < 0.3:
                sql += f" HAVING COUNT(*) {r.choice(['>', '>=', '='])} {r.randint(1, 3)}"
            return Case(sql + self.limit(), "select", "group-rollup", ordered=True, fuzzy=fuzzy)
        if r.random() < 0.3:
            sql += " HAVING " + r.choice([f"COUNT(*) {r.choice(['>', '>=', '='])} {r.randint(1, 3)}",
                                          f"SUM(m) > {r.choice(['0', '1.5', '-1'])}",
                                          f"MAX(b) >= {self.value('b')}", f"MIN(s) < {self.value('s')}",
                                          f"MAX(d) > {self.value('d')}"])
        if alias and r.random() < 0.2:
            sql += f" HAVING g{len(keys)} IS NOT NULL"
        if r.random() < 0.6:
            order = [f"g{i}" if alias and r.random() < 0.5 else k for i, k in enumerate(keys)]
            if r.random() < 0.3:
                order = [o + " DESC" for o in order]
            return Case(sql + " ORDER BY " + ", ".join(order) + self.limit(), "select", "group-order",
                        ordered=True, fuzzy=fuzzy)
        if r.random() < 0.3:   # by an aggregate (or its alias), then the keys: total
            first = f"g{len(keys)}" if alias else outs[0][0]
            order = f" ORDER BY {first} {r.choice(['', 'DESC'])}, {', '.join(keys)}"
            return Case(sql + order + self.limit(), "select", "group-order-agg", ordered=True,
                        fuzzy=fuzzy)
        return Case(sql, "select", "group", fuzzy=fuzzy)

    def distinct(self) -> Case:
        r = self.r
        t = self.table()
        cols = r.sample(["k", "s", "b", "d", "m", "YEAR(d)", "k % 2", "j", "dt", "UPPER(b)"],
                        r.randint(1, 3))
        fuzzy = {i for i, c in enumerate(cols) if texty(c)}
        sql = f"SELECT DISTINCT {', '.join(cols)} FROM {t}{self.where()}"
        if r.random() < 0.5:
            return Case(sql + " ORDER BY " + ", ".join(cols) + self.limit(), "select", "distinct-order",
                        ordered=True, fuzzy=fuzzy)
        return Case(sql, "select", "distinct", fuzzy=fuzzy)

    SETOPS = [" UNION ", " UNION ", " UNION ALL ", " UNION ALL ", " UNION DISTINCT ", " INTERSECT ",
              " EXCEPT ", " INTERSECT ALL ", " EXCEPT ALL "]

    def union(self) -> Case:
        """UNION / INTERSECT / EXCEPT [ALL] over any tables: plain or parenthesized branches (with their
        own ORDER BY ... LIMIT), a trailing ORDER BY / LIMIT, now and then branches whose column types or
        collations differ (utf8mb4_bin meets general_ci: the _bin collation wins)."""
        r = self.r
        n = r.randint(1, 3)
        cols = r.sample(["id", "k", "s", "b", "d", "m"], n)
        nparts = r.randint(2, 3)
        lists = [list(cols) for _ in range(nparts)]
        mixed = r.random() < 0.08
        if mixed:   # another column in one branch: s for b (collations) or anything (types)
            j, i = r.randrange(1, nparts), r.randrange(n)
            swap = {"s": "b", "b": "s"}.get(cols[i]) if r.random() < 0.6 else r.choice(["id", "k", "s", "m"])
            lists[j][i] = swap or cols[i]
        if r.random() < 0.1:   # a literal column: coercible, and of another length in every branch
            for k, lst in enumerate(lists):
                lst.append(lit("x" * (k + 1)) + (" AS l" if k == 0 else ""))
        parts = []
        for lst in lists:
            body = f"SELECT {', '.join(lst)} FROM {self.table()}{self.where()}"
            if r.random() < 0.15:
                body = f"({body} ORDER BY id{r.choice(['', ' DESC'])} LIMIT {r.randint(0, 6)})"
            parts.append(body)
        ops = [r.choice(self.SETOPS) if r.random() < 0.7 else r.choice(self.SETOPS[:4])
               for _ in range(nparts - 1)]
        if " INTERSECT ALL " in ops and " EXCEPT ALL " in ops:
            # MariaDB 10.11 can loop forever on `a INTERSECT ALL b EXCEPT ALL c ORDER BY ...` (seen in
            # the differential run: the reference query ran for 25 minutes): not drawn
            ops = [" EXCEPT " if op == " EXCEPT ALL " else op for op in ops]
        sql = parts[0] + "".join(op + p for op, p in zip(ops, parts[1:]))
        dups = any("ALL" in op for op in ops)
        width = len(lists[0])
        texts = [i for i in range(width) if any(texty(lst[i]) for lst in lists)]
        # any step that compares rows keeps one of several equal rows ('a', 'A', 'a '): which one is not
        # determined (EXCEPT ALL repeats the first one it met)
        fuzzy = set(texts) if any(op.strip() != "UNION ALL" for op in ops) else set()
        shape = "union" if all(op.strip() in ("UNION", "UNION ALL") for op in ops) else "setop"
        if r.random() < 0.45:
            keys = [str(i + 1) if r.random() < 0.4 else (cols[i] if i < n else "l") for i in range(width)]
            if r.random() < 0.3:
                keys = [k + " DESC" for k in keys]
            order = " ORDER BY " + ", ".join(keys)
            # duplicates (ALL) tie, and so do a, A and 'a ' under general_ci: only a distinct result is total
            total = not dups
            return Case(sql + order + (self.limit() if total else ""), "select", shape + "-order",
                        ordered=total, fuzzy=fuzzy)
        return Case(sql, "select", shape, fuzzy=fuzzy)

    def join(self) -> Case:
        r = self.r
        if r.random() < 0.4:
            return self.cross_join()
        a = self.table()
        b = r.choice([a, a, self.table()])
        on = r.choice(["a.id = b.id", "a.id = b.id", "a.k = b.k", "a.s = b.s", "a.id = b.k"])
        kind = r.choice(["JOIN", "JOIN", "LEFT JOIN", "INNER JOIN"])
        ia, _ = self.select_list("a.", r.randint(1, 2))
        ib, _ = self.select_list("b.", r.randint(1, 2))
        if ia == ["*"] or ib == ["*"]:
            ia, ib = ["a.id"], ["b.id"]
        items = [f"{e} AS x{i}" for i, e in enumerate(ia + ib)]
        sql = f"SELECT {', '.join(items)} FROM {a} a {kind} {b} b ON {on}"
        if r.random() < 0.6:
            sql += f" WHERE {self.cond(r.choice(['a.', 'b.']))}"
        if r.random() < 0.5:
            return Case(sql + " ORDER BY a.id, b.id" + self.limit(), "select", "join-order", ordered=True)
        return Case(sql, "select", "join")

    def cross_join(self) -> Case:
        """Two tables on different shardingNodes: pydble joins them itself (issue 18)."""
        r = self.r
        a, b = r.choice([("dx_t2", "dx_t4"), ("dx_t4", "dx_s"), ("dx_s", "dx_d"), ("dx_t2", "dx_d"),
                         ("dx_d", "dx_t4b"), ("dx_s", "dx_t2"), ("dx_g", "dx_d"), ("dx_v2k", "dx_s")])
        on = r.choice(["a.k = b.k", "a.s = b.s", "a.b = b.b", "a.id = b.k", "a.d = b.d", "a.m = b.m",
                       "a.k = b.k AND a.s = b.s", "b.k = a.id", "a.k = b.s", "a.dt = b.d"])
        if r.random() < 0.2:
            on += f" AND {self.atom('b.')}"
        kind = r.choice(["JOIN", "LEFT JOIN", "INNER JOIN", "LEFT OUTER JOIN"])
        items = [self.expr(q)[0] for q in ("a.",) * r.randint(1, 2) + ("b.",) * r.randint(1, 2)]
        sql = f"SELECT {', '.join(f'{e} AS x{i}' for i, e in enumerate(items))} FROM {a} a {kind} {b} b ON {on}"
        if r.random() < 0.6:
            sql += f" WHERE {self.cond(r.choice(['a.', 'b.']))}"
        if r.random() < 0.5:
            return Case(sql + " ORDER BY a.id, b.id" + self.limit(), "select", "cross-join-order", ordered=True)
        return Case(sql, "select", "cross-join")

    def join_agg(self) -> Case:
        """Aggregates, DISTINCT and LIMIT over a join the nodes can run (co-located or global)."""
        r = self.r
        a, b = r.choice([("dx_t4", "dx_t4b"), ("dx_t4", "dx_t4"), ("dx_t2", "dx_t2"),
                         ("dx_t4", "dx_g"), ("dx_t2", "dx_g"), ("dx_g", "dx_t4b")])
        on = "a.id = b.id" if b != "dx_g" else r.choice(["a.k = b.k", "a.id = b.id", "a.s = b.s"])
        kind = r.choice(["JOIN", "LEFT JOIN"])
        where = f" WHERE {self.cond(r.choice(['a.', 'b.']))}" if r.random() < 0.5 else ""
        base = f"FROM {a} a {kind} {b} b ON {on}{where}"
        form = r.randrange(3)
        if form == 0:
            key = r.choice(["a.k", "b.k", "a.b", "b.d", "a.s"])
            agg = r.choice(["COUNT(*)", "SUM(b.m)", "MAX(a.b)", "COUNT(DISTINCT b.k)", "AVG(a.k)", "MIN(b.s)"])
            sql = f"SELECT {key} AS g, {agg} AS v {base} GROUP BY {key} ORDER BY {key}"
            fuzzy = {0} if texty(key) else set()
            if agg in ("MIN(b.s)", "MAX(a.b)"):
                fuzzy.add(1)
            return Case(sql + self.limit(), "select", "join-group", ordered=True, fuzzy=fuzzy)
        if form == 1:
            cols = r.sample(["a.k", "b.b", "a.d", "b.m"], r.randint(1, 2))
            sql = f"SELECT DISTINCT {', '.join(cols)} {base} ORDER BY {', '.join(cols)}"
            return Case(sql + self.limit(), "select", "join-distinct", ordered=True,
                        fuzzy={i for i, c in enumerate(cols) if texty(c)})
        sql = f"SELECT COUNT(*), SUM(a.m), MAX(b.dt) {base}"
        return Case(sql, "select", "join-aggregate", ordered=True)

    def routing(self) -> Case:
        """Predicates on the sharding key the router has to read right (or scatter)."""
        r = self.r
        t = r.choice(SHARDED)
        v1, v2 = self.value("id"), self.value("id")
        cond = r.choice([f"id = {v1} OR id = {v2}", f"id = {v1} AND id = {v2}", f"id + 0 = {v1}",
                         f"{v1} = id", f"id IN ({v1}, {v2}, NULL)", f"id NOT IN ({v1}, {v2})",
                         f"(id = {v1} OR k = 1) AND id = {v2}", f"id = {v1} OR id IS NULL",
                         f"id BETWEEN {v1} AND {v1}", f"-id = {v1}", f"id = {v1} AND k IS NULL",
                         f"id IN (SELECT id FROM {t} WHERE id = {v2})", f"id = ({v1})",
                         f"`id` = {v1}", f"{t}.id = {v1}", f"id = CAST({v1} AS SIGNED)"])
        qual = f"{'diff.' if r.random() < 0.2 else ''}{t}"
        return Case(f"SELECT id, k, s AS `S` FROM {qual} WHERE {cond} ORDER BY id", "select",
                    "routing", ordered=True)

    def subquery(self) -> Case:
        r = self.r
        t, u = self.table(), self.table()
        form = r.randrange(4)
        if form == 0:
            col = r.choice(["id", "k", "s"])
            sql = (f"SELECT id, k FROM {t} WHERE {col} {r.choice(['IN', 'NOT IN'])} "
                   f"(SELECT {col} FROM {u}{self.where()})")
        elif form == 1:
            sql = f"SELECT id, (SELECT MAX(m) FROM {u}) AS mx FROM {t}{self.where()}"
        elif form == 2:
            sql = (f"SELECT id FROM {t} x WHERE {r.choice(['', 'NOT '])}EXISTS "
                   f"(SELECT 1 FROM {u} y WHERE y.k = x.k)")
        else:
            inner = r.choice([f"SELECT k, s FROM {t}{self.where()}",
                              f"SELECT DISTINCT k, s FROM {t}",
                              f"SELECT k, s FROM {t} ORDER BY id LIMIT {r.randint(1, 20)}",
                              f"SELECT k, COUNT(*) AS s FROM {t} GROUP BY k"])
            sql = f"SELECT q.k, COUNT(*) FROM ({inner}) q GROUP BY q.k ORDER BY q.k"
            return Case(sql, "select", "subquery-from", ordered=True)
        if r.random() < 0.5:
            return Case(sql + " ORDER BY id" + self.limit(), "select", f"subquery{form}-order", ordered=True)
        return Case(sql, "select", f"subquery{form}")

    # tables on different nodes (and a view pydble expands): read together only over copies of their rows
    APART = ("dx_t2", "dx_t4", "dx_t4b", "dx_s", "dx_d", "dx_g", "dx_v2k")

    def materialized(self) -> Case:
        """Reads no per-node statement can answer (issue 18): window functions over several nodes, JOINs
        of three tables, non-equi and outer joins, subqueries (correlated or not) and derived tables over
        tables on different nodes; pydble answers them over temporary copies of their rows."""
        r = self.r
        a, b, c = (r.choice(self.APART) for _ in range(3))
        form = r.randrange(8)
        if form == 0:
            part = r.choice(["k", "s", "d", "k IS NULL", "b"])
            fn = r.choice(["ROW_NUMBER()", "RANK()", "DENSE_RANK()", "SUM(m)", "COUNT(*)", "MAX(k)", "AVG(m)",
                           "LAG(b)", "FIRST_VALUE(id)", "NTILE(3)", "CUME_DIST()"])
            over = f"PARTITION BY {part} ORDER BY {r.choice(['id', 'k, id', 'm DESC, id', 'dt, id'])}"
            if r.random() < 0.3:
                over += " ROWS BETWEEN 1 PRECEDING AND CURRENT ROW"
            sql = (f"SELECT id, {fn} OVER ({over}) AS w, COUNT(*) OVER () AS n FROM {a}{self.where()} "
                   f"ORDER BY id{self.limit()}")
            return Case(sql, "select", "window", ordered=True)
        if form == 1:
            kind1, kind2 = r.choice(["JOIN", "LEFT JOIN"]), r.choice(["JOIN", "LEFT JOIN", "RIGHT JOIN"])
            on1 = r.choice(["a.k = b.k", "a.s = b.s", "a.id = b.k", "a.b = b.b"])
            on2 = r.choice(["c.k = b.k", "c.id = a.k", "c.d = a.d", "c.s = b.s AND c.k = a.k"])
            where = f" WHERE {self.cond(r.choice(['a.', 'b.', 'c.']))}" if r.random() < 0.5 else ""
            sql = (f"SELECT a.id, b.id, c.id, b.m FROM {a} a {kind1} {b} b ON {on1} {kind2} {c} c ON {on2}"
                   f"{where} ORDER BY a.id, b.id, c.id")
            return Case(sql, "select", "join3", ordered=True)
        if form == 2:
            on = r.choice(["a.k < b.k", "a.m >= b.m", "a.s < b.s", "a.d BETWEEN b.d AND b.d + INTERVAL 1 MONTH",
                           "a.k <> b.k AND a.id < b.id", "a.k = b.k OR a.s = b.s"])
            if r.random() < 0.3:
                on += f" AND {self.atom('b.')}"
            kind = r.choice(["JOIN", "LEFT JOIN", "LEFT JOIN"])
            sql = f"SELECT a.id, b.id, {self.expr('b.')[0]} AS e FROM {a} a {kind} {b} b ON {on}{self.where('a.')}"
            return Case(sql + " ORDER BY a.id, b.id", "select", "non-equi-join", ordered=True)
        if form == 3:
            col = r.choice(["k", "s", "d", "m"])
            corr = r.choice(["", " AND y.id <> x.id", " AND y.k = x.k", " AND y.s = x.s"])
            sql = (f"SELECT id, k FROM {a} x WHERE x.{col} {r.choice(['IN', 'NOT IN'])} "
                   f"(SELECT y.{col} FROM {b} y WHERE y.{col} IS NOT NULL{corr})")
            return Case(sql + " ORDER BY id", "select", "in-subquery", ordered=True)
        if form == 4:
            corr = r.choice(["y.k = x.k", "y.k < x.k", "y.s = x.s AND y.id <> x.id", "y.d = x.d"])
            sql = (f"SELECT id FROM {a} x WHERE {r.choice(['', 'NOT '])}EXISTS (SELECT 1 FROM {b} y WHERE {corr})"
                   f"{' AND ' + self.cond('x.') if r.random() < 0.4 else ''}")
            return Case(sql + " ORDER BY id", "select", "exists-subquery", ordered=True)
        if form == 5:
            agg = r.choice(["COUNT(*)", "MAX(y.m)", "SUM(y.k)", "MIN(y.d)", "COUNT(DISTINCT y.s)"])
            corr = r.choice(["y.k = x.k", "y.id > x.id", "y.b = x.b", "y.d <= x.d"])
            sql = f"SELECT id, (SELECT {agg} FROM {b} y WHERE {corr}) AS v FROM {a} x{self.where('x.')}"
            if r.random() < 0.3:
                sql = (f"SELECT id FROM {a} x WHERE x.m > (SELECT AVG(y.m) FROM {b} y"
                       f"{' WHERE y.k = x.k' if r.random() < 0.5 else ''})")
            return Case(sql + " ORDER BY id", "select", "scalar-subquery", ordered=True)
        if form == 6:
            inner = r.choice([f"SELECT a.k, COUNT(*) AS n, SUM(b.m) AS sm FROM {a} a JOIN {b} b ON a.s = b.s "
                              f"GROUP BY a.k",
                              f"SELECT k, COUNT(*) AS n, MAX(m) AS sm FROM {a} GROUP BY k UNION ALL "
                              f"SELECT k, 1, m FROM {b}",
                              f"SELECT x.k, x.id AS n, x.m AS sm FROM {a} x WHERE x.k IN (SELECT k FROM {b})"])
            sql = f"SELECT q.k, SUM(q.n), MAX(q.sm) FROM ({inner}) q GROUP BY q.k ORDER BY q.k"
            return Case(sql, "select", "derived-across", ordered=True)
        key = r.choice(["a.k", "b.d", "a.k, b.k"])
        agg = r.choice(["COUNT(*)", "SUM(b.m)", "MAX(a.id)", "COUNT(DISTINCT b.k)", "AVG(a.m)",
                        "GROUP_CONCAT(b.id ORDER BY b.id)"])
        on = r.choice(["a.s = b.s", "a.k = b.k", "a.k < b.k"])
        sql = (f"SELECT {key}, {agg} FROM {a} a JOIN {b} b ON {on}{self.where('a.')} GROUP BY {key} "
               f"HAVING COUNT(*) > {r.randint(0, 2)} ORDER BY {key}")
        return Case(sql, "select", "join-group-across", ordered=True)

    def new_row(self, key: int | None = None) -> str:
        r = self.r
        if key is None:
            self.next_id += r.randint(1, 7)
            key = self.next_id
        b = r.choice(B_VALUES)
        d = r.choice(D_VALUES)
        vals = (key, r.choice(K_VALUES), r.choice(S_VALUES), b, d, r.choice(DT_VALUES),
                r.choice(M_VALUES), r.choice(J_VALUES))
        return "(" + ", ".join(lit(v) for v in vals) + ")"

    def dml(self) -> Case:
        r = self.r
        t = r.choice(NAMES)
        x = r.random()
        if x < 0.3:
            sets = r.sample([f"k = {r.choice(['k + 1', 'NULL', '7'])}", f"s = {self.value('s')}",
                             f"m = {r.choice(['m * 2', '0.5', 'NULL'])}", f"d = {self.value('d')}",
                             "dt = dt + INTERVAL 1 HOUR", "j = JSON_SET(COALESCE(j, '{}'), '$.a', 3)"],
                            r.randint(1, 2))
            sql = f"UPDATE {t} SET {', '.join(sets)}{self.where()}"
            if r.random() < 0.1:
                sql += f" ORDER BY id LIMIT {r.randint(1, 4)}"
            shape = "update"
        elif x < 0.45:
            cond = self.cond() if r.random() < 0.7 else f"id = {self.value('id')}"
            sql = f"DELETE FROM {t} WHERE {cond}"
            if r.random() < 0.1:
                sql += f" ORDER BY id DESC LIMIT {r.randint(1, 3)}"
            shape = "delete"
        elif x < 0.9:
            rows = []
            for _ in range(r.randint(1, 5)):
                clash = r.random() < 0.08
                rows.append(self.new_row(r.randint(-6, 90) if clash else None))
            verb = r.choice(["INSERT", "INSERT", "INSERT", "REPLACE", "INSERT IGNORE"])
            sql = f"{verb} INTO {t} ({', '.join(COLS)}) VALUES {', '.join(rows)}"
            shape = verb.lower().replace(" ", "-")
        else:
            sql = (f"INSERT INTO {t} ({', '.join(COLS)}) VALUES {self.new_row(r.randint(-6, 90))} "
                   f"ON DUPLICATE KEY UPDATE k = COALESCE(k, 0) + 1")
            shape = "insert-odku"
        return Case(sql, "dml", shape, table=t)


_BOUND_AFTER = frozenset({"=", "<", ">", "<=", ">=", "<>", "!="})


def as_prepared(sql: str, limit: int = 8) -> tuple[str, list[str]]:
    """A SELECT as an SQL-level prepared statement: literals compared with an operator (and LIMIT /
    OFFSET counts) become `?`, their texts the USING list; the meaning is the same either way."""
    from proxy.plan.sqltok import tokenize

    toks = tokenize(sql)
    out: list[str] = []
    using: list[str] = []
    pos = 0
    for i, (kind, text, start, end) in enumerate(toks):
        if i == 0 or len(using) >= limit or kind not in "ns":
            continue
        prev_kind, prev = toks[i - 1][0], toks[i - 1][1].upper()
        if (prev_kind == "o" and prev in _BOUND_AFTER) or (kind == "n" and prev_kind == "w"
                                                          and prev in ("LIMIT", "OFFSET")):
            out.append(sql[pos:start])
            out.append("?")
            using.append(text)
            pos = end
    out.append(sql[pos:])
    return "".join(out), using
