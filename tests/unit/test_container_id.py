"""Container IDs between the API's spelling and the runtime's (shared/model/container_id.py)."""

from shared.model.container_id import api_container_id, runtime_container_id


def test_the_api_id_is_the_runtime_id_with_its_type_and_back():
    assert api_container_id("abc123") == "containerd://abc123"
    assert runtime_container_id("containerd://abc123") == "abc123"
    assert runtime_container_id(api_container_id("abc123")) == "abc123"


def test_an_id_without_a_type_is_taken_as_it_is():
    assert runtime_container_id("abc123") == "abc123"
    assert runtime_container_id("") == ""
    assert runtime_container_id("docker://x") == "x", "another runtime's spelling still yields the ID"
