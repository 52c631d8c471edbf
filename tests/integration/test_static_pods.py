"""Static pods on a real node: add, edit, delete, broken manifests, logs."""

from __future__ import annotations

from itertools import pairwise

import httpx

from tests.integration.conftest import HTTP_CHECK_EVERY, MANIFEST_URL_HEADER, NODE_NAME, RESOLV_SEARCH, wait_for
from tests.integration.pod_network import hairpin_mode


def web_manifest(node, name="web", extra_env=""):
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 2
  containers:
    - name: web
      image: {node.image('web')}
      ports: [{{containerPort: 80}}]
      env: [{{name: GREETING, value: "hello{extra_env}"}}]
"""


def test_web_pod_answers_http_at_its_ip(pods):
    pods.write("web.yaml", web_manifest(pods))
    pod = pods.wait_running("web")
    resp = httpx.get(f"http://{pod['podIP']}/", timeout=5)
    assert resp.status_code == 200
    assert "Hello from a pykubelet pod" in resp.text
    # containerd really runs it, labelled as the kubelet labels pods
    [c] = pods.containers_of(pod["uid"])
    assert c.state == 1 and c.metadata.name == "web"
    assert c.labels["io.kubernetes.pod.name"] == f"web-{NODE_NAME}"
    # hairpinMode promiscuous-bridge (the default): its bridge port hairpins, so it can reach
    # itself through a service or host port
    assert hairpin_mode(pods, pod["uid"], "web") == "1"
    # and its log is readable through the CLI
    logs = wait_for(lambda: pods.cli("logs", "web").stdout, 10, "httpd access log line")
    assert "response:200" in logs


def test_editing_a_manifest_replaces_the_pod(pods):
    pods.write("edit.yaml", web_manifest(pods, "edit"))
    old = pods.wait_running("edit")
    pods.write("edit.yaml", web_manifest(pods, "edit", extra_env=" again"))
    new = pods.wait_pod("edit", lambda p: p["uid"] != old["uid"] and p["phase"] == "Running"
                        and p["containers"][0]["state"] == "running", 60, "the edited pod running")
    wait_for(lambda: not pods.sandboxes_of(old["uid"]), 60, "the old pod's sandbox to be removed")
    assert pods.containers_of(old["uid"]) == []
    assert len(pods.containers_of(new["uid"])) == 1


def test_removing_a_manifest_stops_the_pod(pods):
    path = pods.write("gone.yaml", web_manifest(pods, "gone"))
    pod = pods.wait_running("gone")
    path.unlink()
    wait_for(lambda: pods.pod("gone") is None, 60, "the pod to leave `pykubelet status`")
    assert pods.sandboxes_of(pod["uid"]) == []
    assert pods.containers_of(pod["uid"]) == []


def test_broken_manifest_is_explained_and_good_pod_runs(pods):
    pods.write("broken.yaml", """apiVersion: v1
kind: Pod
metadata: {name: broken}
spec:
  terminationGracePeriodSeconds: 2
  containers:
    - name: app
""")
    pods.write("nonsense.yaml", "this: is: not yaml: [")
    pods.write("good.yaml", web_manifest(pods, "good"))
    pods.wait_running("good")
    _, errors = pods.wait_manifest_errors(2, 20)
    assert "spec.containers[0].image: Required value" in errors["broken.yaml"]
    assert "not valid YAML" in errors["nonsense.yaml"]
    table = pods.status_output()
    assert "manifests that could not be used" in table and "broken.yaml" in table
    # fixing the file starts the pod and clears the error
    pods.write("broken.yaml", web_manifest(pods, "broken"))
    pods.wait_running("broken")
    pods.remove("nonsense.yaml")
    wait_for(lambda: pods.status()["manifestErrors"] == [], 20, "errors to clear")


def test_missing_image_is_explained(pods):
    pods.write("noimage.yaml", f"""apiVersion: v1
