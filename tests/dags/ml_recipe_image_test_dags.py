"""Recipe DAGs whose experiments name an image (tests/integration/recipes/test_recipe_images.py): one of the
deployment's environments (the training environment), and another real environment this deployment does not
list (the one parsing this file). Both build at parse: the list is the connection's, checked when a task runs."""

from __future__ import annotations

import os
import sys

from airflow_ml_provider.recipes import parse_recipe
from airflow_ml_provider.recipes.dag import build_dag

RECIPE = """\
version: 1
name: image_test_{kind}
experiments:
  mapped:
    image: {image}
    framework: generic
    command: [python, -c, "print('the job ran')"]
  searched:
    image: {image}
    framework: generic
    samples: 1
    search: {{sampler: random, objective: x}}
    parameters: {{x: {{min: 0.1, max: 0.9}}}}
    command: [python, -c, "import json, sys; print(json.dumps({{'event': 'result', 'x': float(sys.argv[1])}}))",
              "{{{{x}}}}"]
"""

image_refused = build_dag(parse_recipe(RECIPE.format(kind="refused", image=sys.prefix)), __file__)
image_allowed = build_dag(parse_recipe(RECIPE.format(kind="allowed", image=os.environ.get("AIRFLOW_ML_LOCAL_IMAGE",
                                                                                             sys.prefix))), __file__)
