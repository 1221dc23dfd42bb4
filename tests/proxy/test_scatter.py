"""The SQL rewrite for scatter SELECTs: the exact node SQL, the plan, and what is refused."""

from __future__ import annotations

import pytest

from meta.errors import NotSupported, ProxyError
from proxy.plan import scatter
from proxy.plan.mergeplan import AVG, COUNT, SUM, Aggregate, HavingTerm, MergePlan, SortKey
from proxy.plan.scatter import plan_scatter_select


@pytest.fixture(autouse=True)
def _fresh_cache():
    scatter.clear_cache()
    yield
    scatter.clear_cache()


def node_sql(sql: str) -> str:
    return " ".join(plan_scatter_select(sql)[0].split())


# --- sysbench shapes run unchanged -------------------------------------------------------

@pytest.mark.parametrize("sql", [
    "SELECT c FROM sbtest1 WHERE id BETWEEN 1 AND 100",
    "SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN 1 AND 100",
    "SELECT * FROM t WHERE 1=0",
])
def test_sysbench_and_probe_queries_are_sent_unchanged(sql):
    assert plan_scatter_select(sql)[0] == sql


@pytest.mark.parametrize("distinct", ["", "DISTINCT "])
def test_sorted_text_asks_the_nodes_for_its_collation(distinct):
    sql = f"SELECT {distinct}c FROM sbtest1 WHERE id BETWEEN 1 AND 100 ORDER BY c"
    node, plan = plan_scatter_select(sql)
    assert node == f"SELECT {distinct}c, COLLATION(c) FROM sbtest1 WHERE id BETWEEN 1 AND 100 ORDER BY c"
    assert plan.collations == ((0, 1),) and plan.hidden == 1


def test_plain_concatenation_plan():
    _, plan = plan_scatter_select("SELECT c FROM sbtest1 WHERE id BETWEEN 1 AND 100")
    assert plan == MergePlan()
    assert plan.concat_only


def test_order_by_plan():
    _, plan = plan_scatter_select(
        "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN 1 AND 9 ORDER BY c")
    assert plan == MergePlan(hidden=1, order_by=(SortKey(0),), distinct=True, collations=((0, 1),))


def test_sum_plan():
    _, plan = plan_scatter_select("SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN 1 AND 100")
    assert plan == MergePlan(grouped=True, aggregates=(Aggregate(0, SUM),))


# --- ORDER BY -----------------------------------------------------------------------------

def test_order_by_alias_position_and_expression_use_selected_columns():
    sql, plan = plan_scatter_select("SELECT a AS x, b, a + b FROM t ORDER BY x DESC, 2, a+b")
    assert sql == ("SELECT a AS x, b, a + b, COLLATION(a), COLLATION(b), COLLATION(a + b) FROM t "
                   "ORDER BY x DESC, 2, a+b")
    assert plan.order_by == (SortKey(0, True), SortKey(1), SortKey(2))
    assert plan.hidden == 3 and plan.collations == ((0, 3), (1, 4), (2, 5))


def test_order_by_unselected_column_adds_a_hidden_column():
    sql, plan = plan_scatter_select("SELECT a FROM t ORDER BY b DESC, a")
    assert sql == "SELECT a, b, COLLATION(b), COLLATION(a) FROM t ORDER BY b DESC, a"
    assert plan == MergePlan(hidden=3, order_by=(SortKey(1, True), SortKey(0)),
                             collations=((1, 2), (0, 3)))


def test_hidden_order_column_after_star_counts_from_the_end():
    sql, plan = plan_scatter_select("SELECT *, x FROM t ORDER BY id DESC, x")
    assert sql == "SELECT *, x, id, COLLATION(id), COLLATION(x) FROM t ORDER BY id DESC, x"
    assert plan.order_by == (SortKey(-3, True), SortKey(-4))
    assert plan.hidden == 3 and plan.collations == ((-3, -2), (-4, -1))


