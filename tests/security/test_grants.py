"""The grant check without sockets: privileges config validation, and the router refusing what a
user's grants do not cover (the one check every path goes through, fast path included)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "proxy"))
from test_router import EXAMPLE  # noqa: E402

from meta.config import ConfigError, parse_config  # noqa: E402
from meta.errors import DbAccessDenied, NotSupported, TableAccessDenied  # noqa: E402
from proxy.plan.analyzer import Grants  # noqa: E402
from proxy.plan.router import Router  # noqa: E402


def _config(**user):
    raw = copy.deepcopy(EXAMPLE)
    raw["users"].append(dict({"name": "u", "password": "p", "schemas": ["schema1"]}, **user))
    return parse_config(raw)


def _grants(cfg, name="u"):
    return Grants(cfg.users[name], "10.0.0.7", cfg)


@pytest.mark.parametrize("privileges, fragment", [
    ({"schema1": "111"}, "four 0/1 digits"),
    ({"schema1": "11x1"}, "four 0/1 digits"),
    ({"schema1": 1111}, "four 0/1 digits"),
    ({"nosuch": "1111"}, "unknown schema 'nosuch'"),
    ({"schema2.sing": "0010"}, "not in the user's schemas"),
    ({"schema1.a.b": "0010"}, "schema or schema.table"),
])
def test_bad_privileges_are_named(privileges, fragment):
    with pytest.raises(ConfigError) as e:
        _config(privileges=privileges)
    assert fragment in str(e.value) and "users.u.privileges" in str(e.value)


def test_a_table_entry_overrides_its_schema():
    u = _config(privileges={"schema1": "0010", "schema1.Test": "1111"}).users["u"]
    assert u.dml("schema1", "test") == "1111" and u.dml("schema1", "sharding_2_t1") == "0010"
    assert u.dml("schema2", "sing") == "0000"


def test_the_router_refuses_before_planning():
    cfg = _config(privileges={"schema1": "0010"})
    r, g = Router(cfg), _grants(cfg)
    assert r.route("SELECT * FROM sharding_2_t1 WHERE id = 1", "schema1", g).targets  # the point read
    with pytest.raises(TableAccessDenied) as e:
        r.route("UPDATE sharding_2_t1 SET v = 1 WHERE id = 1", "schema1", g)
    assert e.value.message == "UPDATE command denied to user 'u'@'10.0.0.7' for table 'sharding_2_t1'"
    with pytest.raises(TableAccessDenied):
        r.route("SELECT * FROM schema2.sing", "schema1", g)
    with pytest.raises(TableAccessDenied):
        r.route("EXPLAIN DELETE FROM sharding_2_t1", "schema1", g)    # EXPLAIN needs what it explains
    with pytest.raises(DbAccessDenied) as e2:
        r.route("SELECT 1 FROM mysql.user", "schema1", g)
    assert e2.value.message == "Access denied for user 'u'@'10.0.0.7' to database 'mysql'"
    # the same shapes, cached, for a user who may: the cache holds analyses, not verdicts
    full = _grants(cfg, "test")
    assert r.route("UPDATE sharding_2_t1 SET v = 1 WHERE id = 1", "schema1", full).targets
    assert r.route("SELECT * FROM schema2.sing", "schema1", full).targets


def test_point_reads_are_checked_too():
    cfg = _config(privileges={"schema1.sharding_2_t1": "0000"})
    r, g = Router(cfg), _grants(cfg)
    with pytest.raises(TableAccessDenied):
        r.point_read("SELECT id FROM sharding_2_t1 WHERE id = 1", "schema1", g)
    assert r.point_read("SELECT id FROM sharding_2_t1 WHERE id = 1", "schema1") is not None


def test_show_forms_and_hints():
    cfg = _config()
    r, g = Router(cfg), _grants(cfg)
    assert r.route("SHOW VARIABLES WHERE Variable_name IN ('a', 'b')", "schema1", g).targets
    # the session answers SHOW TABLE STATUS / TRIGGERS over the logical schemas; a backend never lists its
    # database, which may hold other schemas' tables
    for sql in ("SHOW PROCEDURE STATUS", "SHOW BINLOG EVENTS", "SHOW OPEN TABLES", "SHOW CREATE DATABASE db1",
                "SHOW TABLE STATUS LIKE 'x'", "SHOW TABLE STATUS FROM schema2", "SHOW TRIGGERS"):
        with pytest.raises(NotSupported):
            r.route(sql, "schema1", g)
    # dn1's database also holds schema2.sing: schema1's name for it lives on dn5, not dn1
    with pytest.raises(NotSupported):
        r.route("/*!pydble:shardingNode=dn1*/ SELECT * FROM sing", "schema1", g)
    assert r.route("/*!pydble:shardingNode=dn1*/ SELECT * FROM sharding_2_t1", "schema1", g).hint
    assert r.route("/*!pydble:shardingNode=dn5*/ SELECT 1", "schema1", g).hint
