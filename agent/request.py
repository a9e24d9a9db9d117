"""The offline parser of plain-language planning requests.

    parse_request("Llama 3 70B on 64 nodes of 8 H100s for 15T tokens, cheapest, not fp8")
    -> PlanRequest(model="llama3-70b", gpu="h100-sxm-80gb", gpus=512, gpus_per_node=8, tokens=15e12,
                   objective="cost", precision="bf16", ...)

What it reads (case and word order do not matter; full-width and CJK text is read too):

- model: a catalog name or alias ("Llama 3 70B", "llama3-70b", "DeepSeek-V3", "GPT-3"), a family
  and a size in any order ("a 70B Llama 3 model", "a 7B Mistral"), a size alone when the catalog has
  one model of that size ("a 70B"; the plan says so; "a 7B" is refused with the 7B models), or a path
  ending in .json;
- gpu: a catalog GPU as people write it, qualifiers included ("H100", "H100 PCIe", "A100 40GB",
  "8xH100"; tools/hardware/catalog/names.py derives this from the catalog's entries), or a GPU JSON path.
  A part the catalog lacks ("H100 NVL", "MI300X", "RTX 9090") is refused with close names;
- gpus: "512 H100s", "one RTX 4090", "two 4090s", "a single H100", "two H100 nodes", "16k H100" (k = 1024), "512张H100", "H100 x 512",
  "N GPUs", "64 nodes of 8 H100s" (= 512, gpus_per_node 8), "8 H100s per node, 64 nodes", "N nodes" (x the GPU's node);
  "up to 512 H100s" / "at most 512 GPUs" set max_gpus instead (the planner tries fewer);
- tokens: "15T tokens", "15.6e12 tokens", "300 billion tokens", "15万亿 token"; tokens per batch
  ("4M tokens per batch": gbs = tokens / seq, K and M read as 2^10 and 2^20); "2 epochs over 50M tokens" (x 2);
  "10k samples of 512 tokens" (tokens = 10,000 x 512, seq 512);
- seq ("sequence length 8192", "seq 4k", "8k context"), gbs ("global batch 1024", "gbs=256"), mbs ("micro-batch
  2", "per_device_train_batch_size=4"); "gradient accumulation 8" makes gbs = per-device batch x 8 x the
  data-parallel GPUs, as the Hugging Face Trainer does (a bare "batch size 1" beside it is the per-device batch);
- "gradient checkpointing" -> recompute full (each decoder layer rerun); "full SFT" -> method full; "4-bit" and
  "NF4" -> qlora; "Liger" -> fused_kernels and loss_kernel fused_linear, "Cut Cross-Entropy" -> the loss alone;
  PEFT's target_modules ("q_proj,v_proj", the four attention projections, those and the MLP's, "all-linear") and
  "lora_r=32";
- price ("$2/GPU-hour"), budget_usd ("budget $2M", "under $2M"), deadline_days ("within 30 days",
  "in 4 weeks", "30天内");
- objective: "cheapest" / "minimise cost" -> cost, "fastest" -> time, "max throughput";
- precision: "fp8" or "bf16"; "not fp8" -> bf16;
- pins of the layout: "TP8", "tp=8", "8-way TP", "PP 4", "ZeRO-3", "FSDP" (ZeRO-3), "vpp 2",
  "EP 64", "CP2", "full recompute", the schedule ("DualPipe", "interleaved 1F1B", "1F1B", "zero bubble",
  "ZB-H1", "GPipe"), the attention kernel ("FlashAttention-2", "SDPA", "eager attention", "FA3"); negations
  pin a feature off: "no tensor parallelism" -> tp 1, "without pipeline parallelism" -> pp 1,
  "no activation checkpointing" -> recompute none, "without flash attention" -> attention eager.

- gpus as a lower bound: "at least 256 H100s", "256 GPUs or more" (gpus_at_least: the search has no
  lower bound, so the plan uses 256 and says so);
- engine: "using DeepSpeed", "with torchtitan", "in Megatron-LM", or any engine of tools/config/engines.py
  written as its profile's pattern matches ("LLaMA-Factory", "HF Accelerate"); an engine the text refuses ("not DeepSpeed") sets nothing
  and stays in `unparsed`. Two engines named at once raise InputError.

Impossible counts ("-512 H100s", "512.5 H100s", "for -15T tokens"), any other negative number ("TP -8",
"-$2 per GPU-hour"; U+2212 and the figure, en and em dashes are minus signs before a number, hyphens
inside a word: request_text.SIGNS) and unknown GPUs raise InputError; words no rule understood are kept
in `unparsed` for the report, with any tail the length cut left unread.

`parse_partial` returns only what the text says (for follow-ups in a chat: "what if I only have
256 GPUs?", "use fp8"); `merge` lays a partial parse over a previous request; `parse_request`
requires a model and the hardware and raises InputError naming what is missing, with an example.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from trainplan.tools.hardware import catalog
from trainplan.tools.config.contract import Job, Layout, SearchOptions
from trainplan.tools.config.fields import asked_names, knob_of, optional_model
from trainplan.tools.config.resolve import is_lora
from trainplan.tools.core.errors import InputError

from . import request_amounts as amounts
from . import request_rules as rules
from . import request_steering as steering
from .request_text import RequestText

EXAMPLE = rules.EXAMPLE



def pins_of(layout: type[Layout] = Layout) -> tuple[str, ...]:
    """The Layout knobs a request may pin (Knob.pin), in request order (asked_names)."""
    return tuple(name for name in asked_names(layout) if knob_of(layout.model_fields[name]).pin)


PINS = pins_of()
"""Layout knobs a request may pin (the search keeps them fixed): contract.Knob.pin, in request order."""
_JOB = asked_names(Job)
_LAYOUT = asked_names(Layout)
_SEARCH = asked_names(SearchOptions)


class _Request(BaseModel):
    """A planning request in the contract's vocabulary (tools/config/contract.py). None: not given (the planner chooses)."""

    batch_tokens: float | None = Field(default=None, description="tokens per step as asked (gbs = batch_tokens / seq)")
    unparsed: list[str] | None = Field(default=None, description="words of the request the parser did not understand")
    gpus_at_least: bool | None = Field(default=None, description="gpus was written as a lower bound ('at least 256 "
                                                                 "H100s'); the search has none, so the plan uses gpus")
    model_from_size: str | None = Field(default=None, description="the model was named by its size alone ('a 70B'), "
                                                                  "as written: the catalog's one model of that size")
    packing: bool | None = Field(default=None, description="the request packs several samples into each sequence "
                                                           "('sample packing', 'packed'): with no document_tokens the "
                                                           "plan says how attention is timed")
    fine_tuning: bool | None = Field(default=None, description="the request fine-tunes a trained model: when full "
                                                               "training does not fit, the plan says whether LoRA or "
                                                               "QLoRA would")
    solve: Literal["seq", "mbs", "gpu"] | None = Field(
        default=None, description="the limit the request asks for (tools/search/limits.py): seq, the longest context that "
        "fits ('longest context I can QLoRA Llama 3 8B on a 4090'); mbs, the largest micro-batch that fits; gpu, the "
        "smallest or cheapest catalog GPU that fits (the plan then runs on the cheapest per token); the report answers "
        "it for the recommended layout; a request that asks one and names no GPU count plans one GPU")

    def given(self) -> dict[str, Any]:
        """The fields that are set (the words not understood are not a field of the plan)."""
        return {k: v for k, v in self.model_dump(exclude={"unparsed"}).items() if v is not None}

    def is_fine_tune(self) -> bool:
        """A fine-tune: the request says so ("fine-tune", "SFT") or names LoRA/QLoRA or their targets. It gets the
        fine-tuning defaults of tools/config/plan_defaults.py, not the pre-training ones."""
        return (bool(self.fine_tuning) or (self.method is not None and is_lora(self.method))
                or self.lora_targets is not None)

    def count_open(self) -> bool:
        """No GPU count, bound, deadline, budget or limit asked: nothing sizes the count."""
        return (self.gpus is None and self.max_gpus is None and self.deadline_days is None
                and self.budget_usd is None and self.solve is None)

    def missing(self) -> list[str]:
        needed = ["model"] if self.solve == "gpu" else ["model", "gpu"]   # solve=gpu: the cheapest that fits
        if self.count_open() and not self.is_fine_tune():
            needed.append("gpus")  # with a bound, a deadline or a budget the planner finds the count; a fine-tune
            # naming none is planned on up to one node (agent/job_defaults.py bound_open_fine_tune)
        return [name for name in needed if getattr(self, name) is None]


