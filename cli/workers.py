"""`pydble serve --workers N`: a parent that forks N proxy workers from one config and keeps them running.

Worker i (from 0) is the config's instance with, per worker: instance name `<instance>-w<i>`, manager
port `manager_port + i`, metrics port `metrics_port + i` (when set), peer port `peer_port + i` (when a
fixed one is set), data_dir `<data_dir>-w<i>`, and `reuse_port` on, so all share the client port and
the kernel spreads new connections over them. N > 1 needs a [cluster] section: the workers are then
cluster instances, so DDL, metadata, views, sequences and XA decisions are shared through ZooKeeper
as between any instances (without it each process would keep its own and drift apart).

The parent only supervises: a worker that dies is restarted after a bounded backoff; SIGTERM or SIGINT
stops every worker (SIGTERM, then SIGKILL after STOP_WAIT_S); a worker exits when the parent dies
(PR_SET_PDEATHSIG), so none is left behind. The parent runs no event loop and no thread: it waits for
signals with sigtimedwait, so a child's death wakes it at once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import replace
from typing import Callable

import structlog

from meta.config import Config, ConfigError
from proxy.workers import MAX_WORKERS, WorkerInfo

log = structlog.get_logger("pydble.workers")

STOP_WAIT_S = 20.0          # after SIGTERM, a worker gets this long to close its sessions
RESTART_MIN_S = 0.5         # backoff after a worker's death: doubles per quick death, up to RESTART_MAX_S
RESTART_MAX_S = 30.0
STEADY_S = 60.0             # a worker that ran this long starts the backoff over
PR_SET_PDEATHSIG = 1

RunWorker = Callable[[Config, WorkerInfo], int]


def worker_config(config: Config, index: int) -> Config:
    """Worker `index`'s config: the rule in the module docstring."""
    srv = config.server
    server = replace(srv, instance=f"{srv.instance}-w{index}", manager_port=srv.manager_port + index,
                     metrics_port=srv.metrics_port + index if srv.metrics_port else 0,
                     data_dir=f"{srv.data_dir}-w{index}" if srv.data_dir else "", reuse_port=True)
    cluster = config.cluster
    if cluster is not None and cluster.peer_port > 0:
        cluster = replace(cluster, peer_port=cluster.peer_port + index)
    return replace(config, server=server, cluster=cluster)


def check_workers(config: Config, count: int) -> None:
    """Refuse a worker count the config cannot serve (ConfigError: the operator's one-line message)."""
    if not 1 <= count <= MAX_WORKERS:
        raise ConfigError("--workers", f"must be 1 to {MAX_WORKERS}")
    if count > 1 and config.cluster is None:
        raise ConfigError("--workers", "more than one worker needs a [cluster] section: the workers are cluster "
                          "instances, which share DDL, metadata, views, sequences and XA decisions")
    taken: dict[int, str] = {config.server.port: "server.port"}
    for i in range(count):
        w = worker_config(config, i)
        ports = {"manager_port": w.server.manager_port, "metrics_port": w.server.metrics_port,
                 "peer_port": w.cluster.peer_port if w.cluster is not None else 0}
        for key, port in ports.items():
            if port <= 0:
                continue
            if port > 65535 or port in taken:
                raise ConfigError(f"server.{key}" if key != "peer_port" else "cluster.peer_port",
                                  f"worker {i} would use port {port}"
                                  + (f", already {taken[port]}" if port in taken else ", out of range"))
            taken[port] = f"{key} of worker {i}" if i or key != "manager_port" else key


def _die_with_parent(parent: int) -> None:
    """Ask the kernel for SIGTERM when the parent dies; exit now if it already has."""
    name = ctypes.util.find_library("c")
    if name:
        try:
            ctypes.CDLL(name, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):
            pass   # no prctl (not Linux): the parent's stop still reaches every worker
    if os.getppid() != parent:
        os._exit(1)


