"""structlog set-up: JSON or console lines with bound context, never secrets."""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar

import structlog


REQUEST_ID: ContextVar[str | None] = ContextVar("pydble_request_id", default=None)


def _add_request_id(_logger: object, _name: str, event: dict) -> dict:
    """Every log line written while a client request is served carries its id (session.request)."""
    rid = REQUEST_ID.get()
    if rid is not None:
        event.setdefault("request_id", rid)
    return event


class _Stderr:
    """The process's stderr as it is when a line is written, not when logging was configured: loggers are
    cached on first use, and whoever replaced sys.stderr meanwhile (a daemon's redirect, a test runner's
    capture) may have closed the old one."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str = "info", json: bool = False) -> None:
    """Configure structlog once for the process."""
    processors: list = [
        structlog.contextvars.merge_contextvars,
        _add_request_id,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    processors.append(structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
