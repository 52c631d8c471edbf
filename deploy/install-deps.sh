#!/usr/bin/env bash
# Install what a pykubelet node and its tests need, skipping what is already there.
# e2fsprogs + mount: the eviction tests put a node on a small ext4 filesystem on a loop device.
# systemd-container + mmdebstrap: the systemd units are tested in a Debian rootfs booted with
# systemd-nspawn (deploy/nspawn-rootfs.sh). docker.io + docker-compose: docker-compose.yml is
# tested with a dockerd the test starts itself.
# --vm: also what `make test-vm` needs to boot a Debian guest (qemu, its image tools, ssh).
# Debian/Ubuntu, as root. Safe to run again: it only installs missing packages.
set -euo pipefail

PACKAGES=(containerd runc containernetworking-plugins nats-server docker-registry busybox-static
          iptables iproute2 e2fsprogs mount systemd-container mmdebstrap docker.io docker-compose)
if [ "${1:-}" = "--vm" ]; then
  PACKAGES+=(qemu-system-x86 qemu-utils openssh-client)
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  missing+=(python3-venv)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: system packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing ${missing[*]}; run as root (apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "deps: installing ${missing[*]} (apt-get; this takes a minute or two on a fresh machine)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# No service may start on its own while installing: a dockerd started by its package would turn
# the host's FORWARD policy to DROP and cut pods off their bridge. (Tests start what they need.)
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
  trap 'rm -f "$policy"' EXIT
fi
apt-get install -y -q --no-install-recommends "${missing[@]}"
# A distribution's containerd unit may have started the system containerd; pykubelet runs its
# own instance with its own socket and directories, so the two do not meet.
echo "deps: done"
