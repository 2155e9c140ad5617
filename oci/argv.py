"""The command line a runc-compatible runtime receives, understood as runc 1.1.5 does.

The shim never rewrites it: it execs the low-level runtime with the exact original
arguments, so this module only has to *read* them right. Callers (docs/facts.md):

- containerd 1.6: ``--root R --log B/log.json --log-format json create --bundle B
  --pid-file B/init.pid ID``, then ``start ID``, ``delete ID``, ``kill ID 9``, ...;
- podman 4.3: ``create --bundle B --pid-file P ID`` with no global flags;
- go-runc (containerd's library) also passes ``--systemd-cgroup``, ``--rootless=true``,
  ``--console-socket S``, ``--no-pivot``, ``--no-new-keyring``, ``--preserve-fds N``.

runc parses with urfave/cli v1 over Go's ``flag`` package, reproduced here:

- a flag is ``-name`` or ``--name``; ``-name=value`` or ``-name value`` for a flag that
  takes a value (the next argument is taken whatever it is, even ``create`` or
  ``--x``); a boolean flag takes no separate value, only ``=true``/``=false`` (and the
  other spellings of Go's ``strconv.ParseBool``); ``--`` ends the flags;
- global flags stop at the first argument that is not a flag: the subcommand;
- ``--rootless`` takes a value (``true``, ``false`` or ``auto``) in runc: ``--rootless
  create`` reads ``create`` as its value, exactly as runc does;
- within a subcommand, urfave first moves the command's flags in front of the other
  arguments, each with the argument after it when written without ``=`` (whether or
  not the flag takes a value) unless that argument is one of the command's flags;
  ``exec`` and ``ps`` skip this. So ``create ID --bundle B`` works, ``--pid-file -x``
  sets ``-x``, and ``create --no-pivot ID --bundle B`` fails with "requires exactly 1
  argument(s)";
- ``--help``/``-h`` or ``--version``/``-v`` before the subcommand make runc print and
  exit without running it; ``--help`` within a subcommand shows that command's help;
- runc's bundle defaults to its working directory; ``--bundle ""`` means the same.

:class:`ArgvError` is raised only where runc itself refuses the command line, so the
shim may always fall back to exec'ing the runtime, which then fails the same way.
Flags that runc does not know are recorded in ``unknown_flags`` and otherwise skipped
(as booleans, unless written ``--flag=value``): runc rejects them, but a newer runtime
behind the shim may not.
"""

from __future__ import annotations

import os

from oci._frozen import EMPTY_MAPPING, Frozen
from oci.errors import ArgvError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from dataclasses import KW_ONLY

__all__ = ["CREATE_COMMANDS", "RuntimeArgs"]

#: Subcommands that create a container from the bundle's config.json.
CREATE_COMMANDS = frozenset({"create", "run"})

# Go's strconv.ParseBool.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_BOOL = _TRUE | frozenset({"0", "f", "F", "FALSE", "false", "False"})


class _Table:
    """The flags of one level of the command line (global, or one subcommand)."""

    __slots__ = ("aliases", "bools", "names", "reorder", "values")

    def __init__(
        self, values: str, bools: str, aliases: Mapping[str, str], *, reorder: bool = True
    ) -> None:
        self.values = frozenset(values.split())
        # urfave/cli v1 adds "help, h" to the app and to every command.
        self.bools = frozenset(bools.split()) | {"help", "h"}
        self.aliases = {"h": "help", **aliases}
        self.names = self.values | self.bools
        self.reorder = reorder


# `runc --help` (1.1.5), plus crun's --cgroup-manager so that its value is skipped too.
_GLOBAL = _Table(
    "log log-format root criu rootless cgroup-manager",
    "debug systemd-cgroup version v",
    {"v": "version"},
)

_CREATE_VALUES = "bundle b console-socket pid-file preserve-fds"
_CREATE_BOOLS = "no-pivot no-new-keyring"

