"""A big multi-row INSERT is planned without a token per value (issue 16: one query costs a small
multiple of its size): the plan must be exactly the general path's, and cost little memory."""

from __future__ import annotations

import copy
import random
import sys
import tracemalloc
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "proxy"))
from test_router import extended  # noqa: E402

import proxy.plan.router as router_mod  # noqa: E402
from meta.config import parse_config  # noqa: E402
from meta.errors import ProxyError  # noqa: E402
from proxy.plan.router import Router  # noqa: E402


@pytest.fixture(scope="module")
def router() -> Router:
    return Router(parse_config(copy.deepcopy(extended())))


def _literal(rng: random.Random, kind: str) -> str:
    if kind == "int":
        return str(rng.choice([rng.randint(0, 3000), -rng.randint(1, 50), rng.randint(10**15, 10**18)]))
    return rng.choice(["'a''b'", "'x\\\\y'", "'é'", "NULL", "1.5", "-2e3", "0x0A", "X'ff'", "TRUE", "''"])


STATEMENTS = [
    ("INSERT INTO sharding_4_t1 (id, v) VALUES ", ("int", "any")),
    ("REPLACE INTO schema1.sharding_2_t1 (v, id) VALUES ", ("any", "int")),
    ("INSERT IGNORE INTO code_t (code, n) VALUES ", ("str", "int")),
    ("INSERT INTO range_t (id) VALUES ", ("range",)),
    ("INSERT INTO test (id, v) VALUES ", ("int", "any")),
    ("INSERT INTO some_default_table VALUES ", ("any", "any")),
]


@pytest.mark.parametrize("head, kinds", STATEMENTS)
def test_bulk_plan_is_the_general_plan(router: Router, monkeypatch: pytest.MonkeyPatch, head, kinds) -> None:
    rng = random.Random(head)
    rows: list[str] = []
    size = 0
    while size < router_mod._BULK_MIN + 4096:
        vals = []
        for k in kinds:
            if k == "str":
                vals.append(f"'k{rng.randint(0, 999)}'")
            elif k == "range":
                vals.append(str(rng.randint(0, 1999)))
            else:
                vals.append(_literal(rng, k))
        rows.append("(" + ", ".join(vals) + ")")
        size += len(rows[-1]) + 2
    sql = head + rng.choice([",", ", ", ",\n"]).join(rows) + rng.choice(["", ";", " ; \n"])
    assert len(sql) > router_mod._BULK_MIN

    def plan(big: int):
        monkeypatch.setattr(router_mod, "_BULK_MIN", big)
        try:
            p = router.route(sql, "schema1")
            return p.kind, p.targets, p.is_write, p.tables
        except ProxyError as e:
            return type(e), e.code, e.message
    general = plan(1 << 60)
    assert plan(router_mod._BULK_MIN) == general
    if not isinstance(general[0], type):      # an error: either path may be the one that reports it
        assert router._bulk_insert(sql, "schema1", None) is not None   # the bulk path did plan it


def test_other_shapes_take_the_general_path(router: Router) -> None:
    rows = ", ".join(f"({i}, {i})" for i in range(20000))
    for sql in (f"INSERT INTO sharding_4_t1 (id, v) VALUES {rows} ON DUPLICATE KEY UPDATE v = 1",
                f"INSERT INTO sharding_4_t1 (id, v) VALUES {rows}, (1, (SELECT 1))",
                f"INSERT INTO sharding_4_t1 (id, v) VALUES {rows}, (1, \"dq\")",
                f"INSERT INTO sharding_4_t1 (id, v) VALUES {rows}, (1)"):
        try:
            plan = router.route(sql, "schema1")
        except ProxyError:
            continue
        assert sum(len(t.sql) for t in plan.targets) >= len(rows)


def test_bulk_insert_costs_a_small_multiple_of_its_size(router: Router) -> None:
    sql = "INSERT INTO sharding_4_t1 (id, v) VALUES " + ",".join(f"({i},'r{i}')" for i in range(150000))
    tracemalloc.start()
    try:
        router.route(sql, "schema1")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(sql), peak / len(sql)   # the token path: ~70x
