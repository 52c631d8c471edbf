"""The production host: a Debian bookworm guest booted under qemu (software emulation: KVM fails
on these machines), systemd as PID 1 and cgroup v2, which this machine is not (and, for the
systemd driver on cgroup v1, the same guest booted with systemd's legacy layout).

The image (deploy/vm-image.sh) is built once and cached outside the checkout; each session boots
a throwaway copy-on-write layer over it. This checkout and its interpreter reach the guest on a
second, read-only disk made per session, bound at the same paths as here (so the virtualenv's
absolute paths hold) and listed in the guest's fstab, so a reboot keeps them. Commands run over
ssh with the image's key.

The guest is about fifteen times slower than this machine (importing the services' libraries
takes 20 s of emulated CPU), so the units get a longer start timeout through a drop-in; nothing
else about the node differs from a real host.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet")) / "vm"
IMAGE_BUILD_TIMEOUT = 900
BOOT_TIMEOUT = 300
GUEST_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# systemd's default (90 s) is shorter than seven services importing their libraries under emulation.
SLOW_GUEST_DROPIN = "[Service]\nTimeoutStartSec=900\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def code_paths() -> list[Path]:
    """What the guest needs from here: this checkout, and the interpreter its virtualenv links to
    when that is not the system's (pyenv)."""
    paths = [REPO]
    if not sys.base_prefix.startswith("/usr"):
        paths.append(Path(sys.base_prefix))
    return paths


