"""subPath against a container that plants and swaps symlinks (CVE-2017-1002101): the host is
never reached, the refusal is on the pod, and a swap after the first start changes nothing."""

from __future__ import annotations

from tests.integration.conftest import wait_for


def _sh(pods, name: str, script: str, mounts: list[dict]) -> dict:
    return {"name": name, "image": pods.image("busybox"), "command": ["sh", "-c", script], "volumeMounts": mounts}


def test_a_subpath_planted_as_a_symlink_out_of_the_volume_is_refused(pods, canary):
    pods.write_pod("planted", {
        "volumes": [{"name": "v", "emptyDir": {}}],
        "initContainers": [_sh(pods, "plant", f"ln -s {canary.dir} /v/evil; ln -s /v/../../../../..{canary.dir} "
                                              f"/v/rel", [{"name": "v", "mountPath": "/v"}])],
        "containers": [_sh(pods, "victim", "echo pwned > /mnt/flag; sleep 3600",
                           [{"name": "v", "mountPath": "/mnt", "subPath": "evil"}])]})
    pod = pods.wait_pod("planted", lambda p: any(c["reason"] == "CreateContainerConfigError"
                                                 for c in p["containers"] if not c["init"]), 60,
                        "the victim refused")
    victim = next(c for c in pod["status"]["containerStatuses"] if c["name"] == "victim")
    message = victim["state"]["waiting"]["message"]
    assert message.startswith('failed to prepare subPath for volumeMount "v" of container "victim"'), message
    assert "outside the volume" in message
    assert not [c for c in pods.containers_of(pod["uid"]) if c.metadata.name == "victim"], "never created"


def test_a_subpath_swapped_for_a_symlink_between_starts_keeps_its_first_directory(pods, canary):
    # First start: leave a marker, swap the subPath directory for a symlink to the canary, exit.
    # Second start: the same bind mount (made from an fd, not a name) is mounted again.
    script = ("if [ -e /work/marker ]; then echo second-start $(ls /work | tr '\\n' ' '); echo pwned > /work/flag; "
              f"sleep 3600; fi; touch /work/marker; mv /vol/work /vol/work-old; ln -s {canary.dir} /vol/work; exit 1")
    pods.write_pod("swapper", {
        "volumes": [{"name": "v", "emptyDir": {}}],
        "containers": [_sh(pods, "app", script, [{"name": "v", "mountPath": "/vol"},
                                                 {"name": "v", "mountPath": "/work", "subPath": "work"}])]})
    pod = pods.wait_pod("swapper", lambda p: p["containers"][0]["restartCount"] >= 1
                        and p["containers"][0]["state"] == "running", 60, "the second start")
    out = wait_for(lambda: "second-start" in (o := pods.cli("logs", "swapper").stdout) and o, 20, "its output")
    assert "second-start marker" in out, out
    code, listing = pods.exec(pod["uid"], "app", ["ls", "/vol/work-old"])
    assert code == 0 and "flag" in listing, "the write landed in the volume, through the first directory"
