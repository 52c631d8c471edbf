from cri_api.v1 import api_pb2 as cri

from services.pod_sync.pleg import PLEG
from services.pod_sync.runtime_config import sandbox_config
from shared.model.podspec import validate_pod
from shared.runtime.cri.fake import FakeRuntime


async def test_relist_reports_changed_pods_and_container_events(settings):
    rt = FakeRuntime(images=["i:1"])
    pleg = PLEG(rt, 1.0, lambda uids: None)
    pod = validate_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}})
    sb_cfg = sandbox_config(pod, 0, settings)
    sid = await rt.run_pod_sandbox(sb_cfg)
    changed, events = await pleg.relist()
    assert changed == {"u1"} and events == []  # the first relist reports pods, not events
    cfg = cri.ContainerConfig(metadata=cri.ContainerMetadata(name="c"), image=cri.ImageSpec(image="i:1"),
                              labels={**sb_cfg.labels, "io.kubernetes.container.name": "c"})
    cid = await rt.create_container(sid, cfg, sb_cfg)
    await rt.start_container(cid)
    changed, events = await pleg.relist()
    assert changed == {"u1"} and [(e.type, e.container_name) for e in events] == [("ContainerStarted", "c")]
    assert await pleg.relist() == (set(), [])
    rt.exit_container(cid, 1)
    _, events = await pleg.relist()
    assert [e.type for e in events] == ["ContainerDied"]
    await rt.remove_container(cid)
    _, events = await pleg.relist()
    assert [e.type for e in events] == ["ContainerRemoved"]
    assert pleg.healthy()[0]
