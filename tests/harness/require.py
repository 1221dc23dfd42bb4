"""Missing components: a test skips on a developer's machine without them, and FAILS under CI.

CI (env CI set, as `.ci/run` is started) must have every part the suite uses: java, the Connector/J jar,
sysbench, PySpark, mysqlclient, the mysql CLI, ... A skip there would hide a missing install step, so
every test that needs a component goes through `missing` (or `require_module` / `require_tool`).
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType
from typing import NoReturn

import pytest

_FALSE = ("", "0", "false", "no", "off")


def in_ci() -> bool:
    """Whether env CI is set to something other than a false value."""
    return os.environ.get("CI", "").strip().lower() not in _FALSE


def missing(what: str) -> NoReturn:
    """A component the test needs is missing: skip it, or fail it under CI. Works at module level too."""
    if in_ci():
        pytest.fail(f"missing under CI (CI={os.environ.get('CI')!r}): {what}", pytrace=False)
    pytest.skip(what, allow_module_level=True)


def require_module(name: str, what: str) -> ModuleType:
    """Import a module the test needs (pytest.importorskip that fails under CI)."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"{what} ({e})")


def require_tool(name: str, what: str | None = None) -> str:
    """The path of a program the test needs on PATH."""
    path = shutil.which(name)
    if path is None:
        missing(what or f"{name} is not installed")
    return path


def require_connector_j(*programs: str) -> str:
    """The MariaDB Connector/J jar, and the JVM programs given (java, javac) on PATH."""
    from jobs.spark import SparkUnavailable, find_jdbc_jar

    try:
        jar = find_jdbc_jar()
    except SparkUnavailable as e:
        missing(str(e))
    for program in programs:
        require_tool(program, f"{program} is not installed (apt default-jdk-headless)")
    return jar
