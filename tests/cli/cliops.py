"""Helpers for the operator-command tests: run `python -m cli` as a subprocess, seed znodes by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from zk.paths import Paths
from zk.records import INIT, Ack, DdlLockInfo, DdlRecord, OnlineInfo

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_ID = "cluster-1"


@dataclass
class Run:
    """A finished CLI run."""

    rc: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run_cli(*args: str, timeout: float = 90.0) -> Run:
    """`python -m cli ARGS` from the repo root, like the harness starts proxies."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT)
    p = subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO_ROOT, env=env, capture_output=True,
                       text=True, timeout=timeout)
    return Run(p.returncode, p.stdout, p.stderr)


def zk_args(zookeeper: Any, root: str) -> list[str]:
    """--zk/--root/--cluster-id for a harness ZooKeeperServer."""
    return ["--zk", zookeeper.hosts, "--root", root, "--cluster-id", CLUSTER_ID]


class Seeder:
    """Writes the cluster's znodes by hand, as a crashed or live instance would have left them."""

    def __init__(self, client: KazooClient, root: str) -> None:
        self.client = client
        self.paths = Paths(root, CLUSTER_ID)

    def online(self, name: str, port: int = 8066, meta_version: int = 3) -> None:
        """An online instance (ephemeral: it lives as long as the test's session)."""
        info = OnlineInfo("127.0.0.1", port, port + 1000, time.time() - 60, meta_version, 4242)
        self.client.create(self.paths.online_instance(name), info.encode(), ephemeral=True, makepath=True)

    def record(self, schema: str, table: str, instance: str, sql: str, status: str = INIT,
               acks: dict[str, str] | None = None, age_s: float = 30.0) -> None:
        """A ddl record with acks {instance: status}."""
        rec = DdlRecord(instance, schema, table, "ALTER_TABLE", sql, status, time.time() - age_s)
        self.client.ensure_path(self.paths.ddl)
        # record and ack folder in one transaction, as the originator writes them: a listener that
        # sees the record must be able to ack it at once
        tx = self.client.transaction()
        tx.create(self.paths.ddl_record(schema, table), rec.encode())
        tx.create(self.paths.ddl_acks(schema, table), b"")
        for inst, st in (acks or {}).items():
            tx.create(self.paths.ddl_ack(schema, table, inst), Ack(st, True, "", 3).encode())
        results = tx.commit()
        assert not any(isinstance(r, Exception) for r in results), results

    def lock(self, schema: str, table: str, instance: str, sql: str, age_s: float = 10.0) -> None:
        """A table's cluster ddl lock (ephemeral, held by the test's session)."""
        self.client.create(self.paths.ddl_lock(schema, table), DdlLockInfo(instance, sql, time.time() - age_s).encode(),
                           ephemeral=True, makepath=True)

    def exists(self, path: str) -> bool:
        return self.client.exists(path) is not None
