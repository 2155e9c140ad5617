#!/usr/bin/env bash
# wheels.sh OUTDIR: a wheelhouse from which nvhook installs offline, with any supported Python.
#
# OUTDIR receives nvhook's wheel (built from SOURCE), one of pip itself, and the wheels of
# every dependency, the extras' too (nvhook[all]), for every supported interpreter (CPython
# PY_VERSIONS) on every architecture of ARCHES, so that packaging/install.sh and the
# packages (packaging/build.sh) make the venv with `python3 -m venv --without-pip` and
# `python3 OUTDIR/pip-*.whl/pip install --no-index`: no network, and no python3-venv (ensurepip) on the target.
#
# A pure-Python wheel is taken wherever the project publishes one; the compiled ones (PyYAML,
# rpds-py) are fetched per interpreter and architecture as manylinux2014 (glibc >= 2.17)
# wheels with `pip download --only-binary=:all: --platform … --python-version …`, so the
# interpreter that runs pip here (PYTHON) may be any supported one, on any architecture.
# pip's cache keeps what it downloaded: a second run needs the index only to resolve.
#
# Environment:
#   PYTHON       a Python >= 3.11 with pip (default: python3)
#   PY_VERSIONS  the target interpreters, major.minor (default: 3.11 3.12 3.13 3.14)
#   ARCHES       the target architectures, uname -m spelling (default: this machine's;
#                x86_64 and aarch64 are supported)
#   SOURCE       the project directory (default: this script's parent directory)
# The source is copied to a temporary directory first, so the build leaves nothing in SOURCE.
set -euo pipefail

SUPPORTED_PY="3.11 3.12 3.13 3.14"
SUPPORTED_ARCHES="x86_64 aarch64"

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

say() { printf 'wheels.sh: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

# one_of WORD LIST: whether WORD is a word of LIST.
one_of() {
    [[ " $2 " == *" $1 "* ]]
}

main() {
    case "${1:-}" in -h | --help)
        usage
        exit 0
        ;;
    esac
    if (($# != 1)) || [[ "$1" == -* ]]; then
        usage >&2
        exit 2
    fi
    local out="$1"
    local here python source py_versions arches
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
    python="${PYTHON:-python3}"
    py_versions="${PY_VERSIONS:-$SUPPORTED_PY}"
    arches="${ARCHES:-$(uname -m)}"
    source="${SOURCE:-$(dirname "$here")}"
    [[ -f "$source/pyproject.toml" ]] || die "$source has no pyproject.toml (set SOURCE)"
    local v a
    for v in $py_versions; do
        one_of "$v" "$SUPPORTED_PY" || die "PY_VERSIONS: $v is not supported ($SUPPORTED_PY)"
    done
    for a in $arches; do
        one_of "$a" "$SUPPORTED_ARCHES" || die "ARCHES: $a is not supported ($SUPPORTED_ARCHES)"
    done

    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null ||
        die "$python is not a Python >= 3.11 (set PYTHON)"
    "$python" -m pip --version >/dev/null 2>&1 || die "$python has no pip"

    local tmp
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/nvhook-wheels.XXXXXX")"
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "rm -rf '$tmp'" EXIT
    # Only what the wheel is made of: no venv, VCS data, caches, tests or earlier builds.
    mkdir "$tmp/src"
    tar -C "$source" -cf - \
        --exclude='./.*' --exclude=./build --exclude=./dist --exclude='*.egg-info' \
        --exclude=__pycache__ --exclude=./tests --exclude=./bench --exclude=./packaging . |
        tar -C "$tmp/src" -xf -

    mkdir -p "$out"
    rm -f "$out"/nvhook-*.whl # a stale build of the same version would win
    export PIP_DISABLE_PIP_VERSION_CHECK=1
    say "building nvhook's wheel into $out"
    "$python" -m pip wheel --quiet --no-deps --wheel-dir "$out" "$tmp/src"
    local wheel
    wheel="$(find "$out" -maxdepth 1 -name 'nvhook-*.whl')"
    [[ -n "$wheel" ]] || die "pip built no nvhook wheel"
    "$python" -m pip download --quiet --only-binary=:all: --no-deps --dest "$out" pip

    for a in $arches; do
        for v in $py_versions; do
            say "dependencies for CPython $v on $a"
            "$python" -m pip download --quiet --only-binary=:all: --dest "$out" \
                --implementation cp --python-version "$v" --abi "cp${v/./}" --abi abi3 \
                --abi none --platform "manylinux2014_$a" --platform "manylinux_2_17_$a" \
                "${wheel}[all]"
        done
    done
    ls "$out"/pip-*.whl >/dev/null
    say "$(find "$out" -maxdepth 1 -name '*.whl' | wc -l) wheels in $out"
}

main "$@"
