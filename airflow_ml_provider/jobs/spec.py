"""TrainingJobSpec: one backend-neutral description of a distributed training job."""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A program name never contains these; their presence means a shell string was passed as argv[0].
_SHELL_SYNTAX = re.compile(r"[\s;&|`$<>(){}]")


class Framework(str, Enum):
    """How the workers of a job find each other."""

    HOROVOD = "horovod"  # horovodrun / MPI: one launcher, ring-allreduce between ranks
    LIGHTGBM = "lightgbm"  # LightGBM sockets: each worker is told the full machine list
    GENERIC = "generic"  # N independent ranks with RANK/NUM_WORKERS in their environment


class Resources(BaseModel):
    """Per-worker resource requests."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: Annotated[float, Field(gt=0)] | None = None
    memory: Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$")] | None = None
    gpu: Annotated[int, Field(ge=0)] = 0


class SpecError(ValueError):
    """A TrainingJobSpec field is invalid; the message names the field and the value."""


class TrainingJobSpec(BaseModel):
    """What to run, how many workers, where, with which resources; validated on construction.

    ``image`` is the job's runtime environment: a container image on Kubernetes backends; on the
    local backend, the prefix of a Python environment (a virtualenv) whose ``bin`` comes first on
    the workers' PATH, so ``["python", ...]`` and ``horovodrun`` resolve there.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    framework: Framework
    command: list[str] = Field(min_length=1)
    num_workers: int = Field(ge=1)
    image: str | None = None
    resources: Resources = Resources()
    env: dict[str, str] = Field(default_factory=dict)
    working_dir: str | None = None
    checkpoint_dir: str | None = None
    model_dir: str | None = None
    min_workers: Annotated[int, Field(ge=1)] | None = None
    max_workers: Annotated[int, Field(ge=1)] | None = None

    def __init__(self, **data):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise SpecError(_describe(exc)) from None

    @field_validator("command", mode="before")
    @classmethod
    def _argv_only(cls, value):
        if isinstance(value, str):
            raise ValueError("must be an argv list such as ['python', 'train.py'], not a shell string")
        return value

    @field_validator("command")
    @classmethod
    def _program_is_not_shell(cls, value: list[str]) -> list[str]:
        if not value[0]:
            raise ValueError("the program (first element) is empty")
        if _SHELL_SYNTAX.search(value[0]):
            raise ValueError(
                f"the program {value[0]!r} contains shell syntax; commands are argv lists and never "
                "run through a shell: split it into separate elements"
            )
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
        return value

    @model_validator(mode="after")
    def _elastic_bounds(self) -> TrainingJobSpec:
        low, high = self.min_workers or self.num_workers, self.max_workers or self.num_workers
        if not low <= self.num_workers <= high:
            raise ValueError(
                f"min_workers ({low}) <= num_workers ({self.num_workers}) <= max_workers ({high}) must hold"
            )
        return self

    @property
    def elastic(self) -> bool:
        return self.min_workers is not None or self.max_workers is not None


def _describe(exc: ValidationError) -> str:
    """One line per error, each naming the field path and the offending value."""
    lines = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "spec"
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"TrainingJobSpec.{field}: {message} (got {error.get('input')!r})")
    return "; ".join(lines)
