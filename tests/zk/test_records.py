"""The ZooKeeper layout and records: paths as DESIGN.md §6 names them, JSON that round-trips."""

from __future__ import annotations

import pytest

from zk.paths import Paths, history_czxid, history_order, history_seq, parse_table_node, table_node
from zk.records import FAILED, INIT, Ack, BadRecord, DdlLockInfo, DdlRecord, HistoryEntry, OnlineInfo


def test_paths_follow_the_design():
    p = Paths("/dble", "cluster-1")
    assert p.online_instance("dble-1") == "/dble/cluster-1/online/dble-1"
    assert p.sync_meta_lock == "/dble/cluster-1/lock/syncMeta.lock"
    assert p.ddl_lock("schema1", "T") == "/dble/cluster-1/lock/ddl_lock/schema1.t"
    assert p.ddl_record("schema1", "t") == "/dble/cluster-1/ddl/schema1.t"
    assert p.ddl_ack("schema1", "t", "dble-2") == "/dble/cluster-1/ddl/schema1.t/instance/dble-2"
    assert Paths("/a/b/", "c").base == "/a/b/c"


def test_history_entries_carry_their_record_and_sort_by_sequence():
    """ddl_history/h-{record czxid}-{sequence}: an instance that applied the DDL skips the entry unread;
    entries sort by the sequence ZooKeeper appended, whatever the czxid (DDLs end out of start order)."""
    p = Paths("/dble", "cluster-1")
    assert p.history_entry_prefix(4294967301) == "/dble/cluster-1/ddl_history/h-4294967301-"
    names = ["h-90-0000000012", "h-7-0000000013", "h-0000000011", "h-5-0000000010"]   # h-N: older layout
    assert history_order(names) == ["h-5-0000000010", "h-0000000011", "h-90-0000000012", "h-7-0000000013"]
    assert [history_seq(n) for n in names] == [12, 13, 11, 10]
    assert [history_czxid(n) for n in names] == [90, 7, None, 5]
    assert history_seq("junk") == -1 and history_czxid("h-x-0000000001") is None


def test_table_node_round_trip():
    assert table_node("s", "MyTable") == "s.mytable"
    assert parse_table_node("s.t") == ("s", "t")
    assert parse_table_node("nodot") is None
    assert parse_table_node(".t") is None


def test_ddl_record_json_matches_the_design_fields():
    rec = DdlRecord("dble-1", "schema1", "t", "ALTER_TABLE", "ALTER TABLE t ADD c INT")
    raw = rec.encode()
    for field in (b'"api_version":1', b'"instance":"dble-1"', b'"status":"INIT"', b'"created_at"'):
        assert field in raw
    back = DdlRecord.decode(raw)
    assert back == rec and back.status == INIT
    failed = back.with_status(FAILED, "why", "dble-2")
    assert DdlRecord.decode(failed.encode()).reconciled_by == "dble-2"


@pytest.mark.parametrize("cls", [DdlRecord, Ack, OnlineInfo, DdlLockInfo, HistoryEntry])
@pytest.mark.parametrize("data", [b"", b"not json", b"[]", b'{"status": "WEIRD"}', b"\xff\xfe"])
def test_bad_data_is_a_bad_record_never_a_crash(cls, data):
    with pytest.raises(BadRecord):
        cls.decode(data)


def test_other_records_round_trip():
    for rec in (Ack(INIT, False, "locked", 3), OnlineInfo("127.0.0.1", 8066, 9066, 1.5, 7, 42),
                DdlLockInfo("dble-1", "DROP TABLE t", 2.0), HistoryEntry("s", "t", "i", "sql", FAILED, 9, 1.0, "m")):
        assert type(rec).decode(rec.encode()) == rec


def test_a_ddl_record_carries_its_id_and_an_ack_the_record_it_answers():
    rec = DdlRecord("dble-1", "schema1", "t", "ALTER_TABLE", "ALTER ...", INIT, marker="pydble-ddl:0af3")
    back = DdlRecord.decode(rec.encode())
    assert back.ddl_id == "0af3" and back.with_status(FAILED).ddl_id == "0af3"
    assert Paths("/dble", "c").ddl_owner("schema1", "t", back.ddl_id) == "/dble/c/ddl/schema1.t/owner-0af3"
    # the id goes into znode paths and SQL: anything but letters and digits is no id at all
    for marker in ("", "pydble-ddl:", "pydble-ddl:a/b", "pydble-ddl:x' OR 1", "other:abc", "pydble-ddl:é1"):
        assert DdlRecord("i", "s", "t", "X", "", INIT, marker=marker).ddl_id == ""
    assert Ack.decode(Ack(INIT, record=42).encode()).record == 42
    assert Ack.decode(b'{"status":"INIT"}').record == 0   # an ack from before: answers no record
