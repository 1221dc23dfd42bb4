"""Where everything lives in ZooKeeper (DESIGN.md §6), built in one place."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Paths:
    """The znode paths of one cluster: /{root}/{cluster_id}/..."""

    root: str
    cluster_id: str

    @property
    def base(self) -> str:
        return f"{self.root.rstrip('/')}/{self.cluster_id}"

    @property
    def online(self) -> str:
        return f"{self.base}/online"

    def online_instance(self, instance: str) -> str:
        return f"{self.online}/{instance}"

    @property
    def lock(self) -> str:
        return f"{self.base}/lock"

    @property
    def sync_meta_lock(self) -> str:
        return f"{self.lock}/syncMeta.lock"

    @property
    def reconcile_lock(self) -> str:
        """Held by the survivor elected to reconcile orphaned DDL records."""
        return f"{self.lock}/reconcile.lock"

    @property
    def ddl_locks(self) -> str:
        return f"{self.lock}/ddl_lock"

    def ddl_lock(self, schema: str, table: str) -> str:
        return f"{self.ddl_locks}/{table_node(schema, table)}"

    def sequence(self, key: str) -> str:
        """A global sequence (key: schema.table): the next value no instance has reserved yet."""
        return f"{self.base}/sequence/{key}"

    @property
    def ddl(self) -> str:
        return f"{self.base}/ddl"

    def ddl_record(self, schema: str, table: str) -> str:
        return f"{self.ddl}/{table_node(schema, table)}"

    def ddl_acks(self, schema: str, table: str) -> str:
        return f"{self.ddl_record(schema, table)}/instance"

    def ddl_ack(self, schema: str, table: str, instance: str) -> str:
        return f"{self.ddl_acks(schema, table)}/{instance}"

    def ddl_owner(self, schema: str, table: str, ddl_id: str) -> str:
        """A child of the record created with it, its path carrying the DDL's unique id: a multi that
        checks (or deletes) it only goes through while the record is that DDL's (ZooKeeper's check
        compares versions only, and every new record has version 0)."""
        return f"{self.ddl_record(schema, table)}/{OWNER_PREFIX}{ddl_id}"

    @property
    def history(self) -> str:
        return f"{self.base}/ddl_history"

    def history_entry_prefix(self, record_czxid: int) -> str:
        """A new ddl_history entry (created sequential): h-{record czxid}-{sequence}, so an instance
        that already applied that DDL can skip the entry without reading it."""
        return f"{self.history}/h-{record_czxid}-"

    @property
    def xa(self) -> str:
        """XA commit decisions (zk/xa_log.py), one child per global transaction."""
        return f"{self.base}/xa"

    def xa_decision(self, gtrid: str) -> str:
        return f"{self.xa}/{gtrid if '/' not in gtrid else gtrid.encode().hex()}"


OWNER_PREFIX = "owner-"


def history_seq(name: str) -> int:
    """The sequence number ZooKeeper appended to a ddl_history entry's name (entries sort by it);
    -1 for a name that is not one."""
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def history_czxid(name: str) -> int | None:
    """The record czxid in a ddl_history entry's name (h-{czxid}-{seq}); None if it carries none."""
    parts = name.split("-")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def history_order(names: list[str]) -> list[str]:
    """ddl_history entry names, oldest first."""
    return sorted(names, key=history_seq)


def table_node(schema: str, table: str) -> str:
    """The znode name of a table: schema.table (table lower-cased, as the config matches it)."""
    return f"{schema}.{table.lower()}"


def parse_table_node(name: str) -> tuple[str, str] | None:
    """schema.table back to its parts (None for anything else)."""
    schema, dot, table = name.partition(".")
    if not dot or not schema or not table:
        return None
    return schema, table
