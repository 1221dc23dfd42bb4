"""`[server] reuse_port`: the setting that lets several pydble processes share the client port is
config, not an environment switch; a wrong type is refused at start with one line naming the key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from meta.config import ConfigError, parse_config

CONF = Path(__file__).resolve().parents[2] / "conf" / "pydble.toml"


def _raw(**server: object) -> dict:
    raw = tomllib.loads(CONF.read_text())
    raw["server"].update(server)
    return raw


def test_reuse_port_is_off_by_default_and_read_from_the_server_section() -> None:
    assert parse_config(_raw()).server.reuse_port is False
    assert parse_config(_raw(reuse_port=True)).server.reuse_port is True


def test_a_reuse_port_that_is_not_a_boolean_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^server\.reuse_port: "):
        parse_config(_raw(reuse_port="yes"))
