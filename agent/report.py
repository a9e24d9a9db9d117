"""The plan report: a pydantic PlanReport, built from the tools' results, rendered to Markdown
(prompts/report.md.j2) and to JSON.

JSON shape (`trainplan plan --json`):
    backend, llm_model, request_text,
    request:      the request as understood (model, gpu, gpus, tokens, seq, gbs, price, precision,
                  deadline_days, budget_usd, pins), every default filled in,
    recommended:  the estimate object of the recommended layout, with its `config`; exactly what
                  trainplan.estimate returns for that config and the request's tokens and price,
    layout, memory_table, time_table, timeline (schedule, bubble, ASCII and Mermaid renders),
    alternatives: [{layout, result, why_not}], risks, rationale, assumptions,
    evidence:     the evidence margin and how far the layout is from the evals' evidence (agent/advice.py),
    error_band:   the expected error of the plan's regime, known_gaps: the model's eval rows that miss,
    tradeoffs:    GPU counts against days, dollars and MFU (agent/tradeoffs.py): the standard counts around a
                  constrained plan's (deadline, budget, bound, chosen count), half and twice a plan's
                  that states its tokens; tradeoff_note: what 'cheapest' traded,
    search:       evaluated / feasible / rejected counts, when a search ran,
    grounding:    the check of the LLM's text (openai backend), tool_calls.

Risk thresholds (named constants below): memory headroom under 10% of capacity, a communication
part above 20% of the step, a pipeline bubble above 10% of the step.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
import re
from typing import Literal

from pydantic import BaseModel, Field

from trainplan.prompts import duration, gpu_hours, render, usd

from .advice import departures_risk, error_band, evidence_lines, known_gaps, pure_bf16_alternative, stack_line
from trainplan.tools.perf.estimate import BORN_IN_BACKWARD_NOTE
from trainplan.tools.perf.finetune import TARGET_PHRASES, model_states_sentence
from trainplan.tools.perf.memory_hints import largest_component, memory_fixes, phrase
from trainplan.tools.perf.pipeline_events import PipelineEvent, PipelineResult
from trainplan.tools.perf.pipeline_render import render_ascii, render_mermaid
from trainplan.tools.config.engines import ENGINE_LIST, NON_HF_TRAINER_ENGINES
from trainplan.tools.config.plan_defaults import DEFAULT_HEADROOM

from .prose import neutralise_line
from .sizing import SIZING_PREFIX

HEADROOM_RISK = DEFAULT_HEADROOM
"""memory headroom below this share of capacity is a risk (fragmentation, spikes, longer sequences):
the headroom search and plan keep by default (tools.plan_defaults)"""
COMM_RISK = 0.20
"""an exposed communication part above this share of the step is a risk (communication-bound)"""
BUBBLE_RISK = 0.10
"""a pipeline bubble above this share of the step is a risk"""
MERMAID_MAX_EVENTS = 240
"""ops drawn in the Mermaid gantt; more are left out with a note"""
SUMMARY_RISKS = 3
"""risks the summary lists (the full report lists all)"""
MEMORY_COMPONENTS = ("weights", "gradients", "optimizer", "activations", "other")


class MemoryRow(BaseModel):
    component: str = Field(description="weights, gradients, optimizer, activations, other or total")
    gib: float = Field(description="GiB (2^30 B) per GPU on the most loaded rank")
    share_of_capacity: float = Field(description="gib / the GPU's capacity")


class TimeRow(BaseModel):
    part: str = Field(description="a key of time.breakdown (compute, comm/tp, bubble, ...)")
    seconds: float = Field(description="seconds per step on the critical stage")
    share: float = Field(description="seconds / step_s")


class Timeline(BaseModel):
    schedule: str = Field(description="pipeline schedule")
    pp: int = Field(description="pipeline stages")
    num_microbatches: int = Field(description="micro-batches per step")
    vpp: int = Field(description="virtual stages per rank")
    makespan_s: float = Field(description="pipeline makespan, seconds")
    bubble_fraction: float = Field(description="idle share of the pipeline")
    ascii: str = Field(description="rank x time grid (tools/perf/pipeline_render.py render_ascii)")
    mermaid: str = Field(description="a ```mermaid gantt block (tools/perf/pipeline_render.py render_mermaid)")
    num_events: int = Field(description="ops in the simulated step")
    mermaid_events: int = Field(description="ops drawn in the gantt")
    mermaid_window_s: float | None = Field(default=None, description="the gantt shows ops starting before this "
                                                                     "time on every rank; None: the whole step")
    bars: list[tuple[int, str, float, float]] = Field(
        default_factory=list, description="the ops the gantt draws, as (rank, kind F/B/W/FB, start_s, end_s)")


class Alternative(BaseModel):
    layout: str = Field(description="the layout in one line")
    family: str | None = Field(default=None, description="the structural family it is the best of (e.g. "
                                                         "'FSDP / ZeRO-3'), or None for a runner-up")
    result: dict = Field(description="its estimate object, with config")
    why_not: str = Field(description="why it lost to the recommended layout, in the tools' numbers")


class Grounding(BaseModel):
    ok: bool = Field(description="the LLM called tools, its answer is not empty, and every number in it was found "
                                 "in a tool result or the request, in a field of its unit")
    status: Literal["grounded", "ungrounded", "empty_answer", "no_tool_calls"] = Field(
        default="grounded", description="why ok is what it is")
    share_grounded: float | None = Field(description="found numbers (weak included) / checked numbers; 0 when the "
                                                     "LLM called no tool; None: nothing to check")
    grounded: int = Field(description="numbers found with 3 or more significant digits, or layout tokens by key")
    weak: list[str] = Field(default_factory=list, description="numbers found, but written with 1-2 significant "
                                                                "digits, so an unrelated value may match them")
    from_request: list[str] = Field(default_factory=list, description="found numbers that only the request has")
    ungrounded: list[str] = Field(default_factory=list, description="numbers not found, as written")
    reasked: bool = Field(default=False, description="whether the model was asked once to fix them")


class Launch(BaseModel):
    """Launch settings for the recommended layout in one engine (tools/engines)."""

    engine: str = Field(description=ENGINE_LIST)
    filename: str | None = Field(default=None, description="suggested file name")
    format: str | None = Field(default=None, description="args, json, toml or yaml")
    content: str | None = Field(default=None, description="the file or command-line arguments")
    notes: list[str] = Field(default_factory=list, description="what the engine does differently")
    error: str | None = Field(default=None, description="why the engine cannot express this layout")


class PlanReport(BaseModel):
    """A training plan. Numbers are the tools' numbers for the recommended layout."""

    backend: Literal["offline", "openai"] = Field(description="which planner produced the report")
    llm_model: str | None = Field(default=None, description="the chat model, for the openai backend (or the one "
                                                            "that failed)")
    llm_status: Literal["submitted", "no_submission", "no_tool_calls", "failed"] | None = Field(
        default=None, description="the LLM's part: submitted (the layout is the one it handed over with "
        "submit_plan), no_submission / no_tool_calls (it did not; the layout and numbers are the offline "
        "planner's), failed (the LLM failed: llm_error; the offline planner made the plan); None: no LLM")
    llm_error: str | None = Field(default=None, description="the LLM's error, when llm_status is failed")
    llm_answer: str | None = Field(default=None, description="the LLM's own text when it did not submit a layout "
                                                             "(unchecked; the rationale is the offline planner's)")
    truncated: bool = Field(default=False, description="the LLM's answer was cut at its max_tokens limit")
    request_text: str = Field(description="the request as written")
    request: dict = Field(description="the request as understood, defaults filled in")
    recommended: dict | None = Field(description="estimate object of the recommended layout; None: none fits")
    layout: str | None = Field(default=None, description="the recommended layout in one line")
    memory_table: list[MemoryRow] = Field(default_factory=list, description="memory per component")
    time_table: list[TimeRow] = Field(default_factory=list, description="step time per part")
    timeline: Timeline | None = Field(default=None, description="the recommended layout's pipeline")
    alternatives: list[Alternative] = Field(default_factory=list, description="runners-up and why they lost")
    risks: list[str] = Field(default_factory=list, description="what could go wrong")
    rationale: str = Field(default="", description="why this layout (the LLM's text for the openai backend)")
    assumptions: list[str] = Field(default_factory=list, description="everything the request did not say")
    search: dict | None = Field(default=None, description="evaluated, feasible, rejected, objective, wall_s")
    grounding: Grounding | None = Field(default=None, description="grounding check of the LLM's text")
    tool_calls: list[dict] = Field(default_factory=list, description="the LLM's tool calls: name, arguments")
    engine: str | None = Field(default=None, description="the engine the plan is scored and launched for (its "
                                                          "kernels and limits); None: any engine's layouts")
    launch: Launch | None = Field(default=None, description="launch settings for the chosen engine")
    not_understood: list[str] = Field(default_factory=list, description="words of the request the parser did "
                                                                         "not understand")
    limit: dict | None = Field(default=None, description="the limit the request asked (its solve: the longest seq, "
                               "the largest mbs or the GPUs that fit) for the recommended layout, tools/search/limits.py")
    evidence: list[str] = Field(default_factory=list, description="the evidence margin, the search's choice by it, "
                                "and the recommended layout's departures from what the evals validate")
    error_band: str | None = Field(default=None, description="the expected error of this kind of plan, from the evals")
    known_gaps: list[str] = Field(default_factory=list, description="eval cases of this model that miss, with the "
                                  "measured error")
    tradeoffs: list[dict] = Field(default_factory=list, description="GPU counts against days, dollars and MFU "
                                  "(gpus, days, cost_usd, mfu, layout, departures, meets, pareto, chosen): around a "
                                  "constrained plan's count, or half and twice a plan's that states its tokens")
    tradeoff_note: str | None = Field(default=None, description="what the chosen count trades, in days and dollars")

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=indent)

    def limit_text(self) -> str:
        """The limit's answer as tools/search/limits.py words it (estimate --solve prints the same)."""
        from trainplan.tools.search.limits import render_limit

        return render_limit(self.limit) if self.limit else ""

    def sizing_text(self) -> str:
        """How the planner chose the GPU count the request left open (a deadline, a budget, 'up to N'), as its
        assumption says it, without the counts tried; "" when the request gave the count, or when no count met the
        request (a risk says so already)."""
        said = next((a for a in self.assumptions if a.startswith(SIZING_PREFIX)), "")
        return "" if said in self.risks else said.removeprefix(SIZING_PREFIX).split("; tried ", 1)[0]

    def to_markdown(self) -> str:
        recommended = self.recommended or {}
        comm_s = sum(row.seconds for row in self.time_table if row.part.startswith("comm/"))
        config = recommended.get("config")
        text = render("report.md.j2", report=self, r=self.recommended, config=config, comm_s=comm_s,
                      request_quote=neutralise_line(self.request_text, max_chars=4000),
                      states_sentence=model_states_sentence(config) if config else "",
                      memory_note=next((n for n in recommended.get("notes") or []
                                        if n.startswith(BORN_IN_BACKWARD_NOTE)), ""),
                      non_hf_trainer_engines=", ".join(NON_HF_TRAINER_ENGINES),
                      target_phrases={target.value: phrase for target, phrase in TARGET_PHRASES.items()})
        return re.sub(r"\n{3,}", "\n\n", text)

    def to_summary(self) -> str:
        """The short report: layout, memory, step, MFU, days, cost, launch engine and the top risks."""
        text = render("summary.md.j2", report=self, r=self.recommended, SUMMARY_RISKS=SUMMARY_RISKS)
        return re.sub(r"\n{3,}", "\n\n", text)


