#!/usr/bin/env bash
# wheels.sh OUTDIR: a wheelhouse from which nvhook installs offline.
#
# OUTDIR receives nvhook's wheel (built from SOURCE), a wheel of each of its dependencies and
# one of pip itself, so that packaging/install.sh and the Debian package can make the venv
# with `python3 -m venv --without-pip` and `python3 OUTDIR/pip-*.whl/pip install --no-index`:
# no network, and no python3-venv (ensurepip) on the target.
#
# The dependency wheels are those of the interpreter that runs pip here (PYTHON), so it must be
# the target's Python minor version (Debian 12: 3.11) on the target's architecture; the script
# checks the version against PY_VERSION.
#
# Environment:
#   PYTHON      a Python with pip (default: python3)
#   PY_VERSION  the target's Python, major.minor (default: 3.11)
#   SOURCE      the project directory (default: this script's parent directory)
# The source is copied to a temporary directory first, so the build leaves nothing in SOURCE.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

say() { printf 'wheels.sh: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
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
    local here python py_version source
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
    python="${PYTHON:-python3}"
    py_version="${PY_VERSION:-3.11}"
    source="${SOURCE:-$(dirname "$here")}"
    [[ -f "$source/pyproject.toml" ]] || die "$source has no pyproject.toml (set SOURCE)"

    local have
    have="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" ||
        die "$python does not run"
    [[ "$have" == "$py_version" ]] ||
        die "$python is Python $have; the wheels must be for the target's $py_version (set PYTHON)"
    "$python" -m pip --version >/dev/null 2>&1 || die "$python has no pip"

    local tmp
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/nvhook-wheels.XXXXXX")"
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "rm -rf '$tmp'" EXIT
    # Only what the wheel is made of: no venv, VCS data, caches, tests or earlier builds.
    tar -C "$source" -cf - \
        --exclude='./.*' --exclude=./build --exclude=./dist --exclude='*.egg-info' \
        --exclude=__pycache__ --exclude=./tests --exclude=./bench --exclude=./packaging . |
        tar -C "$tmp" -xf -

    mkdir -p "$out"
    rm -f "$out"/nvhook-*.whl # a stale build of the same version would win
    say "building nvhook and collecting its dependencies and pip into $out"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$python" -m pip wheel --quiet --wheel-dir "$out" "$tmp" pip
    ls "$out"/nvhook-*.whl "$out"/pip-*.whl >/dev/null
    say "$(find "$out" -maxdepth 1 -name '*.whl' | wc -l) wheels in $out"
}

main "$@"
