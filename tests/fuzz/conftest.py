"""Fuzz-test fixtures: the hypothesis profiles (via fuzzlib), a private proxy, and the case count report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

FUZZ_DIR = Path(__file__).resolve().parent
if str(FUZZ_DIR) not in sys.path:
    sys.path.insert(0, str(FUZZ_DIR))

import fuzzlib  # noqa: E402  (registers the 'ci' and 'long' profiles before any test asks for one)


def pytest_report_header(config: pytest.Config) -> str:
    """Say which fuzz profile is active."""
    return f"pydble fuzz profile: {fuzzlib.profile_name()}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print how many cases each fuzz test ran, and the total."""
    if not fuzzlib.CASES:
        return
    tr = terminalreporter
    tr.section(f"fuzz cases ({fuzzlib.profile_name()} profile)")
    for name, n in sorted(fuzzlib.CASES.items()):
        tr.write_line(f"{n:>9}  {name}")
    tr.write_line(f"{sum(fuzzlib.CASES.values()):>9}  total")


@pytest.fixture(scope="module")
def fuzz_proxy(backends: list[Any]) -> Iterator[Any]:
    """A private proxy over the session backends with fuzz-only tables, so random writes touch nobody else's."""
    from harness import ProxyProcess, free_port, proxy_config

    cfg = proxy_config(backends, free_port(), free_port(), instance="pydble-fuzz")
    tables = cfg["schemas"]["schema1"]["tables"]
    tables["fz_h4"] = {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "hash-four",
                       "column": "id"}
    tables["fz_h2"] = {"type": "sharding", "nodes": ["dn1", "dn2"], "function": "hash-two", "column": "id"}
    tables["fz_glob"] = {"type": "global", "nodes": ["dn1", "dn2", "dn3", "dn4"]}
    cfg["schemas"]["schema2"]["tables"]["fz_sing"] = {"type": "single", "nodes": ["dn1"]}
    p = ProxyProcess(cfg, name="proxy-fuzz", release_ports=True)
    try:
        p.start()
        yield p
    finally:
        p.cleanup()
