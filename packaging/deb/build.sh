#!/usr/bin/env bash
# Builds carma's Debian package from a built binary, with Debian's own dpkg-deb (no other
# tool): the binary in /usr/bin, the systemd units and the man page that binary itself writes
# (`carma systemd --install --system`, so the package and `carma systemd` never differ), and
# the bash, zsh and fish completions it prints. Installing it touches no state: an
# administrator then runs `sudo carma init` and enables the timer (the postinst says so).
#
#   packaging/deb/build.sh [--compress xz|gzip|none] BINARY OUTDIR    # prints the .deb's path
#
# e.g. cargo build --release && packaging/deb/build.sh target/release/carma dist/
# tests/package.rs builds, installs, checks and removes it on the machine CI runs on.
set -euo pipefail

compress=xz
if [ "${1:-}" = "--compress" ]; then
    compress="$2"
    shift 2
fi
if [ $# -ne 2 ]; then
    echo "usage: $0 [--compress xz|gzip|none] BINARY OUTDIR" >&2
    exit 2
fi
binary=$1
outdir=$2
for tool in dpkg-deb dpkg gzip; do
    command -v "$tool" >/dev/null || { echo "error: $tool is missing; apt-get install dpkg-dev" >&2; exit 2; }
done
[ -x "$binary" ] || { echo "error: $binary is not an executable carma; build it first (cargo build --release)" >&2; exit 2; }

version=$("$binary" --version | awk '{ print $2 }')
arch=$(dpkg --print-architecture)
mkdir -p "$outdir"
stage=$(mktemp -d "${TMPDIR:-/tmp}/carma-deb.XXXXXXXX")
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"

install -D -m 0755 "$binary" "$stage/usr/bin/carma"
# The units run the installed binary on the system queue; the man page comes with them.
"$binary" --home /var/lib/carma systemd --install --system --exe /usr/bin/carma \
    --unit-dir "$stage/lib/systemd/system" --man-dir "$stage/usr/share/man/man1" >/dev/null
gzip -9n "$stage/usr/share/man/man1/carma.1"
install -d -m 0755 "$stage/usr/share/bash-completion/completions" \
    "$stage/usr/share/zsh/vendor-completions" "$stage/usr/share/fish/vendor_completions.d" \
    "$stage/usr/share/doc/carma"
"$binary" completions bash >"$stage/usr/share/bash-completion/completions/carma"
"$binary" completions zsh >"$stage/usr/share/zsh/vendor-completions/_carma"
"$binary" completions fish >"$stage/usr/share/fish/vendor_completions.d/carma.fish"
cat >"$stage/usr/share/doc/carma/copyright" <<'TEXT'
carma: a collocation-aware GPU resource manager for deep-learning training.
License: Apache-2.0 (/usr/share/common-licenses/Apache-2.0). The embedded estimator weights
are trained on the GPUMemNet dataset and are CC BY-NC 4.0.
TEXT

install -d -m 0755 "$stage/DEBIAN"
size_kib=$(du -sk --exclude=DEBIAN "$stage" | awk '{ print $1 }')
cat >"$stage/DEBIAN/control" <<TEXT
Package: carma
Version: $version
Architecture: $arch
Maintainer: carma developers <carma@localhost>
Installed-Size: $size_kib
Depends: libc6
Recommends: systemd
Section: admin
Priority: optional
Description: collocation-aware GPU resource manager for deep-learning training
 carma shares a server's GPUs between training jobs when their memory and SM
 activity say they fit, relaunches a job that runs out of GPU memory, and keeps
 every fact in a crash-safe journal. Slurm users' sbatch scripts run as they are.
 After installing: sudo carma init && sudo systemctl enable --now carma-tick.timer
TEXT
cat >"$stage/DEBIAN/postinst" <<'TEXT'
#!/bin/sh
# Units only: the state directory is the administrator's to create (`carma init`).
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
if [ "$1" = configure ] && [ ! -e /var/lib/carma/carma.redb ]; then
    echo "carma: next, as root: carma init && systemctl enable --now carma-tick.timer"
fi
exit 0
TEXT
cat >"$stage/DEBIAN/prerm" <<'TEXT'
#!/bin/sh
# The queue's journal and run folders stay in /var/lib/carma: removing the program keeps them.
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    systemctl stop carma-tick.timer carma-tick.service >/dev/null 2>&1 || true
    systemctl disable carma-tick.timer >/dev/null 2>&1 || true
fi
exit 0
TEXT
cat >"$stage/DEBIAN/postrm" <<'TEXT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
TEXT
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"

deb="$outdir/carma_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Z"$compress" --build "$stage" "$deb" >/dev/null
echo "$deb"
