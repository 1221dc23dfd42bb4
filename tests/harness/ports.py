"""Free 127.0.0.1 ports for test servers, reserved across concurrent test sessions.

A port is picked at random outside the kernel's ephemeral range (so an outgoing connection
cannot grab it before the server binds), checked to be bindable, and reserved with an
advisory file lock that this process holds until it exits or releases the port. Two pytest
sessions on the same machine therefore never hand out the same port.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
import tempfile
import threading
import time
from pathlib import Path

HOST = "127.0.0.1"
PORT_RANGE = (20000, 32000)

_rng = random.SystemRandom()  # immune to tests that seed the global random module
_mutex = threading.Lock()
_held: dict[int, int] = {}  # port -> fd of its lock file


def _lock_dir() -> Path:
    """Directory of per-port lock files shared by every session on this machine."""
    d = Path(tempfile.gettempdir()) / "pydble-ports"
    d.mkdir(mode=0o777, exist_ok=True)
    return d


def port_is_bindable(port: int, host: str = HOST) -> bool:
    """True when nothing listens on host:port (a server using SO_REUSEADDR could bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST) -> int:
    """Reserve and return a port nobody on this machine listens on or has reserved."""
    d = _lock_dir()
    with _mutex:
        for _ in range(1000):
            port = _rng.randrange(*PORT_RANGE)
            if port in _held:
                continue
            fd = os.open(d / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    continue
                raise
            if not port_is_bindable(port, host):
                os.close(fd)
                continue
            _held[port] = fd
            return port
    raise RuntimeError(f"no free port found in {PORT_RANGE} after 1000 tries")


def release_port(port: int) -> None:
    """Give a reserved port back (its lock is dropped; the port may be handed out again)."""
    with _mutex:
        fd = _held.pop(port, None)
    if fd is not None:
        os.close(fd)


def port_accepts(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    """True when a TCP connection to host:port succeeds right now."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port_free(port: int, host: str = HOST, timeout: float = 10.0) -> bool:
    """Wait (bounded) until nothing listens on host:port; return whether it became free."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_is_bindable(port, host):
            return True
        time.sleep(0.05)
    return port_is_bindable(port, host)


def tcp_connections(pid: int) -> list[tuple[int, int, bool]]:
    """A process's IPv4 TCP sockets as (local port, remote port, established), read from /proc."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            cols = line.split()
            if cols[9] in inodes:
                out.append((int(cols[1].split(":")[1], 16), int(cols[2].split(":")[1], 16), cols[3] == "01"))
    return out


def recv_packet(s: socket.socket) -> bytes:
    """One raw MySQL packet's payload from a plain socket (b"" or what came if the peer closed first):
    for tests and benchmarks that talk to the proxy below any client library."""
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return b""
        head += chunk
    n = head[0] | head[1] << 8 | head[2] << 16
    body = b""
    while len(body) < n:
        chunk = s.recv(n - len(body))
        if not chunk:
            break
        body += chunk
    return body
