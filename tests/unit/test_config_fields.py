"""Every KubeletConfiguration field of Kubernetes 1.37 is implemented or refused, never ignored:
a refused field is accepted at the kubelet's default only, and any other value stops the start
naming the field (shared/config/refused.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared.config.feature_gates import GATES
from shared.config.flags import FLAGS
from shared.config.refused import FIELDS as FIELDS_1_37
from shared.config.refused import REFUSED
from shared.config.settings import ConfigError, KubeletConfiguration, load_kubelet_config
from tests import config_fields_doc

REPO = Path(__file__).resolve().parents[2]


def implemented() -> set[str]:
    return {f.alias or name for name, f in KubeletConfiguration.model_fields.items()} - {"apiVersion", "kind"}


def test_every_field_of_1_37_is_implemented_or_refused_and_none_is_both():
    assert len(FIELDS_1_37) == len(set(FIELDS_1_37)) == 126
    assert set(FIELDS_1_37) - implemented() - set(REFUSED) == set(), "fields in neither state"
    assert implemented() & set(REFUSED) == set(), "fields in both states"
    assert set(REFUSED) - set(FIELDS_1_37) == set(), "refused fields the kubelet 1.37 does not have"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_refused_field_at_its_default_is_accepted(name):
    default = REFUSED[name].default
    _, at_default = load_kubelet_config({name: default})
    assert at_default == [name]


@pytest.mark.parametrize("name,value", [
    ("systemCgroups", "/custom"), ("cgroupsPerQOS", False),
    ("enableContentionProfiling", True), ("enableControllerAttachDetach", False),
])
def test_a_refused_field_at_another_value_stops_the_start_naming_it(name, value):
    with pytest.raises(ConfigError) as exc:
        load_kubelet_config({name: value, "maxPods": 10})
    message = str(exc.value)
    assert message.startswith(f"invalid kubelet config (inline): {name}: ")
    assert "is not implemented by pykubelet (" + REFUSED[name].instead in message
    assert "remove the field or set it to the kubelet's default" in message


def test_every_refused_field_is_named_at_once_in_the_files_spelling():
    with pytest.raises(ConfigError) as exc:
        load_kubelet_config({"systemCgroups": "/custom", "cgroupsPerQOS": False})
    assert ('systemCgroups: "/custom" is not implemented' in str(exc.value)
            and "cgroupsPerQOS: false is not implemented" in str(exc.value))
    assert "set it to the kubelet's default (\"\")" in str(exc.value)


def test_feature_gates_at_the_kubelets_default_are_accepted_and_others_refused_by_name():
    """Every gate of the kubelet 1.37 (shared/config/feature_gates.py, checked against the source in
    tests/cluster/test_kubelet_flags_source.py) at its default; otherwise the kubelet's words."""
    at_default = {name: default for name, (default, _) in GATES.items()}
    assert load_kubelet_config({"featureGates": at_default})[0].feature_gates == at_default
    with pytest.raises(ConfigError) as exc:
        load_kubelet_config({"featureGates": {"InPlacePodVerticalScaling": False, "NoSuchGate": True,
                                              "AtomicWriteVolumeUserFields": True}})
    assert str(exc.value) == (
        "invalid kubelet config (inline): featureGates: AtomicWriteVolumeUserFields=true is not implemented by "
        "pykubelet (it runs with AtomicWriteVolumeUserFields at the kubelet's default, false); remove it; cannot set "
        "feature gate InPlacePodVerticalScaling to false, feature is locked to true; unrecognized feature gate: "
        "NoSuchGate")
    assert load_kubelet_config({"featureGates": None})[0].feature_gates == {}


@pytest.mark.parametrize("name,value", [
    ("cgroupsPerQOS", None), ("enableContentionProfiling", None),
])
def test_the_default_in_another_spelling_is_the_default(name, value):
    assert load_kubelet_config({name: value})[1] == [name]


@pytest.mark.parametrize(("config", "error"), [
    ({"runOnce": True}, "runOnce: invalid configuration: runOnce (--runOnce) true, Runonce mode has been deprecated and "
                        "should not be set"),
    ({"defaultPodSysctls": {"net.ipv4.ip_unprivileged_port_start": "0"}},
     "defaultPodSysctls: invalid configuration: DefaultPodSysctls feature gate is required for Kubelet configuration "
     "option defaultPodSysctls"),
    ({"qosReserved": {"cpu": "10%"}}, 'qosReserved: --qos-reserved value failed to parse: cannot reserve "cpu" resource'),
    ({"qosReserved": {"memory": "150%"}}, 'failed to parse percentage "150%" for "memory" resource: percentage must be '
                                          "between 0 and 100"),
    ({"qosReserved": {"memory": "half"}}, "percentage expected, got 'half'"),
    ({"qosReserved": {"memory": "a%"}}, "invalid number in percentage 'a%'"),
])
def test_fields_of_the_kubelets_default_feature_gates_are_checked_as_it_checks_them(config, error):
    """runOnce and defaultPodSysctls are refused by the kubelet 1.37 at its default gates;
    qosReserved is parsed, then unused (QOSReserved is off): the same here, in its words."""
    with pytest.raises(ConfigError) as exc:
        load_kubelet_config(config)
    assert error in str(exc.value)
    k, at_default = load_kubelet_config({"runOnce": False, "defaultPodSysctls": {}, "qosReserved": {"memory": "50%"}})
    assert (k.run_once, k.default_pod_sysctls, k.qos_reserved, at_default) == (False, {}, {"memory": "50%"}, [])


