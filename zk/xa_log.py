"""XA commit decisions in ZooKeeper: /{root}/{cluster_id}/xa/{gtrid}, readable by every instance.

A decision is a persistent znode created before the coordinator's first XA COMMIT (ZooKeeper
acknowledges a create once a quorum has it on disk). Creation is the only way a decision comes to be,
so the coordinator and a survivor rolling back the branches of a coordinator it believes dead can
never both win: whoever creates the znode first fixes the outcome, the other reads and follows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
from kazoo.exceptions import NodeExistsError

from meta.xa_log import COMMIT, BadXaRecord, XaDecision

if TYPE_CHECKING:
    from .cluster import Cluster

log = structlog.get_logger("pydble.cluster.xa")


class ZkXaLog:
    """The cluster's XA decisions."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.where = f"zookeeper {cluster.paths.xa}"

    def _zk(self):  # noqa: ANN202 - zk.aio.Zk, asserted connected enough to be asked
        zk = self.cluster.zk
        if zk is None:
            raise ConnectionError("no ZooKeeper client")
        return zk

    async def decide(self, d: XaDecision) -> XaDecision:
        zk = self._zk()
        path = self.cluster.paths.xa_decision(d.gtrid)
        try:
            await zk.create(path, d.encode(), makepath=True)
            return d
        except NodeExistsError:
            got = await zk.get_or_none(path)
        if got is None:   # created and removed meanwhile: only a finished transaction is removed
            raise ConnectionError(f"the decision on {d.gtrid} vanished while it was read")
        return XaDecision.decode(got[0])

    async def forget(self, gtrid: str) -> None:
        await self._zk().delete(self.cluster.paths.xa_decision(gtrid))

    async def withdraw(self, gtrid: str) -> None:
        zk = self._zk()
        path = self.cluster.paths.xa_decision(gtrid)
        got = await zk.get_or_none(path)
        if got is None or XaDecision.decode(got[0]).state != COMMIT:
            return   # no decision, or a survivor's rollback: it stays for the others to read
        await zk.delete(path, version=got[1].version)

    async def load(self) -> dict[str, XaDecision]:
        zk = self._zk()
        out: dict[str, XaDecision] = {}
        for name in await zk.children(self.cluster.paths.xa):
            got = await zk.get_or_none(f"{self.cluster.paths.xa}/{name}")
            if got is None:
                continue
            try:
                d = XaDecision.decode(got[0])
            except BadXaRecord as e:
                log.warning("ignoring an unreadable XA decision", znode=name, error=str(e))
                continue
            out[d.gtrid] = d
        return out

    async def online(self) -> set[str]:
        """The instances online now (their in-flight transactions are theirs to finish)."""
        return await self.cluster.online_now()
