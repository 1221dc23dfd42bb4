"""Merging per-node result sets: exact output bytes, properties against one engine, and MariaDB."""

from __future__ import annotations

import os
import random
import sqlite3
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meta.errors import NotSupported
from proxy.exec.merge import avg_decimal, decoded, merge_results, merge_streams, merged_columns
from proxy.plan.mergeplan import AVG, COUNT, MAX, MIN, SUM, Aggregate, HavingTerm, MergePlan, SortKey
from proxy.wire.numfmt import format_double
from proxy.wire.constants import (
    CHARSET_BINARY, ENUM_FLAG, T_DATETIME, T_DOUBLE, T_LONGLONG, T_NEWDECIMAL, T_STRING,
    T_TIME, T_VAR_STRING,
)
from proxy.wire.messages import ColumnDef, ResultSet, encode_text_row
from proxy.plan.scatter import plan_scatter_select

INT = ColumnDef("i", T_LONGLONG, CHARSET_BINARY, 21)
STR = ColumnDef("s", T_VAR_STRING)  # utf8mb4_general_ci
BIN = ColumnDef("b", T_VAR_STRING, CHARSET_BINARY)


def col(name: str, typ: int = T_LONGLONG, **kw) -> ColumnDef:
    if typ != T_VAR_STRING and "charset" not in kw:
        kw["charset"] = CHARSET_BINARY
    return ColumnDef(name, typ, **kw)


def b(*vals) -> list[bytes | None]:
    return [None if v is None else str(v).encode() for v in vals]


def merge(plan: MergePlan, columns: list[ColumnDef], *nodes: list[list]) -> list[list]:
    out = merge_results(plan, [ResultSet(columns, [b(*r) for r in rows]) for rows in nodes])
    return [[None if v is None else v.decode() for v in row] for row in out.rows]


# --- concatenation, ORDER BY, LIMIT -------------------------------------------------------

def test_plain_concatenation_keeps_node_order():
    cols = [col("c", T_VAR_STRING)]
    assert merge(MergePlan(), cols, [["x"], ["y"]], [], [["a"]]) == [["x"], ["y"], ["a"]]


def test_concat_with_limit():
    cols = [col("c")]
    assert merge(MergePlan(limit=2), cols, [[1]], [[2], [3]]) == [["1"], ["2"]]


def test_schema_probe_without_rows_keeps_columns():
    cols = [col("id"), col("c", T_VAR_STRING)]
    out = merge_results(MergePlan(), [ResultSet(cols, []), ResultSet(cols, [])])
    assert out.columns == cols and out.rows == []


def test_no_results_at_all():
    assert merge_results(MergePlan(), []).rows == []


def test_integers_compare_numerically_and_nulls_come_first():
    plan = MergePlan(order_by=(SortKey(0),))
    got = merge(plan, [col("k")], [[None], [2], [10]], [[None], [9], [100]])
    assert got == [[None], [None], ["2"], ["9"], ["10"], ["100"]]


def test_desc_puts_nulls_last():
    plan = MergePlan(order_by=(SortKey(0, True),))
    got = merge(plan, [col("k")], [[10], [2], [None]], [[9], [None]])
    assert got == [["10"], ["9"], ["2"], [None], [None]]


def test_decimal_and_double_compare_as_numbers():
    dec = col("d", T_NEWDECIMAL, decimals=2)
    dbl = col("f", T_DOUBLE, decimals=31)
    plan = MergePlan(order_by=(SortKey(0),))
    assert merge(plan, [dec], [["-10.50"], ["9.99"]], [["-2.00"], ["10.00"]]) == \
        [["-10.50"], ["-2.00"], ["9.99"], ["10.00"]]
    assert merge(plan, [dbl], [["-1e20"], ["2.5"]], [["1e-5"], ["10"]]) == \
        [["-1e20"], ["1e-5"], ["2.5"], ["10"]]


def test_strings_compare_case_insensitively_for_general_ci():
    plan = MergePlan(order_by=(SortKey(0),))
    got = merge(plan, [STR], [["apple"], ["Banana"], ["cherry"]], [["Apricot"], ["banjo"], ["_x"]])
    assert got == [["apple"], ["Apricot"], ["Banana"], ["banjo"], ["cherry"], ["_x"]]


def test_accents_fold_and_trailing_spaces_are_ignored():
    plan = MergePlan(order_by=(SortKey(0),))
    got = merge(plan, [STR], [["ea"], ["ez"]], [["e "], ["éb"]])
    assert got == [["e "], ["ea"], ["éb"], ["ez"]]


def test_binary_strings_compare_as_bytes():
    plan = MergePlan(order_by=(SortKey(0),))
    got = merge(plan, [BIN], [["B"], ["a"]], [["A"], ["b"]])
    assert got == [["A"], ["B"], ["a"], ["b"]]


