"""kazoo's connection thread selects through poll_select: the same answers as select() for sockets, at
any fd number, and a closed peer or socket reads as ready (kazoo then finds the error itself)."""

from __future__ import annotations

import os
import resource
import socket
import time

import pytest

from zk.aio import poll_select


def test_readable_and_writable_like_select() -> None:
    a, b = socket.socketpair()
    try:
        assert poll_select([a], [], [], 0) == ([], [], [])
        assert poll_select([a], [b], [], 0) == ([], [b], [])
        b.send(b"x")
        assert poll_select([a, b], [], [], 0.5) == ([a], [], [])
        assert poll_select([a], [a], [], 0) == ([a], [a], [])   # one fd asked both ways
    finally:
        a.close()
        b.close()


def test_a_closed_peer_reads_as_ready_and_a_timeout_comes_back_empty() -> None:
    a, b = socket.socketpair()
    try:
        started = time.monotonic()
        assert poll_select([a], [], [], 0.05) == ([], [], [])
        assert time.monotonic() - started >= 0.04
        b.close()
        assert poll_select([a], [], [], 1) == ([a], [], [])
        assert a.recv(1) == b""
    finally:
        a.close()


def test_an_fd_number_over_select_limit_works() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= 1500:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    a, b = socket.socketpair()
    high = os.dup2(a.fileno(), 1500)   # select() cannot watch fds >= 1024
    try:
        b.send(b"x")
        assert poll_select([high], [], [], 0.5) == ([high], [], [])
    finally:
        os.close(high)
        a.close()
        b.close()


def test_a_closed_socket_is_refused_like_kazoos_select() -> None:
    a, b = socket.socketpair()
    a.close()
    b.close()
    with pytest.raises(ValueError):
        poll_select([a], [], [], 0)
