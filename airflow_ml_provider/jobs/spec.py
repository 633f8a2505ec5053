"""TrainingJobSpec: one backend-neutral description of a distributed training job."""

from __future__ import annotations

import posixpath
import re
from enum import Enum
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from airflow_ml_provider.jobs import roles as job_roles
from airflow_ml_provider.jobs.shards import ShardPlan
from airflow_ml_provider.patterns import DNS_LABEL

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A program name never contains these; their presence means a shell string was passed as argv[0].
_SHELL_SYNTAX = re.compile(r"[\s;&|`$<>(){}]")


class Framework(str, Enum):
    """How the workers of a job find each other."""

    HOROVOD = "horovod"  # horovodrun / MPI: one launcher, ring-allreduce between ranks
    LIGHTGBM = "lightgbm"  # LightGBM sockets: each worker is told the full machine list
    PYTORCH = "pytorch"  # torchrun (c10d rendezvous): one agent per worker, nproc_per_node ranks each
    XGBOOST = "xgboost"  # XGBoost's collective: a tracker started by the job, DMLC_* in every worker (jobs.xgboost)
    TENSORFLOW_PS = "tensorflow-ps"  # parameter servers: roles chief, ps, worker, TF_CONFIG in each (jobs.roles)
    GENERIC = "generic"  # N independent ranks with RANK/NUM_WORKERS in their environment


class Resources(BaseModel):
    """Per-worker resource requests."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: Annotated[float, Field(gt=0)] | None = None
    memory: Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$")] | None = None
    gpu: Annotated[int, Field(ge=0)] = 0
    # The GPU model as the cluster labels its nodes, e.g. "Tesla-T4" or "NVIDIA-A100-SXM4-80GB" (NVIDIA GPU
    # Feature Discovery's values): a node selector on KubernetesOptions.gpu_product_label.
    gpu_type: str | None = None


DnsLabel = Annotated[str, Field(pattern=f"^{DNS_LABEL.pattern}$")]  # pydantic's regex: "$" is the very end
MAX_WORKERS = 4096  # beyond any cluster's gang; also bounds what rendering a manifest allocates


def _no_nul(value: str) -> str:
    if "\x00" in value:  # execve() cannot pass it: the argument or variable would be cut short or refused
        raise ValueError("contains a NUL character")
    return value


Text = Annotated[str, AfterValidator(_no_nul)]


def _env_name(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise ValueError(f"{name!r} is not a valid environment variable name")
    return name


EnvName = Annotated[str, AfterValidator(_env_name)]


class Scheduling(BaseModel):
    """Cluster scheduling: gang scheduling places all workers at once or none (Volcano, MPIJob)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    queue: str | None = None
    priority_class: str | None = None
    gang: bool = True


class SecretRef(BaseModel):
    """An environment variable taken from a Kubernetes Secret: the value never passes through Airflow."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    secret: DnsLabel
    key: Annotated[str, Field(min_length=1)]


class Volume(BaseModel):
    """Data or checkpoints mounted into every worker, from a PersistentVolumeClaim or a host path."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: DnsLabel
    mount_path: Annotated[str, Field(pattern=r"^/")]
    claim: str | None = None
    host_path: Annotated[str, Field(pattern=r"^/")] | None = None
    read_only: bool = False

    @model_validator(mode="after")
    def _one_source(self) -> Volume:
        if (self.claim is None) == (self.host_path is None):
            raise ValueError(f"volume {self.name!r} needs exactly one of claim or host_path")
        return self


