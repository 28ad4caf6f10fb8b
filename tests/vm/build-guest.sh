#!/bin/bash
# Builds the micro-VM guest for `make test-vm`: a Debian cloud kernel and an
# initramfs holding busybox, bash, a minimal python3, a few virtio modules and
# the static execd, whose /init ends in `exec /execd --init ...`.
#
#   tests/vm/build-guest.sh EXECD_STATIC OUTDIR
#
# Writes OUTDIR/vmlinuz and OUTDIR/initramfs.gz. Every piece comes from
# Debian packages (apt-get download, then dpkg-deb -x); the .debs and their
# extracted trees are cached in $EXECD_VM_CACHE (default ~/.cache/execd/vm)
# and fetched again only when Debian has a newer version. The initramfs is
# rebuilt every time (about a second): it must hold the execd just built.
set -euo pipefail

execd_static=$(realpath "$1")
out=$(realpath -m "$2")
cache=${EXECD_VM_CACHE:-$HOME/.cache/execd/vm}
here=$(dirname "$(realpath "$0")")
mkdir -p "$out" "$cache/debs"

# Packages whose files go into the guest (the kernel is resolved below).
PACKAGES=(busybox-static bash libtinfo6 libc6 python3.11-minimal libpython3.11-minimal zlib1g libexpat1)
# Kernel modules to load at boot, with their dependencies (the cloud kernel
# builds virtio as modules): the network card, the vsock transport, the
# entropy source and fw_cfg (the token arrives through it, not on the
# kernel command line that every process can read).
MODULES=(virtio_pci virtio_net vmw_vsock_virtio_transport virtio_rng qemu_fw_cfg)

# The newest cloud kernel: the metapackage names the image package.
deb_for() {  # deb_for PACKAGE -> path of the cached .deb of Debian's candidate version
  local pkg=$1 ver file
  ver=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
  if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then
    apt-get update -qq >/dev/null
    ver=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
  fi
  [ -n "$ver" ] && [ "$ver" != "(none)" ] || { echo "build-guest: no Debian package $pkg" >&2; return 1; }
  file="$cache/debs/${pkg}_${ver//:/_}.deb"
  if [ ! -s "$file" ]; then
    local tmp
    tmp=$(mktemp -d "$cache/debs/dl.XXXXXX")
    (cd "$tmp" && apt-get download -q "$pkg=$ver" >/dev/null 2>&1) || {
      rm -rf "$tmp"; echo "build-guest: apt-get download $pkg=$ver failed" >&2; return 1; }
    mv "$tmp"/*.deb "$file" && rm -rf "$tmp"
  fi
  echo "$file"
}

meta=$(deb_for linux-image-cloud-amd64)
kpkg=$(dpkg-deb -f "$meta" Depends | grep -o 'linux-image-[^ ,]*-cloud-amd64' | head -1)
kdeb=$(deb_for "$kpkg")
kdir="$cache/$(basename "$kdeb" .deb)"
if [ ! -d "$kdir/boot" ]; then
  rm -rf "$kdir.tmp" && mkdir -p "$kdir.tmp" && dpkg-deb -x "$kdeb" "$kdir.tmp" && mv "$kdir.tmp" "$kdir"
fi
kver=$(basename "$kdir"/lib/modules/*)
cp "$kdir/boot/vmlinuz-$kver" "$out/vmlinuz"

root=$(mktemp -d "$out/root.XXXXXX")
trap 'rm -rf "$root"' EXIT
for p in "${PACKAGES[@]}"; do
  dpkg-deb -x "$(deb_for "$p")" "$root"
done
rm -rf "$root"/usr/share/{doc,man,info,lintian,locale,bash-completion} "$root"/usr/lib/x86_64-linux-gnu/gconv \
       "$root"/etc/{cron.d,init.d,logrotate.d}
mkdir -p "$root"/{proc,sys,dev,tmp,run,var/lib/execd,root,etc,usr/sbin,sbin,lib/modules}
chmod 1777 "$root/tmp"
# busybox's applets for everything bash and python3 do not cover (sleep,
# setsid, mount, ip, ...): one symlink each, never over a real binary.
"$root/bin/busybox" --list-full | while read -r applet; do
  [ -e "$root/$applet" ] || [ -L "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
done
ln -sf python3.11 "$root/usr/bin/python3"
ln -sf bash "$root/bin/sh.bash"
cat > "$root/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/bin/sh
P
cat > "$root/etc/group" <<'G'
root:x:0:
nogroup:x:65534:
G
echo vm > "$root/etc/hostname"

# Modules in load order (each after the ones it depends on), from the
# depends= field of each module's .modinfo.
mods="$kdir/lib/modules/$kver/kernel"
declare -A path_of=() loaded=()
while IFS= read -r f; do n=$(basename "$f" .ko); path_of[$n]=$f; path_of[${n//-/_}]=$f; done \
  < <(find "$mods" -name '*.ko')
order=()
add_module() {
  local m=${1//-/_} dep
  [ -n "${loaded[$m]:-}" ] && return 0
  [ -n "${path_of[$m]:-}" ] || { echo "build-guest: no module $m in $kver" >&2; return 1; }
  for dep in $(tr '\0' '\n' < "${path_of[$m]}" | sed -n 's/^depends=//p' | tr ',' ' '); do
    add_module "$dep"
  done
  loaded[$m]=1
  order+=("$m")
}
for m in "${MODULES[@]}"; do add_module "$m"; done
for m in "${order[@]}"; do cp "${path_of[$m]}" "$root/lib/modules/$m.ko"; done
printf '%s\n' "${order[@]}" > "$root/lib/modules/load-order"

install -m 0755 "$execd_static" "$root/execd"
install -m 0755 "$here/guest-init.sh" "$root/init"

(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) | gzip -1 > "$out/initramfs.gz.tmp"
mv "$out/initramfs.gz.tmp" "$out/initramfs.gz"
echo "guest: kernel $kver, modules ${order[*]}, initramfs $(du -h "$out/initramfs.gz" | cut -f1)"
