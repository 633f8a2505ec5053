"""The recipe schema: a pipeline of experiments (DAG nodes), each a parameterized distributed job.

Field-level rules live here as pydantic models, so every error carries the location (``loc``) of
the offending field; rules that span fields (placeholders, dependencies) are in ``loader.py``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from airflow_ml_provider.artifact_layout import RUN_DIR
from airflow_ml_provider.jobs.backends import BACKENDS
from airflow_ml_provider.jobs.spec import Framework, Placement, Resources
from airflow_ml_provider.patterns import CONTROL_CHARACTER
from airflow_ml_provider.recipes.argv import ArgvTemplate, placeholders
from airflow_ml_provider.recipes.env import env_name_problem
from airflow_ml_provider.recipes.experiment_space import Range, Scalar, product_size, sample_space

MAX_SAMPLES = 10_000
MAX_WORKERS = 512
DAG_ID_PREFIX = "recipe_"  # every recipe DAG id: recipes never take the id of another DAG file
INVALID_DAG_ID_PREFIX = "invalid_recipe_"  # the placeholder DAG of a recipe file that does not load
BUILTINS = ("sample", "experiment", "run_dir")  # placeholders every command may use besides its parameters
PARAMS_PREFIX = "params."  # {{params.<name>}}: a recipe Param's value, filled in when the trial runs
MAX_PARAMS = 32


def _matching(pattern: str, what: str):
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"is not a valid {what} (allowed: {pattern})")
        return value

    return AfterValidator(check)


def _scalar(value: Any) -> Scalar:
    if not isinstance(value, str | int | float | bool):
        raise ValueError(f"must be a string, number or boolean, not {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _unique(values: list) -> list:
    first: dict[tuple[str, Any], int] = {}
    repeated = []
    for index, value in enumerate(values):
        key = (type(value).__name__, value)
        if key in first:
            repeated.append(f"[{index}] repeats [{first[key]}]")
        first.setdefault(key, index)
    if repeated:
        raise ValueError(f"values must be distinct: {', '.join(repeated)}")
    return values


ExperimentName = Annotated[str, _matching(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,62}", "experiment name")]
ParameterName = Annotated[str, _matching(r"[A-Za-z_][A-Za-z0-9_]{0,62}", "parameter name")]
DagId = Annotated[str, _matching(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}", "recipe name (the DAG id is recipe_<name>)")]
def _settable(name: str) -> str:
    if problem := env_name_problem(name):
        raise ValueError(problem)
    return name


EnvName = Annotated[str, _matching(r"[A-Za-z_][A-Za-z0-9_]*", "environment variable name"), AfterValidator(_settable)]
Number = Annotated[float, BeforeValidator(_number)]
Text = Annotated[str, Field(strict=True, min_length=1)]
Values = Annotated[
    list[Annotated[Any, AfterValidator(_scalar)]], Field(min_length=1), AfterValidator(_unique)
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RangeSpec(_Strict):
    """A continuous parameter: ``{min, max, scale: linear|log, sampling: random|grid, type: float|int}``."""

    min: Number
    max: Number
    scale: Literal["linear", "log"] = "linear"
    sampling: Literal["random", "grid"] = "random"
    type: Literal["float", "int"] = "float"

    @model_validator(mode="before")
    @classmethod
    def _integer_bounds_mean_int(cls, data: Any) -> Any:
        if isinstance(data, dict) and "type" not in data and all(
            isinstance(data.get(k), int) and not isinstance(data.get(k), bool) for k in ("min", "max")
        ):
            return {**data, "type": "int"}
        return data

    @model_validator(mode="after")
    def _bounds(self) -> RangeSpec:
        if not self.min < self.max:
            raise ValueError(f"min ({self.min:g}) must be below max ({self.max:g})")
        if self.scale == "log" and self.min <= 0:
            raise ValueError(f"a log scale needs min > 0 (got {self.min:g})")
        if self.type == "int" and not (self.min.is_integer() and self.max.is_integer()):
            raise ValueError("an int range needs integer min and max")
        return self

    def as_range(self) -> Range:
        low, high = (int(self.min), int(self.max)) if self.type == "int" else (self.min, self.max)
        return Range(low, high, self.scale, self.sampling, integer=self.type == "int")


def _parameter_kind(value: Any) -> str:
    return "range" if isinstance(value, dict | RangeSpec) else "values"


def _single_value_is_a_list(value: Any) -> Any:
    return value if isinstance(value, list | dict | RangeSpec) else [value]


Parameter = Annotated[
    Annotated[Values, Tag("values")] | Annotated[RangeSpec, Tag("range")],
    Discriminator(_parameter_kind),
    BeforeValidator(_single_value_is_a_list),
]


class Gpu(_Strict):
    type: Annotated[str, _matching(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", "GPU type")] | None = None
    count: Annotated[int, Field(strict=True, ge=0, le=16)] = 1


class Hardware(_Strict):
    """Per-worker resources; ``gpu.type`` selects the accelerator model on Kubernetes backends."""

    cpu: Annotated[float, BeforeValidator(_number), Field(gt=0)] | None = None
    memory: Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$")] | None = None
    gpu: Gpu | None = None

    def resources(self) -> Resources:
        gpu = self.gpu or Gpu(count=0)
        return Resources(cpu=self.cpu, memory=self.memory, gpu=gpu.count, gpu_type=gpu.type)


class Search(_Strict):
    """Trials chosen by an Optuna sampler as earlier ones finish, instead of sampled up front."""

    sampler: Literal["tpe", "random", "grid"] = "tpe"
    objective: Annotated[str, _matching(r"[A-Za-z_][A-Za-z0-9_./-]{0,99}", "metric name")] = "auc"
    direction: Literal["maximize", "minimize"] = "maximize"
    pruner: Literal["median", "none"] = "median"


class Best(_Strict):
    """How a mapped experiment's best trial is chosen: the metric its jobs report, and which way is better."""

    metric: Annotated[str, _matching(r"[A-Za-z_][A-Za-z0-9_./-]{0,99}", "metric name")]
    direction: Literal["maximize", "minimize"]


