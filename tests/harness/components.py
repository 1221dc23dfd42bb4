"""Components a test needs (a CLI tool, node, java...): missing, a test skips locally and fails under CI."""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest


def missing(what: str) -> NoReturn:
    """Skip the test (a developer machine may lack the component) unless CI is set: then fail it."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI is set: a missing component fails)")
    pytest.skip(what)


def require_tool(name: str) -> str:
    """The path of a command-line tool, or missing()."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed")
    return path
