#!/usr/bin/env bash
# install.sh install|uninstall: put nvhook on a node, or take it off again. Run as root.
#
# install first runs ./preflight, which changes nothing: without bash, the commands this script
# runs, or an interpreter (below), it stops there with one line naming what to install. Then,
# step by step; each step is idempotent, so running it again is safe:
#   venv    a self-contained Python environment in PREFIX, made by PYTHON, nvhook installed into
#           it from SOURCE, and the nvhook-runtime / nvhook-hook launchers written with
#           PREFIX/bin/python as their absolute, isolated interpreter (`nvhook
#           install-entrypoints`), each behind its native program (the front-end, the hook)
#           when native/ beside this script has them (the installer image) and PREFIX is
#           /opt/nvhook, or when a C compiler works here. Without PYTHON, the interpreter is the node's own when it is
#           supported (as packaging/setup picks it), else the Python bundled next to this script
#           for the machine (python-$(uname -m)/, packaging/python-bundle.sh), copied to
#           PREFIX/python first (it runs from there only, so PREFIX must be the one it was made
#           for); a venv of another interpreter or version, or of another bundle, is made again
#   config  SYSCONFDIR/config.toml, a copy of the config.toml next to this script, unless the
#           file exists
#   cdi     the CDI spec CDI_DIR/nvidia.json (`nvhook cdi generate`); skipped, with a message,
#           when no NVIDIA driver is loaded (HOST_ROOT/proc/driver/nvidia/version missing)
#   units   nvhook-cdi-refresh.service and .path (systemd/ next to this script, their paths
#           set to PREFIX and CDI_DIR, the driver's watched files and the generate command
#           to DRIVER_ROOT) into SYSTEMD_UNIT_DIR, enabled when systemd runs: they regenerate
#           the spec at boot and when the driver's files change, then run `nvhook cdi check`;
#           and nvhook-shim-server.service (its path set to PREFIX), enabled and (re)started:
#           the pre-forked shim the native front-end hands GPU creates to (docs D12); and
#           nvhook-watch.service (its paths set as the refresh service's), enabled and
#           started: it keeps the spec current through a MIG re-layout, a GPU lost or added,
#           a driver loaded late (docs/watch.md; the unit's comment says why it is on)
#   engine  `nvhook runtime configure --runtime containerd --name RUNTIME_NAME` on
#           CONTAINERD_CONFIG (the originals kept in BACKUP_DIR); containerd has no reload, so
#           when that changed anything, containerd is restarted through systemd when systemd
#           runs it, else the script says to
# uninstall reverses them, last first: `nvhook runtime unconfigure` puts the engine's files
# back (it refuses, and uninstall stops, if they were edited since), containerd is restarted
# likewise, the units are disabled and removed, the spec removed if this nvhook wrote it (it
# names PREFIX/bin/nvhook-hook), the config removed if it is unchanged from the one install
# wrote (an edited one is kept), and PREFIX removed if install made it (the bundled Python in
# it too).
#
# Environment, with defaults:
#   PREFIX=/opt/nvhook                SYSCONFDIR=/etc/nvhook        CDI_DIR=/var/run/cdi
#   CONTAINERD_CONFIG=/etc/containerd/config.toml                   RUNTIME_NAME=nvidia
#   BACKUP_DIR=/var/lib/nvhook/backups
#   ENGINE=containerd     the container engine to configure: containerd, or none
#   SOURCE=…              what to install: a wheelhouse directory (packaging/wheels.sh makes
#                         one; installs offline), a project directory or a wheel or sdist file
#                         (pip fetches the dependencies); default: wheels/ next to this script
#                         when it exists, else the project this script is part of
#   PYTHON=…                          absolute path of a Python 3.11, 3.12, 3.13 or 3.14 to make the
#                                     venv with; default: as preflight picks (above)
#   HOST_ROOT=/                       where the driver's /proc and files are (cdi step)
#   DRIVER_ROOT=…                     where the driver's libraries and binaries are, for the
#                                     units (/run/nvidia/driver under the GPU Operator);
#                                     default: host.driver_root of SYSCONFDIR/config.toml,
#                                     empty (the host's own paths) when that is unset
#   SYSTEMD_UNIT_DIR=/etc/systemd/system
#   SYSTEMD=auto          auto: call systemctl when systemd runs (/run/systemd/system); no: never
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PREFIX="${PREFIX:-/opt/nvhook}"
SYSCONFDIR="${SYSCONFDIR:-/etc/nvhook}"
CDI_DIR="${CDI_DIR:-/var/run/cdi}"
CONTAINERD_CONFIG="${CONTAINERD_CONFIG:-/etc/containerd/config.toml}"
RUNTIME_NAME="${RUNTIME_NAME:-nvidia}"
BACKUP_DIR="${BACKUP_DIR:-/var/lib/nvhook/backups}"
ENGINE="${ENGINE:-containerd}"
PYTHON="${PYTHON:-}"
HOST_ROOT="${HOST_ROOT:-/}"
DRIVER_ROOT_GIVEN="${DRIVER_ROOT+yes}" # set, even empty: the config's driver_root is not read
DRIVER_ROOT="${DRIVER_ROOT-}"
SYSTEMD_UNIT_DIR="${SYSTEMD_UNIT_DIR:-/etc/systemd/system}"
SYSTEMD="${SYSTEMD:-auto}"
SOURCE="${SOURCE:-}"
BUNDLE="" # the bundled Python's directory, when it makes the venv (choose_interpreter)

