"""A container's environment, command and args are bounded as the kernel would bound them (each
string MAX_ARG_STRLEN, all together MAX_EXEC_STRINGS): past a limit, the error names the field
and the limit, and the bomb of issue 29 is refused at admission without being built."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from services.pod_sync.admission import admit_exec_strings
from services.pod_sync.env_sources import EnvObjects
from services.pod_sync.exec_strings import MAX_ARG_STRLEN, MAX_EXEC_STRINGS, ExecStringsTooLarge, spec_exceeds
from services.pod_sync.runtime_config import NodeFacts, container_config, container_env
from shared.model.podspec import validate_pod
from shared.store import DesiredPod, PodRuntime
from tests.unit.conftest import IMG

NODE = NodeFacts(name="node1", ip="192.0.2.10", cpu_millicores=2000, memory_bytes=4 * 2**30, oom_floor=None,
                 pods_dir=Path("/nonexistent"))
KIB = 1024


def pod(env=(), env_from=(), command=(), args=(), init=False, uid="u1"):
    c = {"name": "app", "image": IMG, "env": list(env), "envFrom": list(env_from), "command": list(command),
         "args": list(args)}
    containers = {"initContainers": [c], "containers": [{"name": "main", "image": IMG}]} if init \
        else {"containers": [c]}
    return validate_pod({"metadata": {"name": "p", "uid": uid}, "spec": containers})


def bomb(n=30, first="x"):
    return [{"name": "V0", "value": first}] + [{"name": f"V{i}", "value": f"$(V{i - 1})$(V{i - 1})"}
                                               for i in range(1, n)]


def env_of(p, objects=None):
    c = (p.spec.initContainers or p.spec.containers)[0]
    return container_env(p, c, "10.88.0.5", NODE, objects)


def test_the_bomb_stops_at_the_first_variable_past_max_arg_strlen_without_building_it():
    tracemalloc.start()
    try:
        with pytest.raises(ExecStringsTooLarge) as exc:
            env_of(pod(bomb()))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # V17 is 2^17 bytes: with "V17=" and the NUL, past 128 KiB.
    assert str(exc.value) == ("spec.containers[0].env[17] (V17) would be larger than 131072 bytes, the kernel's "
                              "limit for one environment string (MAX_ARG_STRLEN)")
    assert peak < 2 * MAX_EXEC_STRINGS, f"{peak} bytes held on the way to refusing"


def test_a_value_exactly_at_max_arg_strlen_is_accepted():
    value = "x" * (MAX_ARG_STRLEN - len("A=") - 1)
    assert env_of(pod([{"name": "A", "value": value}]))["A"] == value
    with pytest.raises(ExecStringsTooLarge, match=r"env\[0\] \(A\) would be larger than 131072"):
        env_of(pod([{"name": "A", "value": value + "x"}]))


def test_a_name_too_long_for_exec_is_refused_even_with_an_empty_value_and_shown_shortened():
    name = "N" * MAX_ARG_STRLEN
    with pytest.raises(ExecStringsTooLarge) as exc:
        env_of(pod([{"name": name, "value": ""}]))
    assert str(exc.value).startswith(f"spec.containers[0].env[0] ({'N' * 80}...) would be larger than 131072 bytes")


def test_all_strings_together_are_capped_and_overrides_count_once():
    chunk = "x" * (100 * KIB)
    # One variable set ten times over holds one value: well within the total.
    assert len(env_of(pod([{"name": "SAME", "value": chunk}] * 10))["SAME"]) == 100 * KIB
    many = [{"name": f"V{i}", "value": chunk} for i in range(11)]
    with pytest.raises(ExecStringsTooLarge) as exc:
        env_of(pod(many))
    assert str(exc.value) == ("spec.containers[0].env[10] (V10) would make the container's environment, command "
                              "and args larger than 1048576 bytes together, pykubelet's limit (half of the usual "
                              "ARG_MAX)")


def test_values_from_config_maps_and_services_count_too():
    big = {"KEY": "x" * MAX_ARG_STRLEN}
    with pytest.raises(ExecStringsTooLarge, match=r"^spec\.containers\[0\]\.envFrom\[0\] \(KEY\) would be larger"):
        env_of(pod(env_from=[{"configMapRef": {"name": "cfg"}}]), EnvObjects(config_maps={"cfg": big}))
    with pytest.raises(ExecStringsTooLarge, match=r"^spec\.containers\[0\]\.env\[0\] \(K\) would be larger"):
        env_of(pod([{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "KEY"}}}]),
               EnvObjects(config_maps={"cfg": big}))
    services = {f"S{i}_SERVICE_HOST": "x" * (100 * KIB) for i in range(11)}
    with pytest.raises(ExecStringsTooLarge, match=r"^spec\.containers\[0\]\.env \(service variable\) \(S10_"):
        env_of(pod(), EnvObjects(services=services))


def test_references_look_in_the_containers_variables_before_the_services():
    p = pod([{"name": "URL", "value": "$(DB_SERVICE_HOST)"}], env_from=[{"configMapRef": {"name": "cfg"}}])
    env = env_of(p, EnvObjects(config_maps={"cfg": {"DB_SERVICE_HOST": "mine"}},
                               services={"DB_SERVICE_HOST": "10.96.0.9"}))
    assert env["URL"] == "mine" and env["DB_SERVICE_HOST"] == "mine"


def test_command_and_args_share_the_budget_and_name_their_field(tmp_path):
    node = NodeFacts(name="node1", ip="192.0.2.10", cpu_millicores=2000, memory_bytes=4 * 2**30, oom_floor=None,
                     pods_dir=tmp_path)
    ok = pod([{"name": "A", "value": "a"}], command=["echo", "$(A)$$(A)"], args=["$(A)-$(UNDEFINED)"])
    cfg = container_config(ok, ok.spec.containers[0], 0, IMG, False, "10.88.0.5", node)
    assert list(cfg.command) == ["echo", "a$(A)"] and list(cfg.args) == ["a-$(UNDEFINED)"]
    chunk = "y" * (120 * KIB)
    wide = pod([{"name": "A", "value": chunk}], command=["$(A)"] * 8, args=["$(A)"])
    with pytest.raises(ExecStringsTooLarge, match=r"^spec\.containers\[0\]\.command\[7\] would make"):
        container_config(wide, wide.spec.containers[0], 0, IMG, False, "10.88.0.5", node)
    long = pod([{"name": "A", "value": chunk}], args=["$(A)$(A)"])
    with pytest.raises(ExecStringsTooLarge, match=r"^spec\.containers\[0\]\.args\[0\] would be larger than 131072 "
                                                  r"bytes, the kernel's limit for one argument"):
        container_config(long, long.spec.containers[0], 0, IMG, False, "10.88.0.5", node)


# -- admission: what the spec alone decides -------------------------------------------------------

def test_admission_refuses_the_bomb_naming_the_variable_and_the_limit():
    v = admit_exec_strings(pod(bomb()))
    assert (v.admitted, v.reason) == (False, "PodLimitExceeded")
    assert v.message == ("Pod was rejected: spec.containers[0].env[17] (V17) would be larger than 131072 bytes, "
                         "the kernel's limit for one environment string (MAX_ARG_STRLEN)")
    assert "spec.initContainers[0].env[17]" in admit_exec_strings(pod(bomb(), init=True)).message
    assert "spec.containers[0].args[0]" in spec_exceeds(pod(bomb(17), args=["$(V16)$(V16)"]))


def test_admission_admits_what_could_fit_once_unknown_values_are_known():
    # 16 doublings of "x" is 64 KiB: fits, as does a command made of it.
    assert admit_exec_strings(pod(bomb(17), command=["$(V16)"])).admitted
    # A value from the downward API is unknown at admission: counted as empty, as it could be.
    from_field = [{"name": "F", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                  {"name": "G", "value": "$(F)" * 40000}]
    assert admit_exec_strings(pod(from_field)).admitted
    # An earlier literal replaced by a valueFrom of the same name is unknown from there on.
    replaced = [{"name": "A", "value": "x" * (100 * KIB)},
                {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "B", "value": "$(A)$(A)"}]
    assert admit_exec_strings(pod(replaced)).admitted


# -- the syncer: refused with an event, nothing started ------------------------------------------

def _want(store, p):
    with store.session() as s:
        s.merge(DesiredPod(uid=p.uid, namespace="default", name="p", source="file", manifest=p.to_manifest(),
                           grace_period_seconds=30))


async def test_the_syncer_refuses_the_bomb_with_an_event_and_starts_nothing(syncer, rt, store, events):
    _want(store, pod(bomb()))
    await syncer.sync("u1")
    with store.session() as s:
        row = s.get(DesiredPod, "u1")
        assert (row.admitted, row.rejection_reason) == (False, "PodLimitExceeded")
        assert "env[17] (V17)" in row.rejection_message
    assert events.events == [("Warning", "PodLimitExceeded", row.rejection_message)]
    assert not rt.sandboxes and not rt.containers


async def test_a_config_map_past_the_limit_is_create_container_config_error(rt, store, events, settings, node):
    from services.pod_sync.env_sources import StaticEnvSource
    from services.pod_sync.images import ImageManager
    from services.pod_sync.syncer import PodSyncer
    from shared.tasks.retry import Backoff
    from tests.unit.conftest import FakeSubPathMounts

    source = StaticEnvSource(config_maps={("default", "big"): {"HUGE": "z" * MAX_ARG_STRLEN}})
    syncer = PodSyncer(rt, ImageManager(rt, Backoff(10, 300)), store, settings, Backoff(10, 300), node, events,
                       env_source=source, subpaths=FakeSubPathMounts())
    _want(store, pod(env_from=[{"configMapRef": {"name": "big"}}]))
    await syncer.sync("u1")
    with store.session() as s:
        [c] = s.get(PodRuntime, "u1").containers
    assert c["waiting_reason"] == "CreateContainerConfigError"
    assert c["waiting_message"].startswith("spec.containers[0].envFrom[0] (HUGE) would be larger than 131072 bytes")
    assert ("Warning", "Failed", f"Error: {c['waiting_message']}") in events.events
    assert not rt.containers, "no container was created"
