"""The cluster DDL protocol's core (DESIGN.md §6), sans I/O: phases, one function per step, and the
transactions each step writes as data. The originator (zk/originator.py), the listener (zk/listener.py),
the reconciler (zk/recovery.py) and the deterministic simulator (tests/sim/) drive the same functions;
they only run the transactions and reads and feed the results back.

No asyncio, sockets, clock or environment here: time comes in as arguments."""

from .acks import AckOutcome, AckTally, ack_counts
from .originator import Cleanup, EndMode, Fence, InitResult, OriginatorCore, Phase, Removal, StaleActor
from .reconciler import Orphan, Running, Verdict
from .subscriber import Gone, GoneAction, Step, SubscriberCore, may_release
from .txn import Check, Create, Delete, Failure, Op, SetData, Txn, failure, failures, first_failure, went_through

__all__ = ["AckOutcome", "AckTally", "Check", "Cleanup", "Create", "Delete", "EndMode", "Failure", "Fence", "Gone",
           "GoneAction", "InitResult", "Op", "Orphan", "OriginatorCore", "Phase", "Removal", "Running",
           "SetData", "StaleActor", "Step", "SubscriberCore", "Txn", "Verdict", "ack_counts", "failure",
           "failures", "first_failure", "may_release", "went_through"]