# --- pieces --------------------------------------------------------------------------------------


def layout_line(config: dict) -> str:
    """'TP8 x PP4 x DP16 x CP1 x EP1, vpp 1, ZeRO-1, mbs 1, gbs 512, seq 8192, recompute selective, 1f1b, bf16'
    (and ', LoRA r16 all-linear' for adapters; 'seq 8192 of 400-token documents' for packed documents)."""
    return (f"TP{config['tp']} x PP{config['pp']} x DP{config['dp']} x CP{config['cp']} x EP{config['ep']}, "
            f"vpp {config['vpp']}, ZeRO-{config['zero']}, mbs {config['mbs']}, gbs {config['gbs']}, "
            f"seq {config['seq']}"
            + (f" of {config['document_tokens']:,}-token documents" if config.get("document_tokens")
               and config["document_tokens"] < config["seq"] else "")
            + f", recompute {config['recompute']}, {config['schedule']}, {config['precision']}"
            + (", optimizer on the CPU" if config.get("optimizer_offload") else "") + _method_text(config))


def _method_text(config: dict) -> str:
    """', LoRA r16 all-linear' (', QLoRA ...'): the method of an adapter layout; '' for full training."""
    method = config.get("method") or "full"
    if method == "full":
        return ""
    return f", {'QLoRA' if method == 'qlora' else 'LoRA'} r{config.get('lora_rank')} {config.get('lora_targets')}"


