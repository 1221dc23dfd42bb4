"""Normalization and the consistent / inconsistent / unknown / lost rules."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from meta.consistency import Consistency, consistent_in_memory, differing_nodes, judge, normalize_create
from meta.model import TableMeta

BASE = ("CREATE TABLE `t` (\n"
        "  `id` int(11) NOT NULL AUTO_INCREMENT,\n"
        "  `c` varchar(10) DEFAULT 'AUTO_INCREMENT=5',\n"
        "  PRIMARY KEY (`id`)\n"
        ") ENGINE=InnoDB{ai} {cs}=utf8mb4 COLLATE=utf8mb4_general_ci")


def ddl(ai: str = "", cs: str = "DEFAULT CHARSET") -> str:
    return BASE.format(ai=ai, cs=cs)


def test_normalize_drops_auto_increment_value_only_in_table_options() -> None:
    n = normalize_create(ddl(" AUTO_INCREMENT=42"))
    assert "AUTO_INCREMENT=42" not in n
    assert "NOT NULL AUTO_INCREMENT," in n            # the column attribute stays
    assert "DEFAULT 'AUTO_INCREMENT=5'" in n           # so does a literal that looks like one
    assert n == normalize_create(ddl())


def test_normalize_charset_spellings_alike() -> None:
    assert normalize_create(ddl(cs="DEFAULT CHARSET")) == normalize_create(ddl(cs="CHARSET"))
    assert "DEFAULT 'AUTO" in normalize_create(ddl(cs="CHARSET"))


def test_normalize_keeps_everything_else() -> None:
    a = ddl()
    assert normalize_create(a.replace("COLLATE=utf8mb4_general_ci", "COLLATE=utf8mb4_bin")) != \
        normalize_create(a)
    assert normalize_create(a.replace("varchar(10)", "varchar(11)")) != normalize_create(a)
    plain = "CREATE TABLE `x` (\n  `a` int(11) DEFAULT NULL\n) ENGINE=InnoDB"
    assert normalize_create(plain) is plain


def test_normalize_keeps_partitioning_after_options() -> None:
    a = ddl(" AUTO_INCREMENT=7") + "\n PARTITION BY HASH (`id`)\nPARTITIONS 4"
    b = ddl() + "\n PARTITION BY HASH (`id`)\nPARTITIONS 4"
    assert normalize_create(a) == normalize_create(b)
    assert normalize_create(a).endswith("PARTITIONS 4")


@given(st.integers(0, 10**12), st.booleans())
def test_normalize_is_idempotent(ai: int, default_cs: bool) -> None:
    s = ddl(f" AUTO_INCREMENT={ai}", "DEFAULT CHARSET" if default_cs else "CHARSET")
    once = normalize_create(s)
    assert normalize_create(once) == once == normalize_create(ddl())


NODES = ("dn1", "dn2", "dn3", "dn4")


def test_identical_texts_are_consistent() -> None:
    text = ddl()
    v = judge(NODES, {n: text for n in NODES})
    assert v.state is Consistency.CONSISTENT and v.structure is text
    assert v.variants[0].nodes == NODES


def test_auto_increment_and_charset_differences_are_consistent() -> None:
    v = judge(NODES, {"dn1": ddl(" AUTO_INCREMENT=3"), "dn2": ddl(), "dn3": ddl(cs="CHARSET"),
                      "dn4": ddl(" AUTO_INCREMENT=99")})
    assert v.state is Consistency.CONSISTENT
    assert len(v.variants) == 1


def test_column_differing_on_one_node_is_inconsistent_and_says_where() -> None:
    other = ddl().replace("varchar(10)", "varchar(20)")
    v = judge(NODES, {"dn1": ddl(), "dn2": ddl(), "dn3": other, "dn4": ddl()})
    assert v.state is Consistency.INCONSISTENT
    assert v.structure == ddl()                      # the majority's text
    assert [var.nodes for var in v.variants] == [("dn1", "dn2", "dn4"), ("dn3",)]
    assert "{dn3}" in v.describe() and "inconsistent" in v.describe()


def test_missing_on_one_node_is_inconsistent() -> None:
    v = judge(NODES, {"dn1": ddl(), "dn2": None, "dn3": ddl(), "dn4": ddl()})
    assert v.state is Consistency.INCONSISTENT
    assert v.missing == ("dn2",)
    assert v.structure == ddl()


def test_unreachable_node_is_unknown_never_consistent() -> None:
    v = judge(NODES, {"dn1": ddl(), "dn2": ddl(), "dn3": ddl()}, {"dn4": "timed out"})
    assert v.state is Consistency.UNKNOWN
    assert v.unknown == ("dn4",) and v.structure == ddl()
    # but a real difference among the nodes that answered is still reported
    v = judge(NODES, {"dn1": ddl(), "dn2": None, "dn3": ddl()}, {"dn4": "down"})
    assert v.state is Consistency.INCONSISTENT


def test_all_unreachable_is_unknown_all_missing_is_lost() -> None:
    v = judge(NODES, {}, {n: "down" for n in NODES})
    assert v.state is Consistency.UNKNOWN and v.structure is None
    v = judge(NODES, {n: None for n in NODES})
    assert v.state is Consistency.LOST and v.structure is None and v.missing == NODES
    assert Consistency.LOST.flag == 0 and Consistency.CONSISTENT.flag == 1


def test_tie_prefers_first_node_order() -> None:
    other = ddl().replace("int(11)", "bigint(20)")
    v = judge(("dn1", "dn2"), {"dn1": other, "dn2": ddl()})
    assert v.structure == other and v.state is Consistency.INCONSISTENT


def _meta(node_sql, unknown=None, structure=None):
    from types import MappingProxyType
    return TableMeta("s", "t", "global", NODES, node_sql, structure, Consistency.CONSISTENT,
                     unknown=MappingProxyType(unknown or {}))


def test_consistent_in_memory() -> None:
    mem = _meta({n: ddl() for n in NODES}, structure=ddl())
    assert consistent_in_memory(mem, _meta({n: ddl(" AUTO_INCREMENT=9") for n in NODES})) is True
    changed = {n: ddl() for n in NODES}
    changed["dn2"] = ddl().replace("varchar(10)", "text")
    assert consistent_in_memory(mem, _meta(changed)) is False
    gone = {n: ddl() for n in NODES}
    gone["dn4"] = None
    assert consistent_in_memory(mem, _meta(gone)) is False
    part = {n: ddl() for n in NODES[:3]}
    assert consistent_in_memory(mem, _meta(part, {"dn4": "down"})) is None
    assert consistent_in_memory(None, _meta(part)) is False
    assert consistent_in_memory(_meta({}, structure=None), _meta(part)) is False


def test_differing_nodes_names_the_nodes_off_the_majority() -> None:
    other = ddl().replace("varchar(10)", "varchar(20)")
    assert differing_nodes(judge(NODES, {n: ddl() for n in NODES})) == ""
    assert differing_nodes(judge(NODES, {"dn1": ddl(), "dn2": other, "dn3": ddl(), "dn4": ddl()})) == "dn2"
    assert differing_nodes(judge(NODES, {"dn1": ddl(), "dn2": ddl(), "dn3": None}, {"dn4": "down"})) \
        == "dn3(missing),dn4(unknown)"
