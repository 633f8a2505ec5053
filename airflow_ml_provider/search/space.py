"""Search spaces and settings, validated on construction, and the Optuna sampler and pruner they select.

Validation needs no Optuna: DAG files that build a search parse without importing it; only choosing
the sampler and pruner (when the search runs) does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from airflow_ml_provider.logs.rules import LogRules

if TYPE_CHECKING:
    import optuna

PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
METRIC_NAME = r"^[A-Za-z_][A-Za-z0-9_./-]{0,99}$"  # as MLflow accepts, and short
GRID_LIMIT = 100_000  # a grid is enumerated up front; beyond this, use a sampler that does not need to
MAX_PARALLEL = 16  # trial jobs at once per search, unless configured ([ml_training] search_max_parallel)
MAX_TRIALS = 10_000  # trials per search, unless configured ([ml_training] search_max_trials)


class SearchSpaceError(ValueError):
    """A search space or setting is invalid; the message names the field and the value."""


class _Param(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FloatParam(_Param):
    """A real-valued parameter; ``log`` samples on a log scale, ``step`` makes it discrete."""

    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _bounds(self) -> FloatParam:
        _check_bounds(self.low, self.high, self.log)
        if self.log and self.step is not None:
            raise ValueError("log and step cannot be combined")
        return self

    def grid(self) -> list[float] | None:
        if self.step is None:
            return None
        count = math.floor((self.high - self.low) / self.step + 1e-9) + 1
        return [round(self.low + i * self.step, 12) for i in range(count)]

    def suggest(self, trial: optuna.Trial, name: str) -> float:
        return trial.suggest_float(name, self.low, self.high, step=self.step, log=self.log)


class IntParam(_Param):
    """An integer parameter from ``low`` to ``high`` inclusive."""

    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="after")
    def _bounds(self) -> IntParam:
        _check_bounds(self.low, self.high, self.log)
        if self.log and self.step != 1:
            raise ValueError("log and step cannot be combined")
        return self

    def grid(self) -> list[int]:
        return list(range(self.low, self.high + 1, self.step))

    def suggest(self, trial: optuna.Trial, name: str) -> int:
        return trial.suggest_int(name, self.low, self.high, step=self.step, log=self.log)


class CategoricalParam(_Param):
    """One of a list of values (a plain list in a search space is shorthand for this)."""

    type: Literal["categorical"]
    choices: list[None | bool | int | float | str] = Field(min_length=1)

    @field_validator("choices")
    @classmethod
    def _distinct(cls, value: list) -> list:
        seen = [repr(choice) for choice in value]
        if len(set(seen)) != len(seen):
            raise ValueError("must be distinct")
        return value

    def grid(self) -> list:
        return list(self.choices)

    def suggest(self, trial: optuna.Trial, name: str) -> Any:
        return trial.suggest_categorical(name, self.choices)


Param = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]
_TAGS = ("float", "int", "categorical")


def _check_bounds(low: float, high: float, log: bool) -> None:
    if not low < high:
        raise ValueError(f"low ({low}) must be below high ({high})")
    if log and low <= 0:
        raise ValueError(f"a log scale needs low > 0, got {low}")


class SearchSpace(RootModel[dict[str, Param]]):
    """Parameter name -> distribution, e.g. ``{"learning_rate": {"type": "float", "low": 0.01, "high": 0.3,
    "log": True}, "num_leaves": {"type": "int", "low": 8, "high": 64}, "boosting": ["gbdt", "dart"]}``."""

    model_config = ConfigDict(frozen=True)

    @field_validator("root", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {name: {"type": "categorical", "choices": spec} if isinstance(spec, list) else spec
                for name, spec in value.items()}

    @field_validator("root")
    @classmethod
    def _names(cls, value: dict[str, Param]) -> dict[str, Param]:
        if not value:
            raise ValueError("declares no parameters")
        for name in value:
            if not PARAM_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid parameter name (letters, digits, underscores)")
        return value

    @property
    def params(self) -> dict[str, Param]:
        return self.root

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Ask the trial's sampler for one value of every parameter."""
        return {name: param.suggest(trial, name) for name, param in self.root.items()}

    def grid(self) -> dict[str, list]:
        """Every parameter's finite list of values, for the grid sampler."""
        grid = {}
        for name, param in self.root.items():
            values = param.grid()
            if values is None:
                raise SearchSpaceError(
                    f"search_space.{name}: the grid sampler needs finite values: give the float a step, "
                    f"or list the values (got {param.model_dump()!r})"
                )
            grid[name] = values
        size = math.prod(len(values) for values in grid.values())
        if size > GRID_LIMIT:
            raise SearchSpaceError(f"search_space: the grid has {size} combinations, more than {GRID_LIMIT}; "
                                   "use the tpe or random sampler")
        return grid


