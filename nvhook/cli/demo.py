"""``nvhook demo``: the whole chain on the built-in mock DGX A100 (the README's main command)."""

from __future__ import annotations

import click

__all__ = ["demo"]


@click.command()
@click.option(
    "--dir",
    "workdir",
    default="/tmp/nvhook-demo",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where the mock host, the bundle and the logs go (reused on each run).",
)
@click.option(
    "--kubernetes",
    is_flag=True,
    help="The device plugin's chain instead: register, list, allocate, CRI, runtime, "
    "nvidia-smi -L, with a kubelet stand-in.",
)
@click.option(
    "--dra",
    is_flag=True,
    help="With --kubernetes: the DRA driver's chain: publish, allocate, prepare, CDI devices, "
    "nvidia-smi -L, unprepare.",
)
def demo(workdir: str, kubernetes: bool, dra: bool) -> None:
    """Start a busybox container with GPUs 0 and 3 of a mock DGX A100 and show what it sees
    (with --kubernetes: the 2 GPUs nvhook's device plugin allocated; with --dra too: the
    claims nvhook's DRA driver prepared)."""
    if dra and not kubernetes:
        raise click.UsageError("--dra goes with --kubernetes")
    if dra:
        from nvhook.tools.demo_dra import run_dra_demo

        code = run_dra_demo(workdir, click.echo)
    elif kubernetes:
        from nvhook.tools.demo_k8s import run_kubernetes_demo

        code = run_kubernetes_demo(workdir, click.echo)
    else:
        from nvhook.tools.demo import run_demo

        code = run_demo(workdir, click.echo)
    if code:
        raise click.exceptions.Exit(code)
