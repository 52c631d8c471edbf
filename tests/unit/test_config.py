import argparse

import pytest

from shared.config.settings import ConfigError, add_node_flags, load_kubelet_config, settings_from_args
from shared.model.durations import format_duration, parse_duration


def parse(argv):
    p = argparse.ArgumentParser()
    add_node_flags(p)
    return settings_from_args(p.parse_args(argv))


def test_defaults_are_the_kubelets():
    cfg, ignored = load_kubelet_config({})
    assert cfg.sync_frequency == 60
    assert cfg.file_check_frequency == 20
    assert cfg.max_pods == 110
    assert cfg.container_runtime_endpoint == "unix:///run/containerd/containerd.sock"
    assert cfg.static_pod_path == ""
    assert cfg.cluster_dns == []
    assert cfg.crash_loop_back_off.max_container_restart_period == 300
    assert ignored == []


def test_file_values_and_flag_precedence(tmp_path):
    f = tmp_path / "kubelet.yaml"
    f.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                 "maxPods: 20\nsyncFrequency: 1m30s\nstaticPodPath: manifests\nclusterDNS: [10.0.0.10]\n")
    s = parse(["--config", str(f), "--max-pods", "7", "--root-dir", str(tmp_path / "root")])
    assert s.kubelet.max_pods == 7                 # flag wins
    assert s.kubelet.sync_frequency == 90           # file value
    assert s.kubelet.cluster_dns == ["10.0.0.10"]
    # relative paths in the file are relative to the file, as with the kubelet
    assert s.kubelet.static_pod_path == str(tmp_path / "manifests")
    assert s.store_path == tmp_path / "root" / "state.db"


def test_unknown_field_is_an_error_naming_it():
    with pytest.raises(ConfigError, match="maxPodz: unknown field"):
        load_kubelet_config({"maxPodz": 3})


@pytest.mark.parametrize("field,value,needle", [
    ("maxPods", -1, "maxPods: must be at least 1"),  # 0 is the default (shared/config/defaults.py)
    ("syncFrequency", "soon", "syncFrequency: invalid duration 'soon'"),
    ("podCIDR", "10.0.0.0/33", "podCIDR: not a CIDR"),
    ("clusterDNS", ["dns.local"], "clusterDNS: 'dns.local' is not an IP address"),
    ("containerRuntimeEndpoint", "/run/containerd.sock", "containerRuntimeEndpoint: must be a unix socket URL"),
    ("kind", "Kubelet", "kind: must be 'KubeletConfiguration'"),
])
def test_bad_values_name_the_field(field, value, needle):
    with pytest.raises(ConfigError) as exc:
        load_kubelet_config({field: value})
    assert needle in str(exc.value)


def test_unimplemented_fields_at_the_kubelets_default_are_accepted_and_reported():
    cfg, at_default = load_kubelet_config({"cgroupsPerQOS": True, "volumePluginDir": "/usr/libexec/kubernetes/"
                                                                                   "kubelet-plugins/volume/exec/"})
    assert at_default == ["cgroupsPerQOS", "volumePluginDir"]


def test_pods_per_core_caps_the_pod_capacity_as_the_kubelets():
    assert load_kubelet_config({})[0].pod_capacity(2) == 110
    assert load_kubelet_config({"podsPerCore": 25})[0].pod_capacity(2) == 50
    assert load_kubelet_config({"podsPerCore": 25, "maxPods": 40})[0].pod_capacity(2) == 40
    assert load_kubelet_config({"podsPerCore": 0, "maxPods": 40})[0].pod_capacity(64) == 40
    with pytest.raises(ConfigError, match=r"podsPerCore \(--pods-per-core\) -1 must not be a negative number"):
        load_kubelet_config({"podsPerCore": -1})


def test_oom_score_adj_and_max_open_files_take_the_kubelets_defaults_and_words():
    cfg, _ = load_kubelet_config({})
    assert (cfg.oom_score_adj, cfg.max_open_files) == (-999, 1000000)
    cfg, _ = load_kubelet_config({"oomScoreAdj": 0, "maxOpenFiles": 0})  # 0 files: the default, as the kubelet
    assert (cfg.oom_score_adj, cfg.max_open_files) == (0, 1000000)
    for data, needle in (({"oomScoreAdj": 1001}, "oomScoreAdj (--oom-score-adj) 1001 must be between -1000 and 1000"),
                         ({"maxOpenFiles": -1}, "maxOpenFiles (--max-open-files) -1 must not be a negative number"),
                         ({"maxOpenFiles": 100}, "maxOpenFiles (--max-open-files) 100 is below 1024")):
        with pytest.raises(ConfigError) as exc:
            load_kubelet_config(data)
        assert needle in str(exc.value)


def test_configurable_crash_loop_back_off():
    cfg, _ = load_kubelet_config({"crashLoopBackOff": {"maxContainerRestartPeriod": "30s",
                                                       "initialContainerRestartPeriod": "1s"}})
    assert cfg.crash_loop_back_off.max_container_restart_period == 30
    assert cfg.crash_loop_back_off.initial_container_restart_period == 1


