"""fsGroup on volume files, and the hostile case: what a container plants is never followed."""

from __future__ import annotations

import os
import stat

from services.pod_sync.security import container_security_context, sandbox_security_context
from services.volume.ownership import set_volume_ownership
from shared.model.podspec import validate_pod


def mode_gid(path) -> tuple[int, int]:
    st = os.lstat(path)
    return stat.S_IMODE(st.st_mode), st.st_gid


def test_files_get_the_group_and_directories_setgid(tmp_path):
    vol = tmp_path / "vol"
    (vol / "sub").mkdir(parents=True)
    (vol / "sub" / "data").write_text("x")
    os.chmod(vol / "sub" / "data", 0o600)
    os.chmod(vol, 0o777)
    assert set_volume_ownership(vol, 2000, read_only=False) == 3
    assert mode_gid(vol) == (0o2777, 2000)
    assert mode_gid(vol / "sub")[1] == 2000 and mode_gid(vol / "sub")[0] & 0o2770 == 0o2770
    assert mode_gid(vol / "sub" / "data") == (0o660, 2000)


def test_read_only_volumes_get_group_read(tmp_path):
    (tmp_path / "key").write_text("s")
    os.chmod(tmp_path / "key", 0o400)
    set_volume_ownership(tmp_path, 2000, read_only=True)
    assert mode_gid(tmp_path / "key") == (0o440, 2000)


def test_planted_symlinks_devices_and_fifos_are_left_alone(tmp_path):
    host = tmp_path / "host-file"
    host.write_text("root's")
    os.chmod(host, 0o600)
    vol = tmp_path / "vol"
    vol.mkdir()
    (vol / "escape").symlink_to(host)
    (vol / "dir-escape").symlink_to(tmp_path)
    os.mkfifo(vol / "fifo")
    os.mknod(vol / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    set_volume_ownership(vol, 2000, read_only=False)
    assert mode_gid(host) == (0o600, 0), "the host file behind a planted symlink is untouched"
    assert mode_gid(tmp_path)[1] == 0
    assert mode_gid(vol / "fifo")[1] == 0 and mode_gid(vol / "null") == (0o600, 0)


def test_on_root_mismatch_skips_a_volume_already_owned(tmp_path):
    (tmp_path / "f").write_text("x")
    set_volume_ownership(tmp_path, 2000, read_only=False)
    os.chown(tmp_path / "f", -1, 0)
    assert set_volume_ownership(tmp_path, 2000, read_only=False, policy="OnRootMismatch") == 0
    assert mode_gid(tmp_path / "f")[1] == 0
    assert set_volume_ownership(tmp_path, 2000, read_only=False, policy="Always") == 2


def test_fs_group_is_a_supplemental_group_of_every_container(tmp_path):
    pod = validate_pod({"metadata": {"name": "p", "uid": "u"}, "spec": {
        "securityContext": {"fsGroup": 2000, "supplementalGroups": [3000]},
        "containers": [{"name": "c", "image": "i:1"}]}})
    assert list(container_security_context(pod, pod.spec.containers[0], tmp_path).supplemental_groups) == [3000, 2000]
    assert list(sandbox_security_context(pod, tmp_path).supplemental_groups) == [3000, 2000]
