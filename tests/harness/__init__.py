"""Test harness: real MariaDB, ZooKeeper and pydble processes on free 127.0.0.1 ports."""

from .components import missing, require_tool
from .mariadb import MariaDBServer, backend_rows, start_all
from .ports import free_port, port_accepts, release_port
from .process import HarnessError, sweep_orphans
from .proxy import ProxyProcess, cli_available, cluster_section, proxy_config, to_toml
from .zookeeper import ZooKeeperServer

__all__ = [
    "HarnessError",
    "MariaDBServer",
    "ProxyProcess",
    "ZooKeeperServer",
    "backend_rows",
    "cli_available",
    "cluster_section",
    "free_port",
    "missing",
    "port_accepts",
    "proxy_config",
    "release_port",
    "require_tool",
    "start_all",
    "sweep_orphans",
    "to_toml",
]