CONFIG_TEMPLATE="$HERE/config.toml"
CDI_SPEC="nvidia.json"
UNITS=(nvhook-cdi-refresh.service nvhook-cdi-refresh.path nvhook-shim-server.service
    nvhook-watch.service)
# Written into PREFIX right after the venv is made: only a PREFIX holding it is ever removed
# or reinstalled over.
MARKER=".nvhook-install"

say() { printf 'install.sh: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

# check_path NAME VALUE: an absolute path of plain characters (they go into unit files, and
# through sed).
check_path() {
    [[ "$2" =~ ^/[-A-Za-z0-9._/+@:]*$ ]] ||
        die "$1=$2: expected an absolute path of letters, digits and -._/+@:"
}

check_settings() {
    local name
    for name in PREFIX SYSCONFDIR CDI_DIR CONTAINERD_CONFIG BACKUP_DIR HOST_ROOT \
        SYSTEMD_UNIT_DIR; do
        check_path "$name" "${!name}"
    done
    [[ -z "$PYTHON" ]] || check_path PYTHON "$PYTHON"
    [[ "$PREFIX" != / && "$SYSCONFDIR" != / ]] || die "PREFIX and SYSCONFDIR cannot be /"
    [[ "$RUNTIME_NAME" =~ ^[A-Za-z0-9][-A-Za-z0-9_.]*$ ]] ||
        die "RUNTIME_NAME=$RUNTIME_NAME: expected letters, digits and -_."
    case "$ENGINE" in containerd | none) ;; *) die "ENGINE=$ENGINE: expected containerd or none" ;; esac
    case "$SYSTEMD" in auto | no) ;; *) die "SYSTEMD=$SYSTEMD: expected auto or no" ;; esac
}

systemd_runs() {
    [[ "$SYSTEMD" == auto && -d /run/systemd/system ]]
}

ours() {
    [[ -f "$PREFIX/$MARKER" ]]
}

# ------------------------------------------------------------------------------ install steps

VERSION='import sys; print("%d.%d" % sys.version_info[:2])'

