"""DDL history: every DDL's record kept, bounded, shown by `show @@ddl_history` and `pydble ddl history`,
and still there after a restart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pymysql
import pytest

REPO = Path(__file__).resolve().parents[2]


def _history(proxy):
    conn = proxy.manager()
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("show @@ddl_history")
            return cur.fetchall()
    finally:
        conn.close()


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)


def test_history_survives_a_restart_and_shows_who_what_how(fresh_proxy):
    p = fresh_proxy()
    p.query("DROP TABLE IF EXISTS sharding_2_t1")
    p.query("CREATE TABLE sharding_2_t1 (id INT PRIMARY KEY)")
    with pytest.raises(pymysql.MySQLError):
        p.query("ALTER TABLE sharding_2_t1 DROP COLUMN nope")
    rows = _history(p)
    assert [r["sql"] for r in rows[:3]] == ["ALTER TABLE sharding_2_t1 DROP COLUMN nope",
                                            "CREATE TABLE sharding_2_t1 (id INT PRIMARY KEY)",
                                            "DROP TABLE IF EXISTS sharding_2_t1"]
    alter, create = rows[0], rows[1]
    assert alter["outcome"] == "FAILED" and "1091" in alter["message"]
    assert create["outcome"] == "OK" and create["user"] == "test" and create["tables"] == "schema1.sharding_2_t1"
    assert create["nodes"] == "dn1,dn2" and create["instance"] == p.instance
    phases = json.loads(create["phases_ms"])
    assert {"execute", "refresh", "total"} <= set(phases) and phases["total"] >= phases["execute"]
    assert int(create["meta_version"]) > 0
    p.restart()
    assert [r["sql"] for r in _history(p)[:3]] == [r["sql"] for r in rows[:3]]
    out = _cli("ddl", "history", "--config", str(p.config_path), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["sql"] == "ALTER TABLE sharding_2_t1 DROP COLUMN nope"


def test_cluster_history_is_cluster_wide(zookeeper, zk_root, fresh_proxy):
    from harness import cluster_section
    cl = cluster_section(zookeeper, root=zk_root, session_timeout_s=3, ack_timeout_s=5)
    p1 = fresh_proxy(instance="dble-1", cluster=cl)
    p2 = fresh_proxy(instance="dble-2", cluster=cl)
    p1.query("CREATE TABLE IF NOT EXISTS sharding_4_t1 (id INT PRIMARY KEY)")
    p2.query("ALTER TABLE sharding_4_t1 ADD COLUMN hist_c INT")
    out = _cli("ddl", "history", "--config", str(p1.config_path), "--json")
    assert out.returncode == 0, out.stderr
    entries = json.loads(out.stdout)
    assert [(e["instance"], e["status"]) for e in entries[:2]] == [("dble-2", "SUCCESS"), ("dble-1", "SUCCESS")]
    assert entries[0]["user"] == "test" and entries[0]["nodes"] == ["dn1", "dn2", "dn3", "dn4"]
    assert entries[0]["phases_ms"]["total"] > 0
    p2.query("ALTER TABLE sharding_4_t1 DROP COLUMN hist_c")
