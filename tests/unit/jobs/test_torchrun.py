"""How every backend starts a PyTorch job (jobs.torchrun): torchrun's options from the spec, and its
output read back (rank lines by global rank; the agent's failure summary by rank and exit code). The
jobs themselves run in tests/integration/pytorch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from airflow_ml_provider.jobs import torchrun
from airflow_ml_provider.jobs.backends.local.launcher import launch_plan
from airflow_ml_provider.jobs.spec import SpecError, TrainingJobSpec

TRAIN = ["python", "-m", "airflow_ml_provider.runtime.torch_ddp"]


def _spec(**fields) -> TrainingJobSpec:
    return TrainingJobSpec(**{"framework": "pytorch", "command": TRAIN, "num_workers": 2, **fields})


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_a_fixed_job_has_no_restart_and_an_elastic_one_takes_its_bounds():
    fixed = torchrun.torchrun_args(_spec(nproc_per_node=4), "job-a", endpoint="job-a-0.job-a:29400")
    assert (_option(fixed, "--nnodes"), _option(fixed, "--nproc-per-node"), _option(fixed, "--max-restarts")) == \
        ("2", "4", "0")
    assert (_option(fixed, "--rdzv-backend"), _option(fixed, "--rdzv-id"), _option(fixed, "--rdzv-endpoint")) == \
        ("c10d", "job-a", "job-a-0.job-a:29400")
    assert fixed[-4:] == ["--no-python", *TRAIN]  # the command runs as given, never through a shell
    elastic = torchrun.torchrun_args(_spec(num_workers=3, min_workers=2, max_workers=5), "job-b")
    assert (_option(elastic, "--nnodes"), _option(elastic, "--max-restarts")) == ("2:5", str(torchrun.MAX_RESTARTS))
    assert "--rdzv-endpoint" not in elastic  # the local launcher sets it (PET_RDZV_ENDPOINT) once it has a port


def test_a_program_that_torchrun_would_read_as_an_option_is_refused():
    with pytest.raises(ValueError, match="starts with '-'"):
        torchrun.torchrun_args(_spec(command=["--standalone", "x"]), "job")


def test_nproc_per_node_is_refused_for_other_frameworks():
    with pytest.raises(SpecError, match=r"nproc_per_node \(2\) applies to framework 'pytorch' only"):
        TrainingJobSpec(framework="horovod", command=TRAIN, num_workers=1, nproc_per_node=2)


def test_the_local_plan_runs_the_images_torchrun_on_loopback_with_ranks_prefixed():
    plan = launch_plan(_spec(), sys.prefix, Path("/jobs/job-a"))
    assert plan["argv"][0] == str(Path(sys.prefix, "bin", "torchrun"))
    assert _option(plan["argv"], "--rdzv-id") == "job-a"
    assert "--local-addr" not in plan["argv"]  # each agent gets its own loopback address (PET_LOCAL_ADDR)
    assert plan["env"]["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[${rank}]:"
    assert plan["env"]["GLOO_SOCKET_IFNAME"] == "lo"


def test_rank_lines_and_the_agents_failure_summary_are_told_apart():
    assert torchrun.output('[12]:{"event": "metrics"}') == (12, '{"event": "metrics"}')
    assert torchrun.output("[default0]:x") == (None, "[default0]:x")  # not a global-rank prefix: the agent's
    summary = torchrun.FailureSummary()
    for line in ["Root Cause (first observed failure):", "[0]:", "  time      : 2026-11-26_09:00:00",
                 "  host      : worker-1", "  rank      : 3 (local_rank: 1)",
                 "  exitcode  : -9 (pid: 4242)", "  error_file: <N/A>", "  traceback : Signal 9 (SIGKILL)"]:
        rank, text = torchrun.output(line)
        if rank is None:
            summary.feed(text)
    assert summary.failures == [(3, -9)]