kind: Pod
metadata: {{name: noimage}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
    - name: app
      image: {pods.registry}/pykubelet/does-not-exist:1
""")
    pod = pods.wait_pod("noimage", lambda p: "image could not be pulled" in p["why"], 60,
                        "the pull failure explained")
    assert pod["phase"] == "Pending"
    assert pod["containers"][0]["reason"] in ("ErrImagePull", "ImagePullBackOff")


def test_two_container_pod_and_logs_per_container(pods):
    pods.write("pair.yaml", f"""apiVersion: v1
kind: Pod
metadata: {{name: pair}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
    - name: server
      image: {pods.image('busybox')}
      command: ["sh", "-c", "mkdir -p /srv && echo shared-net > /srv/index.html && exec httpd -f -p 8080 -h /srv"]
    - name: client
      image: {pods.image('busybox')}
      command: ["sh", "-c", "while true; do wget -q -O - http://127.0.0.1:8080/; sleep 1; done"]
""")
    pods.wait_running("pair")
    refused = pods.cli("logs", "pair", check=False)
    assert refused.returncode == 1 and "choose one with -c" in refused.stderr
    # the client reaches the server over the pod's shared localhost
    wait_for(lambda: "shared-net" in pods.cli("logs", "pair", "-c", "client").stdout, 20,
             "the client's log to show the server's page")


def test_removal_gives_the_container_its_grace_period(pods):
    pods.write("graceful.yaml", f"""apiVersion: v1
kind: Pod
metadata: {{name: graceful}}
spec:
  terminationGracePeriodSeconds: 4
  containers:
    - name: app
      image: {pods.image('busybox')}
      command: ["sh", "-c", "trap 'echo got TERM, finishing up' TERM; while true; do sleep 0.2; done"]
""")
    pod = pods.wait_running("graceful")
    pods.remove("graceful.yaml")
    # TERM was sent and the container keeps running within its grace period: terminating ...
    terminating = pods.wait_pod("graceful", lambda p: "Terminating" in p["why"], 10, "Terminating")
    assert terminating["deleting"]
    wait_for(lambda: "got TERM" in pods.cli("logs", "graceful", check=False).stdout, 5,
             "the container to log that it got SIGTERM")
    assert pods.containers_of(pod["uid"]), "killed before its grace period ended"
    # ... and is killed once the 4 s are over.
    wait_for(lambda: pods.pod("graceful") is None, 30, "the pod to be gone after its grace period")
    assert pods.containers_of(pod["uid"]) == []


def test_pods_get_the_resolv_conf_the_config_names(pods):
    """resolvConf names the node's resolver file: a dnsPolicy Default pod gets its content (the
    search domain only that file has), as does a ClusterFirst pod on a node without clusterDNS."""
    for name, policy in (("dns-default", "Default"), ("dns-cluster-first", "ClusterFirst")):
        pods.write_pod(name, {"dnsPolicy": policy, "containers": [
            {"name": "c", "image": pods.image("busybox"), "command": ["sh", "-c", "cat /etc/resolv.conf; sleep 3600"]}]})
    for name in ("dns-default", "dns-cluster-first"):
        pods.wait_running(name)
        wait_for(lambda n=name: f"search {RESOLV_SEARCH}" in pods.cli("logs", n).stdout, 20,
                 f"{name}'s /etc/resolv.conf to have the search domain of the node's resolvConf")


def test_pods_from_the_manifest_url_run_and_go_with_it(pods):
    """--manifest-url, --manifest-url-header and --http-check-frequency on `pykubelet up`'s
    command line (tests/integration/conftest.py): what the URL answers is the node's static
    pods beside the directory's, fetched with the header; a bad answer keeps them."""
    served = pods.manifest_url
    try:
        served.serve(web_manifest(pods, "fetched"))
        pod = pods.wait_running("fetched", 60)
        assert pod["source"] == "http"
        assert httpx.get(f"http://{pod['podIP']}/", timeout=5).status_code == 200
        name, _, value = MANIFEST_URL_HEADER.partition(":")
        assert served.headers[-1].get(name) == value
        # Fetched every --http-check-frequency (2 s; the kubelet's default is 20 s).
        since = len(served.times)
        wait_for(lambda: len(served.times) >= since + 4, HTTP_CHECK_EVERY * 4 + 10, "four more fetches of the URL")
        gaps = [b - a for a, b in pairwise(served.times[since:])]
        assert all(HTTP_CHECK_EVERY * 0.5 < g < HTTP_CHECK_EVERY * 3 for g in gaps), gaps
        served.serve("kind: [")  # broken: reported for the URL, the pod stays
        _, errors = pods.wait_manifest_errors(1, 20)
        assert "not valid YAML" in errors["pods.yaml"]
        assert pods.pod("fetched")["uid"] == pod["uid"] and pods.pod("fetched")["phase"] == "Running"
        served.serve("")  # an empty answer: no pods
        wait_for(lambda: pods.pod("fetched") is None, 60, "the fetched pod to go")
        assert pods.status()["manifestErrors"] == []
    finally:
        served.serve("")
