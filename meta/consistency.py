"""Is a table the same on all its shardingNodes, and is memory the same as the backends?

Texts are compared after a light normalization (SHOW CREATE TABLE differs across shards in
AUTO_INCREMENT=N and, across versions, in `DEFAULT CHARSET=` vs `CHARSET=`); everything else
counts. A node that could not answer makes the answer "unknown", never "consistent" (DBLE #1642).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence


class Fetched(Protocol):
    """What consistency reads of a table's metadata (meta.model.TableMeta has it): no import back."""

    nodes: tuple[str, ...]
    node_sql: Mapping[str, str | None]
    structure: str | None
    unknown: Mapping[str, str]

_AUTO_INCREMENT = re.compile(r" AUTO_INCREMENT=\d+")
_DEFAULT_CHARSET = re.compile(r"\bDEFAULT CHARSET=")


class Consistency(enum.Enum):
    """The state of one table across its nodes."""

    CONSISTENT = "consistent"      # every node answered with the same structure
    INCONSISTENT = "inconsistent"  # structures differ, or the table is missing on some node
    UNKNOWN = "unknown"            # no difference seen, but some node could not be asked
    LOST = "lost"                  # every node answered and none has the table

    @property
    def flag(self) -> int:
        """The 0/1 of `check full @@metadata`'s consistent_in_sharding_nodes."""
        return 1 if self is Consistency.CONSISTENT else 0


def normalize_create(sql: str) -> str:
    """Drop ` AUTO_INCREMENT=N` and read `DEFAULT CHARSET=` as `CHARSET=` in the table options."""
    if "AUTO_INCREMENT=" not in sql and "DEFAULT CHARSET=" not in sql:
        return sql
    # The table options follow the line that closes the definitions ("\n) ENGINE=..."); string
    # literals in SHOW CREATE output have their newlines escaped, so the first "\n)" is that line.
    start = sql.find("\n)")
    if start < 0:
        return _DEFAULT_CHARSET.sub("CHARSET=", _AUTO_INCREMENT.sub("", sql))
    end = sql.find("\n", start + 2)
    if end < 0:
        end = len(sql)
    options = _DEFAULT_CHARSET.sub("CHARSET=", _AUTO_INCREMENT.sub("", sql[start:end]))
    return sql[:start] + options + sql[end:]


@dataclass(frozen=True, slots=True)
class Variant:
    """One structure of a table and the nodes that hold it."""

    sql: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of comparing a table across its nodes."""

    state: Consistency
    structure: str | None                 # the text memory keeps: the variant most nodes hold
    variants: tuple[Variant, ...] = ()    # most nodes first
    missing: tuple[str, ...] = ()         # nodes that answered without the table
    unknown: tuple[str, ...] = ()         # nodes that could not answer

    def describe(self) -> str:
        """One line for logs and `check full @@metadata`: which nodes hold what."""
        parts = [f"{{{','.join(v.nodes)}}}: variant {i + 1}" for i, v in enumerate(self.variants)]
        if self.missing:
            parts.append(f"{{{','.join(self.missing)}}}: missing")
        if self.unknown:
            parts.append(f"{{{','.join(self.unknown)}}}: unknown")
        return f"{self.state.value}; " + "; ".join(parts)


def judge(nodes: Sequence[str], node_sql: Mapping[str, str | None],
          unknown: Mapping[str, str] | Sequence[str] = ()) -> Verdict:
    """Compare the SHOW CREATE texts a table has on its nodes (None: answered, not there)."""
    known = [n for n in nodes if n not in unknown] if unknown else nodes
    unknown_nodes = tuple(n for n in nodes if n in unknown) if unknown else ()
    if known:
        first = node_sql.get(known[0])
        if first is not None and all((t := node_sql.get(n)) is first or t == first for n in known):
            state = Consistency.UNKNOWN if unknown_nodes else Consistency.CONSISTENT
            return Verdict(state, first, (Variant(first, tuple(known)),), (), unknown_nodes)
    groups: dict[str, list[str]] = {}
    texts: dict[str, str] = {}
    missing: list[str] = []
    for n in known:
        sql = node_sql.get(n)
        if sql is None:
            missing.append(n)
            continue
        key = normalize_create(sql)
        groups.setdefault(key, []).append(n)
        texts.setdefault(key, sql)
    variants = sorted((Variant(texts[k], tuple(ns)) for k, ns in groups.items()),
                      key=lambda v: -len(v.nodes))  # stable: ties keep node order
    if len(variants) > 1 or (variants and missing):
        state = Consistency.INCONSISTENT
    elif variants:
        state = Consistency.UNKNOWN if unknown_nodes else Consistency.CONSISTENT
    else:
        state = Consistency.UNKNOWN if unknown_nodes else Consistency.LOST
    return Verdict(state, variants[0].sql if variants else None, tuple(variants),
                   tuple(missing), unknown_nodes)


def differing_nodes(v: Verdict) -> str:
    """`check full @@metadata`'s differing_sharding_nodes: the nodes not holding the structure most
    nodes hold, e.g. "dn2" or "dn3(missing),dn4(unknown)"; empty when every node agrees."""
    parts = [n for x in v.variants[1:] for n in x.nodes]
    parts += [f"{n}(missing)" for n in v.missing] if v.variants else []
    parts += [f"{n}(unknown)" for n in v.unknown]
    return ",".join(parts)


def consistent_in_memory(memory: Fetched | None, fresh: Fetched) -> bool | None:
    """Does memory match a fresh fetch on every node? None when some node could not answer."""
    if memory is None or memory.structure is None:
        return False
    want = normalize_create(memory.structure)
    unsure = False
    for n in fresh.nodes:
        if n in fresh.unknown:
            unsure = True
            continue
        sql = fresh.node_sql.get(n)
        if sql is None:
            return False
        if sql is not memory.structure and normalize_create(sql) != want:
            return False
    return None if unsure else True