def plan_request_model(job: type[Job] = Job, layout: type[Layout] = Layout,
                       options: type[SearchOptions] = SearchOptions) -> type[_Request]:
    """The planning request model from the fields each model marks Knob(asked=...), in asked_names order."""
    return optional_model(
        "PlanRequest",
        {**{k: job.model_fields[k] for k in asked_names(job)}, **{k: layout.model_fields[k] for k in asked_names(layout)},
         **{k: options.model_fields[k] for k in asked_names(options)}},
        base=_Request,
        descriptions={**{k: f"pinned {layout.model_fields[k].description}; null: the search chooses"
                         for k in pins_of(layout)},
                      "dispatcher": f"{layout.model_fields['dispatcher'].description}; null: "
                                    f"{layout.model_fields['dispatcher'].default.value} (the search does not choose it)",
                      "attention": f"{layout.model_fields['attention'].description}; null: the engine's kernel, or "
                                   f"{layout.model_fields['attention'].default.value} (the search does not choose it)",
                      **{k: f"{layout.model_fields[k].description}; null: the engine's (the search does not choose it)"
                         for k in ("fused_kernels", "loss_kernel")},
                      "gpus": "total GPUs; null: the planner chooses up to max_gpus, or to meet deadline_days or "
                              "budget_usd"})


