"""Test harness: real MariaDB, ZooKeeper and pydble processes on free 127.0.0.1 ports."""

from .mariadb import MariaDBServer, backend_rows, start_all
from .ports import free_port, port_accepts, release_port
from .process import HarnessError, sweep_orphans
from .proxy import PEER_SECRET, ProxyProcess, cli_available, cluster_section, proxy_config, to_toml
from .zookeeper import ZooKeeperServer

__all__ = [
    "HarnessError",
    "PEER_SECRET",
    "MariaDBServer",
    "ProxyProcess",
    "ZooKeeperServer",
    "backend_rows",
    "cli_available",
    "cluster_section",
    "free_port",
    "port_accepts",
    "proxy_config",
    "release_port",
    "start_all",
    "sweep_orphans",
    "to_toml",
]
