"""The kubelet API's handlers over a real store file and the fake runtime: which log instance is
read, the kubelet's messages when there is none, and store rows that point outside podLogsDir."""

from __future__ import annotations

import asyncio

import pytest
from cri_api.v1 import api_pb2 as cri

from services.node_api.http import HTTPError, Request
from services.node_api.kubelet_api import KubeletAPI, configz, running_pod_list
from shared.runtime.cri import labels as L
from shared.runtime.cri.fake import FakeRuntime
from shared.store import DesiredPod, PodRuntime

MANIFEST = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def request(path_params: dict, query: dict | None = None, method: str = "GET") -> Request:
    return Request(method, "/x", {k: [v] for k, v in (query or {}).items()}, {}, [], None, params=path_params)


@pytest.fixture
def api(settings, store):
    async def no_metrics() -> str:
        return ""
    return KubeletAPI(settings, store, FakeRuntime(), stats=None, node_metrics=no_metrics)  # type: ignore[arg-type]


def put(store, containers: list[dict]) -> None:
    with store.session() as s:
        s.merge(DesiredPod(uid="u1", namespace="ns", name="p", source="api", manifest=MANIFEST))
        s.merge(PodRuntime(uid="u1", containers=containers))


async def read_all(resp) -> bytes:
    return b"".join([chunk async for chunk in resp.body])


async def test_current_and_previous_instance(api, store, settings):
    logs = settings.root_dir / "logs" / "ns_p_u1" / "c"
    logs.mkdir(parents=True)
    (logs / "0.log").write_text("2026-01-01T00:00:00.000000001Z stdout F first\n")
    (logs / "1.log").write_text("2026-01-01T00:00:01.000000001Z stdout F second\n")
    previous = {"container_id": "containerd://a", "log_path": str(logs / "0.log"), "state": "exited"}
    put(store, [{"name": "c", "container_id": "containerd://b", "state": "running",
                 "log_path": str(logs / "1.log"), "last_terminated": previous}])
    params = {"namespace": "ns", "pod": "p", "container": "c"}
    assert await read_all(await api.container_logs(request(params))) == b"second\n"
    assert await read_all(await api.container_logs(request(params, {"previous": "true"}))) == b"first\n"


async def test_waiting_container_gets_the_kubelets_message(api, store):
    put(store, [{"name": "c", "state": "", "waiting_reason": "ImagePullBackOff", "last_terminated": None}])
    with pytest.raises(HTTPError) as exc:
        await api.container_logs(request({"namespace": "ns", "pod": "p", "container": "c"}))
    assert exc.value.status == 400
    assert exc.value.message == 'container "c" in pod "p" is waiting to start: trying and failing to pull image'


async def test_a_log_path_outside_pod_logs_dir_is_never_opened(api, store, tmp_path):
    secret = tmp_path / "secret.log"
    secret.write_text("2026-01-01T00:00:00.000000001Z stdout F do not show\n")
    put(store, [{"name": "c", "container_id": "containerd://b", "state": "running", "log_path": str(secret)}])
    with pytest.raises(HTTPError) as exc:
        await api.container_logs(request({"namespace": "ns", "pod": "p", "container": "c"}))
    assert exc.value.status == 500 and "not under podLogsDir" in exc.value.message


async def test_unknown_pod_container_and_bad_query(api, store):
    put(store, [])
    with pytest.raises(HTTPError, match='pod "q" does not exist'):
        await api.container_logs(request({"namespace": "ns", "pod": "q", "container": "c"}))
    with pytest.raises(HTTPError, match='container "z" not found in pod "p"'):
        await api.container_logs(request({"namespace": "ns", "pod": "p", "container": "z"}))
    with pytest.raises(HTTPError) as exc:
        await api.container_logs(request({"namespace": "ns", "pod": "p", "container": "c"}, {"limitBytes": "-1"}))
    assert exc.value.status == 400 and "limitBytes" in exc.value.message


async def test_exec_needs_a_running_container(api, store):
    put(store, [{"name": "c", "container_id": "containerd://b", "state": "exited"}])
    with pytest.raises(HTTPError, match='container not found \\("c"\\)'):
        await api.exec(request({"namespace": "ns", "pod": "p", "container": "c"},
                               {"command": "true", "output": "1"}), None)  # type: ignore[arg-type]


def test_configz_shows_durations_as_the_kubelet(settings):
    cfg = configz(settings)["kubeletconfig"]
    assert cfg["syncFrequency"] == "1m0s" and cfg["authentication"]["webhook"]["cacheTTL"] == "2m0s"
    assert cfg["port"] == 10250 and cfg["readOnlyPort"] == 0


