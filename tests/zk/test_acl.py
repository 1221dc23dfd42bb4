"""ZooKeeper digest ACLs: with [cluster] auth, nothing pydble creates is readable without it."""

from __future__ import annotations

import pytest
from clusterkit import TABLE, Cluster, full_meta, reset_table
from kazoo.exceptions import NoAuthError


def test_nodes_are_protected_by_the_digest_identity(zookeeper, zk_root, fresh_proxy, backends):
    reset_table(backends)
    cl = Cluster(fresh_proxy, zookeeper, zk_root, backends)
    cl.section["auth"] = "pydble:s3cret-zk"
    p1, p2 = cl.start(2)
    p1.query(f"ALTER TABLE {TABLE} ADD COLUMN acl_col INT")
    assert "`acl_col`" in full_meta(p2)[3]
    base = f"{zk_root}/cluster-1"
    anonymous = zookeeper.client()
    try:
        with pytest.raises(NoAuthError):
            anonymous.get_children(f"{base}/online")
        with pytest.raises(NoAuthError):
            anonymous.create(f"{base}/ddl/schema1.evil", b"{}")
    finally:
        anonymous.stop()
        anonymous.close()
    trusted = zookeeper.client(auth_data=[("digest", "pydble:s3cret-zk")])
    try:
        assert sorted(trusted.get_children(f"{base}/online")) == ["dble-1", "dble-2"]
    finally:
        trusted.stop()
        trusted.close()
    for p in (p1, p2):
        assert "s3cret-zk" not in p.log_text()
