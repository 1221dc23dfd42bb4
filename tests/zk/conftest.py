"""Three-instance clusters over the session backends and a real ZooKeeper."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from clusterkit import Cluster, reset_table


@pytest.fixture
def cluster(zookeeper: Any, zk_root: str, fresh_proxy: Callable[..., Any], backends: list[Any]) -> Cluster:
    """An empty cluster description; call .start() to run instances."""
    reset_table(backends)
    return Cluster(fresh_proxy, zookeeper, zk_root, backends)
