"""Compatibility: Node's mysql2 driver (the npm package pinned in tests/node/package-lock.json).

mysql2's `execute` uses the binary protocol and sends every JS number as a DOUBLE parameter, so
`LIMIT ?` only works when pydble reads such a parameter as MariaDB does; `changeUser` is
COM_CHANGE_USER. The script tests/node/mysql2_check.js does the client side and prints its findings.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from harness import ProxyProcess, free_port, missing, proxy_config, require_tool

NODE_DIR = Path(__file__).parent / "node"
NODES = ["dn1", "dn2", "dn3", "dn4"]


@pytest.fixture(scope="module")
def node_ready() -> str:
    """The node binary, with mysql2 installed from the lock file (`npm ci`) if it is not yet."""
    node, npm = require_tool("node"), require_tool("npm")
    if not (NODE_DIR / "node_modules" / "mysql2").is_dir():
        res = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True, text=True,
                             timeout=300)
        if res.returncode != 0:
            missing(f"npm ci failed in {NODE_DIR}: {res.stderr[-2000:]}")
    return node


@pytest.fixture(scope="module")
def node_proxy(backends: list[Any]) -> Iterator[ProxyProcess]:
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-node"))
    cfg["schemas"]["schema1"]["tables"]["node_t"] = {"type": "sharding", "nodes": NODES, "function": "hash-four",
                                                     "column": "id"}
    cfg["users"].append({"name": "other", "password": "222222", "schemas": ["schema2"]})
    p = ProxyProcess(cfg, name="proxy-node", release_ports=True)
    try:
        p.start()
        p.query("DROP TABLE IF EXISTS node_t")
        p.query("CREATE TABLE node_t (id INT PRIMARY KEY, name VARCHAR(30))")
        p.query("INSERT INTO node_t VALUES " + ",".join(f"({i}, 'n{i}')" for i in range(1, 9)))
        yield p
        p.query("DROP TABLE IF EXISTS node_t")
    finally:
        p.cleanup()


def test_mysql2_execute_and_change_user(node_ready: str, node_proxy: ProxyProcess, backends: list[Any]) -> None:
    res = subprocess.run([node_ready, str(NODE_DIR / "mysql2_check.js"), str(node_proxy.port)], cwd=NODE_DIR,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr[-4000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["collation"] == out["collation_after_change"] == "utf8mb4_unicode_ci"
    assert out["limit"] == [1, 2]
    assert out["limit_offset"] == [2, 3]
    assert out["offset"] == [4, 5]
    assert out["limit_half"] == [1, 2]            # 2.5 rounds half to even, as MariaDB reads it
    assert out["limit_text"]["errno"] == 1235 and "LIMIT" in out["limit_text"]["message"], out["limit_text"]
    assert out["point"] == [{"id": 3, "name": "n3"}]
    assert out["inserted"] == [{"id": 10, "name": "it's \\ ten"}]
    assert backends[0].query("SELECT id FROM node_t WHERE id = 10", "db2") == [(10,)]  # 10 % 4 -> dn3
    assert out["types"] == {"s": "caf\u00e9", "n": None, "t": 1, "h": "FF0027"}
    assert out["double"] == {"v": 2.5, "w": 3}    # a DOUBLE stays a number (not the DECIMAL string "2.5")
    assert out["double_type"] == 5                # MYSQL_TYPE_DOUBLE, as MariaDB answers
    # changeUser: the new user, its schema, nothing left of the old session
    assert out["after_change"] == {"u": "other@127.0.0.1", "d": "schema2", "tag": None, "ac": 1}
    assert out["prepared_after_change"] == {"one": 1}
    assert out["back"] == {"u": "test@127.0.0.1", "d": "schema1"}
    assert out["rolled_back"] == 0                 # the open transaction was rolled back
    # a wrong password: 1045, and the connection is closed as MySQL closes it
    assert out["bad_change"]["errno"] == 1045, out["bad_change"]
    assert "Access denied for user 'other'" in out["bad_change"]["message"]
    after = out["after_bad"]  # the socket is gone: EPIPE or "closed state", never a server error code
    assert "ok" not in after and not (after["errno"] or 0) > 0, after
    assert node_proxy.query("SELECT COUNT(*) FROM node_t") == [(9,)]
