"""The JSON records pydble keeps in ZooKeeper, versioned so a newer instance can read an older one."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, fields

API_VERSION = 1

INIT, SUCCESS, FAILED = "INIT", "SUCCESS", "FAILED"
MARKER_PREFIX = "pydble-ddl:"   # a DDL's marker: this prefix and its unique id
STATUSES = (INIT, SUCCESS, FAILED)


class BadRecord(ValueError):
    """A znode whose data pydble cannot read."""


def _load(data: bytes | None) -> dict:
    try:
        obj = json.loads((data or b"").decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRecord(f"not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise BadRecord("not a JSON object")
    return obj


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _dump(obj: object) -> bytes:
    """A flat record as JSON (dataclasses.asdict deep-copies every value: a tenth of a DDL's CPU)."""
    names = _FIELD_NAMES.get(type(obj))
    if names is None:
        names = _FIELD_NAMES[type(obj)] = tuple(f.name for f in fields(obj))  # type: ignore[arg-type]
    return json.dumps({n: getattr(obj, n) for n in names}, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class OnlineInfo:
    """online/{instance}: how to reach an instance and what it knows."""

    host: str
    port: int
    manager_port: int
    started_at: float
    meta_version: int = 0
    pid: int = 0
    peer_port: int = 0                               # the direct DDL channel (zk/peers.py); 0: none
    incarnation: str = ""                            # this process's random id: a restart has a new one

    def encode(self) -> bytes:
        return _dump(self)

    @classmethod
    def decode(cls, data: bytes | None) -> OnlineInfo:
        o = _load(data)
        try:
            return cls(str(o["host"]), int(o["port"]), int(o["manager_port"]), float(o["started_at"]),
                       int(o.get("meta_version", 0)), int(o.get("pid", 0)), int(o.get("peer_port", 0)),
                       str(o.get("incarnation", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise BadRecord(f"bad online record: {e}") from None


@dataclass(frozen=True)
class DdlLockInfo:
    """lock/ddl_lock/{schema}.{table}: who is doing DDL on a table."""

    instance: str
    sql: str
    since: float = field(default_factory=time.time)

    def encode(self) -> bytes:
        return _dump(self)

    @classmethod
    def decode(cls, data: bytes | None) -> DdlLockInfo:
        o = _load(data)
        try:
            return cls(str(o["instance"]), str(o.get("sql", "")), float(o.get("since", 0)))
        except (KeyError, TypeError, ValueError) as e:
            raise BadRecord(f"bad ddl lock: {e}") from None


@dataclass(frozen=True)
class DdlRecord:
    """ddl/{schema}.{table}: one DDL in flight and its decision."""

    instance: str
    schema: str
    table: str
    type: str
    sql: str
    status: str = INIT
    created_at: float = field(default_factory=time.time)
    api_version: int = API_VERSION
    message: str = ""
    reconciled_by: str = ""
    marker: str = ""   # in the DDL text sent to the nodes: its connections found in a backend's processlist

    def encode(self) -> bytes:
        return _dump(self)

    @property
    def ddl_id(self) -> str:
        """The DDL's unique id (from its marker; "" for a record written before ids existed, or a marker
        that is not one of ours: it goes into znode paths and SQL, so only letters and digits)."""
        tail = self.marker[len(MARKER_PREFIX):] if self.marker.startswith(MARKER_PREFIX) else ""
        return tail if tail.isascii() and tail.isalnum() else ""

    def with_status(self, status: str, message: str = "", reconciled_by: str = "") -> DdlRecord:
        """The same record with a decision."""
        return DdlRecord(self.instance, self.schema, self.table, self.type, self.sql, status, self.created_at,
                         self.api_version, message, reconciled_by or self.reconciled_by, self.marker)

    @classmethod
    def decode(cls, data: bytes | None) -> DdlRecord:
        o = _load(data)
        try:
            status = str(o["status"])
            if status not in STATUSES:
                raise ValueError(f"unknown status {status}")
            return cls(str(o["instance"]), str(o["schema"]), str(o["table"]), str(o.get("type", "UNKNOWN")),
                       str(o.get("sql", "")), status, float(o.get("created_at", 0)),
                       int(o.get("api_version", API_VERSION)), str(o.get("message", "")),
                       str(o.get("reconciled_by", "")), str(o.get("marker", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise BadRecord(f"bad ddl record: {e}") from None


@dataclass(frozen=True)
class Ack:
    """ddl/{schema}.{table}/instance/{instance}: an instance has handled a record's status."""

    status: str
    ok: bool = True
    message: str = ""
    meta_version: int = 0
    record: int = 0   # the czxid of the record it answers: an ack counts only for that record

    def encode(self) -> bytes:
        return _dump(self)

    @classmethod
    def decode(cls, data: bytes | None) -> Ack:
        o = _load(data)
        try:
            if o["status"] not in STATUSES:
                raise ValueError(f"unknown status {o['status']}")
            return cls(str(o["status"]), bool(o.get("ok", True)), str(o.get("message", "")),
                       int(o.get("meta_version", 0)), int(o.get("record", 0)))
        except (KeyError, TypeError, ValueError) as e:
            raise BadRecord(f"bad ack: {e}") from None


@dataclass(frozen=True)
class HistoryEntry:
    """ddl_history/h-N: a finished DDL, so an instance that missed it can still catch up."""

    schema: str
    table: str
    instance: str
    sql: str
    status: str
    record_czxid: int
    finished_at: float = field(default_factory=time.time)
    message: str = ""
    user: str = ""
    nodes: tuple[str, ...] = ()
    phases_ms: dict = field(default_factory=dict)
    meta_version: int = 0
    started_at: float = 0.0
    failed_nodes: tuple[str, ...] = ()   # shardingNodes where the statement failed (the rest of `nodes`: OK)
    before: dict = field(default_factory=dict)   # half-applied only: "schema.table" -> CREATE text before it
    repair_of: int = 0                   # a `repair @@ddl` run: the ddl_history sequence of the DDL it repairs

    def encode(self) -> bytes:
        return _dump(self)

    @classmethod
    def decode(cls, data: bytes | None) -> HistoryEntry:
        o = _load(data)
        try:
            phases, before = o.get("phases_ms", {}), o.get("before", {})
            return cls(str(o["schema"]), str(o["table"]), str(o.get("instance", "")), str(o.get("sql", "")),
                       str(o.get("status", "")), int(o.get("record_czxid", 0)), float(o.get("finished_at", 0)),
                       str(o.get("message", "")), str(o.get("user", "")), tuple(str(n) for n in o.get("nodes", ())),
                       {str(k): float(v) for k, v in phases.items()} if isinstance(phases, dict) else {},
                       int(o.get("meta_version", 0)), float(o.get("started_at", 0)),
                       tuple(str(n) for n in o.get("failed_nodes", ())),
                       {str(k): str(v) for k, v in before.items()} if isinstance(before, dict) else {},
                       int(o.get("repair_of", 0)))
        except (KeyError, TypeError, ValueError) as e:
            raise BadRecord(f"bad history entry: {e}") from None
