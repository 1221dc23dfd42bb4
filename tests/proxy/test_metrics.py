"""Observability: the Prometheus endpoint and JSON logs carrying a request id."""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.request

from harness import cluster_section, free_port, proxy_config


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return resp.read().decode()


def _value(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" ([0-9.e+-]+)"
    m = re.search(pattern, text)
    assert m, f"{name}{labels} not in metrics"
    return float(m.group(1))


def test_prometheus_endpoint_counts_what_the_proxy_does(backends, fresh_proxy, zookeeper, zk_root):
    mport = free_port()
    cfg = proxy_config(backends, free_port(), free_port(), instance="metrics-1",
                       cluster=cluster_section(zookeeper, root=zk_root, session_timeout_s=3, ack_timeout_s=5))
    cfg["server"]["metrics_port"] = mport
    p = fresh_proxy(config=cfg)
    p.query("CREATE TABLE IF NOT EXISTS sharding_4_t1 (id INT PRIMARY KEY, v INT)")
    p.query("SELECT * FROM sharding_4_t1 WHERE id = 1")
    p.query("SELECT COUNT(*) FROM sharding_4_t1")
    p.query("SELECT DATABASE()")
    text = _scrape(mport)
    assert _value(text, "pydble_queries_total", route="single") >= 1
    assert _value(text, "pydble_queries_total", route="multi") >= 1
    assert _value(text, "pydble_queries_total", route="local") >= 1
    assert _value(text, "pydble_queries_total", route="ddl") >= 1
    assert _value(text, "pydble_query_seconds_count", route="single") >= 1
    assert 'pydble_query_seconds_bucket{le="0.005",route="single"}' in text
    assert _value(text, "pydble_ddl_total", outcome="OK") >= 1
    assert _value(text, "pydble_ddl_phase_seconds_count", phase="execute") >= 1
    assert _value(text, "pydble_metadata_load_seconds_count", scope="all") >= 1
    assert _value(text, "pydble_backend_pool_connections", db_group="ha_group1", state="max") == 64
    assert _value(text, "pydble_zookeeper_session", state="CONNECTED") == 1
    assert _value(text, "pydble_cluster_ready") == 1


def test_json_logs_carry_a_request_id(fresh_proxy):
    p = fresh_proxy(argv=[sys.executable, "-m", "cli", "serve", "--config", "{config}", "--log-json"])
    p.query("CREATE TABLE IF NOT EXISTS sharding_2_t1 (id INT PRIMARY KEY)")

    def logged() -> tuple[list[dict], list[dict]]:
        lines = [json.loads(line) for line in p.log_text().splitlines() if line.startswith("{")]
        return lines, [e for e in lines if e.get("event") == "ddl executed"]
    deadline = time.monotonic() + 10   # the DDL's line comes a moment after its answer (meta/later.py)
    while not logged()[1] and time.monotonic() < deadline:
        time.sleep(0.01)
    lines, ddl = logged()
    assert ddl and re.fullmatch(r"\d+\.\d+", ddl[0]["request_id"]), ddl
    assert all("timestamp" in e and "level" in e for e in lines)
