"""Views in a cluster: kept in ZooKeeper, answered by every instance the moment the creator says OK."""

from __future__ import annotations

import json

import pymysql
import pytest
from clusterkit import TABLE


def test_a_view_made_on_one_instance_is_answered_at_once_by_the_other(cluster, backends, backend_rows):
    backend_rows(backends[0], "db1", "DROP VIEW IF EXISTS sv")   # left by an earlier run that died
    p1, p2 = cluster.start(2)
    p1.query(f"INSERT INTO {TABLE} VALUES (1, 10), (2, 20), (3, 30), (4, 40)")
    p1.query("DROP TABLE IF EXISTS sing", database="schema2")
    p1.query("CREATE TABLE sing (id INT PRIMARY KEY)", database="schema2")

    p1.query(f"CREATE VIEW kv AS SELECT id, v FROM {TABLE} WHERE v >= 20")   # kept: four nodes
    assert p2.query("SELECT COUNT(*), SUM(v) FROM kv") == [(3, 90)]        # no wait: p1 waited for p2's ack
    p2.query("CREATE VIEW sv AS SELECT id FROM sing", database="schema2")   # pushed down to dn1
    assert p1.query("SELECT COUNT(*) FROM sv", database="schema2") == [(0,)]
    zk = cluster.zk()
    try:
        record = json.loads(zk.get(f"{cluster.base()}/view/schema1.kv")[0])
        assert record["node"] is None and record["select"].startswith("SELECT id, v FROM `schema1`.")
        assert json.loads(zk.get(f"{cluster.base()}/view/schema2.sv")[0])["node"] == "dn1"
    finally:
        zk.stop()

    zk = cluster.zk()   # a change of kv under way elsewhere holds its lock: nobody else may change kv
    try:
        zk.create(f"{cluster.base()}/lock/view_lock/schema1.kv", b"elsewhere", ephemeral=True)
        with pytest.raises(pymysql.MySQLError) as e:
            p2.query("DROP VIEW kv")
        assert e.value.args[0] == 4006 and "operating view" in e.value.args[1]
    finally:
        zk.stop()   # the lock goes with its holder's session
    p2.query("DROP VIEW kv")
    with pytest.raises(pymysql.MySQLError) as e:
        p1.query("SELECT * FROM kv")
    assert e.value.args[0] == 1146
    with pytest.raises(pymysql.MySQLError) as e:   # the record exists: the other instance may not race it
        p1.query("CREATE VIEW sv AS SELECT 1", database="schema2")
    assert e.value.args[0] == 1050

    p1.query(f"CREATE VIEW kv AS SELECT v FROM {TABLE} WHERE id > 2")
    p1.restart()
    p2.restart()
    assert sorted(p2.query("SELECT v FROM kv")) == [(30,), (40,)]
    assert p1.query("SHOW FULL TABLES WHERE Table_type = 'VIEW'", database="schema2") == [("sv", "VIEW")]
    p2.query("DROP VIEW kv")
    p2.query("DROP VIEW sv", database="schema2")
