"""Common life cycle of a child server process: own process group, bounded stop, no leftovers.

Every server the harness starts lives in a private work directory under the temp dir named
``pydble-h-*``. The directory records the pid of the test process that owns it and of the child
it runs; a later session sweeps directories whose owner died (e.g. a CI job killed hard), killing
the child only if its command line still names that directory.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

log = logging.getLogger("harness")

WORKDIR_PREFIX = "pydble-h-"
KEEP_ENV = "PYDBLE_KEEP_TEST_DIRS"  # set to 1 to keep work directories for post-mortems


class HarnessError(RuntimeError):
    """A test server failed to start or stop in time; the message carries its log tail."""


def tmp_base() -> Path:
    """Where work directories go: $PYDBLE_TEST_TMPDIR or the system temp dir."""
    return Path(os.environ.get("PYDBLE_TEST_TMPDIR") or tempfile.gettempdir())


def tail(path: Path | str, lines: int = 40) -> str:
    """The last lines of a log file, or a note that it does not exist."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError:
        return f"(no log at {p})"
    text = data[-65536:].decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    """The command line of pid, or '' (it reads empty for a moment while a process execs)."""
    for _ in range(20):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return ""
        if raw:
            return raw.replace(b"\0", b" ").decode("utf-8", "replace")
        time.sleep(0.05)
    return ""


_swept = False
_sweep_lock = threading.Lock()


