"""The per-instance DDL history file: entries are in memory at once and on disk after close(), in order,
bounded, and read back after a restart."""

from __future__ import annotations

import json
import time
from pathlib import Path

from meta.history import BATCH_S, HISTORY_FILE, DdlHistory, DdlHistoryEntry


def _entry(i: int) -> DdlHistoryEntry:
    return DdlHistoryEntry("dble-1", "test", f"ALTER TABLE t ADD COLUMN c{i} INT", "ALTER_TABLE", ["schema1.t"],
                           ["dn1", "dn2"], phases_ms={"execute": 1.5, "total": 2.0})


def test_entries_are_seen_at_once_and_reach_the_file_in_order(tmp_path: Path) -> None:
    h = DdlHistory(tmp_path)
    for i in range(20):
        h.append(_entry(i))
    assert [e.sql for e in h.entries(3)] == [f"ALTER TABLE t ADD COLUMN c{i} INT" for i in (19, 18, 17)]
    h.close()
    lines = (tmp_path / HISTORY_FILE).read_text().splitlines()
    assert [json.loads(ln)["id"] for ln in lines] == list(range(1, 21))
    assert json.loads(lines[0])["phases_ms"] == {"execute": 1.5, "total": 2.0}
    again = DdlHistory(tmp_path)
    assert [e.id for e in again.entries()] == list(range(20, 0, -1))
    assert again.entries(1)[0].nodes == ["dn1", "dn2"]
    again.append(_entry(99))
    assert again.entries(1)[0].id == 21   # ids go on after a restart


def test_the_file_is_compacted_to_the_bound(tmp_path: Path) -> None:
    h = DdlHistory(tmp_path, max_entries=5)
    for i in range(15):   # compacted at the 11th line, while later entries still wait for the writer
        h.append(_entry(i))
    h.close()
    ids = [json.loads(ln)["id"] for ln in (tmp_path / HISTORY_FILE).read_text().splitlines()]
    assert len(ids) <= 10 and ids == sorted(set(ids)) and ids[-1] == 15   # bounded, in order, no repeats
    assert [e.id for e in DdlHistory(tmp_path, max_entries=5).entries()] == [15, 14, 13, 12, 11]


def test_without_a_directory_history_lives_in_memory_only(tmp_path: Path) -> None:
    h = DdlHistory(None)
    h.append(_entry(1))
    h.close()
    assert [e.id for e in h.entries()] == [1]
    assert not list(tmp_path.iterdir())


def test_an_unwritable_directory_is_logged_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    h = DdlHistory(blocker / "sub")
    h.append(_entry(1))   # the writer thread fails to create the directory: a warning, no exception
    h.close()
    assert [e.id for e in h.entries()] == [1]


def test_a_burst_reaches_the_file_without_close(tmp_path: Path) -> None:
    h = DdlHistory(tmp_path)
    try:
        for i in range(3):
            h.append(_entry(i))
        path = tmp_path / HISTORY_FILE
        deadline = time.monotonic() + BATCH_S + 5
        while time.monotonic() < deadline and not (path.exists() and len(path.read_text().splitlines()) == 3):
            time.sleep(0.02)
        assert [json.loads(ln)["id"] for ln in path.read_text().splitlines()] == [1, 2, 3]
        h.append(_entry(3))   # the writer goes on after a batch
        deadline = time.monotonic() + BATCH_S + 5
        while time.monotonic() < deadline and len(path.read_text().splitlines()) < 4:
            time.sleep(0.02)
        assert len(path.read_text().splitlines()) == 4
    finally:
        h.close()


def test_where_a_ddl_failed_survives_a_restart_and_old_lines_still_load(tmp_path: Path) -> None:
    h = DdlHistory(tmp_path)
    h.append(DdlHistoryEntry("i1", "u", "ALTER TABLE t ADD c INT", "ALTER_TABLE", ["s.t"], ["dn1", "dn2"], "FAILED",
                             failed_nodes=["dn2"], before={"s.t": "CREATE TABLE `t` (`id` int)"}))
    h.close()
    old = json.loads((tmp_path / HISTORY_FILE).read_text().splitlines()[0])
    for k in ("failed_nodes", "before", "repair_of"):   # a line written before these fields existed
        old.pop(k)
    with open(tmp_path / HISTORY_FILE, "a") as f:
        f.write(json.dumps({**old, "id": 2}) + "\n")
    old_entry, e = DdlHistory(tmp_path).entries()
    assert (e.succeeded_nodes, e.failed_nodes, e.before) == (["dn1"], ["dn2"], {"s.t": "CREATE TABLE `t` (`id` int)"})
    assert (old_entry.id, old_entry.succeeded_nodes, old_entry.failed_nodes) == (2, ["dn1", "dn2"], [])