def make_code_disk(work: Path) -> Path:
    """An ext4 image holding code_paths() at their own paths; hard links where the file system
    allows (seconds, no copy), a copy elsewhere."""
    stage, disk = work / "code", work / "code.raw"
    for path in code_paths():
        dest = stage / path.relative_to("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if subprocess.run(["cp", "-al", str(path), str(dest)], capture_output=True).returncode != 0:
            shutil.rmtree(dest, ignore_errors=True)
            subprocess.run(["cp", "-a", str(path), str(dest)], check=True)
    used_mb = int(subprocess.run(["du", "-sm", str(stage)], capture_output=True, text=True,
                                 check=True).stdout.split()[0])
    size_mb = used_mb * 3 // 2 + 256
    subprocess.run(["mkfs.ext4", "-q", "-L", "pykubelet-code", "-d", str(stage), str(disk), f"{size_mb}M"],
                   check=True, capture_output=True)
    shutil.rmtree(stage)
    return disk


class VirtualMachine:
    """One qemu guest: boots, runs commands over ssh, reboots and powers off."""

    def __init__(self, image: Path, work: Path, kernel_args: str = "", kernel: str = "") -> None:
        self.image, self.work = image, work
        self.kernel_args = kernel_args  # besides the root and the console
        # "": bookworm's kernel; "backports": bookworm-backports' (deploy/vm-image.sh has both).
        self.kernel_suffix = f"-{kernel}" if kernel else ""
        # Linux 6.12 double-faults within seconds of boot on Debian 12's qemu (7.2) under TCG when
        # the CPU offers cmpxchg16b, always at the slab allocator's per-CPU cmpxchg16b (gs:
        # prefixed), on every CPU model tried; without the instruction it takes its fallback and runs.
        self.cpu = "max,-cx16" if kernel else "max"
        self.disk = work / "root.qcow2"
        self.console = work / "console.log"
        self.ssh_port = _free_port()
        self.proc: subprocess.Popen | None = None

    def create(self, code_disk: Path) -> None:
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(self.image / "disk.raw"), "-F", "raw",
                        str(self.disk)], check=True)
        self.code_disk = code_disk

    def boot(self, starting: bool = False) -> None:
        argv = ["qemu-system-x86_64", "-accel", "tcg,thread=multi", "-cpu", self.cpu, "-smp", "2", "-m", "3072",
                "-nographic", "-kernel", str(self.image / f"vmlinuz{self.kernel_suffix}"),
                "-initrd", str(self.image / f"initrd.img{self.kernel_suffix}"),
                "-append", f"root=/dev/vda rw console=ttyS0 {self.kernel_args}".strip(),
                "-drive", f"file={self.disk},if=virtio,format=qcow2",
                "-drive", f"file={self.code_disk},if=virtio,format=raw,readonly=on",
                "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22",
                "-device", "virtio-net-pci,netdev=n0"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=open(self.console, "a"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_up(starting)

    def wait_up(self, starting: bool = False) -> None:
        """Until systemd has booted the guest; starting=True: until it answers at all (after a
        reboot with the node enabled, boot goes on while the node's units start)."""
        deadline = time.monotonic() + BOOT_TIMEOUT
        state = ""
        while state not in ("running", "degraded", *(("starting",) if starting else ())):
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"qemu exited ({self.proc.returncode}): {self.console_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the guest did not come up in {BOOT_TIMEOUT}s (systemd: {state or 'no answer'}):"
                                   f" {self.console_tail()}")
            time.sleep(2)
            try:
                state = self.run("systemctl", "is-system-running", check=False, timeout=20).stdout.strip()
            except subprocess.TimeoutExpired:
                state = ""

    def console_tail(self) -> str:
        return self.console.read_text(errors="replace")[-3000:] if self.console.exists() else ""

    def ssh_argv(self) -> list[str]:
        return ["ssh", "-q", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=15", "-i", str(self.image / "id_ed25519"),
                "-p", str(self.ssh_port), "root@127.0.0.1"]

    def run(self, *cmd: str, check: bool = True, timeout: float = 180, input: str | None = None):
        # A clean environment: the guest's, not this process's.
        remote = shlex.join(["env", "-i", GUEST_PATH, "LANG=C.UTF-8", *cmd])
        res = subprocess.run([*self.ssh_argv(), remote], capture_output=True, text=True, timeout=timeout, input=input)
        if check and res.returncode != 0:
            raise AssertionError(f"in the guest, {' '.join(cmd)} failed ({res.returncode}):\n"
                                 f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
        return res

    def copy_in(self, local: Path, remote: str, timeout: float = 300) -> None:
        """A file of this machine into the guest (a binary: scp, not run's text input)."""
        ssh = self.ssh_argv()
        options = [arg for arg in ssh[1:-1] if arg not in ("-p", str(self.ssh_port))]
        res = subprocess.run(["scp", *options, "-P", str(self.ssh_port), str(local), f"{ssh[-1]}:{remote}"],
                             capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise AssertionError(f"copying {local} into the guest failed: {res.stderr[-2000:]}")

    def mount_code(self) -> None:
        """The code disk at /mnt/code, each path bound where it is here; in fstab, so it survives reboots."""
        lines = ["/dev/vdb /mnt/code ext4 ro 0 0"]
        for path in code_paths():
            lines.append(f"/mnt/code{path} {path} none bind,ro 0 0")
            self.run("mkdir", "-p", str(path))
        self.run("mkdir", "-p", "/mnt/code")
        self.run("sh", "-c", "cat >> /etc/fstab", input="\n".join(lines) + "\n")
        self.run("systemctl", "daemon-reload")
        self.run("mount", "-a")
        self.run("mkdir", "-p", "/etc/systemd/system/pykubelet-.service.d")
        self.run("sh", "-c", "cat > /etc/systemd/system/pykubelet-.service.d/slow-guest.conf", input=SLOW_GUEST_DROPIN)

    def reboot(self) -> None:
        self.run("systemctl", "reboot", check=False, timeout=30)
        time.sleep(5)  # sshd goes away before the guest is back
        self.wait_up(starting=True)

    def shut_down(self, timeout: float) -> float:
        """`systemctl poweroff`, as an operator would; the seconds until the machine was off."""
        began = time.monotonic()
        try:
            self.run("systemctl", "poweroff", check=False, timeout=30)
        except subprocess.TimeoutExpired:
            pass
        assert self.proc is not None
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the guest was not off {timeout:.0f}s after `systemctl poweroff`: "
                                 f"{self.console_tail()}") from None
        return time.monotonic() - began

    def poweroff(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.run("systemctl", "poweroff", check=False, timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def ensure_image() -> Path:
    for tool in ("qemu-system-x86_64", "qemu-img", "mmdebstrap", "mkfs.ext4", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: `make deps-vm` installs qemu-system-x86, qemu-utils, mmdebstrap, "
                        "e2fsprogs and openssh-client")
    res = subprocess.run([str(REPO / "deploy" / "vm-image.sh"), str(CACHE)], capture_output=True, text=True,
                         timeout=IMAGE_BUILD_TIMEOUT)
    if res.returncode != 0:
        pytest.fail(f"cannot build the VM image: {res.stdout[-2000:]}{res.stderr[-2000:]}")
    return CACHE


def booted_guest(tmp_path_factory, kernel_args: str = "", kernel: str = ""):
    """A guest booted from the cached image with the code mounted; powered off at the end."""
    if os.geteuid() != 0:
        pytest.fail("the VM tests build an image with mmdebstrap and need root")
    image = ensure_image()
    work = tmp_path_factory.mktemp("vm")
    machine = VirtualMachine(image, work, kernel_args, kernel)
    machine.create(make_code_disk(work))
    try:
        machine.boot()
        machine.mount_code()
        yield machine
    finally:
        machine.poweroff()
        print(f"guest console log: {machine.console}")


@pytest.fixture(scope="package")
def vm(tmp_path_factory):
    """The guest as Debian boots it: systemd and cgroup v2."""
    yield from booted_guest(tmp_path_factory)


@pytest.fixture(scope="module")
def vm_cgroup_v1(tmp_path_factory):
    """A guest whose systemd mounts the cgroup v1 controllers (its legacy, hybrid layout), as
    hosts older than cgroup v2 run; ended with its module, before the cgroup v2 guest boots."""
    yield from booted_guest(tmp_path_factory, "systemd.unified_cgroup_hierarchy=0")


@pytest.fixture(scope="module")
def vm_backports_kernel(tmp_path_factory):
    """The same guest booted with bookworm-backports' kernel (6.12, the kernel of Debian 13), as
    hosts with Linux 6.3 or newer run; ended with its module, before the cgroup v2 guest boots."""
    yield from booted_guest(tmp_path_factory, kernel="backports")
