#!/usr/bin/env bash
# python-bundle.sh OUTDIR: a CPython that runs from BUNDLE_PREFIX on any Linux of this machine's
# architecture, made from one this machine has, for nodes without a Python of their own.
#
# OUTDIR receives, to be copied to BUNDLE_PREFIX (default /opt/nvhook/python, where
# packaging/install.sh puts it: PREFIX/python):
#   bin/python3.X, python3   PYTHON's binary; its ELF interpreter (PT_INTERP) set to the
#                            bundled loader BUNDLE_PREFIX/lib/ld-linux-*.so.*, its DT_RPATH to
#                            $ORIGIN/../lib (patchelf --force-rpath: DT_RPATH is searched before
#                            LD_LIBRARY_PATH and the host's directories, so no host library is
#                            mixed in)
#   lib/python3.X/           the standard library, compiled (unchecked-hash .pyc: a copy that
#                            changes the files' times does not make them stale), without what a
#                            node never runs: test/, idlelib, tkinter, turtledemo, lib2to3,
#                            pydoc_data, ensurepip (venvs are made --without-pip: pip runs from
#                            the wheelhouse's wheel), config-*/ (the static libpython), and the
#                            extension modules for terminals, databases and tests (_curses*,
#                            readline, _dbm, _sqlite3, nis, ossaudiodev, _test*, xxlimited*)
#   lib/*.so*                every shared library the binary and the kept extension modules
#                            need (ldd's closure: glibc and its loader, OpenSSL, libffi, zlib,
#                            expat, ...), and those the manylinux2014 policy lets a wheel's
#                            modules link that this machine has beside its libc (libpthread,
#                            libdl, librt, libutil, libresolv, libgcc_s, libstdc++: rpds-py's
#                            and pydantic-core's need libgcc_s and libpthread), each with
#                            DT_RPATH $ORIGIN
#   licenses/                CPython's LICENSE.txt and, where dpkg knows them, the copyright
#                            files of the packages the libraries come from
#   BUNDLE                   what it is: machine=, python=, prefix=, from=
# CPython finds its prefix from the binary's place (getpath's landmark lib/python3.X/os.py), so
# only the loader's path is fixed: run from elsewhere, the binary does not start. A venv made
# from it (`BUNDLE_PREFIX/bin/python3 -m venv --without-pip`) names BUNDLE_PREFIX/bin as its home.
#
# Environment:
#   PYTHON         the CPython 3.11, 3.12, 3.13 or 3.14 to bundle, with its standard library at
#                  <prefix>/lib/python3.X (default: /usr/bin/python3)
#   BUNDLE_PREFIX  where the bundle will run from (default: /opt/nvhook/python)
#   PATCHELF       the patchelf program (default: patchelf; Debian package patchelf)
# The machine is the build machine's: an arm64 bundle needs an arm64 machine, or an arm64 root
# run by qemu-user (tests/packaging/test_installer_arm64.py makes one with mmdebstrap
# --architectures=arm64 and runs this script in it).
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