def test_order_by_position_beyond_a_star_is_absolute():
    _, plan = plan_scatter_select("SELECT * FROM t ORDER BY 3")
    assert plan.order_by == (SortKey(2),)


def test_order_by_expression_over_an_alias_inlines_the_alias():
    sql, plan = plan_scatter_select("SELECT a+1 AS z FROM t ORDER BY z+1")
    assert sql == "SELECT a+1 AS z, (a + 1) + 1, COLLATION((a + 1) + 1) FROM t ORDER BY z+1"
    assert plan.order_by == (SortKey(1),)


def test_order_by_null_and_constants_do_not_order():
    assert plan_scatter_select("SELECT a FROM t ORDER BY NULL")[1].order_by == ()
    assert plan_scatter_select("SELECT a FROM t ORDER BY 'x'")[1].order_by == ()


def test_order_by_unknown_position_is_mysql_error_1054():
    with pytest.raises(ProxyError) as e:
        plan_scatter_select("SELECT a FROM t ORDER BY 3")
    assert e.value.code == 1054
    assert "order clause" in e.value.message


def test_order_by_quoted_and_qualified_names_match_items():
    _, plan = plan_scatter_select("SELECT t.c FROM t ORDER BY `C`")
    assert plan.order_by == (SortKey(0),) and plan.hidden == 1  # the collation probe


# --- LIMIT --------------------------------------------------------------------------------

@pytest.mark.parametrize("clause", ["LIMIT 20, 10", "LIMIT 10 OFFSET 20"])
def test_limit_with_offset_pushes_offset_plus_count(clause):
    sql, plan = plan_scatter_select(f"SELECT a FROM t ORDER BY a {clause}")
    assert sql == "SELECT a, COLLATION(a) FROM t ORDER BY a LIMIT 30"
    assert (plan.offset, plan.limit) == (20, 10)


def test_limit_without_offset_is_unchanged():
    sql, plan = plan_scatter_select("SELECT a FROM t LIMIT 5")
    assert sql == "SELECT a FROM t LIMIT 5"
    assert plan == MergePlan(limit=5)


def test_limit_before_for_update_without_limit_is_fine():
    sql, plan = plan_scatter_select("SELECT a FROM t WHERE a > 1 ORDER BY a FOR UPDATE")
    assert sql == "SELECT a, COLLATION(a) FROM t WHERE a > 1 ORDER BY a FOR UPDATE"
    assert plan.order_by == (SortKey(0),)


# --- aggregates ---------------------------------------------------------------------------

def test_avg_becomes_sum_and_hidden_count():
    """(and a hidden AVG(k): the column definition MariaDB gives AVG over all rows is the nodes' own)"""
    sql, plan = plan_scatter_select("select avg( k ), AVG(k) AS m from t")
    assert sql == "select SUM( k ), SUM(k) AS m, COUNT(k), AVG(k) from t"
    assert plan == MergePlan(hidden=2, grouped=True, aggregates=(
        Aggregate(0, AVG, count_column=2, name="avg( k )", avg_column=3),
        Aggregate(1, AVG, count_column=2, name="m", avg_column=3)))


def test_group_by_without_order_sorts_by_keys_and_keeps_limit_with_explicit_order():
    sql, plan = plan_scatter_select("SELECT g, COUNT(*) FROM t GROUP BY g LIMIT 3, 10")
    assert sql == "SELECT g, COUNT(*), COLLATION(g) FROM t GROUP BY g ORDER BY g LIMIT 13"
    assert plan == MergePlan(hidden=1, grouped=True, group_by=(0,), aggregates=(Aggregate(1, COUNT),),
                             order_by=(SortKey(0),), offset=3, limit=10, node_limit=13,
                             collations=((0, 2),))


