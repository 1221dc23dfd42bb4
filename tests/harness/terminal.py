"""A program in a pseudo-terminal, driven as a person would: wait for text, type, wait again.

`expect` fails when the program ends (EOF on the terminal) before the text came, instead of returning
what it had read: a CLI that exits early is a failure, not a silent pass of the next step.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from typing import Mapping, Sequence


class Terminal:
    """argv run with a pty as its stdin, stdout and stderr."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        master, slave = pty.openpty()
        try:
            self.proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                                         start_new_session=True, env=dict(env) if env is not None else None)
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        self.fd = master
        self.out = b""

    def send(self, text: str | bytes) -> None:
        """Type text (a str is sent as UTF-8)."""
        os.write(self.fd, text.encode() if isinstance(text, str) else text)

    def expect(self, token: str | bytes, timeout: float = 15.0) -> bytes:
        """Read until token appears in the output; AssertionError (with the output) on timeout or EOF."""
        want = token.encode() if isinstance(token, str) else token
        deadline = time.monotonic() + timeout
        while want not in self.out:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {want!r} after {timeout:.0f} s; output: {self.out[-2000:]!r}")
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.2))
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:   # EIO: every writer closed the terminal
                chunk = b""
            if not chunk:
                try:
                    code: int | None = self.proc.wait(2)
                except subprocess.TimeoutExpired:
                    code = None
                raise AssertionError(f"no {want!r}: the program ended (EOF on its terminal, exit code {code}); "
                                     f"output: {self.out[-2000:]!r}")
            self.out += chunk
        return self.out

    def close(self, grace: float = 1.0) -> int | None:
        """Close the terminal and reap the program (terminated if it outlives grace, then killed)."""
        try:
            os.close(self.fd)
        except OSError:
            pass
        for stop in (None, self.proc.terminate, self.proc.kill):
            if stop is not None:
                stop()
            try:
                return self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                continue
        return self.proc.wait()

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
