"""ZooKeeper writes as data: the core says which operations, the driver (zk/zklog.py in production, the
simulator in tests) runs them as one multi-op transaction and hands back the results unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Sequence, Union


@dataclass(frozen=True)
class Create:
    """Create a node (fails with NodeExists when it is there)."""

    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True)
class Check:
    """The node exists at this version (-1: any): the transaction's condition."""

    path: str
    version: int = -1


@dataclass(frozen=True)
class SetData:
    """Replace a node's data (at this version, -1 any); its result is the node's new stat."""

    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True)
class Delete:
    """Delete a node without children (at this version, -1 any)."""

    path: str
    version: int = -1


Op = Union[Create, Check, SetData, Delete]


@dataclass(frozen=True)
class Txn:
    """One multi-op transaction and what it acts on: `what` names the step (for logs and for a
    simulator's checker), `czxid`/`ddl_id` the DDL identity every write of it is meant for."""

    what: str
    ops: tuple[Op, ...]
    czxid: int = 0
    ddl_id: str = ""


class Failure(str, Enum):
    """Why an operation of a failed transaction failed (kazoo's exception names, without kazoo)."""

    NO_NODE = "NoNodeError"
    NODE_EXISTS = "NodeExistsError"
    BAD_VERSION = "BadVersionError"
    NOT_EMPTY = "NotEmptyError"
    ROLLED_BACK = "RolledBackError"
    OTHER = "other"


def failure(result: Any) -> Failure | None:
    """The failure of one operation's result (an exception instance, kazoo-style), None when it went
    through (a path, True, or a stat). Read by class name so the core needs no ZooKeeper client."""
    if not isinstance(result, BaseException):
        return None
    name = result.__class__.__name__
    for f in Failure:
        if f.value == name:
            return f
    return Failure.OTHER


def went_through(results: Sequence[Any]) -> bool:
    """A transaction's results say it was applied (a failed one has an exception per operation)."""
    return not any(isinstance(r, BaseException) for r in results)


def failures(results: Sequence[Any]) -> list[Failure]:
    """The operations that made a transaction fail (the others only say they were rolled back)."""
    return [f for f in map(failure, results) if f is not None and f is not Failure.ROLLED_BACK]


def first_failure(results: Sequence[Any]) -> tuple[int, Failure] | None:
    """Index and kind of the operation that failed a transaction (None if it went through)."""
    for i, r in enumerate(results):
        f = failure(r)
        if f is not None and f is not Failure.ROLLED_BACK:
            return i, f
    return None


__all__ = ["Check", "Create", "Delete", "Failure", "Op", "SetData", "Txn", "failure", "failures",
           "first_failure", "went_through"]
