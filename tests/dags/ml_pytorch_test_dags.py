"""DAGs for the PyTorch tests (tests/integration/pytorch): DDP jobs under torchrun on the local backend."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_ml_provider.operators.training import PyTorchTrainingOperator

EPOCHS = 10  # keep in step with tests/integration/pytorch/test_local_ddp.py
LONG = 100  # long enough for the chaos thread to kill a rank mid-training (an epoch takes well under a second)
TRAIN = ["python", "-m", "airflow_ml_provider.runtime.torch_ddp", "--seed", "0"]

with DAG("ml_test_pytorch_ddp", schedule=None, catchup=False, tags=["test"]) as ddp:
    # The same trainer and seed on one worker and on two: the test compares their losses.
    one = PyTorchTrainingOperator(task_id="one_worker", command=[*TRAIN, "--epochs", str(EPOCHS)], num_workers=1,
                                  job={"backend": "local"}, retries=0)
    two = PyTorchTrainingOperator(task_id="two_workers", command=[*TRAIN, "--epochs", str(EPOCHS)], num_workers=2,
                                  job={"backend": "local"}, retries=0)
    one >> two

with DAG("ml_test_pytorch_chaos", schedule=None, catchup=False, tags=["test"]) as chaos:
    # The test kills rank 1 of each job mid-training: the elastic job's group re-forms (torchrun restarts
    # it), the fixed-size one ends PREEMPTED and the operator resubmits it from its checkpoint.
    elastic = PyTorchTrainingOperator(task_id="elastic", command=[*TRAIN, "--epochs", str(LONG)], num_workers=2,
                                      min_workers=1, max_workers=2, job={"backend": "local"}, retries=0,
                                      follow={"max_preemptions": 0})
    preempted = PyTorchTrainingOperator(task_id="preempted", command=[*TRAIN, "--epochs", str(LONG)],
                                        num_workers=2, job={"backend": "local"}, retries=0,
                                        follow={"max_preemptions": 2})
    elastic >> preempted
