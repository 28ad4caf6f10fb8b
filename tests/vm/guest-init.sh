#!/bin/sh
# /init of the test-vm guest (busybox sh, PID 1 until the exec at the end):
# mounts, modules, the network QEMU's user-mode stack expects, then execd
# as PID 1 for the rest of the guest's life. Its token and extra arguments
# come from QEMU's fw_cfg (opt/execd/token, opt/execd/args), never from the
# kernel command line, which every process can read.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=0620,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run
# cgroup v2 only (the unified hierarchy), as in a Kata guest.
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
while read -r m; do insmod "/lib/modules/$m.ko" || echo "init: insmod $m failed" >&2; done < /lib/modules/load-order
hostname -F /etc/hostname
# QEMU's user-mode network (restrict=on: nothing leaves the host) forwards
# 127.0.0.1:PORT on the host to 10.0.2.15:44772 here. No default route: the
# guest answers the host's forwarder on the link and reaches nothing else.
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
fw=/sys/firmware/qemu_fw_cfg/by_name/opt/execd
args=""
[ -r "$fw/args/raw" ] && args=$(cat "$fw/args/raw")
if [ -r "$fw/token/raw" ]; then
  (umask 077; cat "$fw/token/raw" > /run/execd-token)
  set -- --access-token-file /run/execd-token
else
  set -- --insecure-no-auth
fi
echo "init: $(cut -d' ' -f1 /proc/uptime)s after boot, exec /execd" >&2
# shellcheck disable=SC2086
exec /execd --init --host 0.0.0.0 --port 44772 --state-dir /var/lib/execd "$@" $args