def parse_space(value: Any) -> SearchSpace:
    """Validate a search space; raises SearchSpaceError naming ``search_space.<parameter>.<field>``."""
    if isinstance(value, SearchSpace):
        return value
    try:
        return SearchSpace.model_validate(value)
    except ValidationError as exc:
        raise SearchSpaceError(_describe(exc, "search_space")) from None


class SearchSettings(BaseModel):
    """How the search runs: which sampler, how many trials, how many at once, what it optimizes.

    ``n_trials`` counts every trial that reached a verdict (completed, pruned or failed); for the grid
    sampler it defaults to the whole grid. ``metric_patterns`` also read the objective from plain log
    lines: metric regexes as in :class:`~airflow_ml_provider.logs.rules.LogRules`, one with a group named
    after the objective (``val_auc=(?P<auc>[0-9.]+)``) and optionally a ``step`` group. Pruning (median-stop) compares a trial's objective at each step with the median of the
    completed trials at the same step, once ``pruning_startup_trials`` have completed and after
    ``pruning_warmup_steps`` steps. ``hyperband`` (Optuna's HyperbandPruner) and ``successive_halving``
    instead stop trials by rungs of reported steps (the first after ``max(1, pruning_warmup_steps)``
    steps, then every 3x more), keeping the best third at each rung.

    Samplers: ``tpe`` (Bayesian, Optuna's default), ``random``, ``grid``, and ``cmaes`` (Optuna's CMA-ES,
    for float/int parameters; categorical ones are drawn at random). Optuna's Gaussian-process sampler
    is not offered: it needs PyTorch, which the control environment does not carry.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    sampler: Literal["tpe", "random", "grid", "cmaes"] = "tpe"
    n_trials: Annotated[int, Field(ge=1)] | None = Field(default=None, validate_default=True)
    max_parallel: Annotated[int, Field(ge=1)] = 1
    objective_metric: Annotated[str, Field(pattern=METRIC_NAME)] = "auc"
    direction: Literal["maximize", "minimize"] = "maximize"
    seed: int | None = None
    pruner: Literal["median", "hyperband", "successive_halving", "none"] = "median"
    pruning_startup_trials: Annotated[int, Field(ge=0)] = 3
    pruning_warmup_steps: Annotated[int, Field(ge=0)] = 0
    metric_patterns: list[str] | None = None
    poll_interval: Annotated[float, Field(gt=0)] = 1.0

    @field_validator("metric_patterns")
    @classmethod
    def _patterns(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if not value:
            return None
        LogRules(metrics=value)  # raises ValueError naming the pattern's index
        metric = info.data.get("objective_metric")
        if metric and not any(metric in re.compile(pattern).groupindex for pattern in value):
            raise ValueError(f"no pattern has a group named after the objective, e.g. (?P<{metric}>[0-9.]+)")
        return value

    @field_validator("n_trials")
    @classmethod
    def _budget(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None and info.data.get("sampler", "grid") != "grid":
            raise ValueError(f"required for the {info.data['sampler']} sampler")
        return value


def parse_settings(**values: Any) -> SearchSettings:
    """Validate search settings; raises SearchSpaceError naming the setting."""
    try:
        return SearchSettings(**values)
    except ValidationError as exc:
        raise SearchSpaceError(_describe(exc, "search")) from None


def trial_budget(settings: SearchSettings, space: SearchSpace) -> int:
    """How many trials the search runs; a grid is never asked for more points than it has."""
    if settings.sampler != "grid":
        return settings.n_trials
    size = math.prod(len(values) for values in space.grid().values())
    if settings.n_trials is not None and settings.n_trials > size:
        raise SearchSpaceError(f"n_trials: {settings.n_trials} exceeds the grid's {size} combinations")
    return settings.n_trials or size


def check_budget(settings: SearchSettings, space: SearchSpace, max_parallel: int = MAX_PARALLEL,
                 max_trials: int = MAX_TRIALS, configured_as: str = "") -> None:
    """Bound what one search creates: trial jobs at once and trials in all (a grid's default budget is its
    size). Raises SearchSpaceError naming the setting, the bound and (``configured_as``: a prefix such as
    ``[ml_training] search_``) where the bound is set."""
    where = f" ({configured_as}max_parallel)" if configured_as else ""
    if settings.max_parallel > max_parallel:
        raise SearchSpaceError(f"max_parallel: {settings.max_parallel} trial jobs at once is more than the "
                               f"{max_parallel} allowed per search{where}")
    where = f" ({configured_as}max_trials)" if configured_as else ""
    if settings.sampler == "grid" and settings.n_trials is None:
        size = math.prod(len(values) for values in space.grid().values())
        if size > max_trials:
            raise SearchSpaceError(f"n_trials: the whole grid, {size} trials, is more than the {max_trials} "
                                   f"allowed per search{where}; set n_trials or use a smaller grid")
    elif settings.n_trials is not None and settings.n_trials > max_trials:
        raise SearchSpaceError(f"n_trials: {settings.n_trials} trials is more than the {max_trials} allowed "
                               f"per search{where}")


@cache
def _ask_tell_grid_sampler() -> type:
    import optuna

    class AskTellGridSampler(optuna.samplers.GridSampler):
        """GridSampler calls ``study.stop()`` after the last grid point, which raises outside ``optimize()``
        (optuna/optuna#5141); the search loop bounds the trials by the grid size itself."""

        def after_trial(self, study, trial, state, values) -> None:
            return None

    return AskTellGridSampler


def make_sampler(settings: SearchSettings, space: SearchSpace, trials_so_far: int) -> optuna.samplers.BaseSampler:
    """The sampler for one session of the search. A resumed session offsets the seed by the trials already
    run, so a random sampler does not replay the parameters it proposed before the restart."""
    import optuna

    seed = None if settings.seed is None else settings.seed + trials_so_far
    if settings.sampler == "grid":
        return _ask_tell_grid_sampler()(space.grid(), seed=settings.seed)
    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if settings.sampler == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=min(10, max(2, settings.n_trials // 4)),
                                            warn_independent_sampling=False)
    budget = settings.n_trials
    # Optuna's default of 10 random start-up trials would leave a small budget almost entirely random.
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=settings.max_parallel > 1,
                                      n_startup_trials=min(10, max(2, budget // 4)))


def make_pruner(settings: SearchSettings) -> optuna.pruners.BasePruner:
    import optuna

    if settings.pruner == "none":
        return optuna.pruners.NopPruner()
    first_rung = max(1, settings.pruning_warmup_steps)
    if settings.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=first_rung, reduction_factor=3)
    if settings.pruner == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=first_rung, reduction_factor=3,
                                                      min_early_stopping_rate=0)
    return optuna.pruners.MedianPruner(n_startup_trials=settings.pruning_startup_trials,
                                       n_warmup_steps=settings.pruning_warmup_steps)


def _describe(exc: ValidationError, prefix: str) -> str:
    """One line per error, each naming the field path (without pydantic's union tags) and the value."""
    lines = []
    for error in exc.errors():
        loc: Sequence = error["loc"]
        if prefix == "search_space" and len(loc) > 1 and loc[1] in _TAGS:
            loc = (loc[0], *loc[2:])
        field = ".".join(str(part) for part in loc)
        message = error["msg"].removeprefix("Value error, ")
        path = f"{prefix}.{field}" if field else prefix
        lines.append(f"{path}: {message} (got {error.get('input')!r})")
    return "; ".join(lines)
