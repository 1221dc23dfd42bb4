"""One worker of `pydble serve --workers N`: its share of connection ids, and KILL across workers.

The workers of one parent share the client port (SO_REUSEPORT): a client lands on any of them, and a
`KILL <id>` may name a session another worker owns. Connection ids carry the owning worker's index
in their high bits (worker 0's ids are the ids a single process hands out), so any worker knows the
owner of an id; it forwards the KILL to that worker over a Unix socket in a folder only the
parent's user can enter (one line of JSON each way, one request per connection, bounded by
FORWARD_TIMEOUT_S). Everything else (processlists, sessions) stays per worker.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Awaitable, Callable

import structlog

from meta.errors import ProxyError

log = structlog.get_logger("pydble.workers")

ID_SHIFT = 24                      # a worker's ids: (index << 24) | 1 .. 2**24 - 1, then they wrap
ID_MASK = (1 << ID_SHIFT) - 1
MAX_WORKERS = 1 << (32 - ID_SHIFT)   # connection ids are 4 bytes on the wire
FORWARD_TIMEOUT_S = 5.0            # connect + answer of a forwarded KILL
MAX_REQUEST = 4096                 # bytes of one request line

# (connection id, user, admin, query only) -> None, or raises ProxyError
KillHandler = Callable[[int, str, bool, bool], Awaitable[None]]


@dataclass(frozen=True)
class WorkerInfo:
    """Which worker this process is, of how many, and where the workers' KILL sockets live."""

    index: int
    count: int
    channel_dir: str

    def conn_id(self, n: int, live: Callable[[], set[int]]) -> int:
        """The n-th connection id of this worker (n from 1): the index in the high bits; past 2**24 - 1
        ids they wrap, skipping ids still in use (`live` is asked only then)."""
        low = (n - 1) % ID_MASK + 1
        cid = (self.index << ID_SHIFT) | low
        if n <= ID_MASK:
            return cid
        used = live()
        while cid in used:
            low = low % ID_MASK + 1
            cid = (self.index << ID_SHIFT) | low
        return cid

    @staticmethod
    def owner(cid: int) -> int:
        """The index of the worker that handed out a connection id."""
        return cid >> ID_SHIFT

    def socket_path(self, index: int) -> str:
        return os.path.join(self.channel_dir, f"w{index}.sock")


class KillChannel:
    """This worker's end: serves KILLs of its sessions sent by siblings, forwards KILLs of theirs."""

    def __init__(self, info: WorkerInfo, handler: KillHandler) -> None:
        self.info = info
        self.handler = handler
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Listen on this worker's socket (a predecessor's stale socket file is replaced)."""
        path = self.info.socket_path(self.info.index)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        self._server = await asyncio.start_unix_server(self._serve, path, limit=MAX_REQUEST)
        os.chmod(path, 0o600)

    def close(self) -> None:
        """Stop listening and remove the socket file (a stopped worker leaves nothing in the folder)."""
        if self._server is not None:
            self._server.close()
            self._server = None
            try:
                os.unlink(self.info.socket_path(self.info.index))
            except OSError:
                pass

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                line = await asyncio.wait_for(reader.readline(), FORWARD_TIMEOUT_S)
                req = json.loads(line)
                cid, user, admin, query = int(req["id"]), str(req["user"]), bool(req["admin"]), bool(req["query"])
            except (asyncio.TimeoutError, ValueError, KeyError, TypeError, asyncio.LimitOverrunError) as e:
                log.warning("bad KILL request from a sibling worker", error=str(e) or type(e).__name__)
                return
            try:
                await self.handler(cid, user, admin, query)
                answer: dict = {"code": 0}
            except ProxyError as e:
                answer = {"code": e.code, "sqlstate": e.sqlstate, "message": e.message}
            writer.write(json.dumps(answer).encode() + b"\n")
            await asyncio.wait_for(writer.drain(), FORWARD_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()

    async def forward(self, cid: int, user: str, admin: bool, query: bool) -> None:
        """KILL [QUERY] of another worker's session, run by that worker with the caller's rights."""
        owner = self.info.owner(cid)
        if owner >= self.info.count:
            raise ProxyError(f"Unknown thread id: {cid}", 1094, "HY000")
        writer: asyncio.StreamWriter | None = None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(self.info.socket_path(owner), limit=MAX_REQUEST), FORWARD_TIMEOUT_S)
            writer.write(json.dumps({"id": cid, "user": user, "admin": admin, "query": query}).encode() + b"\n")
            line = await asyncio.wait_for(reader.readline(), FORWARD_TIMEOUT_S)
            answer = json.loads(line)
        except (FileNotFoundError, ConnectionRefusedError):
            # that worker is down (restarting): none of its sessions exists any more
            raise ProxyError(f"Unknown thread id: {cid}", 1094, "HY000") from None
        except (OSError, asyncio.TimeoutError, ValueError) as e:
            raise ProxyError(f"KILL {cid}: worker {owner}, which holds that connection, did not answer "
                             f"({str(e) or type(e).__name__})", 1105, "HY000") from None
        finally:
            if writer is not None:
                writer.close()
        code = answer.get("code") if isinstance(answer, dict) else None
        if code:
            raise ProxyError(str(answer.get("message", "")), int(code), str(answer.get("sqlstate", "HY000")))