def test_group_by_order_by_keys_pushes_limit():
    sql, plan = plan_scatter_select("SELECT g, h, COUNT(*) FROM t GROUP BY g, h "
                                    "ORDER BY h DESC, g LIMIT 5")
    assert node_sql_of(sql) == ("SELECT g, h, COUNT(*), COLLATION(g), COLLATION(h) FROM t "
                                "GROUP BY g, h ORDER BY h DESC, g LIMIT 5")
    assert (plan.limit, plan.node_limit) == (5, 5)


def node_sql_of(sql: str) -> str:
    return " ".join(sql.split())


def test_group_by_order_by_part_of_keys_pushes_no_limit():
    sql, plan = plan_scatter_select("SELECT g, h, COUNT(*) FROM t GROUP BY g, h ORDER BY g LIMIT 5")
    assert node_sql_of(sql) == "SELECT g, h, COUNT(*), COLLATION(g), COLLATION(h) FROM t GROUP BY g, h"
    assert (plan.order_by, plan.limit, plan.node_limit) == ((SortKey(0),), 5, None)


def test_group_by_order_by_aggregate_pushes_no_limit_and_no_order():
    sql, plan = plan_scatter_select(
        "SELECT a, AVG(b) AS m FROM t GROUP BY a ORDER BY m DESC LIMIT 3, 5")
    assert node_sql_of(sql) == "SELECT a, SUM(b) AS m, COUNT(b), AVG(b), COLLATION(a) FROM t GROUP BY a"
    assert plan == MergePlan(hidden=3, grouped=True, group_by=(0,),
                             aggregates=(Aggregate(1, AVG, count_column=2, name="m", avg_column=3),),
                             order_by=(SortKey(1, True),), offset=3, limit=5, collations=((0, 4),))


def test_order_by_unselected_aggregate_is_hidden():
    sql, plan = plan_scatter_select("SELECT g FROM t GROUP BY g ORDER BY COUNT(*) DESC, AVG(v)")
    assert node_sql_of(sql) == "SELECT g, COUNT(*), SUM(v), COUNT(v), COLLATION(g) FROM t GROUP BY g"
    assert plan.aggregates == (Aggregate(1, COUNT), Aggregate(2, AVG, count_column=3))
    assert plan.order_by == (SortKey(1, True), SortKey(2))
    assert plan.hidden == 4


def test_group_by_unselected_column_and_position():
    sql, plan = plan_scatter_select("SELECT COUNT(*), g FROM t GROUP BY h, 2")
    assert sql == "SELECT COUNT(*), g, h, COLLATION(h), COLLATION(g) FROM t GROUP BY h, 2"
    assert plan.group_by == (2, 1)
    assert plan.order_by == (SortKey(2), SortKey(1))


def test_aggregate_without_group_by_drops_node_limit_and_order():
    sql, plan = plan_scatter_select("SELECT COUNT(*) FROM t ORDER BY 1 LIMIT 1")
    assert node_sql_of(sql) == "SELECT COUNT(*) FROM t"
    assert (plan.group_by, plan.limit) == ((), 1)


def test_having_is_evaluated_after_merging():
    sql, plan = plan_scatter_select(
        "SELECT g, SUM(v) AS s FROM t GROUP BY g HAVING s > 10 AND COUNT(*) >= 2 AND 'x' < MAX(w)"
        " ORDER BY g")
    assert node_sql_of(sql) == ("SELECT g, SUM(v) AS s, COUNT(*), MAX(w), COLLATION(g), "
                                "COLLATION(w) FROM t GROUP BY g")
    assert plan.having == (HavingTerm(1, ">", "10"), HavingTerm(2, ">=", "2"),
                           HavingTerm(3, ">", "x", True))


def test_having_negative_literal():
    _, plan = plan_scatter_select("SELECT g FROM t GROUP BY g HAVING SUM(v) <= -1.5")
    assert plan.having == (HavingTerm(1, "<=", "-1.5"),)


def test_having_without_grouping_stays_on_the_nodes():
    sql, plan = plan_scatter_select("SELECT a AS x FROM t HAVING x > 5")
    assert sql == "SELECT a AS x FROM t HAVING x > 5"
    assert plan == MergePlan()