def test_dates_sort_as_text_and_times_by_duration():
    plan = MergePlan(order_by=(SortKey(0),))
    dt = col("dt", T_DATETIME)
    assert merge(plan, [dt], [["2020-01-01 00:00:00"], ["2021-01-01 00:00:00"]],
                 [["2020-06-01 12:00:00.5"]]) == [
        ["2020-01-01 00:00:00"], ["2020-06-01 12:00:00.5"], ["2021-01-01 00:00:00"]]
    tm = col("tm", T_TIME)
    assert merge(plan, [tm], [["-01:00:00"], ["20:00:00"]], [["-00:00:01.5"], ["100:00:00"]]) \
        == [["-01:00:00"], ["-00:00:01.5"], ["20:00:00"], ["100:00:00"]]


def test_mixed_directions_and_hidden_column_is_stripped():
    plan = MergePlan(hidden=1, order_by=(SortKey(1, True), SortKey(0)))
    cols = [col("a"), col("hidden")]
    got = merge(plan, cols, [[1, 5], [3, 5], [2, 1]], [[0, 5], [4, 1]])
    assert got == [["0"], ["1"], ["3"], ["2"], ["4"]]
    out = merge_results(plan, [ResultSet(cols, [])])
    assert [c.name for c in out.columns] == ["a"]


def test_negative_columns_count_from_the_end():
    plan = MergePlan(hidden=1, order_by=(SortKey(-1),))
    cols = [col("x"), col("y"), col("h")]
    assert merge(plan, cols, [[1, 1, 2]], [[2, 2, 1]]) == [["2", "2"], ["1", "1"]]


def test_offset_and_limit_after_merge_sort():
    plan = MergePlan(order_by=(SortKey(0),), offset=2, limit=3)
    got = merge(plan, [col("k")], [[1], [4], [6], [8]], [[2], [3], [5], [7]])
    assert got == [["3"], ["4"], ["5"]]


def test_enum_order_is_refused_at_merge_time():
    enum = col("e", T_STRING, charset=45, flags=ENUM_FLAG)
    with pytest.raises(NotSupported, match="ENUM"):
        merge(MergePlan(order_by=(SortKey(0),)), [enum], [["b"]], [["a"]])


def test_distinct_respects_the_collation():
    plan = MergePlan(order_by=(SortKey(0),), distinct=True)
    got = merge(plan, [STR], [["a"], ["b"]], [["A"], ["b "], ["c"]])
    assert got == [["a"], ["b"], ["c"]]
    got = merge(plan, [BIN], [["a"], ["b"]], [["A"], ["b"]])
    assert got == [["A"], ["a"], ["b"]]


def test_distinct_without_order_and_nulls():
    got = merge(MergePlan(distinct=True), [col("a"), col("b")], [[1, None], [1, 2]],
                [[1, None], [2, 2]])
    assert got == [["1", None], ["1", "2"], ["2", "2"]]


# --- aggregates ---------------------------------------------------------------------------

SUM_INT = col("SUM(k)", T_NEWDECIMAL, length=33)
COUNT_COL = col("COUNT(*)", T_LONGLONG)


def test_sum_of_integers_is_decimal_text_without_fraction():
    plan = MergePlan(grouped=True, aggregates=(Aggregate(0, SUM),))
    assert merge(plan, [SUM_INT], [["1"]], [["5"]], [[None]]) == [["6"]]


def test_sum_of_decimals_and_doubles():
    """Decimals add exactly; doubles are refused (MariaDB's digits depend on its order of addition: the
    read goes over copies)."""
    dec = col("SUM(d)", T_NEWDECIMAL, decimals=3)
    dbl = col("SUM(f)", T_DOUBLE, decimals=31)
    plan = MergePlan(grouped=True, aggregates=(Aggregate(0, SUM),))
    assert merge(plan, [dec], [["1.500"]], [["-0.250"]]) == [["1.250"]]
    big = "9" * 60 + ".000"
    assert merge(plan, [dec], [[big]], [["1.000"]]) == [["1" + "0" * 60 + ".000"]]
    with pytest.raises(NotSupported, match="floating-point"):
        merge(plan, [dbl], [["0.5"]], [["2"]])


def test_count_min_max():
    cols = [COUNT_COL, col("MIN(s)", T_VAR_STRING), col("MAX(k)")]
    plan = MergePlan(grouped=True, aggregates=(Aggregate(0, COUNT), Aggregate(1, MIN),
                                               Aggregate(2, MAX)))
    assert merge(plan, cols, [["3", "b", "9"]], [["0", None, None]], [["2", "A", "10"]]) == \
        [["5", "A", "10"]]


