"""docker/: the compose file validates, and the cluster configs it mounts are valid pydble configs.

No Docker engine is needed: `docker compose config` only parses and resolves the file.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness.proxy import REPO_ROOT
from meta.config import load_config

DOCKER = REPO_ROOT / "docker"
COMPOSE = DOCKER / "compose.yml"
ZOOKEEPERS = {"zk1", "zk2", "zk3"}
SERVICES = {*ZOOKEEPERS, "mariadb1", "mariadb2", "pydble-1", "pydble-2"}


def compose_command() -> list[str] | None:
    """`docker compose` (the v2 plugin), else the standalone `docker-compose`, else None."""
    if shutil.which("docker"):
        res = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30)
        if res.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_docker_compose_config_validates() -> None:
    cmd = compose_command()
    assert cmd is not None, ("neither `docker compose` (the compose plugin) nor `docker-compose` is installed: "
                             "`make deps` installs Debian's docker-compose")
    res = subprocess.run([*cmd, "-f", str(COMPOSE), "config"], capture_output=True, text=True, timeout=60,
                         cwd=REPO_ROOT)
    assert res.returncode == 0, res.stderr
    for name in SERVICES:
        assert f"  {name}:" in res.stdout


def test_compose_file_structure() -> None:
    import yaml  # the test extra's pyyaml
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    assert set(services) == SERVICES
    published = []
    for name, svc in services.items():
        for vol in svc.get("volumes", []):
            src = vol.split(":", 1)[0]
            if src.startswith("."):
                assert (DOCKER / src).exists(), f"{name} mounts missing {src}"
            else:
                assert src in doc.get("volumes", {}), f"{name} uses undeclared volume {src}"
        published += [p.split(":")[0] for p in svc.get("ports", [])]
    assert len(published) == len(set(published)), "host ports must not clash"
    for name in ("pydble-1", "pydble-2"):
        deps = services[name]["depends_on"]
        assert set(deps) == {*ZOOKEEPERS, "mariadb1", "mariadb2"}
        assert all(d["condition"] == "service_healthy" for d in deps.values())
    # one ensemble: every member has its own id and the same list of all three
    assert sorted(str(services[z]["environment"]["ZOO_MY_ID"]) for z in ZOOKEEPERS) == ["1", "2", "3"]
    assert len({services[z]["environment"]["ZOO_SERVERS"] for z in ZOOKEEPERS}) == 1
    assert all(f"={z}:2888:3888;2181" in services["zk1"]["environment"]["ZOO_SERVERS"] for z in ZOOKEEPERS)
    build = services["pydble-1"]["build"]
    assert (DOCKER / build["context"]).resolve() == REPO_ROOT
    assert (REPO_ROOT / build["dockerfile"]).exists()


@pytest.mark.parametrize("n", [1, 2])
def test_cluster_configs_are_valid_and_point_at_the_services(n: int) -> None:
    cfg = load_config(DOCKER / f"pydble-{n}.toml")
    assert cfg.server.instance == f"pydble-{n}"
    assert cfg.server.bind == "0.0.0.0"
    assert cfg.cluster is not None and cfg.cluster.zk == "zk1:2181,zk2:2181,zk3:2181"
    assert {g.host for g in cfg.db_groups.values()} == {"mariadb1", "mariadb2"}
    assert cfg.table("schema1", "orders") is not None and cfg.table("schema1", "orders_by_region") is not None


def test_the_two_instances_differ_only_in_their_name() -> None:
    a = (DOCKER / "pydble-1.toml").read_text().replace("pydble-1", "X").replace("pydble-2", "Y")
    b = (DOCKER / "pydble-2.toml").read_text().replace("pydble-2", "X").replace("pydble-1", "Y")
    assert a == b


def test_dockerfile_runs_the_cli() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["pydble"]' in text and "/etc/pydble/pydble.toml" in text
    for pkg in ("proxy", "meta", "zk", "cli", "jobs"):
        assert f"COPY {pkg} ./{pkg}" in text