def test_configz_names_every_field_the_kubelet_defaults(settings):
    from shared.config.refused import FIELDS, REFUSED
    cfg = configz(settings)["kubeletconfig"]
    # Refused fields run at the kubelet's default, and /configz says so.
    assert cfg["cgroupsPerQOS"] is True and cfg["cpuCFSQuotaPeriod"] == "100ms"
    assert cfg["shutdownGracePeriod"] == "0s" and cfg["imageMinimumGCAge"] == "2m0s"
    unset = {name for name, field in REFUSED.items() if field.default is None}
    missing = [name for name in FIELDS if name not in cfg and name not in unset]
    assert missing == []


def test_read_only_port_serves_no_container_data(api):
    ro = api.routes(read_only=True)
    for path in ("/healthz", "/pods", "/spec", "/stats/summary", "/metrics", "/metrics/resource"):
        ro.match("GET", path)
    for method, path in (("GET", "/containerLogs/ns/p/c"), ("POST", "/exec/ns/p/c"), ("GET", "/configz"),
                         ("POST", "/run/ns/p/c"), ("GET", "/portForward/ns/p")):
        with pytest.raises(HTTPError) as exc:
            ro.match(method, path)
        assert exc.value.status == 404


def test_debugging_handlers_off_removes_logs_and_streams(settings, store):
    settings.kubelet.enable_debugging_handlers = False

    async def no_metrics() -> str:
        return ""
    routes = KubeletAPI(settings, store, FakeRuntime(), None, no_metrics).routes()  # type: ignore[arg-type]
    routes.match("GET", "/configz")
    # The kubelet's InstallDebuggingDisabledHandlers: each path and all below it, any method.
    for method, path in (("POST", "/exec/ns/p/c"), ("GET", "/containerLogs/ns/p/c"), ("GET", "/runningpods/"),
                         ("GET", "/debug/pprof/heap"), ("GET", "/logs/syslog"), ("POST", "/run/ns/p/c"),
                         ("GET", "/attach/ns/p/c"), ("POST", "/portForward/ns/p")):
        route, _ = routes.match(method, path)
        with pytest.raises(HTTPError) as exc:
            asyncio.run(route.handler(request({}, method=method)))
        assert (exc.value.status, exc.value.message) == (405, "Debug endpoints are disabled."), path
    with pytest.raises(HTTPError) as exc:
        routes.match("PUT", "/debug/flags/v")
    assert exc.value.status == 404, "not a debugging path of the kubelet's: not served at all"


def test_running_pods_are_the_runtimes_ready_sandboxes_and_running_containers():
    """/runningpods/: what the kubelet's ToAPIPod makes of the runtime's pods, in its PodList
    encoding; a sandbox or container without the kubelet's labels is not a pod of its."""
    def labels(uid: str, name: str, container: str = "") -> dict[str, str]:
        out = {L.POD_UID: uid, L.POD_NAME: name, L.POD_NAMESPACE: "ns"}
        return {**out, L.CONTAINER_NAME: container} if container else out
    sandboxes = [cri.PodSandbox(id="s1", state=cri.SANDBOX_READY, labels=labels("u1", "web")),
                 cri.PodSandbox(id="s2", state=cri.SANDBOX_NOTREADY, labels=labels("u2", "gone")),
                 cri.PodSandbox(id="s3", state=cri.SANDBOX_READY, labels=labels("u3", "idle")),
                 cri.PodSandbox(id="s4", state=cri.SANDBOX_READY, labels={"app": "not-the-kubelets"})]
    containers = [cri.Container(id="c1", state=cri.CONTAINER_RUNNING, labels=labels("u1", "web", "app"),
                                image=cri.ImageSpec(image="sha256:abc")),
                  cri.Container(id="c2", state=cri.CONTAINER_EXITED, labels=labels("u1", "web", "init"),
                                image=cri.ImageSpec(image="sha256:def"))]
    assert running_pod_list(sandboxes, containers) == {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [
        {"metadata": {"name": "idle", "namespace": "ns", "uid": "u3", "creationTimestamp": None},
         "spec": {"containers": None}, "status": {}},
        {"metadata": {"name": "web", "namespace": "ns", "uid": "u1", "creationTimestamp": None},
         "spec": {"containers": [{"name": "app", "image": "sha256:abc", "resources": {}}]}, "status": {}}]}
    assert running_pod_list([], [])["items"] is None  # Go's nil slice
