"""KubeletConfiguration `tracing`: the kubelet's validation of the endpoint and the sampling rate,
in its words, the defaults it fills in, and a node without it importing nothing of OpenTelemetry's
SDK (tests/cpu_manager/test_node_settings.py observes the spans of a node with it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shared.config.settings import ConfigError, load_kubelet_config

REPO = Path(__file__).resolve().parents[2]


def tracing(**fields):
    return load_kubelet_config({"tracing": fields})[0].tracing


def test_unset_fields_take_the_otlp_default_and_sample_nothing_new():
    t = tracing()
    assert (t.target, t.rate) == ("localhost:4317", 0.0)
    t = tracing(endpoint="unix:///run/otel/otlp.sock", samplingRatePerMillion=250)
    assert (t.target, t.rate) == ("unix:///run/otel/otlp.sock", 0.00025)
    assert load_kubelet_config({})[0].tracing is None


@pytest.mark.parametrize("endpoint", ["collector:4317", "dns:///collector.monitoring:4317", "unix:///run/otlp.sock",
                                      "unix-abstract://otlp", "[::1]:4317"])
def test_the_kubelets_endpoints_are_taken(endpoint):
    assert tracing(endpoint=endpoint).target == endpoint


@pytest.mark.parametrize(("fields", "message"), [
    ({"endpoint": "http://collector:4318"}, "unsupported scheme: http.  Options are none, dns, unix, or unix-abstract"),
    ({"endpoint": "dns://10.0.0.10/collector:4317"}, "names a DNS server"),
    ({"endpoint": "unix-abstract:otlp"}, "Invalid value: 'dns://unix-abstract:otlp'"),  # as Go's url.Parse
    ({"endpoint": "collector:4317\nevil"}, "whitespace or control characters"),
    ({"samplingRatePerMillion": -1}, "tracing.samplingRatePerMillion: Invalid value: -1: sampling rate must be positive"),
    ({"samplingRatePerMillion": 1_000_001}, "sampling rate per million must be less than or equal to one million"),
    ({"endpoint": "collector:4317", "sampleRate": 5}, "sampleRate"),
])
def test_what_the_kubelet_refuses_stops_the_start_naming_it(fields, message):
    with pytest.raises(ConfigError, match="tracing") as exc:
        tracing(**fields)
    assert message in str(exc.value)


def test_a_node_without_tracing_imports_nothing_of_the_sdk(tmp_path):
    """What every forked service shares (the preload) and what a CRI client brings: no SDK, no
    exporter, until a node sets `tracing`."""
    script = ("import sys; from pathlib import Path\n"
              "from services.supervisor import forking\n"
              "forking.preload(False, Path(sys.argv[1]) / 'state.db')\n"
              "from shared.runtime.cri import CRIClient; CRIClient('unix:///nonexistent')._open()\n"
              "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))))")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
