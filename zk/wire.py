"""The peer channel's framing, sans-I/O: a 4-byte big-endian length, then one JSON object.

Instances tell each other a DDL step over this channel (zk/peers.py) instead of waiting for
ZooKeeper watches; ZooKeeper stays the record of truth. Bytes in, messages out, and back.
"""

from __future__ import annotations

import json
import struct

MAX_FRAME = 16 * 1024 * 1024   # a step carries CREATE TABLE texts; anything bigger is an attack or a bug
_LEN = struct.Struct(">I")

HELLO, STEP, REPLY = "hello", "step", "reply"


class WireError(ValueError):
    """The peer sent something that is not a frame of this protocol: drop the connection."""


def encode(msg: dict) -> bytes:
    """One message as a frame."""
    body = json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(body) > MAX_FRAME:
        raise WireError(f"message of {len(body)} bytes is over the {MAX_FRAME}-byte frame limit")
    return _LEN.pack(len(body)) + body


class FrameDecoder:
    """Turns a byte stream into messages; raises WireError on anything malformed or oversized."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[dict]:
        """Add received bytes; return every message now complete."""
        self._buf += data
        out: list[dict] = []
        buf = self._buf
        pos = 0
        while len(buf) - pos >= 4:
            (size,) = _LEN.unpack_from(buf, pos)
            if size > self.max_frame:
                raise WireError(f"frame of {size} bytes is over the {self.max_frame}-byte limit")
            if len(buf) - pos - 4 < size:
                break
            body = bytes(buf[pos + 4:pos + 4 + size])
            pos += 4 + size
            try:
                msg = json.loads(body.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise WireError(f"frame is not JSON: {e}") from None
            if not isinstance(msg, dict) or not isinstance(msg.get("t"), str):
                raise WireError("frame is not a message object with a type")
            out.append(msg)
        del buf[:pos]
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held."""
        return len(self._buf)


def hello(cluster_id: str, instance: str, token: str) -> dict:
    """The first message on a connection: who is calling, with the receiver's token."""
    return {"t": HELLO, "cluster": cluster_id, "from": instance, "token": token}


def step(msg_id: int, path: str, czxid: int, record: str, texts: dict | None, final: bool = False) -> dict:
    """A DDL step for the receiver to apply: the record's JSON as written to ZooKeeper, and on SUCCESS or
    FAILED the CREATE texts the originator read back from the nodes (node -> table -> text|None).
    `final` (sent only when true): the originator removes the record itself, so no ZooKeeper ack is wanted."""
    msg = {"t": STEP, "id": msg_id, "path": path, "czxid": czxid, "record": record, "texts": texts}
    if final:
        msg["final"] = True
    return msg


def reply(msg_id: int, ok: bool | None, message: str = "", meta_version: int = 0) -> dict:
    """The answer to a step: ok true/false as in a ZooKeeper ack; None: not handled, use ZooKeeper."""
    return {"t": REPLY, "id": msg_id, "ok": ok, "message": message, "meta_version": meta_version}


__all__ = ["FrameDecoder", "WireError", "encode", "hello", "step", "reply", "MAX_FRAME", "HELLO", "STEP",
           "REPLY"]