def memory_rows(result: dict) -> list[MemoryRow]:
    memory = result["memory_gib"]
    capacity = memory["capacity"]
    return [MemoryRow(component=key, gib=memory[key], share_of_capacity=memory[key] / capacity)
            for key in (*MEMORY_COMPONENTS, "total")]


def time_rows(result: dict) -> list[TimeRow]:
    time = result.get("time")
    if not time:
        return []
    step = time["step_s"]
    return [TimeRow(part=key, seconds=seconds, share=seconds / step) for key, seconds in time["breakdown"].items()]


def timeline_from(pipeline: dict) -> Timeline:
    """Render the pipeline record of an estimate made with timeline=True."""
    result = PipelineResult(
        schedule=pipeline["schedule"], pp=pipeline["pp"], num_microbatches=pipeline["num_microbatches"],
        vpp=pipeline["vpp"], makespan_s=pipeline["makespan_s"], bubble_fraction=pipeline["bubble_fraction"],
        stage_busy_s=pipeline["stage_busy_s"], peak_inflight_microbatches=pipeline["peak_inflight_microbatches"],
        timeline=[PipelineEvent(**event) for event in pipeline["timeline"]],
    )
    shown, window_s = result, None
    if len(result.timeline) > MERMAID_MAX_EVENTS:
        # The same time window on every rank: the ops that start before the cut.
        window_s = sorted(e.start_s for e in result.timeline)[MERMAID_MAX_EVENTS]
        shown = dataclasses.replace(result, timeline=[e for e in result.timeline if e.start_s < window_s])
    return Timeline(schedule=result.schedule, pp=result.pp, num_microbatches=result.num_microbatches,
                    vpp=result.vpp, makespan_s=result.makespan_s, bubble_fraction=result.bubble_fraction,
                    ascii=render_ascii(result), mermaid=render_mermaid(shown, max_events=MERMAID_MAX_EVENTS),
                    mermaid_window_s=window_s, num_events=len(result.timeline),
                    mermaid_events=len(shown.timeline),
                    bars=[(e.stage, e.kind, e.start_s, e.end_s) for e in shown.timeline])


