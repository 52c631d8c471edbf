"""eventRecordQPS and eventBurst: how fast the node posts events to the API server
(services/status_reporter/events.py), against tests/unit/test_kube_api.py's FakeApiServer."""

from __future__ import annotations

import json
import time

from services.status_reporter.events import EventPoster
from shared.api.client import api_client
from shared.bus.messages import KubeEvent
from shared.config.settings import load_kubelet_config


async def post_times(api_server, tmp_path, config: dict, n: int) -> list[float]:
    api_server.replies["/api/v1/namespaces/default/events"] = (201, json.dumps({"kind": "Event"}).encode())
    k, _ = load_kubelet_config(config)
    # The API client's own budget is far above the events' one, so only the latter shows.
    api = await api_client(api_server.kubeconfig(tmp_path), qps=1000, burst=1000, root_dir=tmp_path)
    poster = EventPoster(api, "n1", k.event_record_qps, k.event_burst)
    start, times = time.monotonic(), []
    for i in range(n):
        await poster.post(KubeEvent(namespace="default", name=f"pod{i}", uid="", reason="Started",
                                    message=f"Started container c{i}"))
        times.append(time.monotonic() - start)
    return times


async def test_events_beyond_the_burst_wait_for_the_rate(api_server, tmp_path):
    times = await post_times(api_server, tmp_path, {"eventRecordQPS": 5, "eventBurst": 2}, 4)
    assert len([m for m, t, _, _ in api_server.requests if m == "POST" and "/events" in t]) == 4
    # Two at once (the burst), then one per 1/5 s: the fourth no sooner than 0.4 s after them.
    assert times[3] - times[1] >= 0.35, times


async def test_event_record_qps_zero_is_no_limit(api_server, tmp_path):
    times = await post_times(api_server, tmp_path, {"eventRecordQPS": 0, "eventBurst": 1}, 6)
    assert times[-1] < 2, "nothing waits for a rate (limited, six events with a burst of one would take longer)"


async def test_a_node_event_from_the_bus_is_about_this_node_whatever_it_names(api_server, tmp_path):
    api = await api_client(api_server.kubeconfig(tmp_path), qps=1000, burst=1000, root_dir=tmp_path)
    poster = EventPoster(api, "n1", 5, 10)
    await poster.submit(KubeEvent(kind="Node", name="another-node", reason="Shutdown",
                                  message="Shutdown manager detected shutdown event"))
    await poster.submit(KubeEvent(kind="Secret", namespace="kube-system", name="x", reason="Hostile"))
    queued = [poster.queue.get_nowait() for _ in range(poster.queue.qsize())]
    assert [(e.kind, e.namespace, e.name, e.uid, e.reason) for e in queued] == \
        [("Node", "default", "n1", "n1", "Shutdown")], "another node's name is not taken; other kinds are dropped"