# choose_interpreter: PYTHON when set, else ./preflight's choice (which stops the install, with
# its one line, when the node has no interpreter nor the tools this script runs). For the
# bundled Python, BUNDLE is its directory and PYTHON where it will run from, PREFIX/python.
choose_interpreter() {
    if [[ -n "$PYTHON" ]]; then
        "$PYTHON" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 14))' \
            2>/dev/null || die "PYTHON=$PYTHON is not a supported Python (3.11, 3.12, 3.13 or 3.14)"
        return
    fi
    [[ -f "$HERE/preflight" && -f "$HERE/setup" ]] ||
        die "$HERE/preflight or $HERE/setup is missing: set PYTHON to the interpreter to use"
    local picked
    picked="$(PREFIX="$PREFIX" sh "$HERE/preflight")" || exit 1
    case "$picked" in
        "node "/*) PYTHON="${picked#node }" ;;
        "bundle "/*)
            BUNDLE="${picked#bundle }"
            PYTHON="$PREFIX/python/bin/python3"
            ;;
        *) die "$HERE/preflight printed '$picked': expected node PATH or bundle DIR" ;;
    esac
}

# same_interpreter VERSION HOME: whether the venv in PREFIX is of Python VERSION at HOME (and,
# for the bundled Python, of this very bundle).
same_interpreter() {
    [[ "$("$PREFIX/bin/python" -c "$VERSION" 2>/dev/null)" == "$1" ]] &&
        [[ "$(sed -n 's/^home = //p' "$PREFIX/pyvenv.cfg" 2>/dev/null)" == "$2" ]] &&
        { [[ -z "$BUNDLE" ]] || cmp -s "$BUNDLE/BUNDLE" "$PREFIX/python/BUNDLE"; }
}

step_venv() {
    if [[ -e "$PREFIX" ]] && ! ours && [[ -n "$(ls -A "$PREFIX")" ]]; then
        die "$PREFIX exists and was not made by this installer (no $MARKER in it): not touching it"
    fi

    local source="$SOURCE"
    if [[ -z "$source" ]]; then
        if [[ -d "$HERE/wheels" ]]; then
            source="$HERE/wheels"
        elif [[ -f "$HERE/../pyproject.toml" ]]; then
            source="$(dirname "$HERE")"
        else
            die "nothing to install: set SOURCE"
        fi
    fi
    [[ -e "$source" ]] || die "SOURCE=$source does not exist"
    local want home
    if [[ -n "$BUNDLE" ]]; then
        want="$(sed -n 's/^python=\([0-9]*\.[0-9]*\).*/\1/p' "$BUNDLE/BUNDLE")"
        home="$PREFIX/python/bin"
    else
        want="$("$PYTHON" -c "$VERSION")"
        home="$(dirname "$PYTHON")"
    fi

    local pip_wheel="" wheelhouse=0
    if [[ -d "$source" && ! -f "$source/pyproject.toml" ]]; then
        compgen -G "$source/nvhook-*.whl" >/dev/null || die "SOURCE=$source holds no nvhook wheel"
        wheelhouse=1
        pip_wheel="$(find "$source" -maxdepth 1 -name 'pip-*.whl' | sort -V | tail -n 1)"
    fi
    [[ -z "$BUNDLE" || -n "$pip_wheel" ]] ||
        die "SOURCE=$source: the bundled Python has no pip: use a wheelhouse with pip's wheel (packaging/wheels.sh)"

    # A venv of another Python (the node's python3 was upgraded or installed since, or the
    # bundle changed) is made again from scratch; the marker goes in first, so that whatever
    # follows is removed by uninstall even if it fails half-way.
    if ours && ! same_interpreter "$want" "$home"; then
        say "venv: $PREFIX is of another interpreter: making it again"
        rm -rf "$PREFIX"
    fi
    mkdir -p "$PREFIX"
    echo "made by nvhook's install.sh; uninstall removes this directory" >"$PREFIX/$MARKER"
    if [[ -n "$BUNDLE" && ! -e "$PREFIX/python" ]]; then
        say "python: the node has no supported Python: copying the bundled" \
            "$(sed -n 's/^python=//p' "$BUNDLE/BUNDLE") to $PREFIX/python"
        rm -rf "$PREFIX/python.tmp"
        cp -a "$BUNDLE" "$PREFIX/python.tmp"
        mv "$PREFIX/python.tmp" "$PREFIX/python"
    fi
    local venv_args=()
    [[ -n "$pip_wheel" ]] && venv_args+=(--without-pip)
    say "venv: $PREFIX with $PYTHON ($want)"
    "$PYTHON" -m venv "${venv_args[@]}" "$PREFIX"

    local pip=("$PREFIX/bin/python" -m pip)
    [[ -n "$pip_wheel" ]] && pip=("$PREFIX/bin/python" "$pip_wheel/pip")
    say "venv: installing nvhook from $source"
    if ((wheelhouse)); then
        # offline, and deaf to the node's own pip configuration
        PIP_CONFIG_FILE=/dev/null "${pip[@]}" --isolated install --quiet --disable-pip-version-check \
            --no-index --find-links "$source" --upgrade --force-reinstall 'nvhook[all]'
    else
        "${pip[@]}" install --quiet --disable-pip-version-check --upgrade --force-reinstall \
            "${source}[all]"
    fi
    # the native front-end and hook the installer image carries (packaging/build.sh), built
    # for PREFIX=/opt/nvhook (their launchers' paths are compiled in); else install-entrypoints
    # builds them where a C compiler works, or writes the Python launchers in their place
    local native=()
    if [[ -x "$HERE/native/nvhook-runtime" && "$PREFIX" == /opt/nvhook ]]; then
        native=(--frontend "$HERE/native/nvhook-runtime")
    fi
    "$PREFIX/bin/nvhook" install-entrypoints ${native[@]+"${native[@]}"} >/dev/null
    say "venv: $("$PREFIX/bin/nvhook" --version); launchers $PREFIX/bin/nvhook-runtime, nvhook-hook"
}

