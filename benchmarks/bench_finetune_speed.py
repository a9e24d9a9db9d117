"""Fine-tuning speed against published measurements (evals/runs/qwen-finetune-speed.yaml, torchtune-finetune-speed.yaml
and any other LoRA/QLoRA prediction case with a step time or throughput): per case the predicted and published figure
and the error, then the MAPE, the cases inside the issue's 20% and the worst; with --mechanisms, how much of each
case's step the fine-tuning mechanisms take (adapter GEMMs, scale-and-add, NF4 dequantisation, host floor).
Run: python benchmarks/bench_finetune_speed.py [--mechanisms]"""

from __future__ import annotations

import argparse

from trainplan.evals.dataset import load_dataset
from trainplan.evals.report import num, pct
from trainplan.evals.runner import THROUGHPUT_QUANTITIES, _fine_tuning_speed, is_fine_tuning, run_case

MECHANISM_KEYS = ("lora", "lora/scale_add", "qlora/dequant", "host")


def mechanism_shares(kwargs: dict) -> dict[str, float]:
    """Seconds per micro-batch of each fine-tuning OpTimes key over one stage's blocks (forward + backward)."""
    from trainplan.tools.perf import finetune, host, layer_compute
    from trainplan.tools.hardware.catalog import load_gpu, load_model
    from trainplan.tools.config.layout import resolve_config

    model = load_model(kwargs["model"])
    gpu = load_gpu(kwargs["gpu"])
    knobs = {k: v for k, v in kwargs.items() if k not in ("model", "gpu", "gpus")}
    cfg = resolve_config(model, kwargs["gpus"], **knobs)
    layer = finetune.adapt_layer_times(layer_compute.layer_times(model, cfg, gpu, 0), model, cfg, gpu, False)
    host.add_host_floor(layer, model, cfg, False, 0.0)
    total = layer.forward + layer.backward_input + layer.backward_weight
    return {key: sum(part.get(key, 0.0) for part in (layer.forward_s, layer.backward_input_s, layer.backward_weight_s))
            / total for key in MECHANISM_KEYS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mechanisms", action="store_true", help="also print each mechanism's share of a block")
    args = parser.parse_args()
    dataset = load_dataset()
    cases = [c for c in dataset.cases if c.kind == "prediction" and is_fine_tuning(dataset, c.id)
             and any(q in c.published for q in THROUGHPUT_QUANTITIES)]
    results = []
    header = f"{'case':<40}{'quantity':<14}{'predicted':>11}{'published':>11}{'error':>9}"
    if args.mechanisms:
        header += "  " + " ".join(f"{k:>14}" for k in MECHANISM_KEYS)
    print(header)
    for case in cases:
        result = run_case(case, dataset)
        results.append(result)
        if result.status != "ok":
            print(f"{case.id:<40}{result.status}: {result.message}")
            continue
        quantity = next(q for q in THROUGHPUT_QUANTITIES if q in result.error)
        line = (f"{case.id:<40}{quantity:<14}{num(result.predicted[quantity]):>11}{num(result.published[quantity]):>11}"
                f"{pct(result.error[quantity]):>9}")
        if args.mechanisms:
            shares = mechanism_shares(case.kwargs())
            line += "  " + " ".join(f"{shares[k]:>14.1%}" for k in MECHANISM_KEYS)
        print(line)
    speed = _fine_tuning_speed(results, dataset)
    print()
    print(f"fine-tuning speed: MAPE {pct(speed['mape']).lstrip('+')} over {speed['n']} cases "
          f"({pct(speed['mape_held_out']).lstrip('+')} over {speed['n_held_out']} held out); "
          f"{speed['inside_tolerance']} of {speed['n']} within tolerance; worst {speed['worst_case']} "
          f"{pct(speed['worst_error'])}")


if __name__ == "__main__":
    main()
