"""Fixtures for the operator-command tests."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from cliops import Seeder


@pytest.fixture
def seed(zookeeper: Any, zk_root: str) -> Iterator[Seeder]:
    """A kazoo session of the test's own under zk_root: its ephemeral nodes play live instances."""
    client = zookeeper.client()
    try:
        yield Seeder(client, zk_root)
    finally:
        client.stop()
        client.close()
