"""The bundled PyTorch trainer's model file (``model.pt``) in the training environment's real torch:
``runtime.predict`` turns it into class probabilities, and a file that carries code is refused
without running it (``weights_only``)."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from support import TRAINING_IMAGE, needs_torch

pytestmark = [pytest.mark.integration, needs_torch]

SCRIPT = textwrap.dedent("""
    import json, os, pickle, sys
    import numpy as np, torch
    from airflow_ml_provider.runtime.predict import load_predictor, torch_mlp
    from airflow_ml_provider.runtime.torch_ddp import save_model

    out = sys.argv[1]
    torch.manual_seed(0)
    model = torch_mlp(4, 3)
    path = save_model(out, model, 4, 3)
    X = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    probabilities = load_predictor(path)(X)
    with torch.no_grad():
        expected = torch.softmax(model(torch.from_numpy(X)), dim=1).numpy()

    class Payload:
        def __reduce__(self):
            return (os.mkdir, (os.path.join(out, "ran"),))

    hostile = os.path.join(out, "hostile", "model.pt")
    os.makedirs(os.path.dirname(hostile))
    torch.save({"model": Payload(), "n_features": 4, "n_classes": 3}, hostile)
    try:
        load_predictor(hostile)
        refused = None
    except pickle.UnpicklingError as exc:
        refused = type(exc).__name__
    print(json.dumps({"path": path, "shape": list(probabilities.shape),
                      "max_error": float(np.abs(probabilities - expected).max()), "refused": refused,
                      "ran": os.path.exists(os.path.join(out, "ran"))}))
""")


def test_model_pt_predicts_probabilities_and_a_file_with_code_is_refused_unrun(tmp_path):
    done = subprocess.run([str(TRAINING_IMAGE / "bin" / "python"), "-c", SCRIPT, str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["path"] == str(tmp_path / "model.pt")
    assert result["shape"] == [5, 3] and result["max_error"] < 1e-6, result
    assert result["refused"] == "UnpicklingError" and not result["ran"], result
