"""The registered model as an MLflow pyfunc ("models from code"): MLflow copies this file into the
model and executes it when the model is loaded, e.g. ``mlflow.pyfunc.load_model("models:/m@champion")``.
Predictions are class probabilities, whichever trainer wrote the model file. ``predict.py`` is
self-contained (numpy, and the trainer's library on demand) so it can travel inside the model."""

from __future__ import annotations

import mlflow
import numpy as np

try:
    from airflow_ml_provider.runtime.predict import load_predictor
except ImportError:  # a serving image without this package: the model carries predict.py (code_paths)
    from predict import load_predictor


class TrainedModelFile(mlflow.pyfunc.PythonModel):
    """Serves the ``model`` artifact (``model.txt`` from LightGBM, ``model.ubj`` from XGBoost, ``model.keras``
    from Keras, ``model.pt`` from ``runtime.torch_ddp``, ``model.npz`` from ``runtime.tf_ps_trainer``)."""

    def load_context(self, context) -> None:
        self._predict = load_predictor(context.artifacts["model"])

    def predict(self, context, model_input, params=None) -> np.ndarray:
        return self._predict(np.asarray(model_input, dtype=np.float32))


mlflow.models.set_model(TrainedModelFile())