PlanRequest = plan_request_model()
"""The fields of tools/config/contract.py's Job, Layout and SearchOptions that a request may state, each
None when the request does not (the planner fills it and says so), plus what only a request has."""


def parse_partial(text: str, context: PlanRequest | None = None) -> PlanRequest:
    """Every field the text states, and nothing else; InputError for impossible counts and for GPUs
    the catalog lacks. context: the request a follow-up revises (a chat's), whose GPU count and sizes a
    gradient accumulation the text states without them multiplies."""
    t = RequestText(text)
    found: dict[str, Any] = {}
    rules.read_paths(t, found)
    steering.read_engine(t, found)  # before the model: 'LLaMA-Factory' is no Llama, 'ZB-H1' no GPU
    steering.read_schedule(t, found)
    steering.read_attention(t, found)
    steering.read_kernels(t, found)
    steering.read_dispatcher(t, found)
    rules.read_model_name(t, found)
    rules.read_gpu(t, found)
    amounts.read_samples(t, found)   # before the rest: '10k samples of 512 tokens' is a length and a data set
    amounts.read_sequence_in_tokens(t, found)   # before the training tokens: 'at 4096 tokens' is a sequence
    if "tokens" not in found:
        amounts.read_tokens(t, found)
    amounts.read_epochs(t, found)
    amounts.read_sequence_and_batch(t, found)
    amounts.read_money(t, found)
    amounts.read_goodput(t, found)
    amounts.read_deadline(t, found)
    rules.read_counts(t, found)
    steering.read_limit(t, found)   # before the objective: 'cheapest GPU that fits' asks a limit
    steering.read_objective(t, found)
    negated = steering.read_negations(t, found)
    steering.read_precision(t, found, negated)
    steering.read_pins(t, found)
    steering.read_method(t, found)
    amounts.apply_accumulation(found, context)   # after the counts and pins: the data-parallel size
    rules.read_model_by_family(t, found)
    signed = t.signed_number(skip=tuple(found.pop("_spans", {}).values()))
    if signed is not None:   # after the rules, whose own refusals ('-512 H100s') say more
        raise InputError(f"'{signed}' is negative: a request's counts, sizes, prices, budgets and times are "
                         f"positive: drop the minus sign (a hyphen inside a name, 'Llama-3', or a range, '8-16', "
                         f"is read as one), e.g. {EXAMPLE}")
    unparsed = t.unread_words()
    return PlanRequest(**found, unparsed=unparsed or None)


