"""pydble's scratch views: the one definition of their names, used to make, hide, refuse and sweep them.

To describe a view it keeps (DESC, SHOW COLUMNS, COM_FIELD_LIST, information_schema.COLUMNS), pydble
makes a view of its statement for a moment on one shardingNode's database (proxy/session/views.py),
named `_pydble_desc_<unix seconds>_<16 hex>`. A connection lost between its CREATE and its DROP (a
killed connection, a restarted backend, a proxy killed with SIGKILL) leaves it there, so:

- every name beginning with the prefix is pydble's own: no listing shows it (information_schema, the
  metadata load and so SHOW TABLES and `check full @@metadata`), and a statement naming one is refused
  (1103, as MariaDB refuses a name it cannot hold);
- a use of a scratch view ends within USE_S of its name's time (its connection is closed at that
  deadline), so a scratch view older than STALE_S is a leftover, whichever instance made it: the next
  use of that node by any instance drops it (at most once every SWEEP_S per node and instance). The
  margin between the two bounds is for clocks of instances that disagree.

A name with the prefix but no time (made by pydble before the time was in the name) is hidden and
refused alike, and never dropped: its age cannot be told.
"""

from __future__ import annotations

import re
import secrets
import time

from meta.errors import ProxyError

PREFIX = "_pydble_desc_"
USE_S = 600.0       # a scratch view is used (created, read, dropped) within this many seconds of its name's time
STALE_S = 3600.0    # a scratch view whose name's time is older than this is a leftover: dropped on sight
SWEEP_S = 300.0     # a node is looked at for leftovers at most this often by one instance
LIKE = PREFIX + "%"   # SHOW [FULL] TABLES LIKE: `_` matches any character, so is_scratch judges what it lists
ER_WRONG_TABLE_NAME = 1103

_TIMED = re.compile(re.escape(PREFIX) + r"(\d{1,12})_[0-9a-f]{16}\Z")


def name(now: float | None = None) -> str:
    """A fresh scratch view's name, carrying the time it is made."""
    return f"{PREFIX}{int(time.time() if now is None else now)}_{secrets.token_hex(8)}"


def is_scratch(table: str) -> bool:
    """Is this table name pydble's own (made by any pydble, any version)?"""
    return table[:len(PREFIX)].lower() == PREFIX


def stale(table: str, now: float | None = None) -> bool:
    """Is this a scratch view no instance can still be using (its name's time older than STALE_S)?"""
    m = _TIMED.match(table)
    return m is not None and (time.time() if now is None else now) - int(m.group(1)) > STALE_S


def refuse(table: str) -> None:
    """1103 for a statement naming a scratch name: it is pydble's, never a client's table or view."""
    if is_scratch(table):
        raise ProxyError(f"Incorrect table name '{table}': names beginning with {PREFIX} are pydble's own",
                         ER_WRONG_TABLE_NAME, "42000")


__all__ = ["LIKE", "PREFIX", "STALE_S", "SWEEP_S", "USE_S", "is_scratch", "name", "refuse", "stale"]
