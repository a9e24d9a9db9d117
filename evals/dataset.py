"""Reference runs as data: one YAML file per published run, each figure with its source.

Structure (after pydantic_evals): Dataset -> Case -> Evaluator -> Report. This module holds the
Dataset and the Cases; cases.py the evaluators; runner.py runs them; report.py renders the result.

A run file (evals/runs/*.yaml):

    id: llama3-405b                     # the run; file stem
    public_runs_id: llama3_405b         # its id in evals/references/public-runs.yaml
    name: ...
    sources: {key: full citation}       # copied from evals/references/public-runs.yaml
    context: [{name, value, source}]    # published figures kept for the record, not compared
    cases:
      - id: ...                         # unique across files
        kind: prediction | planning | claims
        request: {name: {value, source} | {value, assumed}}   # trainplan.estimate keyword arguments
        published: {quantity: {value, source, tolerance?}}    # compared with the prediction
        ...

Every input is either published (`source`, a key of `sources` followed by the section) or an
assumption (`assumed`: why). Every published figure has a `source`. tests/test_evals.py checks both.
Whether a case was used for calibration is not written here: the calibration table
(tools/core/calibration.py) names the cases each fitted constant was fitted on, and the loader marks them.
"""

from __future__ import annotations

from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainplan.tools.core.calibration import fitted_case_ids, named_case_ids

RUNS_DIR = Path(str(resources.files("trainplan.evals") / "runs"))

Kind = Literal["prediction", "planning", "claims"]


class Input(BaseModel):
    """One request argument: published (with a source) or assumed (with the reason)."""

    model_config = ConfigDict(extra="forbid")

    value: Any = Field(description="the argument, in the contract's vocabulary (tools/config/contract.py)")
    source: str | None = Field(default=None, description="where the value was published")
    assumed: str | None = Field(default=None, description="why this value was assumed (not published)")

    @model_validator(mode="after")
    def _sourced(self) -> Input:
        if not (self.source or self.assumed):
            raise ValueError(f"value {self.value!r} needs a 'source' or an 'assumed' reason")
        return self


class Figure(BaseModel):
    """A published figure the case compares with (or, for claims, the figure the lesson states)."""

    model_config = ConfigDict(extra="forbid")

    value: float = Field(description="the figure, in the unit named by its quantity key")
    source: str = Field(min_length=1, description="citation: a key of the file's sources plus the section")
    tolerance: float | None = Field(default=None, gt=0, description="relative tolerance; default per quantity")
    derived: bool = Field(default=False, description="computed from published figures (formula in note)")
    note: str | None = Field(default=None, description="how to read the figure")


class ContextFigure(BaseModel):
    """A published figure kept for the record (not comparable with one layout's prediction)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    value: float | str
    source: str = Field(min_length=1)
    note: str | None = None


class Case(BaseModel):
    """One evaluation: a request, the published figures, and how to compare them."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$", description="unique across all run files")
    kind: Kind
    description: str = Field(description="what the case checks, in one line")
    used_for_calibration: bool = Field(
        default=False,
        description="set by the loader: tools/core/calibration.py fitted a constant on this case (not held out)"
    )
    request: dict[str, Input] = Field(default_factory=dict, description="trainplan.estimate / planner arguments")
    fine_tuning: bool = Field(
        default=False,
        description="a fine-tuning measurement of method full (LoRA/QLoRA cases are fine-tuning by their method): "
                    "reported in the fine-tuning sections, not with pre-training"
    )
    published: dict[str, Figure] = Field(default_factory=dict, description="quantity -> published figure")
    # planning
    reference_case: str | None = Field(default=None, description="planning: the prediction case of the published layout")
    structure: dict[str, bool] = Field(default_factory=dict, description="planning: expected structural traits")
    # claims
    check: str | None = Field(default=None, description="claims: name of the check in cases.CLAIM_CHECKS")
    args: dict[str, Input] = Field(default_factory=dict, description="claims: the check's arguments")
    notes: list[str] = Field(default_factory=list, description="assumptions and caveats shown in the report")
    # filled by the loader
    run: str = Field(default="", description="id of the run file")
    run_dir: str = Field(default="", description="directory of the run file (relative model paths)")

    @model_validator(mode="after")
    def _kind_fields(self) -> Case:
        if self.kind == "claims" and not self.check:
            raise ValueError(f"claims case {self.id} needs 'check'")
        if self.kind != "claims" and not self.request:
            raise ValueError(f"{self.kind} case {self.id} needs 'request'")
        return self

    def kwargs(self) -> dict[str, Any]:
        """The request as keyword arguments; a model path ending in .json is resolved against the run file."""
        out = {name: item.value for name, item in self.request.items()}
        model = out.get("model")
        if isinstance(model, str) and model.endswith(".json") and not Path(model).is_absolute():
            out["model"] = str(Path(self.run_dir) / model)
        return out

    def arg_values(self) -> dict[str, Any]:
        return {name: item.value for name, item in self.args.items()}

    def assumptions(self) -> dict[str, str]:
        """Inputs that were assumed, with the reason."""
        items = {**self.request, **self.args}
        return {name: item.assumed for name, item in items.items() if item.assumed}

    def sources(self) -> dict[str, str]:
        """Published quantity -> citation."""
        return {name: fig.source for name, fig in self.published.items()}


