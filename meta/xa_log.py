"""XA commit decisions: what a crashed coordinator decided, read back by whoever finishes its branches.

One record per global transaction, written (and made durable) before the first XA COMMIT and removed
once every branch is committed. Single-instance mode keeps them as files under `<data_dir>/xa/`;
zk/xa_log.py keeps the same records in ZooKeeper for a cluster.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

log = structlog.get_logger("pydble.meta.xa_log")

XID_PREFIX = "pydble."
COMMIT = "commit"
ROLLBACK = "rollback"   # a tombstone: a recoverer rolled back branches of a coordinator it found gone
LOG_DIR = "xa"


class BadXaRecord(ValueError):
    """A record that cannot be read back (not ours, or damaged)."""


@dataclass
class XaDecision:
    """The outcome of one global transaction and the shardingNodes holding its branches."""

    gtrid: str
    state: str                      # COMMIT | ROLLBACK
    instance: str                   # the coordinator
    nodes: list[str] = field(default_factory=list)
    at: float = field(default_factory=time.time)

    def encode(self) -> bytes:
        return json.dumps({"gtrid": self.gtrid, "state": self.state, "instance": self.instance,
                           "nodes": self.nodes, "at": self.at}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> XaDecision:
        try:
            o = json.loads(data)
            d = cls(str(o["gtrid"]), str(o["state"]), str(o["instance"]), [str(n) for n in o.get("nodes", [])],
                    float(o.get("at", 0.0)))
        except (ValueError, TypeError, KeyError) as e:
            raise BadXaRecord(f"unreadable XA decision: {e}") from None
        if d.state not in (COMMIT, ROLLBACK):
            raise BadXaRecord(f"unknown XA decision state {d.state!r}")
        return d


def make_gtrid(instance: str, boot: str, n: int) -> str:
    """pydble.{instance}.{boot}.{n}: unique per instance (n), per start (boot), per cluster (instance)."""
    return f"{XID_PREFIX}{instance}.{boot}.{n}"


def owner_of(gtrid: str) -> str | None:
    """The instance that coordinates a global transaction of pydble's; None for anyone else's xid."""
    if not gtrid.startswith(XID_PREFIX):
        return None
    parts = gtrid[len(XID_PREFIX):].rsplit(".", 2)
    if len(parts) != 3 or not parts[0] or not parts[2].isdigit():
        return None
    return parts[0]


class XaLog(Protocol):
    """Where decisions live: a local directory or ZooKeeper."""

    where: str

    async def decide(self, d: XaDecision) -> XaDecision:
        """Record d unless a decision on its gtrid exists; the decision that holds afterwards."""
        ...

    async def forget(self, gtrid: str) -> None:
        """Remove a finished transaction's decision (absent is fine)."""
        ...

    async def withdraw(self, gtrid: str) -> None:
        """Make sure no COMMIT decision on gtrid exists (a rollback decision stays): raises if unsure."""
        ...

    async def load(self) -> dict[str, XaDecision]:
        """Every recorded decision, by gtrid."""
        ...


class LocalXaLog:
    """Decisions as one fsynced file each under <data_dir>/xa/ (in memory only without a data_dir)."""

    def __init__(self, data_dir: str | None) -> None:
        self.dir = Path(data_dir) / LOG_DIR if data_dir else None
        self.where = str(self.dir) if self.dir is not None else "memory (no data_dir: decisions do not survive a crash)"
        self._memory: dict[str, XaDecision] = {}

    def _path(self, gtrid: str) -> Path:
        assert self.dir is not None
        return self.dir / f"{gtrid.encode().hex()}.json"   # any instance name makes a valid file name

    async def decide(self, d: XaDecision) -> XaDecision:
        if self.dir is None:
            return self._memory.setdefault(d.gtrid, d)
        return await asyncio.to_thread(self._write, d)

    def _write(self, d: XaDecision) -> XaDecision:
        """Write a temporary file, fsync it, link it under its final name (never over an existing one),
        fsync the directory: durable before we return, and a crash never leaves a torn decision."""
        assert self.dir is not None
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self._path(d.gtrid)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, d.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return XaDecision.decode(path.read_bytes())
        finally:
            tmp.unlink()
        _fsync_dir(self.dir)
        return d

    async def forget(self, gtrid: str) -> None:
        if self.dir is None:
            self._memory.pop(gtrid, None)
            return
        await asyncio.to_thread(self._remove, gtrid)

    async def withdraw(self, gtrid: str) -> None:
        """Nobody else writes this directory: remove it, durably (a branch is rolled back next)."""
        if self.dir is None:
            self._memory.pop(gtrid, None)
            return
        await asyncio.to_thread(self._remove, gtrid)
        if self.dir.is_dir():
            await asyncio.to_thread(_fsync_dir, self.dir)

    def _remove(self, gtrid: str) -> None:
        """No fsync: a removal lost in a crash brings back a finished decision, which recovery removes."""
        assert self.dir is not None
        try:
            self._path(gtrid).unlink()
        except FileNotFoundError:
            return

    async def load(self) -> dict[str, XaDecision]:
        if self.dir is None:
            return dict(self._memory)
        return await asyncio.to_thread(self.read_all)

    def read_all(self) -> dict[str, XaDecision]:
        """Every decision file (a crash before the link leaves only a temporary file: no decision)."""
        out: dict[str, XaDecision] = {}
        if self.dir is None or not self.dir.is_dir():
            return out
        for p in sorted(self.dir.glob("*.json")):
            try:
                d = XaDecision.decode(p.read_bytes())
            except (BadXaRecord, OSError) as e:
                log.warning("ignoring an unreadable XA decision file", file=str(p), error=str(e))
                continue
            out[d.gtrid] = d
        return out


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
