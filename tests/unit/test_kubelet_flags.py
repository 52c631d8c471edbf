"""The kubelet's command line (shared/config/flags.py): each flag sets what the same field of a
config file sets, or is refused by name; values parse as the kubelet's pflag values do."""

from __future__ import annotations

import argparse
import logging

import pytest

from shared.config.flags import FLAGS, forwarded_argv
from shared.config.refused import FIELDS, REFUSED
from shared.config.settings import ConfigError, add_node_flags, settings_from_args
from shared.process.service import service_main


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(allow_abbrev=False)
    add_node_flags(p)
    return p


def from_flags(*argv: str):
    return settings_from_args(parser().parse_args(list(argv)))


def from_file(tmp_path, text: str):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    return settings_from_args(parser().parse_args(["--config", str(cfg)]))


def test_every_configuration_flag_sets_a_field_of_kubelet_configuration_1_37():
    tops = {f.field.split(".")[0] for f in FLAGS if f.field}
    assert tops <= set(FIELDS)
    assert len({f.name for f in FLAGS}) == len(FLAGS)


# The flags the kubelet seed guides and installers pass, beside the config file text that
# means the same to the kubelet.
SEEDS = [
    (["--system-reserved=cpu=200m,memory=500Mi"], "systemReserved: {cpu: 200m, memory: 500Mi}\n"),
    (["--kube-reserved", "cpu=100m", "--kube-reserved", "memory=1Gi"], "kubeReserved: {cpu: 100m, memory: 1Gi}\n"),
    (["--eviction-hard=memory.available<200Mi,nodefs.available<5%"],
     "evictionHard: {memory.available: 200Mi, nodefs.available: 5%}\n"),
    (["--eviction-soft=memory.available<300Mi", "--eviction-soft-grace-period=memory.available=1m30s"],
     "evictionSoft: {memory.available: 300Mi}\nevictionSoftGracePeriod: {memory.available: 1m30s}\n"),
    (["--protect-kernel-defaults"], "protectKernelDefaults: true\n"),
    (["--fail-swap-on=false"], "failSwapOn: false\n"),
    (["--max-pods", "42", "--pod-max-pids=1024"], "maxPods: 42\npodPidsLimit: 1024\n"),
    (["--cluster-dns=10.96.0.10,10.96.0.11", "--cluster-domain=cluster.test"],
     "clusterDNS: [10.96.0.10, 10.96.0.11]\nclusterDomain: cluster.test\n"),
    (["--register-with-taints=dedicated=infra:NoSchedule,gpu:PreferNoSchedule"],
     "registerWithTaints:\n- {key: dedicated, value: infra, effect: NoSchedule}\n- {key: gpu, effect: PreferNoSchedule}\n"),
    (["--anonymous-auth=false", "--authorization-mode=Webhook", "--authentication-token-webhook"],
     "authentication: {anonymous: {enabled: false}, webhook: {enabled: true}}\nauthorization: {mode: Webhook}\n"),
    (["--tls-min-version=VersionTLS13", "--event-qps=5", "--streaming-connection-idle-timeout=5m"],
     "tlsMinVersion: VersionTLS13\neventRecordQPS: 5\nstreamingConnectionIdleTimeout: 5m\n"),
    (["--v=4", "--logging-format=json"], "logging: {verbosity: 4, format: json}\n"),
    (["--image-gc-high-threshold=90", "--image-gc-low-threshold=70", "--serialize-image-pulls=false"],
     "imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 70\nserializeImagePulls: false\n"),
]


@pytest.mark.parametrize(("argv", "text"), SEEDS, ids=[" ".join(a) for a, _ in SEEDS])
def test_a_flag_sets_what_the_same_field_of_the_config_file_sets(tmp_path, argv, text):
    assert from_flags(*argv).kubelet == from_file(tmp_path, text).kubelet


