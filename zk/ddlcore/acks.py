"""Which acknowledgement counts: only one carrying the status asked for and the identity (creation
zxid) of the very record it answers, from an instance still expected and online."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ..records import Ack

Key = tuple[str, str]   # (schema, table)


@dataclass(frozen=True)
class AckOutcome:
    """What a wait for acknowledgements found."""

    laggards: tuple[str, ...] = ()            # online instances that did not ack in time
    refusals: tuple[tuple[str, str], ...] = ()  # (instance, message) that acked ok=false
    by_peer: frozenset[str] = frozenset()     # instances that acked every record over the peer channel


def ack_counts(ack: Ack, status: str, czxid: int) -> bool:
    """An ack read from ZooKeeper counts for (status, record czxid) only when it names that very record:
    an ack left by the table's previous DDL (or one with no identity) never counts for the next."""
    return ack.status == status and czxid != 0 and ack.record == czxid


@dataclass
class AckTally:
    """The acks of one status of one DDL's records, kept as they come (each counted once)."""

    keys: tuple[Key, ...]
    status: str
    czxids: Mapping[Key, int]
    expected: frozenset[str]
    acked: dict[Key, set[str]] = field(default_factory=dict)
    by_peer: dict[Key, set[str]] = field(default_factory=dict)
    refusals: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for key in self.keys:
            self.acked.setdefault(key, set())
            self.by_peer.setdefault(key, set())

    def on_ack(self, key: Key, instance: str, ack: Ack) -> bool:
        """A ZooKeeper ack read at ack/{instance} of `key`'s record; True if it counted (now)."""
        if key not in self.acked or instance not in self.expected or instance in self.acked[key]:
            return False
        if not ack_counts(ack, self.status, self.czxids.get(key, 0)):
            return False
        self.acked[key].add(instance)
        if not ack.ok:
            self.refusals.append((instance, ack.message))
        return True

    def on_peer_answer(self, key: Key, instance: str, ok: bool | None, message: str) -> bool:
        """An answer on the peer channel to the step of this record (the step named its czxid and the
        peer checked it against ZooKeeper); ok None: "ask ZooKeeper instead", which counts nothing."""
        if ok is None or key not in self.acked or instance in self.acked[key]:
            return False
        self.acked[key].add(instance)
        self.by_peer[key].add(instance)
        if not ok:
            self.refusals.append((instance, message))
        return True

    def waiting(self, online: Iterable[str]) -> frozenset[str]:
        """Expected instances still online that have not acked every record."""
        alive = self.expected & set(online)
        return frozenset().union(*(alive - self.acked[key] for key in self.keys)) if self.keys else frozenset()

    def open_keys(self) -> list[Key]:
        """Records some expected instance has not acked yet (online or not)."""
        return [key for key in self.keys if self.expected - self.acked[key]]

    def complete(self, online: Iterable[str]) -> bool:
        return not self.waiting(online)

    def outcome(self, online: Iterable[str] | None = None) -> AckOutcome:
        """The result so far; with `online`, those still waited for are the laggards (the time is up)."""
        laggards = tuple(sorted(self.waiting(online))) if online is not None else ()
        over_peer = set.intersection(*self.by_peer.values()) if self.by_peer else set()
        return AckOutcome(laggards, tuple(self.refusals), frozenset(over_peer))


__all__ = ["AckOutcome", "AckTally", "ack_counts"]
