"""Measure step time and peak memory of Llama-shaped models on one GPU, and write them as eval cases.

    python benchmarks/measure_gpu.py --gpu h100-sxm-80gb            # on a machine with that GPU
    python benchmarks/measure_gpu.py --device cpu --tiny --out /tmp/m.yaml   # the smoke test

What runs: a decoder of the chosen shape (random weights, nothing downloaded) built from plain torch
ops: embedding, RMSNorm, GQA attention with rotary embeddings, SwiGLU MLP, final norm, LM head and
cross-entropy, trained with AdamW in bf16 autocast over fp32 weights (fp32 master 4 + bf16 weight
casts 2 + fp32 gradients 4 + Adam m and v 8 = the 18 B/param trainplan models by default). One step is
forward + backward + optimizer step + zero_grad on one micro-batch (gbs = mbs). Variants:
- attention: flash (scaled_dot_product_attention restricted to the flash backend, causal) or eager
  (scores GEMM, causal mask, softmax, values GEMM, as Hugging Face's "eager");
- recompute: none, selective (the attention core is recomputed: torch.utils.checkpoint around it) or
  full (each block is checkpointed).
Step time is the median of --steps timed steps after --warmup steps. Peak memory is the allocator's
peak reserved bytes plus what the process holds outside the allocator (CUDA context, cuBLAS
workspaces), read from cudaMemGetInfo after the run.

Output: evals/runs/measured-<gpu>.yaml (read by `trainplan eval` as held-out prediction cases; no
constant is fitted on them) and the shapes' HF config.json files in evals/runs/models/. This script
is the only source of those numbers: never edit them by hand. A layout that runs out of memory is
left out and listed in the file's context. On CPU the script only checks itself (tests/), and it
refuses to write CPU timings into evals/runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

RUNS_DIR = Path(__file__).resolve().parent.parent / "evals" / "runs"
GIB = 2**30


@dataclass(frozen=True)
class Shape:
    """A Llama-style decoder; the published Llama 3.2 1B/3B shapes and a 0.3B one."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    tied: bool
    seq: int
    mbs: int

    def hf_config(self) -> dict:
        return {"model_type": "llama", "hidden_size": self.hidden, "num_hidden_layers": self.layers,
                "num_attention_heads": self.heads, "num_key_value_heads": self.kv_heads,
                "intermediate_size": self.ffn, "vocab_size": self.vocab, "max_position_embeddings": self.seq,
                "tie_word_embeddings": self.tied, "hidden_act": "silu", "rms_norm_eps": 1e-5,
                "attention_dropout": 0.0, "attention_bias": False, "mlp_bias": False}


SHAPES = {
    "llama-0.3b": Shape("llama-0.3b", 1024, 24, 16, 8, 2816, 32000, False, 2048, 8),
    "llama-1b": Shape("llama-1b", 2048, 16, 32, 8, 8192, 128256, True, 4096, 2),   # Llama 3.2 1B shape
    "llama-3b": Shape("llama-3b", 3072, 28, 24, 8, 8192, 128256, True, 4096, 1),   # Llama 3.2 3B shape
}
TINY = Shape("llama-tiny", 64, 2, 4, 2, 128, 256, False, 32, 2)
VARIANTS = [(recompute, attention) for attention in ("flash", "eager") for recompute in ("none", "selective", "full")]
# Device names (torch.cuda.get_device_name) -> trainplan catalog names.
DEVICE_NAMES = {"A100-SXM4-80GB": "a100-sxm-80gb", "A100-SXM4-40GB": "a100-sxm-40gb", "H100 80GB HBM3": "h100-sxm-80gb",
                "H200": "h200-sxm-141gb", "H800": "h800-sxm-80gb", "B200": "b200"}


