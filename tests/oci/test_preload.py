"""The start image (:mod:`oci._preload`, made by :mod:`nvhook.tools.startimage`): the start
path's modules run from one file ahead of their imports, as the imports would run them.

Each case runs a fresh ``python -I -S`` (as the launchers do) with the image installed and
without it, and compares what was imported and what it did; a module run twice would show as
two copies of its classes. Then the refusals: a changed source runs from the source, and an
image that is not trustworthy, not for this interpreter or malformed is not used at all.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nvhook.tools.startimage import image_bytes, source_root
from oci._preload import HEADER, image_name, install

REPO = source_root()

PROBE = """\
import sys
sys.path[:0] = [{root!r}]
image = None
if {image!r}:
    from oci._preload import install
    image = install({image!r})
    assert image is not None, "the image was refused"
import nvhook.shim, nvhook.call, nvhook.create, nvhook.settings, nvhook.hook.dispatch
import oci.cdi.index, oci.cdi.spec, oci.cdi.edits, oci.cdi.kept
import oci.cdi.spec as spec, oci.cdi.edits as edits, oci.cdi.kept as kept
assert spec.Edits is edits.Edits and kept.Spec is spec.Spec  # one copy of each class
ours = sorted(m for m in sys.modules if m.split(".")[0] in ("oci", "nvhook"))
print(repr((ours, image.ran if image else [], {extra})))
"""


def probe(
    root: Path, image: Path | None, extra: str = "None"
) -> tuple[list[str], list[str], object]:
    code = PROBE.format(root=str(root), image=str(image) if image else "", extra=extra)
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    ours, ran, value = ast.literal_eval(proc.stdout)
    return ours, ran, value


def write_image(directory: Path, root: Path | None = None) -> Path:
    """The start image of the tree under ``root`` in ``directory``, as the launchers have it."""
    path = directory / image_name()
    path.write_bytes(image_bytes(root))
    path.chmod(0o644)
    return path


@pytest.fixture
def image(tmp_path: Path) -> Path:
    return write_image(tmp_path)


def test_the_image_imports_what_the_imports_would(image: Path) -> None:
    plain, ran_plain, _ = probe(REPO, None)
    ours, ran, _ = probe(REPO, image)
    assert [m for m in ours if m != "oci._preload"] == plain and ran_plain == []
    assert len(ran) == len(set(ran)) > 20  # each module once
    for name in ran:
        assert name in ours
    for name in ("nvhook", "oci.cdi", "oci.cdi.edits", "nvhook.requests.parse"):
        assert name in ran
    assert ran.index("oci.cdi.edits") < ran.index("oci.cdi.spec")  # what it imports first


def test_a_module_run_from_the_image_is_the_source_s(image: Path) -> None:
    """Its file, spec and package are those the import system would give it."""
    extra = (
        "[(m.__name__, m.__file__, m.__package__, m.__spec__.origin, "
        "getattr(m, '__path__', None)) for m in (sys.modules['oci.cdi'], "
        "sys.modules['oci.cdi.index'])]"
    )
    _, _, plain = probe(REPO, None, extra)
    _, ran, value = probe(REPO, image, extra)
    assert "oci.cdi.index" in ran and value == plain


def copy_tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    for package in ("oci", "nvhook"):
        shutil.copytree(
            REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return root


def test_a_changed_source_runs_from_the_source(tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    (tmp_path / "image").mkdir()
    image = write_image(tmp_path / "image", root)
    changed = root / "oci" / "cdi" / "names.py"
    changed.write_text(changed.read_text() + "\nEDITED = True\n")
    ours, ran, edited = probe(root, image, "sys.modules['oci.cdi.names'].EDITED")
    assert edited is True
    assert "oci.cdi.names" in ours and "oci.cdi.names" not in ran
    assert "oci.cdi.spec" in ran  # which imports it: still from the image, and after it


def test_a_removed_source_is_not_run_from_the_image(tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    (tmp_path / "image").mkdir()
    image = write_image(tmp_path / "image", root)
    (root / "oci" / "cdi" / "kept.py").unlink()
    code = f"import sys; sys.path[:0] = [{str(root)!r}]\nfrom oci._preload import install\n"
    code += f"install({str(image)!r})\nimport oci.cdi.kept\n"
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True)
    assert (
        proc.returncode == 1
        and "ModuleNotFoundError: No module named 'oci.cdi.kept'" in proc.stderr
    )


def reinstall_refused(path: Path) -> bool:
    meta = list(sys.meta_path)
    try:
        return install(str(path)) is None and sys.meta_path == meta
    finally:
        sys.meta_path[:] = meta


def test_an_image_anyone_else_could_write_is_not_used(image: Path, tmp_path: Path) -> None:
    assert not reinstall_refused(image)  # control: this user's, 0644
    image.chmod(0o664)
    assert reinstall_refused(image)
    image.chmod(0o646)
    assert reinstall_refused(image)
    image.chmod(0o644)
    link = tmp_path / "link.marshal"
    link.symlink_to(image)
    assert reinstall_refused(link)
    fifo = tmp_path / "fifo.marshal"
    os.mkfifo(fifo, 0o644)
    assert reinstall_refused(fifo)  # at once: no writer is waited for
    if os.geteuid() == 0:
        os.chown(image, 65534, 65534)
        assert reinstall_refused(image)


def test_an_image_for_another_interpreter_or_malformed_is_not_used(tmp_path: Path) -> None:
    import marshal

    good = image_bytes(REPO)
    size = int.from_bytes(good[:HEADER], "little")
    fmt, tag, magic, root, table = marshal.loads(good[HEADER : HEADER + size])

    def with_head(*head: object) -> bytes:
        raw = marshal.dumps(head)
        return len(raw).to_bytes(HEADER, "little") + raw

    cases = [
        b"",
        b"garbage",
        good[: HEADER + size - 1],
        (size + 10**9).to_bytes(HEADER, "little") + good[HEADER:],
        with_head(fmt, "cpython-99", magic, root, table),
        with_head(fmt, tag, b"\0\0\r\n", root, table),
        with_head(fmt + 1, tag, magic, root, table),
        with_head(fmt, tag, magic, root, list(table)),
    ]
    path = tmp_path / image_name()
    for case in cases:
        path.write_bytes(case)
        path.chmod(0o644)
        assert reinstall_refused(path), case[:40]


def test_a_module_whose_entry_or_code_is_malformed_is_imported_from_the_source(
    tmp_path: Path,
) -> None:
    import marshal

    root = copy_tree(tmp_path)
    good = image_bytes(root)
    size = int.from_bytes(good[:HEADER], "little")
    fmt, tag, magic, base, table = marshal.loads(good[HEADER : HEADER + size])
    relative, package, key, imports, (offset, length) = table["oci.cdi.names"]
    table["oci.cdi.names"] = (relative, package, key, imports, (offset, length - 1))  # cut
    head = marshal.dumps((fmt, tag, magic, base, table))
    assert len(head) == size  # the same offsets for the code after it
    data = bytearray(good[:HEADER] + head + good[HEADER + size :])
    offset, length = table["oci.cdi.version"][4]
    at = HEADER + size + offset  # the code follows the table
    data[at : at + length] = b"\xff" * length  # its code is no marshal data
    image = tmp_path / image_name()
    image.write_bytes(bytes(data))
    image.chmod(0o644)
    ours, ran, _ = probe(root, image)
    assert "oci.cdi.names" in ours and "oci.cdi.version" in ours
    assert "oci.cdi.names" not in ran and "oci.cdi.version" not in ran and "oci.cdi.spec" in ran