def risks_of(result: dict, request: dict) -> list[str]:
    """Memory headroom, communication-bound parts, an offloaded optimizer, bubble, cross-node TP,
    deadline and budget."""
    risks = []
    memory, config = result["memory_gib"], result["config"]
    headroom = memory["capacity"] - memory["total"]
    if headroom < HEADROOM_RISK * memory["capacity"]:
        risks.append(f"memory headroom is {headroom:.2f} GiB, {headroom / memory['capacity']:.1%} of the "
                     f"{memory['capacity']:.2f} GiB capacity (under {HEADROOM_RISK:.0%}): allocator "
                     "fragmentation or a spike can run out of memory; "
                     f"{phrase(memory_fixes(largest_component(memory), config))} buys room")
    time = result.get("time")
    if time:
        step = time["step_s"]
        for key, seconds in time["breakdown"].items():
            if key.startswith("comm/") and seconds > COMM_RISK * step:
                risks.append(f"{key} is {seconds:.3f} s, {seconds / step:.1%} of the {step:.3f} s step "
                             f"(over {COMM_RISK:.0%}): this part is communication-bound, and a slower "
                             "network than assumed slows the step directly")
        comm = sum(v for k, v in time["breakdown"].items() if k.startswith("comm/"))
        if comm > COMM_RISK * step and not any(k.startswith("comm/") and v > COMM_RISK * step
                                               for k, v in time["breakdown"].items()):
            risks.append(f"exposed communication totals {comm:.3f} s, {comm / step:.1%} of the step (over "
                         f"{COMM_RISK:.0%})")
        optimizer = time["breakdown"].get("optimizer", 0.0)
        if config.get("optimizer_offload"):
            risks.append(f"the optimizer states and step run on the CPU (ZeRO-Offload): {optimizer:.3f} s, "
                         f"{optimizer / step:.1%} of the {step:.3f} s step, is the host link and the CPU's Adam, "
                         "so a slower host than assumed slows every step; more GPUs would keep it on them")
        bubble = time["breakdown"].get("bubble", 0.0)
        if bubble > BUBBLE_RISK * step:
            risks.append(f"the pipeline bubble is {bubble:.3f} s, {bubble / step:.1%} of the step (over "
                         f"{BUBBLE_RISK:.0%}): more micro-batches (a larger gbs), vpp>1 or a zero-bubble "
                         "schedule would shrink it")
    if config["tp"] > config["gpus_per_node"]:
        risks.append(f"tp={config['tp']} spans nodes of {config['gpus_per_node']} GPUs: tensor-parallel traffic "
                     "crosses the network")
    training = result.get("training")
    if training and request.get("deadline_days") and training["days"] > request["deadline_days"]:
        risks.append(f"training takes {training['days']:.1f} days, past the {request['deadline_days']:g}-day "
                     "deadline")
    if training and request.get("budget_usd") and training["cost_usd"] > request["budget_usd"]:
        risks.append(f"training costs ${training['cost_usd']:,.0f}, over the ${request['budget_usd']:,.0f} budget")
    return risks


