"""The peer channel between instances: messages are delayed, sometimes dropped, sometimes duplicated."""

from __future__ import annotations

from typing import Any, Callable

from .world import World


class PeerNet:
    """send(src, dst, msg) reaches dst's handler later (or never, or twice)."""

    def __init__(self, world: World, delay: tuple[float, float] = (0.0002, 0.003),
                 drop_p: float = 0.02, dup_p: float = 0.02, late_p: float = 0.02) -> None:
        self.world = world
        self.delay = delay
        self.drop_p = drop_p
        self.dup_p = dup_p
        self.late_p = late_p   # a message held back for much longer (a stalled link)
        self.handlers: dict[str, Callable[[str, Any], None]] = {}
        self.sent = self.dropped = self.duplicated = 0
        self.in_flight = 0

    def attach(self, name: str, handler: Callable[[str, Any], None]) -> None:
        self.handlers[name] = handler

    def _lat(self) -> float:
        w = self.world
        d = w.rng.uniform(*self.delay)
        if w.chance(self.late_p):
            d += w.rng.uniform(0.05, 2.0)
        return d

    def send(self, src: str, dst: str, msg: Any, on_drop: Callable[[], None] | None = None) -> None:
        """`on_drop`: called at once when the message is lost (its connection broke)."""
        w = self.world
        self.sent += 1
        if w.chance(self.drop_p):
            self.dropped += 1
            if on_drop is not None:
                on_drop()
            return
        copies = 2 if w.chance(self.dup_p) else 1
        self.duplicated += copies - 1
        for _ in range(copies):
            self.in_flight += 1
            w.at(self._lat(), self._arrive, src, dst, msg)

    def _arrive(self, src: str, dst: str, msg: Any) -> None:
        self.in_flight -= 1
        h = self.handlers.get(dst)
        if h is not None:
            h(src, msg)
