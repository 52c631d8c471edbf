from services.pod_sync.admission import admit
from shared.config.settings import KubeletConfiguration
from shared.host.node_resources import Reservations, allocatable
from shared.model.podspec import validate_pod


def pod(cpu=None, memory=None):
    req = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    return validate_pod({"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "i:1", "resources": {"requests": req}}]}})


CAP = allocatable(2000, 1024 * 2**20, Reservations.from_config(KubeletConfiguration()))


def test_allocatable_keeps_the_default_hard_eviction_reserve():
    assert CAP == {"cpu": 2000, "memory": 1024 * 2**20 - 100 * 2**20, "ephemeral-storage": 0}


def test_allocatable_subtracts_reserved_and_hard_thresholds():
    k = KubeletConfiguration.model_validate({
        "kubeReserved": {"cpu": "200m", "memory": "256Mi"}, "systemReserved": {"memory": "0.5Gi",
                                                                               "ephemeral-storage": "1Gi"},
        "evictionHard": {"memory.available": "10%", "nodefs.available": "2Gi"}})
    got = allocatable(2000, 4096 * 2**20, Reservations.from_config(k), disk_bytes=20 * 2**30)
    assert got == {"cpu": 1800, "memory": (4096 - 256 - 512) * 2**20 - int(0.1 * 4096 * 2**20),
                   "ephemeral-storage": 17 * 2**30}


def test_fits():
    assert admit(pod("500m", "100Mi"), [pod("1", "100Mi")], CAP, 110).admitted


def test_out_of_cpu_names_numbers():
    v = admit(pod("1500m"), [pod("1")], CAP, 110)
    assert (v.admitted, v.reason) == (False, "OutOfcpu")
    assert v.message == ("Pod was rejected: Node didn't have enough resource: cpu, requested: 1500, "
                         "used: 1000, capacity: 2000")


def test_out_of_memory():
    v = admit(pod(memory="1Gi"), [], CAP, 110)
    assert v.reason == "OutOfmemory"


def test_out_of_pods():
    v = admit(pod(), [pod(), pod()], CAP, 2)
    assert v.reason == "OutOfpods" and "pods, requested: 1, used: 2, capacity: 2" in v.message


def test_ephemeral_storage_requests_fit_the_nodes_allocatable_or_are_refused():
    def scratch(size: str):
        return validate_pod({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "image": "i:1", "resources": {"requests": {"ephemeral-storage": size}}}]}})
    disk = allocatable(2000, 1024 * 2**20, Reservations.from_config(KubeletConfiguration()), 10 * 2**30)
    assert disk["ephemeral-storage"] == 9 * 2**30, "10 GiB less the default nodefs.available 10%"
    assert admit(scratch("4Gi"), [scratch("4Gi")], disk, 110).admitted
    v = admit(scratch("2Gi"), [scratch("4Gi"), scratch("4Gi")], disk, 110)
    assert (v.reason, v.message) == ("OutOfephemeral-storage", "Pod was rejected: Node didn't have enough resource: "
                                     f"ephemeral-storage, requested: {2 * 2**30}, used: {8 * 2**30}, "
                                     f"capacity: {9 * 2**30}")
    # localStorageCapacityIsolation false: the node reports no ephemeral-storage, none fits.
    without = {k: v for k, v in disk.items() if k != "ephemeral-storage"}
    assert admit(scratch("1Mi"), [], without, 110).message.endswith(f"requested: {2**20}, used: 0, capacity: 0")
    assert admit(pod("1"), [], without, 110).admitted


def test_best_effort_pods_always_fit_resources():
    assert admit(pod(), [pod("2")], CAP, 110).admitted
