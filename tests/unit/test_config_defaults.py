"""A zero the kubelet reads as its default (shared/config/defaults.py), shown on the config file
kubeadm 1.37 writes: tests/unit/data/kubeadm-1.37-kubelet-config.yaml is the output of
`kubeadm config print init-defaults --component-configs KubeletConfiguration` of kubeadm 1.37.2
(deploy/build-kube.sh kubeadm), the KubeletConfiguration document only."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.config.defaults import ZERO_IS_DEFAULT
from shared.config.settings import load_kubelet_config, safe_yaml

KUBEADM = Path(__file__).parent / "data" / "kubeadm-1.37-kubelet-config.yaml"


def kubeadm_config() -> dict:
    return safe_yaml.load(KUBEADM.read_text())


def test_kubeadms_config_is_taken_whole():
    config = load_kubelet_config(kubeadm_config(), str(KUBEADM))[0]
    assert config.cgroup_driver == "systemd"


def test_kubeadms_zeros_are_the_kubelets_defaults():
    data = {**kubeadm_config(), "cgroupDriver": "cgroupfs"}
    effective = load_kubelet_config(data)[0].model_dump(by_alias=True)
    defaults = load_kubelet_config({})[0].model_dump(by_alias=True)
    # What kubeadm sets on purpose; everything else is the default, the zeros included.
    assert effective["authentication"]["x509"]["clientCAFile"] == "/etc/kubernetes/pki/ca.crt"
    assert effective["clusterDNS"] == ["10.96.0.10"] and effective["clusterDomain"] == "cluster.local"
    assert effective["staticPodPath"] == "/etc/kubernetes/manifests"
    differs = sorted(k for k in defaults if effective[k] != defaults[k])
    assert differs == ["authentication", "clusterDNS", "clusterDomain", "rotateCertificates", "staticPodPath"]
    assert effective["runtimeRequestTimeout"] == 120.0 and effective["syncFrequency"] == 60.0
    assert effective["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"


@pytest.mark.parametrize("name", ZERO_IS_DEFAULT)
def test_each_zero_is_the_default(name):
    *parents, leaf = name.split(".")
    defaults = load_kubelet_config({})[0]
    for zero in ("", 0, "0s", None):
        data: dict = {}
        section = data
        for p in parents:
            section = section.setdefault(p, {})
        section[leaf] = zero
        assert load_kubelet_config(data)[0] == defaults, (name, zero)


def test_a_zero_that_is_a_value_stays_one():
    """eventRecordQPS is a pointer in the kubelet: 0 there means no limit, not the default 50."""
    assert load_kubelet_config({"eventRecordQPS": 0})[0].event_record_qps == 0


def test_the_report_frequency_follows_the_update_frequency_when_unset():
    assert load_kubelet_config({"nodeStatusUpdateFrequency": "20s"})[0].node_status_report_frequency == 20.0
    assert load_kubelet_config({"nodeStatusUpdateFrequency": "20s", "nodeStatusReportFrequency": "0s"})[0] \
        .node_status_report_frequency == 20.0
    assert load_kubelet_config({})[0].node_status_report_frequency == 300.0
