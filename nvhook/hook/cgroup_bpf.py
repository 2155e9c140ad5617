"""cgroup v2's device filter: extend the eBPF programs of a container's cgroup (hook mode).

On the unified hierarchy, devices are controlled by ``BPF_PROG_TYPE_CGROUP_DEVICE``
programs attached to the cgroup (``BPF_CGROUP_DEVICE``); runc generates one from the
container's rules (``libcontainer/cgroups/devices``: a prologue loading the type, access,
major and minor from ``struct bpf_cgroup_dev_ctx``, one block per rule, last rule first,
each returning 1 or 0 when it matches, 0 at the end) and attaches it with
``BPF_F_ALLOW_MULTI``, replacing its previous one with ``BPF_F_REPLACE``. The programs
of one cgroup all have to allow an access. libnvidia-container does the same dance for
its nodes (``nvc_device_cgroup``: load its own rules, attach beside runc's).

Regenerating the program from the spec (runc's way) would drop what runc adds to the
spec's rules (its default devices, ``/dev/pts``…), so nvhook *extends* each attached
program instead: the new program is a prefix that returns 1 for exactly the added (type,
major, minor, access) tuples, followed by the old program's own instructions, read back
from the kernel (``BPF_OBJ_GET_INFO_BY_FD``, ``xlated_prog_insns``) and kept verbatim
(jumps are relative; the prefix leaves ``r1``, the context, untouched). Only programs of
plain loads, ALU, jumps and exits are taken: anything with calls or map references is
refused rather than copied. The new program replaces the old one with ``BPF_F_REPLACE``
(the cgroup's attach flags kept), so the result allows exactly the added nodes in
addition to what was allowed before.

Raw ``bpf(2)`` through ctypes (x86_64 and arm64 syscall numbers), no libbpf; imported
only on the v2 path of :mod:`nvhook.hook.cgroups`.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

from nvhook.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = ["Rule", "attach", "attached", "extend", "filter_program", "load", "prefix_program"]

_SYS_BPF = {"x86_64": 321, "aarch64": 280}
# enum bpf_cmd
_PROG_LOAD, _PROG_ATTACH, _PROG_DETACH = 5, 8, 9
_PROG_GET_FD_BY_ID, _OBJ_GET_INFO_BY_FD, _PROG_QUERY = 13, 15, 16
_PROG_TYPE_CGROUP_DEVICE = 15
_CGROUP_DEVICE = 6  # enum bpf_attach_type
F_ALLOW_MULTI, F_REPLACE = 0x2, 0x4
# struct bpf_cgroup_dev_ctx: access_type = access << 16 | type
_DEV_BLOCK, _DEV_CHAR = 1, 2
_ACC = {"m": 1, "r": 2, "w": 4}
# instruction classes and codes
_LDX_W = 0x61  # BPF_LDX | BPF_MEM | BPF_W
_AND32_K, _RSH32_K, _MOV32_X = 0x54, 0x74, 0xBC
_MOV64_K = 0xB7
_JNE_K, _JNE_X = 0x55, 0x5D
_EXIT = 0x95
_ATTACH_ATTR = 20

#: (type ``c``/``b``/``a``, major or -1 for any, minor or -1 for any, access letters of rwm)
Rule = tuple[str, int, int, str]

_libc: ctypes.CDLL | None = None


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    number = _SYS_BPF.get(platform.machine())
    if number is None:
        raise HookError(f"bpf(2) on {platform.machine()} is not known to nvhook")
    result = int(
        _libc.syscall(ctypes.c_long(number), ctypes.c_int(cmd), attr, ctypes.c_uint(len(attr)))
    )
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def _access_bits(access: str) -> int:
    if not access or any(c not in _ACC for c in access):
        raise HookError(f"device rule access {access!r}: must be letters of rwm")
    bits = 0
    for c in access:
        bits |= _ACC[c]
    return bits


def _rule_block(rule: Rule, result: int, regs: tuple[int, int, int, int]) -> list[bytes]:
    """Instructions returning ``result`` when the request matches ``rule``, else falling
    through; ``regs`` hold (type, access, major, minor), ``r0`` is scratch."""
    kind, major, minor, access = rule
    type_r, access_r, major_r, minor_r = regs
    bits = _access_bits(access)
    tests: list[tuple[int, int, int]] = []  # (code, register, immediate) jumping out on mismatch
    if kind != "a":
        if kind not in ("c", "b"):
            raise HookError(f"device rule type {kind!r}: must be a, b or c")
        tests.append((_JNE_K, type_r, _DEV_CHAR if kind == "c" else _DEV_BLOCK))
    if bits != 7:
        tests.append((-1, access_r, bits))  # (access & bits) != access
    if major >= 0:
        tests.append((_JNE_K, major_r, major))
    if minor >= 0:
        tests.append((_JNE_K, minor_r, minor))
    body: list[list[bytes]] = []
    for code, register, imm in tests:
        if code == -1:
            body.append(
                [
                    _insn(_MOV32_X, 0, register),
                    _insn(_AND32_K, 0, imm=imm),
                    _insn(_JNE_X, 0, register),
                ]
            )
        else:
            body.append([_insn(code, register, imm=imm)])
    tail = [_insn(_MOV64_K, 0, imm=result), _insn(_EXIT)]
    out: list[bytes] = []
    remaining = sum(len(b) for b in body) + len(tail)
    for group in body:
        for insn in group:
            remaining -= 1
            if insn[0] in (_JNE_K, _JNE_X):  # jump past the rest of the block
                insn = insn[:2] + struct.pack("<h", remaining) + insn[4:]
            out.append(insn)
    return out + tail


def _prologue(regs: tuple[int, int, int, int]) -> list[bytes]:
    type_r, access_r, major_r, minor_r = regs
    return [
        _insn(_LDX_W, type_r, 1, 0),
        _insn(_AND32_K, type_r, imm=0xFFFF),
        _insn(_LDX_W, access_r, 1, 0),
        _insn(_RSH32_K, access_r, imm=16),
        _insn(_LDX_W, major_r, 1, 4),
        _insn(_LDX_W, minor_r, 1, 8),
    ]


def filter_program(rules: Sequence[tuple[bool, Rule]]) -> bytes:
    """A whole device filter as runc builds one: the last matching rule decides, else deny."""
    regs = (2, 3, 4, 5)
    out = _prologue(regs)
    for allow, rule in reversed(rules):
        out += _rule_block(rule, 1 if allow else 0, regs)
        if _matches_all(rule):  # what follows is unreachable, which the verifier refuses
            return b"".join(out)
    return b"".join([*out, _insn(_MOV64_K, 0, imm=0), _insn(_EXIT)])


def _matches_all(rule: Rule) -> bool:
    kind, major, minor, access = rule
    return kind == "a" and major < 0 and minor < 0 and _access_bits(access) == 7


def prefix_program(added: Sequence[Rule], old: bytes) -> bytes:
    """``old`` (a device filter's instructions) preceded by blocks allowing ``added``.

    The prefix keeps ``r1`` (the context) and uses the callee-saved ``r6``-``r9``, which
    ``old`` sets before reading if it uses them (the verifier accepted it alone)."""
    _check_plain(old)
    regs = (6, 7, 8, 9)
    out = _prologue(regs)
    for rule in added:
        out += _rule_block(rule, 1, regs)
        if _matches_all(rule):
            return b"".join(out)
    return b"".join(out) + old


def _check_plain(code: bytes) -> None:
    if not code or len(code) % 8:
        raise HookError("the container's device program could not be read back whole")
    for i in range(0, len(code), 8):
        op = code[i]
        cls = op & 0x07
        if cls in (0x04, 0x07) or op == _LDX_W:  # ALU, ALU64, the context loads
            continue
        if cls in (0x05, 0x06) and (op & 0xF0) not in (0x80, 0x90, 0xF0):  # jumps, not call
            continue
        if op == _EXIT:
            continue
        raise HookError(
            f"the container's device program has an instruction nvhook does not copy "
            f"(opcode {op:#04x} at {i // 8}): use nvhook-runtime as the runtime"
        )


def load(code: bytes, *, name: bytes = b"nvhook_devices") -> int:
    """Load ``code`` as a cgroup device program; its fd. The verifier's log is in the error."""
    insns = ctypes.create_string_buffer(code, len(code))
    license_ = ctypes.create_string_buffer(b"Apache-2.0")
    log = ctypes.create_string_buffer(65536)
    attr = ctypes.create_string_buffer(128)
    struct.pack_into(
        "<IIQQIIQII16s", attr, 0, _PROG_TYPE_CGROUP_DEVICE, len(code) // 8,
        ctypes.addressof(insns), ctypes.addressof(license_), 1, len(log),
        ctypes.addressof(log), 0, 0, name[:15],
    )  # fmt: skip
    struct.pack_into("<I", attr, 68, _CGROUP_DEVICE)  # expected_attach_type
    try:
        return _bpf(_PROG_LOAD, attr)
    except OSError as e:
        text = log.value.decode(errors="replace").strip()
        raise HookError(
            f"the kernel refused the device program: {e.strerror}" + (f"\n{text}" if text else "")
        ) from None


def attached(cgroup_fd: int) -> tuple[int, list[int]]:
    """The attach flags and the ids of the device programs attached to the cgroup itself."""
    ids = (ctypes.c_uint32 * 64)()
    attr = ctypes.create_string_buffer(64)
    struct.pack_into("<IIIIQI", attr, 0, cgroup_fd, _CGROUP_DEVICE, 0, 0,
                     ctypes.addressof(ids), len(ids))  # fmt: skip
    _bpf(_PROG_QUERY, attr)
    flags, count = struct.unpack_from("<I", attr, 12)[0], struct.unpack_from("<I", attr, 24)[0]
    return flags, list(ids[:count])


def attach(cgroup_fd: int, prog_fd: int, flags: int, replace_fd: int = 0) -> None:
    attr = ctypes.create_string_buffer(_ATTACH_ATTR)
    struct.pack_into("<IIIII", attr, 0, cgroup_fd, prog_fd, _CGROUP_DEVICE, flags, replace_fd)
    _bpf(_PROG_ATTACH, attr)


def _prog_fd(prog_id: int) -> int:
    attr = ctypes.create_string_buffer(12)
    struct.pack_into("<I", attr, 0, prog_id)
    return _bpf(_PROG_GET_FD_BY_ID, attr)


def _xlated(prog_fd: int) -> bytes:
    """The program's instructions as the kernel keeps them (after its own rewrites)."""

    def info(buffer: ctypes.Array[ctypes.c_char] | None) -> ctypes.Array[ctypes.c_char]:
        raw = ctypes.create_string_buffer(256)
        if buffer is not None:
            # struct bpf_prog_info: xlated_prog_len at 20, xlated_prog_insns at 32
            struct.pack_into("<I", raw, 20, len(buffer))
            struct.pack_into("<Q", raw, 32, ctypes.addressof(buffer))
        attr = ctypes.create_string_buffer(16)
        struct.pack_into("<IIQ", attr, 0, prog_fd, len(raw), ctypes.addressof(raw))
        _bpf(_OBJ_GET_INFO_BY_FD, attr)
        return raw

    length = struct.unpack_from("<I", info(None), 20)[0]
    if not length:
        raise HookError("the kernel does not show the device program's instructions (root?)")
    code = ctypes.create_string_buffer(length)
    info(code)
    return code.raw


def extend(cgroup_dir: str, rules: Sequence[dict[str, Any]]) -> int:
    """Let the programs of ``cgroup_dir`` allow the OCI allow ``rules`` too; how many were
    replaced (0: no program attached there, nothing denies at this level)."""
    added: list[Rule] = []
    for r in rules:
        if not r.get("allow"):
            continue
        major, minor = r.get("major"), r.get("minor")
        added.append(
            (
                r.get("type") or "a",
                -1 if major is None else int(major),
                -1 if minor is None else int(minor),
                r.get("access") or "rwm",
            )
        )
    if not added:
        return 0
    try:
        cgroup_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise HookError(f"cannot open the cgroup {cgroup_dir}: {e.strerror}") from None
    try:
        try:
            flags, ids = attached(cgroup_fd)
        except OSError as e:
            raise HookError(
                f"cannot list the device programs of {cgroup_dir}: {e.strerror}"
            ) from None
        for prog_id in ids:
            _replace(cgroup_fd, cgroup_dir, prog_id, flags, added)
        return len(ids)
    finally:
        os.close(cgroup_fd)


def _replace(cgroup_fd: int, cgroup_dir: str, prog_id: int, flags: int, added: list[Rule]) -> None:
    try:
        old_fd = _prog_fd(prog_id)
    except OSError as e:
        raise HookError(f"cannot open device program {prog_id}: {e.strerror}") from None
    try:
        new_fd = load(prefix_program(added, _xlated(old_fd)))
        try:
            if flags & F_ALLOW_MULTI:
                attach(cgroup_fd, new_fd, F_ALLOW_MULTI | F_REPLACE, old_fd)
            else:  # a single program: attaching another (same flags) replaces it
                attach(cgroup_fd, new_fd, flags)
        except OSError as e:
            raise HookError(
                f"cannot replace device program {prog_id} of {cgroup_dir}: {e.strerror}"
            ) from None
        finally:
            os.close(new_fd)
    finally:
        os.close(old_fd)
