#!/bin/sh
# Build NVIDIA's Container Toolkit (the "anchor" of bench/runtime.py and bench/start.py
# --anchor) from a source tree the user provides, the way its Makefile's cmd-% targets do
# (NVIDIA/nvidia-container-toolkit v1.20.0 Makefile: go build -ldflags "-s -w
# '-extldflags=-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files
# -Wl,-z,lazy' -X internal/info.version=..."), offline: the tree vendors its modules
# (GOFLAGS=-mod=vendor) and the toolchain is the one given (GOTOOLCHAIN=local: no download).
#
#   bench/build-anchor.sh SRC OUT [GOROOT_CHROOT]
#
# SRC: an unpacked source tree (e.g. `git archive v1.20.0 | tar -x -C SRC`); OUT: where the
# binaries go (nvidia-container-runtime, nvidia-ctk, nvidia-cdi-hook,
# nvidia-container-runtime-hook). go.mod's `go` line must not be newer than the toolchain
# (v1.20.0: go 1.25.0; Debian 12's golang-go is 1.19, too old). Without a new enough `go` on
# PATH, give GOROOT_CHROOT: a Debian root with golang-go, gcc and libc6-dev (cgo: go-nvml
# dlopens libnvidia-ml.so.1), e.g.
#   mmdebstrap --variant=minbase --include=golang-go,ca-certificates,gcc,libc6-dev \
#       --aptopt='Acquire::Check-Valid-Until "false"' sid /var/cache/nvhook-bench/go-sid
# The build then runs chrooted there with SRC and OUT bind-mounted (root needed); the
# binaries link only glibc (libc.so.6), which this host's glibc serves.
# Nothing in CI uses this: building the anchor is the user's business (bench/README.md).
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 SRC OUT [GOROOT_CHROOT]" >&2
    exit 2
fi
src=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
chroot_dir=${3:-}
[ -f "$src/go.mod" ] && [ -d "$src/vendor" ] || {
    echo "$src: not a vendored nvidia-container-toolkit tree (no go.mod or vendor/)" >&2
    exit 2
}
version=$(sed -n 's/^LIB_VERSION := //p' "$src/versions.mk")
tag=$(sed -n 's/^LIB_TAG := //p' "$src/versions.mk")
[ -n "$tag" ] && version="$version-$tag"
cmds="nvidia-container-runtime nvidia-ctk nvidia-cdi-hook nvidia-container-runtime-hook"
info=github.com/NVIDIA/nvidia-container-toolkit/internal/info
ext='-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy'

build() { # $1: source dir as the builder sees it, $2: output dir likewise
    for cmd in $cmds; do
        echo "build-anchor: $cmd $version"
        (cd "$1" && GOTOOLCHAIN=local GOFLAGS=-mod=vendor CGO_ENABLED=1 GOCACHE=/tmp/anchor-gocache \
            go build -trimpath \
            -ldflags "-s -w '-extldflags=$ext' -X $info.gitCommit=source -X $info.version=$version" \
            -o "$2/$cmd" "./cmd/$cmd")
    done
}

if [ -z "$chroot_dir" ]; then
    build "$src" "$out"
else
    [ -x "$chroot_dir/usr/bin/go" ] || {
        echo "$chroot_dir: no usr/bin/go (install golang-go there)" >&2
        exit 2
    }
    self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
    # A private mount namespace: the bind mounts vanish with the build; inside the chroot
    # this script runs again, without a chroot argument, on the bound SRC and OUT.
    PATH=/usr/sbin:/usr/bin:/sbin:/bin unshare -m sh -eu -c '
        mkdir -p "$4/tmp/anchor-src" "$4/tmp/anchor-out"
        touch "$4/tmp/build-anchor.sh"
        mount --bind "$1" "$4/tmp/anchor-src"
        mount --bind "$2" "$4/tmp/anchor-out"
        mount --bind "$3" "$4/tmp/build-anchor.sh"
        mount -t proc proc "$4/proc"
        chroot "$4" env PATH=/usr/bin:/bin go version
        chroot "$4" env PATH=/usr/bin:/bin HOME=/tmp sh /tmp/build-anchor.sh /tmp/anchor-src /tmp/anchor-out
    ' unshare "$src" "$out" "$self" "$chroot_dir"
fi
for cmd in $cmds; do
    "$out/$cmd" --version 2>/dev/null | head -1 || true
done
