#!/usr/bin/env bash
# repo.sh OUTDIR PACKAGE...: a signed apt repository and a signed rpm repository of PACKAGEs
# (packaging/build.sh's .deb and .rpm files) in OUTDIR, the tree to publish as it is.
#
#   OUTDIR/apt/pool/main/*.deb                 the .debs
#   OUTDIR/apt/dists/stable/main/binary-ARCH/Packages{,.gz}   (apt-ftparchive packages)
#   OUTDIR/apt/dists/stable/Release            (apt-ftparchive release), signed twice:
#   OUTDIR/apt/dists/stable/InRelease          inline (gpg --clearsign), what apt reads first
#   OUTDIR/apt/dists/stable/Release.gpg        detached (gpg --detach-sign --armor)
#   OUTDIR/rpm/*.rpm                           the .rpms, each signed (rpmsign --addsign)
#   OUTDIR/rpm/repodata/repomd.xml{,.asc}      (createrepo_c), with a detached signature
#   OUTDIR/nvhook-archive-keyring.gpg          the public key, binary: apt's signed-by keyring
#   OUTDIR/nvhook-archive-keyring.asc          the public key, armored: dnf's gpgkey, rpm --import
#   OUTDIR/nvhook.sources                      the apt source (deb822) for URL, with Signed-By
#   OUTDIR/nvhook.repo                         the dnf/yum repository file for URL, whose
#                                              gpgkey= is the key's local copy (as apt's
#                                              Signed-By): /etc/pki/rpm-gpg/RPM-GPG-KEY-nvhook;
#                                              skip_if_unavailable=False: a repository that
#                                              fails its check is an error, not skipped
# A repository holds every version it is given: pass the previous release's packages with the
# new ones and apt and dnf see an upgrade. OUTDIR's apt/ and rpm/ are made afresh.
#
# The signing key is SIGNING_KEY, a secret key in gpg's keyring (GNUPGHOME); it is never made
# here and never in the repository. Releases sign with the project's key on the release
# machine; tests make a throw-away one (tests/packaging/test_repo.py). Key handling: CONTRIBUTING.md
# ("Packages and their repositories").
#
# Environment:
#   SIGNING_KEY  the key to sign with: its fingerprint (or a user id gpg resolves to one key)
#   GNUPGHOME    gpg's home, which holds it (default: gpg's, ~/.gnupg)
#   URL          where OUTDIR will be served, written into nvhook.sources and nvhook.repo
#                (default: file://OUTDIR); apt's source is URL/apt, dnf's URL/rpm
#   SUITE        the apt suite (default: stable)
# Needs apt-ftparchive (apt-utils), createrepo_c (createrepo-c), gpg (gnupg) and rpmsign (rpm),
# all in ./dev setup's package list.
set -euo pipefail