step_config() {
    local target="$SYSCONFDIR/config.toml"
    if [[ -e "$target" ]]; then
        say "config: $target exists: kept"
        return
    fi
    [[ -f "$CONFIG_TEMPLATE" ]] || die "$CONFIG_TEMPLATE is missing"
    mkdir -p "$SYSCONFDIR"
    cp "$CONFIG_TEMPLATE" "$target.tmp"
    chmod 0644 "$target.tmp"
    mv "$target.tmp" "$target"
    say "config: wrote $target (the defaults)"
}

step_cdi() {
    local version="${HOST_ROOT%/}/proc/driver/nvidia/version"
    if [[ ! -e "$version" ]]; then
        say "cdi: skipped: no NVIDIA driver is loaded ($version is missing); the" \
            "nvhook-cdi-refresh units write $CDI_DIR/$CDI_SPEC when it is"
        return
    fi
    "$PREFIX/bin/nvhook" cdi generate --root "$HOST_ROOT" --output "$CDI_DIR/$CDI_SPEC"
}

# configured_driver_root: DRIVER_ROOT when set, else host.driver_root of the installed config.
configured_driver_root() {
    if [[ -n "$DRIVER_ROOT_GIVEN" ]]; then
        printf '%s\n' "$DRIVER_ROOT"
        return
    fi
    local config="$SYSCONFDIR/config.toml"
    [[ -f "$config" ]] || return 0
    "$PREFIX/bin/python" -c 'import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print(tomllib.load(f).get("host", {}).get("driver_root", ""))' "$config" ||
        die "$config: cannot read host.driver_root (fix the file, or set DRIVER_ROOT)"
}

step_units() {
    if [[ ! -d "$HERE/systemd" ]]; then
        say "units: skipped: $HERE/systemd is missing"
        return
    fi
    mkdir -p "$SYSTEMD_UNIT_DIR"
    local unit driver_root
    driver_root="$(configured_driver_root)"
    [[ -z "$driver_root" ]] || check_path DRIVER_ROOT "$driver_root"
    local -a driver=()
    if [[ -n "$driver_root" && "$driver_root" != / ]]; then
        # the driver's files (every watched path but /dev's) and the generate command
        driver=(-e "/^PathChanged=\/dev\//!s|^PathChanged=|PathChanged=${driver_root%/}|"
            -e "s|cdi generate --output|cdi generate --driver-root ${driver_root%/} --output|"
            -e "s|nvhook watch --output|nvhook watch --driver-root ${driver_root%/} --output|")
    fi
    for unit in "${UNITS[@]}"; do
        sed -e "s|/opt/nvhook|$PREFIX|g" -e "s|/var/run/cdi|$CDI_DIR|g" "${driver[@]}" \
            "$HERE/systemd/$unit" >"$SYSTEMD_UNIT_DIR/$unit.tmp"
        chmod 0644 "$SYSTEMD_UNIT_DIR/$unit.tmp"
        mv "$SYSTEMD_UNIT_DIR/$unit.tmp" "$SYSTEMD_UNIT_DIR/$unit"
    done
    if systemd_runs; then
        systemctl daemon-reload
        systemctl enable nvhook-cdi-refresh.service
        systemctl enable --now nvhook-cdi-refresh.path
        # started anew: an upgrade's server has seen its code change and exited by now
        systemctl enable nvhook-shim-server.service
        systemctl restart nvhook-shim-server.service
        # restarted too: an upgrade's watcher runs the new code
        systemctl enable nvhook-watch.service
        systemctl restart nvhook-watch.service
        say "units: installed and enabled in $SYSTEMD_UNIT_DIR"
    else
        say "units: installed in $SYSTEMD_UNIT_DIR; systemd is not running here: run" \
            "\`systemctl enable --now nvhook-shim-server.service nvhook-watch.service;" \
            "systemctl enable nvhook-cdi-refresh.service; systemctl enable --now" \
            "nvhook-cdi-refresh.path\` where it does"
    fi
}

