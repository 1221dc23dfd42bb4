"""EXPLAIN <statement> on the client port answers pydble's plan per node, as DBLE's EXPLAIN does
(SHARDING_NODE, TYPE, SQL/REF), and runs nothing; EXPLAIN FORMAT=... / EXTENDED still ask MariaDB."""

from __future__ import annotations

import copy
from typing import Any, Iterator

import pymysql
import pytest

from harness import ProxyProcess, free_port, proxy_config
from meta.config import parse_config
from proxy.exec.primitives import Explainer, MultiWrite, Route, Scatter
from proxy.plan.router import Router

TABLES = {
    "ex_a": {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "hash-four", "column": "id"},
    "ex_b": {"type": "sharding", "nodes": ["dn1", "dn2"], "function": "hash-two", "column": "id"},
    "ex_g": {"type": "global", "nodes": ["dn1", "dn2", "dn3", "dn4"]},
    "ex_s": {"type": "single", "nodes": ["dn3"]},
}


def rows_of(prim: Any) -> list[list[object]]:
    out = Explainer()
    prim.explain(out)
    return out.rows()


@pytest.fixture(scope="module")
def router() -> Router:
    cfg = proxy_config([type("B", (), {"host": "127.0.0.1", "port": port})() for port in (1, 2)], 3, 4)
    cfg["schemas"]["schema1"]["tables"].update(copy.deepcopy(TABLES))
    return Router(parse_config(cfg))


def test_a_single_node_route_is_one_base_sql_row(router: Router) -> None:
    plan = router.route("SELECT * FROM ex_a WHERE id = 2", "schema1")
    assert rows_of(Route(plan.targets[0].node, plan.targets[0].sql)) == [
        ["dn3", "BASE SQL", "SELECT * FROM ex_a WHERE id = 2"]]


def test_a_merged_read_names_each_step_over_numbered_node_rows(router: Router) -> None:
    plan = router.route("SELECT k, COUNT(*) FROM ex_a GROUP BY k HAVING COUNT(*) > 1 ORDER BY k DESC LIMIT 1, 2",
                        "schema1")
    got = rows_of(Scatter(plan))
    assert [r[:2] for r in got] == [["dn1_0", "BASE SQL"], ["dn2_0", "BASE SQL"], ["dn3_0", "BASE SQL"],
                                    ["dn4_0", "BASE SQL"], ["merge_1", "MERGE"], ["aggregate_1", "AGGREGATE"],
                                    ["having_filter_1", "HAVING_FILTER"], ["order_1", "ORDER"],
                                    ["limit_1", "LIMIT"]]
    assert got[4][2] == "dn1_0; dn2_0; dn3_0; dn4_0" and got[5][2] == "merge_1"
    assert got[8][2] == "order_1 (offset 1, limit 2)"


def test_a_write_on_several_nodes_is_all_or_nothing_and_a_global_one_a_broadcast(router: Router) -> None:
    plan = router.route("INSERT INTO ex_a (id, k) VALUES (1, 1), (2, 2)", "schema1")
    got = rows_of(MultiWrite(plan, False))
    assert [r[:2] for r in got] == [["dn2_0", "BASE SQL"], ["dn3_0", "BASE SQL"], ["multi_write_1", "MULTI_WRITE"]]
    plan = router.route("UPDATE ex_g SET k = 1", "schema1")
    assert rows_of(MultiWrite(plan, True))[-1][:2] == ["broadcast_write_1", "BROADCAST_WRITE"]


@pytest.fixture(scope="module")
def px(backends: list[Any]) -> Iterator[Any]:
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-ex"))
    cfg["schemas"]["schema1"]["tables"].update(copy.deepcopy(TABLES))
    p = ProxyProcess(cfg, name="proxy-ex", release_ports=True)
    try:
        p.start()
        conn = p.connect()
        with conn.cursor() as cur:
            for t in TABLES:
                cur.execute(f"DROP TABLE IF EXISTS {t}")
                cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, k INT)")
            cur.execute("INSERT INTO ex_a VALUES (1, 1), (2, 2), (3, 3)")
        yield conn
        conn.close()
    finally:
        p.cleanup()


def explain(conn: Any, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return [d[0] for d in cur.description], [tuple(r) for r in cur.fetchall()]


def test_explain_on_the_client_port_shows_the_plan_per_node(px: Any) -> None:
    cols, rows = explain(px, "EXPLAIN SELECT * FROM ex_a WHERE id = 2")
    assert cols == ["SHARDING_NODE", "TYPE", "SQL/REF"]
    assert rows == [("dn3", "BASE SQL", "SELECT * FROM ex_a WHERE id = 2")]
    _, rows = explain(px, "EXPLAIN SELECT id FROM ex_a ORDER BY id LIMIT 2")
    assert [r[1] for r in rows] == ["BASE SQL"] * 4 + ["MERGE", "ORDER", "LIMIT"]
    _, rows = explain(px, "EXPLAIN SELECT id FROM ex_a UNION SELECT id FROM ex_s")
    assert [r[1] for r in rows][-1] == "UNION" and ("dn3_1", "BASE SQL", "SELECT id FROM ex_s") in rows
    _, rows = explain(px, "EXPLAIN SELECT a.id, b.id FROM ex_a a JOIN ex_b b ON a.k = b.k")
    assert rows[-1][:2] == ("join_1", "JOIN") and rows[-1][2].startswith("merge_1; merge_2")


def test_explain_runs_nothing(px: Any) -> None:
    _, rows = explain(px, "EXPLAIN INSERT INTO ex_a VALUES (4, 4), (5, 5)")
    assert [r[:2] for r in rows] == [("dn1_0", "BASE SQL"), ("dn2_0", "BASE SQL"), ("multi_write_1", "MULTI_WRITE")]
    _, rows = explain(px, "EXPLAIN DELETE FROM ex_a")
    assert rows[-1][1] == "MULTI_WRITE"
    assert explain(px, "SELECT COUNT(*) FROM ex_a")[1] == [(3,)]


def test_explain_with_a_format_is_mariadbs_and_a_syntax_error_is_mariadbs(px: Any) -> None:
    cols, rows = explain(px, "EXPLAIN FORMAT=JSON SELECT * FROM ex_a WHERE id = 2")
    assert cols == ["EXPLAIN"] and '"table_name": "ex_a"' in rows[0][0]
    with pytest.raises(pymysql.MySQLError) as e:
        explain(px, "EXPLAIN SELECT * FROM ex_a WHERE")
    assert e.value.args[0] == 1064


def test_a_read_no_node_plan_answers_is_explained_as_over_copies(px: Any) -> None:
    """A window function over rows on several nodes runs on one MariaDB over copies (proxy/exec/materialize.py):
    EXPLAIN says so, and the statement itself answers as one MariaDB would."""
    sql = "SELECT id, ROW_NUMBER() OVER (ORDER BY k DESC) AS rn FROM ex_a"
    _, rows = explain(px, "EXPLAIN " + sql)
    assert [r[1] for r in rows] == ["OVER_COPIES"]
    assert sorted(explain(px, sql + " ORDER BY rn")[1]) == [(1, 3), (2, 2), (3, 1)]