def build_model(shape: Shape, attention: str, recompute: str, torch):
    """A Llama-shaped decoder as a torch.nn.Module, random weights, fp32 parameters."""
    nn, F = torch.nn, torch.nn.functional
    from torch.utils.checkpoint import checkpoint

    head_dim = shape.hidden // shape.heads

    def rotary(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def core(q, k, v):
        groups = shape.heads // shape.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        if attention == "flash":
            if q.is_cuda:
                from torch.nn.attention import SDPBackend, sdpa_kernel

                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # Unfused, in bf16 as Megatron's fused scale-mask-softmax (autocast would upcast the softmax).
        with torch.autocast(device_type=q.device.type, enabled=False):
            scores = (q @ k.transpose(-1, -2)) * head_dim**-0.5
            mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
            return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v

    class Norm(nn.Module):
        """RMSNorm with an fp32 weight applied in the input's dtype (the fused kernel needs them equal)."""

        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(shape.hidden))

        def forward(self, x):
            return F.rms_norm(x, (shape.hidden,), self.weight.to(x.dtype), 1e-5)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = Norm(), Norm()
            self.qkv = nn.Linear(shape.hidden, (shape.heads + 2 * shape.kv_heads) * head_dim, bias=False)
            self.out = nn.Linear(shape.heads * head_dim, shape.hidden, bias=False)
            self.gate_up = nn.Linear(shape.hidden, 2 * shape.ffn, bias=False)
            self.down = nn.Linear(shape.ffn, shape.hidden, bias=False)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).split(
                [shape.heads * head_dim, shape.kv_heads * head_dim, shape.kv_heads * head_dim], dim=-1)
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)
            q = rotary(q.view(b, s, shape.heads, head_dim).transpose(1, 2), cos, sin)
            k = rotary(k.view(b, s, shape.kv_heads, head_dim).transpose(1, 2), cos, sin)
            v = v.view(b, s, shape.kv_heads, head_dim).transpose(1, 2).to(q.dtype)
            if recompute == "selective":
                o = checkpoint(core, q, k, v, use_reentrant=False)
            else:
                o = core(q, k, v)
            x = x + self.out(o.transpose(1, 2).reshape(b, s, -1))
            gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(shape.vocab, shape.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(shape.layers))
            self.norm = Norm()
            self.head = nn.Linear(shape.hidden, shape.vocab, bias=False)
            if shape.tied:
                self.head.weight = self.embed.weight
            inv = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
            angles = torch.outer(torch.arange(shape.seq).float(), inv)
            angles = torch.cat((angles, angles), dim=-1)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)

        def forward(self, tokens):
            # The residual stream in bf16, as Megatron keeps it (autocast would leave the embedding fp32).
            x = self.embed(tokens).to(torch.bfloat16)
            cos, sin = self.cos, self.sin
            for block in self.blocks:
                if recompute == "full":
                    x = checkpoint(block, x, cos, sin, use_reentrant=False)
                else:
                    x = block(x, cos, sin)
            logits = self.head(self.norm(x)).float()
            return F.cross_entropy(logits.view(-1, shape.vocab), tokens.roll(-1, dims=1).view(-1))

    return Decoder()


def measure(shape: Shape, attention: str, recompute: str, device: str, warmup: int, steps: int, torch) -> dict:
    """Median step time (s) and peak memory (GiB, CUDA only) of one variant."""
    torch.manual_seed(0)
    model = build_model(shape, attention, recompute, torch).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.startswith("cuda"))
    tokens = torch.randint(0, shape.vocab, (shape.mbs, shape.seq), device=device)
    cuda = device.startswith("cuda")

    def step():
        with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16):
            loss = model(tokens)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    out = {"step_s": statistics.median(times), "steps": steps}
    if cuda:
        free, total = torch.cuda.mem_get_info()
        outside_allocator = total - free - torch.cuda.memory_reserved()
        out["peak_memory_gib"] = (torch.cuda.max_memory_reserved() + outside_allocator) / GIB
    del model, optimizer
    if cuda:
        torch.cuda.empty_cache()
    return out


