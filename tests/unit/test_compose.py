"""docker-compose.yml must describe the same processes the CLI runs, with flags it accepts."""

import argparse
from pathlib import Path

import yaml

from services.cli.main import SERVICES
from shared.config.settings import add_node_flags
from shared.process.admin import admin_port

REPO = Path(__file__).resolve().parents[2]


def test_compose_runs_every_service_with_valid_flags():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(SERVICES) <= set(services)
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_node_flags(parser)
    for name in SERVICES:
        command = services[name]["command"]
        assert command[0] == name
        args = parser.parse_args(command[1:])  # raises on a flag the services do not know
        assert Path(REPO / "examples" / "kubelet-config.yaml").exists() and args.config.endswith("kubelet-config.yaml")
        assert services[name]["healthcheck"]["test"] == ["CMD", "sh", "/usr/local/bin/pykubelet-ready",
                                                         str(admin_port(name))], f"{name}: healthcheck is its /readyz"
        assert "./deploy/compose/ready.sh:/usr/local/bin/pykubelet-ready:ro" in services[name]["volumes"]
        assert services[name]["depends_on"]["bus"] == {"condition": "service_healthy"}


def test_the_health_check_sends_the_admin_token_and_asks_for_readyz():
    """Through a pipe, not on a command line (`pid: host`: every local user sees those)."""
    script = (REPO / "deploy" / "compose" / "ready.sh").read_text()
    assert "/var/lib/pykubelet/run/admin-token" in script and "GET /readyz" in script
    assert "Authorization: Bearer %s" in script and "| busybox nc" in script


def test_compose_images_are_built_by_make():
    makefile = (REPO / "Makefile").read_text()
    assert "compose-images:" in makefile and "deploy/Dockerfile" in makefile
