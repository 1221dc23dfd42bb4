"""The countdown tree that tells a metadata load when a node, a schema and the whole load are done.

Each level fires exactly once, whatever the order of completions and however many duplicates
arrive (a retried batch, a node that fails after a timeout already completed it): the proof is a
set of named pending parts, not a bare integer.
"""

from __future__ import annotations

import threading
from typing import Callable, Hashable, Iterable

Part = Hashable
Unit = tuple[str, str]  # (shardingNode, role): role "config" or "default"

CONFIG = "config"
DEFAULT = "default"
LISTING = "listing"


class Countdown:
    """A set of pending named parts; the completion of the last one fires the callback once."""

    __slots__ = ("name", "_pending", "_fired", "_on_fire", "_lock")

    def __init__(self, name: str, parts: Iterable[Part] = (),
                 on_fire: Callable[[], None] | None = None) -> None:
        self.name = name
        self._pending: set[Part] = set(parts)
        self._fired = False
        self._on_fire = on_fire
        self._lock = threading.Lock()

    @property
    def fired(self) -> bool:
        """Whether the last part has completed (or the countdown was forced)."""
        return self._fired

    @property
    def pending(self) -> frozenset[Part]:
        """Parts not yet completed, for logs."""
        with self._lock:
            return frozenset(self._pending)

    def add(self, *parts: Part) -> bool:
        """Expect more parts (e.g. batches known after listing); False once it has fired."""
        with self._lock:
            if self._fired:
                return False
            self._pending.update(parts)
            return True

    def complete(self, part: Part) -> bool:
        """Mark one part done; True only for the call that fired the countdown."""
        with self._lock:
            if self._fired or part not in self._pending:
                return False
            self._pending.discard(part)
            if self._pending:
                return False
            self._fired = True
        self._fire()
        return True

    def force(self) -> bool:
        """Complete every pending part at once (a failed node); True if this call fired it."""
        with self._lock:
            if self._fired:
                return False
            self._pending.clear()
            self._fired = True
        self._fire()
        return True

    def arm(self) -> bool:
        """Fire now if nothing was ever pending (a schema with no node to read)."""
        with self._lock:
            if self._fired or self._pending:
                return False
            self._fired = True
        self._fire()
        return True

    def _fire(self) -> None:
        if self._on_fire is not None:
            self._on_fire()


class LoadTree:
    """Load ← schemas ← (node, role) units ← node ← batches; callbacks run once per level."""

    def __init__(self, schema_units: dict[str, Iterable[Unit]], *,
                 on_node: Callable[[str], None] | None = None,
                 on_schema: Callable[[str], None] | None = None,
                 on_load: Callable[[], None] | None = None) -> None:
        self._on_node = on_node
        self._on_schema = on_schema
        self._on_load = on_load
        self._batch_seq: dict[str, int] = {}
        self.root = Countdown("load", schema_units.keys(), self._load_fired)
        self.schemas: dict[str, Countdown] = {}
        serves: dict[str, list[tuple[str, Unit]]] = {}
        for schema, units in schema_units.items():
            units = set(units)
            self.schemas[schema] = Countdown(schema, units, self._schema_cb(schema))
            for unit in units:
                serves.setdefault(unit[0], []).append((schema, unit))
        self._serves = serves
        self.nodes: dict[str, Countdown] = {
            node: Countdown(node, (LISTING,), self._node_cb(node)) for node in serves
        }

    def start(self) -> None:
        """Fire schemas that have no node at all, then the load if it has no schema."""
        for c in list(self.schemas.values()):
            c.arm()
        self.root.arm()

    @property
    def done(self) -> bool:
        """Whether the whole load has completed."""
        return self.root.fired

    def add_batches(self, node: str, count: int) -> list[int]:
        """Register `count` more batches of a node before its listing or a failed batch completes."""
        first = self._batch_seq.get(node, 0)
        ids = list(range(first, first + count))
        self._batch_seq[node] = first + count
        if ids:
            self.nodes[node].add(*ids)
        return ids

    def listed(self, node: str) -> bool:
        """The node's table listing is done (its batches must already be added)."""
        return self.nodes[node].complete(LISTING)

    def batch_done(self, node: str, batch: int) -> bool:
        """One batch of a node is done; True if it was the node's last countdown."""
        return self.nodes[node].complete(batch)

    def node_failed(self, node: str) -> bool:
        """The node completes its part now, whatever is pending."""
        return self.nodes[node].force()

    def force_all(self) -> None:
        """Safety net: complete every node that has not completed (should never be needed)."""
        for c in self.nodes.values():
            c.force()
        for c in self.schemas.values():
            c.force()
        self.root.force()

    def _node_cb(self, node: str) -> Callable[[], None]:
        def fired() -> None:
            try:
                if self._on_node is not None:
                    self._on_node(node)
            finally:  # a failing observer must not leave its schemas hanging
                for schema, unit in self._serves[node]:
                    self.schemas[schema].complete(unit)
        return fired

    def _schema_cb(self, schema: str) -> Callable[[], None]:
        def fired() -> None:
            try:
                if self._on_schema is not None:
                    self._on_schema(schema)
            finally:
                self.root.complete(schema)
        return fired

    def _load_fired(self) -> None:
        if self._on_load is not None:
            self._on_load()
