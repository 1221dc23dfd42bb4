"""Views pydble knows of: their records, the in-memory catalog every query consults, and the local file
that keeps them across restarts in single-instance mode (in a cluster ZooKeeper keeps them, zk/views.py).

A view is either *pushed down* (every table it reads lives on one shardingNode: the view is created
there and `node` names it; pydble keeps only where it is and its text for SHOW CREATE VIEW) or *kept by
pydble* (`node` is None: its SELECT is expanded into every query that reads it)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

import structlog

log = structlog.get_logger("pydble.meta.views")

VIEWS_FILE = "views.json"


class BadView(ValueError):
    """A stored view record that cannot be read (a damaged file or znode)."""


@dataclass(frozen=True)
class ViewDef:
    """One view: what SHOW CREATE VIEW prints, what a query expands it to, where it lives."""

    schema: str
    name: str                       # lower-cased, as table names are matched
    create: str                     # CREATE VIEW `v` [(cols)] AS select (SHOW CREATE VIEW's text)
    select: str                     # kept: the SELECT a query reads it as (tables schema-qualified)
    columns: tuple[str, ...] = ()   # the view's column names, in order
    node: str | None = None         # pushed down: the shardingNode holding it; None: kept by pydble
    tables: tuple[tuple[str, str], ...] = ()   # the base tables it reads (grants are checked on them)
    created_at: float = field(default_factory=time.time)
    definer: str = ""               # user@% of the client user who defined it (information_schema.VIEWS)

    @property
    def key(self) -> tuple[str, str]:
        return (self.schema, self.name)

    def encode(self) -> bytes:
        """JSON bytes (a znode's data, a line of the local file)."""
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_obj(cls, o: Any) -> ViewDef:
        """A record from its decoded JSON; BadView when it is not one."""
        try:
            return cls(schema=str(o["schema"]), name=str(o["name"]).lower(), create=str(o["create"]),
                       select=str(o["select"]), columns=tuple(str(c) for c in o.get("columns", ())),
                       node=None if o.get("node") is None else str(o["node"]),
                       tables=tuple((str(s), str(t)) for s, t in o.get("tables", ())),
                       created_at=float(o.get("created_at", 0.0)), definer=str(o.get("definer", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise BadView(f"not a view record: {e}") from None

    @classmethod
    def decode(cls, data: bytes) -> ViewDef:
        """A record from JSON bytes; BadView when damaged."""
        try:
            return cls.from_obj(json.loads(data))
        except ValueError as e:
            raise BadView(f"not a view record: {e}") from None


class ViewCatalog:
    """Every view of the instance, swapped whole on each change (readers never see half of one)."""

    def __init__(self) -> None:
        self._views: dict[tuple[str, str], ViewDef] = {}
        self.version = 0

    def get(self, schema: str, name: str) -> ViewDef | None:
        return self._views.get((schema, name.lower()))

    def of_schema(self, schema: str) -> list[ViewDef]:
        """The views of one schema, by name."""
        return sorted((v for (s, _), v in self._views.items() if s == schema), key=lambda v: v.name)

    def all(self) -> list[ViewDef]:
        return list(self._views.values())

    def names(self) -> set[str]:
        """Every view name, whatever its schema (a cheap first test of a statement's text)."""
        return {n for _, n in self._views}

    def replace_all(self, views: Iterable[ViewDef]) -> bool:
        """Install a new set of views; True when anything changed."""
        new = {v.key: v for v in views}
        if new == self._views:
            return False
        self._views = new
        self.version += 1
        return True

    def put(self, view: ViewDef) -> None:
        new = dict(self._views)
        new[view.key] = view
        self._views = new
        self.version += 1

    def remove(self, schema: str, name: str) -> None:
        new = dict(self._views)
        new.pop((schema, name.lower()), None)
        self._views = new
        self.version += 1


class ViewFile:
    """The views of a single instance in `<data_dir>/views.json`, rewritten atomically on each change."""

    def __init__(self, data_dir: str | None) -> None:
        self.path = Path(data_dir) / VIEWS_FILE if data_dir else None

    def load(self) -> list[ViewDef]:
        """The views saved by an earlier run (none without a data directory or a file)."""
        if self.path is None or not self.path.exists():
            return []
        try:
            doc = json.loads(self.path.read_text())
            return [ViewDef.from_obj(o) for o in doc.get("views", [])]
        except (ValueError, OSError, AttributeError) as e:
            raise BadView(f"{self.path}: cannot read the saved views ({e}); fix or remove the file") from None

    def save(self, views: Iterable[ViewDef]) -> None:
        """Write every view (temporary file, fsync, rename: a crash leaves the old or the new file)."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        body = json.dumps({"views": [asdict(v) for v in sorted(views, key=lambda v: v.key)]}, indent=1)
        with open(tmp, "w") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
