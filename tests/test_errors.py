"""One error root for oci and nvhook: ``oci.errors.Error`` (message + exit code)."""

from __future__ import annotations

import inspect

import pytest

import nvhook.errors
import oci.errors
from nvhook.errors import DriverError, EngineWriteError, NvhookError
from oci.errors import CdiResolveError, Error, ExitCode, OciError, SpecError


def _error_classes(module: object) -> list[type[BaseException]]:
    return [
        obj
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__ == module.__name__  # type: ignore[attr-defined]
    ]


@pytest.mark.parametrize(("module", "root"), [(oci.errors, OciError), (nvhook.errors, NvhookError)])
def test_every_error_of_both_packages_derives_from_the_shared_root(
    module: object, root: type[Error]
) -> None:
    classes = _error_classes(module)
    assert root in classes and len(classes) > 3
    for cls in classes:
        if cls is not Error:
            assert issubclass(cls, root), cls
            assert issubclass(cls, Error), cls
    assert not issubclass(NvhookError, OciError) and not issubclass(OciError, NvhookError)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (SpecError("config.json: bad"), ExitCode.INVALID_SPEC),
        (CdiResolveError("unresolved: a/b=c", names=("a/b=c",)), ExitCode.UNRESOLVED),
        (DriverError("no driver"), ExitCode.DEVICE),
        (EngineWriteError("cannot write"), ExitCode.IO),
    ],
)
def test_one_except_clause_catches_both_sides_with_message_and_code(
    error: Error, code: int
) -> None:
    with pytest.raises(Error) as info:
        raise error
    assert info.value.exit_code == code
    assert str(info.value) == info.value.message == error.args[0]


def test_the_root_itself_is_a_bug_exit_code() -> None:
    assert Error("x").exit_code == ExitCode.BUG
    assert not issubclass(Error, (OciError, NvhookError))
