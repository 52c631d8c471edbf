#!/usr/bin/env bash
# A Debian rootfs that boots systemd under systemd-nspawn with what a pykubelet node needs, for
# testing the systemd units for real (tests/deploy). Built once with mmdebstrap from Debian's
# packages (about a minute) and kept in DIR; a rebuild happens when this script changes.
#
#   deploy/nspawn-rootfs.sh DIR      -> DIR/rootfs
set -euo pipefail

DIR=${1:?usage: $0 DIR}
PACKAGES=systemd,systemd-sysv,dbus,python3,containerd,runc,containernetworking-plugins,nats-server,docker-registry,iproute2,iptables,busybox-static,procps,util-linux,mount,kmod
KEY=$(cat "$0" "$(dirname "$0")/guest-registry.yml" | sha256sum | cut -c1-16)

if [ -f "$DIR/rootfs.key" ] && [ "$(cat "$DIR/rootfs.key")" = "$KEY" ] && [ -d "$DIR/rootfs" ]; then
  exit 0
fi
for tool in mmdebstrap systemd-nspawn; do
  command -v "$tool" >/dev/null || { echo "nspawn-rootfs: $tool is missing; \`make deps\` installs it" >&2; exit 1; }
done
echo "nspawn-rootfs: building a Debian rootfs with systemd in $DIR (mmdebstrap, about a minute)"
rm -rf "$DIR/rootfs" "$DIR/rootfs.tmp" "$DIR/rootfs.key"
mkdir -p "$DIR"
mmdebstrap --quiet --variant=minbase --include="$PACKAGES" bookworm "$DIR/rootfs.tmp"
R="$DIR/rootfs.tmp"
# Debian's own nats-server would take the bus port: the node runs its bus as pykubelet-bus.service.
ln -sf /dev/null "$R/etc/systemd/system/nats-server.service"
# On a cgroup v1 host, nspawn mounts the controller hierarchies read-only in the container; runc
# must create cgroups there. Measured: a bind remount read-write is all it takes (no extra
# capability or device rule), and the container still sees only its own subtree (cgroup namespace).
cat > "$R/etc/systemd/system/cgroup-v1-writable.service" <<'UNIT'
[Unit]
Description=Make the cgroup v1 controllers writable for the container runtime
DefaultDependencies=no
Before=pykubelet-containerd.service containerd.service
ConditionPathIsDirectory=/sys/fs/cgroup/cpuset

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for c in /sys/fs/cgroup/*/; do mount -o remount,bind,rw "$c"; done'

[Install]
WantedBy=sysinit.target
UNIT
mkdir -p "$R/etc/systemd/system/sysinit.target.wants"
ln -sf ../cgroup-v1-writable.service "$R/etc/systemd/system/sysinit.target.wants/cgroup-v1-writable.service"
# The image registry the node pulls from.
install -m 0644 "$(dirname "$0")/guest-registry.yml" "$R/etc/docker/registry/config.yml"
echo "pykubelet-node" > "$R/etc/hostname"
mv "$R" "$DIR/rootfs"
echo "$KEY" > "$DIR/rootfs.key"
echo "nspawn-rootfs: ready"
