"""A cgroup's block I/O per device as cAdvisor reads it, and the names it gives the devices."""

from __future__ import annotations

from pathlib import Path

from shared.host.cgroup_io import DeviceIO, read_io
from shared.host.cgroups import CgroupReader


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_v1_takes_the_first_blkio_files_with_a_device_line(tmp_path):
    d = tmp_path / "cg/blkio/kubepods/podx/c1"
    write(d / "blkio.io_service_bytes_recursive", "Total 0\n")  # cfq's, empty on a kernel without cfq
    write(d / "blkio.throttle.io_service_bytes_recursive",
          "254:0 Read 4096\n254:0 Write 8192\n254:0 Sync 8192\n254:0 Async 4096\n254:0 Discard 0\n"
          "254:0 Total 12288\nTotal 12288\n")
    write(d / "blkio.throttle.io_serviced_recursive", "254:0 Read 1\n254:0 Write 2\nTotal 3\n")
    write(d / "blkio.throttle.io_service_bytes", "254:0 Read 1\n")  # not the recursive one: not read
    [io] = read_io(CgroupReader(tmp_path / "cg", tmp_path / "proc"), "/kubepods/podx/c1")
    assert (io.major, io.minor) == (254, 0)
    assert io.service_bytes == {"Read": 4096, "Write": 8192, "Sync": 8192, "Async": 4096, "Discard": 0, "Total": 12288}
    assert io.serviced == {"Read": 1, "Write": 2}


def test_v2_reads_io_stat(tmp_path):
    write(tmp_path / "cg/cgroup.controllers", "cpu io memory pids\n")
    write(tmp_path / "cg/kubepods/podx/c1/io.stat",
          "254:0 rbytes=100 wbytes=200 rios=3 wios=4 dbytes=0 dios=0\n8:16 rbytes=5 wbytes=0 rios=1 wios=0\n")
    got = read_io(CgroupReader(tmp_path / "cg", tmp_path / "proc"), "/kubepods/podx/c1")
    assert got == [DeviceIO(254, 0, {"Read": 100, "Write": 200}, {"Read": 3, "Write": 4}),
                   DeviceIO(8, 16, {"Read": 5, "Write": 0}, {"Read": 1, "Write": 0})]


def test_v2_reads_the_iocost_figures_where_the_controller_weighs_the_device(tmp_path):
    write(tmp_path / "cg/cgroup.controllers", "cpu io memory pids\n")
    write(tmp_path / "cg/kubepods/podx/c1/io.stat",
          "254:0 rbytes=100 wbytes=0 rios=1 wios=0 cost.vrate=100.00 cost.usage=2500000 cost.wait=1000 "
          "cost.indebt=0 cost.indelay=7\n8:16 rbytes=5 wbytes=0 rios=1 wios=0\n")
    first, second = read_io(CgroupReader(tmp_path / "cg", tmp_path / "proc"), "/kubepods/podx/c1")
    assert first.cost == {"usage": 2500000, "wait": 1000, "indebt": 0, "indelay": 7}
    assert second.cost == {}


def test_no_figures_and_hostile_names(tmp_path):
    reader = CgroupReader(tmp_path / "cg", tmp_path / "proc")
    assert read_io(reader, "/kubepods/gone") == []
    assert read_io(reader, "/kubepods/../../etc") is None
