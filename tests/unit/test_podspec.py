import pytest

from shared.model.podspec import ManifestInvalid, image_tag, parse_manifest_text, validate_pod


def pod(**spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "reg/img:1"}], **spec}}


def test_defaults():
    p = validate_pod(pod())
    assert p.metadata.namespace == "default"
    assert p.spec.restartPolicy == "Always"
    assert p.spec.terminationGracePeriodSeconds == 30
    assert p.spec.containers[0].imagePullPolicy == "IfNotPresent"
    assert p.spec.containers[0].terminationMessagePath == "/dev/termination-log"


@pytest.mark.parametrize("image,policy", [("busybox", "Always"), ("busybox:latest", "Always"),
                                          ("127.0.0.1:5000/x/y", "Always"), ("127.0.0.1:5000/x/y:1", "IfNotPresent"),
                                          ("x@sha256:" + "a" * 64, "IfNotPresent")])
def test_pull_policy_defaulting(image, policy):
    p = validate_pod({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": image}]}})
    assert p.spec.containers[0].imagePullPolicy == policy


def test_image_tag():
    assert image_tag("localhost:5000/a") == "latest"
    assert image_tag("localhost:5000/a:2") == "2"


@pytest.mark.parametrize("data,needle", [
    ({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}, "spec.containers[0].image: Required value"),
    ({"metadata": {"name": "p"}, "spec": {"containers": []}}, "spec.containers: List should have at least 1 item"),
    ({"metadata": {"name": "Bad_Name"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, "metadata.name: 'Bad_Name' must be a lowercase RFC 1123 subdomain"),
    ({"metadata": {"name": "p"}, "spec": {"restartPolicy": "Sometimes", "containers": [{"name": "c", "image": "i"}]}}, "spec.restartPolicy"),
    ({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 70000}]}]}}, "spec.containers[0].ports[0].containerPort"),
    ({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}, {"name": "c", "image": "i"}]}}, "container name 'c' is used twice"),
    ({"spec": {"containers": [{"name": "c", "image": "i"}]}}, "metadata: Required value"),
])
def test_validation_names_the_field(data, needle):
    with pytest.raises(ManifestInvalid) as exc:
        validate_pod(data)
    assert needle in str(exc.value)


def test_parse_text():
    assert parse_manifest_text('{"kind": "Pod"}') == {"kind": "Pod"}
    with pytest.raises(ManifestInvalid, match="not valid YAML"):
        parse_manifest_text("a: [")
    with pytest.raises(ManifestInvalid, match="2 documents"):
        parse_manifest_text("a: 1\n---\nb: 2\n")
    with pytest.raises(ManifestInvalid, match="empty"):
        parse_manifest_text("\n")


def test_unknown_pod_fields_pass_through():
    p = validate_pod(pod(priorityClassName="high"))
    assert p.to_manifest()["spec"]["priorityClassName"] == "high"


def _with_mounts(volumes, mounts):
    return {"metadata": {"name": "p"}, "spec": {"volumes": volumes, "containers": [
        {"name": "c", "image": "reg/img:1", "volumeMounts": mounts}]}}


def test_volumes_and_mounts():
    p = validate_pod(_with_mounts([{"name": "d", "emptyDir": {}}, {"name": "n", "nfs": {"server": "x"}}],
                                  [{"name": "d", "mountPath": "/d", "subPath": "a/b", "readOnly": True}]))
    assert [(v.name, v.kind) for v in p.spec.volumes] == [("d", "emptyDir"), ("n", "nfs")], \
        "an unsupported source is the volume service's FailedMount, not an invalid pod"
    assert p.spec.containers[0].volumeMounts[0].readOnly
    assert validate_pod(p.to_manifest()).to_manifest() == p.to_manifest(), "round-trips through the store"


@pytest.mark.parametrize("volumes,mounts,error", [
    ([{"name": "d"}], [], "spec.volumes[0]: exactly one volume source must be given, found none"),
    ([{"name": "d", "emptyDir": {}, "hostPath": {"path": "/"}}], [], "found ['emptyDir', 'hostPath']"),
    ([{"name": "d", "emptyDir": {}}, {"name": "d", "emptyDir": {}}], [], "volume name 'd' is used twice"),
    ([{"name": "D", "emptyDir": {}}], [], "lowercase RFC 1123 label"),
    ([], [{"name": "x", "mountPath": "/x"}], "volumeMounts 'x' is not a volume of the pod"),
    ([{"name": "d", "emptyDir": {}}], [{"name": "d", "mountPath": "rel"}], "must be an absolute path"),
    ([{"name": "d", "emptyDir": {}}], [{"name": "d", "mountPath": "/x", "subPath": "../up"}], "without '..'"),
    ([{"name": "d", "emptyDir": {}}], [{"name": "d", "mountPath": "/x"}, {"name": "d", "mountPath": "/x"}],
     "mountPath '/x' is used twice"),
    ([{"name": "d", "emptyDir": {}}], [{"name": "d", "mountPath": "/x", "mountPropagation": "Bidirectional"}],
     "volumeMounts[0].mountPropagation: Forbidden: Bidirectional mount propagation is available only to "
     "privileged containers"),
    ([{"name": "d", "emptyDir": {}}], [{"name": "d", "mountPath": "/x", "mountPropagation": "Shared"}],
     "mountPropagation"),
])
def test_invalid_volumes_name_the_field(volumes, mounts, error):
    with pytest.raises(ManifestInvalid) as exc:
        validate_pod(_with_mounts(volumes, mounts))
    assert error in str(exc.value)
