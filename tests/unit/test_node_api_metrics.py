"""The kubelet's /metrics: the services' admin /metrics scraped and merged into one exposition."""

import asyncio
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.node_api.metrics_merge import PROBES_FAMILIES, ScrapeError, filter_families, merge_expositions, scrape_all

# As prometheus_client writes them: counters with _total, _created gauges after each family.
POD_SYNC = r'''# HELP kubelet_runtime_operations_total Cumulative number of runtime operations by operation type.
# TYPE kubelet_runtime_operations_total counter
kubelet_runtime_operations_total{operation_type="list_pod_sandbox"} 5.0
kubelet_runtime_operations_total{operation_type="run_pod_sandbox"} 2.0
# HELP kubelet_runtime_operations_created Cumulative number of runtime operations by operation type.
# TYPE kubelet_runtime_operations_created gauge
kubelet_runtime_operations_created{operation_type="list_pod_sandbox"} 1.7e+09
kubelet_runtime_operations_created{operation_type="run_pod_sandbox"} 1.7e+09
# HELP kubelet_runtime_operations_duration_seconds Duration in seconds of runtime operations.
# TYPE kubelet_runtime_operations_duration_seconds histogram
kubelet_runtime_operations_duration_seconds_bucket{le="0.1",operation_type="list_pod_sandbox"} 4.0
kubelet_runtime_operations_duration_seconds_bucket{le="1.0",operation_type="list_pod_sandbox"} 5.0
kubelet_runtime_operations_duration_seconds_bucket{le="+Inf",operation_type="list_pod_sandbox"} 5.0
kubelet_runtime_operations_duration_seconds_count{operation_type="list_pod_sandbox"} 5.0
kubelet_runtime_operations_duration_seconds_sum{operation_type="list_pod_sandbox"} 0.5
# HELP kubelet_runtime_operations_duration_seconds_created Duration in seconds of runtime operations.
# TYPE kubelet_runtime_operations_duration_seconds_created gauge
kubelet_runtime_operations_duration_seconds_created{operation_type="list_pod_sandbox"} 1.7e+09
# HELP kubelet_running_pods Number of pods that have a running pod sandbox
# TYPE kubelet_running_pods gauge
kubelet_running_pods 3.0
# HELP pykubelet_bus_connected Whether this process is connected to the bus
# TYPE pykubelet_bus_connected gauge
pykubelet_bus_connected 1.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 5.0e+07
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
# HELP python_gc_collections_total Number of times this generation was collected
# TYPE python_gc_collections_total counter
python_gc_collections_total{generation="0"} 100.0
'''

PROBE = r'''# HELP kubelet_runtime_operations_total Cumulative number of runtime operations by operation type.
# TYPE kubelet_runtime_operations_total counter
kubelet_runtime_operations_total{operation_type="list_pod_sandbox"} 7.0
kubelet_runtime_operations_total{operation_type="exec_sync"} 3.0
# HELP kubelet_runtime_operations_created Cumulative number of runtime operations by operation type.
# TYPE kubelet_runtime_operations_created gauge
kubelet_runtime_operations_created{operation_type="list_pod_sandbox"} 1.6e+09
kubelet_runtime_operations_created{operation_type="exec_sync"} 1.8e+09
# HELP kubelet_runtime_operations_duration_seconds Duration in seconds of runtime operations.
# TYPE kubelet_runtime_operations_duration_seconds histogram
kubelet_runtime_operations_duration_seconds_bucket{le="0.1",operation_type="list_pod_sandbox"} 1.0
kubelet_runtime_operations_duration_seconds_bucket{le="1.0",operation_type="list_pod_sandbox"} 6.0
kubelet_runtime_operations_duration_seconds_bucket{le="+Inf",operation_type="list_pod_sandbox"} 7.0
kubelet_runtime_operations_duration_seconds_count{operation_type="list_pod_sandbox"} 7.0
kubelet_runtime_operations_duration_seconds_sum{operation_type="list_pod_sandbox"} 4.25
# HELP kubelet_runtime_operations_duration_seconds_created Duration in seconds of runtime operations.
# TYPE kubelet_runtime_operations_duration_seconds_created gauge
kubelet_runtime_operations_duration_seconds_created{operation_type="list_pod_sandbox"} 1.9e+09
# HELP prober_probe_total Cumulative number of a liveness, readiness or startup probe for a container by result.
# TYPE prober_probe_total counter
prober_probe_total{container="app",namespace="default",pod="web \"1\"\\x\ny",pod_uid="u1",probe_type="Readiness",result="successful"} 9.0
# HELP prober_probe_created Cumulative number of a liveness, readiness or startup probe for a container by result.
# TYPE prober_probe_created gauge
prober_probe_created{container="app",namespace="default",pod="web \"1\"\\x\ny",pod_uid="u1",probe_type="Readiness",result="successful"} 1.7e+09
# HELP pykubelet_bus_connected Whether this process is connected to the bus
# TYPE pykubelet_bus_connected gauge
pykubelet_bus_connected 0.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 4.0e+07
# HELP python_gc_collections_total Number of times this generation was collected
# TYPE python_gc_collections_total counter
python_gc_collections_total{generation="0"} 50.0
'''

