"""`pydble ddl ...` and `pydble cluster status` against a real ZooKeeper, with znodes written by hand."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cliops import Seeder, run_cli, zk_args
from harness import free_port, proxy_config, to_toml

from zk.ops import ZkOps
from zk.paths import Paths
from zk.records import FAILED, INIT, SUCCESS, HistoryEntry

ALTER = "ALTER TABLE t1 ADD COLUMN c1 INT"
SECRET = "s3cret-pw-do-not-print"


def _config_file(tmp_path: Path, zookeeper: Any, zk_root: str, cluster: bool = True) -> str:
    """A full pydble config naming this cluster; its backends are never contacted by these commands."""
    dummy = [SimpleNamespace(host="127.0.0.1", port=free_port()), SimpleNamespace(host="127.0.0.1", port=free_port())]
    cfg = proxy_config(dummy, free_port(), free_port(), instance="ops-test",
                       cluster={"zk": zookeeper.hosts, "root": zk_root, "cluster_id": "cluster-1"} if cluster else None)
    cfg["users"][0]["password"] = SECRET
    cfg["manager_users"][0]["password"] = SECRET
    cfg["db_groups"]["ha_group1"]["password"] = SECRET
    path = tmp_path / "pydble.toml"
    path.write_text(to_toml(cfg))
    return str(path)


def _stale_and_live(seed: Seeder) -> None:
    """dble-1 online; a record of crashed dble-9 acked by dble-1; a lock held by live dble-1."""
    seed.online("dble-1", port=18066, meta_version=12)
    seed.record("schema1", "t1", "dble-9", ALTER, INIT, acks={"dble-1": INIT, "dble-9": INIT}, age_s=125)
    seed.lock("schema1", "t2", "dble-1", "ALTER TABLE t2 DROP COLUMN x")


def test_list_shows_records_and_locks_with_owner_state(seed, zookeeper, zk_root):
    _stale_and_live(seed)
    r = run_cli("ddl", "list", *zk_args(zookeeper, zk_root))
    assert r.rc == 0, r
    lines = r.out.splitlines()
    assert lines[0].split() == ["TABLE", "PHASE", "OWNER", "ONLINE", "AGE", "ZNODES", "ACKS", "SQL"]
    t1 = next(line for line in lines if line.startswith("schema1.t1 "))
    assert t1.split()[:7] == ["schema1.t1", "INIT", "dble-9", "no", "2m05s", "record", "2"], t1
    assert ALTER in t1
    t2 = next(line for line in lines if line.startswith("schema1.t2 "))
    assert t2.split()[:7] == ["schema1.t2", "LOCKED", "dble-1", "yes", "10s", "lock", "-"], t2
    assert "1 with an offline owner" in r.out

    j = run_cli("ddl", "list", "--json", *zk_args(zookeeper, zk_root))
    assert j.rc == 0, j
    data = j.json()
    assert data["online"] == ["dble-1"]
    rows = {d["table"]: d for d in data["ddl"]}
    assert set(rows) == {"t1", "t2"}
    assert rows["t1"]["phase"] == INIT and rows["t1"]["owner"] == "dble-9" and rows["t1"]["owner_online"] is False
    assert 120 <= rows["t1"]["age_s"] < 180
    assert rows["t1"]["lock"] is None and rows["t1"]["record"]["status"] == INIT
    assert rows["t2"]["phase"] == "LOCKED" and rows["t2"]["owner_online"] is True
    assert rows["t2"]["record"] is None and rows["t2"]["lock"]["instance"] == "dble-1"


def test_list_with_nothing_in_flight(zookeeper, zk_root):
    r = run_cli("ddl", "list", *zk_args(zookeeper, zk_root))
    assert r.rc == 0 and "no DDL record or lock" in r.out, r
    assert run_cli("ddl", "list", "--json", *zk_args(zookeeper, zk_root)).json()["ddl"] == []


def test_show_prints_record_acks_and_lock(seed, zookeeper, zk_root):
    _stale_and_live(seed)
    seed.lock("schema1", "t1", "dble-9", ALTER)
    r = run_cli("ddl", "show", "schema1.T1", *zk_args(zookeeper, zk_root))  # table names match lower-cased
    assert r.rc == 0, r
    assert "owner  dble-9 (OFFLINE)" in r.out
    assert f"record: {zk_root}/cluster-1/ddl/schema1.t1" in r.out
    ack_lines = [line.split() for line in r.out.splitlines() if line.startswith("  dble-")]
    assert ["dble-1", "INIT", "yes", "yes"] in ack_lines and ["dble-9", "INIT", "yes", "no"] in ack_lines
    assert f"lock: {zk_root}/cluster-1/lock/ddl_lock/schema1.t1" in r.out

    data = run_cli("ddl", "show", "`schema1`.`t1`", "--json", *zk_args(zookeeper, zk_root)).json()
    assert data["exists"] is True and data["phase"] == INIT and data["owner_online"] is False
    acks = {a["instance"]: a for a in data["record"]["acks"]}
    assert acks["dble-1"] == {"instance": "dble-1", "online": True, "status": INIT, "ok": True, "message": "",
                              "meta_version": 3}
    assert acks["dble-9"]["online"] is False
    assert data["lock"]["instance"] == "dble-9" and data["lock"]["sql"] == ALTER


def test_show_of_a_table_without_ddl_exits_1(zookeeper, zk_root):
    r = run_cli("ddl", "show", "schema1.nothing", *zk_args(zookeeper, zk_root))
    assert r.rc == 1 and "no DDL record or lock for schema1.nothing" in r.out, r
    j = run_cli("ddl", "show", "schema1.nothing", "--json", *zk_args(zookeeper, zk_root))
    assert j.rc == 1 and j.json()["exists"] is False


def test_release_refuses_an_online_owner_unless_forced(seed, zookeeper, zk_root):
    _stale_and_live(seed)
    r = run_cli("ddl", "release", "schema1.t2", *zk_args(zookeeper, zk_root))
    assert r.rc == 3, r
    assert "online instance(s) dble-1" in r.err and "--force" in r.err
    assert seed.exists(seed.paths.ddl_lock("schema1", "t2"))

    r = run_cli("ddl", "release", "schema1.t2", "--force", "--json", *zk_args(zookeeper, zk_root))
    assert r.rc == 0, r
    data = r.json()
    assert data["action"] == "released" and data["lock_deleted"] is True and data["forced"] is True
    assert not seed.exists(seed.paths.ddl_lock("schema1", "t2"))
    assert seed.exists(seed.paths.ddl_record("schema1", "t1"))  # other tables untouched

    r = run_cli("ddl", "release", "schema1.t2", *zk_args(zookeeper, zk_root))
    assert r.rc == 1 and "nothing to release" in r.err, r


def test_release_of_an_offline_owner_deletes_record_acks_and_lock(seed, zookeeper, zk_root):
    _stale_and_live(seed)
    seed.lock("schema1", "t1", "dble-9", ALTER)
    czxid = seed.client.exists(seed.paths.ddl_record("schema1", "t1")).czxid
    r = run_cli("ddl", "release", "schema1.t1", *zk_args(zookeeper, zk_root))
    assert r.rc == 0, r
    assert "released schema1.t1: record and lock deleted (was INIT, owner dble-9)" in r.out
    assert not seed.exists(seed.paths.ddl_record("schema1", "t1"))
    assert not seed.exists(seed.paths.ddl_lock("schema1", "t1"))
    # like recovery, a removed record leaves a ddl_history entry: lagging instances refresh from it
    (name,) = seed.client.get_children(seed.paths.history)
    entry = HistoryEntry.decode(seed.client.get(f"{seed.paths.history}/{name}")[0])
    assert (entry.schema, entry.table, entry.instance, entry.record_czxid) == ("schema1", "t1", "dble-9", czxid)
    assert "pydble ddl release" in entry.message


def test_release_refuses_while_a_reconciling_instance_is_online(seed, zookeeper, zk_root):
    seed.online("dble-2")
    seed.record("schema1", "t3", "dble-9", ALTER, FAILED)
    # a survivor took over the record: it is its to finish
    data, stat = seed.client.get(seed.paths.ddl_record("schema1", "t3"))
    from zk.records import DdlRecord
    rec = DdlRecord.decode(data).with_status(FAILED, "reconciling", "dble-2")
    seed.client.set(seed.paths.ddl_record("schema1", "t3"), rec.encode(), stat.version)
    r = run_cli("ddl", "release", "schema1.t3", *zk_args(zookeeper, zk_root))
    assert r.rc == 3 and "dble-2" in r.err, r


def test_gc_with_zookeeper_only_refuses_records_unless_no_reconcile(seed, zookeeper, zk_root):
    _stale_and_live(seed)
    seed.lock("schema1", "t4", "dble-9", "ALTER TABLE t4 ADD c INT")   # lock only, owner gone
    seed.record("schema1", "t5", "dble-1", ALTER, SUCCESS)            # owner online: not gc's business
    r = run_cli("ddl", "gc", *zk_args(zookeeper, zk_root))
    assert r.rc == 3, r
    assert "--config FILE" in r.err and "--no-reconcile" in r.err and "needs the backends" in r.err
    rows = {line.split()[0]: line for line in r.out.splitlines()[1:] if line.startswith("schema1.")}
    assert "kept" in rows["schema1.t1"].split() and "deleted" in rows["schema1.t4"].split(), r.out
    assert "schema1.t2" not in rows and "schema1.t5" not in rows
    assert seed.exists(seed.paths.ddl_record("schema1", "t1"))
    assert not seed.exists(seed.paths.ddl_lock("schema1", "t4"))

    dry = run_cli("ddl", "gc", "--no-reconcile", "--dry-run", "--json", *zk_args(zookeeper, zk_root))
    assert dry.rc == 0, dry
    assert [(t["table"], t["action"]) for t in dry.json()["tables"]] == [("t1", "would delete")]
    assert seed.exists(seed.paths.ddl_record("schema1", "t1"))

    r = run_cli("ddl", "gc", "--no-reconcile", "--json", *zk_args(zookeeper, zk_root))
    assert r.rc == 0, r
    data = r.json()
    assert [(t["table"], t["action"]) for t in data["tables"]] == [("t1", "deleted")]
    assert data["skipped_owner_online"] == 2
    assert not seed.exists(seed.paths.ddl_record("schema1", "t1"))
    left = {d["table"] for d in run_cli("ddl", "list", "--json", *zk_args(zookeeper, zk_root)).json()["ddl"]}
    assert left == {"t2", "t5"}

    r = run_cli("ddl", "gc", *zk_args(zookeeper, zk_root))
    assert r.rc == 0 and "nothing to collect" in r.out, r


def test_cluster_status(seed, zookeeper, zk_root):
    _stale_and_live(seed)
    seed.online("dble-2", port=18067, meta_version=5)
    seed.client.create(seed.paths.sync_meta_lock, b"dble-2", ephemeral=True, makepath=True)
    r = run_cli("cluster", "status", *zk_args(zookeeper, zk_root))
    assert r.rc == 0, r
    rows = {line.split()[0]: line.split() for line in r.out.splitlines() if line.startswith("dble-")}
    assert rows["dble-1"][1:4] == ["127.0.0.1:18066", "19066", "12"], r.out
    assert rows["dble-2"][1:4] == ["127.0.0.1:18067", "19067", "5"], r.out
    assert "syncMeta.lock   held by dble-2 (online)" in r.out
    assert "ddl in flight   2 (1 with an offline owner" in r.out

    data = run_cli("cluster", "status", "--json", *zk_args(zookeeper, zk_root)).json()
    assert [i["name"] for i in data["online"]] == ["dble-1", "dble-2"]
    assert data["online"][0]["meta_version"] == 12 and data["online"][0]["port"] == 18066
    assert data["sync_meta_lock"]["instance"] == "dble-2" and data["reconcile_lock"] is None
    assert data["ddl_in_flight"] == 2 and data["ddl_owner_offline"] == 1


def test_cluster_status_of_an_empty_cluster(zookeeper, zk_root):
    r = run_cli("cluster", "status", *zk_args(zookeeper, zk_root))
    assert r.rc == 0 and "no instance online" in r.out and "syncMeta.lock   free" in r.out, r


def test_config_file_names_the_cluster_and_no_password_is_printed(seed, zookeeper, zk_root, tmp_path):
    _stale_and_live(seed)
    cfg = _config_file(tmp_path, zookeeper, zk_root)
    outputs = []
    for args in (["ddl", "list"], ["ddl", "list", "--json"], ["ddl", "show", "schema1.t1"],
                 ["ddl", "show", "schema1.t1", "--json"], ["cluster", "status"], ["cluster", "status", "--json"],
                 ["ddl", "release", "schema1.t2"], ["ddl", "gc", "--dry-run"], ["ddl", "gc", "--dry-run", "--json"],
                 ["ddl", "list", "-v"]):
        r = run_cli(*args, "--config", cfg)
        assert r.rc in (0, 3), (args, r)
        outputs.append(r.out + r.err)
    assert "dble-9" in outputs[0] and '"owner": "dble-9"' in outputs[1]
    assert all(SECRET not in o for o in outputs)


def test_zookeeper_unreachable_exits_2_with_one_line():
    port = free_port()
    for args in (["ddl", "list"], ["cluster", "status"], ["ddl", "gc", "--no-reconcile"]):
        started = time.monotonic()
        r = run_cli(*args, "--zk", f"127.0.0.1:{port}", "--timeout", "2", timeout=30)
        assert time.monotonic() - started < 15
        assert r.rc == 2, r
        assert r.out == ""
        assert r.err.count("\n") == 1 and "cannot reach ZooKeeper at 127.0.0.1" in r.err, r.err


def test_credentials_zookeeper_refuses_exit_2_with_one_line_saying_so(zookeeper, zk_root, tmp_path):
    """A cluster whose znodes carry [cluster] auth's digest ACL, read without it or with other credentials."""
    from kazoo.security import make_digest_acl

    client = zookeeper.client(auth_data=[("digest", "pydble:right-one")])
    try:
        acl = [make_digest_acl("pydble", "right-one", all=True)]
        client.create(f"{zk_root}/cluster-1/online/dble-1", b"{}", acl=acl, makepath=True)
        client.set_acls(f"{zk_root}/cluster-1/online", acl)
    finally:
        client.stop()
        client.close()
    wrong = Path(_config_file(tmp_path, zookeeper, zk_root))
    wrong.write_text(wrong.read_text().replace('cluster_id = "cluster-1"', 'cluster_id = "cluster-1"\nauth = "pydble:wrong"'))
    for args in (["--config", str(wrong)], zk_args(zookeeper, zk_root)):
        r = run_cli("cluster", "status", *args)
        assert r.rc == 2 and r.out == "" and r.err.count("\n") == 1, r
        assert "refused access" in r.err and "[cluster] auth" in r.err and "wrong" not in r.err, r.err