def test_count_distinct_groups_nodes_by_its_argument():
    sql, plan = plan_scatter_select("SELECT COUNT(DISTINCT x) FROM t WHERE z > 3")
    assert sql == "SELECT COUNT(DISTINCT x), x, COLLATION(x) FROM t WHERE z > 3 GROUP BY x"
    assert plan.aggregates == (Aggregate(0, COUNT, distinct=True, distinct_columns=(1,)),)
    assert plan.group_by == ()


def test_count_distinct_with_group_by_and_other_aggregates():
    sql, plan = plan_scatter_select(
        "SELECT g, COUNT(DISTINCT x), SUM(y), AVG(DISTINCT x) FROM t GROUP BY g "
        "HAVING COUNT(*) > 1 "
        "ORDER BY 1 LIMIT 4")
    assert node_sql_of(sql) == ("SELECT g, COUNT(DISTINCT x), SUM(y), SUM(DISTINCT x), "
                                "COUNT(DISTINCT x), AVG(DISTINCT x), COUNT(*), x, COLLATION(g), COLLATION(x) "
                                "FROM t GROUP BY g, x")
    assert plan.group_by == (0,)
    assert plan.limit == 4 and plan.hidden == 6


def test_distinct_aggregates_over_different_arguments_group_by_all_of_them():
    sql, plan = plan_scatter_select("SELECT COUNT(DISTINCT a), COUNT(DISTINCT b, A) FROM t")
    assert sql == ("SELECT COUNT(DISTINCT a), COUNT(DISTINCT b, A), a, b, COLLATION(a), COLLATION(b) "
                   "FROM t GROUP BY a, b")
    assert [a.distinct_columns for a in plan.aggregates] == [(2,), (3, 2)]


def test_group_concat_is_supported_without_order():
    _, plan = plan_scatter_select("SELECT g, GROUP_CONCAT(s SEPARATOR '|') FROM t GROUP BY g")
    assert plan.aggregates[0].separator == b"|"


# --- refused, with a sentence -------------------------------------------------------------

@pytest.mark.parametrize("sql, words", [
    ("SELECT SUM(a)/2 FROM t", "over aggregates"),
    ("SELECT SUM(a)+COUNT(DISTINCT a) FROM t", "over aggregates"),
    ("SELECT IFNULL(SUM(a), 0) FROM t", "over aggregates"),
    ("SELECT g FROM t GROUP BY g ORDER BY SUM(a)/COUNT(*)", "over aggregates"),
    ("SELECT g FROM t GROUP BY g HAVING SUM(a) > COUNT(*)", "HAVING"),
    ("SELECT g FROM t GROUP BY g HAVING SUM(a) > 1 OR COUNT(*) > 2", "HAVING"),
    ("SELECT a, ROW_NUMBER() OVER (ORDER BY a) FROM t", "window"),
    ("SELECT SQL_CALC_FOUND_ROWS a FROM t LIMIT 3", "FOUND_ROWS"),
    ("SELECT a FROM t ORDER BY a LIMIT 2 FOR UPDATE", "lock"),
    ("SELECT a FROM t LIMIT 2 LOCK IN SHARE MODE", "lock"),
    ("SELECT a FROM t UNION SELECT b FROM u", "UNION"),
    ("SELECT a INTO @x FROM t", "INTO"),
    ("SELECT g FROM t GROUP BY g ORDER BY STD(a)", "only as a selected column"),
    ("SELECT STDDEV(DISTINCT a) FROM t", "STDDEV"),
    ("SELECT JSON_ARRAYAGG(a) FROM t", "JSON_ARRAYAGG"),
    ("SELECT GROUP_CONCAT(a ORDER BY 1) FROM t", "ORDER BY"),
    ("SELECT GROUP_CONCAT(DISTINCT a ORDER BY b) FROM t", "not determined"),
    ("SELECT g, a FROM t GROUP BY g WITH ROLLUP", "ROLLUP"),
    ("SELECT DISTINCT a FROM t ORDER BY b", "DISTINCT"),
    ("SELECT a FROM t ORDER BY RAND() LIMIT 1", "different each time"),
    ("SELECT a FROM t LIMIT ?", "LIMIT"),
    ("UPDATE t SET a = 1", "SELECT"),
    ("SELECT a FROM t WHERE", "parse"),
])
def test_refused_with_a_sentence(sql, words):
    with pytest.raises(NotSupported) as e:
        plan_scatter_select(sql)
    assert e.value.code == 1235
    assert words.lower() in e.value.message.lower()
    assert len(e.value.message.split()) >= 5


