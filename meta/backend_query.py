"""The small backend interface the metadata loader needs: protocols, errors and records only.

The loader only lists tables and runs batched multi-statement queries; the proxy implements
`MetaBackend` / `MetaConnection` over its own wire layer (proxy.backends.meta_link) and every caller
hands one in, so this bottom layer stays free of I/O code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from meta.config import DbGroupConfig, ShardingNodeConfig


class NodeUnavailable(Exception):
    """The shardingNode cannot be used any more (connect failed, connection lost)."""

    def __init__(self, reason: str, *, unreachable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        # True when the server itself could not be reached, so siblings on its db_group fail fast.
        self.unreachable = unreachable


@dataclass(frozen=True, slots=True)
class StatementError:
    """A server error on one statement of a multi-statement batch; later statements did not run."""

    index: int
    code: int
    message: str


@dataclass(slots=True)
class MultiResult:
    """Rows of each statement that ran, in order, and the error that stopped the batch, if any."""

    results: list[Sequence[tuple[Any, ...]]]
    error: StatementError | None = None


class MetaConnection(Protocol):
    """One backend connection, used by one task at a time."""

    async def query(self, sql: str) -> Sequence[tuple[Any, ...]]:
        """Run one statement and return its rows; raise NodeUnavailable or StatementError-like errors."""
        ...

    async def query_multi(self, sql: str) -> MultiResult:
        """Run a multi-statement query, reading every result set; stop at the first failing one."""
        ...

    async def close(self) -> None:
        """Say goodbye politely."""
        ...

    def abort(self) -> None:
        """Drop the socket now (after a timeout the server may never answer)."""
        ...


class MetaBackend(Protocol):
    """Opens connections to a shardingNode's database."""

    async def connect(self, node: ShardingNodeConfig, group: DbGroupConfig, *,
                      timeout_s: float) -> MetaConnection:
        """Return a ready connection with multi-statements enabled, or raise NodeUnavailable."""
        ...


class BackendStatementFailed(Exception):
    """A single statement failed on the server; the connection is still usable."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"({code}) {message}")
        self.code = code
        self.message = message

