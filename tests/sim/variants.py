"""The protocol with one of issue 17's fixes reverted, built test-side: a broken subclass of a core or
driver class, or a knob of the simulator's own stand-ins (proxy/ddl/ddl.py's DdlRunner, meta.loader,
proxy/runtime.py's kill check). Production has no switch for any of them."""

from __future__ import annotations

from typing import Any, Sequence

from zk import zklog
from zk.cluster import Cluster
from zk.ddlcore import Check, Create, OriginatorCore, SetData, SubscriberCore, Txn, went_through
from zk.ddlcore.acks import AckTally
from zk.listener import DdlListener
from zk.paths import history_order, history_seq
from zk.records import Ack, DdlRecord

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


class AckWithoutIdentityCluster(Cluster):
    """Bug 2's writing: a subscriber's ZooKeeper ack names no record and is written whatever record is at
    the path by then (create, else overwrite)."""

    async def ack(self, rec: DdlRecord, record: int, ok: bool = True, message: str = "") -> None:
        path = self.paths.ddl_ack(rec.schema, rec.table, self.instance)
        data = Ack(rec.status, ok, message, self.registry.version, 0).encode()
        for ops in ((Create(path, data, ephemeral=True),), (SetData(path, data),)):
            txn = Txn("ack", ops, record, rec.ddl_id)   # meant for that record, but not conditional on it
            if went_through(await zklog.commit(self.zk, txn)):
                return


class AckAnyRecordCore(SubscriberCore):
    """Bug 2's subscriber side: a delayed ack is written while the step is the newest handled, whichever
    record the path holds by then (the check of the record's czxid reverted with the ack's identity)."""

    def ack_due(self, key: Any, status: str, czxid_now: int | None) -> bool:
        return self.handled.get(key) == status and czxid_now is not None


class SeenBeforeAppliedCore(SubscriberCore):
    """Bug 3: the listener moves history_seen past every entry as soon as it has read the names, before
    it has applied them: an entry whose reload fails is never tried again."""

    def history_todo(self, names: Sequence[str]) -> list[str]:
        todo = super().history_todo(names)
        ordered = history_order(list(names))
        if ordered:
            self.history_seen = max(self.history_seen or -1, history_seq(ordered[-1]))
        return todo


class SkipsOwnNameCore(SubscriberCore):
    """Bug 9: a ddl_history entry naming this instance is skipped as "our own DDL, applied by its
    originator", though the DDL may be an earlier incarnation's (or one a reconciler decided for us) whose
    table our join read while the ALTER still ran on a node: that node's old structure stays served."""

    def entry_applies(self, entry: Any) -> bool:
        return entry.instance != self.instance and super().entry_applies(entry)


class StaleTextsCore(SubscriberCore):
    """Bug 10: a final step the peer channel delayed past the table's next DDL is applied with its own
    (older) CREATE texts, putting back the structure from before that next DDL: served for good. Both
    halves of the fix reverted (either alone masks the other where the late step's receiver is a restarted
    process): the newest outcome applied per table, and the history entries the join's load reflects."""

    def superseded(self, key: Any) -> bool:
        return False

    def late_final_answer(self, key: Any, name: str = "") -> Any:
        return super().late_final_answer(key)


class CatchUpWithoutLockListener(DdlListener):
    """Bug 8: a catch-up (or settle) reload of a table without its local lock, while a DDL of this
    instance on the table may be half-way."""

    async def _refresh_unless_busy(self, schema: str, table: str, czxid: int, owner: str | None = None) -> None:
        await self.cluster.refresh([(schema, table)])


FIXED = Variant()
BUGS: dict[str, Variant] = {
    "lock-version-only": Variant("lock-version-only", originator_core=LockVersionOnlyCore),
    "ack-without-identity": Variant("ack-without-identity", originator_core=AckWithoutIdentityCore,
                                    cluster_class=AckWithoutIdentityCluster, subscriber_core=AckAnyRecordCore),
    "history-seen-before-applied": Variant("history-seen-before-applied", subscriber_core=SeenBeforeAppliedCore),
    "kill-live-holder": Variant("kill-live-holder", kill_refuses_live_holder=False),
    # bug 5: the reconciler reads the structure without looking whether the DDL still runs on a node
    "reconcile-while-running": Variant("reconcile-while-running", reconciler_looks=False),
    "partial-load-counted": Variant("partial-load-counted", partial_loads=True, partial_is_incomplete=False),
    "no-reload-later": Variant("no-reload-later", originator_reloads_later=False),
    "catch-up-without-lock": Variant("catch-up-without-lock", listener_class=CatchUpWithoutLockListener),
    "history-skips-own-name": Variant("history-skips-own-name", subscriber_core=SkipsOwnNameCore),
    "stale-texts": Variant("stale-texts", subscriber_core=StaleTextsCore),
}

__all__ = ["BUGS", "FIXED", "AckAnyRecordCore", "AckWithoutIdentityCluster", "AckWithoutIdentityCore", "CatchUpWithoutLockListener",
           "LockVersionOnlyCore", "SeenBeforeAppliedCore", "SkipsOwnNameCore", "StaleTextsCore"]
