"""The extras a pip user relies on (setup.cfg) hold what the docs promise of them. Each promise runs in a
process that may import only the standard library and the distributions that the package and the named
extras require (their whole tree, read from the environment's installed metadata): what a fresh
`pip install "airflow-ml-provider[<extras>]"` would have, without installing anything. The registry's
promises run in the Airflow (control) environment, Keras' and PyTorch's in the training environment,
the one here that has them."""

from __future__ import annotations

import configparser
import json
import subprocess
import sys

import numpy as np
import pytest

from support import REPO, TRAINING_PYTHON, needs_training_env

pytestmark = pytest.mark.integration

# Run first in the child: the closure of the requirements given (argv[1], JSON), then an import hook that
# refuses every other top-level module, as if its distribution were not installed.
ONLY_THE_EXTRAS = '''
import importlib.abc, importlib.machinery, importlib.metadata as metadata, json, os, sys, sysconfig
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

todo, seen = [(r, "") for r in json.loads(sys.argv[1])], set()
while todo:
    text, extra = todo.pop()
    requirement = Requirement(text)
    if requirement.marker and not requirement.marker.evaluate({**default_environment(), "extra": extra}):
        continue
    name = canonicalize_name(requirement.name)
    for wanted in {"", *requirement.extras} - {e for n, e in seen if n == name}:
        seen.add((name, wanted))
        try:
            todo += [(r, wanted) for r in metadata.requires(name) or []]
        except metadata.PackageNotFoundError:
            pass
names = {name for name, _ in seen} | {"airflow-ml-provider"}
allowed = {module for module, dists in metadata.packages_distributions().items()
           if any(canonicalize_name(d) in names for d in dists)} | {"airflow_ml_provider"}

python_lib = [sysconfig.get_path("stdlib"), os.path.join(sysconfig.get_path("platstdlib"), "lib-dynload")]

class NotInTheExtras(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top in allowed or top in sys.stdlib_module_names or (
                top == fullname and importlib.machinery.PathFinder.find_spec(top, python_lib)):
            return None
        raise ModuleNotFoundError(f"No module named {top!r} (not required by the extras)", name=top)

sys.meta_path.insert(0, NotInTheExtras())
'''


def _requirements(*extras: str) -> list[str]:
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    lines = setup["options"]["install_requires"].split("\n")
    for extra in extras:
        lines += setup["options.extras_require"][extra].split("\n")
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def _promise(python, extras: tuple[str, ...], code: str, cwd) -> str:
    done = subprocess.run([str(python), "-c", ONLY_THE_EXTRAS + code, json.dumps(_requirements(*extras))],
                          capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(cwd)})
    assert done.returncode == 0, f"[{','.join(extras)}]: {done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]  # the promise's own line, after any library's log


def test_the_mlflow_extra_gives_the_deploy_task_a_model_signature(tmp_path):
    code = ("from airflow_ml_provider.operators.deploy import _signature\n"
            "print(_signature({'n_features': 4, 'n_classes': 2}).inputs.inputs[0].shape)")
    assert _promise(sys.executable, ("mlflow",), code, tmp_path) == "(-1, 4)"


def test_the_pipeline_extra_draws_the_evaluation_plot_and_generates_data(tmp_path):
    code = ("from airflow_ml_provider.operators.deploy import _signature\n"
            "from airflow_ml_provider.runtime.datasets import write_synthetic\n"
            "from airflow_ml_provider.runtime.report import plot_training_curve\n"
            "_signature({'n_features': 4, 'n_classes': 2})\n"
            "write_synthetic('data.npz', rows=200, features=4, seed=0)\n"
            "print(plot_training_curve([{'step': 1, 'loss': 0.5}, {'step': 2, 'loss': 0.25}], 'c.png', 't').name)")
    assert _promise(sys.executable, ("pipeline",), code, tmp_path) == "c.png"


def test_the_mlflow_and_lightgbm_extras_load_a_registered_lightgbm_champion(tmp_path, monkeypatch):
    """As docs/connections.md shows it: ``mlflow.pyfunc.load_model("models:/<name>@champion")``."""
    import lightgbm as lgb

    from airflow_ml_provider.hooks.model_registry import CHAMPION, ModelRegistryHook
    from airflow_ml_provider.operators.deploy import _signature

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("AIRFLOW_CONN_ML_REGISTRY_EXTRAS", json.dumps(
        {"conn_type": "mlregistry", "host": uri, "extra": {"artifact_root": (tmp_path / "artifacts").as_uri()}}))
    X = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
    booster = lgb.train({"objective": "binary", "verbose": -1}, lgb.Dataset(X, (X[:, 0] > 0).astype(int)), 5)
    booster.save_model(tmp_path / "model.txt")
    registry = ModelRegistryHook("ml_registry_extras")
    run_id = registry.log_run(registry.experiment_id("extras"), "r", {}, {}, {"accuracy": 1.0}, [], [])
    version = registry.register("extras_model", run_id, str(tmp_path / "model.txt"),
                                _signature({"n_features": 4, "n_classes": 2}), ["lightgbm"], {}, "")
    registry.set_alias("extras_model", CHAMPION, version)

    code = ("import mlflow, numpy as np\n"
            f"mlflow.set_tracking_uri({uri!r})\n"
            "model = mlflow.pyfunc.load_model('models:/extras_model@champion')\n"
            "print(model.predict(np.ones((3, 4), dtype=np.float32)).shape)")
    assert _promise(sys.executable, ("mlflow", "lightgbm"), code, tmp_path) == "(3, 2)"


