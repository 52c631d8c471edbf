"""File modes: the node's private files are private from creation whatever the umask, modes an
older pykubelet left are corrected with a log line, and what containers read keeps the
kubelet's modes under the services' umask 077."""

from __future__ import annotations

import logging
import os
import stat

import pytest

from services.pod_sync.etc_hosts import write_hosts_file
from services.volume.atomic_writer import FileProjection, write_atomically
from services.volume.local import setup_host_path
from services.volume.projection import VolumeSourceError
from shared.host.node_dirs import container_dir, open_private_log, private_tree, root_dir
from shared.store import Store


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def umask():
    """Run the test under a given umask: umask(0o022) is an old pykubelet's, 0o077 today's."""
    old = os.umask(0o022)

    def set_(value: int) -> None:
        os.umask(value)
    yield set_
    os.umask(old)


def test_the_root_dir_is_made_0711_or_corrected_with_a_log_line(tmp_path, umask, caplog):
    """Others pass through, never list: a user-namespaced pod's root goes through to its rootfs."""
    umask(0o022)
    assert mode(root_dir(tmp_path / "new" / "root")) == 0o711
    old = tmp_path / "old"
    old.mkdir(mode=0o755)
    caplog.set_level(logging.WARNING)
    root_dir(old)
    assert mode(old) == 0o711
    assert f"the root dir {old} had mode 0755 (readable by other users); corrected to 0711" in caplog.text
    caplog.clear()
    root_dir(old)
    assert caplog.text == "", "nothing to say when the mode is right"


def test_logs_are_0600_from_creation_and_old_ones_corrected(tmp_path, umask, caplog):
    umask(0o022)
    os.close(open_private_log(tmp_path / "new.log"))
    assert mode(tmp_path / "new.log") == 0o600
    (tmp_path / "old.log").write_text("x")
    assert mode(tmp_path / "old.log") == 0o644
    caplog.set_level(logging.WARNING)
    private_tree(tmp_path, "the service logs dir")
    assert mode(tmp_path / "old.log") == 0o600 and mode(tmp_path) == 0o700
    assert f"{tmp_path / 'old.log'} had mode 0644" in caplog.text


def test_the_store_and_its_wal_and_shm_are_0600_whatever_the_umask(tmp_path, umask):
    umask(0o022)
    store = Store(tmp_path / "state.db", writer=None)
    store.create_schema()
    with store.engine.connect() as conn:  # an open connection: the -wal and -shm exist
        conn.exec_driver_sql("SELECT 1")
        files = {p.name: mode(p) for p in tmp_path.iterdir()}
    store.close()
    assert {"state.db", "state.db-wal", "state.db-shm", "state.db.lock"} <= set(files)
    assert {n: m for n, m in files.items() if m != 0o600} == {}


def test_an_old_stores_modes_are_corrected_before_sqlite_opens_it(tmp_path, umask, caplog):
    umask(0o022)
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (tmp_path / name).touch()
    caplog.set_level(logging.WARNING)
    store = Store(tmp_path / "state.db", writer=None)
    store.create_schema()
    with store.engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
        assert {p.name: mode(p) for p in tmp_path.iterdir() if p.name.startswith("state.db-")} == {
            "state.db-wal": 0o600, "state.db-shm": 0o600}
    store.close()
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        assert f"the state store's file {tmp_path / name} had mode 0644" in caplog.text


def test_what_containers_read_keeps_the_kubelets_modes_under_umask_077(tmp_path, umask):
    umask(0o077)
    hosts = write_hosts_file(tmp_path / "pod", "127.0.0.1\tlocalhost\n")
    assert mode(hosts) == 0o644 and mode(tmp_path / "pod") == 0o750
    assert mode(container_dir(tmp_path / "a" / "b")) == 0o755 and mode(tmp_path / "a") == 0o755
    vol = tmp_path / "vol"
    write_atomically(vol, {"x/y/file": FileProjection(b"data", 0o644)})
    assert mode(vol) == 0o755
    data = vol / "..data"
    assert mode(data.resolve()) == 0o755 and mode(data.resolve() / "x") == 0o755
    assert mode(data.resolve() / "x" / "y") == 0o755 and mode(data.resolve() / "x" / "y" / "file") == 0o644
    made = setup_host_path({"path": str(tmp_path / "host" / "dir"), "type": "DirectoryOrCreate"})
    assert mode(made) == 0o755 and mode(made.parent) == 0o755
    f = setup_host_path({"path": str(tmp_path / "host" / "file"), "type": "FileOrCreate"})
    assert mode(f) == 0o644


def test_a_host_path_with_dotdot_is_refused_as_the_api_server_refuses_it(tmp_path):
    with pytest.raises(VolumeSourceError, match="must not contain '..'"):
        setup_host_path({"path": f"{tmp_path}/a/../../etc"})


def test_pykubelets_containerd_dir_is_0711_as_containerd_keeps_its_own(tmp_path, umask, caplog):
    from services.supervisor.containerd_config import ContainerdLayout, write_config

    umask(0o077)
    layout = ContainerdLayout(tmp_path / "root" / "containerd")
    kwargs = {"cni_conf_dir": tmp_path / "net.d", "cni_bin_dir": "/opt/cni/bin", "sandbox_image": "pause:3.10",
              "registry": None, "restrict_oom": False}
    write_config(layout, **kwargs)
    assert mode(layout.base) == 0o711
    layout.base.chmod(0o700)  # made by an older pykubelet
    caplog.set_level(logging.WARNING)
    write_config(layout, **kwargs)
    assert mode(layout.base) == 0o711 and "corrected to 0711" in caplog.text