# `runc COMMAND --help` (1.1.5) for every command.
_COMMANDS: dict[str, _Table] = {
    "create": _Table(_CREATE_VALUES, _CREATE_BOOLS, {"b": "bundle"}),
    "run": _Table(
        _CREATE_VALUES,
        _CREATE_BOOLS + " detach d keep no-subreaper",
        {"b": "bundle", "d": "detach"},
    ),
    "restore": _Table(
        "console-socket image-path work-path manage-cgroups-mode bundle b pid-file empty-ns"
        " lsm-profile lsm-mount-context",
        "tcp-established ext-unix-sk shell-job file-locks detach d no-subreaper no-pivot"
        " auto-dedup lazy-pages",
        {"b": "bundle", "d": "detach"},
    ),
    "checkpoint": _Table(
        "image-path work-path parent-path status-fd page-server manage-cgroups-mode empty-ns",
        "leave-running tcp-established ext-unix-sk shell-job lazy-pages file-locks pre-dump"
        " auto-dedup",
        {},
    ),
    "start": _Table("", "", {}),
    "state": _Table("", "", {}),
    "pause": _Table("", "", {}),
    "resume": _Table("", "", {}),
    "delete": _Table("", "force f", {"f": "force"}),
    "kill": _Table("", "all a", {"a": "all"}),
    "ps": _Table("format f", "", {"f": "format"}, reorder=False),
    "events": _Table("interval", "stats", {}),
    "exec": _Table(
        "console-socket cwd env e user u additional-gids g process p pid-file process-label"
        " apparmor cap c preserve-fds cgroup",
        "tty t detach d no-new-privs ignore-paused",
        {
            "e": "env",
            "u": "user",
            "g": "additional-gids",
            "p": "process",
            "c": "cap",
            "t": "tty",
            "d": "detach",
        },
        reorder=False,
    ),
    "update": _Table(
        "resources r blkio-weight cpu-period cpu-quota cpu-share cpu-rt-period cpu-rt-runtime"
        " cpuset-cpus cpuset-mems memory memory-reservation memory-swap pids-limit"
        " l3-cache-schema mem-bw-schema",
        "",
        {"r": "resources"},
    ),
    "list": _Table("format f", "quiet q", {"f": "format", "q": "quiet"}),
    "spec": _Table("bundle b", "rootless", {"b": "bundle"}),
    "features": _Table("", "", {}),
}

#: Commands whose first argument is a container id.
_ID_COMMANDS = frozenset(_COMMANDS) - {"list", "spec", "features"}


class RuntimeArgs(Frozen, kw_only=True):
    """A runtime command line, parsed; ``argv`` is the original, to exec unchanged.

    ``global_flags`` and ``command_flags`` map each flag's long name (``h`` becomes
    ``help``, ``b`` ``bundle``, ...) to the value given last, or None for a boolean
    flag given without ``=value``. ``positionals`` are the subcommand's arguments that
    are not flags (for known subcommands). ``bundle`` is set for ``create`` and ``run``
    only: absolute (the working directory joined to a relative ``--bundle``), not
    normalised. ``container_id`` is the first positional of the subcommands that take
    one (all but ``list``, ``spec``, ``features`` and ``help``).
    """

    # Fields in alphabetical order, which is their repr's.
    argv: tuple[str, ...]
    bundle: str | None = None
    command: str | None = None
    command_flags: Mapping[str, str | None] = EMPTY_MAPPING
    command_index: int | None = None
    console_socket: str | None = None
    container_id: str | None = None
    debug: bool = False
    global_flags: Mapping[str, str | None] = EMPTY_MAPPING
    help: bool = False
    log_format: str | None = None
    log_path: str | None = None
    pid_file: str | None = None
    positionals: tuple[str, ...] = ()
    root: str | None = None
    rootless: str | None = None
    systemd_cgroup: bool = False
    unknown_flags: tuple[str, ...] = ()
    version: bool = False

    def __post_init__(self) -> None:
        """Own copies of the flag mappings (the caller may go on changing its dicts)."""
        self._set(global_flags=dict(self.global_flags), command_flags=dict(self.command_flags))

    @property
    def creates(self) -> bool:
        """Whether the runtime will create a container from ``bundle``'s config.json now."""
        return self.command in CREATE_COMMANDS and not self.help and not self.version

    @classmethod
    def parse(cls, argv: Sequence[str], cwd: str | None = None) -> RuntimeArgs:
        """Parse the runtime's arguments (``sys.argv[1:]``: without the program name).

        ``cwd`` is the runtime's working directory, the default bundle (default:
        :func:`os.getcwd`, called only when needed). Raise :class:`ArgvError` only where
        runc would refuse the command line.
        """
        args = tuple(argv)
        unknown: list[str] = []
        global_flags: dict[str, str | None] = {}
        i = _parse_flags(args, 0, _GLOBAL, global_flags, unknown, "global options")
        command = args[i] if i < len(args) else None
        help_ = _is_true(global_flags, "help")
        version = _is_true(global_flags, "version")
        table = _COMMANDS.get(command) if command is not None else None
        if table is None or help_ or version:  # runc prints help or version, or an error
            parsed = _Command({}, (), help_=False, container_id=None, bundle=None)
        else:
            parsed = _parse_command(args, i, table, unknown, cwd)
        return cls(
            argv=args,
            command=command,
            command_index=i if command is not None else None,
            global_flags=global_flags,
            command_flags=parsed.flags,
            positionals=parsed.positionals,
            unknown_flags=tuple(unknown),
            root=global_flags.get("root"),
            log_path=global_flags.get("log"),
            log_format=global_flags.get("log-format"),
            rootless=global_flags.get("rootless"),
            debug=_is_true(global_flags, "debug"),
            systemd_cgroup=_is_true(global_flags, "systemd-cgroup"),
            help=help_ or parsed.help_,
            version=version,
            bundle=parsed.bundle,
            container_id=parsed.container_id,
            pid_file=parsed.flags.get("pid-file"),
            console_socket=parsed.flags.get("console-socket"),
        )


