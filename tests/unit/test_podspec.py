import pytest

from shared.podspec import ManifestInvalid, image_tag, parse_manifest_text, validate_pod


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
