"""The proxy instance: assembles its Runtime, accepts connections on both ports, starts and stops things."""

from __future__ import annotations

import asyncio
import gc

import structlog

from meta.config import Config, tls_context
from meta.errors import BackendUnavailable, ProxyError
from meta.backend_query import PooledMetaBackend
from meta.history import DdlHistory
from meta.registry import Registry
from zk.cluster import Cluster

from proxy.backends.backend import open_connection
from proxy.ddl.ddl import DdlRunner
from proxy.backends.deadlock import DeadlockDetector
from proxy.manager.manager import Manager, ManagerSession
from proxy.metrics import Metrics
from proxy.backends.pool import Backends
from proxy.plan.router import Router
from proxy.runtime import DEFAULT_VERSION, Runtime
from proxy.exec.sequence import Sequences
from proxy.session.session import ClientProtocol
from proxy.plan.sqltok import set_server_version
from proxy.exec.xa import XaCoordinator
from proxy.session.views import ViewService

log = structlog.get_logger("pydble.server")


def assemble(config: Config) -> Runtime:
    """An instance's parts, built in the order they need each other, owned by one Runtime."""
    version = config.server.version or DEFAULT_VERSION
    set_server_version(version)
    registry = Registry(config)
    rt = Runtime(config=config, registry=registry, backends=Backends(config), meta_backend=PooledMetaBackend(),
                 history=DdlHistory(config.server.data_dir or None), tls=tls_context(config.server), version=version)
    rt.metrics = Metrics(rt)
    rt.router = Router(config, registry.tables_of, rt.table_columns)
    rt.ddl = DdlRunner(rt)
    rt.manager = Manager(rt)
    if config.cluster is not None:
        rt.cluster = Cluster(config, registry, rt.ddl.locks, rt.load_metadata, rt.ddl.refresh, rt.ddl.refresh_now,
                             rt.ddl.running)
    rt.xa = XaCoordinator(config, rt.backends, rt.cluster)
    rt.views = ViewService(rt)
    rt.sequences = Sequences(rt)   # after the cluster: ZooKeeper holds them there
    return rt


class ProxyServer:
    """Accepts connections on the client and manager ports and starts and stops the runtime's parts."""

    def __init__(self, config: Config) -> None:
        self.runtime = assemble(config)
        self.deadlocks = DeadlockDetector(self.runtime.sessions, self.runtime.backends, config)
        self._servers: list[asyncio.base_events.Server] = []
        self.log = log.bind(instance=config.server.instance)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Learn the backend version, load every table's metadata, then open both ports."""
        _big_buffers_return_to_the_os()
        rt = self.runtime
        if rt.config.server.version is None:
            rt.version = await self._backend_version()
            set_server_version(rt.version)
        if rt.cluster is not None:
            await rt.cluster.start()  # loads metadata under syncMeta.lock
        else:
            await rt.load_metadata()
        await rt.xa.start()   # in-doubt XA branches a crash left are finished before clients come
        await rt.views.start()   # every view known before the first client is served
        # Start-up objects (modules, config, the first metadata) live for the whole run: keep the
        # cyclic GC from rescanning them, or each full collection stalls every query (~100 ms).
        gc.collect()
        gc.freeze()
        loop = asyncio.get_running_loop()
        srv = rt.config.server
        self._servers.append(await loop.create_server(lambda: ClientProtocol(rt), srv.bind, srv.port,
                                                      backlog=1024, reuse_address=True, reuse_port=srv.reuse_port))
        self._servers.append(await loop.create_server(lambda: ClientProtocol(rt, ManagerSession), srv.bind,
                                                      srv.manager_port, backlog=128, reuse_address=True))
        self.deadlocks.start()
        if srv.metrics_port:
            rt.metrics.serve(srv.bind, srv.metrics_port)
        self.log.info("listening", port=srv.port, manager_port=srv.manager_port, metrics_port=srv.metrics_port or None,
                      version=rt.version)

    async def _backend_version(self) -> str:
        """The first reachable backend's version string, so drivers see a real server version."""
        for g in self.runtime.config.db_groups.values():
            try:
                conn = await open_connection(g, 0, None)
            except ProxyError as e:
                self.log.warning("backend unreachable at start", db_group=g.name, error=e.message)
                continue
            conn.close()
            return conn.server_version
        return DEFAULT_VERSION

    async def stop(self) -> None:
        """Stop listening, close every session and pool."""
        rt = self.runtime
        for srv in self._servers:
            srv.close()
        self.deadlocks.stop()
        for s in [*rt.sessions, *rt.manager_sessions]:
            s.client.close()
        await rt.ddl.stop()
        await rt.xa.stop()
        if rt.cluster is not None:
            await rt.cluster.stop()
        rt.ddl.later.flush()
        rt.backends.close()
        rt.meta_backend.close()
        await asyncio.to_thread(rt.history.close)


__all__ = ["ProxyServer", "BackendUnavailable"]


def _big_buffers_return_to_the_os() -> None:
    """glibc serves large blocks from its heap once a big one was freed (a dynamic mmap threshold), and
    that heap is rarely given back: the packet buffers of attackers that left would stay resident. A
    fixed threshold keeps blocks over 256 KB in their own mappings, returned to the OS when freed."""
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt(-3, 256 * 1024)   # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass  # not glibc: nothing to tune
