"""Prometheus metrics of one instance, served on [server] metrics_port (0: off)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

if TYPE_CHECKING:
    from proxy.runtime import Runtime

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
DDL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
ZK_STATES = ("CONNECTED", "SUSPENDED", "LOST", "NOT_CONNECTED")


class Metrics:
    """Counters and histograms updated on the paths that matter; gauges read at scrape time."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.queries = Counter("pydble_queries", "Statements answered, by route kind", ["route"], registry=r)
        self.query_seconds = Histogram("pydble_query_seconds", "Statement latency inside the proxy, by route kind",
                                       ["route"], buckets=LATENCY_BUCKETS, registry=r)
        self.ddl = Counter("pydble_ddl", "DDL statements, by outcome", ["outcome"], registry=r)
        self.ddl_phase_seconds = Histogram("pydble_ddl_phase_seconds", "Time spent in each DDL phase", ["phase"],
                                           buckets=DDL_BUCKETS, registry=r)
        self.meta_load_seconds = Histogram("pydble_metadata_load_seconds", "Metadata loads, by scope", ["scope"],
                                           buckets=DDL_BUCKETS, registry=r)
        self.connections = Counter("pydble_client_connections", "Client connections accepted", registry=r)
        self.refused = Counter("pydble_client_connections_refused", "Connections refused (max_connections)",
                               registry=r)
        r.register(_StateCollector(runtime))
        # children created once, so the hot path does no label lookups
        self._route = {k: (self.queries.labels(k), self.query_seconds.labels(k))
                       for k in ("single", "multi", "local", "ddl", "prepared")}

    def observe(self, route: str, started: float) -> None:
        """Count one statement and its latency (started: time.perf_counter() when it began)."""
        pair = self._route.get(route)
        if pair is None:
            pair = self._route[route] = (self.queries.labels(route), self.query_seconds.labels(route))
        pair[0].inc()
        pair[1].observe(time.perf_counter() - started)

    def ddl_done(self, outcome: str, phases_ms: dict[str, float]) -> None:
        """One DDL finished: its outcome and how long each phase took."""
        self.ddl.labels(outcome).inc()
        for phase, ms in phases_ms.items():
            self.ddl_phase_seconds.labels(phase).observe(ms / 1000)

    def serve(self, bind: str, port: int) -> None:
        """Start the HTTP endpoint (a daemon thread; it ends with the process)."""
        start_http_server(port, addr=bind, registry=self.registry)


class _StateCollector:
    """Gauges computed when Prometheus scrapes: pools, sessions, metadata, ZooKeeper session."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        s = self.runtime
        pool = GaugeMetricFamily("pydble_backend_pool_connections", "Backend connections per dbGroup, by state",
                                 labels=["db_group", "state"])
        for name, p in list(s.backends.pools.items()):
            st = p.stats()
            for state in ("in_use", "idle", "total", "waiting"):
                pool.add_metric([name, state], st[state])
            pool.add_metric([name, "max"], p.group.max_con)
        yield pool
        yield GaugeMetricFamily("pydble_client_sessions", "Open client sessions", value=s.client_sessions())
        yield GaugeMetricFamily("pydble_metadata_version", "This instance's metadata version",
                                value=s.registry.version)
        yield GaugeMetricFamily("pydble_ddl_in_flight", "DDLs holding a table lock on this instance",
                                value=len(s.ddl.locks.all()))
        zk = GaugeMetricFamily("pydble_zookeeper_session", "1 for the current ZooKeeper session state "
                               "(absent without a cluster)", labels=["state"])
        if s.cluster is not None:
            current = s.cluster.session_state
            for state in ZK_STATES:
                zk.add_metric([state], 1 if state == current else 0)
            yield GaugeMetricFamily("pydble_cluster_ready", "1 when this instance may originate DDL",
                                    value=1 if s.cluster.ready else 0)
        yield zk
