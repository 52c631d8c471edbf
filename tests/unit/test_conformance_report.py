"""make conformance's reading of ginkgo's JUnit reports, its comparison, and the image set."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import yaml

from shared.runtime.images.build import build_image
from tests.conformance.images import image_specs, write_repo_list
from tests.conformance.report import Result, parse_junit, side_by_side

JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="Kubernetes e2e suite" tests="4" failures="1" errors="0" time="100">
  <testcase name="[BeforeSuite]" classname="Kubernetes e2e suite" time="1"></testcase>
  <testcase name="[k8s.io] Pods should get a host IP [NodeConformance] [Conformance]" classname="x" time="3"></testcase>
  <testcase name="[k8s.io] Probing container should be restarted   [NodeConformance] [Conformance]" classname="x">
    <failure type="Failure">/go/src/probe.go:123
Nov 30 16:41:53.078: Timed out after 300s waiting for restart
more detail</failure>
  </testcase>
  <testcase name="[sig-storage] Volumes NFS [Slow]" classname="x"><skipped></skipped></testcase>
  <testcase name="[k8s.io] Pods needs docker [NodeConformance]" classname="x"><skipped message="skipped: runtime is not docker"></skipped></testcase>
</testsuite>
"""


def test_junit_from_every_parallel_node(tmp_path):
    (tmp_path / "junit_01.xml").write_text(JUNIT)
    (tmp_path / "junit_02.xml").write_text(JUNIT.replace("get a host IP", "get a pod IP"))
    r = parse_junit(tmp_path, "pykubelet")
    assert r.passed == ["[BeforeSuite]", "[BeforeSuite]",
                        "[k8s.io] Pods should get a host IP [NodeConformance] [Conformance]",
                        "[k8s.io] Pods should get a pod IP [NodeConformance] [Conformance]"]
    name = "[k8s.io] Probing container should be restarted [NodeConformance] [Conformance]"
    assert r.failed == {name: "Timed out after 300s waiting for restart"}, \
        "whitespace in names normalised; the failure's first words, not its source location"
    assert r.skipped == ["[k8s.io] Pods needs docker [NodeConformance]"] * 2, "unfocused specs are not counted"


def test_side_by_side_names_what_passes_only_on_the_kubelet(tmp_path):
    py = Result("pykubelet", passed=["[BeforeSuite]", "[ReportAfterSuite] Kubernetes e2e suite report", "a"],
                failed={"b": "timed out"}, seconds=600)
    kl = Result("kubelet", passed=["[BeforeSuite]", "a", "b"], failed={"c": "no"}, seconds=960)
    text = side_by_side([py, kl])
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.strip()
            and line.split()[0] in ("passed", "failed", "minutes")}
    assert rows == {"passed": ["1", "2"], "failed": ["1", "1"], "minutes": ["10.0", "16.0"]}
    assert "pass on kubelet, fail on pykubelet: 1\n  - b" in text
    # "c" ran only on the kubelet (a run cut short by the suite's time limit): not compared
    assert "ran on both: 2, passed on both: 1" in text


def test_result_round_trips_through_json(tmp_path):
    r = Result("kubelet", passed=["a"], failed={"b": "x"}, skipped=["c"], seconds=5, incomplete="timeout")
    (tmp_path / "r.json").write_text(r.to_json())
    assert Result.load(tmp_path / "r.json") == r
    assert json.loads(r.to_json())["agent"] == "kubelet"


def test_repo_list_points_every_registry_the_specs_use_at_the_local_one(tmp_path):
    repo = yaml.safe_load(write_repo_list(tmp_path / "repo.yaml", "127.0.0.1:5000").read_text())
    assert repo["promoterE2eRegistry"] == "127.0.0.1:5000/e2e-test-images"
    assert repo["dockerLibraryRegistry"] == "127.0.0.1:5000/library"
    assert "invalidRegistry" not in repo, "the unreachable-registry specs keep their invalid name"


