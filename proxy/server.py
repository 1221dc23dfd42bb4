"""The proxy instance: assembles its Runtime, accepts connections on both ports, starts and stops things."""

from __future__ import annotations

import asyncio
import gc

import structlog

from meta.config import Config, tls_context, usable_data_dir
from meta.errors import BackendUnavailable, ProxyError
from meta.history import DdlHistory
from meta.registry import Registry
from zk.cluster import Cluster

from proxy.backends.backend import open_connection
from proxy.ddl.ddl import DdlRunner
from proxy.backends.deadlock import DeadlockDetector
from proxy.backends.meta_link import MetaLink
from proxy.manager.manager import Manager, ManagerSession
from proxy.metrics import Metrics
from proxy.backends.pool import Backends
from proxy.plan.router import Router
from proxy.runtime import DEFAULT_VERSION, Runtime
from proxy.exec.sequence import Sequences
from proxy.session.session import ClientProtocol, kill_session
from proxy.plan.sqltok import set_server_version
from proxy.exec.xa import XaCoordinator
from proxy.session.views import ViewService
from proxy.workers import KillChannel, WorkerInfo

log = structlog.get_logger("pydble.server")


def assemble(config: Config) -> Runtime:
    """An instance's parts, built in the order they need each other, owned by one Runtime."""
    version = config.server.version or DEFAULT_VERSION
    set_server_version(version)
    registry = Registry(config)
    rt = Runtime(config=config, registry=registry, backends=Backends(config), meta_backend=MetaLink(),
                 history=DdlHistory(usable_data_dir(config.server)), tls=tls_context(config.server), version=version)
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

    def __init__(self, config: Config, worker: WorkerInfo | None = None) -> None:
        self.runtime = assemble(config)
        self.runtime.worker = worker   # one of `serve --workers N`: its connection ids, KILL across workers
        self.deadlocks = DeadlockDetector(self.runtime.sessions, self.runtime.backends, config)
        self._servers: list[asyncio.base_events.Server] = []
        self.log = log.bind(instance=config.server.instance)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Learn the backend version, load every table's metadata, then open both ports."""
        _big_buffers_return_to_the_os()
        rt = self.runtime
        nofile = _open_files_to_the_hard_limit()
        if nofile < rt.config.server.max_connections + 1024:
            self.log.warning("the open files limit is below max_connections: clients past it are refused by the OS",
                             nofile=nofile, max_connections=rt.config.server.max_connections)
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
        if rt.worker is not None:
            rt.kill_channel = KillChannel(rt.worker, lambda cid, user, admin, query: kill_session(
                rt, cid, user, admin, query))
            await rt.kill_channel.start()
        loop = asyncio.get_running_loop()
        srv = rt.config.server
        # a backlog as deep as max_connections (the kernel caps it at net.core.somaxconn): clients connecting
        # all at once (a pool's start, a restart) wait in the queue instead of retrying their SYN a second later
        backlog = min(max(1024, srv.max_connections), 65535)
        self._servers.append(await loop.create_server(lambda: ClientProtocol(rt), srv.bind, srv.port,
                                                      backlog=backlog, reuse_address=True, reuse_port=srv.reuse_port))
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
        if rt.kill_channel is not None:
            rt.kill_channel.close()
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


def _open_files_to_the_hard_limit() -> int:
    """Every client and backend connection is a descriptor: the soft RLIMIT_NOFILE (often 1024) would
    refuse clients long before max_connections, so it is raised to the hard limit; the limit now."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    want = 1 << 20 if hard == resource.RLIM_INFINITY else hard   # Linux refuses more than nr_open anyway
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass   # capped lower (nr_open): keep what we have
    return soft


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
