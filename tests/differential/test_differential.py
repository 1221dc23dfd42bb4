"""Zero wrong answers: seeded random statements through pydble and on one plain MariaDB, compared.

Four seeds per run: three fixed ones and one derived from today's date (printed, so a failure can be
replayed with ``python -m tests.differential.run --seed N --queries 2500``). A 1235 refusal is
counted; any other difference fails the test with the statements that differed.
"""

from __future__ import annotations

import datetime
from typing import Any, Iterator

import pytest

from harness import ProxyProcess, free_port, proxy_config

from .engine import REF_DB, Differ, Stats, proxy_config_for

FIXED_SEEDS = (1, 2, 3)
PER_SEED = 2500


def date_seed(today: datetime.date | None = None) -> int:
    """The seed of the day: YYYYMMDD."""
    d = today or datetime.date.today()
    return d.year * 10000 + d.month * 100 + d.day


@pytest.fixture(scope="module")
def differ(backends: list[Any]) -> Iterator[Differ]:
    """A proxy with the differential schema over the session backends; the reference on backend 1."""
    backends[0].create_databases(REF_DB)
    p = ProxyProcess(proxy_config_for(proxy_config(backends, free_port(), free_port(),
                                                   instance="pydble-diff")),
                     name="proxy-diff", release_ports=True)
    try:
        p.start()
        d = Differ(p.port, backends[0].port, [b.port for b in backends])
        d.create()
        yield d
        d.close()
    finally:
        p.cleanup()


def test_every_answer_is_mariadbs_or_a_refusal(differ: Differ) -> None:
    stats = Stats()
    seeds = (*FIXED_SEEDS, date_seed())
    print(f"\ndifferential seeds {seeds}, {PER_SEED} statements each "
          f"(replay: python -m tests.differential.run --seed N --queries {PER_SEED})")
    for seed in seeds:
        differ.run(seed, PER_SEED, stats)
    print(stats.summary())
    assert stats.queries >= 10_000
    assert not stats.unknown, "\n".join(
        f"seed {w.seed} #{w.index}: {w.sql}\n    {w.why[:600]}" for w in stats.unknown[:20])
