"""Hostile operator arguments, search values and job names: refused naming the field, or kept as data.

Issue 12, item 1 (recipe search values reached Airflow's Jinja), item 3 (job names reached Kubernetes
REST paths unchecked), item 5 (option injection into horovodrun, working_dir), item 7 (unbounded
num_workers, NUL bytes).
"""

from __future__ import annotations

import json

import pytest

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.naming import JobIdentity
from airflow_ml_provider.jobs.spec import SpecError, TrainingJobSpec
from airflow_ml_provider.recipes import parse_recipe
from airflow_ml_provider.recipes.dag import build_dag
from airflow_ml_provider.search.space import SearchSpaceError, parse_settings, parse_space
from airflow_ml_provider.search.template import render_trial

BASE = {"framework": "generic", "command": ["python", "train.py"], "num_workers": 1}

# (case, fields overriding BASE, the field the error names)
SPEC_REFUSED = [
    ("a_billion_workers", {"num_workers": 10**9}, "TrainingJobSpec.num_workers: Input should be less than or equal to 4096"),
    ("elastic_max_beyond_the_bound", {"max_workers": 10**6}, "TrainingJobSpec.max_workers: Input should be less than"),
    ("shell_string_command", {"command": "python train.py; rm -rf /"}, "TrainingJobSpec.command: must be an argv list"),
    ("shell_syntax_program", {"command": ["python;id", "x"]}, "TrainingJobSpec.command: the program 'python;id'"),
    ("nul_in_argv", {"command": ["python", "a\x00b"]}, "TrainingJobSpec.command.1: contains a NUL character"),
    ("nul_in_env_value", {"env": {"A": "x\x00y"}}, "TrainingJobSpec.env.A: contains a NUL character"),
    ("env_name_injection", {"env": {"A;B": "x"}}, "TrainingJobSpec.env.A;B.[key]: 'A;B' is not a valid environment"),
    ("nul_in_image", {"image": "img\x00"}, "TrainingJobSpec.image: contains a NUL character"),
    ("nul_in_model_dir", {"model_dir": "/m\x00"}, "TrainingJobSpec.model_dir: contains a NUL character"),
    ("working_dir_with_a_command", {"working_dir": "/tmp; rm -rf /"}, "TrainingJobSpec.working_dir: String should match"),
    ("working_dir_substitution", {"working_dir": "/tmp/$(id)"}, "TrainingJobSpec.working_dir: String should match"),
    ("relative_working_dir", {"working_dir": "tmp"}, "TrainingJobSpec.working_dir: String should match"),
    ("secret_env_as_a_value", {"kubernetes": {"secret_env": {"TOKEN": "s3cret"}}},
     "TrainingJobSpec.kubernetes.secret_env.TOKEN: Input should be a valid dictionary"),
    ("secret_name_with_a_path", {"kubernetes": {"secret_env": {"T": {"secret": "../admin", "key": "k"}}}},
     "TrainingJobSpec.kubernetes.secret_env.T.secret: String should match pattern"),
    ("relative_volume_mount", {"kubernetes": {"volumes": [{"name": "d", "mount_path": "etc", "claim": "c"}]}},
     "TrainingJobSpec.kubernetes.volumes.0.mount_path: String should match pattern"),
]


@pytest.mark.parametrize(("fields", "message"), [case[1:] for case in SPEC_REFUSED],
                         ids=[case[0] for case in SPEC_REFUSED])
def test_hostile_job_spec_is_refused_naming_the_field(fields, message):
    with pytest.raises(SpecError) as raised:
        TrainingJobSpec(**{**BASE, **fields})
    assert str(raised.value).startswith(message), str(raised.value)
    assert "s3cret" not in str(raised.value)  # a secret passed as a plain value is not echoed


@pytest.mark.parametrize("backend", ["mpijob", "volcano"])
@pytest.mark.parametrize("program", ["-H", "--start-timeout"])
def test_an_option_like_program_never_reaches_horovodrun(backend, program):
    spec = TrainingJobSpec(framework="horovod", command=[program, "evil:8", "python"], num_workers=2)
    with pytest.raises(JobSubmissionError, match=f"command: the program '{program}' starts with '-'"):
        get_backend(backend, api_client=None, namespace="default").render("job", spec, {})


JOB_NAMES = ["../../kube-system/secrets/admin-token", "a/b", "ok%2F..", "UPPER", "x" * 64, "name?watch=1"]