# reload_engine: containerd has no reload; restart it where systemd runs it.
reload_engine() {
    if systemd_runs && systemctl is-active --quiet containerd; then
        say "engine: restarting containerd"
        systemctl restart containerd
    else
        say "engine: restart containerd to load the change (it has no reload)"
    fi
}

step_engine() {
    if [[ "$ENGINE" == none ]]; then
        say "engine: skipped (ENGINE=none)"
        return
    fi
    local configure=("$PREFIX/bin/nvhook" runtime configure --runtime containerd
        --config "$CONTAINERD_CONFIG" --name "$RUNTIME_NAME"
        --runtime-path "$PREFIX/bin/nvhook-runtime" --backup-dir "$BACKUP_DIR")
    local diff
    diff="$("${configure[@]}" --dry-run)"
    "${configure[@]}" >&2
    if [[ -z "$diff" ]]; then
        say "engine: $CONTAINERD_CONFIG already has the '$RUNTIME_NAME' runtime"
        return
    fi
    say "engine: added the '$RUNTIME_NAME' runtime to $CONTAINERD_CONFIG"
    reload_engine
}

# ---------------------------------------------------------------------------- uninstall steps

unstep_engine() {
    if [[ "$ENGINE" == none ]]; then
        say "engine: skipped (ENGINE=none)"
        return
    fi
    if [[ ! -x "$PREFIX/bin/nvhook" ]]; then
        say "engine: $PREFIX/bin/nvhook is missing, so $CONTAINERD_CONFIG is left as it is;" \
            "the originals of what nvhook changed are in $BACKUP_DIR"
        return
    fi
    local unconfigure=("$PREFIX/bin/nvhook" runtime unconfigure --runtime containerd
        --config "$CONTAINERD_CONFIG" --backup-dir "$BACKUP_DIR")
    local diff
    diff="$("${unconfigure[@]}" --dry-run)"
    "${unconfigure[@]}" >&2
    rmdir "$BACKUP_DIR" 2>/dev/null || true
    if [[ -n "$diff" ]]; then
        say "engine: $CONTAINERD_CONFIG is as it was before install"
        reload_engine
    fi
}

unstep_units() {
    local unit present=0
    for unit in "${UNITS[@]}"; do
        [[ -e "$SYSTEMD_UNIT_DIR/$unit" ]] && present=1
    done
    ((present)) || return 0
    if systemd_runs; then
        systemctl disable --now nvhook-shim-server.service nvhook-cdi-refresh.path \
            nvhook-cdi-refresh.service nvhook-watch.service
    fi
    for unit in "${UNITS[@]}"; do
        rm -f "$SYSTEMD_UNIT_DIR/$unit"
    done
    if systemd_runs; then
        systemctl daemon-reload
    fi
    say "units: removed from $SYSTEMD_UNIT_DIR"
}

unstep_cdi() {
    local spec="$CDI_DIR/$CDI_SPEC"
    [[ -e "$spec" ]] || return 0
    if grep -qF "$PREFIX/bin/nvhook-hook" "$spec"; then
        rm -f "$spec"
        say "cdi: removed $spec"
    else
        say "cdi: kept $spec: it does not name $PREFIX/bin/nvhook-hook, so another tool wrote it"
    fi
}

unstep_config() {
    local target="$SYSCONFDIR/config.toml"
    [[ -e "$target" ]] || return 0
    if [[ -f "$CONFIG_TEMPLATE" ]] && cmp -s "$CONFIG_TEMPLATE" "$target"; then
        rm -f "$target"
        rmdir "$SYSCONFDIR" 2>/dev/null || true
        say "config: removed $target"
    else
        say "config: kept $target: it differs from the one install writes"
    fi
}

unstep_venv() {
    if ours; then
        rm -rf "$PREFIX"
        say "venv: removed $PREFIX"
    elif [[ -e "$PREFIX" ]]; then
        say "venv: kept $PREFIX: this installer did not make it (no $MARKER in it)"
    fi
}

main() {
    local command="${1:-}"
    (($# <= 1)) || {
        usage >&2
        exit 2
    }
    case "$command" in
        install)
            check_settings
            choose_interpreter
            step_venv
            step_config
            step_cdi
            step_units
            step_engine
            say "installed"
            ;;
        uninstall)
            check_settings
            unstep_engine
            unstep_units
            unstep_cdi
            unstep_config
            unstep_venv
            say "uninstalled"
            ;;
        -h | --help | help) usage ;;
        *)
            usage >&2
            exit 2
            ;;
    esac
}

main "$@"