def test_avg_output_scale_and_rounding():
    cols = [SUM_INT, col("COUNT(k)")]
    plan = MergePlan(hidden=1, grouped=True,
                     aggregates=(Aggregate(0, AVG, count_column=1, name="AVG(k)"),))
    assert merge(plan, cols, [["2", "2"]], [["3", "1"]]) == [["1.6667"]]
    assert merge(plan, cols, [["-5", "3"]], [[None, "0"]]) == [["-1.6667"]]
    assert merge(plan, cols, [[None, "0"]]) == [[None]]
    out = merge_results(plan, [ResultSet(cols, [b("1", "1")])])
    c = out.columns[0]
    assert (c.name, c.type, c.decimals, c.org_name) == ("AVG(k)", T_NEWDECIMAL, 4, "AVG(k)")
    assert len(out.columns) == 1


def test_avg_of_decimal_and_double():
    cols = [col("SUM(d)", T_NEWDECIMAL, decimals=3), col("SUM(f)", T_DOUBLE, decimals=31),
            col("COUNT(d)"), col("COUNT(f)")]
    plan = MergePlan(hidden=2, grouped=True, aggregates=(
        Aggregate(0, AVG, count_column=2, name="a"), Aggregate(1, AVG, count_column=3, name="f")))
    with pytest.raises(NotSupported, match="floating-point"):
        merge(plan, cols, [["1.000", "0.5", "1", "1"]], [["0.001", "1", "2", "2"]])
    plan = MergePlan(hidden=1, grouped=True, aggregates=(Aggregate(0, AVG, count_column=1, name="a"),))
    cols = [cols[0], cols[2]]
    assert merge(plan, cols, [["1.000", "1"]], [["0.001", "2"]]) == [["0.3336667"]]
    out_cols = merged_columns(plan, cols)
    assert (out_cols[0].type, out_cols[0].decimals) == (T_NEWDECIMAL, 7)
    assert len(out_cols) == 1


def test_empty_aggregate_without_group_by_returns_one_row():
    cols = [COUNT_COL, SUM_INT, col("MIN(k)"), col("BIT_AND(k)"), col("BIT_OR(k)"),
            col("GROUP_CONCAT(s)", T_VAR_STRING), col("x"), col("COUNT(k)")]
    plan = MergePlan(hidden=1, grouped=True, aggregates=(
        Aggregate(0, COUNT), Aggregate(1, SUM), Aggregate(2, MIN), Aggregate(3, "BIT_AND"),
        Aggregate(4, "BIT_OR"), Aggregate(5, "GROUP_CONCAT"), Aggregate(-1, COUNT)))
    assert merge(plan, cols, [], []) == [["0", None, None, "18446744073709551615", "0", None, None]]


def test_non_aggregated_column_prefers_a_value_from_a_real_row():
    cols = [col("name", T_VAR_STRING), COUNT_COL]
    plan = MergePlan(grouped=True, aggregates=(Aggregate(1, COUNT),))
    assert merge(plan, cols, [[None, "0"]], [["x", "2"]]) == [["x", "2"]]


def test_group_by_merges_groups_and_sorts_by_keys():
    cols = [col("g"), COUNT_COL, SUM_INT]
    plan = MergePlan(grouped=True, group_by=(0,), order_by=(SortKey(0),),
                     aggregates=(Aggregate(1, COUNT), Aggregate(2, SUM)))
    got = merge(plan, cols, [["2", "1", "5"], [None, "1", None], ["10", "2", "3"]],
                [["10", "1", "4"], ["2", "3", "1"]])
    assert got == [[None, "1", None], ["2", "4", "6"], ["10", "3", "7"]]


def test_group_keys_follow_the_collation():
    cols = [col("s", T_VAR_STRING), COUNT_COL]
    plan = MergePlan(grouped=True, group_by=(0,), order_by=(SortKey(0),),
                     aggregates=(Aggregate(1, COUNT),))
    assert merge(plan, cols, [["a", "1"], ["B", "2"]], [["A", "3"], ["b", "4"]]) == \
        [["a", "4"], ["B", "6"]]


def test_having_filters_merged_groups():
    cols = [col("g"), SUM_INT, col("COUNT(*)"), col("MAX(s)", T_VAR_STRING)]
    plan = MergePlan(grouped=True, group_by=(0,), order_by=(SortKey(0),), aggregates=(
        Aggregate(1, SUM), Aggregate(2, COUNT), Aggregate(3, MAX)),
        having=(HavingTerm(1, ">", "10"), HavingTerm(2, ">=", "2"), HavingTerm(3, "<>", "X", True)))
    got = merge(plan, cols, [["1", "6", "1", "a"], ["2", "20", "5", "x"], ["3", "5", "1", "b"]],
                [["1", "6", "1", "b"], ["3", "6", "1", "c"]])
    assert got == [["1", "12", "2", "b"], ["3", "11", "2", "c"]]


