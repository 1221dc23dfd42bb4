"""Test harness: real MariaDB, ZooKeeper and pydble processes on free 127.0.0.1 ports."""

from .mariadb import MariaDBServer, backend_rows, global_status, start_all
from .ports import free_port, port_accepts, release_port
from .process import HarnessError, sweep_orphans
from .require import in_ci, missing, require_connector_j, require_module, require_tool
from .proxy import PEER_SECRET, ProxyProcess, cli_available, cluster_section, proxy_config, to_toml
from .terminal import Terminal
from .zookeeper import ZooKeeperEnsemble, ZooKeeperServer

__all__ = [
    "HarnessError",
    "PEER_SECRET",
    "MariaDBServer",
    "ProxyProcess",
    "Terminal",
    "ZooKeeperEnsemble",
    "ZooKeeperServer",
    "backend_rows",
    "cli_available",
    "cluster_section",
    "free_port",
    "global_status",
    "in_ci",
    "missing",
    "port_accepts",
    "proxy_config",
    "release_port",
    "require_connector_j",
    "require_module",
    "require_tool",
    "start_all",
    "sweep_orphans",
    "to_toml",
]