KERAS = ("import keras\n"
         "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])\n"
         "model.save('model.keras')\n")
TORCH = ("import torch\n"
         "from airflow_ml_provider.runtime.predict import torch_mlp\n"
         "torch.save({'model': torch_mlp(4, 2).state_dict(), 'n_features': 4, 'n_classes': 2}, 'model.pt')\n")


XGBOOST = ("import numpy as np, xgboost as xgb\n"
           "X = np.random.default_rng(0).normal(size=(50, 4))\n"
           "xgb.train({'objective': 'binary:logistic'}, xgb.DMatrix(X, X[:, 0] > 0), 2).save_model('model.ubj')\n")


@needs_training_env
@pytest.mark.parametrize(("extra", "save", "file"), [("keras", KERAS, "model.keras"), ("pytorch", TORCH, "model.pt"),
                                                     ("xgboost", XGBOOST, "model.ubj")])
def test_each_framework_extra_loads_that_frameworks_model_file(tmp_path, extra, save, file):
    """What the registered model runs when it loads (``runtime.predict``, inside ``served_model.py``)."""
    code = save + ("import numpy as np\nfrom airflow_ml_provider.runtime.predict import load_predictor\n"
                   f"print(load_predictor({file!r})(np.ones((3, 4), dtype=np.float32)).shape)")
    assert _promise(TRAINING_PYTHON, (extra,), code, tmp_path) == "(3, 2)"


VALIDATE_A_VOLCANO_JOB = (
    "from airflow_ml_provider.jobs.backends import get_backend\n"
    "from airflow_ml_provider.jobs.backends.kubernetes import schemas\n"
    "from airflow_ml_provider.jobs.spec import TrainingJobSpec\n"
    "spec = TrainingJobSpec(framework='lightgbm', command=['python', 't.py'], num_workers=2, image='i:1')\n"
    "objs = get_backend('volcano', api_client=None, namespace='ml').manifests('j', spec, {})\n"
    "objs[0]['spec']['tasks'][0]['template']['spec']['containers'][0]['imagePullPolicyy'] = 'Always'\n"
    "print(schemas.validate_all(objs))\n")


def test_the_kubernetes_extra_validates_cluster_jobs_offline(tmp_path):
    """`airflow-ml check`'s offline validation (docs/cluster.md) with the kubernetes extra alone: the CRDs from the
    package, ObjectMeta and the built-in kinds from kubernetes-validate (without the extra no Kubernetes backend
    imports at all: the kubernetes client is the extra's too)."""
    found = _promise(sys.executable, ("kubernetes",), VALIDATE_A_VOLCANO_JOB, tmp_path)
    assert "undeclared field 'imagePullPolicyy'" in found and "CRD volcano-sh/volcano@" in found, found


@needs_training_env
def test_the_tensorboard_extra_reads_the_scalars_a_trainer_wrote(tmp_path):
    """The API server's side of the view's TensorBoard scalars: an event file tensorboardX wrote (the training
    extra's writer, in the training environment) read with only the tensorboard extra."""
    board = tmp_path / "tensorboard"
    write = ("import sys; from airflow_ml_provider.runtime.tensorboard import Scalars\n"
             "w = Scalars(sys.argv[1]); w.add(1, {'loss': 0.5}); w.add(2, {'loss': 0.25}); w.close()")
    subprocess.run([str(TRAINING_PYTHON), "-c", write, str(board)], check=True, timeout=120,
                   env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)})
    code = ("import json, sys\nfrom airflow_ml_provider.plugins.tensorboard_scalars import read_scalars\n"
            f"print(json.dumps(read_scalars({str(board)!r})['runs']['.']))")
    assert json.loads(_promise(sys.executable, ("tensorboard",), code, tmp_path)) == {"loss": [[1, 0.5], [2, 0.25]]}


def test_the_gpu_extra_gives_the_local_launcher_nvml(tmp_path):
    """The local launcher's GPU figures (docs/training_view.md) with only the gpu extra: NVML's bindings import, and
    on a machine without a GPU driver (this one) its real initialisation fails into no GPU figures, raising nothing."""
    code = ("import json; import pynvml; from airflow_ml_provider.jobs.backends.local.gpu_use import GpuUse\n"
            "print(json.dumps(GpuUse().by_pid()))")
    assert _promise(sys.executable, ("gpu",), code, tmp_path).strip() == "null"