OWN = '''# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.65e+09
'''


def parse_back(text: str) -> dict:
    """The families of an exposition, checking that no family and no sample appears twice."""
    families = list(text_string_to_metric_families(text))
    names = [f.name for f in families]
    assert len(names) == len(set(names)), names
    type_lines = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(type_lines) == len(set(type_lines)) == len(families)
    samples = [(s.name, tuple(sorted(s.labels.items()))) for f in families for s in f.samples]
    assert len(samples) == len(set(samples))
    return {f.name: f for f in families}


def value(families: dict, family: str, sample: str, **labels) -> float:
    found = [s.value for s in families[family].samples if s.name == sample and s.labels == labels]
    assert len(found) == 1, (sample, labels, families[family].samples)
    return found[0]


def merged() -> dict:
    text = merge_expositions({"pod-sync": POD_SYNC, "probe": PROBE,
                              "volume": ScrapeError("GET http://127.0.0.1:10262/metrics: refused")},
                             own=OWN)
    return parse_back(text)


def test_counters_in_several_services_are_summed_per_label_set():
    fams = merged()
    ops = fams["kubelet_runtime_operations"]
    assert ops.type == "counter"
    assert value(fams, "kubelet_runtime_operations", "kubelet_runtime_operations_total",
                 operation_type="list_pod_sandbox") == 12
    assert value(fams, "kubelet_runtime_operations", "kubelet_runtime_operations_total",
                 operation_type="run_pod_sandbox") == 2
    assert value(fams, "kubelet_runtime_operations", "kubelet_runtime_operations_total",
                 operation_type="exec_sync") == 3
    assert len(ops.samples) == 3
    created = "kubelet_runtime_operations_created"
    assert value(fams, created, created, operation_type="list_pod_sandbox") == 1.6e9  # the earliest
    assert value(fams, created, created, operation_type="exec_sync") == 1.8e9


def test_histograms_in_several_services_are_summed_bucket_by_bucket():
    fams = merged()
    name = "kubelet_runtime_operations_duration_seconds"
    assert fams[name].type == "histogram"
    lps = {"operation_type": "list_pod_sandbox"}
    assert value(fams, name, name + "_bucket", le="0.1", **lps) == 5
    assert value(fams, name, name + "_bucket", le="1.0", **lps) == 11
    assert value(fams, name, name + "_bucket", le="+Inf", **lps) == 12
    assert value(fams, name, name + "_count", **lps) == 12
    assert value(fams, name, name + "_sum", **lps) == 4.75
    assert value(fams, name + "_created", name + "_created", **lps) == 1.7e9


def test_a_family_of_one_service_passes_through_unchanged():
    fams = merged()
    source = {f.name: f for f in text_string_to_metric_families(PROBE)}
    for name in ("prober_probe", "prober_probe_created"):
        assert fams[name] == source[name]  # name, type, help and samples, escaped label values too
    assert fams["prober_probe"].samples[0].labels["pod"] == 'web "1"\\x\ny'
    pods = fams["kubelet_running_pods"]
    assert pods.type == "gauge" and [(s.labels, s.value) for s in pods.samples] == [({}, 3.0)]


def test_a_gauge_in_several_services_keeps_each_value_under_a_service_label():
    fams = merged()
    assert value(fams, "pykubelet_bus_connected", "pykubelet_bus_connected", service="pod-sync") == 1
    assert value(fams, "pykubelet_bus_connected", "pykubelet_bus_connected", service="probe") == 0
    assert len(fams["pykubelet_bus_connected"].samples) == 2


def test_per_process_families_come_only_from_the_node_api_itself():
    fams = merged()
    assert not [n for n in fams if n.startswith("python_")]
    assert [n for n in fams if n.startswith("process_")] == ["process_start_time_seconds"]
    assert value(fams, "process_start_time_seconds", "process_start_time_seconds") == 1.65e9