say() { printf 'python-bundle.sh: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

#: extension modules left out (lib-dynload/NAME.cpython-*.so), and standard library folders
DROP_MODULES="_curses _curses_panel readline _dbm _sqlite3 nis ossaudiodev _ctypes_test
_testbuffer _testcapi _testclinic _testimportmultiple _testinternalcapi _testmultiphase
_xxtestfuzz xxlimited xxlimited_35"
DROP_DIRS="test idlelib tkinter turtledemo lib2to3 pydoc_data ensurepip sqlite3 curses
site-packages dist-packages __pycache__"
#: what a manylinux2014 wheel's modules may link from the system, besides libc, libm and libcrypt
MANYLINUX_LIBS="libpthread.so.0 libdl.so.2 librt.so.1 libutil.so.1 libresolv.so.2 libgcc_s.so.1
libstdc++.so.6"

# needed ELF...: the absolute paths of the shared libraries ELF... need, the loader included.
needed() {
    ldd "$@" 2>/dev/null | awk '
        $2 == "=>" && $3 ~ /^\// { print $3 }
        $1 ~ /^\// && $2 ~ /^\(/ { print $1 }' | sort -u
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
    local python="${PYTHON:-/usr/bin/python3}" prefix="${BUNDLE_PREFIX:-/opt/nvhook/python}"
    local patchelf="${PATCHELF:-patchelf}"
    [[ "$prefix" =~ ^/[-A-Za-z0-9._/+@]*[^/]$ ]] ||
        die "BUNDLE_PREFIX=$prefix: expected an absolute path of letters, digits and -._/+@"
    command -v "$patchelf" >/dev/null || die "patchelf not found: apt-get install patchelf (or set PATCHELF)"
    command -v ldd >/dev/null || die "ldd not found: apt-get install libc-bin"
    [[ ! -e "$out" || -z "$(ls -A "$out")" ]] || die "$out exists and is not empty"

    local info
    info="$("$python" -c 'import os, platform, sys, sysconfig
v = "%d.%d" % sys.version_info[:2]
print(v, platform.python_version(), platform.machine(), os.path.realpath(sys.executable),
      sysconfig.get_paths()["stdlib"], sys.base_prefix,
      sys.implementation.name, sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)" ||
        die "PYTHON=$python does not run (set PYTHON to a CPython 3.11, 3.12, 3.13 or 3.14)"
    local version full machine binary stdlib base impl suffix
    read -r version full machine binary stdlib base impl suffix <<<"$info"
    [[ "$impl" == cpython && " 3.11 3.12 3.13 3.14 " == *" $version "* ]] ||
        die "PYTHON=$python is $impl $full: expected CPython 3.11, 3.12, 3.13 or 3.14"
    [[ "$stdlib" == "$base/lib/python$version" && -f "$stdlib/os.py" ]] ||
        die "PYTHON=$python: its standard library $stdlib is not at <prefix>/lib/python$version"
    [[ "$machine" == "$(uname -m)" ]] || die "PYTHON=$python is for $machine, this machine is $(uname -m)"
    local dynload="$stdlib/lib-dynload"
    [[ -d "$dynload" ]] || die "PYTHON=$python has no $dynload"
    local loader
    loader="$("$patchelf" --print-interpreter "$binary" 2>/dev/null)" ||
        die "$binary is not a dynamically linked ELF program"

    local tmp="$out.tmp"
    rm -rf "$tmp"
    mkdir -p "$tmp/bin" "$tmp/lib" "$tmp/licenses"
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "rm -rf '$tmp'" EXIT

    say "bundling $impl $full ($binary) for $machine, to run from $prefix"
    cp "$binary" "$tmp/bin/python$version"
    ln -s "python$version" "$tmp/bin/python3"
    local excludes=() d m
    for d in $DROP_DIRS; do excludes+=(--exclude="./$d"); done
    for m in $DROP_MODULES; do excludes+=(--exclude="./lib-dynload/$m.*"); done
    mkdir -p "$tmp/lib/python$version"
    tar -C "$stdlib" -cf - "${excludes[@]}" --exclude='./config-*' --exclude='./__pycache__' \
        --exclude=./EXTERNALLY-MANAGED --exclude='*/__pycache__' . |
        tar -C "$tmp/lib/python$version" -xf -
    mkdir -p "$tmp/lib/python$version/site-packages"

    # the libraries: ldd's closure of the binary and every kept extension module
    local modules=("$tmp/lib/python$version/lib-dynload/"*"$suffix") lib
    local -a libs extra=()
    mapfile -t libs < <(needed "$binary" "${modules[@]}")
    local libdir
    libdir="$(dirname "$(printf '%s\n' "${libs[@]}" | grep '/libc\.so\.' | head -n 1)")"
    for lib in $MANYLINUX_LIBS; do
        [[ -e "$libdir/$lib" ]] && extra+=("$libdir/$lib")
    done
    # and what those need: the closure again, with them
    mapfile -t libs < <({
        needed "$binary" "${modules[@]}" "${extra[@]}"
        printf '%s\n' "${extra[@]}"
    } | sort -u | awk NF)
    for lib in "${libs[@]}"; do
        cp -L "$lib" "$tmp/lib/$(basename "$lib")"
    done
    local ld_name
    ld_name="$(basename "$loader")"
    [[ -f "$tmp/lib/$ld_name" ]] || cp -L "$loader" "$tmp/lib/$ld_name"

    "$patchelf" --set-interpreter "$prefix/lib/$ld_name" --force-rpath \
        --set-rpath "\$ORIGIN/../lib" "$tmp/bin/python$version"
    for m in "${modules[@]}"; do
        "$patchelf" --force-rpath --set-rpath "\$ORIGIN/../.." "$m"
    done
    for lib in "$tmp/lib/"*.so*; do
        # the loader and libc need nothing but each other
        case "$(basename "$lib")" in "$ld_name" | libc.so.*) continue ;; esac
        "$patchelf" --force-rpath --set-rpath "\$ORIGIN" "$lib"
    done

    # licences: CPython's, and the libraries' packages' where dpkg knows them
    [[ -f "$stdlib/LICENSE.txt" ]] && cp "$stdlib/LICENSE.txt" "$tmp/licenses/CPython-LICENSE.txt"
    local pkg packages=""
    if command -v dpkg-query >/dev/null; then
        local real
        for lib in "$binary" "${libs[@]}"; do
            # dpkg knows a file by the path it unpacked, before or after /usr merging
            real="$(readlink -f "$lib")"
            pkg="$(dpkg-query -S "$lib" "$(dirname "$lib")/$(basename "$real")" "$real" \
                2>/dev/null | head -n 1)" || true
            pkg="${pkg%%:*}"
            [[ -n "$pkg" && -f "/usr/share/doc/$pkg/copyright" ]] || continue
            [[ " $packages " == *" $pkg "* ]] && continue
            cp "/usr/share/doc/$pkg/copyright" "$tmp/licenses/$pkg.copyright"
            packages+="$pkg "
        done
    fi

    # the standard library, compiled by this very interpreter (same bytecode magic), for the
    # paths it will have
    "$python" -I -m compileall -q -j 0 --invalidation-mode unchecked-hash \
        -s "$tmp/lib/python$version" -p "$prefix/lib/python$version" \
        "$tmp/lib/python$version" >/dev/null || die "compileall failed on $tmp/lib/python$version"

    {
        echo "machine=$machine"
        echo "python=$full"
        echo "prefix=$prefix"
        echo "from=$binary${packages:+ (Debian packages: ${packages% })}"
    } >"$tmp/BUNDLE"

    # it starts, finds its prefix from its place, and imports what nvhook and pip need (run by
    # the bundled loader, since the binary's names $prefix)
    local check
    check="$("$tmp/lib/$ld_name" "$tmp/bin/python$version" -I -c 'import sys, ssl, ctypes, venv, hashlib, zlib, lzma, bz2, uuid, decimal
print(sys.prefix)')" || die "the bundle does not start: $check"
    [[ "$check" == "$tmp" ]] || die "the bundle takes $check as its prefix, not $tmp"

    rm -rf "$out"
    mv "$tmp" "$out"
    trap - EXIT
    say "$out: $(du -sh "$out" | cut -f1), $(find "$out/lib" -maxdepth 1 -name '*.so*' | wc -l) libraries"
}

main "$@"
