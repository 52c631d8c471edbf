import pytest

from shared.config import KubeletConfiguration, NodeSettings
from shared.store import NetworkStatus, Store


@pytest.fixture
def settings(tmp_path):
    return NodeSettings(kubelet=KubeletConfiguration(pod_logs_dir=str(tmp_path / "logs"), pod_cidr="10.88.0.0/24"),
                        root_dir=tmp_path, node_name="node1")


@pytest.fixture
def store(settings):
    """The store as pod-sync sees it, with the network already ready."""
    s = Store(settings.store_path, writer="pod-sync")
    s.create_schema()
    net = Store(settings.store_path, writer="network")
    with net.session() as sess:
        sess.merge(NetworkStatus(id=1, ready=True, pod_cidr="10.88.0.0/24", message="ok"))
    net.close()
    yield s
    s.close()