say() { printf 'repo.sh: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

need() {
    command -v "$1" >/dev/null || die "$1 not found: apt-get install $2 (./dev setup installs it)"
}

# deb_arch DEB: the Architecture field of a .deb.
deb_arch() { dpkg-deb --field "$1" Architecture; }

main() {
    case "${1:-}" in -h | --help)
        usage
        exit 0
        ;;
    esac
    if (($# < 2)) || [[ "$1" == -* ]]; then
        usage >&2
        exit 2
    fi
    local out="$1"
    shift
    local debs=() rpms=() f
    for f in "$@"; do
        case "$f" in
            *.deb) debs+=("$f") ;;
            *.rpm) rpms+=("$f") ;;
            *) usage >&2 && say "error: $f is neither a .deb nor a .rpm" && exit 2 ;;
        esac
        [[ -f "$f" ]] || die "$f: no such package"
    done
    need apt-ftparchive apt-utils
    need createrepo_c createrepo-c
    need gpg gnupg
    need rpmsign rpm
    need dpkg-deb dpkg
    [[ -n "${SIGNING_KEY:-}" ]] || die "SIGNING_KEY is not set: the fingerprint of the secret key to sign with"
    local gpg=(gpg --batch --yes --quiet --local-user "$SIGNING_KEY" --digest-algo SHA512)
    # one secret key, usable for signing: else every signature below would fail one by one
    local secret
    secret="$(gpg --batch --with-colons --list-secret-keys "$SIGNING_KEY" 2>/dev/null |
        grep -c '^sec:' || true)"
    [[ "$secret" == 1 ]] || die "SIGNING_KEY=$SIGNING_KEY names $secret secret keys in" \
        "${GNUPGHOME:-~/.gnupg}, not one"

    mkdir -p "$out"
    out="$(cd "$out" && pwd)"
    rm -rf "${out:?}/apt" "$out/rpm"
    local url="${URL:-file://$out}" suite="${SUITE:-stable}"
    "${gpg[@]}" --export "$SIGNING_KEY" >"$out/nvhook-archive-keyring.gpg"
    "${gpg[@]}" --armor --export "$SIGNING_KEY" >"$out/nvhook-archive-keyring.asc"

    if ((${#debs[@]})); then
        local apt="$out/apt" dist="$out/apt/dists/$suite" arches=() arch
        mkdir -p "$apt/pool/main" "$dist"
        cp "${debs[@]}" "$apt/pool/main/"
        mapfile -t arches < <(for f in "${debs[@]}"; do deb_arch "$f"; done | sort -u)
        for arch in "${arches[@]}"; do
            mkdir -p "$dist/main/binary-$arch"
            (cd "$apt" && apt-ftparchive --arch "$arch" packages pool/main) \
                >"$dist/main/binary-$arch/Packages"
            gzip -9 -n -k "$dist/main/binary-$arch/Packages"
        done
        local release="$out/Release.tmp" # not in dists/: apt-ftparchive release lists that tree
        (cd "$dist" && apt-ftparchive \
            -o APT::FTPArchive::Release::Origin=nvhook \
            -o APT::FTPArchive::Release::Label=nvhook \
            -o "APT::FTPArchive::Release::Suite=$suite" \
            -o "APT::FTPArchive::Release::Codename=$suite" \
            -o "APT::FTPArchive::Release::Architectures=${arches[*]}" \
            -o APT::FTPArchive::Release::Components=main \
            -o "APT::FTPArchive::Release::Description=nvhook packages" \
            release .) >"$release"
        mv "$release" "$dist/Release"
        "${gpg[@]}" --clearsign --output "$dist/InRelease" "$dist/Release"
        "${gpg[@]}" --armor --detach-sign --output "$dist/Release.gpg" "$dist/Release"
        say "apt repository $apt: ${#debs[@]} packages (${arches[*]}), signed by $SIGNING_KEY"
    fi

    if ((${#rpms[@]})); then
        local rpmdir="$out/rpm" log="$out/rpmsign.log"
        mkdir -p "$rpmdir"
        cp "${rpms[@]}" "$rpmdir/"
        # rpmsign runs gpg with GNUPGHOME as it is; _gpg_name picks the key, __gpg the program
        # (Debian's rpm names /usr/bin/gpg2, which Debian's gnupg no longer ships)
        rpmsign --addsign --define "_gpg_name $SIGNING_KEY" --define "__gpg $(command -v gpg)" \
            "$rpmdir"/*.rpm >"$log" 2>&1 ||
            die "rpmsign failed: $(cat "$log")"
        rm -f "$log"
        createrepo_c --quiet --general-compress-type=gz "$rpmdir" >/dev/null
        "${gpg[@]}" --armor --detach-sign --output "$rpmdir/repodata/repomd.xml.asc" \
            "$rpmdir/repodata/repomd.xml"
        cp "$out/nvhook-archive-keyring.asc" "$rpmdir/RPM-GPG-KEY-nvhook"
        say "rpm repository $rpmdir: ${#rpms[@]} packages, signed by $SIGNING_KEY"
    fi

    cat >"$out/nvhook.sources" <<EOF
Types: deb
URIs: $url/apt
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/nvhook-archive-keyring.gpg
EOF
    cat >"$out/nvhook.repo" <<EOF
[nvhook]
name=nvhook
baseurl=$url/rpm
enabled=1
gpgcheck=1
repo_gpgcheck=1
skip_if_unavailable=False
gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-nvhook
EOF
    echo "$out"
}

main "$@"