def why_not(alt: dict, best: dict, objective: str = "throughput") -> str:
    """Why `alt` lost to `best`, in the tools' numbers."""
    if not alt["fits"]:
        return f"does not fit: {alt.get('reason')}"
    reasons = []
    ta, tb = alt.get("time"), best.get("time")
    if ta and tb:
        slower = 1 - ta["tokens_per_s"] / tb["tokens_per_s"]
        if slower > 0:
            reasons.append(f"{slower:.1%} lower throughput ({ta['tokens_per_s']:,.0f} vs "
                           f"{tb['tokens_per_s']:,.0f} tokens/s, MFU {ta['mfu']:.1%} vs {tb['mfu']:.1%})")
        elif slower < 0:
            reasons.append(f"{-slower:.1%} higher throughput ({ta['tokens_per_s']:,.0f} vs "
                           f"{tb['tokens_per_s']:,.0f} tokens/s) but ranked lower on {objective}")
        else:
            reasons.append("the same throughput; ranked lower by the search's tie-break")
        deltas = {k: ta["breakdown"].get(k, 0.0) - tb["breakdown"].get(k, 0.0) for k in ta["breakdown"]}
        key, delta = max(deltas.items(), key=lambda kv: kv[1])
        if delta > 0 and slower > 0:
            reasons.append(f"mostly {key} (+{delta:.3f} s per step)")
    ca, cb = alt.get("training"), best.get("training")
    if ca and cb and ca["cost_usd"] > cb["cost_usd"] and objective == "cost":
        reasons.append(f"costs ${ca['cost_usd']:,.0f} vs ${cb['cost_usd']:,.0f}")
    ma, mb = alt["memory_gib"], best["memory_gib"]
    if ma["total"] < mb["total"]:
        reasons.append(f"though it uses less memory ({ma['total']:.2f} vs {mb['total']:.2f} GiB per GPU)")
    elif ma["total"] > mb["total"]:
        reasons.append(f"and uses more memory ({ma['total']:.2f} vs {mb['total']:.2f} GiB per GPU)")
    return "; ".join(reasons)


@dataclasses.dataclass(frozen=True)
class ReportOrigin:
    """Who made the plan and from what: the backend, the LLM and its checked tool calls (openai backend)."""
    backend: str
    request_text: str
    llm_model: str | None = None
    tool_calls: Sequence[dict] = ()
    grounding: Grounding | None = None


@dataclasses.dataclass(frozen=True)
class LayoutChoice:
    """The request as understood and the layouts the tools chose for it: `recommended` an estimate made with
    timeline=True (None when no layout fits), the alternatives ranked on `objective`, the search's counts."""
    request: dict
    recommended: dict | None
    alternatives: Sequence[dict] = ()
    search: dict | None = None
    objective: str = "throughput"
    limit: dict | None = None


@dataclasses.dataclass(frozen=True)
class ReportNotes:
    """The report's words: the rationale, the assumptions, the risks found before the report (added ahead of
    the layout's), and the parts of the request not understood."""
    rationale: str = ""
    assumptions: Sequence[str] = ()
    extra_risks: Sequence[str] = ()
    not_understood: Sequence[str] = ()


@dataclasses.dataclass(frozen=True)
class GpuCountTradeoffs:
    """GPU counts against days, dollars and MFU (agent/tradeoffs.py), and what 'cheapest' traded."""
    tradeoffs: Sequence[dict] = ()
    tradeoff_note: str | None = None