@pytest.mark.parametrize("name", JOB_NAMES)
@pytest.mark.parametrize("call", ["status", "cancel", "delete"])
def test_a_hostile_job_name_never_reaches_a_kubernetes_path(name, call):
    backend = get_backend("mpijob", api_client=None, namespace="default")  # no client: a request would crash
    with pytest.raises(ValueError) as raised:
        getattr(backend, call)(name)
    assert str(raised.value).startswith(f"job_name: {name!r} is not a DNS-1123 label")


@pytest.mark.parametrize("name", ["../../etc", "a/b", ".hidden", "x\x00"])
def test_a_hostile_job_name_never_reaches_a_local_path(tmp_path, name):
    with pytest.raises(ValueError, match="job name: .* is not a valid local job name"):
        LocalBackend(tmp_path).status(name)


def test_a_hostile_namespace_is_refused():
    with pytest.raises(ValueError, match=r"^namespace: 'kube-system/\.\./x' is not a DNS-1123 label"):
        get_backend("mpijob", api_client=None, namespace="kube-system/../x")


def test_job_names_derived_from_hostile_ids_are_dns_labels():
    identity = JobIdentity("dag", "../../secrets/x; rm", "manual__$(id)", map_index=3)
    assert identity.name.startswith("aml-secrets-x-rm-") and len(identity.name) <= 63
    LocalBackend("/nonexistent").job_dir(identity.name)  # valid for every backend


def test_a_search_value_naming_another_placeholder_is_not_substituted_again():
    spec = TrainingJobSpec(**{**BASE, "command": ["python", "--a={{ params.a }}", "--b={{ params.b }}"]})
    trial = render_trial(spec, {"a": "{{ params.b }}", "b": "x"})
    assert trial.command == ["python", "--a={{ params.b }}", "--b=x"]


def test_a_search_value_inside_a_json_argument_stays_one_json_string():
    spec = TrainingJobSpec(**{**BASE, "command": ["python", "--params-json", '{"lr": "{{ params.lr }}"}']})
    hostile = '0.1", "objective": "evil'
    (document,) = [json.loads(arg) for arg in render_trial(spec, {"lr": hostile}).command[2:]]
    assert document == {"lr": hostile}


def test_a_search_value_with_a_nul_is_refused_when_its_job_is_built():
    spec = TrainingJobSpec(**{**BASE, "command": ["python", "{{ params.x }}"]})
    with pytest.raises(SpecError, match=r"^TrainingJobSpec.command.1: contains a NUL character"):
        render_trial(spec, {"x": "a\x00"})


@pytest.mark.parametrize("objective", ["a b", "auc;id", "{{ 7*7 }}", ""])
def test_a_hostile_objective_metric_is_refused_naming_it(objective):
    with pytest.raises(SearchSpaceError, match=r"^search.objective_metric: String should match pattern"):
        parse_settings(n_trials=2, objective_metric=objective)


def test_a_hostile_search_parameter_name_is_refused_naming_it():
    with pytest.raises(SearchSpaceError, match=r"^search_space: '__class__\}\}' is not a valid parameter name"):
        parse_space({"__class__}}": [1, 2]})


RECIPE = """\
version: 1
name: corpus_recipe_search
experiments:
  tune:
    framework: generic
    samples: 2
    search: {sampler: random, objective: score}
    parameters:
      note: ["{{ 7*7 }}", "{{ var.value.secret }}", "{{ conn.x.password }}"]
    command: [python, -c, "print()", "--note={{note}}"]
"""


def test_a_recipe_search_task_renders_nothing_with_airflows_jinja():
    """Airflow renders every template field before execute; a recipe's search has none, so even a
    context whose ``var`` would answer leaves the choices as they are (the pre-fix code gave 49)."""
    dag = build_dag(parse_recipe(RECIPE))
    task = dag.task_dict["tune"]
    assert task.template_fields == ()
    context = {"var": {"value": {"secret": "leaked"}}, "conn": {"x": {"password": "leaked"}}, "params": {}}
    task.render_template_fields(context, dag.get_template_env())
    assert task.search_space == {"note": ["{{ 7*7 }}", "{{ var.value.secret }}", "{{ conn.x.password }}"]}
    assert task.search["objective_metric"] == "score"


def test_airflow_ml_render_refuses_a_billion_workers_before_rendering(tmp_path, capsys):
    from airflow_ml_provider.cli import main

    assert main(["render", "--local-root", str(tmp_path), "--workers", str(10**9), "--", "python", "train.py"]) == 2
    assert "TrainingJobSpec.num_workers: Input should be less than or equal to 4096" in capsys.readouterr().err
