"""One helper for reading a record znode: its data decoded as one of zk/records.py's types, with the
stat (czxid, version, owner), or why it could not be read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Protocol, TypeVar

from .aio import Zk
from .records import BadRecord

T = TypeVar("T")


class Decodable(Protocol[T]):   # type: ignore[misc]
    def decode(self, data: bytes | None) -> T: ...


@dataclass(frozen=True)
class Read(Generic[T]):
    """A znode as read: `value` None when its data is unreadable (`error` says why)."""

    value: T | None
    stat: Any
    error: str = ""


async def read(zk: Zk, path: str, kind: Any, watch: Callable | None = None) -> Read | None:
    """The znode at `path` decoded with `kind.decode` (DdlRecord, DdlLockInfo, HistoryEntry, OnlineInfo,
    Ack); None when it does not exist."""
    got = await zk.get_or_none(path, watch=watch)
    if got is None:
        return None
    data, stat = got
    try:
        return Read(kind.decode(data), stat)
    except BadRecord as e:
        return Read(None, stat, str(e))


__all__ = ["Read", "read"]
