"""How the Node is registered (registerNode, registerWithTaints, providerID), against an HTTP
server answering as the API server does (tests/unit/test_kube_api.py's FakeApiServer)."""

from __future__ import annotations

import json

import pytest

from services.status_reporter.node_agent import NodeAgent, Registration
from shared.api.client import ApiError, api_client
from shared.config.settings import ConfigError, load_kubelet_config
from shared.store import Store
from tests.unit.conftest import run_for

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "node-uid"}, "spec": {}}


async def agent(api_server, tmp_path, registration: Registration) -> NodeAgent:
    api = await api_client(api_server.kubeconfig(tmp_path), qps=50, burst=100, root_dir=tmp_path)
    store = Store(tmp_path / "state.db", writer="status-reporter")
    store.create_schema()
    return NodeAgent(api, store, "n1", str(tmp_path), 110, 40, 10.0, 60.0, lambda *_: None,
                     registration=registration)


def sent(api_server, method: str, target: str) -> list[dict]:
    return [json.loads(body) for m, t, _, body in api_server.requests if m == method and t.split("?")[0] == target]


async def test_the_node_is_created_with_its_taints_and_provider_id(api_server, tmp_path):
    api_server.replies["/api/v1/nodes"] = (201, json.dumps(NODE).encode())
    api_server.replies["/api/v1/nodes/n1/status"] = (200, json.dumps(NODE).encode())
    k, _ = load_kubelet_config({"providerID": "pykubelet://n1", "registerWithTaints": [
        {"key": "example.com/dedicated", "value": "infra", "effect": "NoSchedule"},
        {"key": "gpu", "effect": "PreferNoSchedule"}]})
    a = await agent(api_server, tmp_path, Registration(True, [t.model_dump(exclude_defaults=True)
                                                         for t in k.register_with_taints], k.provider_id))
    await a.register()
    [created] = sent(api_server, "POST", "/api/v1/nodes")
    assert created["spec"] == {"providerID": "pykubelet://n1", "taints": [
        {"key": "example.com/dedicated", "value": "infra", "effect": "NoSchedule"},
        {"key": "gpu", "effect": "PreferNoSchedule"}]}
    assert a.registered.is_set() and a.node_uid == "node-uid"


async def test_register_node_false_never_creates_the_node_and_waits_for_it(api_server, tmp_path):
    a = await agent(api_server, tmp_path, Registration(register=False))
    with pytest.raises(ApiError, match="Node n1 does not exist and registerNode is false: create it"):
        await a.register()
    api_server.replies["/api/v1/nodes/n1"] = (200, json.dumps(NODE).encode())
    api_server.replies["/api/v1/nodes/n1/status"] = (200, json.dumps(NODE).encode())
    await a.register()
    assert a.registered.is_set() and a.node_uid == "node-uid"
    assert sent(api_server, "POST", "/api/v1/nodes") == [], "registerNode false: no Node is created"
    assert sent(api_server, "PATCH", "/api/v1/nodes/n1") == [], "nor its labels changed"
    assert len(sent(api_server, "PATCH", "/api/v1/nodes/n1/status")) == 1, "its status is reported"


async def test_node_labels_are_registered_over_the_nodes_own_and_reconciled(api_server, tmp_path):
    """--node-labels: on the Node as it is created and, when it exists already, patched onto it."""
    api_server.replies["/api/v1/nodes"] = (201, json.dumps(NODE).encode())
    api_server.replies["/api/v1/nodes/n1/status"] = (200, json.dumps(NODE).encode())
    labels = {"example.com/pool": "blue", "node.kubernetes.io/instance-type": "small"}
    a = await agent(api_server, tmp_path, Registration(labels=labels))
    await a.register()
    [created] = sent(api_server, "POST", "/api/v1/nodes")
    assert created["metadata"]["labels"]["kubernetes.io/hostname"] == "n1"
    assert labels.items() <= created["metadata"]["labels"].items()
    api_server.replies["/api/v1/nodes"] = (409, b'{"kind": "Status", "reason": "AlreadyExists"}')
    api_server.replies["/api/v1/nodes/n1"] = (200, json.dumps(NODE).encode())
    await a.register()
    [patched] = sent(api_server, "PATCH", "/api/v1/nodes/n1")
    assert labels.items() <= patched["metadata"]["labels"].items()


@pytest.mark.parametrize("taint,needle", [
    ({"key": "bad key", "effect": "NoSchedule"}, "'bad key' is not a qualified name"),
    ({"key": "a", "effect": "NoRun"}, "effect"),
    ({"key": "a", "value": "x" * 64, "effect": "NoSchedule"}, "is not a valid label value"),
    ({"key": "a", "effect": "NoSchedule", "timeAdded": "now"}, "timeAdded"),
])
def test_bad_taints_are_refused_naming_the_field(taint, needle):
    with pytest.raises(ConfigError, match="registerWithTaints") as exc:
        load_kubelet_config({"registerWithTaints": [taint]})
    assert needle in str(exc.value)


@pytest.mark.parametrize("period,fewest,most", [("1s", 3, 5), ("10s", 1, 1)])
async def test_node_status_update_frequency_is_how_often_the_status_is_looked_at(api_server, tmp_path, period,
                                                                                 fewest, most):
    """Every nodeStatusUpdateFrequency the node's status is computed again (and sent when it
    changed or nodeStatusReportFrequency has passed): counted over 3 s."""
    k, _ = load_kubelet_config({"nodeStatusUpdateFrequency": period})
    api_server.replies["/api/v1/nodes"] = (201, json.dumps(NODE).encode())
    api_server.replies["/api/v1/nodes/n1/status"] = (200, json.dumps(NODE).encode())
    api_server.replies["/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"] = (200, b"{}")
    a = await agent(api_server, tmp_path, Registration())
    a.status_every = k.node_status_update_frequency
    looks = []
    real = a.report_status

    async def counted(force: bool = False) -> None:
        looks.append(force)
        await real(force)
    a.report_status = counted  # type: ignore[method-assign]
    await run_for(a.run(), a.registered, 3, "node-agent")
    periodic = len([f for f in looks if not f])  # the registration's own report is forced
    assert fewest <= periodic <= most, f"nodeStatusUpdateFrequency {period}: {periodic} looks in 3 s"