def test_having_on_avg_compares_the_merged_value():
    cols = [col("g"), SUM_INT, col("c")]
    plan = MergePlan(hidden=1, grouped=True, group_by=(0,), order_by=(SortKey(0),),
                     aggregates=(Aggregate(1, AVG, count_column=2),),
                     having=(HavingTerm(1, ">=", "1.5"),))
    assert merge(plan, cols, [["1", "1", "1"], ["2", "2", "2"]], [["1", "2", "1"]]) == \
        [["1", "1.5000"]]


def test_order_by_aggregate_desc_with_offset_limit():
    cols = [col("g"), COUNT_COL]
    plan = MergePlan(grouped=True, group_by=(0,), aggregates=(Aggregate(1, COUNT),),
                     order_by=(SortKey(1, True), SortKey(0)), offset=1, limit=2)
    got = merge(plan, cols, [["1", "5"], ["2", "1"], ["3", "2"]], [["2", "5"], ["4", "3"]])
    assert got == [["1", "5"], ["4", "3"]]


def test_count_distinct_merges_distinct_argument_values():
    # nodes ran: SELECT g, COUNT(DISTINCT x), x FROM t GROUP BY g, x
    cols = [col("g"), col("COUNT(DISTINCT x)"), col("x")]
    plan = MergePlan(hidden=1, grouped=True, group_by=(0,), order_by=(SortKey(0),),
                     aggregates=(Aggregate(1, COUNT, distinct=True, distinct_columns=(2,)),))
    got = merge(plan, cols, [["1", "1", "7"], ["1", "0", None], ["2", "1", "7"]],
                [["1", "1", "7"], ["1", "1", "8"]])
    assert got == [["1", "2"], ["2", "1"]]


def test_sum_distinct_uses_each_value_once():
    cols = [col("SUM(DISTINCT x)", T_NEWDECIMAL), col("x")]
    plan = MergePlan(hidden=1, grouped=True,
                     aggregates=(Aggregate(0, SUM, distinct=True, distinct_columns=(1,)),))
    assert merge(plan, cols, [["7", "7"], ["8", "8"]], [["7", "7"], [None, None]]) == [["15"]]


def test_group_concat_joins_partials_with_separator():
    cols = [col("g"), col("gc", T_VAR_STRING)]
    plan = MergePlan(grouped=True, group_by=(0,), order_by=(SortKey(0),),
                     aggregates=(Aggregate(1, "GROUP_CONCAT", separator=b"|"),))
    assert merge(plan, cols, [["1", "a|b"]], [["1", "c"], ["2", None]]) == \
        [["1", "a|b|c"], ["2", None]]


def test_grouped_distinct_dedupes_visible_columns():
    cols = [COUNT_COL, col("g")]
    plan = MergePlan(hidden=1, grouped=True, group_by=(1,), distinct=True,
                     aggregates=(Aggregate(0, COUNT),), order_by=(SortKey(0),))
    # merged groups: g=1 -> 1, g=2 -> 3, g=3 -> 1
    assert merge(plan, cols, [["1", "1"], ["2", "2"]], [["1", "2"], ["1", "3"]]) == [["1"], ["3"]]


def test_node_stream_sorted_differently_is_refused_not_misordered():
    plan = MergePlan(order_by=(SortKey(0),))
    with pytest.raises(NotSupported, match="collation"):
        merge(plan, [STR], [["b"], ["a"]], [["c"]])


def test_pushed_group_limit_with_nodes_sorted_differently_is_refused():
    cols = [col("g", T_VAR_STRING), COUNT_COL]
    plan = MergePlan(grouped=True, group_by=(0,), order_by=(SortKey(0),),
                     aggregates=(Aggregate(1, COUNT),), limit=2, node_limit=2)
    with pytest.raises(NotSupported, match="GROUP BY"):
        merge(plan, cols, [["b", "1"], ["a", "1"]], [["a", "1"]])
    assert merge(plan, cols, [["a", "1"], ["b", "1"]], [["a", "2"], ["b", "1"]]) == \
        [["a", "3"], ["b", "2"]]


# --- the streaming API --------------------------------------------------------------------

def test_merge_streams_is_lazy_for_ordered_limit():
    pulled = []

    def node(vals):
        for v in vals:
            pulled.append(v)
            yield [str(v).encode()]

    plan = MergePlan(order_by=(SortKey(0),), limit=2)
    out = merge_streams(plan, [col("k")], [node([1, 3, 5, 7]), node([2, 4, 6, 8])])
    assert [r[0] for r in out] == [b"1", b"2"]
    assert len(pulled) < 8