def test_service_up_says_which_services_were_scraped():
    fams = merged()
    up = {s.labels["service"]: s.value for s in fams["pykubelet_service_up"].samples}
    assert up == {"node-api": 1, "pod-sync": 1, "probe": 1, "volume": 0}
    assert fams["pykubelet_service_up"].type == "gauge"


def test_a_service_with_unparseable_metrics_counts_as_down_and_the_rest_is_served():
    text = merge_expositions({"pod-sync": POD_SYNC, "probe": "# TYPE x counter\nx{a=\"b} 1\n"})
    fams = parse_back(text)
    assert {s.labels["service"]: s.value for s in fams["pykubelet_service_up"].samples} == \
        {"pod-sync": 1, "probe": 0}
    assert value(fams, "kubelet_runtime_operations", "kubelet_runtime_operations_total",
                 operation_type="list_pod_sandbox") == 5
    assert "x" not in fams


def test_histograms_with_different_bounds_keep_only_the_common_ones():
    a = ('# TYPE h histogram\nh_bucket{le="0.1"} 1\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 3\n'
         'h_count 3\nh_sum 2\n')
    b = ('# TYPE h histogram\nh_bucket{le="1.0"} 4\nh_bucket{le="5.0"} 5\nh_bucket{le="+Inf"} 6\n'
         'h_count 6\nh_sum 9\n')
    fams = parse_back(merge_expositions({"a": a, "b": b}))
    buckets = {s.labels["le"]: s.value for s in fams["h"].samples if s.name == "h_bucket"}
    assert buckets == {"1": 6, "+Inf": 9}
    assert value(fams, "h", "h_count") == 9 and value(fams, "h", "h_sum") == 11


def test_a_gauge_with_its_own_service_label_keeps_it_as_exported_service():
    a = '# TYPE g gauge\ng{service="x"} 1\n'
    b = '# TYPE g gauge\ng 2\n'
    fams = parse_back(merge_expositions({"a": a, "b": b}))
    assert value(fams, "g", "g", service="a", exported_service="x") == 1
    assert value(fams, "g", "g", service="b") == 2


def test_a_family_with_different_types_is_kept_once():
    a = "# TYPE m_total counter\nm_total 1\n"
    b = "# TYPE m gauge\nm 2\n"
    c = "# TYPE m_total gauge\nm_total 3\n"
    fams = parse_back(merge_expositions({"a": a, "b": b, "c": c}))
    assert fams["m"].type == "counter" and value(fams, "m", "m_total") == 1


def test_the_node_api_cannot_also_be_a_scraped_service():
    with pytest.raises(ValueError):
        merge_expositions({"node-api": OWN}, own=OWN)


def test_probes_view_has_the_prober_counter_and_the_start_time():
    text = merge_expositions({"pod-sync": POD_SYNC, "probe": PROBE}, own=OWN)
    fams = parse_back(filter_families(text, PROBES_FAMILIES))
    assert set(fams) == {"prober_probe", "prober_probe_created", "process_start_time_seconds"}
    source = {f.name: f for f in text_string_to_metric_families(PROBE)}
    assert fams["prober_probe"] == source["prober_probe"]


async def test_scrape_all_reports_services_that_are_down_or_slow():
    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.port == 1:
            return httpx.Response(200, text=POD_SYNC)
        if request.url.port == 2:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.port == 3:
            await asyncio.sleep(30)
        return httpx.Response(500, text="boom")

    targets = {name: f"http://127.0.0.1:{port}/metrics"
               for name, port in [("pod-sync", 1), ("probe", 2), ("volume", 3), ("network", 4)]}
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        started = time.monotonic()
        results = await scrape_all(targets, client, timeout=0.2)
    assert time.monotonic() - started < 2
    assert list(results) == list(targets)
    assert results["pod-sync"] == POD_SYNC
    assert isinstance(results["probe"], ScrapeError)
    assert isinstance(results["probe"].__cause__, httpx.ConnectError)
    assert isinstance(results["volume"], ScrapeError) and "0.2s" in str(results["volume"])
    assert isinstance(results["network"], ScrapeError) and "500" in str(results["network"])

    fams = parse_back(merge_expositions(results))
    assert {s.labels["service"]: s.value for s in fams["pykubelet_service_up"].samples} == \
        {"pod-sync": 1, "probe": 0, "volume": 0, "network": 0}
