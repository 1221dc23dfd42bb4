"""DDL history (Kylin's audit log idea): every DDL this instance ran, bounded, on disk, across restarts."""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field, fields
from pathlib import Path

import structlog

log = structlog.get_logger("pydble.meta.history")

HISTORY_FILE = "ddl_history.jsonl"
CLOSE_WAIT_S = 10.0   # how long close() waits for the last entries to reach the disk
# The writer gathers the lines of a burst (a migration's DDLs one after the other) this long after the
# first one, then writes them with one fsync: one thread wake-up per burst instead of one per DDL, each
# of which cost the next DDL ~0.2 ms (bench/RESULTS.md, session 6). close() cuts the wait short.
BATCH_S = 0.2


@dataclass
class DdlHistoryEntry:
    """One DDL: who ran what where, how it ended, how long each phase took."""

    instance: str
    user: str
    sql: str
    ddl_type: str
    tables: list[str]
    nodes: list[str]
    outcome: str = "OK"                       # OK | FAILED
    message: str = ""
    phases_ms: dict[str, float] = field(default_factory=dict)
    meta_version: int = 0
    started_at: float = field(default_factory=time.time)
    finished_at: float = 0.0
    laggards: list[str] = field(default_factory=list)
    id: int = 0
    failed_nodes: list[str] = field(default_factory=list)   # shardingNodes where the statement failed
    before: dict[str, str] = field(default_factory=dict)    # half-applied only: "schema.table" -> CREATE before
    repair_of: int = 0                                      # a `repair @@ddl` run: the id of the DDL it repairs

    @property
    def succeeded_nodes(self) -> list[str]:
        """The nodes where the statement succeeded."""
        return [n for n in self.nodes if n not in self.failed_nodes]

    @classmethod
    def from_json(cls, line: str) -> DdlHistoryEntry | None:
        """Parse one line of the file; None for a damaged line (a crash mid-write)."""
        try:
            o = json.loads(line)
            return cls(**{k: o[k] for k in cls.__dataclass_fields__ if k in o})
        except (ValueError, TypeError, KeyError):
            return None

    def to_json(self) -> str:
        """One line of the file (dataclasses.asdict deep-copies; the fields are flat)."""
        return json.dumps({f.name: getattr(self, f.name) for f in _FIELDS}, separators=(",", ":"))


_FIELDS = fields(DdlHistoryEntry)


class DdlHistory:
    """A bounded JSON-lines file plus the newest entries in memory."""

    def __init__(self, directory: str | Path | None, max_entries: int = 1000) -> None:
        self.max_entries = max_entries
        self.path = Path(directory) / HISTORY_FILE if directory else None
        self._entries: deque[DdlHistoryEntry] = deque(maxlen=max_entries)
        self._lines = 0
        self._next_id = 1
        self._queue: queue.SimpleQueue[tuple[int, str] | None] = queue.SimpleQueue()   # None: stop
        self._writer: threading.Thread | None = None   # one thread: lines reach the file in order
        self._writer_lock = threading.Lock()
        self._closing = threading.Event()
        self._load()

    def _load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            lines = self.path.read_text(errors="replace").splitlines()
        except OSError as e:
            log.warning("cannot read ddl history", path=str(self.path), error=str(e))
            return
        self._lines = len(lines)
        for line in lines:
            entry = DdlHistoryEntry.from_json(line)
            if entry is not None:
                self._entries.append(entry)
                self._next_id = max(self._next_id, entry.id + 1)

    def append(self, entry: DdlHistoryEntry) -> DdlHistoryEntry:
        """Record a finished DDL: in memory at once, on disk (written and fsynced, within BATCH_S) by a
        writer thread, so the client's answer does not wait for the disk."""
        entry.id = self._next_id
        self._next_id += 1
        self._entries.append(entry)
        if self.path is None:
            return entry
        line = entry.to_json() + "\n"
        with self._writer_lock:
            if self._writer is None:
                self._closing.clear()
                # a daemon: close() (the server's stop) is what waits for the last lines
                self._writer = threading.Thread(target=self._run, name="ddl-history", daemon=True)
                self._writer.start()
            self._queue.put((entry.id, line))
        return entry

    def _run(self) -> None:
        """Writer thread: take a line, give the rest of its burst BATCH_S to come, write them all."""
        while True:
            first = self._queue.get()
            if first is None:
                return
            self._closing.wait(BATCH_S)
            batch, stop = [first], False
            while not stop:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                else:
                    batch.append(item)
            self._write(batch)
            if stop:
                return

    def _write(self, batch: list[tuple[int, str]]) -> None:
        """Append lines durably (one fsync); compact when the file has grown to twice the bound."""
        assert self.path is not None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(line for _, line in batch))
                f.flush()
                os.fsync(f.fileno())
            self._lines += len(batch)
            if self._lines > 2 * self.max_entries:
                self._compact(batch[-1][0])
        except OSError as e:
            log.warning("cannot write ddl history", path=str(self.path), error=str(e))

    def _compact(self, upto_id: int) -> None:
        """Rewrite the file with only the newest entries written so far (atomically); entries appended
        meanwhile are still queued for the writer and come after."""
        assert self.path is not None
        tmp = self.path.with_suffix(".tmp")
        kept = [e for e in list(self._entries) if e.id <= upto_id]
        with open(tmp, "w", encoding="utf-8") as f:
            for e in kept:
                f.write(e.to_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._lines = len(kept)

    def close(self) -> None:
        """Wait (bounded) until every entry appended so far is on disk, then stop the writer thread."""
        with self._writer_lock:
            writer, self._writer = self._writer, None
            if writer is None:
                return
            self._closing.set()
            self._queue.put(None)
        writer.join(CLOSE_WAIT_S)
        if writer.is_alive():
            log.warning("ddl history writer still busy at shutdown", path=str(self.path))

    def entries(self, limit: int | None = None) -> list[DdlHistoryEntry]:
        """Newest first."""
        out = list(reversed(self._entries))
        return out[:limit] if limit else out