def run_yaml(gpu: str, device_name: str, torch_version: str, rows: list[dict], skipped: list[str],
             models_dir: str) -> dict:
    """The eval run file: one held-out prediction case per measured variant."""
    date = datetime.date.today().isoformat()
    run_id = f"measured-{gpu}"
    cases = []
    for row in rows:
        shape: Shape = row["shape"]
        where = f"measure_gpu {shape.name} {row['attention']} attention, recompute {row['recompute']}"
        published = {"step_s": {"value": round(row["step_s"], 6),
                                "source": f"{where}: median of {row['steps']} steps"}}
        if "peak_memory_gib" in row:
            published["peak_memory_gib"] = {"value": round(row["peak_memory_gib"], 4),
                                            "source": f"{where}: peak reserved + outside the allocator"}
        cases.append({
            "id": f"{run_id}-{shape.name}-{row['attention']}-{row['recompute']}",
            "kind": "prediction",
            "description": f"{shape.name} on one {gpu}, seq {shape.seq}, mbs {shape.mbs}, "
                           f"{row['attention']} attention, recompute {row['recompute']}",
            "request": {
                "model": {"value": f"{models_dir}/{run_id}-{shape.name}.json", "source": "measure_gpu shape"},
                "gpu": {"value": gpu, "source": f"measure_gpu device: {device_name}"},
                "gpus": {"value": 1, "source": "measure_gpu (one GPU)"},
                "zero": {"value": 0, "source": "measure_gpu (one GPU: nothing to shard)"},
                "mbs": {"value": shape.mbs, "source": "measure_gpu shape"},
                "gbs": {"value": shape.mbs, "source": "measure_gpu (one micro-batch per step)"},
                "seq": {"value": shape.seq, "source": "measure_gpu shape"},
                "recompute": {"value": row["recompute"], "source": "measure_gpu variant"},
                "attention": {"value": row["attention"], "source": "measure_gpu variant"},
                "fused_kernels": {"value": False, "source": "measure_gpu (rotary and SwiGLU as plain PyTorch ops, no "
                                                             "torch.compile)"},
                "precision": {"value": "bf16", "source": "measure_gpu (bf16 autocast)"},
            },
            "published": published,
        })
    return {
        "id": run_id,
        "name": f"Measured on one {gpu} by benchmarks/measure_gpu.py",
        "sources": {"measure_gpu": f"benchmarks/measure_gpu.py on {device_name}, torch {torch_version}, {date}"},
        "context": [{"name": "out_of_memory", "value": ", ".join(skipped) or "none",
                     "source": "measure_gpu: variants that ran out of memory"}],
        "cases": cases,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", help="trainplan catalog name of the GPU (default: from the device name)")
    parser.add_argument("--device", default="cuda", help="torch device (cuda, cuda:1, cpu)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of: {', '.join(SHAPES)}")
    parser.add_argument("--tiny", action="store_true", help="one tiny shape (the CPU smoke test)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", type=Path, help="output YAML (default: evals/runs/measured-<gpu>.yaml)")
    args = parser.parse_args(argv)
    try:
        import torch
        import yaml
    except ImportError as exc:
        print(f"error: {exc.name} is not installed: pip install torch pyyaml", file=sys.stderr)
        return 2

    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("error: no CUDA device: run on a GPU machine, or pass --device cpu --tiny --out FILE to test", file=sys.stderr)
        return 2
    device_name = torch.cuda.get_device_name(args.device) if cuda else "cpu"
    gpu = args.gpu or next((name for key, name in DEVICE_NAMES.items() if key in device_name), None)
    if gpu is None:
        print(f"error: no catalog GPU for device '{device_name}': pass --gpu NAME", file=sys.stderr)
        return 2
    if not cuda and args.out is None:
        print("error: CPU timings never go into evals/runs: pass --out FILE", file=sys.stderr)
        return 2
    unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
    if unknown and not args.tiny:
        print(f"error: unknown shape(s) {', '.join(unknown)}: use {', '.join(SHAPES)}", file=sys.stderr)
        return 2
    shapes = [TINY] if args.tiny else [SHAPES[s] for s in args.shapes.split(",")]
    out = args.out or RUNS_DIR / f"measured-{gpu}.yaml"
    models_dir = out.parent / "models"
    models_dir.mkdir(parents=True, exist_ok=True)

    rows, skipped = [], []
    for shape in shapes:
        (models_dir / f"measured-{gpu}-{shape.name}.json").write_text(json.dumps(shape.hf_config(), indent=1) + "\n")
        for recompute, attention in VARIANTS:
            label = f"{shape.name}/{attention}/{recompute}"
            try:
                result = measure(shape, attention, recompute, args.device, args.warmup, args.steps, torch)
            except torch.OutOfMemoryError:
                skipped.append(label)
                torch.cuda.empty_cache()
                print(f"{label}: out of memory", flush=True)
                continue
            rows.append({"shape": shape, "attention": attention, "recompute": recompute, **result})
            memory = f", peak {result['peak_memory_gib']:.2f} GiB" if "peak_memory_gib" in result else ""
            print(f"{label}: {result['step_s'] * 1e3:.2f} ms/step{memory}", flush=True)
    document = run_yaml(gpu, device_name, torch.__version__, rows, skipped, "models")
    out.write_text("# Written by benchmarks/measure_gpu.py; do not edit by hand.\n"
                   + yaml.safe_dump(document, sort_keys=False, width=120))
    print(f"wrote {len(rows)} cases to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
