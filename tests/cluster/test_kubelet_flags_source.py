"""shared/config/flags.py and shared/config/feature_gates.py against the kubelet's own source: the source
of the Kubernetes the tests' control plane is built from (`make kube` downloads it into the Go
module cache). Every flag the kubelet registers is in pykubelet's table, the table has no flag the
kubelet lacks, and the feature gate table is what the source declares."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared.config.flags import BY_NAME
from tests.cluster.harness import CACHE, KUBE_VERSION, ensure_kube_binaries

REPO = Path(__file__).resolve().parents[2]

MODULES = CACHE / "gomod" / "k8s.io"
# fs.StringVar(&x, "name", ...), fs.Var(v, "name", ...), fs.VarP(v, "v", "v", ...)
REGISTERED = re.compile(r'\bfs\.\w*Var\w*\((?:[^"\n]*?), "([a-z0-9-]+)"')
# Registered through other packages: cadvisor's housekeeping interval and the logs flush period.
BY_OTHERS = {"housekeeping-interval", "log-flush-frequency"}


def _source(path: str) -> str:
    ensure_kube_binaries()  # the build downloads the sources
    f = MODULES / path
    if not f.is_file():
        pytest.fail(f"{f} is missing: `make kube` downloads the Kubernetes {KUBE_VERSION} sources into the Go module "
                    "cache (PYKUBELET_CACHE)")
    return f.read_text()


def test_every_kubelet_flag_is_in_the_table_and_no_other():
    minor = KUBE_VERSION.split(".", 1)[1]
    kubelet = set(REGISTERED.findall(_source(f"kubernetes@v{KUBE_VERSION}/cmd/kubelet/app/options/options.go")))
    logging_ = set(REGISTERED.findall(_source(f"component-base@v0.{minor}/logs/api/v1/options.go")))
    assert len(kubelet) > 100 and {"v", "vmodule", "logging-format"} <= logging_  # the pattern still finds them
    assert sorted(kubelet - set(BY_NAME)) == [], "kubelet flags missing from shared/config/flags.py"
    assert sorted(logging_ - set(BY_NAME)) == [], "logging flags missing from shared/config/flags.py"
    assert sorted(set(BY_NAME) - kubelet - logging_ - BY_OTHERS) == [], "flags the kubelet does not have"


def test_the_feature_gate_table_is_the_kubelets():
    from tests import feature_gates_source

    ensure_kube_binaries()  # the build downloads the sources
    try:
        gates = feature_gates_source.kubelet_gates()
    except FileNotFoundError as exc:
        pytest.fail(str(exc))
    assert len(gates) > 200
    assert (REPO / "shared" / "config" / "feature_gates.py").read_text() == feature_gates_source.render(gates), \
        "shared/config/feature_gates.py is out of date: .venv/bin/python -m tests.feature_gates_source > shared/config/feature_gates.py"