class RunFile(BaseModel):
    """One YAML file: a published run (or the lesson's claims) and its cases."""

    model_config = ConfigDict(extra="forbid")

    id: str
    public_runs_id: str | None = Field(default=None, description="the run's id in evals/references/public-runs.yaml")
    name: str
    sources: dict[str, str] = Field(description="citation key -> full citation (public-runs.yaml)")
    context: list[ContextFigure] = Field(default_factory=list)
    cases: list[Case]

    @model_validator(mode="after")
    def _cited(self) -> RunFile:
        """Every source string starts with one of this file's citation keys."""
        def check(text: str, where: str) -> None:
            if not any(text.startswith(key) for key in self.sources):
                raise ValueError(f"{where}: source '{text}' does not start with a key of 'sources' "
                                 f"({', '.join(self.sources)})")
        for fig in self.context:
            check(fig.source, f"context {fig.name}")
        for case in self.cases:
            for name, fig in case.published.items():
                check(fig.source, f"{case.id}.published.{name}")
            for name, item in {**case.request, **case.args}.items():
                if item.source:
                    check(item.source, f"{case.id}.request.{name}")
        return self


class Dataset(BaseModel):
    """All run files; cases in file order."""

    runs: list[RunFile]

    @cached_property
    def cases(self) -> list[Case]:
        return [case for run in self.runs for case in run.cases]

    def case(self, case_id: str) -> Case:
        for case in self.cases:
            if case.id == case_id:
                return case
        known = ", ".join(c.id for c in self.cases)
        raise KeyError(f"unknown case '{case_id}': known: {known}")

    def select(self, kind: str | None = None, case_id: str | None = None) -> list[Case]:
        cases = self.cases
        if kind:
            cases = [c for c in cases if c.kind == kind]
        if case_id:
            cases = [c for c in cases if c.id == case_id]
        return cases

    def citation(self, case: Case, source: str) -> str:
        """The full citation of a source string's key."""
        run = next(r for r in self.runs if r.id == case.run)
        key = max((k for k in run.sources if source.startswith(k)), key=len)
        return run.sources[key]


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader on libyaml's parser where the wheel has it (the same objects: the constructor is the
safe one either way; about 9x faster on evals/runs, parsed by every eval and many tests)."""


def load_run(path: Path) -> RunFile:
    data = yaml.load(path.read_text(), Loader=_YAML_LOADER)
    marked = [c.get("id") for c in data.get("cases", []) if isinstance(c, dict) and "used_for_calibration" in c]
    if marked:
        raise ValueError(f"{path.name}: case {marked[0]} sets used_for_calibration: the calibration table "
                         "(tools/core/calibration.py) says which cases a constant was fitted on")
    run = RunFile.model_validate(data)
    if run.id != path.stem:
        raise ValueError(f"{path.name}: id '{run.id}' must equal the file stem '{path.stem}'")
    fitted = fitted_case_ids()
    for case in run.cases:
        case.run = run.id
        case.run_dir = str(path.parent)
        case.used_for_calibration = case.id in fitted
    return run


def load_dataset(directory: Path | None = None) -> Dataset:
    """Every evals/runs/*.yaml file; case ids must be unique."""
    directory = directory or RUNS_DIR
    runs = [load_run(p) for p in sorted(directory.glob("*.yaml"))]
    seen: set[str] = set()
    for run in runs:
        for case in run.cases:
            if case.id in seen:
                raise ValueError(f"case id '{case.id}' appears twice (run {run.id})")
            seen.add(case.id)
    dataset = Dataset(runs=runs)
    for case in dataset.cases:
        if case.reference_case:
            dataset.case(case.reference_case)
    return dataset


def calibration_unknown_cases(dataset: Dataset) -> list[str]:
    """Case ids the calibration table names (fitted on or held out) that no run file defines."""
    from .vtrain import CASE_GROUPS

    known = {case.id for case in dataset.cases} | set(CASE_GROUPS)
    return sorted(named_case_ids() - known)