class _Command(Frozen):
    """What :func:`_parse_command` found after the subcommand."""

    flags: dict[str, str | None]
    positionals: tuple[str, ...]
    _: KW_ONLY
    help_: bool
    container_id: str | None
    bundle: str | None


def _is_true(flags: Mapping[str, str | None], name: str) -> bool:
    if name not in flags:
        return False
    value = flags[name]
    return value is None or value in _TRUE


def _parse_command(
    args: tuple[str, ...], index: int, table: _Table, unknown: list[str], cwd: str | None
) -> _Command:
    command = args[index]
    rest = list(args[index + 1 :])
    if table.reorder:
        rest = _reorder(rest, table)
    flags: dict[str, str | None] = {}
    j = _parse_flags(rest, 0, table, flags, unknown, command)
    positionals = tuple(rest[j:])
    if _is_true(flags, "help"):  # runc shows the command's help and runs nothing
        return _Command(flags, positionals, help_=True, container_id=None, bundle=None)
    container_id = positionals[0] if command in _ID_COMMANDS and positionals else None
    bundle = None
    if command in CREATE_COMMANDS:
        if len(positionals) != 1:
            got = " ".join(positionals) if positionals else "none"
            raise ArgvError(
                f'runtime arguments: "{command}" requires exactly 1 argument, the container id'
                f" (got {len(positionals)}: {got})"
            )
        bundle = _bundle(flags.get("bundle") or "", cwd)
    return _Command(flags, positionals, help_=False, container_id=container_id, bundle=bundle)


def _bundle(value: str, cwd: str | None) -> str:
    if os.path.isabs(value):
        return value
    try:
        if cwd is None:
            cwd = os.getcwd()
        elif not os.path.isabs(cwd):
            cwd = os.path.join(os.getcwd(), cwd)
    except OSError as e:
        raise ArgvError(
            f"runtime arguments: no absolute --bundle and no working directory: {e.strerror or e}"
        ) from None
    return os.path.join(cwd, value) if value else cwd


def _flag_name(arg: str) -> str:
    """urfave's ``argIsFlag`` spelling of a flag's name: dashes and ``=value`` dropped."""
    name = arg
    if name.startswith("--"):
        name = name.replace("-", "", 2)
    if name.startswith("-"):
        name = name.replace("-", "", 1)
    return name.split("=", 1)[0]


def _is_flag_of(table: _Table, arg: str) -> bool:
    """urfave's ``argIsFlag``: one of the command's flags (``-`` and ``--`` never are)."""
    return arg not in ("-", "--") and arg.startswith("-") and _flag_name(arg) in table.names


def _reorder(args: list[str], table: _Table) -> list[str]:
    """urfave/cli v1.22 ``reorderArgs`` (what runc 1.1.5 does, checked against it): the
    command's flags first, each followed by the next argument when written without ``=``
    and that argument is not itself one of the command's flags; a later ``--`` (not
    taken as a value) goes before the other arguments and ends the reordering."""
    flags: list[str] = []
    others: list[str] = []
    value_may_follow = False
    for k, arg in enumerate(args):
        is_flag = _is_flag_of(table, arg)
        if value_may_follow and not is_flag:
            value_may_follow = False
            flags.append(arg)
        elif arg == "--":
            others = ["--", *others, *args[k + 1 :]]
            break
        elif is_flag:
            flags.append(arg)
            value_may_follow = "=" not in arg
        else:
            others.append(arg)
    return flags + others


def _parse_flags(
    args: Sequence[str],
    start: int,
    table: _Table,
    out: dict[str, str | None],
    unknown: list[str],
    where: str,
) -> int:
    """Go's ``flag.FlagSet.Parse`` from ``start``; return the index of the first non-flag."""
    forms: dict[str, str] = {}
    i = start
    while i < len(args):
        arg = args[i]
        if len(arg) < 2 or arg[0] != "-":
            break
        if arg == "--":
            return i + 1
        body = arg[2:] if arg[1] == "-" else arg[1:]
        if not body or body[0] in "-=":
            raise ArgvError(f"runtime arguments: {where}: bad flag syntax: {arg}")
        name, eq, value = body.partition("=")
        long = table.aliases.get(name, name)
        if name in table.bools:
            if eq and value not in _BOOL:
                raise ArgvError(
                    f"runtime arguments: {where}: invalid boolean value {value!r} for {arg}"
                )
            out[long] = value if eq else None
        elif name in table.values:
            if not eq:
                if i + 1 >= len(args):
                    raise ArgvError(f"runtime arguments: {where}: flag needs a value: {arg}")
                i += 1
                value = args[i]
            out[long] = value
        else:
            unknown.append(arg)
            i += 1
            continue
        if forms.setdefault(long, name) != name:
            raise ArgvError(
                f"runtime arguments: {where}: cannot use two forms of the same flag:"
                f" -{forms[long]} and -{name}"
            )
        i += 1
    return i