def sweep_orphans() -> None:
    """Kill children and remove work dirs left by test sessions that died without cleaning up."""
    global _swept
    with _sweep_lock:
        if _swept:
            return
        _swept = True
    base = tmp_base()
    try:
        candidates = list(base.glob(WORKDIR_PREFIX + "*"))
    except OSError:
        return
    for d in candidates:
        try:
            owner = int((d / "owner.pid").read_text().strip())
        except (OSError, ValueError):
            continue
        if owner == os.getpid() or _pid_alive(owner):
            continue
        try:
            child = int((d / "child.pid").read_text().strip())
        except (OSError, ValueError):
            child = 0
        if child and _pid_alive(child) and str(d) in _cmdline(child):
            log.warning("killing orphaned test server pid %s from %s", child, d)
            try:
                os.killpg(child, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(d, ignore_errors=True)


def make_workdir(name: str) -> Path:
    """A fresh private work directory owned by this test process."""
    sweep_orphans()
    base = tmp_base()
    base.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{name}-", dir=base))
    (d / "owner.pid").write_text(f"{os.getpid()}\n")
    return d


_registry: list["ManagedProcess"] = []
_registry_lock = threading.Lock()


def _cleanup_all() -> None:
    """atexit hook: stop every server still registered, newest first (proxies before backends)."""
    with _registry_lock:
        procs = list(reversed(_registry))
    for p in procs:
        try:
            p.cleanup()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            log.exception("cleanup of %s failed", p.name)


atexit.register(_cleanup_all)


class ManagedProcess:
    """One child server in its own session/process group, with bounded stop, kill and pause."""

    stop_signal: int = signal.SIGTERM
    stop_timeout: float = 20.0

    def __init__(self, name: str) -> None:
        self.name = name
        self.workdir = make_workdir(name)
        self.log_path = self.workdir / f"{name}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._closed = False
        with _registry_lock:
            _registry.append(self)

    # -- spawning -------------------------------------------------------------------------

    def _spawn(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
               cwd: Path | str | None = None) -> None:
        """Start argv in a new session with stdout/stderr appended to the log file."""
        if self._closed:
            raise HarnessError(f"{self.name}: already cleaned up")
        if self.running:
            raise HarnessError(f"{self.name}: already running (pid {self.pid})")
        argv = list(argv)
        # If the test process dies abruptly the child gets SIGKILL. Only from the main thread:
        # the kernel ties the parent-death signal to the thread that forked.
        if threading.current_thread() is threading.main_thread() and shutil.which("setpriv"):
            argv = [shutil.which("setpriv") or "setpriv", "--pdeathsig", "KILL", "--", *argv]
        with open(self.log_path, "ab") as out:
            out.write(f"\n=== {time.strftime('%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
            out.flush()
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
                close_fds=True)
        self._paused = False
        (self.workdir / "child.pid").write_text(f"{self._proc.pid}\n")
        log.debug("%s started, pid %s", self.name, self._proc.pid)

    # -- state ----------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """Pid of the running child (also its process group id), or None."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """True while the child has not exited (a paused child is still running)."""
        p = self._proc
        if p is None:
            return False
        if p.returncode is not None:
            return False
        try:
            info = os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return p.poll() is None
        return info is None

    @property
    def paused(self) -> bool:
        """True between pause() and resume()."""
        return self._paused and self.running

    @property
    def returncode(self) -> int | None:
        """Exit status of the last child once it has exited and been reaped."""
        return self._proc.returncode if self._proc is not None else None

    def _signal_group(self, sig: int) -> None:
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _wait_exit(self, timeout: float) -> bool:
        """Wait (bounded) for the child to exit without reaping it; True if it exited."""
        deadline = time.monotonic() + timeout
        while self.running:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def _reap(self) -> None:
        """Sweep the rest of the process group, then reap the (already exited) leader."""
        p = self._proc
        if p is None:
            return
        if p.returncode is None:
            self._signal_group(signal.SIGKILL)  # leftovers of the group; leader is a zombie
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.error("%s: pid %s did not die after SIGKILL", self.name, p.pid)
        self._paused = False
        try:
            (self.workdir / "child.pid").unlink()
        except OSError:
            pass

    # -- control --------------------------------------------------------------------------

    def stop(self, timeout: float | None = None) -> None:
        """Clean shutdown: the stop signal, a bounded wait, then SIGKILL. No-op if not running."""
        if self._proc is None:
            return
        if self.running:
            if self._paused:
                self._signal_group(signal.SIGCONT)
            self._signal_group(self.stop_signal)
            if not self._wait_exit(self.stop_timeout if timeout is None else timeout):
                log.warning("%s: no exit after signal %s, killing", self.name, self.stop_signal)
                self._signal_group(signal.SIGKILL)
                self._wait_exit(10)
        self._reap()

    def kill(self) -> None:
        """SIGKILL the whole process group and reap it (a crash, as far as the server knows)."""
        if self._proc is None:
            return
        if self.running:
            self._signal_group(signal.SIGKILL)
            self._wait_exit(10)
        self._reap()

    def pause(self) -> None:
        """SIGSTOP the process group and wait (bounded) until the leader is really stopped."""
        if not self.running:
            raise HarnessError(f"{self.name}: cannot pause, not running")
        self._signal_group(signal.SIGSTOP)
        self._paused = True
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self._proc_state() not in ("T", "t", ""):
            time.sleep(0.01)

    def resume(self) -> None:
        """SIGCONT the process group."""
        self._signal_group(signal.SIGCONT)
        self._paused = False

    def _proc_state(self) -> str:
        """Single-letter state of the leader from /proc (R, S, T, Z...), or '' if gone."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return ""
        return stat.rsplit(")", 1)[1].split()[0]

    def cleanup(self) -> None:
        """Stop the child and remove the work directory (kept if $PYDBLE_KEEP_TEST_DIRS=1)."""
        if self._closed:
            return
        try:
            self.stop()
        finally:
            self._closed = True
            with _registry_lock:
                if self in _registry:
                    _registry.remove(self)
            if os.environ.get(KEEP_ENV) != "1":
                shutil.rmtree(self.workdir, ignore_errors=True)
            self._on_cleanup()

    def _on_cleanup(self) -> None:
        """Hook for subclasses (e.g. release reserved ports)."""

    def __enter__(self) -> "ManagedProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # -- helpers --------------------------------------------------------------------------

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of this server's log."""
        return tail(self.log_path, lines)

    def _tails(self, logs: Sequence[Path]) -> str:
        """Tails of the given logs (default: the stdout/stderr log), labelled by file name."""
        paths = list(logs) or [self.log_path]
        parts = []
        for p in paths:
            if p.exists() and p.stat().st_size:
                parts.append(f"--- {p.name} ---\n{tail(p)}")
        return "\n".join(parts) or "(logs empty)"

    def _wait_ready(self, probe: Callable[[], bool], timeout: float, what: str,
                    logs: Sequence[Path] = ()) -> None:
        """Poll probe() until true; raise with the log tails if the child dies or time runs out."""
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            if not self.running:
                rc = self._proc.poll() if self._proc else None
                self._reap()
                raise HarnessError(f"{self.name} exited (status {rc}) before {what}; log tail:\n"
                                   + self._tails(logs))
            try:
                if probe():
                    return
            except Exception as e:  # noqa: BLE001 - any probe failure means "not yet"
                last = e
            else:
                last = None
            if time.monotonic() >= deadline:
                self.kill()
                why = f" (last probe error: {last!r})" if last else ""
                raise HarnessError(f"{self.name} not {what} within {timeout:.0f}s{why}; "
                                   "log tail:\n" + self._tails(logs))
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.running else "stopped"
        return f"<{type(self).__name__} {self.name} {state} pid={self.pid}>"
