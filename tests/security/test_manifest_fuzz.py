"""Property: whatever document a manifest file or the API holds, parsing and validating it either
gives a Pod or raises ManifestInvalid, and for pod-shaped input that error names a field."""

from __future__ import annotations

import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from shared.model.podspec import ManifestInvalid, Pod, parse_manifest_text, validate_pod

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=40))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)), max_leaves=30)

# Pod-shaped: the right keys at the top, anything under them.
FIELDS = ["name", "image", "command", "args", "env", "ports", "volumeMounts", "securityContext", "resources",
          "livenessProbe", "readinessProbe", "lifecycle", "uid", "namespace", "volumes", "containers",
          "initContainers", "hostNetwork", "dnsConfig", "sysctls", "subPath", "httpGet", "httpHeaders",
          "procMount", "imagePullSecrets", "nodeSelector", "affinity"]
keyed = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(FIELDS), inner, max_size=4)), max_leaves=25)
container = st.fixed_dictionaries({"name": st.one_of(st.just("app"), st.text(max_size=10)),
                                   "image": st.one_of(st.just("busybox:1"), scalars)},
                                  optional={k: keyed for k in FIELDS[2:12]})
pods = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"name": st.one_of(st.just("p"), st.text(max_size=10))},
                                      optional={"uid": st.one_of(st.text(max_size=20), scalars),
                                                "namespace": scalars}),
    "spec": st.fixed_dictionaries({"containers": st.lists(container, max_size=3)}, optional={
        k: keyed for k in FIELDS if k not in ("containers", "name", "image", "uid", "namespace")})}, optional={"apiVersion": scalars, "kind": scalars})

FIELD_PATH = re.compile(r"^[A-Za-z_][\w.\[\]]*: |expected a Pod object")


def _check(doc) -> None:
    try:
        validate_pod(doc)
    except ManifestInvalid as exc:
        assert str(exc), "an empty message helps nobody"
        return


@SETTINGS
@given(json_values)
def test_any_json_document_is_a_pod_or_a_manifest_error(doc):
    text = json.dumps(doc)
    try:
        _check(parse_manifest_text(text))
    except ManifestInvalid:
        pass


@SETTINGS
@given(st.text(max_size=300))
def test_any_text_is_a_pod_or_a_manifest_error(text):
    try:
        _check(parse_manifest_text(text))
    except ManifestInvalid:
        pass


@SETTINGS
@given(pods)
def test_a_refused_pod_shaped_document_names_the_field(doc):
    try:
        validate_pod(doc)
    except ManifestInvalid as exc:
        assert FIELD_PATH.match(str(exc)), f"names no field: {exc}"
        try:
            Pod.model_validate(doc)
        except ValidationError as detail:
            unnamed = [e for e in detail.errors() if not e["loc"]]
            assert not unnamed, f"errors without a field: {unnamed}"