# A node label's key (an optional DNS-subdomain prefix and a name) and value, as Kubernetes checks them:
# what a spot pool's node selector and taint tolerations name (e.g. cloud.google.com/gke-spot: "true").
LabelKey = Annotated[str, Field(pattern=r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")]
LabelValue = Annotated[str, Field(pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")]


MAX_NODE_SELECTOR = 32  # labels a job's pods may require of their node
MAX_TOLERATIONS = 32  # taints they may tolerate
MAX_TOLERATION_S = 7 * 24 * 3600


class Toleration(BaseModel):
    """A taint the job's pods tolerate (a spot pool's, e.g.), checked as Kubernetes checks one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: LabelKey | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    # how long a pod stays on a node that gets the NoExecute taint (e.g. unreachable); rendered tolerationSeconds
    toleration_seconds: Annotated[int | None, Field(ge=0, le=MAX_TOLERATION_S, serialization_alias="tolerationSeconds")] = None

    @model_validator(mode="after")
    def _as_kubernetes_checks_it(self) -> Toleration:
        if not self.key and self.operator != "Exists":
            raise ValueError("operator: a toleration without a key must use 'Exists' (it tolerates every taint)")
        if self.operator == "Exists" and self.value:
            raise ValueError("value: a toleration with operator 'Exists' takes no value")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("toleration_seconds: only for effect 'NoExecute'")
        return self


class Placement(BaseModel):
    """Which nodes a job's pods may run on, e.g. a spot pool: the nodes' labels they require and the taints
    they tolerate (Kubernetes backends; the local backend ignores it). What a recipe or a DAG's Params may
    choose of the pods; nothing else of them (service account, volumes, Secrets) is theirs to choose."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=MAX_NODE_SELECTOR)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=MAX_TOLERATIONS)

    def options(self) -> KubernetesOptions:
        return KubernetesOptions(node_selector=self.node_selector, tolerations=self.tolerations)


class KubernetesOptions(BaseModel):
    """Pod-level settings the Kubernetes backends render; the local backend ignores them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=MAX_NODE_SELECTOR)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=MAX_TOLERATIONS)
    image_pull_secrets: list[str] = Field(default_factory=list)
    service_account: str | None = None
    secret_env: dict[EnvName, SecretRef] = Field(default_factory=dict)
    volumes: list[Volume] = Field(default_factory=list)
    backoff_limit: Annotated[int, Field(ge=0)] = 0
    active_deadline_seconds: Annotated[int, Field(gt=0)] | None = None
    clean_pod_policy: Literal["None", "Running", "All"] = "Running"
    slots_per_worker: Annotated[int, Field(ge=1)] = 1
    worker_port: Annotated[int, Field(ge=1024, le=65535)] = 12400  # LightGBM's listen port on every pod
    # The node label that carries the GPU model: GPU Feature Discovery's by default; on GKE, for example,
    # "cloud.google.com/gke-accelerator" (values like "nvidia-tesla-t4").
    gpu_product_label: Annotated[str, Field(pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")] = "nvidia.com/gpu.product"
    # The Pod Security Standard every pod of the job passes (docs/cluster.md, "Pod security"): "baseline" (the
    # default: no host access, seccomp RuntimeDefault, no privilege escalation), "restricted" (also non-root as
    # run_as_user, every capability dropped; refused where the pods need root: the sshd of MPIJob and Volcano
    # Horovod workers), or "privileged" (no securityContext at all; the only level that allows hostPath volumes).
    pod_security: Literal["privileged", "baseline", "restricted"] = "baseline"
    # The uid (and gid and fsGroup) the containers of a "restricted" job run as: the training image's own user
    # (images/training/Dockerfile, USER 1000) by default.
    run_as_user: Annotated[int, Field(ge=1, le=2**31 - 1)] = 1000


def _argv_list(value):
    if isinstance(value, str):
        raise ValueError("must be an argv list such as ['python', 'train.py'], not a shell string")
    return value


def _plain_program(value: list[str]) -> list[str]:
    if not value[0]:
        raise ValueError("the program (first element) is empty")
    if _SHELL_SYNTAX.search(value[0]):
        raise ValueError(
            f"the program {value[0]!r} contains shell syntax; commands are argv lists and never "
            "run through a shell: split it into separate elements"
        )
    return value


class Role(BaseModel):
    """One replica group of a job of several roles (jobs.roles); ``command``, ``image`` and ``resources``
    default to the job's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: Annotated[int, Field(ge=1, le=MAX_WORKERS)] = 1
    min_count: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | None = None  # elastic: tolerated down to this
    max_count: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | None = None  # elastic: a backend may grow to this
    command: Annotated[list[Text], BeforeValidator(_argv_list), Field(min_length=1),
                       AfterValidator(_plain_program)] | None = None
    image: Text | None = None
    resources: Resources | None = None
    on_failure: job_roles.OnFailure | None = None  # None: the role's default (jobs.roles.DEFAULT_POLICY)
    priority_class: DnsLabel | None = None  # where a backend can give a role a priority of its own

    @model_validator(mode="after")
    def _bounds(self) -> Role:
        low, high = self.min_count or self.count, self.max_count or self.count
        if not low <= self.count <= high:
            raise ValueError(f"min_count ({low}) <= count ({self.count}) <= max_count ({high}) must hold")
        return self

    @property
    def elastic(self) -> bool:
        return self.min_count is not None or self.max_count is not None


class SpecError(ValueError):
    """A TrainingJobSpec field is invalid; the message names the field and the value."""


class TrainingJobSpec(BaseModel):
    """What to run, how many workers, where, with which resources; validated on construction.

    ``image`` is the job's runtime environment: a container image on Kubernetes backends; on the
    local backend, the prefix of a Python environment (a virtualenv) whose ``bin`` comes first on
    the workers' PATH, so ``["python", ...]`` and ``horovodrun`` resolve there.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    framework: Framework
    command: list[Text] = Field(min_length=1)
    num_workers: int = Field(ge=1, le=MAX_WORKERS)  # a job of roles: its processes, all roles together
    image: Text | None = None
    resources: Resources = Resources()
    env: dict[EnvName, Text] = Field(default_factory=dict)
    # Absolute, and only characters a shell takes literally: horovodrun's ssh launcher runs `cd {working_dir}` unquoted.
    working_dir: Annotated[str, Field(pattern=r"^/[A-Za-z0-9_@%+=:,./-]*$")] | None = None
    checkpoint_dir: Text | None = None
    model_dir: Text | None = None
    # Files or directories the job only reads that live in another job's directory (an upstream task's
    # model): the local backend's sandbox shows them read-only; pods reach the artifact root themselves.
    inputs: list[Annotated[str, AfterValidator(_no_nul), Field(pattern=r"^(/|[a-z][a-z0-9+.-]*://)")]] = Field(
        default_factory=list)
    # Directories the job writes besides its own (a preprocessing shard's output folder): the local backend's
    # sandbox makes them writable (under its root's data/ only).
    output_dirs: list[Annotated[str, AfterValidator(_no_nul), Field(pattern=r"^(/|[a-z][a-z0-9+.-]*://)")]] = Field(
        default_factory=list)
    # PyTorch only: processes (ranks) torchrun starts on each worker, e.g. one per GPU of a node.
    nproc_per_node: Annotated[int, Field(ge=1, le=256)] = 1
    min_workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | None = None
    max_workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | None = None
    # Wall-clock limit of one attempt, in seconds: the local launcher stops the job when it passes,
    # the Kubernetes backends render it as activeDeadlineSeconds.
    timeout_s: Annotated[int, Field(gt=0)] | None = None
    scheduling: Scheduling = Scheduling()
    kubernetes: KubernetesOptions = KubernetesOptions()
    # A sharded job (jobs.shards): its workers take the plan's shards one after another, each committed once
    shards: ShardPlan | None = None
    # A job of several roles (jobs.roles), e.g. {"chief": {}, "ps": {"count": 2}, "worker": {"count": 4}}
    roles: dict[DnsLabel, Role] | None = Field(default=None, min_length=1)

    def __init__(self, **data):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise SpecError(_describe(exc)) from None

    @field_validator("command", mode="before")
    @classmethod
    def _argv_only(cls, value):
        return _argv_list(value)

    @field_validator("command")
    @classmethod
    def _program_is_not_shell(cls, value: list[str]) -> list[str]:
        return _plain_program(value)

    @model_validator(mode="before")
    @classmethod
    def _roles_count_workers(cls, data):
        """A job of roles has as many workers as its roles have processes, unless it says otherwise."""
        if isinstance(data, dict) and isinstance(data.get("roles"), dict) and "num_workers" not in data:
            counts = [role.count if isinstance(role, Role) else role.get("count", 1) if isinstance(role, dict)
                      else 1 for role in data["roles"].values()]
            if all(isinstance(count, int) for count in counts):
                data = {**data, "num_workers": sum(counts)}
        return data

    @model_validator(mode="after")
    def _roles(self) -> TrainingJobSpec:
        if self.roles is None:
            if self.framework is Framework.TENSORFLOW_PS:
                raise ValueError("roles: a tensorflow-ps job needs roles chief, ps and worker")
            return self
        if self.framework is not Framework.TENSORFLOW_PS:
            raise ValueError(f"roles: only framework 'tensorflow-ps' runs jobs of several roles (got framework "
                             f"{self.framework.value!r})")
        if self.min_workers is not None or self.max_workers is not None:
            raise ValueError("min_workers/max_workers: a job of roles sets each role's min_count/max_count")
        if self.num_workers != (total := job_roles.process_count(self.roles)):
            raise ValueError(f"num_workers ({self.num_workers}) must be the roles' processes ({total}), or unset")
        job_roles.check_ps_roles(self.roles, self.command)
        return self

    @model_validator(mode="after")
    def _elastic_bounds(self) -> TrainingJobSpec:
        low, high = self.min_workers or self.num_workers, self.max_workers or self.num_workers
        if not low <= self.num_workers <= high:
            raise ValueError(
                f"min_workers ({low}) <= num_workers ({self.num_workers}) <= max_workers ({high}) must hold"
            )
        return self

    @model_validator(mode="after")
    def _nproc_is_torch(self) -> TrainingJobSpec:
        if self.nproc_per_node != 1 and self.framework is not Framework.PYTORCH:
            raise ValueError(f"nproc_per_node ({self.nproc_per_node}) applies to framework 'pytorch' only "
                             f"(got framework {self.framework.value!r})")
        return self

    @model_validator(mode="after")
    def _xgboost_is_fixed_size(self) -> TrainingJobSpec:
        if self.framework is Framework.XGBOOST and self.elastic:
            raise ValueError("min_workers/max_workers: an XGBoost job's tracker waits for a fixed number of workers "
                             "(DMLC_NUM_WORKER); elastic bounds need framework 'horovod' or 'pytorch'")
        return self

    @model_validator(mode="after")
    def _shards_are_generic(self) -> TrainingJobSpec:
        if self.shards is None:
            return self
        if self.framework is not Framework.GENERIC or self.elastic:
            raise ValueError("shards: a sharded job's workers are independent: framework 'generic', without "
                             f"min_workers/max_workers (got framework {self.framework.value!r})")
        output = self.shards.output
        if "://" not in output and not any(_within(output, place) for place in
                                           (self.model_dir, self.checkpoint_dir, *self.output_dirs) if place):
            raise ValueError(f"shards.output: {output!r} is not a directory the job writes: put it in its "
                             "model_dir or one of its output_dirs")
        return self

    @property
    def elastic(self) -> bool:
        return self.min_workers is not None or self.max_workers is not None


def _within(path: str, directory: str) -> bool:
    path, directory = posixpath.normpath(path), posixpath.normpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _describe(exc: ValidationError) -> str:
    """One line per error, each naming the field path and the offending value."""
    lines = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "spec"
        message = error["msg"].removeprefix("Value error, ")
        shown = "a value, not shown" if field.startswith("kubernetes.secret_env.") else repr(error.get("input"))
        lines.append(f"TrainingJobSpec.{field}: {message} (got {shown})")
    return "; ".join(lines)
