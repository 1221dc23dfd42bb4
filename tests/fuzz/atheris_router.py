"""Coverage-guided fuzzing of the SQL side with atheris (libFuzzer), on demand, not in CI.

    .venv/bin/pip install atheris
    .venv/bin/python tests/fuzz/atheris_router.py -atheris_runs=100000

The fuzzer's bytes become statement text (UTF-8 with surrogateescape, as the session decodes it) for
the router on the DESIGN.md section 2 config, the manager command parser, SET parsing and the
tokenizer. Only meta.errors.ProxyError may come out, and a case slower than 0.5 s (every time it is
re-run) counts as a crash: pathological regex backtracking. Unless a -dict= is given, a dictionary of
SQL keywords, table names and punctuation is written next to a seed corpus in a temporary directory,
so mutations start from real statements.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import atheris

REPO = Path(__file__).resolve().parents[2]
for p in (str(REPO), str(Path(__file__).resolve().parent)):
    if p not in sys.path:
        sys.path.insert(0, p)

with atheris.instrument_imports():
    from meta.errors import ProxyError
    from proxy.plan import local
    from proxy.manager.manager_parse import parse_manager
    from proxy.plan.router import Router
    from proxy.plan.sqltok import first_keyword, split_statements, tokenize

import fuzzlib  # noqa: E402  (the example config and the vocabulary; not instrumented)

ROUTER = Router(fuzzlib.example_config())
SCHEMAS = ("schema1", "schema2", None, "SCHEMA1")
LIMIT_S = 0.5
SEEDS = [
    "SELECT * FROM sharding_4_t1 WHERE id = 3", "SELECT COUNT(*), MAX(id) FROM sharding_4_t1 GROUP BY name",
    "INSERT INTO sharding_2_t1 (id, name) VALUES (1, 'a'), (2, 'b')", "UPDATE test SET name = 'x' WHERE id IN (1, 2)",
    "DELETE FROM sharding_4_t1 WHERE id = 1 OR id = 2", "/*!pydble:shardingNode=dn1*/ SELECT 1",
    "SELECT a.id FROM sharding_4_t1 a JOIN sharding_2_t1 b ON a.id = b.id WHERE a.id = 5",
    "CREATE TABLE IF NOT EXISTS sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))", "ALTER TABLE test ADD c INT",
    "WITH c AS (SELECT id FROM sing) SELECT * FROM c UNION ALL SELECT 1", "SHOW FULL TABLES FROM schema1",
    "SET NAMES utf8mb4 COLLATE utf8mb4_bin, autocommit = 0, @a := 'x'", "reload @@metadata where table in ('s.t')",
    "check full @@metadata where reload_time >= '2024-01-02 10:00:00'", "kill @@ddl_lock where schema='s' and table=`t`",
    "SELECT * FROM t WHERE (id, name) IN ((1, 'a')) ORDER BY 1 DESC LIMIT 2, 3 FOR UPDATE",
]


def _bounded(fn: object, *args: object) -> None:
    """Run fn(*args); if it is slower than LIMIT_S three times in a row, fail."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        try:
            fn(*args)  # type: ignore[operator]
        except ProxyError:
            pass
        best = min(best, time.perf_counter() - t0)
        if best <= LIMIT_S:
            return
    raise AssertionError(f"{getattr(fn, '__name__', fn)} took {best:.3f} s on {args[0]!r:.200}")


def one_input(data: bytes) -> None:
    """One fuzz case: the first byte picks the schema and the target, the rest is the text."""
    if not data:
        return
    head, body = data[0], data[1:]
    sql = body.decode("utf-8", "surrogateescape")
    target = head % 5
    if target <= 1:
        _bounded(ROUTER.route, sql, SCHEMAS[(head >> 3) % len(SCHEMAS)])
    elif target == 2:
        _bounded(parse_manager, sql)
    elif target == 3:
        _bounded(local.parse_set, "SET " + sql if head & 0x80 else sql)
        _bounded(local.local_select, sql, {"database": "schema1", "connection_id": 1})
    else:
        _bounded(tokenize, sql)
        _bounded(split_statements, sql)
        _bounded(first_keyword, sql)


def _defaults(argv: list[str]) -> list[str]:
    """Add a dictionary and a seed corpus unless the caller gave their own."""
    if any(a.startswith("-dict=") for a in argv) and any(not a.startswith("-") for a in argv[1:]):
        return argv
    work = Path(tempfile.mkdtemp(prefix="pydble-atheris-router-"))
    extra = []
    if not any(a.startswith("-dict=") for a in argv):
        words = {*fuzzlib.KEYWORDS, *fuzzlib.PUNCT, *fuzzlib.EXAMPLE_TABLES, *fuzzlib.SCHEMAS, *fuzzlib.COLUMNS,
                 "/*!pydble:shardingNode=dn1*/", "@@metadata", "where", "schema=", "table in (", "reload_time"}
        lines = ['"' + w.replace("\\", "\\\\").replace('"', '\\"') + '"' for w in sorted(words) if w]
        (work / "sql.dict").write_text("\n".join(lines) + "\n")
        extra.append(f"-dict={work / 'sql.dict'}")
    if not any(not a.startswith("-") for a in argv[1:]):
        corpus = work / "corpus"
        corpus.mkdir()
        for i, s in enumerate(SEEDS):
            for t in range(5):
                (corpus / f"seed-{i}-{t}").write_bytes(bytes((t + 8 * (i % 4),)) + s.encode())
        extra.append(str(corpus))
    return argv[:1] + extra + argv[1:]


def main() -> None:
    """Run libFuzzer with the given arguments (e.g. -atheris_runs=100000)."""
    atheris.Setup(_defaults(sys.argv), one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