def build_report(origin: ReportOrigin, choice: LayoutChoice, notes: ReportNotes = ReportNotes(),
                 trade: GpuCountTradeoffs = GpuCountTradeoffs()) -> PlanReport:
    """Assemble a PlanReport. `choice.recommended` is an estimate made with timeline=True: its pipeline
    record becomes the timeline, and the rest is kept as the tools returned it."""
    request, recommended, search, objective = choice.request, choice.recommended, choice.search, choice.objective
    timeline = None
    if recommended is not None:
        recommended = dict(recommended)
        pipeline = recommended.pop("pipeline", None)
        if pipeline and pipeline.get("timeline"):
            timeline = timeline_from(pipeline)
    risks = [*notes.extra_risks, *(risks_of(recommended, request) if recommended else [])]
    evidence, band, gaps = [], None, []
    adapters = recommended is not None and (recommended["config"].get("method") or "full") != "full"
    if recommended is not None:
        model = request.get("model") or recommended["config"]["model"]
        evidence = evidence_lines(search, model, recommended["config"])
        outside = departures_risk(model, recommended["config"])
        if outside:
            risks.append(f"the recommended layout is {outside}: the model's figures there are not checked "
                         "against a published run")
        pure = pure_bf16_alternative(recommended, request)
        if pure:
            risks.append(pure)
        band = error_band(model, recommended["config"]["gpus"], bool(recommended.get("training")), adapters)
        gaps = known_gaps(model, request.get("gpu") or recommended["config"]["gpu"], adapters)
        risks.extend(gaps)
    assumptions = list(notes.assumptions)
    if adapters:
        assumptions.append(stack_line(recommended["config"]))
    return PlanReport(
        backend=origin.backend, llm_model=origin.llm_model, request_text=origin.request_text, request=request,
        recommended=recommended,
        layout=layout_line(recommended["config"]) if recommended else None,
        memory_table=memory_rows(recommended) if recommended else [],
        time_table=time_rows(recommended) if recommended else [],
        timeline=timeline,
        alternatives=[Alternative(layout=layout_line(a["config"]), family=a.get("family"),
                                  result={k: v for k, v in a.items() if k != "family"},
                                  why_not=(f"best {a['family']}: " if a.get("family") else "")
                                  + why_not(a, recommended, objective)
                                  + (f"; {risk}" if (risk := departures_risk(
                                      request.get("model") or a["config"]["model"], a["config"])) else ""))
                      for a in choice.alternatives] if recommended else [],
        risks=risks, rationale=notes.rationale, assumptions=assumptions, search=search,
        grounding=origin.grounding, tool_calls=list(origin.tool_calls), not_understood=list(notes.not_understood),
        limit=choice.limit, evidence=evidence, error_band=band, known_gaps=gaps, tradeoffs=list(trade.tradeoffs),
        tradeoff_note=trade.tradeoff_note,
    )


def summary_line(report: PlanReport) -> str:
    """One line for a chat: layout, memory, step time, MFU, days and cost."""
    r = report.recommended
    if r is None:
        return "no layout fits: " + "; ".join(report.risks[:1])
    parts = [report.layout or "", f"{r['memory_gib']['total']:.2f} of {r['memory_gib']['capacity']:.2f} GiB per GPU"]
    if "time" in r:
        parts.append(f"step {r['time']['step_s']:.3f} s, MFU {r['time']['mfu']:.1%}, "
                     f"{r['time']['tokens_per_s']:,.0f} tokens/s")
    if "training" in r:
        training = r["training"]
        parts.append(f"{duration(training['days'])}, {gpu_hours(training['gpu_hours'])} GPU-hours, "
                     f"{usd(training['cost_usd'])}")
    return " | ".join(parts)


def launch_settings(model: str, config: dict, engine: str) -> Launch:
    """The chosen engine's launch settings for a resolved layout, or the one line saying why not."""
    from trainplan.tools.hardware.catalog import load_model
    from trainplan.tools.config.contract import Layout
    from trainplan.tools.core.errors import InputError
    from trainplan.tools.engines import export
    from trainplan.tools.config.layout import resolve_config

    spec = load_model(model)
    cfg = resolve_config(spec, config["gpus"], **{k: config.get(k) for k in Layout.model_fields})
    try:
        result = export(engine, spec, cfg, model_ref=model, gpus_per_node=config.get("gpus_per_host", config["gpus_per_node"]))
    except InputError as exc:
        return Launch(engine=engine, error=str(exc))
    return Launch(engine=engine, filename=result.filename_suggestion, format=result.format,
                  content=result.content, notes=list(result.notes))