_PARAM_TYPES = {"integer": (int,), "number": (int, float), "string": (str,), "boolean": (bool,)}


class RecipeParam(_Strict):
    """A value a person may change in the recipe DAG's trigger form (``{{params.<name>}}`` in a command):
    typed and bounded here, checked again by the server and the first task, and passed as one argv element."""

    type: Literal["integer", "number", "string", "boolean"]
    default: Annotated[Any, AfterValidator(_scalar)]
    title: Annotated[str, Field(strict=True, min_length=1, max_length=60)] | None = None
    description: Annotated[str, Field(strict=True, max_length=500)] = ""
    minimum: Number | None = None
    maximum: Number | None = None
    enum: Values | None = None
    max_length: Annotated[int, Field(strict=True, ge=1, le=1000)] = 200

    @model_validator(mode="after")
    def _consistent(self) -> RecipeParam:
        numeric = self.type in ("integer", "number")
        if (self.minimum is None) != (self.maximum is None):
            raise ValueError("minimum and maximum go together")
        if not numeric and (self.minimum is not None or self.maximum is not None):
            raise ValueError(f"minimum/maximum bound numbers, not a {self.type}")
        if numeric and self.enum is None and (self.minimum is None or self.maximum is None):
            raise ValueError(f"a{'n' if self.type == 'integer' else ''} {self.type} Param needs minimum and "
                             "maximum (or enum): a form value is never unbounded")
        if numeric and self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
            raise ValueError(f"minimum ({self.minimum:g}) must not be above maximum ({self.maximum:g})")
        if self.type == "integer" and any(b is not None and not float(b).is_integer() for b in (self.minimum, self.maximum)):
            raise ValueError("an integer Param needs whole-number minimum and maximum")
        if self.type == "boolean" and self.enum is not None:
            raise ValueError("a boolean Param takes no enum")
        for where, value in [("default", self.default), *((f"enum[{i}]", v) for i, v in enumerate(self.enum or []))]:
            if problem := self.problem(value):
                raise ValueError(f"{where}: {problem}")
        return self

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not one this Param takes (None: it is)."""
        if isinstance(value, bool) != (self.type == "boolean") or not isinstance(value, _PARAM_TYPES[self.type]):
            return f"is not a{'n' if self.type == 'integer' else ''} {self.type}"
        if isinstance(value, str) and (len(value) > self.max_length or CONTROL_CHARACTER.search(value)):
            return f"must be at most {self.max_length} characters, with no control character"
        if self.minimum is not None and value < self.minimum or self.maximum is not None and value > self.maximum:
            return f"must be from {self.minimum:g} to {self.maximum:g}"
        if self.enum is not None and value not in self.enum:
            return "is not one of enum"
        return None


@dataclass(frozen=True)
class Trial:
    """One sample of an experiment: its parameter values and the argv they produce."""

    index: int
    params: dict[str, Scalar]
    argv: list[str]


class Experiment(_Strict):
    """One DAG node: ``samples`` trials of ``command``, each a job of ``workers`` workers."""

    framework: Framework | None = None
    image: Text | None = None
    command: Annotated[list[Annotated[str, Field(strict=True)]], Field(min_length=1)]
    parameters: dict[ParameterName, Parameter] = Field(default_factory=dict)
    samples: Annotated[int, Field(strict=True, ge=1, le=MAX_SAMPLES)] | None = None
    workers: Annotated[int, Field(strict=True, ge=1, le=MAX_WORKERS)] = 1
    parallel: Annotated[int, Field(strict=True, ge=1)] | None = None
    hardware: Hardware = Hardware()
    kubernetes: Placement = Placement()
    env: dict[EnvName, Annotated[str, Field(strict=True)]] = Field(default_factory=dict)
    depends_on: list[ExperimentName] = Field(default_factory=list)
    retries: Annotated[int, Field(strict=True, ge=0, le=10)] = 0
    backend: Literal[tuple(BACKENDS)] | None = None  # type: ignore[valid-type]
    search: Search | None = None
    best: Best | None = None

    @field_validator("command", mode="before")
    @classmethod
    def _command_is_argv(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError(
                "must be an argv list, one element per argument (e.g. [python, train.py, --lr, '{{lr}}']), "
                "not a shell string: commands never run through a shell"
            )
        return value

    @model_validator(mode="after")
    def _framework_or_image(self) -> Experiment:
        if self.framework is None and self.image is None:
            raise ValueError("an experiment needs a framework (horovod, lightgbm, generic) or an image")
        return self

    @model_validator(mode="after")
    def _search_budget(self) -> Experiment:
        if self.search and self.search.sampler != "grid" and self.samples is None:
            raise ValueError(f"samples: a {self.search.sampler} search needs a trial budget")
        if self.search and any("sample" in placeholders(argument) for argument in self.command):
            raise ValueError("command: {{sample}} is not known before a search runs its trials")
        if self.search and any("run_dir" in placeholders(argument) for argument in self.command):
            raise ValueError("command: {{run_dir}} is given to mapped trials only, not to a search's")
        if self.search and self.best:
            raise ValueError("best: a search reports its best trial itself (by search.objective)")
        return self

    @property
    def job_framework(self) -> Framework:
        return self.framework or Framework.GENERIC

    @property
    def num_samples(self) -> int:
        """``samples``, else one trial per combination of the discrete values."""
        discrete = {name: spec for name, spec in self.parameters.items() if isinstance(spec, list)}
        return self.samples or product_size(discrete)

    def trials(self, name: str, seed: int | str) -> list[Trial]:
        discrete = {n: spec for n, spec in self.parameters.items() if isinstance(spec, list)}
        ranges = {n: spec.as_range() for n, spec in self.parameters.items() if isinstance(spec, RangeSpec)}
        assignments = sample_space(discrete, ranges, self.num_samples, seed)
        template = ArgvTemplate(self.command)
        kept = {ref: "{{" + ref + "}}" for argument in self.command for ref in placeholders(argument)
                if ref.startswith(PARAMS_PREFIX)}  # filled in when the trial runs, with the run's Param values
        return [
            Trial(i, params, template.render({**params, **kept, "sample": i, "experiment": name, "run_dir": RUN_DIR}))
            for i, params in enumerate(assignments)
        ]


class Recipe(_Strict):
    """A whole pipeline: ``experiments`` keyed by name, run in ``depends_on`` order."""

    version: Literal[1]
    name: DagId
    description: Annotated[str, Field(strict=True)] = ""
    tags: list[Annotated[str, Field(strict=True, min_length=1, max_length=100)]] = Field(default_factory=list)
    schedule: Annotated[str, Field(pattern=r"^(@[a-z]+|(\S+\s+){4}\S+)$")] | None = None
    seed: Annotated[int, Field(strict=True)] = 0
    backend: Literal[tuple(BACKENDS)] | None = None  # type: ignore[valid-type]
    params: dict[ParameterName, RecipeParam] = Field(default_factory=dict, max_length=MAX_PARAMS)
    experiments: Annotated[dict[ExperimentName, Experiment], Field(min_length=1)]

    @property
    def num_jobs(self) -> int:
        """Every experiment's trials (a search's trial budget included): the jobs one run may create."""
        return sum(experiment.num_samples for experiment in self.experiments.values())

    @property
    def dag_id(self) -> str:
        """``recipe_<name>``: recipe DAGs live in their own namespace, apart from DAG files' ids."""
        return DAG_ID_PREFIX + self.name

    def trials(self, name: str) -> list[Trial]:
        """The experiment's trials; seeded by recipe seed and experiment name, so they never change."""
        return self.experiments[name].trials(name, f"{self.seed}/{name}")