def test_decoded_splits_row_payloads():
    payloads = [encode_text_row([b"1", None]), encode_text_row([b"22", b"x"])]
    assert list(decoded(payloads, 2)) == [[b"1", None], [b"22", b"x"]]


def test_concat_only_flag():
    assert MergePlan(limit=3).concat_only
    assert not MergePlan(order_by=(SortKey(0),)).concat_only
    assert not MergePlan(hidden=1).concat_only


# --- formatting ---------------------------------------------------------------------------

@pytest.mark.parametrize("x, text", [
    (0.1 + 0.2, "0.30000000000000004"), (1e15, "1e15"), (1e16, "1e16"), (1e-5, "0.00001"),
    (123456789012345678.0, "1.2345678901234568e17"), (1.5e300, "1.5e300"), (-0.0, "0"),
    (1e14 + 0.5, "100000000000000.5"), (100.0, "100"), (2.5, "2.5"), (1e-15, "0.000000000000001"),
    (1e-16, "1e-16"), (1234567890123456.8, "1234567890123456.8"), (9999999999999998.0,
                                                                   "9.999999999999998e15"),
    (-1e-7, "-0.0000001"), (1e14, "100000000000000"), (5e-324, "5e-324"),
])
def test_format_double_like_mariadb(x, text):
    assert format_double(x) == text.encode()


def test_avg_decimal_rounds_half_away_from_zero():
    assert avg_decimal(Decimal(5), 3, 4) == Decimal("1.6667")
    assert avg_decimal(Decimal(-5), 3, 4) == Decimal("-1.6667")
    assert avg_decimal(Decimal(1), 8, 4) == Decimal("0.1250")
    assert avg_decimal(Decimal("0.00005"), 2, 9) == Decimal("0.000025000")
    assert str(avg_decimal(Decimal(6), 2, 4)) == "3.0000"
    big = Decimal("9" * 65)
    assert format(avg_decimal(big, 1, 4), "f") == "9" * 65 + ".0000"
    assert format(avg_decimal(big, 3, 4), "f") == "3" * 65 + ".0000"


# --- properties: scatter + merge equals one engine over all rows --------------------------

