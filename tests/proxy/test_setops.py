"""Set operations across nodes and merged variance, sans I/O: how a statement splits into branches, the
precedence MariaDB gives the operators, the combination rules, the collation a result compares by
and the statistic's arithmetic. The end-to-end answers are checked against MariaDB in
tests/differential/test_regressions.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from meta.config import parse_config
from meta.errors import NotSupported, ProxyError
from proxy.wire.constants import T_LONG, T_VAR_STRING
from proxy.wire.messages import ColumnDef
from proxy.plan.router import Router
from proxy.exec.setops import _aggregate_collation, _evaluate, _Result
from proxy.plan.setplan import Leaf, Ordered, SetNode
from proxy.exec.variance import variance_result

CONFIG = {
    "server": {"instance": "t", "bind": "127.0.0.1", "port": 8066, "manager_port": 9066},
    "users": [{"name": "test", "password": "x", "schemas": ["s1"]}],
    "manager_users": [{"name": "root", "password": "x"}],
    "db_groups": {"g": {"host": "127.0.0.1", "port": 3306, "user": "root", "password": ""}},
    "sharding_nodes": {f"dn{i}": {"db_group": "g", "database": f"db{i}"} for i in range(1, 5)},
    "functions": {"hash-four": {"type": "hash", "partition_count": [4], "partition_length": [1]}},
    "schemas": {"s1": {"default_node": "dn4", "tables": {
        "t": {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "hash-four", "column": "id"},
        "one": {"type": "single", "nodes": ["dn2"]}}}},
}


@pytest.fixture(scope="module")
def router() -> Router:
    return Router(parse_config(CONFIG))


def shape(e: Any) -> Any:
    """The expression tree as nested tuples of leaf SQL."""
    if isinstance(e, Leaf):
        return e.sql
    if isinstance(e, Ordered):
        return ("ORDERED", shape(e.body), e.order, e.offset, e.limit)
    return (e.op + (" ALL" if e.all else ""), shape(e.left), shape(e.right))


def test_intersect_binds_tighter_than_union_and_except(router):
    plan = router.route("SELECT id FROM t UNION SELECT id FROM one INTERSECT SELECT id FROM t WHERE id = 1 "
                        "EXCEPT ALL SELECT id FROM one", "s1")
    assert shape(plan.setop.expr) == (
        "EXCEPT ALL", ("UNION", "SELECT id FROM t", ("INTERSECT", "SELECT id FROM one", "SELECT id FROM t WHERE id = 1")),
        "SELECT id FROM one")
    assert not plan.setop.streaming
    assert set(plan.tables) == {("s1", "t"), ("s1", "one")}


def test_trailing_order_and_limit_belong_to_the_whole_and_parentheses_keep_their_own(router):
    plan = router.route("(SELECT id FROM t ORDER BY id LIMIT 3) UNION ALL SELECT id FROM one ORDER BY 1 DESC "
                        "LIMIT 2, 5", "s1")
    assert shape(plan.setop.expr) == ("ORDERED", ("UNION ALL", "SELECT id FROM t ORDER BY id LIMIT 3",
                                                  "SELECT id FROM one"), ((1, True),), 2, 5)
    assert len(plan.setop.leaves[0].plan.targets) == 4 and plan.setop.leaves[0].plan.merge is not None


def test_union_all_without_order_streams(router):
    plan = router.route("SELECT id FROM t UNION ALL SELECT id FROM one LIMIT 3", "s1")
    assert plan.setop.streaming


def test_branches_on_one_node_are_sent_whole(router):
    plan = router.route("SELECT id FROM t WHERE id = 1 UNION SELECT id FROM one", "s1")
    assert plan.setop is None and [t.node for t in plan.targets] == ["dn2"]


@pytest.mark.parametrize("sql, words", [
    ("WITH c AS (SELECT 1) SELECT id FROM t UNION SELECT id FROM one", "WITH"),
    ("SELECT id FROM t UNION SELECT id FROM one ORDER BY id + 1", "ORDER BY"),
    ("SELECT id FROM t UNION SELECT id FROM one ORDER BY t.id", "ORDER BY"),
    ("SELECT id FROM t UNION SELECT id FROM one LIMIT ?", "LIMIT"),
    ("SELECT id FROM t UNION SELECT x.id FROM t x JOIN one y ON x.k = y.k", "JOIN"),
])
def test_refused_with_a_sentence(router, sql, words):
    with pytest.raises(NotSupported) as e:
        router.route(sql, "s1")
    assert words in e.value.message


def col(name: str, type_: int = T_LONG) -> ColumnDef:
    return ColumnDef(name, type=type_, charset=63 if type_ == T_LONG else 45)


def result(rows: list[list[Any]], coll: bytes | None = None) -> _Result:
    width = len(rows[0]) if rows else 1
    cols = [col(f"c{i}", T_VAR_STRING if coll else T_LONG) for i in range(width)]
    return _Result(cols, [[None if v is None else str(v).encode() for v in r] for r in rows],
                   [(coll, 2)] * width)


def run(op: str, dup: bool, left: _Result, right: _Result) -> list[list[Any]]:
    la, lb = Leaf("a", None, ""), Leaf("b", None, "")   # type: ignore[arg-type]
    out = _evaluate(SetNode(op, dup, la, lb), {id(la): left, id(lb): right})
    return [[None if v is None else v.decode() for v in r] for r in out.rows]


def test_union_compares_by_the_collation_and_nulls_are_equal():
    left = result([["a"], ["A"], [None], ["b "]], b"utf8mb4_general_ci")
    right = result([["B"], [None], ["a "]], b"utf8mb4_general_ci")
    assert run("UNION", False, left, right) == [["a"], [None], ["b "]]
    left_bin = result([["a"], ["A"]], b"utf8mb4_bin")
    assert run("UNION", False, left_bin, result([["a "]], b"utf8mb4_bin")) == [["a"], ["A"]]


def test_all_variants_count_copies():
    left = result([[1], [1], [1], [2], [None], [None]])
    right = result([[1], [None], [3]])
    assert run("INTERSECT", True, left, right) == [["1"], [None]]
    assert run("EXCEPT", True, left, right) == [["1"], ["1"], ["2"], [None]]
    assert run("INTERSECT", False, left, right) == [["1"], [None]]
    assert run("EXCEPT", False, left, right) == [["2"]]
    assert run("UNION", True, left, right) == [["1"], ["1"], ["1"], ["2"], [None], [None], ["1"], [None], ["3"]]


def test_a_different_number_of_columns_is_mariadbs_error():
    with pytest.raises(ProxyError) as e:
        run("UNION", False, result([[1, 2]]), result([[1]]))
    assert e.value.code == 1222


def test_collation_aggregation():
    ci, bin_, uni = b"utf8mb4_general_ci", b"utf8mb4_bin", b"utf8mb4_unicode_ci"
    assert _aggregate_collation((ci, 2), (bin_, 2), "c") == (bin_, 2)      # same coercibility: _bin wins
    assert _aggregate_collation((bin_, 4), (ci, 2), "c") == (ci, 2)        # a literal yields to a column
    assert _aggregate_collation((ci, 0), (bin_, 2), "c") == (ci, 0)        # explicit COLLATE wins
    assert _aggregate_collation((b"binary", 6), (ci, 2), "c") == (ci, 2)   # NULL is ignorable
    with pytest.raises(NotSupported):
        _aggregate_collation((ci, 2), (uni, 2), "c")
    with pytest.raises(NotSupported):
        _aggregate_collation((ci, 0), (bin_, 0), "c")


def acc(n: int, s: Any, q: Any) -> Any:
    from fractions import Fraction
    return SimpleNamespace(n=n, v=[Fraction(s), Fraction(q)])


def test_variance_from_count_sum_and_sum_of_squares():
    # 1..6: sum 21, squares 91
    assert variance_result("VAR_POP", acc(6, 21, 91), 4) == b"2.9167"
    assert variance_result("VAR_SAMP", acc(6, 21, 91), 4) == b"3.5000"
    assert variance_result("STDDEV_POP", acc(6, 21, 91), 4) == b"1.7078"
    assert variance_result("STDDEV_SAMP", acc(6, 21, 91), 31) == b"1.8708286933869707"
    assert variance_result("VAR_SAMP", acc(1, 5, 25), 4) is None
    assert variance_result("STDDEV_POP", acc(1, 5, 25), 4) == b"0.0000"
    assert variance_result("VAR_POP", SimpleNamespace(n=0, v=None), 4) is None
