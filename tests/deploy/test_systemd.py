"""The node as systemd units, in a real systemd: `pykubelet install`, `systemctl start
pykubelet.target` -> a static pod Running; SIGKILL of a service -> systemd restarts it and the
pod's container is the same; `systemctl stop pykubelet.target` stops every unit. Inside
systemd-nspawn the services cannot be forked from the preload unit, and say why."""

from __future__ import annotations

from shared.process.admin import SERVICES
from tests.guest_node import PY, install_args, push_images, running_pod, web_spec, write_static_pod
from tests.integration.conftest import wait_for

UNITS = ["pykubelet-bus.service", "pykubelet-containerd.service", "pykubelet-preload.service",
         *(f"pykubelet-{s}.service" for s in SERVICES)]


def test_the_node_runs_as_systemd_units(machine):
    push_images(machine)
    install = machine.run(*install_args("nspawn-node", "127.0.0.1", "--enable"))
    assert "wrote /etc/systemd/system/pykubelet-pod-sync.service" in install.stdout, install.stdout
    again = machine.run(*install_args("nspawn-node", "127.0.0.1"))
    assert "nothing to change" in again.stdout, again.stdout

    # Type=notify: start returns once every service is ready, or fails.
    machine.run("systemctl", "start", "pykubelet.target", timeout=240)
    states = dict(zip(UNITS, machine.run("systemctl", "is-active", *UNITS, check=False).stdout.split(), strict=True))
    not_up = [u for u, state in states.items() if state != "active"]
    assert not not_up, machine.run("systemctl", "status", "--no-pager", "-n", "15", *not_up, check=False).stdout

    write_static_pod(machine, "web", web_spec())
    pod = wait_for(lambda: running_pod(machine, "web"), 120, "the static pod Running")
    page = machine.run("busybox", "wget", "-qO-", f"http://{pod['podIP']}/")
    assert "pykubelet" in page.stdout
    container_id = pod["containers"][0]["containerID"]

    machine.run("systemctl", "kill", "-s", "KILL", "pykubelet-pod-sync.service")
    wait_for(lambda: int(machine.run("systemctl", "show", "-p", "NRestarts", "--value",
                                     "pykubelet-pod-sync.service").stdout) >= 1
             and machine.run("systemctl", "is-active", "pykubelet-pod-sync.service", check=False).stdout.strip()
             == "active", 120, "systemd to restart pod-sync")
    after = wait_for(lambda: running_pod(machine, "web"), 120, "the pod Running after the restart")
    assert after["containers"][0]["containerID"] == container_id, "the same container, not a new one"
    assert after["containers"][0]["restartCount"] == 0
    journal = machine.run("journalctl", "-u", "pykubelet-pod-sync.service", "--no-pager", "-o", "cat").stdout
    assert "pod-sync running" in journal, journal[-2000:]
    # systemd-nspawn puts the whole container under seccomp filters, and a filtered process may not
    # read another's (PTRACE_SECCOMP_GET_FILTER): the preload unit cannot copy a unit's filters
    # here, so each launcher runs its service itself and says why (on a host, tests/vm forks them).
    assert "not forked from the preloaded services" in journal and "cannot read the seccomp filters" in journal, \
        journal[-2000:]

    # Stopping the target queues a stop for every unit (PartOf), services before the bus and
    # containerd; containerd's KillMode=process leaves the containers to a later start.
    machine.run("systemctl", "stop", "pykubelet.target", timeout=180)
    wait_for(lambda: machine.run("systemctl", "is-active", *UNITS, check=False).stdout.split()
             == ["inactive"] * len(UNITS), 120, "every unit stopped")

    removed = machine.run(PY, "-m", "services.cli.main", "uninstall").stdout
    assert "removed /etc/systemd/system/pykubelet.target" in removed, removed
    left = machine.run("systemctl", "list-unit-files", "pykubelet*", "--no-legend", check=False).stdout
    assert left.strip() == "", left
    assert machine.run("test", "-e", "/etc/pykubelet", check=False).returncode != 0
