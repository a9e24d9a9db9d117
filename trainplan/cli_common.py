"""Options shared by the commands: one vocabulary, the same names as the tool arguments and JSON keys."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from trainplan.tools.specs import Attention, Precision, Recompute, Schedule

Model = Annotated[str, typer.Option("--model", help="catalog name (llama3-70b, deepseek-v3, ...) or path to an HF config.json")]
Gpu = Annotated[str, typer.Option("--gpu", help="catalog name (h100-sxm-80gb, a100-sxm-80gb, ...) or path to a GPU JSON")]
Gpus = Annotated[int, typer.Option("--gpus", help="total GPUs")]
Tp = Annotated[int, typer.Option("--tp", help="tensor-parallel size (with sequence parallelism)")]
Pp = Annotated[int, typer.Option("--pp", help="pipeline-parallel size")]
Cp = Annotated[int, typer.Option("--cp", help="context-parallel size")]
Ep = Annotated[int, typer.Option("--ep", help="expert-parallel size")]
Vpp = Annotated[int, typer.Option("--vpp", help="virtual pipeline stages per rank (>1: interleaved)")]
Zero = Annotated[int, typer.Option("--zero", help="ZeRO stage 0-3")]
Mbs = Annotated[int, typer.Option("--mbs", help="micro-batch size, sequences")]
Gbs = Annotated[Optional[int], typer.Option("--gbs", help="global batch size, sequences (needed for time)")]
Seq = Annotated[Optional[int], typer.Option("--seq", help="sequence length (default: the model's)")]
RecomputeOpt = Annotated[Recompute, typer.Option("--recompute", help="activation recompute mode")]
ScheduleOpt = Annotated[Optional[Schedule], typer.Option("--schedule", help="pipeline schedule (default 1f1b; interleaved when vpp>1)")]
PrecisionOpt = Annotated[Precision, typer.Option("--precision", help="GEMM precision")]
AttentionOpt = Annotated[Attention, typer.Option(
    "--attention", help="attention kernel: flash (fused; causal blocks skipped) or eager (unfused s x s scores)")]
Tokens = Annotated[Optional[str], typer.Option("--tokens", help="training tokens, e.g. 15.6T or 15.6e12")]
Price = Annotated[Optional[float], typer.Option("--price", help="dollars per GPU-hour (default: the GPU's catalog price)")]
Goodput = Annotated[Optional[float], typer.Option("--goodput", help="share of wall-clock time that trains (default 0.9)")]
GpusPerNode = Annotated[Optional[int], typer.Option("--gpus-per-node", help="GPUs per NVLink/xGMI domain (PCIe cards: per host)")]
IntraNodeBw = Annotated[Optional[float], typer.Option("--intra-node-bw", help="NVLink/xGMI (PCIe cards: PCIe) GB/s per GPU per direction")]
InterNodeBw = Annotated[Optional[float], typer.Option("--inter-node-bw", help="network GB/s per GPU per direction")]
OptimizerOffload = Annotated[bool, typer.Option("--optimizer-offload", help="ZeRO-Offload: optimizer on the CPU")]
TpCommOverlap = Annotated[bool, typer.Option("--tp-comm-overlap", help="overlap TP communication with the GEMMs")]
RampStartGbs = Annotated[Optional[int], typer.Option("--ramp-start-gbs", help="batch-size ramp: the first global batch, sequences")]
RampTokens = Annotated[Optional[str], typer.Option("--ramp-tokens", help="batch-size ramp: tokens over which gbs grows linearly, e.g. 250B")]
SequenceParallel = Annotated[bool, typer.Option("--sequence-parallel/--no-sequence-parallel",
                                                 help="Megatron sequence parallelism with tp>1")]
HeadroomGib = Annotated[float, typer.Option("--headroom-gib", help="GiB per GPU to keep free when deciding fits")]
Bf16Grads = Annotated[bool, typer.Option("--bf16-grads", help="bf16 gradients (16 B/param) instead of fp32")]
Json = Annotated[bool, typer.Option("--json", help="print the result object as JSON")]