def merge(previous: PlanRequest, update: PlanRequest) -> PlanRequest:
    """`previous` with every field `update` sets; a new seq or batch size recomputes gbs."""
    data = previous.model_dump()
    given = update.given()
    if "seq" in given and "gbs" not in given and previous.batch_tokens is None:
        data["gbs"] = None  # the old gbs was for the old seq; the default rule chooses again
    if "batch_tokens" in given and "gbs" not in given:
        data["gbs"] = None
    if "gbs" in given:
        data["batch_tokens"] = None
    if "model" in given and "model_from_size" not in given:
        data["model_from_size"] = None  # a model named in full replaces one read from its size
    if "gpu" in given and "gpus" not in given and previous.gpu and previous.gpus:
        data["gpus"] = previous.gpus
    if "gpus" in given and "max_gpus" not in given:
        data["max_gpus"] = None  # a count replaces a bound ("what if I only have 256 GPUs?")
    if "max_gpus" in given and "gpus" not in given:
        data["gpus"] = None
    if ("gpus" in given or "max_gpus" in given) and "gpus_at_least" not in given:
        data["gpus_at_least"] = None  # a new count is exact unless it says 'at least' again
    data.update(given)
    data["unparsed"] = update.unparsed
    return PlanRequest(**data)


def require_complete(request: PlanRequest) -> PlanRequest:
    """InputError naming what is missing (model, GPU type, GPU count), with an example."""
    missing = request.missing()
    if not missing:
        return request
    needs = []
    if "model" in missing:
        needs.append(f"a model (one of {', '.join(catalog.model_names())}, or a path to an HF config.json)")
    if "gpu" in missing and "gpus" in missing:
        needs.append("the hardware: how many GPUs of which type (e.g. 512 H100s)")
    elif "gpu" in missing:
        needs.append(f"the GPU type (one of {', '.join(catalog.gpu_names())})")
    elif "gpus" in missing:
        needs.append("how many GPUs (e.g. 512 H100s), an upper bound (up to 512 H100s) or a deadline "
                     "(in 30 days)")
    raise InputError(f"the request needs {' and '.join(needs)}: e.g. {EXAMPLE}")


def parse_request(text: str) -> PlanRequest:
    """A complete request: model, gpu and gpus are required (InputError otherwise)."""
    request = parse_partial(text)
    require_complete(request)
    if request.gpus is not None and request.gpus <= 0:
        raise InputError(f"gpus={request.gpus} must be a positive number of GPUs: e.g. {EXAMPLE}")
    return request


def resolve_gbs(request: PlanRequest, seq: int) -> tuple[int | None, str | None]:
    """gbs from a tokens-per-batch request: (gbs, how it was read); (request.gbs, None) otherwise."""
    if request.gbs is not None or request.batch_tokens is None:
        return request.gbs, None
    exact = request.batch_tokens / seq
    gbs = max(1, int(round(exact)))
    how = f"{request.batch_tokens:,.0f} tokens per batch / seq {seq} = {gbs} sequences"
    if gbs != exact:
        how = f"{request.batch_tokens:,.0f} tokens per batch / seq {seq} = {exact:.1f}, rounded to {gbs} sequences"
    return gbs, how
