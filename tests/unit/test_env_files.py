"""env[].valueFrom.fileKeyRef (EnvFiles, on by default since Kubernetes 1.35): the kubelet's .env
format, the API server's rules, the value in the container's environment, and files a container
planted to hurt the node."""

from __future__ import annotations

import os

import pytest

from services.pod_sync.env_files import MAX_FILE_BYTES, EnvFileError, parse_env, read_env_file
from shared.model.podspec import ManifestInvalid, validate_pod
from shared.store import PodVolume, Store
from tests.unit.conftest import IMG
from tests.unit.test_syncer import manifest, observed, want


@pytest.mark.parametrize("text, key, value", [
    ("CONFIG_VAR='hello'\n", "CONFIG_VAR", "hello"),
    ("  # a comment\n\nA='1'\nB='two words' # trailing comment\n", "B", "two words"),
    ("A='first\nsecond'\nB='x'\n", "A", "first\nsecond"),
    ("A='1'\n", "MISSING", ""),
    ("A= 'spaced'\n", "A", ""),          # as bash: whitespace after '=' leaves it empty
    ("A= 'spaced'\nB='b'\n", "B", "b"),
    ("A=''\n", "A", ""),
    ("A='1'\r\nB='2'\r\n", "B", "2"),
])
def test_the_kubelets_format(text, key, value):
    assert parse_env(text, key) == value


@pytest.mark.parametrize("text, error", [
    ("NOEQUALS\n", "line 1: missing '='"),
    ("='x'\n", "line 1: empty variable name"),
    ("A ='x'\n", "line 1: whitespace before '=' is not allowed"),
    ("A=x\n", "line 1: value must be enclosed in single quotes"),
    ("A='open\nstill open\n", "starting at line 1: unclosed single quote"),
    ("A='it''s'\n", "line 1: unexpected content after closing quote"),
    ("A='" + "x" * (64 * 1024 + 1) + "'\n", "longer than 65536 bytes"),
])
def test_a_malformed_file_is_an_error_naming_the_line(text, error):
    with pytest.raises(EnvFileError) as exc:
        parse_env(text, "A")
    assert error in str(exc.value)


def test_files_a_container_planted_are_never_followed_out_or_opened(tmp_path):
    vol, outside = tmp_path / "vol", tmp_path / "host-secret"
    vol.mkdir()
    outside.write_text("A='host'\n")
    (vol / "ok.env").write_text("A='pod'\n")
    (vol / "escape").symlink_to(outside)
    (vol / "inside").symlink_to("ok.env")
    os.mkfifo(vol / "fifo")
    (vol / "dir").mkdir()
    (vol / "big").write_bytes(b"A='" + b"x" * MAX_FILE_BYTES + b"'\n")
    assert read_env_file(vol, "ok.env") == "A='pod'\n"
    assert read_env_file(vol, "inside") == "A='pod'\n", "a symlink that stays inside is followed, as securejoin"
    for path, error in (("escape", "resolves outside the volume"), ("fifo", "not a regular file"),
                        ("dir", "not a regular file"), ("big", f"larger than {MAX_FILE_BYTES} bytes"),
                        ("missing", "failed to open"), ("/../../host-secret", "resolves outside the volume")):
        with pytest.raises(EnvFileError) as exc:
            read_env_file(vol, path)
        assert error in str(exc.value), path


@pytest.mark.parametrize("ref, error", [
    ({"volumeName": "data", "path": "x.env"}, "fileKeyRef.key: Required value"),
    ({"key": "A=B", "volumeName": "data", "path": "x.env"}, "printable ASCII characters other than '='"),
    ({"key": "A", "volumeName": "Data", "path": "x.env"}, "fileKeyRef.volumeName: Invalid value"),
    ({"key": "A", "volumeName": "data", "path": "../x.env"}, "fileKeyRef.path: Invalid value"),
    ({"key": "A", "volumeName": "data"}, "fileKeyRef.path: Required value"),
    ({"key": "A", "volumeName": "data", "path": "x", "extra": 1}, "fileKeyRef.extra: unknown field"),
    ({"key": "A", "volumeName": "nope", "path": "x.env"},
     'containers[0].env[0].valueFrom.fileKeyRef.volumeName: Not found: "nope"'),
    ({"key": "A", "volumeName": "cfg", "path": "x.env"},
     'fileKeyRef.volumeName: Invalid value: "cfg": referenced volume must be of type emptyDir'),
])
def test_the_api_servers_rules(ref, error):
    with pytest.raises(ManifestInvalid) as exc:
        validate_pod({"metadata": {"name": "p", "uid": "u"}, "spec": {
            "containers": [{"name": "c", "image": "i:1", "env": [{"name": "V", "valueFrom": {"fileKeyRef": ref}}]}],
            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "x"}}]}})
    assert error in str(exc.value)


def _env_pod(*env):
    return manifest(containers=[{"name": "app", "image": IMG, "env": list(env)}],
                    volumes=[{"name": "data", "emptyDir": {}}])


def _ref(key, optional=None, path="config.env"):
    ref = {"key": key, "volumeName": "data", "path": path}
    if optional is not None:
        ref["optional"] = optional
    return {"fileKeyRef": ref}


def _volume(settings, tmp_path):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    vol = Store(settings.store_path, writer="volume")
    with vol.session() as s:
        s.merge(PodVolume(pod_uid="uid1", name="data", plugin="kubernetes.io/empty-dir", host_path=str(data),
                          ready=True))
    vol.close()
    return data


async def test_the_value_reaches_the_containers_environment(syncer, rt, store, settings, tmp_path):
    data = _volume(settings, tmp_path)
    (data / "config.env").write_text("DB_HOST='db.local'\nDB_PASS='s3cr=t'\n")
    want(store, _env_pod({"name": "HOST", "valueFrom": _ref("DB_HOST")}, {"name": "PASS", "valueFrom": _ref("DB_PASS")},
                         {"name": "GONE", "valueFrom": _ref("NOPE", optional=True)}))
    await syncer.sync("uid1")
    [config] = rt.created_configs.values()
    env = {e.key: e.value for e in config.envs}
    assert env["HOST"] == "db.local" and env["PASS"] == "s3cr=t" and "GONE" not in env


@pytest.mark.parametrize("content, error", [
    ("OTHER='x'\n", 'environment variable key "DB_HOST" not found in file "'),
    ("DB_HOST=unquoted\n", "couldn't parse env file: invalid environment variable format at line 1: value must be "
                           "enclosed in single quotes"),
    (None, "couldn't parse env file: failed to open environment variable file 'config.env'"),
])
async def test_a_key_or_file_that_cannot_be_had_holds_the_container(syncer, rt, store, settings, tmp_path,
                                                                     content, error):
    data = _volume(settings, tmp_path)
    if content is not None:
        (data / "config.env").write_text(content)
    want(store, _env_pod({"name": "HOST", "valueFrom": _ref("DB_HOST")}))
    await syncer.sync("uid1")
    assert rt.created_configs == {}
    [app] = observed(store).containers
    assert app["waiting_reason"] == "CreateContainerConfigError"
    assert app["waiting_message"].startswith(error), app["waiting_message"]
