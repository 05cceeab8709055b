#!/usr/bin/env bash
# Installs what package vmtest's guests are made of, on a Debian bookworm
# machine, as root: QEMU 10 from bookworm-backports (it has the igb model),
# busybox-static, and the newest Debian sid kernel with its NIC modules,
# decompressed into the cache ($XDPFWD_VM_CACHE or /var/cache/xdpfwd-vm).
# A cache that already holds a kernel is kept: sid moves, the tests should
# not move with it between two runs on one machine. Delete the cache to take
# the newest again.
set -euo pipefail
cache="${XDPFWD_VM_CACHE:-/var/cache/xdpfwd-vm}"
export DEBIAN_FRONTEND=noninteractive

if ! qemu-system-x86_64 -device help 2>/dev/null | grep -q '"igb"'; then
	if [ ! -e /etc/apt/sources.list.d/xdpfwd-backports.sources ]; then
		cat >/etc/apt/sources.list.d/xdpfwd-backports.sources <<-'SRC'
		Types: deb
		URIs: http://deb.debian.org/debian
		Suites: bookworm-backports
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
		SRC
	fi
	apt-get update -qq
	apt-get install -y -qq -t bookworm-backports qemu-system-x86 >/dev/null
fi
if ! file -L /bin/busybox 2>/dev/null | grep -q 'statically linked'; then
	apt-get install -y -qq busybox-static >/dev/null
fi

mods=(dca i2c-algo-bit igb failover net_failover virtio_net llc stp bridge veth)
have=1
[ -s "$cache/vmlinuz" ] || have=0
for m in "${mods[@]}"; do [ -s "$cache/modules/$m.ko" ] || have=0; done
if [ "$have" = 1 ]; then
	echo "fetch-assets: cached kernel $(cat "$cache/release" 2>/dev/null) in $cache"
	exit 0
fi

# A private apt state for sid, so the machine's own sources stay bookworm.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/lists/partial "$work"/cache/archives/partial
cat >"$work/sid.sources" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
apto=(-o "Dir::Etc::SourceList=$work/sid.sources" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o Dir::State::status=/dev/null
	-o APT::Sandbox::User=root)
apt-get "${apto[@]}" update -qq
# The newest generic amd64 flavour (not cloud, not rt).
release="$(apt-cache "${apto[@]}" search --names-only '^linux-modules-[0-9.]+\+[a-z0-9]+-amd64$' |
	awk '{print $1}' | sed 's/^linux-modules-//' | sort -V | tail -1)"
[ -n "$release" ] || { echo "fetch-assets: no sid linux-modules-*-amd64 package found" >&2; exit 1; }
image="linux-binary-unsigned-$release"
apt-cache "${apto[@]}" show "$image" >/dev/null 2>&1 || image="linux-image-$release-unsigned"
(cd "$work" && apt-get "${apto[@]}" download "linux-modules-$release" "$image" >/dev/null)
mkdir -p "$work/x"
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/x"; done
kdir=""
for d in "$work/x/usr/lib/modules/$release" "$work/x/lib/modules/$release"; do
	[ -d "$d" ] && kdir="$d" && break
done
vmlinuz=""
for f in "$kdir"/vmlinuz* "$work/x/boot/vmlinuz-$release"*; do
	[ -f "$f" ] && vmlinuz="$f" && break
done
[ -n "$vmlinuz" ] || { echo "fetch-assets: no vmlinuz in $image" >&2; exit 1; }

rm -rf "$cache.new"
mkdir -p "$cache.new/modules"
cp "$vmlinuz" "$cache.new/vmlinuz"
for m in "${mods[@]}"; do
	f="$(find "$kdir" -name "$m.ko*" | head -1)"
	[ -n "$f" ] || { echo "fetch-assets: module $m not in linux-modules-$release" >&2; exit 1; }
	case "$f" in
	*.xz) xz -dc "$f" >"$cache.new/modules/$m.ko" ;;
	*.zst) zstd -qdc "$f" >"$cache.new/modules/$m.ko" ;;
	*.gz) gzip -dc "$f" >"$cache.new/modules/$m.ko" ;;
	*) cp "$f" "$cache.new/modules/$m.ko" ;;
	esac
done
echo "$release" >"$cache.new/release"
rm -rf "$cache"
mv "$cache.new" "$cache"
echo "fetch-assets: kernel $release in $cache"
