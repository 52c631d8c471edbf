import pytest

from shared.model.podspec import validate_pod
from shared.model.qos import pod_requests, qos_class


def pod(*resources, init=()):
    return validate_pod({"metadata": {"name": "p"}, "spec": {
        "initContainers": [{"name": f"i{n}", "image": "x:1", **c} for n, c in enumerate(init)],
        "containers": [{"name": f"c{n}", "image": "x:1", "resources": r} for n, r in enumerate(resources)]}})


@pytest.mark.parametrize("resources,expected", [
    ([{}], "BestEffort"),
    ([{"limits": {"cpu": "1", "memory": "64Mi"}}], "Guaranteed"),
    ([{"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}], "Guaranteed"),
    ([{"requests": {"cpu": "100m"}}], "Burstable"),
    ([{"limits": {"cpu": "1", "memory": "64Mi"}}, {}], "Burstable"),
    ([{"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}], "Burstable"),
])
def test_qos_class(resources, expected):
    assert qos_class(pod(*resources)) == expected


def test_requests_are_the_larger_of_apps_and_init():
    p = pod({"requests": {"cpu": "100m", "memory": "10Mi"}}, {"requests": {"cpu": "200m"}},
            init=[{"resources": {"requests": {"cpu": "1", "memory": "1Mi"}}}])
    assert pod_requests(p) == {"cpu": 1000, "memory": 10 * 2**20}


def test_sidecars_add_to_everything():
    p = pod({"requests": {"cpu": "100m"}},
            init=[{"restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
                  {"resources": {"requests": {"cpu": "120m"}}}])
    assert pod_requests(p)["cpu"] == 170


def test_request_above_limit_is_invalid():
    from shared.model.podspec import ManifestInvalid

    with pytest.raises(ManifestInvalid, match="requests.cpu must be less than or equal to limits.cpu"):
        pod({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}})
