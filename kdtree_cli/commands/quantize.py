"""`kdtree quantize SRC DST`: INT4 routed experts (W4A16), in the format Kimi K2.6 ships."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

MIB = 1 << 20


def quantize(
    src: Annotated[Path, typer.Argument(help="bf16 checkpoint folder (config.json + safetensors).",
                                        show_default=False)],
    dst: Annotated[Path, typer.Argument(help="Folder to create for the INT4 checkpoint.", show_default=False)],
    force: Annotated[bool, typer.Option("--force", help="Replace DST if it exists.")] = False,
    shard_size: Annotated[int, typer.Option(help="Largest output safetensors file, in MiB.", min=1)] = 4096,
) -> None:
    """Quantize the routed experts of a DeepSeek-V3 / Kimi checkpoint to INT4 (W4A16), as Kimi K2.6 ships them.

    Symmetric INT4 with one bf16 scale per 32 input columns, stored as compressed-tensors `pack-quantized` (weight_packed, weight_scale, weight_shape) under a quantization_config in config.json. Attention, shared experts, dense layers and lm_head are copied unchanged, and so are the tokenizer and the other files. DST appears only once complete (docs/int4.md).
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    from python_engine.model.int4_quantize import quantize_checkpoint

    out = Console(soft_wrap=True)
    err = Console(stderr=True)
    bar = Progress(TextColumn("quantizing"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                   console=err, transient=True, disable=not err.is_terminal)
    task = bar.add_task("", total=None)
    with bar:
        summary = quantize_checkpoint(src, dst, force=force, shard_bytes=shard_size * MIB,
                                      progress=lambda done, total: bar.update(task, completed=done, total=total))
    out.print(f"wrote {summary.destination}: {summary.quantized} routed expert weights in INT4, "
              f"{summary.copied} tensors copied, {summary.bytes_out / MIB:.1f} MiB in {summary.shards} "
              f"shard(s) (from {summary.bytes_in / MIB:.1f} MiB)", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("quantize")(quantize)