def _table(conn: sqlite3.Connection, rows: list[tuple]) -> None:
    conn.execute("CREATE TABLE t (id INTEGER, g INTEGER, a INTEGER, v INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)


def _sqlite(rows: list[tuple], sql: str) -> ResultSet:
    """Run SQL on an in-memory SQLite node; integer sums are typed DECIMAL like MySQL's."""
    conn = sqlite3.connect(":memory:")
    conn.create_function("COLLATION", 1, lambda v: "binary")  # MySQL's answer for numbers
    try:
        _table(conn, rows)
        cur = conn.execute(sql)
        cols = [col(d[0], T_NEWDECIMAL if d[0].upper().startswith("SUM(") else T_LONGLONG)
                for d in cur.description]
        data = [[None if v is None else str(v).encode() for v in r] for r in cur.fetchall()]
    finally:
        conn.close()
    return ResultSet(cols, data)


def _scatter(sql: str, parts: list[list[tuple]]) -> ResultSet:
    node_sql, plan = plan_scatter_select(sql)
    return merge_results(plan, [_sqlite(p, node_sql) for p in parts])


def _split(rows: list[tuple], owners: list[int], nodes: int) -> list[list[tuple]]:
    parts: list[list[tuple]] = [[] for _ in range(nodes)]
    for r, o in zip(rows, owners):
        parts[o % nodes].append(r)
    return parts


small = st.one_of(st.none(), st.integers(-5, 5))


@st.composite
def tables(draw, max_rows: int = 30):
    n = draw(st.integers(0, max_rows))
    rows = [(i, draw(small), draw(small), draw(st.one_of(st.none(), st.integers(-1000, 1000))))
            for i in range(n)]
    nodes = draw(st.integers(1, 4))
    owners = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    return rows, _split(rows, owners, nodes)


def _texts(rs: ResultSet) -> list[list[str | None]]:
    return [[None if v is None else v.decode() for v in r] for r in rs.rows]


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(tables(), st.sampled_from(["", "DESC"]), st.sampled_from(["", "DESC"]),
       st.integers(0, 8), st.integers(0, 12))
def test_order_by_limit_offset_equals_single_engine(data, d1, d2, m, n):
    rows, parts = data
    sql = f"SELECT id, a FROM t ORDER BY a {d1}, v {d2}, id LIMIT {m}, {n}"
    assert _texts(_scatter(sql, parts)) == _texts(_sqlite(rows, sql))


@PROPS
@given(tables(), st.integers(0, 6))
def test_order_by_hidden_column_equals_single_engine(data, n):
    rows, parts = data
    sql = f"SELECT id FROM t ORDER BY v DESC, id LIMIT {n}"
    assert _texts(_scatter(sql, parts)) == _texts(_sqlite(rows, sql))


def _avg_text(total: int, count: int) -> str:
    q = Fraction(total, count) * 10000
    r = int(abs(q) + Fraction(1, 2))
    s = f"{r // 10000}.{r % 10000:04d}"
    return "-" + s if q < 0 and r else s


def _expected_groups(rows: list[tuple]) -> dict:
    groups: dict = {}
    for _, g, _, v in rows:
        groups.setdefault(g, []).append(v)
    out = {}
    for g, vs in groups.items():
        nn = [v for v in vs if v is not None]
        out[g] = [None if g is None else str(g), str(len(vs)), str(len(nn)),
                  str(sum(nn)) if nn else None, str(min(nn)) if nn else None,
                  str(max(nn)) if nn else None,
                  _avg_text(sum(nn), len(nn)) if nn else None, str(len(set(nn)))]
    return out


@PROPS
@given(tables())
def test_group_by_aggregates_equal_single_computation(data):
    rows, parts = data
    sql = "SELECT g, COUNT(*), COUNT(v), SUM(v), MIN(v), MAX(v), AVG(v) FROM t GROUP BY g"
    got = _texts(_scatter(sql, parts))
    exp = _expected_groups(rows)
    keys = sorted(exp, key=lambda k: (k is not None, k if k is not None else 0))
    assert got == [exp[k][:7] for k in keys]


@PROPS
@given(tables(), st.integers(0, 3), st.integers(0, 4))
def test_group_by_order_by_aggregate_with_having_and_limit(data, m, n):
    rows, parts = data
    sql = (f"SELECT g, SUM(v) AS s, AVG(v) FROM t GROUP BY g HAVING COUNT(*) >= 2 "
           f"ORDER BY s DESC, g LIMIT {m}, {n}")
    exp = _expected_groups(rows)
    kept = [(k, e) for k, e in exp.items() if int(e[1]) >= 2]

    def order(item):
        k, e = item
        s = None if e[3] is None else int(e[3])
        return (s is None, -(s or 0), k is not None, k or 0)
    kept.sort(key=order)
    want = [[e[0], e[3], e[6]] for _, e in kept][m:m + n]
    assert _texts(_scatter(sql, parts)) == want


@PROPS
@given(tables(), st.integers(0, 5))
def test_group_by_key_order_with_pushed_limit(data, n):
    rows, parts = data
    sql = f"SELECT g, COUNT(*), SUM(v) FROM t GROUP BY g ORDER BY g DESC LIMIT {n}"
    exp = _expected_groups(rows)
    keys = sorted(exp, key=lambda k: (k is None, -(k or 0)))
    assert _texts(_scatter(sql, parts)) == [[exp[k][0], exp[k][1], exp[k][3]] for k in keys][:n]


@PROPS
@given(tables())
def test_count_distinct_equals_single_computation(data):
    rows, parts = data
    got = _texts(_scatter("SELECT g, COUNT(DISTINCT v) FROM t GROUP BY g", parts))
    exp = _expected_groups(rows)
    keys = sorted(exp, key=lambda k: (k is not None, k if k is not None else 0))
    assert got == [[exp[k][0], exp[k][7]] for k in keys]
    total = _texts(_scatter("SELECT COUNT(DISTINCT v) FROM t", parts))
    assert total == [[str(len({r[3] for r in rows if r[3] is not None}))]]


@PROPS
@given(tables())
def test_aggregates_without_group_by(data):
    rows, parts = data
    sql = "SELECT COUNT(*), SUM(v), MIN(v), MAX(v), AVG(v) FROM t"
    vs = [r[3] for r in rows if r[3] is not None]
    want = [str(len(rows)), str(sum(vs)) if vs else None, str(min(vs)) if vs else None,
            str(max(vs)) if vs else None, _avg_text(sum(vs), len(vs)) if vs else None]
    assert _texts(_scatter(sql, parts)) == [want]


@PROPS
@given(tables(), st.integers(0, 5), st.integers(0, 5))
def test_distinct_order_limit_equals_single_engine(data, m, n):
    rows, parts = data
    sql = f"SELECT DISTINCT a, g FROM t ORDER BY a, g DESC LIMIT {m}, {n}"
    assert _texts(_scatter(sql, parts)) == _texts(_sqlite(rows, sql))


@PROPS
@given(tables())
def test_distinct_without_order_equals_single_engine_as_a_set(data):
    rows, parts = data
    sql = "SELECT DISTINCT a FROM t"
    got = _texts(_scatter(sql, parts))
    assert len(got) == len({tuple(r) for r in got})
    assert sorted(got, key=repr) == sorted(_texts(_sqlite(rows, sql)), key=repr)


# --- against MariaDB: our merge of per-shard answers equals its answer over the union ------

@pytest.fixture(scope="module")
def shards(backends):
    """Three shard databases and one holding all rows (on a harness MariaDB), dropped afterwards."""
    import pymysql.converters
    conn = backends[0].connect()
    base = f"merge_check_{os.getpid()}"
    dbs = [f"{base}_{i}" for i in range(3)] + [f"{base}_all"]
    rnd = random.Random(7)
    words = ["apple", "Apple", "banana", "Banana ", "cherry", "éclair", "eclair", "Zeta", "_x",
             "a b", "", None]
    rows = []
    for i in range(60):
        rows.append((i, rnd.choice([None, 1, 2, 3, 10, -4]),
                     rnd.choice([None] + list(range(-20, 40))),
                     rnd.choice([None, "1.500", "-2.250", "0.001", "100.000", "3.333"]),
                     rnd.choice([None, 0.5, 1.25, -3.0, 1e12, 2.75]), rnd.choice(words),
                     rnd.choice([None, b"A", b"a", b"B", b"\x00z"]),
                     rnd.choice([None, "2020-01-01 00:00:00", "2019-12-31 23:59:59",
                                 "2020-01-01 00:00:00.5"]),
                     rnd.choice([None, "-01:00:00", "20:00:00", "100:00:00", "00:00:01"])))
    try:
        with conn.cursor() as cur:
            for db in dbs:
                cur.execute(f"CREATE DATABASE `{db}`")
                cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, g INT, v INT, "
                            "d DECIMAL(10,3), f DOUBLE, s VARCHAR(20) COLLATE utf8mb4_general_ci, "
                            "bn VARBINARY(10), dt DATETIME(1), tm TIME) CHARSET utf8mb4")
            ins = "INSERT INTO `{}`.t VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)"
            for r in rows:
                cur.execute(ins.format(dbs[r[0] % 3]), r)
                cur.execute(ins.format(dbs[-1]), r)
        raw = backends[0].connect(conv=dict(pymysql.converters.encoders))
        yield raw, dbs
        raw.close()
    finally:
        with conn.cursor() as cur:
            for db in dbs:
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        conn.close()


