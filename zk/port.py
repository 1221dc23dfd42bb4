"""What the cluster's helpers (listener, peers, recovery, pass loops) reach of the Cluster that owns them,
as a Protocol: they name it without importing zk.cluster, which imports them."""

from __future__ import annotations

from typing import Any, Coroutine, Protocol

REMOVE_ATTEMPTS = 5   # removal transactions tried while acks come and go meanwhile


class ClusterPort(Protocol):
    """zk.cluster.Cluster as its parts use it."""

    instance: str
    zk: Any
    paths: Any
    config: Any
    registry: Any
    locks: Any
    listener: Any
    peers: Any
    recovery: Any
    cc: Any
    ready: bool
    _stopping: bool

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> Any: ...
    def spawn_quietly(self, coro: Coroutine[Any, Any, Any]) -> Any: ...
    peer_key: Any
    active_ddls: set[str]
    ack: Any             # methods and callbacks of the cluster, as its parts call them
    refresh: Any
    refresh_now: Any
    ddl_running: Any
    online: Any
    prune_history: Any
    wait_acks: Any
