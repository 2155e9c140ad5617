#!/usr/bin/env bash
# build.sh [OUTDIR]: build nvhook_<version>_amd64.deb into OUTDIR (default: build/deb).
#
# The package ships a wheelhouse, not a venv (packaging/wheels.sh makes it: nvhook, its
# dependencies, pip). Its postinst makes the venv in /opt/nvhook with the target's
# /usr/bin/python3 and installs from those wheels, offline; a venv cannot be built here and
# moved, as it names its interpreter by absolute path. The dependency wheels include compiled
# ones (PyYAML, rpds-py) for CPython 3.11 on x86_64, hence Architecture: amd64
# and Depends: python3 (>= 3.11), python3 (<< 3.12), i.e. Debian 12.
#
# Contents:
#   /usr/lib/nvhook/wheels/*.whl          the wheelhouse (postinst installs from it)
#   /opt/nvhook                           the venv (made by postinst, removed by postrm)
#   /usr/bin/nvhook, nvhook-runtime, nvhook-hook  links into /opt/nvhook/bin (the launchers
#                                         name their interpreter absolutely, so links work)
#   /etc/nvhook/config.toml               the defaults, all commented out (a conffile)
#   /lib/systemd/system/nvhook-cdi-refresh.{service,path}   enabled on first install
#   /usr/share/nvhook/kubernetes/         RuntimeClass, example pod, installer DaemonSet
#   /usr/share/doc/nvhook/copyright
# The containerd (or other engine) configuration is left to the admin: `nvhook runtime
# configure`, as a package must not edit another package's configuration.
#
# Environment: PYTHON (a Python 3.11 with pip, for packaging/wheels.sh; default python3),
# WHEELS (an existing wheelhouse to use instead of building one).
set -euo pipefail

say() { printf 'build.sh: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PACKAGING="$(dirname "$HERE")"
ROOT="$(dirname "$PACKAGING")"

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

main() {
    case "${1:-}" in -h | --help)
        usage
        exit 0
        ;;
    esac
    if (($# > 1)) || [[ "${1:-}" == -* ]]; then
        usage >&2
        exit 2
    fi
    local out="${1:-$ROOT/build/deb}"
    command -v dpkg-deb >/dev/null || die "dpkg-deb not found (Debian package dpkg)"

    local tmp
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/nvhook-deb.XXXXXX")"
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "rm -rf '$tmp'" EXIT
    local pkg="$tmp/pkg"

    local wheels="$pkg/usr/lib/nvhook/wheels"
    mkdir -p "$wheels"
    if [[ -n "${WHEELS:-}" ]]; then
        cp "$WHEELS"/*.whl "$wheels/"
    else
        "$PACKAGING/wheels.sh" "$wheels"
    fi
    local wheel version
    wheel="$(find "$wheels" -maxdepth 1 -name 'nvhook-*-py3-none-any.whl' | sort -V | tail -n 1)"
    [[ -n "$wheel" ]] || die "no nvhook wheel in the wheelhouse"
    find "$wheels" -maxdepth 1 -name 'pip-*.whl' | grep -q . || die "no pip wheel in the wheelhouse"
    version="$(basename "$wheel")"
    version="${version#nvhook-}"
    version="${version%%-*}"
    # PEP 440 pre-releases sort before the release in Debian only with a tilde: 0.2.0rc1 -> 0.2.0~rc1
    version="$(sed -E 's/(a|b|rc|\.dev)([0-9]+)$/~\1\2/' <<<"$version")"

    install -d "$pkg/usr/bin" "$pkg/etc/nvhook" "$pkg/lib/systemd/system" \
        "$pkg/usr/share/nvhook/kubernetes" "$pkg/usr/share/doc/nvhook" "$pkg/DEBIAN"
    local name
    for name in nvhook nvhook-runtime nvhook-hook; do
        ln -s "/opt/nvhook/bin/$name" "$pkg/usr/bin/$name"
    done
    install -m 0644 "$PACKAGING/config.toml" "$pkg/etc/nvhook/config.toml"
    install -m 0644 "$PACKAGING"/systemd/nvhook-cdi-refresh.{service,path} "$pkg/lib/systemd/system/"
    install -m 0644 "$PACKAGING"/kubernetes/*.yaml "$pkg/usr/share/nvhook/kubernetes/"
    cat >"$pkg/usr/share/doc/nvhook/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: nvhook

Files: *
License: Apache-2.0
 On Debian systems, the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0. The wheels in /usr/lib/nvhook/wheels carry their
 own licences in their metadata.
EOF
    chmod 0644 "$pkg/usr/share/doc/nvhook/copyright"

    install -m 0755 "$HERE/preinst" "$HERE/postinst" "$HERE/prerm" "$HERE/postrm" "$pkg/DEBIAN/"
    echo /etc/nvhook/config.toml >"$pkg/DEBIAN/conffiles"
    local size
    size="$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)"
    cat >"$pkg/DEBIAN/control" <<EOF
Package: nvhook
Version: $version
Architecture: amd64
Maintainer: nvhook developers <nvhook@localhost>
Installed-Size: $size
Depends: python3 (>= 3.11), python3 (<< 3.12)
Recommends: runc | crun
Section: admin
Priority: optional
Description: give containers NVIDIA GPUs: runc drop-in, CDI engine, OCI hooks
 nvhook-runtime stands in for runc: it adds the GPUs a container asks for
 (NVIDIA_VISIBLE_DEVICES, CDI annotations) to its OCI spec, then runs runc.
 nvhook generates and validates CDI specs, configures container engines and
 lays out a mock GPU machine to try it all without a GPU; nvhook-hook holds
 the OCI hooks it injects. Installed as a Python venv in /opt/nvhook.
EOF

    mkdir -p "$out"
    local deb="$out/nvhook_${version}_amd64.deb"
    # root-owned files whoever builds; xz at a low level: the wheels are compressed already
    dpkg-deb --root-owner-group -Zxz -z1 --build "$pkg" "$deb" >/dev/null
    say "built $deb"
    echo "$deb"
}

main "$@"