def test_missing_or_broken_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read kubelet config"):
        parse(["--config", str(tmp_path / "nope.yaml")])
    bad = tmp_path / "bad.yaml"
    bad.write_text("maxPods: [1\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse(["--config", str(bad)])


@pytest.mark.parametrize("text,seconds", [("20s", 20), ("1m0s", 60), ("1h2m3s", 3723), ("500ms", 0.5),
                                          ("1.5s", 1.5), ("0", 0)])
def test_go_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_format_duration_round_trips():
    for s in (20, 60, 90, 3723):
        assert parse_duration(format_duration(s)) == s


def test_node_pod_cidr_wins_over_the_configured_one():
    from services.network.readiness import choose_pod_cidr

    assert choose_pod_cidr("10.1.0.0/24", "10.88.0.0/24") == "10.1.0.0/24"
    assert choose_pod_cidr("", "10.88.0.0/24") == "10.88.0.0/24"


def test_kubelet_api_defaults_are_the_secure_ones():
    cfg, _ = load_kubelet_config({})
    assert (cfg.address, cfg.port, cfg.read_only_port) == ("0.0.0.0", 10250, 0)
    assert cfg.authentication.anonymous.enabled is False
    assert cfg.authentication.webhook.enabled is True and cfg.authentication.webhook.cache_ttl == 120
    assert cfg.authorization.mode == "Webhook"
    assert cfg.authorization.webhook.cache_authorized_ttl == 300
    assert cfg.authorization.webhook.cache_unauthorized_ttl == 30


@pytest.mark.parametrize("data,needle", [
    ({"authorization": {"mode": "RBAC"}}, "authorization.mode"),
    ({"authentication": {"x509": {"clientCAfile": "/ca"}}}, "authentication.x509.clientCAfile: unknown field"),
    ({"port": 70000}, "port"),
    ({"address": "any"}, "address: 'any' is not an IP address"),
    ({"tlsMinVersion": "TLS1.2"}, "tlsMinVersion: must be one of"),
    ({"tlsCipherSuites": ["TLS_RSA_WITH_RC4_128_SHA"]}, "tlsCipherSuites: unknown or insecure"),
    ({"authentication": {"webhook": {"cacheTTL": "soon"}}}, "authentication.webhook.cacheTTL"),
])
def test_kubelet_api_fields_are_validated(data, needle):
    with pytest.raises(ConfigError) as exc:
        load_kubelet_config(data)
    assert needle in str(exc.value)


def test_tls_and_ca_paths_are_relative_to_the_config_file(tmp_path):
    f = tmp_path / "kubelet.yaml"
    f.write_text("tlsCertFile: pki/k.crt\ntlsPrivateKeyFile: pki/k.key\n"
                 "authentication:\n  x509:\n    clientCAFile: pki/ca.crt\n")
    s = parse(["--config", str(f)])
    assert s.kubelet.tls_cert_file == str(tmp_path / "pki/k.crt")
    assert s.kubelet.authentication.x509.client_ca_file == str(tmp_path / "pki/ca.crt")


def test_node_ip_flag_is_checked_and_detection_never_guesses(monkeypatch):
    import argparse

    import pytest

    from shared.config.settings import ConfigError, add_node_flags, settings_from_args
    from shared.host import facts as host

    parser = argparse.ArgumentParser()
    add_node_flags(parser)
    assert host.node_address(settings_from_args(parser.parse_args(["--node-ip", "192.0.2.7"])).node_ip) == "192.0.2.7"
    with pytest.raises(ConfigError, match="--node-ip: 'eth0' is not an IP address"):
        settings_from_args(parser.parse_args(["--node-ip", "eth0"]))

    def no_route(*args, **kwargs):
        raise OSError("ip: not found")

    monkeypatch.setattr(host.subprocess, "run", no_route)
    settings = settings_from_args(parser.parse_args([]))
    with pytest.raises(host.NodeIPError, match="pass --node-ip ADDRESS"):
        host.node_address(settings.node_ip)


def test_merge_default_eviction_settings_fills_the_signals_the_file_leaves_out(tmp_path):
    f = tmp_path / "config.yaml"
    f.write_text("evictionHard:\n  memory.available: 500Mi\nmergeDefaultEvictionSettings: true\n")
    hard = parse(["--config", str(f), "--root-dir", str(tmp_path / "root")]).kubelet.eviction_hard
    assert hard == {"memory.available": "500Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
                    "imagefs.available": "15%", "imagefs.inodesFree": "5%"}
    f.write_text("evictionHard:\n  memory.available: 500Mi\n")  # the default, false: the file's map alone
    assert parse(["--config", str(f), "--root-dir", str(tmp_path / "root")]).kubelet.eviction_hard == \
        {"memory.available": "500Mi"}
    f.write_text("evictionHard:\n  memory.available: 500Mi\nmergeDefaultEvictionSettings: true\n")
    flagged = parse(["--config", str(f), "--eviction-hard", "memory.available<300Mi", "--root-dir",
                     str(tmp_path / "root")]).kubelet.eviction_hard
    assert flagged == {"memory.available": "300Mi"}, "a flag replaces the merged map, as the kubelet's"
