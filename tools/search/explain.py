"""The layout search's explanations: short layout names, why a runner-up lost, and what to change
when nothing fits."""

from __future__ import annotations

from trainplan.tools.config.plan_defaults import SIMPLER_MARGIN
from trainplan.tools.core.enums import Objective
from trainplan.tools.search.space import R_BUDGET, R_DEADLINE, R_ENGINE, R_MEMORY
from trainplan.tools.config.validity import R_BATCH


def label(config: dict) -> str:
    """A short layout name: 'TP8 PP16 DP128 interleaved/v2 zero1 mbs1 selective' (CP and EP
    shown when above 1; hybrid sharding as 'zero3/shard8', ZeRO over dp_shard=8 ranks)."""
    parts = [f"TP{config['tp']}", f"PP{config['pp']}", f"DP{config['dp']}"]
    parts += [f"{k.upper()}{config[k]}" for k in ("cp", "ep") if config[k] > 1]
    schedule = config["schedule"] + (f"/v{config['vpp']}" if config["vpp"] > 1 else "")
    zero = f"zero{config['zero']}" + (f"/shard{config['dp_shard']}" if config.get("dp_shard") else "")
    return " ".join(parts + [schedule, zero, f"mbs{config['mbs']}", config["recompute"]])


def explain_runner_up(best: dict, runner: dict, objective: Objective | str = Objective.throughput) -> str:
    """One line on why the runner-up lost, e.g.
    'runner-up TP8 PP8 ...: 6.0% slower: bubble 18.0% vs 9.0%'."""
    objective = Objective(objective)
    b, r = best["time"], runner["time"]
    name = label(runner["config"])
    if runner["config"]["gpus"] != best["config"]["gpus"]:
        name += f" on {runner['config']['gpus']} GPUs"
    if objective is Objective.cost and "training" in best and "training" in runner:
        ratio, what = runner["training"]["cost_usd"] / best["training"]["cost_usd"] - 1, "more expensive"
    elif objective is Objective.cost:
        ratio = (r["step_s"] * runner["config"]["gpus"]) / (b["step_s"] * best["config"]["gpus"]) - 1
        what = "more GPU-time per step"
    elif objective is Objective.time and "training" in best and "training" in runner:
        ratio, what = runner["training"]["days"] / best["training"]["days"] - 1, "longer"
    else:
        ratio, what = r["step_s"] / b["step_s"] - 1, "slower"
    verdict = f"{ratio:.2%} {what}" if ratio < 0.01 else f"{ratio:.1%} {what}"
    if ratio < -1e-9:  # better by the objective, ranked second by the simpler-layout preference
        better = {"slower": "faster", "longer": "shorter", "more expensive": "cheaper",
                  "more GPU-time per step": "less GPU-time per step"}[what]
        return (f"runner-up {name}: {-ratio:.1%} {better}, ranked second: within {SIMPLER_MARGIN:.0%} of the best "
                "the simpler layout is recommended")
    if ratio < 1e-9:
        if runner["config"]["zero"] != best["config"]["zero"]:
            return f"runner-up {name}: same time; the tie goes to the lower ZeRO stage"
        more, less = runner["memory_gib"]["total"], best["memory_gib"]["total"]
        if more - less >= 0.005:
            return f"runner-up {name}: same time; more memory ({more:.2f} vs {less:.2f} GiB)"
        differs = ", ".join(f"{key} {runner['config'][key]} vs {best['config'][key]}" for key in runner["config"]
                            if runner["config"][key] != best["config"][key] and key != "gpus")
        return f"runner-up {name}: same time and memory ({more:.2f} GiB); differs in {differs or 'nothing shown'}"
    delta = {key: r["breakdown"].get(key, 0.0) - b["breakdown"].get(key, 0.0)
             for key in set(b["breakdown"]) | set(r["breakdown"])}
    worst = max(delta, key=delta.get)
    if delta[worst] <= 0:   # as fast or faster per step, but on more GPUs (cost across GPU counts)
        return f"runner-up {name}: {verdict}: {runner['config']['gpus']} vs {best['config']['gpus']} GPUs"
    if worst == "bubble":
        detail = f"bubble {r['bubble_fraction']:.1%} vs {b['bubble_fraction']:.1%}"
    else:
        detail = (f"{worst} {r['breakdown'][worst]:.3g} s vs {b['breakdown'].get(worst, 0.0):.3g} s "
                  f"({r['breakdown'][worst] / r['step_s']:.1%} vs {b['breakdown'].get(worst, 0.0) / b['step_s']:.1%} "
                  f"of the step)")
    return f"runner-up {name}: {verdict}: {detail}"


def no_feasible_hint(rejected: dict[str, int]) -> str:
    """What to change when nothing survives, from the biggest rejection reason. The engine's refusals come first
    (the layouts it cannot run are never sized), so when it ran some, the hint is that of what rejected those."""
    if not rejected:
        return "no layout to try: check the pins"
    top = max(rejected, key=rejected.get)
    if top == R_ENGINE:
        rest = {reason: n for reason, n in rejected.items() if reason != R_ENGINE}
        if not rest:
            return (f"no feasible layout ({top}, {rejected[top]}): name another engine, or drop the pins it refuses "
                    "(trainplan export says why in one line)")
        inner = no_feasible_hint(rest).removeprefix("no feasible layout (most rejected: ")
        return f"no feasible layout ({top}, {rejected[top]}; of the layouts it runs, most rejected: {inner}"
    if top == R_MEMORY:
        hint = "try more GPUs (max_gpus), recompute=full, zero=3, a larger GPU, or a shorter seq"
    elif top == R_DEADLINE:
        hint = "try more GPUs (max_gpus), a later deadline, or fewer tokens"
    elif top == R_BUDGET:
        hint = "try a larger budget, a cheaper GPU or price, or fewer tokens"
    elif top == R_BATCH:
        hint = "try a gbs divisible by more data-parallel sizes (a power of two), or other GPU counts"
    else:
        hint = "loosen the pins, or change gpus so the sizes divide"
    return f"no feasible layout (most rejected: {top}, {rejected[top]}): {hint}"
