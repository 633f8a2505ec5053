"""The reporting rank's scalars as TensorBoard event files in ``AIRFLOW_ML_TENSORBOARD_DIR`` (the job's
checkpoint directory's ``tensorboard/``, set by every backend; Vertex AI's ``AIP_TENSORBOARD_LOG_DIR``).

Every bundled trainer reports its metrics through ``metrics_log.emit_metrics``/``emit_epoch_metrics``, from
rank 0 (the chief) only; those write each point here too, so no trainer keeps a writer of its own. The
writer is tensorboardX (numpy and protobuf, no TensorFlow): tf.summary would import TensorFlow into the
LightGBM, XGBoost and PyTorch workers (seconds), torch.utils.tensorboard needs the whole tensorboard package.
tensorboardX's writer module imports torch whenever it is installed, only to recognise its tensors (1.3-2 s of
a LightGBM worker's start in the training image, measured); unless torch is already loaded it is imported
with torch hidden, which costs about 60 ms (``python -X importtime``, the training env; docs/testing.md).

On object storage the events are written to a local folder and uploaded whole (an event file is small and
only grows) at the first point, then at most every ``UPLOAD_S``, and at the end (a killed attempt's last
seconds of points may be missing there; a local or mounted directory misses at most ``FLUSH_S``). A resumed attempt writes a new event file beside the
earlier ones, which TensorBoard reads as one run. A failure here is reported once and never stops training.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
import time

from airflow_ml_provider.artifact_layout import TENSORBOARD_ENV, is_remote, join

FLUSH_S = 2  # how stale a running job's event file may be (the writer's background flush)
UPLOAD_S = 10.0


def summary_writer_class():
    """tensorboardX's ``SummaryWriter``, imported without torch when torch is not loaded yet (see above)."""
    if "torch" in sys.modules or "tensorboardX" in sys.modules:
        from tensorboardX import SummaryWriter

        return SummaryWriter
    sys.modules["torch"] = None  # `import torch` raises ImportError: tensorboardX's writer then skips it
    try:
        from tensorboardX import SummaryWriter
    finally:
        del sys.modules["torch"]
    return SummaryWriter


class Scalars:
    """One writer of scalar points into ``logdir`` (a path or an object-store URL)."""

    def __init__(self, logdir: str, clock=time.monotonic):
        self.logdir, self.clock = logdir, clock
        self.remote = is_remote(logdir)
        self.local = tempfile.mkdtemp(prefix="aml-tensorboard-") if self.remote else logdir
        # a name of its own: tensorboardX names the file by the second it opened it and the host, which a resumed
        # attempt started in the same second (and the same sandbox host name) would share, overwriting the first's;
        # the nanoseconds keep the files in their order, which is the order TensorBoard reads them in
        self.writer = summary_writer_class()(logdir=self.local, flush_secs=FLUSH_S,
                                             filename_suffix=f".{time.time_ns()}{secrets.token_hex(2)}")
        self.uploaded = float("-inf")  # the first point is uploaded at once: the file is there from the start

    def add(self, step: int, values: dict[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, float(value), int(step))
        if self.remote and self.clock() - self.uploaded >= UPLOAD_S:
            self.writer.flush()
            self._upload()

    def close(self) -> None:
        self.writer.close()
        if self.remote:
            self._upload()

    def _upload(self) -> None:
        from airflow_ml_provider.runtime import storage

        self.uploaded = self.clock()
        for name in sorted(os.listdir(self.local)):
            path = os.path.join(self.local, name)
            if os.path.isfile(path):
                storage.upload(path, join(self.logdir, name))


def from_env(environ=os.environ) -> Scalars | None:
    """The job's writer, or None when the backend gave no ``AIRFLOW_ML_TENSORBOARD_DIR``."""
    logdir = environ.get(TENSORBOARD_ENV)
    return Scalars(logdir) if logdir else None
