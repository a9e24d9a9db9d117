"""How far a layout is from what the evals validate: the one definition of a layout's departures.

The step-time model is checked against published runs (evals/runs/*.yaml, `trainplan eval`). A layout
whose features no published run has (DualPipe on a dense model, CP at 2,048 tokens per rank, PP14 for
80 layers) is scored by the same formulas, but nothing measured says they hold there; the search finds
its winners exactly where the model has the least evidence (issue 20). Each feature below is a
property of a layout; its evidence region is derived from the layouts of the evals' prediction cases
that pass (the published runs' own layouts, evals/summary.json), not listed by hand, and each limit
names the cases that set it:

- cp_tokens: CP with fewer tokens per CP rank than any eval run with CP (NeMo's CP2 at 8K: 4,096);
- cp_degree: a CP ring longer than any eval run's (Llama 3 405B's CP16 at 131K);
- cp_cross_node: a CP ring across nodes (tp x cp above a node) with fewer tokens per rank than the
  eval runs whose ring crosses nodes (Llama 3 405B: 8,192);
- tp_cross_node: TP beyond a node (no eval run has one);
- ep_degree: expert parallelism wider than any eval run's (DeepSeek-V3's EP64);
- schedule: a pipeline schedule no eval run of this kind of model (dense or MoE) used (DualPipe only
  on MoE, the zero-bubble schedules on none), or at fewer stages than any that used it;
- vpp: more virtual stages than any eval run of this kind of model used (dense: 8, Llama 3 405B);
- uneven_pp: more pipeline chunks short of a layer than any eval run has (layers not divisible by
  pp x vpp: DeepSeek-V3's 61 layers on PP16 leave 3 chunks short; PP14 for 80 layers leaves 4);
- zero_pp: a ZeRO stage with PP above any eval run's (ZeRO-2 with PP in Llama 3 405B; ZeRO-3 none).

A layout's evidence distance is the number of features outside the region. The search recommends a
layout with departures only when it beats the best layout without any by EVIDENCE_MARGIN on the
objective (search_choice.prefer_evidence); otherwise it is shown as an alternative with its risk.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from types import SimpleNamespace

import numpy as np

from trainplan.tools.search.eval_summary import load_summary
from trainplan.tools.config.codes import SCHEDULE_CODES
from trainplan.tools.config.plan_defaults import EVIDENCE_MARGIN
from trainplan.tools.core.enums import Schedule


@dataclass(frozen=True)
class Shape:
    """What the features need besides the layout: the model's layers and kind, the sequence, a node."""

    layers: int
    is_moe: bool
    seq: int
    gpus_per_node: int


@dataclass(frozen=True)
class Region:
    """The evals' evidence: each limit with the prediction cases that set it."""

    cp_min_tokens: int
    cp_max: int
    cp_cross_node_min_tokens: int | None
    ep_max: int
    schedules: dict          # (is_moe, schedule value) -> fewest stages any eval run used it at
    vpp_max: dict            # is_moe -> most virtual stages
    short_chunks_max: int
    zero_pp_max: int
    tp_cross_node: bool
    sources: dict            # limit name -> case ids


