"""The core's transactions (zk/ddlcore/txn.py) run on the asyncio ZooKeeper client: the one place
where a Txn becomes a multi-op request."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from .aio import Zk
from .ddlcore.txn import Check, Create, Delete, SetData, Txn


class TxnOps:
    """Builds the multi-op's operations, in the core's order; `txn` says what they are for (a
    simulated ZooKeeper's checker reads it)."""

    __slots__ = ("txn",)

    def __init__(self, txn: Txn) -> None:
        self.txn = txn

    def __call__(self, tx: Any) -> None:
        for op in self.txn.ops:
            if isinstance(op, Create):
                tx.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequence)
            elif isinstance(op, Delete):
                tx.delete(op.path, op.version)
            elif isinstance(op, SetData):
                tx.set_data(op.path, op.data, op.version)
            elif isinstance(op, Check):
                tx.check(op.path, op.version)
            else:
                raise TypeError(f"not a ZooKeeper operation: {op!r}")


def builder(txn: Txn) -> Callable[[Any], None]:
    """The multi-op's operations, in the core's order."""
    return TxnOps(txn)


async def commit(zk: Zk, txn: Txn) -> list[Any]:
    """Run the transaction; kazoo-style results (exception instances when it failed)."""
    return await zk.commit(builder(txn))


def commit_now(zk: Zk, txn: Txn) -> asyncio.Future:
    """The transaction written before this returns (ConnectionLoss if not connected)."""
    return zk.commit_now(builder(txn))


__all__ = ["TxnOps", "builder", "commit", "commit_now"]
