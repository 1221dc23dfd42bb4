"""Manager command parsing: every form DESIGN.md §4 lists, and refusal of everything else."""

from __future__ import annotations

import pytest

from proxy.manager.manager_parse import (CheckFullMetadata, CheckMetadata, KillDdlLock, ManagerSyntaxError, ReloadMetadata,
                                 RepairDdl, ShowCluster, ShowDdl, ShowHelp, TableFilter, normalize_time, parse_manager)


@pytest.mark.parametrize("sql, expect", [
    ("reload @@metadata", TableFilter()),
    ("RELOAD @@METADATA;", TableFilter()),
    ("reload @@metadata where schema='s1'", TableFilter("s1")),
    ("reload @@metadata where schema=s1 and table=t1", TableFilter("s1", "t1")),
    ('reload  @@metadata  where schema = "s1"  and  table = "t1"', TableFilter("s1", "t1")),
    ("reload @@metadata where schema=`s1` and table=`t1`", TableFilter("s1", "t1")),
    ("reload @@metadata where table in ('s1.t1','s2.t2')", TableFilter(tables=(("s1", "t1"), ("s2", "t2")))),
    ("reload @@metadata where table in (s1.t1, `s2`.`t2`, \"s3.t3\")",
     TableFilter(tables=(("s1", "t1"), ("s2", "t2"), ("s3", "t3")))),
])
def test_reload_forms(sql: str, expect: TableFilter) -> None:
    assert parse_manager(sql) == ReloadMetadata(expect)


def test_check_full_filters() -> None:
    assert parse_manager("check full @@metadata") == CheckFullMetadata(TableFilter())
    assert parse_manager("check full @@metadata where schema='s' and table='t'") == \
        CheckFullMetadata(TableFilter("s", "t"))
    assert parse_manager("check full @@metadata where consistent_in_sharding_nodes = 0") == \
        CheckFullMetadata(TableFilter(), consistent_in_sharding_nodes=0)
    assert parse_manager("check full @@metadata where consistent_in_data_nodes=1") == \
        CheckFullMetadata(TableFilter(), consistent_in_sharding_nodes=1)
    assert parse_manager("check full @@metadata where consistent_in_memory=1") == \
        CheckFullMetadata(TableFilter(), consistent_in_memory=1)
    for op in (">=", "<=", "="):
        assert parse_manager(f"check full @@metadata where reload_time {op} '2026-01-02 03:04:05'") == \
            CheckFullMetadata(TableFilter(), reload_time_op=op, reload_time="2026/01/02 03:04:05")
    assert parse_manager('check full @@metadata where reload_time>="2026/1/2 3:04"').reload_time == \
        "2026/01/02 03:04:00"
    assert parse_manager("check full @@metadata where reload_time is null") == \
        CheckFullMetadata(TableFilter(), reload_time_op="is null")


def test_other_commands() -> None:
    assert parse_manager("check @@metadata") == CheckMetadata()
    assert parse_manager("show @@ddl") == ShowDdl()
    assert parse_manager("show @@cluster") == ShowCluster()
    assert parse_manager("show @@help") == ShowHelp()
    assert parse_manager("kill @@ddl_lock where schema='s' and table='t'") == KillDdlLock("s", "t")
    assert parse_manager("kill @@ddl_lock where schema=s and table=`t`") == KillDdlLock("s", "t")
    assert parse_manager("KILL @@ddl_lock where schema='s' and table='t' FORCE") == KillDdlLock("s", "t", True)
    assert parse_manager("REPAIR @@DDL where schema='s' and table='T';") == RepairDdl("s", "T")


@pytest.mark.parametrize("sql", [
    "reload @@metadata where", "reload @@metadata where table in ()", "reload @@metadata where table in (a)",
    "reload @@metadata where table in ('a.b.c')", "reload @@metadata where schema='a' and",
    "check @@metadata where x", "check full @@metadata where reload_time > 'soon'",
    "check full @@metadata where reload_time is not null", "kill @@ddl_lock where schema='s'",
    "repair @@ddl", "repair @@ddl where schema='s'",
    "show @@ddl where 1", "show @@ddls", "", "select 1",
])
def test_malformed_is_a_usage_error(sql: str) -> None:
    with pytest.raises(ManagerSyntaxError) as ei:
        parse_manager(sql)
    assert ei.value.code == 1064 and ("usage:" in ei.value.message or "show @@help" in ei.value.message
                                      or "yyyy/MM/dd HH:mm:ss" in ei.value.message)


def test_normalize_time() -> None:
    assert normalize_time("2026-11-22 10:00:05") == "2026/11/22 10:00:05"   # as check full @@metadata shows it
    assert normalize_time("2026/11/22") == "2026/11/22 00:00:00"
    assert normalize_time("yesterday") is None