def test_agnhost_image_keeps_upstream_entrypoint_and_cmd(tmp_path):
    binary = tmp_path / "agnhost"
    binary.write_bytes(b"\x7fELF-not-really")
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"\x7fELF-upstream-busybox")
    specs = {f"{s.repository}:{s.tag}": s for s in image_specs(binary, binary, binary, busybox)}
    # e2e.test 1.37's images (test/utils/image/manifest.go).
    assert {"e2e-test-images/agnhost:2.66.1", "e2e-test-images/agnhost:2.55", "e2e-test-images/busybox:1.37.0-2",
            "e2e-test-images/nginx:1.27.0-2", "e2e-test-images/nonroot:1.5", "k8s-gcr/pause:3.10.2",
            "e2e-test-images/glibc-dns-testing:2.1.1"} <= set(specs)
    img = build_image(specs["e2e-test-images/agnhost:2.66.1"], applets=["sh", "nc"])
    config = json.loads(img.config.data)["config"]
    assert config["Entrypoint"] == ["/agnhost"] and config["Cmd"] == ["pause"]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(img.layers[0].data))) as tar:
        agnhost, link = tar.getmember("agnhost"), tar.getmember("agnhost-2")
        assert agnhost.mode == 0o755 and tar.extractfile(agnhost).read() == binary.read_bytes()
        assert link.issym() and link.linkname == "agnhost"
        assert [m.isfile() for m in tar.getmembers() if m.name == "bin/nc"] == [True], "nc replaces the applet"
        assert [m.isfile() for m in tar.getmembers() if m.name == "bin/sh"] == [True], \
            "dash: busybox sh would run its own nc applet whatever PATH says"
        assert tar.getmember("uploads").isdir()
        assert tar.extractfile("bin/busybox").read() == busybox.read_bytes(), "the busybox it was given"
    nonroot = build_image(specs["e2e-test-images/nonroot:1.5"], applets=["sh"])
    assert json.loads(nonroot.config.data)["config"]["User"] == "1234", "USER 1234, as upstream's image"
    nnp = build_image(specs["e2e-test-images/nonewprivs:1.4"], applets=["sh"])
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(nnp.layers[0].data))) as tar:
        assert tar.getmember("usr/local/bin/nnp").mode == 0o4755, "setuid root, as upstream's image"


def test_the_kitten_image_is_agnhost_with_the_upstream_files_the_image_volume_spec_reads(tmp_path):
    from tests.conformance.images import kitten_image

    binary = tmp_path / "agnhost"
    binary.write_bytes(b"\x7fELF-not-really")
    html = tmp_path / "src" / "test" / "images" / "kitten" / "html"
    html.mkdir(parents=True)
    (html / "kitten.jpg").write_bytes(b"\xff\xd8jpeg")
    (html / "data.json").write_text('{"image": "kitten.jpg"}\n')
    specs = {f"{s.repository}:{s.tag}": s for s in image_specs(binary, binary, binary, binary)}
    assert "e2e-test-images/kitten:1.8" in specs, "e2e.test 1.37's Kitten"
    kitten = kitten_image(specs["e2e-test-images/agnhost:2.66.1"], src=tmp_path / "src")
    img = build_image(kitten, applets=["sh"])
    assert json.loads(img.config.data)["config"]["Entrypoint"] == ["/agnhost"]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(img.layers[0].data))) as tar:
        assert tar.extractfile("data.json").read() == b'{"image": "kitten.jpg"}\n'
        assert tar.getmember("kitten.jpg").mode == 0o644
        assert b"Alpine Linux" in tar.extractfile("etc/os-release").read()


def test_progress_counts_passed_specs_among_the_skipped_and_failed_ones():
    from tests.conformance.run import count_finished
    out = "SSSS•SS••SSS\n------\n• [FAILED] [2.1 seconds]\n[sig-node] x\n------\nSS• [TIMEDOUT] [60 s]\nS•"
    assert count_finished(out) == (6, 2)


def test_suites_are_named_alone_together_or_by_their_groups():
    import argparse

    import pytest

    from tests.conformance.run import SUITES, _suites

    assert _suites("both") == ["conformance", "node"]
    assert _suites("image-volume,userns") == ["image-volume", "userns"]
    assert _suites("all") == list(SUITES)
    with pytest.raises(argparse.ArgumentTypeError, match="unknown suite 'nodes'"):
        _suites("conformance,nodes")
