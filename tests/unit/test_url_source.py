"""staticPodURL (services/pod_sync/url_source.py) against a real HTTP server and a real SQLite
store: what the answer holds becomes the node's static pods, anything else is an error named for
the URL and leaves the pods as they were."""

from __future__ import annotations

import json

import httpx
import pytest
from sqlalchemy import select

from services.pod_sync.static_source import StaticPodSource
from services.pod_sync.url_source import URLPodSource
from shared.model.podspec import MAX_MANIFEST_BYTES
from shared.store import DesiredPod, ManifestError
from tests.unit.conftest import IMG, run_for


def pod(name: str, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": IMG}], **spec}}


def wanted(store) -> dict[str, DesiredPod]:
    with store.session() as s:
        return {r.name: r for r in s.scalars(select(DesiredPod).where(DesiredPod.deleting.is_(False)))}


def errors(store) -> dict[str, str]:
    with store.session() as s:
        return {e.source_path: e.error for e in s.scalars(select(ManifestError))}


class Checked:
    """The source and one fetch-and-apply of it, as its run() loop does every httpCheckFrequency."""

    def __init__(self, src: URLPodSource, client: httpx.AsyncClient) -> None:
        self.src, self.client = src, client

    @property
    def url(self) -> str:
        return self.src.url

    @url.setter
    def url(self, value: str) -> None:
        self.src.url = value

    async def check_now(self) -> set[str]:
        return await self.src.check(self.client)


@pytest.fixture
async def source(api_server, store):
    url = f"http://127.0.0.1:{api_server.port}/manifests"
    src = URLPodSource(url, {"Authorization": ["Bearer t0ken"], "X-Pool": ["a", "b"]}, "node1", store, 20.0)
    async with httpx.AsyncClient(timeout=5) as client:
        yield Checked(src, client)


def answer(api_server, status: int, body: bytes | dict) -> None:
    api_server.replies["/manifests"] = (status, body if isinstance(body, bytes) else json.dumps(body).encode())


async def test_a_pod_at_the_url_is_a_static_pod_of_the_node(api_server, store, source):
    answer(api_server, 200, pod("web"))
    assert len(await source.check_now()) == 1
    [row] = wanted(store).values()
    assert (row.name, row.namespace, row.source, row.source_path) == ("web-node1", "default", "http", source.url)
    assert row.manifest["metadata"]["annotations"]["kubernetes.io/config.source"] == "http"
    assert row.manifest["spec"]["nodeName"] == "node1"
    sent = api_server.header_lines[-1]
    assert ("authorization", "Bearer t0ken") in sent and [v for k, v in sent if k == "x-pool"] == ["a", "b"]
    assert await source.check_now() == set(), "the same answer again changes nothing"


async def test_a_pod_list_is_the_whole_truth_and_an_empty_answer_is_no_pods(api_server, store, source):
    answer(api_server, 200, {"apiVersion": "v1", "kind": "PodList", "items": [pod("a"), pod("b")]})
    await source.check_now()
    assert set(wanted(store)) == {"a-node1", "b-node1"}
    answer(api_server, 200, {"apiVersion": "v1", "kind": "PodList", "items": [pod("b")]})
    await source.check_now()
    assert set(wanted(store)) == {"b-node1"}
    answer(api_server, 200, b"")
    await source.check_now()
    assert wanted(store) == {}


@pytest.mark.parametrize(("status", "body", "error"), [
    (500, b"boom", "cannot fetch http://127.0.0.1:PORT/manifests: 500"),
    (200, b"{not yaml: [", "manifest invalid: "),
    (200, json.dumps({"kind": "PodList", "items": [pod("ok"), pod("Bad_Name")]}).encode(), "manifest invalid: items[1]: "),
    (200, json.dumps({"kind": "Deployment"}).encode(), "manifest invalid: kind: must be Pod or PodList"),
    (200, json.dumps({"kind": "PodList", "items": [pod("x"), pod("x")]}).encode(),
     "manifest invalid: pod default/x-node1 is defined twice"),
    (200, b"#" * (MAX_MANIFEST_BYTES + 1), f"the answer is over {MAX_MANIFEST_BYTES} bytes"),
    (200, b"\xff\xfe", "the answer is not UTF-8 text"),
])
async def test_a_bad_answer_is_an_error_for_the_url_and_the_pods_stay(api_server, store, source, status, body, error):
    answer(api_server, 200, pod("web"))
    await source.check_now()
    answer(api_server, status, body)
    assert await source.check_now() == set()
    assert set(wanted(store)) == {"web-node1"}
    [(where, why)] = errors(store).items()
    assert where == source.url and error.replace("PORT", str(api_server.port)) in why
    answer(api_server, 200, pod("web"))
    await source.check_now()
    assert errors(store) == {}, "a good answer clears the error"


async def test_an_unreachable_url_is_an_error_and_the_pods_stay(api_server, store, source):
    answer(api_server, 200, pod("web"))
    await source.check_now()
    source.url = "http://127.0.0.1:1/manifests"  # nothing listens on port 1
    await source.check_now()
    assert set(wanted(store)) == {"web-node1"}
    assert "cannot fetch http://127.0.0.1:1/manifests: ConnectError" in errors(store)[source.url]


async def test_the_directory_and_the_url_keep_their_own_pods_and_errors(api_server, store, source, tmp_path):
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "db.yaml").write_text(json.dumps(pod("db")))
    (manifests / "broken.yaml").write_text("kind: [")
    directory = StaticPodSource(str(manifests), "node1", store, 20.0)
    answer(api_server, 500, b"down")
    await source.check_now()
    await directory.scan()
    assert set(wanted(store)) == {"db-node1"}
    assert set(errors(store)) == {source.url, str(manifests / "broken.yaml")}
    answer(api_server, 200, pod("web"))
    await source.check_now()
    assert set(wanted(store)) == {"db-node1", "web-node1"}
    assert set(errors(store)) == {str(manifests / "broken.yaml")}
    (manifests / "broken.yaml").unlink()
    await directory.scan()
    assert set(wanted(store)) == {"db-node1", "web-node1"} and errors(store) == {}


