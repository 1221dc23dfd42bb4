"""The peer channel between cluster instances, attacked by someone who can read ZooKeeper.

The old attack (issue 16): read the channel's port and token from online/{instance} as an anonymous
ZooKeeper client, send a SUCCESS step whose CREATE texts swap the table's columns, and the target
instance swapped them in memory, so `INSERT ... VALUES (1, 2)` without a column list put id 2 on the
wrong shardingNode. Now the channel needs a key no znode holds and every step must match the
ZooKeeper record it names: nothing an outsider sends changes anything.
"""

from __future__ import annotations

import json
import socket
import time
from types import SimpleNamespace
from typing import Any

import pytest
from harness import PEER_SECRET, cluster_section, proxy_config

from meta.config import ClusterConfig, ConfigError, parse_config
from zk import wire
from zk.records import SUCCESS, DdlRecord

TABLE = "sharding_4_t1"   # hash-four on id: id 1 on dn2 (second backend, db1), id 2 on dn3 (first, db2)
SWAPPED = f"CREATE TABLE `{TABLE}` (\n  `v` int(11) DEFAULT NULL,\n  `id` int(11) NOT NULL,\n  PRIMARY KEY (`id`)\n)"


def _reset(backends: list[Any]) -> None:
    for server in backends:
        for db in ("db1", "db2"):
            server.query(f"DROP TABLE IF EXISTS `{TABLE}`", database=db)
            server.query(f"CREATE TABLE `{TABLE}` (id INT PRIMARY KEY, v INT)", database=db)


def _start(fresh_proxy: Any, section: dict) -> list[Any]:
    return [fresh_proxy(instance=f"dble-{i}", cluster=section) for i in (1, 2)]


def _online_as_anyone(zookeeper: Any, zk_root: str, instance: str) -> dict:
    """What an anonymous ZooKeeper client reads in online/{instance} (no auth configured)."""
    return json.loads(zookeeper.read(f"{zk_root}/cluster-1/online/{instance}"))


def _swap_step(zk_root: str, msg_id: int = 1, czxid: int = 1) -> dict:
    """A SUCCESS step that tells the receiver the table's columns are (v, id)."""
    rec = DdlRecord("dble-1", "schema1", TABLE, "ALTER_TABLE", f"ALTER TABLE {TABLE} ADD x INT", SUCCESS)
    texts = {node: {TABLE: SWAPPED} for node in ("dn1", "dn2", "dn3", "dn4")}
    return wire.step(msg_id, f"{zk_root}/cluster-1/ddl/schema1.{TABLE}", czxid, rec.encode().decode(), texts, True)


def _send_raw(port: int, *frames: bytes) -> bytes:
    """Send frames to the peer port; everything heard until the server closes (or goes quiet)."""
    heard = b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"".join(frames))
        s.settimeout(3)
        try:
            while chunk := s.recv(65536):
                heard += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return heard


def _columns(proxy: Any) -> list[str]:
    """The table's columns in the proxy's memory (`check full @@metadata`), in order."""
    conn = proxy.manager()
    try:
        with conn.cursor() as cur:
            cur.execute(f"check full @@metadata where schema='schema1' and table='{TABLE}'")
            structure = cur.fetchall()[0][3]
    finally:
        conn.close()
    return [line.split("`")[1] for line in structure.splitlines() if line.strip().startswith("`")]


def _assert_nothing_changed(proxy: Any, backends: list[Any]) -> None:
    """The structure in memory is still (id, v), and a row without a column list lands where id says."""
    assert _columns(proxy) == ["id", "v"]
    proxy.query(f"INSERT INTO {TABLE} VALUES (1, 2)")
    assert proxy.query(f"SELECT id, v FROM {TABLE} WHERE id = 1") == [(1, 2)]
    assert backends[1].query(f"SELECT id, v FROM `{TABLE}`", database="db1") == [(1, 2)]   # dn2
    assert backends[0].query(f"SELECT id, v FROM `{TABLE}`", database="db2") == []         # dn3


def test_the_old_attack_with_the_default_cluster_config_changes_nothing(zookeeper, zk_root, fresh_proxy, backends):
    """Default [cluster] (no auth, no peer_secret): ZooKeeper publishes no usable port or token, and
    the attack's frames, sent to whatever port is there, are not applied."""
    _reset(backends)
    section = {k: v for k, v in cluster_section(zookeeper, root=zk_root, session_timeout_s=3, ack_timeout_s=6).items()
               if k != "peer_secret"}
    _, p2 = _start(fresh_proxy, section)
    info = _online_as_anyone(zookeeper, zk_root, "dble-2")
    if info.get("peer_port"):   # the attack as it was run, with whatever ZooKeeper hands out
        old_hello = {"t": "hello", "cluster": "cluster-1", "from": "mallory", "token": info.get("peer_token", "")}
        _send_raw(info["peer_port"], wire.encode(old_hello), wire.encode(_swap_step(zk_root)))
    _assert_nothing_changed(p2, backends)
    assert "peer_token" not in info and info["peer_port"] == 0   # the channel is off: nothing to aim at
    assert "peer channel off" in p2.log_text()
    # a DDL still reaches every instance, through ZooKeeper alone
    p2.query(f"ALTER TABLE {TABLE} ADD COLUMN w INT")
    assert _columns(p2) == ["id", "v", "w"]


