"""The local DDL lock names who holds a table: this instance's session or another instance's DDL."""

from __future__ import annotations

import pytest

from meta.errors import DdlInProgress
from meta.locks import MetaLocks


def _refusal(locks: MetaLocks, table: str) -> tuple[int, str]:
    with pytest.raises(DdlInProgress) as ei:
        locks.acquire("schema1", table, f"ALTER TABLE {table} ADD COLUMN y INT", "session:9")
    return ei.value.code, ei.value.message


def test_lock_held_for_a_local_session_says_the_table_is_doing_ddl() -> None:
    locks = MetaLocks("dble-2")
    locks.acquire("schema1", "t", "ALTER TABLE t ADD COLUMN x INT", "session:1")
    assert _refusal(locks, "T") == (4006, "SCHEMA[schema1], TABLE[T] is doing DDL")


def test_lock_held_for_another_instance_says_what_its_cluster_lock_says() -> None:
    """The listener locks the table here for dble-1's DDL: a local DDL refused by that lock gets the
    message the cluster's ddl_lock gives, not the local one."""
    locks = MetaLocks("dble-2")
    locks.acquire("schema1", "t", "ALTER TABLE t ADD COLUMN x INT", "instance:dble-1", "dble-1")
    assert _refusal(locks, "t") == (
        4006, "Found another instance doing ddl, due to table[schema1.t]'s ddlLock is exists")
    assert locks.release("schema1", "t", "instance:dble-1")
    locks.acquire("schema1", "t", "ALTER TABLE t ADD COLUMN y INT", "session:9")   # free again
