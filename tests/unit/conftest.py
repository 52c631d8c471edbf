import asyncio

import pytest

from services.pod_sync.images import ImageManager
from services.pod_sync.runtime_config import NodeFacts
from services.pod_sync.syncer import PodSyncer
from shared.bus.events import RecordingRecorder
from shared.config.settings import KubeletConfiguration, NodeSettings
from shared.host.subpath import FakeSubPathMounts
from shared.runtime.cri.fake import FakeRuntime
from shared.store import NetworkStatus, Store
from shared.tasks.retry import Backoff

# The image the pod-sync tests' fake runtime already has.
IMG = "reg/app:1"


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


# -- pod-sync against the fake runtime (test_syncer.py and the tests of what it builds on) -------


@pytest.fixture
def rt():
    return FakeRuntime(images=[IMG])


@pytest.fixture
def node(settings):
    # Pod cgroups go to a cgroup v1 tree of directories, not the host's.
    cgroups = settings.root_dir / "cgroup"
    for controller in ("cpu", "memory"):
        (cgroups / controller).mkdir(parents=True)
    return NodeFacts(name="node1", ip="192.0.2.10", cpu_millicores=2000, memory_bytes=4 * 2**30,
                     oom_floor=None, pods_dir=settings.root_dir / "pods", cgroup_root=cgroups)


@pytest.fixture
def events():
    return RecordingRecorder()


@pytest.fixture
def syncer(rt, store, settings, node, events):
    return PodSyncer(rt, ImageManager(rt, Backoff(10, 300)), store, settings, Backoff(10, 300), node, events,
                     subpaths=FakeSubPathMounts())


@pytest.fixture
async def api_server():
    """An HTTP server answering as the API server does (tests/unit/fake_api_server.py)."""
    from tests.unit.fake_api_server import FakeApiServer

    s = FakeApiServer()
    await s.start()
    yield s
    s.server.close()


async def run_for(coro, ready: asyncio.Event, seconds: float, name: str) -> None:
    """Run a service's loop until it says it is ready (10 s at most), then `seconds` more, then
    cancel it: for tests that count what a loop does in a time."""
    task = asyncio.create_task(coro, name=name)
    try:
        await asyncio.wait_for(ready.wait(), 10)
        await asyncio.sleep(seconds)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