def _short_chunks(layers, pp, vpp):
    """Pipeline chunks (pp x vpp) that hold one layer fewer than the fullest: ceil(L / S) x S - L."""
    chunks = np.asarray(pp) * np.asarray(vpp)
    return -(-np.asarray(layers) // chunks) * chunks - np.asarray(layers)


@cache
def region() -> Region:
    """The evidence region from the layouts of the evals' prediction cases that pass (evals/summary.json,
    written by `python -m trainplan.evals.summary`): a case the model misses validates nothing."""
    rows = [(c["id"], c["is_moe"], c["layers"], SimpleNamespace(**c["layout"]), c["gpus_per_node"])
            for c in load_summary()["cases"] if c["passed"]]
    sources: dict[str, list[str]] = {}

    def limit(name: str, pairs: list[tuple[str, float]], pick) -> float | None:
        if not pairs:
            return None
        value = pick(v for _, v in pairs)
        sources[name] = sorted({cid for cid, v in pairs if v == value})
        return value

    with_cp = [(cid, lay.seq // lay.cp) for cid, _, _, lay, _ in rows if lay.cp > 1]
    cross = [(cid, lay.seq // lay.cp) for cid, _, _, lay, node in rows if lay.cp > 1 and lay.tp * lay.cp > node]
    schedules: dict[tuple[bool, str], int] = {}
    for cid, moe, _, lay, _ in rows:
        if lay.pp > 1:
            key = (moe, lay.schedule)
            schedules[key] = min(schedules.get(key, lay.pp), lay.pp)
    for (moe, name), fewest in schedules.items():
        sources[f"schedule:{int(moe)}:{name}"] = sorted(
            cid for cid, m, _, lay, _ in rows if m is moe and lay.schedule == name and lay.pp == fewest)
    vpp_max = {moe: int(limit(f"vpp:{int(moe)}", [(cid, lay.vpp) for cid, m, _, lay, _ in rows if m is moe], max)
                        or 1) for moe in (False, True)}
    return Region(
        cp_min_tokens=int(limit("cp_tokens", with_cp, min) or 0),
        cp_max=int(limit("cp_degree", [(cid, lay.cp) for cid, _, _, lay, _ in rows if lay.cp > 1], max) or 1),
        cp_cross_node_min_tokens=limit("cp_cross_node", cross, min),
        ep_max=int(limit("ep_degree", [(cid, lay.ep) for cid, _, _, lay, _ in rows], max) or 1),
        schedules=schedules, vpp_max=vpp_max,
        short_chunks_max=int(limit("uneven_pp", [(cid, int(_short_chunks(layers, lay.pp, lay.vpp)))
                                                 for cid, _, layers, lay, _ in rows if lay.pp > 1], max) or 0),
        zero_pp_max=int(limit("zero_pp", [(cid, lay.zero) for cid, _, _, lay, _ in rows if lay.pp > 1], max) or 0),
        tp_cross_node=any(lay.tp > node for _, _, _, lay, node in rows),
        sources={k: tuple(v) for k, v in sources.items()})


def _schedule_ok(codes, pp, is_moe: bool, reg: Region):
    ok = np.asarray(pp) <= 1
    for (moe, name), fewest in reg.schedules.items():
        if moe is is_moe:
            ok = ok | ((np.asarray(codes) == SCHEDULE_CODES[Schedule(name)]) & (np.asarray(pp) >= fewest))
    return ok


def flags(c: SimpleNamespace, shape: Shape, reg: Region | None = None) -> dict[str, np.ndarray]:
    """Feature name -> boolean array (or bool): outside the evidence region. c: columns tp, pp, cp,
    ep, vpp, zero, schedule (codes) of a layout table or one config (columns)."""
    reg = reg or region()
    tp, pp, cp, ep = (np.asarray(getattr(c, k)) for k in ("tp", "pp", "cp", "ep"))
    vpp, zero = np.asarray(c.vpp), np.asarray(c.zero)
    per_rank = shape.seq // cp
    crosses = tp * cp > shape.gpus_per_node
    cross_min = reg.cp_cross_node_min_tokens
    return {
        "cp_tokens": (cp > 1) & (per_rank < reg.cp_min_tokens),
        "cp_degree": cp > reg.cp_max,
        "cp_cross_node": (cp > 1) & crosses & ((per_rank < cross_min) if cross_min else True),
        "tp_cross_node": (tp > shape.gpus_per_node) & (not reg.tp_cross_node),
        "ep_degree": ep > reg.ep_max,
        "schedule": ~_schedule_ok(c.schedule, pp, shape.is_moe, reg),
        "vpp": vpp > reg.vpp_max[shape.is_moe],
        "uneven_pp": (pp > 1) & (_short_chunks(shape.layers, pp, vpp) > reg.short_chunks_max),
        "zero_pp": (pp > 1) & (zero > reg.zero_pp_max),
    }


def distance(c: SimpleNamespace, shape: Shape, reg: Region | None = None):
    """Features outside the evidence region, counted (an int array for a table, an int for one layout)."""
    return sum(np.asarray(v, dtype=int) for v in flags(c, shape, reg).values())


def columns(table: dict) -> SimpleNamespace:
    """Columns tp, pp, cp, ep, vpp, zero, schedule (code) of a layout table or of one config dict."""
    schedule = table["schedule"]
    if isinstance(schedule, str):
        schedule = SCHEDULE_CODES[Schedule(schedule)]
    return SimpleNamespace(**{k: np.asarray(table[k]) for k in ("tp", "pp", "cp", "ep", "vpp", "zero")},
                           schedule=np.asarray(schedule))


def _cases(reg: Region, key: str) -> str:
    names = reg.sources.get(key, ())
    return ", ".join(names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")


def departures_of(config: dict, shape: Shape, cite: bool = True) -> list[str]:
    """Each feature of one layout (a config dict) outside the evidence, as a sentence with the limit
    and (cite) the eval cases that set it."""
    reg = region()
    out = flags(columns(config), shape, reg)
    tp, pp, cp, ep, vpp = (config[k] for k in ("tp", "pp", "cp", "ep", "vpp"))
    kind = "MoE" if shape.is_moe else "dense"

    def cases(key: str) -> str:
        return f" ({_cases(reg, key)})" if cite else ""

    text = {
        "cp_tokens": lambda: (f"CP{cp} with {shape.seq // cp:,} tokens per CP rank: the eval runs with CP keep at "
                              f"least {reg.cp_min_tokens:,}{cases('cp_tokens')}"),
        "cp_degree": lambda: f"a CP{cp} ring: the longest in the eval runs is CP{reg.cp_max}{cases('cp_degree')}",
        "cp_cross_node": lambda: (f"a CP{cp} ring across nodes (TP{tp} x CP{cp} over {shape.gpus_per_node} GPUs per "
                                  f"node) at {shape.seq // cp:,} tokens per rank" + (
                                      f": the eval runs whose ring crosses nodes keep {reg.cp_cross_node_min_tokens:,}"
                                      f"{cases('cp_cross_node')}" if reg.cp_cross_node_min_tokens
                                      else ": no eval run's CP ring crosses nodes")),
        "tp_cross_node": lambda: f"TP{tp} across nodes of {shape.gpus_per_node} GPUs: no eval run has TP beyond a node",
        "ep_degree": lambda: f"EP{ep}: the widest in the eval runs is EP{reg.ep_max}{cases('ep_degree')}",
        "schedule": lambda: _schedule_text(config["schedule"], pp, shape.is_moe, reg, cite),
        "vpp": lambda: (f"vpp {vpp}: the most virtual stages of a {kind} eval run is {reg.vpp_max[shape.is_moe]}"
                        + cases(f"vpp:{int(shape.is_moe)}")),
        "uneven_pp": lambda: (f"PP{pp}" + (f" x vpp {vpp}" if vpp > 1 else "") + f" on {shape.layers} layers leaves "
                              f"{int(_short_chunks(shape.layers, pp, vpp))} pipeline chunks a layer short: the eval "
                              f"runs have at most {reg.short_chunks_max}{cases('uneven_pp')}"),
        "zero_pp": lambda: (f"ZeRO-{config['zero']} with PP{pp}: the eval runs with PP use at most ZeRO-"
                            f"{reg.zero_pp_max}{cases('zero_pp')}"),
    }
    return [text[name]() for name, outside in out.items() if bool(outside)]


def _schedule_text(schedule: str, pp: int, is_moe: bool, reg: Region, cite: bool) -> str:
    kind = "MoE" if is_moe else "dense"
    fewest = reg.schedules.get((is_moe, schedule))
    if fewest is None:
        return f"the {schedule} schedule on a {kind} model: no {kind} eval run uses it"
    return (f"the {schedule} schedule at PP{pp}: the {kind} eval runs use it from PP{fewest}"
            + (f" ({_cases(reg, f'schedule:{int(is_moe)}:{schedule}')})" if cite else ""))


def shape_of(model, seq: int, gpus_per_node: int) -> Shape:
    """The Shape of a job: a ModelSpec, its sequence length and the GPUs per node."""
    return Shape(layers=int(model.num_layers), is_moe=bool(model.is_moe), seq=int(seq),
                 gpus_per_node=int(gpus_per_node))


def margin_sentence(margin: float) -> str:
    return (f"a layout outside the evals' evidence is recommended only when it beats the best layout inside it by "
            f"at least {margin:.0%} on the objective")


__all__ = ["EVIDENCE_MARGIN", "Region", "Shape", "departures_of", "distance", "flags", "margin_sentence",
           "region", "shape_of"]