@pytest.mark.parametrize(("every", "fewest", "most"), [(0.3, 3, 6), (5.0, 1, 1)])
async def test_http_check_frequency_is_how_often_the_url_is_fetched(api_server, store, every, fewest, most):
    answer(api_server, 200, b"")
    src = URLPodSource(f"http://127.0.0.1:{api_server.port}/manifests", {}, "node1", store, every)
    await run_for(src.run(), src.synced, 1.2, "url-pod-source")
    fetched = len([r for r in api_server.requests if r[1] == "/manifests"])
    assert fewest <= fetched <= most, f"httpCheckFrequency {every}s: {fetched} fetches in 1.2 s"


async def test_the_directory_leaves_the_api_sources_errors_alone(store, tmp_path):
    from shared.store import ManifestError as Error

    with store.session() as s:
        s.add(Error(source_path="api:default/bad", error="pod invalid: spec.containers: Required value"))
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "broken.yaml").write_text("kind: [")
    directory = StaticPodSource(str(manifests), "node1", store, 20.0)
    await directory.scan()
    (manifests / "broken.yaml").unlink()
    await directory.scan()
    assert errors(store) == {"api:default/bad": "pod invalid: spec.containers: Required value"}


@pytest.mark.parametrize(("config", "error"), [
    ({"staticPodURL": "file:///etc/shadow"}, "staticPodURL: 'file:///etc/shadow' is not an http:// or https:// URL"),
    ({"staticPodURL": "http:///pods"}, "is not an http:// or https:// URL"),
    ({"staticPodURLHeader": {"X-Token": ["a\r\nX-Injected: 1"]}},
     "staticPodURLHeader: X-Token: a header value may not hold a line break or NUL"),
    ({"staticPodURLHeader": {"Bad Name": ["x"]}}, "staticPodURLHeader: 'Bad Name' is not an HTTP header name"),
])
def test_a_hostile_url_or_header_is_refused_naming_the_field(config, error):
    from shared.config.settings import ConfigError, load_kubelet_config

    with pytest.raises(ConfigError) as exc:
        load_kubelet_config(config)
    assert error in str(exc.value)
