"""ZooKeeper digest ACLs: with [cluster] auth, nothing pydble creates is readable without it; and
credentials ZooKeeper refuses end in one clear error, never a reconnect loop."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Iterator

import pymysql
import pytest
from clusterkit import TABLE, Cluster, full_meta, reset_table, wait_for
from harness import ZooKeeperServer, cluster_section
from kazoo.exceptions import AuthFailedError, NoAuthError
from kazoo.protocol.states import KazooState

from zk.aio import Zk


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


# --- ZooKeeper refusing the credentials ----------------------------------------------------------

AUTH = "pydble:s3cret-zk"


class _DigestOffZooKeeper(ZooKeeperServer):
    """A real ZooKeeper that can be (re)started with its digest provider disabled: then it answers a
    client's digest credentials with AUTH_FAILED and closes the connection."""

    refuse_digest = False

    def _argv(self) -> list[str]:
        argv = super()._argv()
        if self.refuse_digest:
            argv.insert(1, "-Dzookeeper.DigestAuthenticationProvider.enabled=false")
        return argv


@pytest.fixture
def digest_off_zookeeper() -> Iterator[_DigestOffZooKeeper]:
    zk = _DigestOffZooKeeper("zookeeper-digest-off")
    zk.refuse_digest = True
    try:
        yield zk.start()
    finally:
        zk.cleanup()


def _refusal(proxy: Any, timeout: float = 20) -> str:
    """The one line a proxy that refused to start wrote (it must have exited non-zero in time)."""
    assert proxy._wait_exit(timeout), "the proxy did not give up"
    proxy.stop()
    assert proxy.returncode not in (0, None)
    lines = [line for line in proxy.log_text().splitlines() if line.startswith("pydble: ")]
    assert len(lines) == 1, proxy.log_text()[-3000:]
    return lines[0]


def test_the_session_client_stops_on_auth_failed(digest_off_zookeeper):
    async def go() -> None:
        zk = Zk(digest_off_zookeeper.hosts, 3, asyncio.get_running_loop(), AUTH)
        began = time.monotonic()
        with pytest.raises(AuthFailedError, match="refused the configured auth .*user 'pydble'"):
            await zk.start(10)
        assert time.monotonic() - began < 5 and zk.state == KazooState.LOST
        with pytest.raises(AuthFailedError):
            await zk.exists("/")
    asyncio.run(go())


def test_a_proxy_whose_auth_zookeeper_refuses_does_not_start(digest_off_zookeeper, zk_root, fresh_proxy):
    section = {**cluster_section(digest_off_zookeeper, root=zk_root, session_timeout_s=3), "auth": AUTH}
    p = fresh_proxy(instance="dble-1", cluster=section, start=False)
    p.spawn()
    line = _refusal(p)
    assert "refused the configured auth" in line and "'pydble'" in line and "[cluster] auth" in line
    text = p.log_text()
    assert text.count("zookeeper refused our credentials") == 1   # once: no reconnect loop
    assert "s3cret-zk" not in text


def test_credentials_refused_later_refuse_ddl_without_a_reconnect_loop(zk_root, fresh_proxy, backends):
    reset_table(backends)
    zk = _DigestOffZooKeeper("zookeeper-digest-later")
    try:
        zk.start()
        p = fresh_proxy(instance="dble-1", cluster={**cluster_section(zk, root=zk_root, session_timeout_s=3),
                                                    "auth": AUTH})
        zk.refuse_digest = True
        zk.restart()
        wait_for(lambda: "zookeeper refused our credentials" in p.log_text(), 20, "the proxy to hear the refusal")
        with pytest.raises(pymysql.err.OperationalError) as e:
            p.query(f"ALTER TABLE {TABLE} ADD COLUMN refused INT")
        assert e.value.args[0] == 4006 and "cannot take part in the cluster" in e.value.args[1]
        assert "refused the configured auth" in e.value.args[1]
        assert p.query(f"SELECT COUNT(*) FROM {TABLE}") == [(0,)]   # reads go on
        time.sleep(3)
        assert p.log_text().count("zookeeper refused our credentials") == 1
        assert "s3cret-zk" not in p.log_text()
    finally:
        zk.cleanup()


@pytest.mark.parametrize("auth", ["pydble:wrong-password", None])
def test_other_credentials_than_the_clusters_nodes_refuse_the_start(zookeeper, zk_root, fresh_proxy, backends, auth):
    reset_table(backends)
    cl = Cluster(fresh_proxy, zookeeper, zk_root, backends)
    cl.section["auth"] = AUTH
    cl.start(1)
    section = {k: v for k, v in cl.section.items() if k != "auth"}
    if auth is not None:
        section["auth"] = auth
    p = fresh_proxy(instance="dble-2", cluster=section, start=False)
    p.spawn()
    line = _refusal(p)
    assert f"ZooKeeper refused access to {zk_root}/cluster-1" in line
    assert ("digest user 'pydble'" if auth else "no [cluster] auth is configured") in line
    assert "wrong-password" not in p.log_text()
