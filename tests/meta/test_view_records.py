"""The view records and the single-instance file that keeps them across restarts."""

from __future__ import annotations

import pytest

from meta.views import BadView, ViewCatalog, ViewDef, ViewFile


def _view(name: str, node: str | None = None) -> ViewDef:
    return ViewDef("schema1", name, f"CREATE VIEW `{name}` AS SELECT 1", "SELECT 1", ("1",), node,
                   (("schema1", "t"),))


def test_records_round_trip_and_the_file_is_replaced_whole(tmp_path):
    v = _view("V1", node="dn5")
    back = ViewDef.decode(v.encode())
    assert back.name == "v1" and back.node == "dn5" and back.tables == (("schema1", "t"),) and back.columns == ("1",)
    f = ViewFile(str(tmp_path / "data"))
    assert f.load() == []
    f.save([_view("b"), _view("a", "dn1")])
    assert [x.name for x in f.load()] == ["a", "b"] and f.load()[0].node == "dn1"
    f.save([_view("c")])
    assert [x.name for x in f.load()] == ["c"]
    assert not list((tmp_path / "data").glob("*.tmp"))
    (tmp_path / "data" / "views.json").write_text('{"views": [{"schema": "s"}]}')
    with pytest.raises(BadView):
        f.load()
    with pytest.raises(BadView):
        ViewDef.decode(b"not json")


def test_the_catalog_is_swapped_whole():
    cat = ViewCatalog()
    a = _view("a")
    cat.put(a)
    before = cat.version
    assert not cat.replace_all([a])          # the same set: nothing to re-plan
    assert cat.replace_all([_view("b")]) and cat.version > before
    assert cat.get("schema1", "B") is not None and cat.get("schema1", "a") is None
    assert cat.names() == {"b"} and [v.name for v in cat.of_schema("schema1")] == ["b"]
