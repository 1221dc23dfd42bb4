"""Acknowledgements: steps handed to the peers, answers and ZooKeeper acks waited for (bounded), and
this instance's own acks. Which ack counts is the core's decision (zk/ddlcore/acks.py): only one
naming the very record it answers."""

from __future__ import annotations

import asyncio

from kazoo.exceptions import NoNodeError

from . import zklog
from .ddlcore.acks import AckOutcome, AckTally
from .ddlcore.subscriber import ack_txns
from .ddlcore.txn import Failure, failure, went_through
from .loops import SAFETY_POLL_S, ZK_ERRORS, Waker, clock, drop_tasks
from .reads import read
from .records import Ack, DdlRecord

PEER_GRACE_S = 0.2    # how long acks are awaited on the peer channel alone before ZooKeeper is read too
PEER_RETRY_S = 0.1    # a final step that found no usable link is sent again this much later


class AckBook:
    """Steps out and acks in (a part of zk.cluster.Cluster)."""

    def ask_peers(self, keys: list[tuple[str, str]], records: dict[tuple[str, str], tuple[DdlRecord, int]],
                  instances: set[str], texts: dict | None = None,
                  final: bool = False) -> dict[tuple[tuple[str, str], str], asyncio.Future]:
        """Send a step of our DDL straight to each instance (zk/peers.py); each future gives its ack.
        `final`: the record is removed without waiting for ZooKeeper acks, so the peer writes none."""
        tasks: dict[tuple[tuple[str, str], str], asyncio.Future] = {}
        if self.peer_server is None:
            return tasks   # the channel is off on this instance: ZooKeeper acks only
        loop = asyncio.get_running_loop()
        for key in keys:
            rec, czxid = records[key]
            step = self.peers.step(self.paths.ddl_record(*key), czxid, rec.encode().decode(), texts, final)
            for inst in sorted(instances):   # in one order, whatever the str hashing
                # written right away on an open link; otherwise a task opens one first
                sent = self.peers.send_now(inst, step)
                tasks[(key, inst)] = sent if sent is not None else loop.create_task(self.peers.ask(inst, step))
        return tasks

    async def deliver(self, records: dict[tuple[str, str], tuple[DdlRecord, int]], texts: dict | None,
                      tasks: dict[tuple[tuple[str, str], str], asyncio.Future], timeout: float) -> AckOutcome:
        """Wait (bounded) for the answers to a final step sent with ask_peers(final=True), over the peer
        channel alone: a link that breaks is opened again and the step re-sent; an instance that goes
        offline is no longer waited for. Instances that never answered in time come back as laggards."""
        deadline = clock() + timeout
        tasks = dict(tasks)
        refusals: list[tuple[str, str]] = []
        gave_up: set[str] = set()
        online = {inst for _, inst in tasks}
        try:
            while tasks:
                remaining = deadline - clock()
                if remaining <= 0:
                    break
                done, _ = await asyncio.wait(tasks.values(), timeout=min(remaining, SAFETY_POLL_S),
                                             return_when=asyncio.FIRST_COMPLETED)
                try:
                    online = await self.online_now()
                except ZK_ERRORS:
                    pass   # the decision is ZooKeeper's business; here only who is still worth waiting for
                retry: set[tuple[tuple[str, str], str]] = set()
                for (key, inst), task in list(tasks.items()):
                    if inst not in online:
                        del tasks[(key, inst)]
                        task.cancel()
                    elif task in done:
                        del tasks[(key, inst)]
                        answer = None if task.cancelled() or task.exception() is not None else task.result()
                        if answer is None:
                            retry.add((key, inst))   # broken link: opened again, the step re-sent
                        elif answer[0] is None:
                            # the peer cannot take a final step (the record is gone from ZooKeeper, it
                            # is re-joining): re-sending cannot change that; it catches up through
                            # ZooKeeper (record gone, ddl_history), so it is a laggard, not waited for
                            gave_up.add(inst)
                        elif not answer[0]:
                            refusals.append((inst, answer[1]))
                if retry:
                    await asyncio.sleep(min(PEER_RETRY_S, max(0.0, deadline - clock())))
                    for key, inst in sorted(retry):   # in one order, whatever the str hashing
                        tasks.update(self.ask_peers([key], records, {inst}, texts, final=True))
            return AckOutcome(tuple(sorted({inst for _, inst in tasks} | gave_up)), tuple(refusals))
        finally:
            drop_tasks(tasks)

    async def wait_acks(self, tally: AckTally, timeout: float,
                        peer: dict[tuple[tuple[str, str], str], asyncio.Future] | None = None) -> AckOutcome:
        """Wait until every expected instance still online has acked the tally's status on every record
        (bounded); which ack counts is the tally's decision (only one naming its record's czxid).

        An answer on the peer channel counts as an ack; ZooKeeper is read only for instances that
        have not answered there within PEER_GRACE_S (or at once when their channel failed)."""
        peer = dict(peer or {})
        try:
            return await self._wait_acks(tally, timeout, peer)
        finally:
            drop_tasks(peer)

    async def _wait_acks(self, tally: AckTally, timeout: float,
                         peer: dict[tuple[tuple[str, str], str], asyncio.Future]) -> AckOutcome:
        zk = self.zk
        assert zk is not None
        deadline = clock() + timeout
        wake = Waker()

        def absorb() -> None:
            for (key, inst), task in list(peer.items()):
                if not task.done():
                    continue
                del peer[(key, inst)]
                if task.cancelled() or task.exception() is not None:
                    continue
                ok, message = task.result()
                tally.on_peer_answer(key, inst, ok, message)

        if peer:
            wanted = [t for (_, inst), t in peer.items() if inst in tally.expected]
            if wanted:
                await asyncio.wait(wanted, timeout=min(PEER_GRACE_S, timeout))
            absorb()
            if not tally.open_keys():
                return tally.outcome()
            for task in peer.values():
                task.add_done_callback(wake)
        while True:
            absorb()
            # one round of reads at a time, each round in parallel: online + ack folders, then new acks
            open_keys = tally.open_keys()
            online, *folders = await asyncio.gather(
                self.online(watch=wake), *(zk.children(self.paths.ddl_acks(*key), watch=wake) for key in open_keys))
            waiting = tally.waiting(online)
            absorb()
            to_read = [(key, inst) for key, names in zip(open_keys, folders)
                       for inst in names if inst in waiting and inst not in tally.acked[key]]
            got_all = await asyncio.gather(
                *(read(zk, self.paths.ddl_ack(*key, inst), Ack, watch=wake) for key, inst in to_read))
            for (key, inst), got in zip(to_read, got_all):
                if got is not None and got.value is not None:
                    tally.on_ack(key, inst, got.value)
            if tally.complete(online):
                return tally.outcome()
            if deadline - clock() <= 0:
                return tally.outcome(online)
            await wake.wait(min(deadline - clock(), SAFETY_POLL_S))

    def own_ack(self, schema: str, table: str, status: str, ok: bool = True, message: str = "",
                record: int = 0) -> tuple[str, bytes]:
        """Path and data of this instance's ack of a record's (czxid `record`) status (also written
        inside transactions)."""
        return (self.paths.ddl_ack(schema, table, self.instance),
                Ack(status, ok, message, self.registry.version, record).encode())

    async def ack(self, rec: DdlRecord, record: int, ok: bool = True, message: str = "") -> None:
        """Write (or update) this instance's ack of a record's (czxid `record`) status, only while the
        record is that DDL's (its owner znode is there); NoNodeError when it is not."""
        zk = self.zk
        assert zk is not None
        txns = ack_txns(self.paths, self.instance, rec, record, ok, message, self.registry.version)
        for txn in txns:
            results = await zklog.commit(zk, txn)
            if went_through(results):
                return
            if rec.ddl_id and failure(results[0]) is Failure.NO_NODE:
                raise NoNodeError(f"{txn.ops[0].path}: the record is gone or another DDL's")
        raise NoNodeError(f"{txns[0].ops[-1].path}: could not write the ack")