# --- the cache ----------------------------------------------------------------------------

def test_where_literals_share_one_cached_plan_and_keep_their_values():
    a, plan_a = plan_scatter_select("SELECT c FROM sbtest1 WHERE id BETWEEN 1 AND 100 ORDER BY c")
    b, plan_b = plan_scatter_select("SELECT c FROM sbtest1 WHERE id BETWEEN 57 AND 156 ORDER BY c")
    assert plan_a is plan_b
    assert b == "SELECT c, COLLATION(c) FROM sbtest1 WHERE id BETWEEN 57 AND 156 ORDER BY c"
    assert len(scatter._cache) == 1


def test_cached_edits_are_replayed_on_new_literals_and_comments():
    plan_scatter_select("SELECT AVG(k) FROM t WHERE c = 'x' AND id > 5 ORDER BY k LIMIT 2, 3")
    sql, plan = plan_scatter_select(
        "SELECT AVG(k) FROM t /* hi */ WHERE c = 'it''s' AND id > 123 ORDER BY k LIMIT 2, 3")
    assert len(scatter._cache) == 1
    assert node_sql_of(sql) == \
        "SELECT SUM(k), COUNT(k), AVG(k) FROM t /* hi */ WHERE c = 'it''s' AND id > 123"
    assert (plan.offset, plan.limit) == (2, 3)


def test_limit_and_select_literals_are_part_of_the_shape():
    _, p1 = plan_scatter_select("SELECT a FROM t WHERE x = 1 LIMIT 1, 5")
    _, p2 = plan_scatter_select("SELECT a FROM t WHERE x = 1 LIMIT 2, 5")
    assert (p1.offset, p2.offset) == (1, 2)
    _, p3 = plan_scatter_select("SELECT a FROM t ORDER BY 1")
    with pytest.raises(ProxyError):
        plan_scatter_select("SELECT a FROM t ORDER BY 2")
    assert p3.order_by == (SortKey(0),)


def test_refusals_are_cached_too():
    for i in range(3):
        with pytest.raises(NotSupported):
            plan_scatter_select(f"SELECT SUM(a)/2 FROM t WHERE id = {i}")
    assert len(scatter._cache) == 1


def test_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(scatter, "CACHE_SIZE", 8)
    for i in range(20):
        plan_scatter_select(f"SELECT a{i} FROM t")
    assert len(scatter._cache) == 8


def test_hints_and_trailing_semicolon_survive():
    sql, _ = plan_scatter_select("SELECT /*+ MAX_EXECUTION_TIME(100) */ a FROM t ORDER BY b;")
    assert sql == "SELECT /*+ MAX_EXECUTION_TIME(100) */ a, b, COLLATION(b) FROM t ORDER BY b;"


def test_lexer_masks_only_from_and_where_literals():
    toks = scatter._lex("SELECT 'a', x FROM t WHERE y = \"q\\\"z\" AND z = 0x1F LIMIT 3")
    sql = "SELECT 'a', x FROM t WHERE y = \"q\\\"z\" AND z = 0x1F LIMIT 3"
    key = scatter._shape_key(sql, toks, scatter._layout(sql, toks))
    assert "'a'" in key and "3" in key.split("\x1f")[-1]
    assert "q\\\"z" not in key and "0x1F" not in key