def _run(raw, db: str, sql: str) -> ResultSet:
    with raw.cursor() as cur:
        cur.execute(f"USE `{db}`")
        cur.execute(sql)
        fields = cur._result.fields
        cols = [ColumnDef(f.name, f.type_code, f.charsetnr, f.length, f.flags, f.scale)
                for f in fields]
        rows = [[None if v is None else (v if isinstance(v, bytes) else v.encode()) for v in r]
                for r in cur.fetchall()]
    return ResultSet(cols, rows)


EXACT = [
    "SELECT id, s FROM t ORDER BY s, id",
    "SELECT id, s FROM t ORDER BY s DESC, id LIMIT 3, 7",
    "SELECT id FROM t ORDER BY v DESC, id LIMIT 5 OFFSET 4",
    "SELECT id, v FROM t ORDER BY d, id",
    "SELECT id, f FROM t ORDER BY f DESC, id",
    "SELECT id FROM t ORDER BY bn, id",
    "SELECT id, dt FROM t ORDER BY dt, id",
    "SELECT id, tm FROM t ORDER BY tm DESC, id",
    "SELECT v FROM t ORDER BY v LIMIT 5, 9",
    "SELECT DISTINCT v FROM t ORDER BY v",
    "SELECT DISTINCT bn FROM t ORDER BY bn",
    "SELECT g, COUNT(*), COUNT(v), SUM(v), MIN(v), MAX(v), AVG(v), SUM(d), AVG(d), MIN(d),"
    " MAX(f) FROM t GROUP BY g",
    "SELECT COUNT(*), SUM(v), AVG(v), AVG(d), MIN(f), MIN(dt), MAX(tm) FROM t",
    "SELECT COUNT(*), SUM(v), AVG(v), MIN(s), BIT_AND(v), COUNT(DISTINCT v) FROM t WHERE 1=0",
    "SELECT g, SUM(v) AS sv FROM t GROUP BY g HAVING sv > 10 ORDER BY sv DESC, g LIMIT 3",
    "SELECT g, COUNT(DISTINCT v), SUM(DISTINCT v), AVG(DISTINCT v) FROM t GROUP BY g",
    "SELECT COUNT(DISTINCT v), COUNT(DISTINCT v, g) FROM t",
    "SELECT g, BIT_OR(v), BIT_AND(v), BIT_XOR(v) FROM t GROUP BY g",
    "SELECT g, AVG(v) AS m FROM t GROUP BY g ORDER BY m, g LIMIT 1, 3",
    "SELECT g FROM t GROUP BY g ORDER BY COUNT(*) DESC, g",
    "SELECT g, COUNT(*) FROM t GROUP BY g ORDER BY g DESC LIMIT 2",
    "SELECT g, COUNT(*) FROM t GROUP BY g LIMIT 1, 2",
    "SELECT * FROM t WHERE 1=0",
    "SELECT * FROM t ORDER BY id LIMIT 4",
    "SELECT * FROM t WHERE id < 20 ORDER BY 2 DESC, 1",
    "SELECT t.*, v * 2 AS w FROM t ORDER BY w DESC, id LIMIT 5",
    "SELECT g, COUNT(*) AS c FROM t WHERE s <> 'ORDER BY x, y' GROUP BY g HAVING c > 2 "
    "ORDER BY c DESC, g",
    "SELECT /*!40001 SQL_NO_CACHE */ id FROM t ORDER BY s COLLATE utf8mb4_bin, id LIMIT 10",
    "SELECT g, AVG(d) FROM t GROUP BY g HAVING AVG(d) > 1 ORDER BY AVG(d) DESC",
    "SELECT DISTINCT g, v FROM t ORDER BY g DESC, v LIMIT 2, 6",
    "SELECT g, MIN(dt), MAX(tm), COUNT(DISTINCT s) FROM t GROUP BY g",
    "SELECT COUNT(*) FROM t WHERE 1=0 GROUP BY g",
    "SELECT g, v, COUNT(*) FROM t GROUP BY g, v ORDER BY v DESC, g LIMIT 3, 4",
]


