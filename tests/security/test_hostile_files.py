"""A container that leaves a hostile file where pykubelet reads its termination message (issue 29,
case 1): a FIFO, a symlink to a host file, a file far larger than a message. pod-sync goes on
syncing every pod, its healthz answers, the node starts other pods meanwhile, and the pod's status
shows at most the kubelet's 4096 bytes of what the container wrote, never a host file.

The container cannot replace the termination-log file pykubelet bind-mounts at its
terminationMessagePath, but it can mount a volume at that very path: an emptyDir subPath onto
which an init container planted a FIFO. The runtime then reports two mounts for that path; on
main pod-sync opened the first one, the FIFO on the host, and blocked in open() for good.
"""

from __future__ import annotations

from tests.integration.conftest import wait_for
from tests.security.conftest import assert_node_serves

MAX_MESSAGE_BYTES = 4096  # the kubelet's maxContainerTerminationMessageLength


def _sh(pods, name: str, script: str, mounts: list[dict], **extra) -> dict:
    return {"name": name, "image": pods.image("busybox"), "command": ["sh", "-c", script],
            "volumeMounts": mounts, **extra}


def _crash_looping_pod(pods, name: str, plant: str, app: dict) -> None:
    pods.write_pod(name, {
        "volumes": [{"name": "data", "emptyDir": {}}],
        "initContainers": [_sh(pods, "plant", plant, [{"name": "data", "mountPath": "/data"}])],
        "containers": [app]})


def _pod_sync_healthy(pods) -> None:
    resp = pods.admin_get("pod-sync", "/healthz", timeout=5)
    assert resp.status_code == 200 and resp.text == "ok", (resp.status_code, resp.text[:200])


def _app_status(pod: dict) -> dict:
    return next(c for c in pod["status"]["containerStatuses"] if c["name"] == "app")


def _restarted(times: int):
    return lambda p: any(c["restartCount"] >= times for c in p["containers"] if not c["init"])


def _messages(pods, name: str) -> list[str]:
    st = _app_status(pods.pod(name))
    return [t.get("message", "") for t in (st["state"].get("terminated"), st["lastState"].get("terminated")) if t]


def test_a_fifo_at_the_termination_message_path_does_not_freeze_pod_sync(secure_node, pods, canary):
    # The app's /dev/termination-log is (also) the emptyDir's "msg", a FIFO nobody writes to.
    _crash_looping_pod(pods, "fifo-message", "mkfifo /data/msg", _sh(
        pods, "app", "echo leaving; exit 1", [{"name": "data", "mountPath": "/dev/termination-log", "subPath": "msg"}],
        terminationMessagePolicy="FallbackToLogsOnError"))
    # Each restart needs pod-sync to have read the message of the exit before: a blocked open()
    # stops it here.
    pods.wait_pod("fifo-message", _restarted(2), 90, "the app restarted twice (pod-sync read its exits)")
    _pod_sync_healthy(pods)
    assert_node_serves(secure_node, "fifo-bystander")
    _pod_sync_healthy(pods)
    # The container wrote no message into the file it sees (the termination log mounted over
    # the FIFO): the log's tail is the message, as FallbackToLogsOnError says.
    messages = _messages(pods, "fifo-message")
    assert messages and all(m == "leaving" for m in messages), messages


def test_a_symlink_to_a_host_file_never_shows_its_content(secure_node, pods, canary):
    # A symlink to the canary planted at the app's terminationMessagePath in its emptyDir, and the
    # same symlink as a subPath mounted there (refused: it leads out of the volume).
    _crash_looping_pod(pods, "link-message", f"ln -s {canary.file} /data/msg", _sh(
        pods, "app", "echo written >> /data/msg; exit 1", [{"name": "data", "mountPath": "/data"}],
        terminationMessagePath="/data/msg"))
    pods.write_pod("link-subpath", {
        "volumes": [{"name": "data", "emptyDir": {}}],
        "initContainers": [_sh(pods, "plant", f"ln -s {canary.file} /data/msg", [{"name": "data", "mountPath": "/data"}])],
        "containers": [_sh(pods, "app", "exit 1", [{"name": "data", "mountPath": "/dev/termination-log",
                                                     "subPath": "msg"}])]})
    pods.wait_pod("link-message", _restarted(1), 90, "the app restarted")
    refused = pods.wait_pod("link-subpath", lambda p: any(c["reason"] == "CreateContainerConfigError"
                                                          for c in p["containers"] if not c["init"]), 60,
                            "the subPath to the canary refused")
    assert "outside the volume" in _app_status(refused)["state"]["waiting"]["message"]
    _pod_sync_healthy(pods)
    assert_node_serves(secure_node, "link-bystander")
    messages = _messages(pods, "link-message")
    assert messages, _app_status(pods.pod("link-message"))
    for message in messages:
        assert canary.content.strip() not in message, "the canary's content reached the pod status"
        assert message == "written\n", message  # the app's own words, from the file pykubelet made


def test_a_huge_termination_message_is_cut_to_the_kubelets_4096_bytes(secure_node, pods, canary):
    # 8 MiB of "x", then an end marker: the kubelet keeps the last 4096 bytes.
    _crash_looping_pod(pods, "huge-message", "true", _sh(
        pods, "app", "head -c 8388608 /dev/zero | tr '\\0' x > /dev/termination-log; "
                     "echo THE-END >> /dev/termination-log; exit 1", [{"name": "data", "mountPath": "/data"}]))
    pods.wait_pod("huge-message", _restarted(1), 90, "the app restarted")
    _pod_sync_healthy(pods)
    assert_node_serves(secure_node, "huge-bystander")
    messages = wait_for(lambda: [m for m in _messages(pods, "huge-message") if m] or None, 30, "a message")
    for message in messages:
        assert len(message.encode()) == MAX_MESSAGE_BYTES, len(message.encode())
        assert message.endswith("THE-END\n") and set(message[:-8]) == {"x"}, message[-40:]
