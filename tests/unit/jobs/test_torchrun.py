"""How every backend starts a PyTorch job (jobs.torchrun): torchrun's options from the spec, and its
output read back (rank lines by global rank; the agent's failure summary by rank and exit code). The
jobs themselves run in tests/integration/pytorch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from airflow_ml_provider.jobs import torchrun
from airflow_ml_provider.jobs.backends.local.launcher import TORCHRUN_MAIN, launch_plan
from airflow_ml_provider.jobs.spec import SpecError, TrainingJobSpec
from support import TRAINING_PYTHON, needs_training_env

TRAIN = ["python", "-m", "airflow_ml_provider.runtime.torch_ddp"]


def _spec(**fields) -> TrainingJobSpec:
    return TrainingJobSpec(**{"framework": "pytorch", "command": TRAIN, "num_workers": 2, **fields})


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_a_fixed_job_has_no_restart_and_an_elastic_one_takes_its_bounds():
    fixed = torchrun.torchrun_args(_spec(nproc_per_node=4), "job-a")
    assert (_option(fixed, "--nnodes"), _option(fixed, "--nproc-per-node"), _option(fixed, "--max-restarts")) == \
        ("2", "4", "0")
    assert (_option(fixed, "--rdzv-backend"), _option(fixed, "--rdzv-id"), _option(fixed, "--tee")) == \
        ("c10d", "job-a", "3")
    assert fixed[-4:] == ["--no-python", *TRAIN]  # the command runs as given, never through a shell
    elastic = torchrun.torchrun_args(_spec(num_workers=3, min_workers=2, max_workers=5), "job-b")
    assert (_option(elastic, "--nnodes"), _option(elastic, "--max-restarts")) == ("2:5", str(torchrun.MAX_RESTARTS))
    assert "--rdzv-endpoint" not in elastic  # the local launcher sets it (PET_RDZV_ENDPOINT) once it has a port


def test_a_program_that_torchrun_would_read_as_an_option_is_refused():
    with pytest.raises(ValueError, match="starts with '-'"):
        torchrun.torchrun_args(_spec(command=["--standalone", "x"]), "job")
    with pytest.raises(ValueError, match="starts with '-'"):
        torchrun.static_args(_spec(command=["--master-addr", "x"]), {})


def test_in_a_pod_the_ranks_write_unprefixed_and_a_controllers_numbering_is_a_static_rendezvous():
    static = torchrun.static_args(_spec(nproc_per_node=2), {"node-rank": "$(RANK)", "master-addr": "$(MASTER_ADDR)"})
    assert static[:4] == ["--node-rank", "$(RANK)", "--master-addr", "$(MASTER_ADDR)"]
    assert (_option(static, "--rdzv-backend"), _option(static, "--nproc-per-node"), _option(static, "--max-restarts")) \
        == ("static", "2", "0")
    assert "--nnodes" not in static  # left out: torchrun reads PET_NNODES
    assert "--tee" not in static and static[-4:] == ["--no-python", *TRAIN]  # the pod log gets the ranks' lines as they are
    with pytest.raises(ValueError, match="^min_workers/max_workers: the controller runs a fixed number of nodes"):
        torchrun.static_args(_spec(min_workers=1), {})


def test_nproc_per_node_is_refused_for_other_frameworks():
    with pytest.raises(SpecError, match=r"nproc_per_node \(2\) applies to framework 'pytorch' only"):
        TrainingJobSpec(framework="horovod", command=TRAIN, num_workers=1, nproc_per_node=2)


def test_the_local_plan_runs_the_images_torchrun_on_loopback_with_ranks_prefixed():
    plan = launch_plan(_spec(min_workers=1, max_workers=2), sys.prefix, Path("/jobs/job-a"))
    assert plan["argv"][:2] == [str(Path(sys.prefix, "bin", "python")), str(TORCHRUN_MAIN)]  # torchrun, tails sooner
    assert _option(plan["argv"], "--rdzv-id") == "job-a" and _option(plan["argv"], "--nnodes") == "1:2"
    assert "--local-addr" not in plan["argv"]  # each agent gets its own loopback address (PET_LOCAL_ADDR)
    assert plan["env"]["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[${rank}]:"
    assert plan["env"]["GLOO_SOCKET_IFNAME"] == "lo"


def test_a_fixed_size_local_job_is_one_agent_running_every_workers_ranks():
    """As torchrun runs one machine: no rendezvous between agents of one host (issue 38's 1.185x overhead)."""
    plan = launch_plan(_spec(num_workers=2, nproc_per_node=2), sys.prefix, Path("/jobs/job-a"))
    assert "--standalone" in plan["argv"] and _option(plan["argv"], "--nnodes") == "1"
    assert _option(plan["argv"], "--nproc-per-node") == "4" and "--rdzv-id" not in plan["argv"]


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


def test_the_root_cause_comes_first_though_the_agent_lists_the_ranks_it_stopped_above_it():
    """One agent for a fixed-size job: a killed rank 1 (SIGKILL) made torchrun stop rank 0 (SIGTERM), listed
    first under "Failures:"; the job was reported as "rank 0 was killed (exit -15)". (The summary as torchrun
    2.13 printed it on the local backend.)"""
    summary = torchrun.FailureSummary()
    for line in ["Failures:", "[1]:", "  time      : 2026-12-01_22:44:22", "  host      : localhost",
                 "  rank      : 0 (local_rank: 0)", "  exitcode  : -15 (pid: 9)  (SIGTERM)",
                 "  error_file: <N/A>", "---------------------------------------------------",
                 "Root Cause (first observed failure):", "[0]:", "  time      : 2026-12-01_22:44:22",
                 "  rank      : 1 (local_rank: 1)", "  exitcode  : -9 (pid: 10)  (SIGKILL)"]:
        rank, text = torchrun.output(line)
        if rank is None:
            summary.feed(text)
    assert summary.failures == [(1, -9), (0, -15)]


@needs_training_env
def test_the_local_torchrun_tails_its_ranks_lines_every_10_ms():
    """torchrun_main makes the TailLogs of ``--tee`` wake every 10 ms (torch's own 100 ms cost each job up to
    0.2 s at its end, waiting for its stdout then its stderr tails): checked in the training env's torch."""
    probe = (f"import runpy, sys; runpy.run_path({str(TORCHRUN_MAIN)!r}, run_name='probe')['tail_sooner'](); "
             "from torch.distributed.elastic.multiprocessing.tail_log import TailLog; "
             "print(TailLog('x', {0: '/dev/null'}, sys.stdout)._interval_sec)")
    done = subprocess.run([str(TRAINING_PYTHON), "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) == 0.01