def _fold(rs: ResultSet) -> list:
    return sorted(([v.decode("utf-8").rstrip(" ").lower() if v is not None else None
                    for v in r] for r in rs.rows), key=repr)


@pytest.mark.parametrize("sql", EXACT)
def test_merge_matches_mariadb_over_the_union(shards, sql):
    raw, dbs = shards
    node_sql, plan = plan_scatter_select(sql)
    merged = merge_results(plan, [_run(raw, db, node_sql) for db in dbs[:-1]])
    want = _run(raw, dbs[-1], sql)
    assert merged.rows == want.rows
    assert [(c.name, c.type, c.decimals) for c in merged.columns] == \
        [(c.name, c.type, c.decimals) for c in want.columns]


@pytest.mark.parametrize("sql", [
    "SELECT DISTINCT s FROM t ORDER BY s",
    "SELECT s, COUNT(*) FROM t GROUP BY s",
    "SELECT s, MIN(s), MAX(s) FROM t GROUP BY s",
    "SELECT s, COUNT(*) FROM t GROUP BY s ORDER BY s LIMIT 4",
    "SELECT s, COUNT(*) FROM t GROUP BY s ORDER BY s DESC LIMIT 1, 3",
])
def test_case_insensitive_answers_match_mariadb_up_to_representative(shards, sql):
    raw, dbs = shards
    node_sql, plan = plan_scatter_select(sql)
    merged = merge_results(plan, [_run(raw, db, node_sql) for db in dbs[:-1]])
    want = _run(raw, dbs[-1], sql)
    assert _fold(merged) == _fold(want)
    assert len(merged.rows) == len(want.rows)


def test_group_concat_matches_mariadb_as_multisets(shards):
    raw, dbs = shards
    sql = "SELECT g, GROUP_CONCAT(v SEPARATOR ';') FROM t GROUP BY g"
    node_sql, plan = plan_scatter_select(sql)
    merged = merge_results(plan, [_run(raw, db, node_sql) for db in dbs[:-1]])
    want = _run(raw, dbs[-1], sql)

    def parts(rs):
        return [(r[0], None if r[1] is None else sorted(r[1].split(b";"))) for r in rs.rows]
    assert parts(merged) == parts(want)


def test_double_formatting_matches_mariadb(shards):
    raw, dbs = shards
    rnd = random.Random(3)
    vals = [rnd.uniform(-1, 1) * 10 ** rnd.randint(-20, 20) for _ in range(200)]
    vals += [float(10 ** k) for k in range(-18, 22)] + [1.5 * 10 ** k for k in range(-18, 22)]
    exprs = ", ".join(f"{v!r}e0" if "e" not in repr(v) else repr(v) for v in vals)
    with raw.cursor() as cur:
        cur.execute(f"SELECT {exprs}")
        got = cur.fetchone()
    assert [format_double(v).decode() for v in vals] == list(got)