@pytest.mark.parametrize("name,value", [
    ("cgroupsPerQOS", 1), ("runOnce", 0), ("failSwapOn", "yes"), ("cpuCFSQuota", 1),
    ("cpuManagerReconcilePeriod", "soon"), ("shutdownGracePeriodByPodPriority", {}),
])
def test_a_value_that_only_looks_like_the_default_is_refused(name, value):
    with pytest.raises(ConfigError, match=f"{name}: "):
        load_kubelet_config({name: value})


def test_the_image_service_endpoint_is_a_unix_socket_or_the_runtimes():
    assert load_kubelet_config({"imageServiceEndpoint": "unix:///run/images.sock"})[0].image_service_endpoint == \
        "unix:///run/images.sock"
    assert load_kubelet_config({})[0].image_service_endpoint == ""
    for bad in ("tcp://10.0.0.1:1234", "/run/images.sock", "unix://"):
        with pytest.raises(ConfigError, match="imageServiceEndpoint: must be a unix socket URL"):
            load_kubelet_config({"imageServiceEndpoint": bad})


def test_the_docs_table_is_what_the_code_says():
    doc = REPO / "docs" / "kubelet-config-fields.md"
    assert doc.read_text() == config_fields_doc.render(), \
        "docs/kubelet-config-fields.md is out of date: .venv/bin/python -m tests.config_fields_doc > " \
        "docs/kubelet-config-fields.md"
    rows = [line for line in doc.read_text().splitlines() if line.startswith("| `")]
    assert len([r for r in rows if not r.startswith("| `--")]) == len(FIELDS_1_37)
    assert len([r for r in rows if r.startswith("| `--")]) == len(FLAGS)


def test_every_test_the_table_names_exists():
    named = {t for _, t in config_fields_doc.TESTS.values() if t} | {config_fields_doc.REFUSED_TEST}
    assert set(config_fields_doc.TESTS) <= implemented()
    for node_id in sorted(named):
        path, name = node_id.split("::")
        assert f"def {name}(" in (REPO / path).read_text(), f"{node_id} does not exist"


def test_the_cfs_quota_period_is_between_1ms_and_1s_as_the_kubelets():
    assert load_kubelet_config({"cpuCFSQuotaPeriod": "50ms"})[0].cpu_cfs_period_us == 50_000
    assert load_kubelet_config({})[0].cpu_cfs_period_us == 100_000
    for value, shown in (("2s", "2s"), ("500us", "500µs"), ("0s", "0s")):
        with pytest.raises(ConfigError, match=re.escape(
                f"invalid configuration: cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {shown} must be between 1ms "
                "and 1sec, inclusive")):
            load_kubelet_config({"cpuCFSQuotaPeriod": value})


def test_hairpin_mode_takes_the_kubelets_three_values():
    for mode in ("none", "hairpin-veth", "promiscuous-bridge"):
        assert load_kubelet_config({"hairpinMode": mode})[0].hairpin_mode == mode
    assert load_kubelet_config({"hairpinMode": ""})[0].hairpin_mode == "promiscuous-bridge", "empty: the default"
    with pytest.raises(ConfigError, match=re.escape(
            'invalid configuration: option "hairpin" specified for hairpinMode (--hairpin-mode). Valid options are '
            '"none", "hairpin-veth" or "promiscuous-bridge"')):
        load_kubelet_config({"hairpinMode": "hairpin"})


def test_without_local_storage_capacity_isolation_the_node_reports_no_ephemeral_storage(tmp_path):
    from shared.host.node_resources import node_capacity

    capacity, allocatable = node_capacity(str(tmp_path), 110)
    assert "ephemeral-storage" in capacity and "ephemeral-storage" in allocatable
    capacity, allocatable = node_capacity(str(tmp_path), 110, local_storage=False)
    assert set(capacity) == set(allocatable) == {"cpu", "memory", "pods"}
    assert load_kubelet_config({"localStorageCapacityIsolation": False})[0].local_storage_capacity_isolation is False


def test_show_hidden_metrics_for_version_is_checked_as_the_kubelet_checks_it():
    assert load_kubelet_config({"showHiddenMetricsForVersion": "1.36"})[0].show_hidden_metrics_for_version == "1.36"
    with pytest.raises(ConfigError) as exc:
        load_kubelet_config({"showHiddenMetricsForVersion": "1.35"})
    assert ('invalid showHiddenMetricsForVersion: showHiddenMetricsForVersion: Invalid value: "1.35": must be omitted '
            "or have the value '1.36'; only the previous minor version is allowed") in str(exc.value)


def test_a_refused_field_takes_too_the_value_that_is_what_pykubelet_does():
    """contentType: pykubelet speaks JSON to the API server, so asking for JSON asks for nothing else."""
    assert load_kubelet_config({"contentType": "application/json"})[1] == ["contentType"]
    with pytest.raises(ConfigError, match="contentType: \"application/yaml\" is not implemented by pykubelet"):
        load_kubelet_config({"contentType": "application/yaml"})


def test_a_field_that_changes_nothing_here_is_named_at_the_start_not_taken_silently():
    k, _ = load_kubelet_config({"qosReserved": {"memory": "50%"}, "iptablesDropBit": 20,
                                "topologyManagerPolicyOptions": {"prefer-closest-numa-nodes": "true"}})
    inert = k.inert_settings()
    assert [line.split(" ", 1)[0] for line in inert] == ["qosReserved", "topologyManagerPolicyOptions", "iptablesDropBit"]
    assert inert[0] == "qosReserved is set but changes nothing, as in the kubelet 1.37: its feature gate, QOSReserved, is off"
    assert load_kubelet_config({})[0].inert_settings() == []
