"""The narrow interfaces a driver of the core provides (production: zk/zklog.py over zk/aio.py and
proxy/ddl/ddl.py's backends; tests: the deterministic simulator's models). The core itself calls none of
them: its step functions return transactions and decisions, the driver runs them through these."""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

from ..records import DdlRecord
from .acks import Key
from .txn import Txn


class Stat(Protocol):
    """The parts of a znode's stat the core reads."""

    czxid: int
    version: int
    ephemeralOwner: int


class ZkLog(Protocol):
    """The ZooKeeper log: reads and one multi-op transaction at a time."""

    @property
    def session_id(self) -> int | None: ...

    async def commit(self, txn: Txn) -> list[Any]:
        """Results per op, kazoo-style: a path, True or a Stat; exception instances when it failed."""
        ...

    async def read(self, path: str) -> tuple[bytes, Stat] | None: ...

    async def stat(self, path: str) -> Stat | None: ...

    async def children(self, path: str) -> list[str]: ...


class Backends(Protocol):
    """The table's nodes: run the DDL (marked), find or stop its statements, reload the structure."""

    async def run_ddl(self, sql: str, marker: str) -> tuple[bool, str]: ...

    async def running(self, marker: str, kill: bool = False) -> list[str]:
        """The dbGroups whose processlist still shows a statement carrying the marker (or cannot tell)."""
        ...

    async def reload(self, keys: Sequence[Key], texts: Mapping | None = None) -> None: ...


class Registry(Protocol):
    """This instance's metadata."""

    @property
    def version(self) -> int: ...

    def structure(self, schema: str, table: str) -> str | None: ...


class Peers(Protocol):
    """The direct channel to the other instances: a step out, an answer (ok None: ask ZooKeeper) back."""

    async def step(self, instance: str, path: str, czxid: int, rec: DdlRecord, texts: Mapping | None,
                   final: bool) -> tuple[bool | None, str]: ...

    async def online(self) -> set[str]: ...


__all__ = ["Backends", "Peers", "Registry", "Stat", "ZkLog"]
