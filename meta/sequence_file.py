"""Global sequences of an instance without ZooKeeper: the next free value of each table in a small file.

A block of values is reserved by writing its end to the file (a new file fsynced, renamed over the
old one, the folder fsynced) before any value of it is used, so a restart, even after a crash, never
hands out a value twice: it goes on after the last block reserved (the unused rest of that block is
skipped). An flock on the folder serialises processes sharing it (`[server] reuse_port`), and the kernel
releases it when its holder dies.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from pathlib import Path

from meta.errors import ProxyError

LOCK_WAIT_S = 10.0


class SequenceUnavailable(ProxyError):
    """The sequence store cannot hand out values now (1105): the INSERT fails rather than guess one."""


class SequenceFile:
    """The local store: `<data_dir>/sequences/<schema>.<table>` holds the next free value."""

    def __init__(self, directory: str | Path | None) -> None:
        self.folder = Path(directory) / "sequences" if directory else None

    async def reserve(self, key: str, n: int, first: int | None) -> int | None:
        """Reserve [lo, lo + n) and return lo; None when the sequence has no value yet and no `first` is given."""
        return await asyncio.to_thread(self._update, key, n, first, None)

    async def raise_to(self, key: str, value: int) -> None:
        """Make the next free value at least `value` (an explicit id was inserted); nothing if it has no state."""
        await asyncio.to_thread(self._update, key, 0, None, value)

    def _update(self, key: str, n: int, first: int | None, at_least: int | None) -> int | None:
        if self.folder is None:
            raise SequenceUnavailable(f"global sequence {key}: no data_dir to keep it in")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise SequenceUnavailable(f"global sequence {key}: {e}") from None
        try:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise SequenceUnavailable(f"global sequence {key}: its file stayed locked for "
                                                  f"{LOCK_WAIT_S:.0f} s") from None
                    time.sleep(0.005)
            path = self.folder / key
            try:
                current: int | None = int(path.read_text().strip())
            except FileNotFoundError:
                current = None
            except (OSError, ValueError) as e:
                raise SequenceUnavailable(f"global sequence {key}: cannot read {path}: {e}") from None
            if at_least is not None:
                if current is not None and current < at_least:
                    self._write(path, at_least)
                return None
            if current is None:
                if first is None:
                    return None
                current = first
            self._write(path, current + n)
            return current
        finally:
            os.close(fd)  # releases the flock

    @staticmethod
    def _write(path: Path, value: int) -> None:
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "w") as f:
                f.write(f"{value}\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as e:
            raise SequenceUnavailable(f"global sequence {path.name}: cannot write {path}: {e}") from None


__all__ = ["SequenceFile", "SequenceUnavailable"]