def test_the_old_attack_on_a_keyed_channel_changes_nothing(zookeeper, zk_root, fresh_proxy, backends):
    """With peer_secret the port is published but no token: the old hello (any token), a hello under
    a guessed key and an unsealed step are all dropped unanswered; the table is untouched."""
    _reset(backends)
    p1, p2 = _start(fresh_proxy, cluster_section(zookeeper, root=zk_root, session_timeout_s=3, ack_timeout_s=6))
    info = _online_as_anyone(zookeeper, zk_root, "dble-2")
    assert info["peer_port"] > 0 and "peer_token" not in info
    step = wire.encode(_swap_step(zk_root))
    old_hello = wire.encode({"t": "hello", "cluster": "cluster-1", "from": "dble-1", "token": "0" * 32})
    heard = _send_raw(info["peer_port"], old_hello, step)
    assert [m["t"] for m in wire.FrameDecoder().feed(heard)] == ["challenge"]
    # answering the challenge needs the key: a guess is dropped too
    with socket.create_connection(("127.0.0.1", info["peer_port"]), timeout=5) as s:
        dec = wire.FrameDecoder()
        challenge = dec.feed(s.recv(65536))[0]
        hello, sealer = wire.hello(b"guess" * 8, "cluster-1", "dble-1", challenge)
        s.sendall(wire.encode(hello) + sealer.seal(wire.dump(_swap_step(zk_root))))
        s.settimeout(5)
        assert s.recv(65536) == b""
    assert "bad hello" in p2.log_text()
    _assert_nothing_changed(p2, backends)
    p1.query(f"ALTER TABLE {TABLE} ADD COLUMN w INT")   # the real channel still works
    assert _columns(p2) == ["id", "v", "w"]
    assert all(PEER_SECRET not in p.log_text() for p in (p1, p2))


@pytest.mark.parametrize("sender", ["dble-1", "dble-3"])
def test_a_keyed_step_that_matches_no_record_is_refused(zookeeper, zk_root, fresh_proxy, backends, sender):
    """Even with the key, a step is applied only when it matches the ZooKeeper record it names and
    comes from that record's originator: here there is no such record, or the sender is not dble-1."""
    _reset(backends)
    _, p2 = _start(fresh_proxy, cluster_section(zookeeper, root=zk_root, session_timeout_s=3, ack_timeout_s=6))
    info = _online_as_anyone(zookeeper, zk_root, "dble-2")
    key = ClusterConfig(zk=zookeeper.hosts, peer_secret=PEER_SECRET).peer_key()
    assert key is not None
    with socket.create_connection(("127.0.0.1", info["peer_port"]), timeout=5) as s:
        dec = wire.FrameDecoder()
        challenge = dec.feed(s.recv(65536))[0]
        hello, sealer = wire.hello(key, "cluster-1", sender, challenge)
        s.sendall(wire.encode(hello) + sealer.seal(wire.dump(_swap_step(zk_root, 7))))
        s.settimeout(5)
        frames: list[bytes] = []
        while not frames:
            frames = dec.frames(s.recv(65536))
        reply = sealer.open(frames[0])
    assert reply["id"] == 7 and reply["ok"] is None and "refused the step" in reply["message"], reply
    deadline = time.monotonic() + 5
    while "peer step refused" not in p2.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "peer step refused" in p2.log_text()
    _assert_nothing_changed(p2, backends)


def test_the_channel_key_comes_from_the_config_never_from_zookeeper():
    """No peer_secret and no auth: no key, the channel stays off. The key differs per secret and per
    cluster; a short secret is a config error naming the key."""
    assert ClusterConfig(zk="z").peer_key() is None
    assert ClusterConfig(zk="z", peer_secret=PEER_SECRET, peer_port=-1).peer_key() is None
    keys = {ClusterConfig(zk="z", peer_secret=PEER_SECRET).peer_key(),
            ClusterConfig(zk="z", peer_secret=PEER_SECRET, cluster_id="cluster-2").peer_key(),
            ClusterConfig(zk="z", auth="pydble:s3cret-zk").peer_key(),
            ClusterConfig(zk="z", auth="pydble:s3cret-zk", peer_secret=PEER_SECRET + "x").peer_key()}
    assert None not in keys and len(keys) == 4
    fake = [SimpleNamespace(host="127.0.0.1", port=p) for p in (3306, 3307)]
    raw = proxy_config(fake, 8066, 9066, cluster="127.0.0.1:2181")
    raw["cluster"]["peer_secret"] = "short"
    with pytest.raises(ConfigError, match="cluster.peer_secret: must be at least 16 characters"):
        parse_config(raw)
