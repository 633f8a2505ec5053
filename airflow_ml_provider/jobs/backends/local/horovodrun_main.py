"""``horovodrun`` for the local launcher, without the build probe where the image already proved its build.

Before every run, horovodrun 0.28.1 forks a child that imports TensorFlow only to ask whether Horovod was
built with Gloo: 2.4 CPU s and about 2.3 s of each job's start (a two-rank, one-epoch job takes 13.6 CPU s
in all). ``make training-env`` answers that once: it runs this file with ``--record-build`` after building
Horovod with ``HOROVOD_WITH_GLOO=1``, which asserts ``gloo_built()`` and records the answer in the
environment. A launch in an environment whose record names its installed Horovod takes the answer from it;
any other environment (no record, another Horovod) is probed as horovodrun always does. Horovod 0.28.1 is
Horovod's last release, so the name answered for, ``horovod.runner.launch.gloo_built``, cannot move under
its pin; ``--record-build`` fails if it ever does.

Run with the image's interpreter: ``<image>/bin/python horovodrun_main.py <horovodrun's arguments>``. It
needs Horovod and the standard library only (the image need not hold this package).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BUILD_RECORD = Path(sys.prefix, "share", "airflow-ml-provider", "horovod-build.json")


def recorded_gloo() -> bool:
    """Whether this environment's record says its installed Horovod was built with Gloo. A record that
    cannot answer is named on stderr (the job's log), since every run of the environment then pays the probe."""
    import horovod

    try:
        record = json.loads(BUILD_RECORD.read_text())
    except FileNotFoundError:
        return False  # an environment made without one: probed, as horovodrun always does
    except (OSError, ValueError) as exc:
        return _ignored(f"cannot be read ({type(exc).__name__})")
    if not isinstance(record, dict) or record.get("gloo") is not True:
        return _ignored("does not say that Horovod was built with Gloo")
    if record.get("horovod") != horovod.__version__:
        return _ignored(f"is for horovod {str(record.get('horovod'))[:40]!r}, not the installed {horovod.__version__}")
    return True


def _ignored(why: str) -> bool:
    print(f"horovodrun_main: the build record {BUILD_RECORD} {why}; probing the build instead (about 2 s a "
          "run; `python horovodrun_main.py --record-build` records it again)", file=sys.stderr, flush=True)
    return False


def record_build() -> None:
    """Probe the build the way horovodrun does (TensorFlow's op library loaded), then record the answer."""
    import horovod
    import horovod.tensorflow as hvd
    from horovod.runner import launch

    if not callable(getattr(launch, "gloo_built", None)):
        sys.exit(f"horovodrun_main: horovod {horovod.__version__} has no horovod.runner.launch.gloo_built")
    if not hvd.gloo_built():
        sys.exit(f"horovodrun_main: horovod {horovod.__version__} was built without Gloo")
    BUILD_RECORD.parent.mkdir(parents=True, exist_ok=True)
    BUILD_RECORD.write_text(json.dumps({"horovod": horovod.__version__, "gloo": True}) + "\n")
    print(f"horovod {horovod.__version__} with Gloo: recorded in {BUILD_RECORD}")


def main(argv: list[str]) -> int:
    if argv == ["--record-build"]:
        record_build()
        return 0
    from horovod.runner import launch

    if recorded_gloo():
        launch.gloo_built = lambda verbose=False: True
    sys.argv = ["horovodrun", *argv]
    return launch.run_commandline()


if __name__ == "__main__":
    del sys.path[0]  # this file's folder (the launcher's modules): nothing in it is Horovod's to import
    sys.exit(main(sys.argv[1:]))
