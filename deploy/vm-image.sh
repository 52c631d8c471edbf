#!/usr/bin/env bash
# A Debian bookworm disk image that boots, under qemu, a systemd host on cgroup v2 with what a
# pykubelet node needs: the production host of today, which these machines (cgroup v1, PID 1 not
# systemd) are not. Built once with mmdebstrap from Debian's packages and kept in DIR; a rebuild
# happens when this script changes. tests/vm boots it.
#
#   deploy/vm-image.sh DIR   -> DIR/disk.raw (ext4, the root file system), DIR/vmlinuz,
#                               DIR/initrd.img (bookworm's kernel, 6.1), DIR/vmlinuz-backports,
#                               DIR/initrd.img-backports (bookworm-backports' kernel, 6.12),
#                               DIR/id_ed25519 (root's ssh key into the guest)
#
# Two kernels: Debian 12's own boots the guest, as on most bookworm hosts; the backports one is
# what newer hosts run (Debian 13 ships 6.12), and what user namespaced pods need (ID-mapped
# mounts of tmpfs came with Linux 6.3). Both are in the one root file system, each with its modules.
#
# The guest gets its network from qemu's user-mode NAT (DHCP through systemd-networkd), an ssh
# server for root with the key above only, and no password for anyone. This checkout and its
# interpreter are not in the image: the tests bring them on a second, read-only disk (Debian's
# cloud kernel has no 9p) and bind them to the same paths.
set -euo pipefail

DIR=${1:?usage: $0 DIR}
PACKAGES=systemd,systemd-sysv,dbus,udev,kmod,linux-image-cloud-amd64,openssh-server,python3,containerd,runc,containernetworking-plugins,nats-server,docker-registry,iproute2,iptables,busybox-static,procps,util-linux,mount,e2fsprogs,ca-certificates
KEY=$(cat "$0" "$(dirname "$0")/guest-registry.yml" | sha256sum | cut -c1-16)
SIZE=${VM_DISK_SIZE:-6G}

if [ -f "$DIR/image.key" ] && [ "$(cat "$DIR/image.key")" = "$KEY" ] && [ -f "$DIR/disk.raw" ]; then
  exit 0
fi
for tool in mmdebstrap mkfs.ext4 ssh-keygen qemu-system-x86_64 qemu-img; do
  command -v "$tool" >/dev/null || { echo "vm-image: $tool is missing; \`make deps-vm\` installs it" >&2; exit 1; }
done
echo "vm-image: building a Debian bookworm systemd image in $DIR (mmdebstrap, a minute or two)"
rm -rf "$DIR/root.tmp" "$DIR/image.key" "$DIR/disk.raw" "$DIR/disk.tmp"
mkdir -p "$DIR"
R="$DIR/root.tmp"
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The backports kernel beside bookworm's: apt prefers bookworm's metapackage (backports is
# NotAutomatic), so the hook upgrades it from backports and bookworm's kernel stays installed.
mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
  --customize-hook='chroot "$1" apt-get install -y -q -t bookworm-backports linux-image-cloud-amd64' \
  bookworm "$R" "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
  "deb $MIRROR bookworm-backports main"

# Root logs in with this key only.
rm -f "$DIR/id_ed25519" "$DIR/id_ed25519.pub"
ssh-keygen -q -t ed25519 -N "" -C pykubelet-vm -f "$DIR/id_ed25519"
install -d -m 0700 "$R/root/.ssh"
install -m 0600 "$DIR/id_ed25519.pub" "$R/root/.ssh/authorized_keys"
cat > "$R/etc/ssh/sshd_config.d/pykubelet-vm.conf" <<'CONF'
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
CONF

# The network: qemu's NAT hands out 10.0.2.15 by DHCP; the host is 10.0.2.2.
cat > "$R/etc/systemd/network/10-qemu.network" <<'CONF'
[Match]
Name=en* eth*

[Network]
DHCP=ipv4
CONF
mkdir -p "$R/etc/systemd/system/multi-user.target.wants"
ln -sf /lib/systemd/system/systemd-networkd.service "$R/etc/systemd/system/multi-user.target.wants/"
echo "nameserver 10.0.2.3" > "$R/etc/resolv.conf"
echo "pykubelet-vm" > "$R/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 pykubelet-vm\n' > "$R/etc/hosts"
echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" > "$R/etc/fstab"
# The node runs its own bus and containerd (pykubelet-bus, pykubelet-containerd): Debian's units
# would take their ports and sockets.
for unit in nats-server containerd; do
  ln -sf /dev/null "$R/etc/systemd/system/$unit.service"
done
# The image registry the node pulls from.
install -m 0644 "$(dirname "$0")/guest-registry.yml" "$R/etc/docker/registry/config.yml"

mapfile -t kernels < <(cd "$R/boot" && ls vmlinuz-* | sed 's/^vmlinuz-//' | sort -V)
if [ "${#kernels[@]}" -ne 2 ]; then
  echo "vm-image: expected bookworm's and bookworm-backports' kernels, found: ${kernels[*]:-none}" >&2
  exit 1
fi
echo "vm-image: kernels ${kernels[0]} (default) and ${kernels[1]} (backports)"
cp "$R/boot/vmlinuz-${kernels[0]}" "$DIR/vmlinuz.tmp"
cp "$R/boot/initrd.img-${kernels[0]}" "$DIR/initrd.img.tmp"
cp "$R/boot/vmlinuz-${kernels[1]}" "$DIR/vmlinuz-backports.tmp"
cp "$R/boot/initrd.img-${kernels[1]}" "$DIR/initrd.img-backports.tmp"
mkfs.ext4 -q -L pykubelet-vm -d "$R" "$DIR/disk.tmp" "$SIZE"
rm -rf "$R"
mv "$DIR/vmlinuz.tmp" "$DIR/vmlinuz"
mv "$DIR/initrd.img.tmp" "$DIR/initrd.img"
mv "$DIR/vmlinuz-backports.tmp" "$DIR/vmlinuz-backports"
mv "$DIR/initrd.img-backports.tmp" "$DIR/initrd.img-backports"
mv "$DIR/disk.tmp" "$DIR/disk.raw"
echo "$KEY" > "$DIR/image.key"
echo "vm-image: ready"