def test_bad_arguments_exit_2(zookeeper, zk_root, tmp_path):
    cases = [
        ["ddl", "show", "no_dot", *zk_args(zookeeper, zk_root)],
        ["ddl", "release", "a.b.c", *zk_args(zookeeper, zk_root)],
        ["ddl", "list"],                                             # where is the cluster?
        ["ddl", "list", "--config", str(tmp_path / "missing.toml")],
        ["ddl", "list", "--config", _config_file(tmp_path, zookeeper, zk_root, cluster=False)],
        ["ddl", "frobnicate", *zk_args(zookeeper, zk_root)],
        ["cluster", "status", "--zk", zookeeper.hosts, "--root", "relative"],
    ]
    for args in cases:
        r = run_cli(*args)
        assert r.rc == 2, (args, r)
        assert r.err.strip(), args
        assert SECRET not in r.out + r.err


def test_deletes_are_conditional_on_what_was_read(seed, zookeeper, zk_root):
    seed.record("schema1", "t6", "dble-9", ALTER, INIT, acks={"dble-8": INIT})
    with ZkOps(zookeeper.hosts, Paths(zk_root, "cluster-1")) as ops:
        seen = ops.table("schema1", "t6")
        # a survivor moves the record on after the operator looked at it
        path = seed.paths.ddl_record("schema1", "t6")
        data, stat = seed.client.get(path)
        seed.client.set(path, data, stat.version)
        out = ops.delete_table(seen)
        assert out.changed and not out.record_deleted, out
        assert seed.exists(path)
        # read again: now it goes, acks included
        out = ops.delete_table(ops.table("schema1", "t6"))
        assert out.record_deleted and not out.changed, out
        assert not seed.exists(path)
        # a record replaced by a newer DDL's (new czxid) is never deleted on the old reading
        seed.record("schema1", "t7", "dble-9", ALTER)
        old = ops.table("schema1", "t7")
        seed.client.delete(seed.paths.ddl_record("schema1", "t7"), recursive=True)
        seed.record("schema1", "t7", "dble-1", ALTER)
        out = ops.delete_table(old)
        assert out.changed and seed.exists(seed.paths.ddl_record("schema1", "t7"))
