"""The protocol with one of issue 17's fixes reverted, built test-side: a broken subclass of a core class,
a broken function in place of a core function, or a knob of the simulator's own adapter. The
production core has no switch for any of them."""

from __future__ import annotations

from typing import Any, Sequence

from zk.ddlcore import Check, Create, OriginatorCore, Running, SetData, SubscriberCore, Txn
from zk.ddlcore.acks import AckTally
from zk.paths import history_order, history_seq
from zk.records import Ack

from .cluster import Variant


class LockVersionOnlyCore(OriginatorCore):
    """Bug 1: the decision is conditional on the lock's version and the record's version only (both 0 for
    any new DDL): without the owner-znode check a stale originator's decision lands on the table's next
    DDL's record."""

    def decide_txn(self, key: Any, status: str, message: str = "", meta_version: int = 0) -> Txn:
        txn = super().decide_txn(key, status, message, meta_version)
        owner = self.owner_path(key)
        return Txn(txn.what, tuple(op for op in txn.ops if not (isinstance(op, Check) and op.path == owner)),
                   txn.czxid, txn.ddl_id)


class AnyAckTally(AckTally):
    """Bug 2's counting: an ack read from ZooKeeper counts when its status matches, whichever record it answers."""

    def on_ack(self, key: Any, instance: str, ack: Ack) -> bool:
        if key not in self.acked or instance not in self.expected or instance in self.acked[key]:
            return False
        if ack.status != self.status:
            return False
        self.acked[key].add(instance)
        if not ack.ok:
            self.refusals.append((instance, ack.message))
        return True


class AckWithoutIdentityCore(OriginatorCore):
    """Bug 2: acks carry no record identity and count for whatever record is at the path."""

    def init_tally(self, online: Any) -> AckTally:
        t = super().init_tally(online)
        return AnyAckTally(t.keys, t.status, t.czxids, t.expected)

    def outcome_tally(self, status: str) -> AckTally:
        t = super().outcome_tally(status)
        return AnyAckTally(t.keys, t.status, t.czxids, t.expected)


class SeenBeforeAppliedCore(SubscriberCore):
    """Bug 3: the listener moves history_seen past every entry as soon as it has read the names, before
    it has applied them: an entry whose reload fails is never tried again."""

    def history_todo(self, names: Sequence[str]) -> list[str]:
        todo = super().history_todo(names)
        ordered = history_order(list(names))
        if ordered:
            self.history_seen = max(self.history_seen or -1, history_seq(ordered[-1]))
        return todo


def always_ended(where: Sequence[str], created_at: float, now_wall: float, ddl_timeout_s: float,
                 past_bound: bool) -> Running:
    """Bug 5: the reconciler reads the structure without waiting for the DDL to end on the nodes."""
    return Running.ENDED


FIXED = Variant()
BUGS: dict[str, Variant] = {
    "lock-version-only": Variant("lock-version-only", originator_core=LockVersionOnlyCore),
    "ack-without-identity": Variant("ack-without-identity", originator_core=AckWithoutIdentityCore,
                                    acks_without_identity=True),
    "history-seen-before-applied": Variant("history-seen-before-applied", subscriber_core=SeenBeforeAppliedCore),
    "kill-live-holder": Variant("kill-live-holder", kill_refuses_live_holder=False),
    "reconcile-while-running": Variant("reconcile-while-running", running_step=always_ended),
    "partial-load-counted": Variant("partial-load-counted", partial_loads=True, partial_is_incomplete=False),
    "no-reload-later": Variant("no-reload-later", originator_reloads_later=False),
    "catch-up-without-lock": Variant("catch-up-without-lock", catch_up_takes_lock=False),
}

__all__ = ["BUGS", "FIXED", "LockVersionOnlyCore", "AckWithoutIdentityCore", "SeenBeforeAppliedCore",
           "always_ended", "Create", "SetData"]
