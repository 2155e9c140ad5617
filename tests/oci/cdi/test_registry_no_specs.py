"""An unresolvable name when the spec directories hold no spec at all: the error says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from oci.cdi.index import resolve
from oci.cdi.registry import Registry
from oci.errors import CdiResolveError


def _resolve_both(dirs: list[str], name: str) -> list[CdiResolveError]:
    errors = []
    for call in (lambda: Registry(dirs).resolve([name]), lambda: resolve(dirs, [name])):
        with pytest.raises(CdiResolveError) as info:
            call()
        errors.append(info.value)
    return errors


def test_no_spec_at_all(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README").write_text("not a spec")
    dirs = [str(tmp_path / "missing"), str(tmp_path / "empty")]
    for error in _resolve_both(dirs, "vendor.com/dev=a"):
        assert error.no_specs and error.names == ("vendor.com/dev=a",)
        assert str(error) == (
            f"unresolvable CDI device 'vendor.com/dev=a': no CDI spec in {dirs[0]}, {dirs[1]}"
        )


VALID = (
    '{"cdiVersion": "0.5.0", "kind": "v.com/c", '
    '"devices": [{"name": "b", "containerEdits": {"env": ["A=1"]}}]}'
)


@pytest.mark.parametrize("content", ["{", VALID])
def test_a_spec_file_even_a_broken_one_is_not_no_spec(tmp_path: Path, content: str) -> None:
    (tmp_path / "s.json").write_text(content)
    for error in _resolve_both([str(tmp_path)], "v.com/c=a"):
        assert not error.no_specs
        assert "not defined in any spec in" in str(error)