def test_a_flag_wins_over_the_file_and_replaces_its_whole_map(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("maxPods: 20\nsystemReserved: {cpu: 1, memory: 1Gi}\nauthentication: {webhook: {enabled: true}}\n")
    s = settings_from_args(parser().parse_args(["--config", str(cfg), "--max-pods=30", "--system-reserved=cpu=2",
                                                "--anonymous-auth=false"]))
    assert s.kubelet.max_pods == 30
    assert s.kubelet.system_reserved == {"cpu": "2"}
    # A flag on one nested field leaves the file's others.
    assert s.kubelet.authentication.webhook.enabled and not s.kubelet.authentication.anonymous.enabled


@pytest.mark.parametrize(("argv", "named"), [
    (["--system-cgroups=/custom"], "--system-cgroups: systemCgroups: \"/custom\" is not implemented by pykubelet"),
    (["--feature-gates=InPlacePodVerticalScaling=false"],
     "featureGates: cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true "
     "(--feature-gates sets featureGates)"),
    (["--lock-file=/var/run/kubelet.lock"], "--lock-file=/var/run/kubelet.lock is not implemented by pykubelet"),
    (["--cloud-provider=external"], "--cloud-provider=external is not implemented by pykubelet"),
    (["--maximum-dead-containers=10"], "--maximum-dead-containers=10 is not implemented"),
    (["--vmodule=pod*=4"], "per-file verbosity is not implemented by pykubelet"),
])
def test_a_refused_flag_stops_the_start_naming_it(argv, named):
    with pytest.raises(ConfigError) as exc:
        from_flags(*argv)
    assert named in str(exc.value)


def test_a_refused_flag_at_the_kubelets_default_is_accepted():
    s = from_flags("--system-cgroups=", "--maximum-dead-containers=-1", "--cloud-provider=",
                   "--log-text-split-stream=false", "--cgroup-driver=systemd")
    assert "systemCgroups" in s.at_default_fields
    assert s.kubelet.cgroup_driver == "systemd"


@pytest.mark.parametrize(("argv", "named"), [
    (["--max-pods=many"], "--max-pods: 'many' is not an integer"),
    (["--fail-swap-on=maybe"], "--fail-swap-on: 'maybe' is not a boolean"),
    (["--eviction-hard=memory.available=1Gi"], "--eviction-hard: 'memory.available=1Gi' is not of the form KEY<VALUE"),
    (["--system-reserved=cpu"], "--system-reserved: 'cpu' is not of the form KEY=VALUE"),
    (["--register-with-taints=dedicated"], "--register-with-taints: 'dedicated' is not of the form KEY[=VALUE]:EFFECT"),
    (["--eviction-hard=memory.available<lots"], "evictionHard[memory.available]: 'lots' is not a quantity"),
    (["--register-with-taints=k=v:Sometimes"], "--register-with-taints sets registerWithTaints"),
])
def test_a_bad_flag_value_is_an_error_naming_the_flag(argv, named):
    with pytest.raises(ConfigError) as exc:
        from_flags(*argv)
    assert named in str(exc.value)


def test_node_labels_outside_the_kubelets_namespaces_only():
    s = from_flags("--node-labels=example.com/pool=blue,node.kubernetes.io/instance-type=small",
                   "--node-labels", "kubelet.kubernetes.io/role=edge")
    assert s.node_labels == {"example.com/pool": "blue", "node.kubernetes.io/instance-type": "small",
                             "kubelet.kubernetes.io/role": "edge"}
    with pytest.raises(ConfigError, match="--node-labels: node-role.kubernetes.io/worker=: 'node-role.kubernetes.io/"
                                          "worker' is in the 'kubernetes.io' or 'k8s.io' namespace"):
        from_flags("--node-labels=node-role.kubernetes.io/worker=")
    with pytest.raises(ConfigError, match="--node-labels: example.com/pool=a b: 'a b' is not a valid label value"):
        from_flags("--node-labels=example.com/pool=a b")


def test_cert_dir_is_where_the_serving_certificate_is_kept(tmp_path):
    assert from_flags("--root-dir", str(tmp_path)).cert_dir == tmp_path / "pki"
    assert from_flags("--root-dir", str(tmp_path), "--cert-dir", str(tmp_path / "certs")).cert_dir == tmp_path / "certs"


def test_no_abbreviations_and_unknown_flags_are_errors(capsys):
    # `--container-runtime=remote` (removed from the kubelet in 1.27) is no prefix of another flag.
    for argv in (["--container-runtime=remote"], ["--eviction-har=memory.available<1Gi"]):
        with pytest.raises(SystemExit) as exc:
            service_main("probe", lambda ctx: None, argv)  # type: ignore[arg-type,return-value]
        assert exc.value.code == 2
        assert f"unrecognized arguments: {argv[0]}" in capsys.readouterr().err


def test_configuration_flags_print_the_kubelets_deprecation_notice(caplog):
    with caplog.at_level(logging.WARNING, logger="pykubelet.flags"):
        from_flags("--system-reserved=cpu=1", "--provider-id=x://y", "--v=2")
    notices = [r.getMessage() for r in caplog.records]
    assert notices == ["Flag --system-reserved has been deprecated, This parameter should be set via the config file "
                       "specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-"
                       "cluster/kubelet-config-file/ for more information."]


def test_the_flags_handed_to_a_service_read_back_the_same(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = parser().parse_args(["--system-reserved=cpu=1", "--system-reserved=memory=1Gi", "--resolv-conf=resolv.conf",
                                "--fail-swap-on", "--node-labels=example.com/a=b", "--cert-dir=pki2",
                                "--hostname-override=n1"])
    (tmp_path / "resolv.conf").write_text("nameserver 192.0.2.53\n")
    argv = forwarded_argv(args, skip=frozenset({"hostname-override"}))
    assert "--hostname-override=n1" not in argv
    assert f"--resolv-conf={tmp_path / 'resolv.conf'}" in argv and f"--cert-dir={tmp_path / 'pki2'}" in argv
    first = settings_from_args(args)
    monkeypatch.chdir("/")  # a service started by systemd
    again = settings_from_args(parser().parse_args(argv))
    assert again.kubelet == first.kubelet and again.node_labels == first.node_labels
    assert again.cert_dir == first.cert_dir == tmp_path / "pki2"


def test_version_prints_the_kubelet_version(capsys):
    assert service_main("probe", lambda ctx: None, ["--version"]) == 0  # type: ignore[arg-type,return-value]
    assert capsys.readouterr().out == "Kubernetes v1.37.2-pykubelet\n"


def test_every_refused_field_is_refused_through_its_flag_too():
    for f in FLAGS:
        if f.field and f.field in REFUSED and f.kind == "bool":
            default = REFUSED[f.field].default
            other = "false" if default else "true"
            with pytest.raises(ConfigError, match=f"--{f.name}: {f.field}:"):
                from_flags(f"--{f.name}={other}")


def test_the_start_names_each_field_that_changes_nothing(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        from_file(tmp_path, "showHiddenMetricsForVersion: \"1.36\"\n")
    assert ("config field showHiddenMetricsForVersion is set but changes nothing, as in the kubelet 1.37: no metric of "
            "the kubelet 1.37, nor of pykubelet, is hidden") in caplog.text