class Supervisor:
    """The parent: forks the workers, restarts the dead ones, stops them all on SIGTERM/SIGINT."""

    def __init__(self, config: Config, count: int, run_worker: RunWorker) -> None:
        self.config = config
        self.count = count
        self.run_worker = run_worker
        self.pids: dict[int, int] = {}          # pid -> worker index
        self.started: dict[int, float] = {}     # worker index -> when it was forked
        self.quick_deaths: dict[int, int] = {}  # worker index -> deaths in a row before STEADY_S
        self.due: dict[int, float] = {}         # worker index -> when to restart it
        self.channel_dir = ""
        self._signals = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
        self._mask: set[signal.Signals] = set()

    def run(self) -> int:
        """Until SIGTERM/SIGINT: keep `count` workers alive. Returns the exit code."""
        self.channel_dir = tempfile.mkdtemp(prefix="pydble-workers-")   # 0700: this user's only
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, self._signals)
        try:
            log.info("starting workers", workers=self.count, instance=self.config.server.instance,
                     port=self.config.server.port)
            for i in range(self.count):
                self._fork(i)
            while True:
                now = time.monotonic()
                for i in [i for i, at in self.due.items() if at <= now]:
                    del self.due[i]
                    self._fork(i)
                wait = min(self.due.values()) - now if self.due else 3600.0
                got = signal.sigtimedwait(self._signals, max(wait, 0.01))
                if got is not None and got.si_signo in (signal.SIGTERM, signal.SIGINT):
                    log.info("stopping workers", signal=signal.Signals(got.si_signo).name)
                    break
                self._reap()
            self._stop_all()
            return 0
        finally:
            for pid in list(self.pids):   # an exception above: never leave a worker behind
                _kill(pid, signal.SIGKILL)
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            shutil.rmtree(self.channel_dir, ignore_errors=True)

    def _fork(self, index: int) -> None:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
                _die_with_parent(parent)
                code = self.run_worker(worker_config(self.config, index),
                                       WorkerInfo(index, self.count, self.channel_dir))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException as e:   # noqa: BLE001 - a worker must never return into the parent's loop
                log.exception("worker failed", worker=index, error=str(e))
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self.pids[pid] = index
        self.started[index] = time.monotonic()
        log.info("worker started", worker=index, pid=pid)

    def _reap(self) -> None:
        """Collect every dead worker and schedule its restart."""
        for pid, status in _dead_children():
            index = self.pids.pop(pid, None)
            if index is None:
                continue
            ran = time.monotonic() - self.started.get(index, 0.0)
            deaths = 0 if ran >= STEADY_S else self.quick_deaths.get(index, 0) + 1
            self.quick_deaths[index] = deaths
            delay = min(RESTART_MAX_S, RESTART_MIN_S * 2 ** max(deaths - 1, 0))
            self.due[index] = time.monotonic() + delay
            log.warning("worker died; restarting it", worker=index, pid=pid, how=_how(status),
                        ran_s=round(ran, 1), restart_in_s=delay)

    def _stop_all(self) -> None:
        """SIGTERM every worker, wait up to STOP_WAIT_S, then SIGKILL the rest."""
        for pid in self.pids:
            _kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        while self.pids:
            for pid, _status in _dead_children():
                self.pids.pop(pid, None)
            left = deadline - time.monotonic()
            if not self.pids or left <= 0:
                break
            got = signal.sigtimedwait(self._signals, left)
            if got is not None and got.si_signo in (signal.SIGTERM, signal.SIGINT):
                break   # asked again: do not wait any longer
        for pid in list(self.pids):
            log.warning("worker did not stop in time; killing it", worker=self.pids[pid], pid=pid)
            _kill(pid, signal.SIGKILL)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            del self.pids[pid]
        log.info("workers stopped")


def _dead_children() -> list[tuple[int, int]]:
    out = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return out
        if pid == 0:
            return out
        out.append((pid, status))


def _kill(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _how(status: int) -> str:
    """A wait status as the log says it: `exit code 1`, `killed by SIGKILL`."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"
