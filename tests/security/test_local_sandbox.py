"""Local jobs against each other and against Airflow, with real worker processes: in its sandbox a job
sees no other process, nothing of $AIRFLOW_HOME, no job record, no other job's files; records it could
plant are refused; its lock, heartbeat and marker-less children cannot outlive or block anything.
Each attack also runs unsandboxed (``sandbox="off"``), where it succeeds: the test sees what it checks."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import psutil
import pytest

from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.backends.local.backend import ForgedJobRecord, LocalBackend, job_processes
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState
from support import TRAINING_IMAGE, final_status, job_log, job_uid, needs_horovod, needs_sandbox, wait_for

pytestmark = pytest.mark.integration
MODES = [pytest.param("auto", marks=needs_sandbox), "off"]

ATTACK = textwrap.dedent("""
    import fcntl, glob, json, os, sys, time
    t = json.loads(sys.argv[1])
    found = {"environ": [], "read": [], "wrote": [], "locked": [], "pids": []}
    for path in glob.glob("/proc/[0-9]*/environ"):
        found["pids"].append(path.split("/")[2])
        try:
            data = open(path, "rb").read()
        except OSError:
            continue
        found["environ"] += [c for c in t["canaries"] if c.encode() in data]
    for path in t["read"]:
        try:
            open(path, "rb").read(1)
            found["read"].append(path)
        except OSError:
            pass
    for path in t["write"]:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as handle:
                handle.write(t["payload"])
            found["wrote"].append(path)
        except OSError:
            pass
    held = []
    for path in t["lock"]:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append(fd)
            found["locked"].append(path)
        except OSError:
            pass
    print("REPORT " + json.dumps(found), flush=True)
""")


def spec(code: str, **fields) -> TrainingJobSpec:
    return TrainingJobSpec(framework="generic", command=["python", "-c", textwrap.dedent(code)], num_workers=1,
                           **fields)


def sandboxed(backend: LocalBackend, name: str) -> bool:
    return json.loads((backend.job_dir(name) / "job.json").read_text())["plan"]["sandbox"] is not None


@pytest.fixture
def scheduler():
    """A stand-in for an Airflow process: its start environment holds Airflow's secrets."""
    canaries = {"AIRFLOW__CORE__FERNET_KEY": secrets.token_hex(16), "AIRFLOW_CONN_WAREHOUSE": secrets.token_hex(16)}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env={**os.environ, **canaries})
    yield list(canaries.values())
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("mode", MODES)
def test_a_job_finds_no_secret_record_or_other_jobs_file_and_changes_nothing(tmp_path, airflow_db, scheduler, mode):
    home = Path(os.environ["AIRFLOW_HOME"])
    config = home / "airflow.cfg"
    if not config.exists():
        config.write_text("[core]\n")
    planted_in_home = home / f"planted-{secrets.token_hex(4)}.cfg"  # (not airflow.cfg: unsandboxed, it is written)
    databases = [path for path in home.glob("*.db")]
    assert databases, "the metadata DB (airflow_db) is under AIRFLOW_HOME"
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2, sandbox=mode)
    root, token = backend.root, secrets.token_hex(16)
    victim_model = root / "artifacts" / "victim" / "model"
    assert backend.submit("victim", spec("""
        import os, time
        open(os.path.join(os.environ["AIRFLOW_ML_MODEL_DIR"], "model.txt"), "w").write("real")
        print("ready", flush=True)
        time.sleep(600)
    """, model_dir=str(victim_model)), {}, secrets={"VICTIM_TOKEN": token})
    wait_for(lambda: "ready" in job_log(backend, "victim"), what="the victim job to start")
    victim_records = {path.name: path.read_bytes() for path in backend.job_dir("victim").iterdir()}
    targets = {
        "canaries": [*scheduler, token],
        "read": [str(config), *map(str, databases), str(root / "owner.key"), str(root / "jobs" / "victim" / "job.json"),
                 str(root / "jobs" / "victim" / "output.log"), str(victim_model / "model.txt")],
        "write": [str(root / "jobs" / "victim" / "status.json"), str(root / "jobs" / "victim" / "output.log"),
                  str(victim_model / "model.txt"), str(root / "jobs" / "future" / "job.json"),
                  str(root / "jobs" / "future" / "status.json"), str(planted_in_home)],
        "lock": [str(root / "locks" / "victim.lock")],
        "payload": '{"state": "SUCCEEDED", "message": "forged", "exit_codes": {}}',
    }
    assert backend.submit("attacker", TrainingJobSpec(
        framework="generic", command=["python", "-c", ATTACK, json.dumps(targets)], num_workers=1,
        model_dir=str(root / "artifacts" / "attacker" / "model")), {})
    assert final_status(backend, "attacker").state is JobState.SUCCEEDED
    report = json.loads(next(line.split("REPORT ", 1)[1] for line in job_log(backend, "attacker").splitlines()
                             if "REPORT " in line))
    if mode == "off":  # the same attack, unsandboxed, succeeds: the checks below would catch it
        planted_in_home.unlink()
        assert not sandboxed(backend, "attacker")
        assert set(report["environ"]) >= {*scheduler, token} and str(config) in report["read"]
        assert str(root / "jobs" / "future" / "job.json") in report["wrote"]
        with pytest.raises(JobSubmissionError, match=r"jobs/future/job.json: this job record was not written by"):
            backend.submit("future", spec("print('the real future job')"), {})
        backend.cancel("victim")
        return
    assert sandboxed(backend, "attacker") and sandboxed(backend, "victim")
    assert report["environ"] == [] and report["read"] == [] and report["wrote"] == [] and report["locked"] == []
    assert len(report["pids"]) <= 3, f"the job saw other processes: {report['pids']}"
    assert backend.status("victim").state is JobState.RUNNING
    assert {path.name: path.read_bytes() for path in backend.job_dir("victim").iterdir()
            if path.name != "heartbeat"} == {k: v for k, v in victim_records.items() if k != "heartbeat"}
    assert (victim_model / "model.txt").read_text() == "real"
    assert not planted_in_home.exists() and not backend.job_dir("future").exists()
    assert backend.submit("future", spec("print('the real future job')"), {})
    assert final_status(backend, "future").state is JobState.SUCCEEDED and "the real future job" in job_log(backend, "future")
    backend.cancel("victim")


def test_a_planted_or_copied_record_is_refused_naming_it_and_cancel_stops_nothing_it_names(tmp_path):
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2)
    assert backend.submit("real", spec("import time; print('ready', flush=True); time.sleep(600)"), {})
    wait_for(lambda: "ready" in job_log(backend, "real"), what="the real job to start")
    genuine = (backend.job_dir("real") / "job.json").read_text()
    for name, record in (("planted", json.dumps({"name": "planted", "uid": job_uid(backend, "real"), "spec": {}})),
                         ("copied", genuine)):
        job_dir = backend.root / "jobs" / name
        job_dir.mkdir()
        (job_dir / "job.json").write_text(record)
        (job_dir / "status.json").write_text('{"state": "SUCCEEDED", "message": "forged", "exit_codes": {}}')
        with pytest.raises(ForgedJobRecord, match=f"{job_dir}/job.json: this job record was not written by"):
            backend.status(name)
        with pytest.raises(JobSubmissionError, match=f"{job_dir}/job.json: this job record was not written by"):
            backend.submit(name, spec("print(1)"), {})
        backend.cancel(name)  # names the real job's uid: must not stop it
        assert backend.status("real").state is JobState.RUNNING and job_processes(job_uid(backend, "real"))
    backend.cancel("real")


def test_a_held_lock_fails_the_submission_after_the_bound_naming_it(tmp_path):
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), lock_timeout_s=1)
    (backend.root / "locks").mkdir(parents=True)
    lock = backend.root / "locks" / "held.lock"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, sys, time
        handle = open({str(lock)!r}, "a")
        fcntl.flock(handle, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(JobSubmissionError, match=rf"job 'held': its lock {lock} has been held by another process "
                                                     r"for 1 s \(lock_timeout_s\)"):
            backend.submit("held", spec("print(1)"), {})
    finally:
        holder.kill()
        holder.wait()
    assert backend.submit("held", spec("print(1)"), {}) and final_status(backend, "held").state is JobState.SUCCEEDED


@pytest.mark.parametrize("mode", MODES)
def test_cancel_stops_a_child_that_dropped_the_job_marker(tmp_path, mode):
    """Before (and unsandboxed): a child started with a clean environment in its own session outlived
    cancel(); in the job's PID namespace it cannot."""
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2, sandbox=mode)
    tag = f"1000.{secrets.randbelow(10**9)}"
    assert backend.submit("escape", spec(f"""
        import subprocess, time
        subprocess.Popen(["setsid", "env", "-i", "sleep", "{tag}"])
        print("ready", flush=True)
        time.sleep(600)
    """), {})

    def escaped():
        return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", tag]]

    wait_for(lambda: "ready" in job_log(backend, "escape") and escaped(), what="the marker-less child")
    backend.cancel("escape")
    left = escaped()
    for proc in left:
        proc.kill()
    if mode == "off":
        assert left, "unsandboxed, the child outlives cancel (what the sandbox is for)"
    else:
        assert not left, "the marker-less child outlived cancel()"
        assert backend.status("escape").state is JobState.CANCELLED


@needs_sandbox
def test_a_job_touching_its_own_heartbeat_cannot_keep_itself_alive_as_an_orphan(tmp_path):
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2, orphan_grace_s=3)
    heartbeat = backend.job_dir("orphan") / "heartbeat"
    assert backend.submit("orphan", spec(f"""
        import os, time
        print("ready", flush=True)
        while True:
            try:
                os.utime({str(heartbeat)!r})
            except OSError:
                pass
            time.sleep(0.2)
    """), {})
    status = final_status(backend, "orphan")
    assert status.state is JobState.CANCELLED and status.message.startswith("no follower for 3 s")


def test_without_a_sandbox_a_job_is_refused_unless_the_deployment_opts_out(tmp_path):
    """No bwrap on the submitter's PATH: by default (``required``) the job is refused, saying how to opt out;
    with ``auto`` a warning, once for two jobs, and the jobs run unsandboxed."""
    script = textwrap.dedent(f"""
        import logging, time
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
        from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
        from airflow_ml_provider.jobs.backends.base import JobSubmissionError
        from airflow_ml_provider.jobs.spec import TrainingJobSpec
        backend = LocalBackend({str(tmp_path / "ml")!r}, image={str(TRAINING_IMAGE)!r}, sandbox="auto")
        spec = TrainingJobSpec(framework="generic", command=["python", "-c", "print(1)"], num_workers=1)
        for name in ("one", "two"):
            backend.submit(name, spec, {{}})
            while not backend.status(name).state.is_terminal:
                time.sleep(0.1)
            print(name, backend.status(name).state.value, flush=True)
        try:
            LocalBackend({str(tmp_path / "ml2")!r}, image={str(TRAINING_IMAGE)!r}).submit("three", spec, {{}})
        except JobSubmissionError as exc:
            print("refused:", exc, flush=True)
    """)
    env = {**os.environ, "PATH": str(TRAINING_IMAGE / "bin")}  # no /usr/bin: no bwrap
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("WARNING Local jobs run unsandboxed: bubblewrap is not installed") == 1, result.stderr
    assert "one SUCCEEDED" in result.stdout and "two SUCCEEDED" in result.stdout
    assert "refused: sandbox: required, but bubblewrap is not installed" in result.stdout
    assert "set the ml_training connection's local_sandbox extra to 'auto'" in result.stdout
    assert not (tmp_path / "ml2" / "jobs" / "three").exists()


@needs_sandbox
def test_a_job_reads_another_jobs_model_only_as_a_declared_input(tmp_path):
    """An evaluation reads its training job's model: declared in ``inputs`` it is shown read-only; a job that
    does not declare it sees nothing, and an input outside the jobs' artifacts is refused naming the field."""
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2)
    model = backend.root / "artifacts" / "trainer" / "model" / "model.txt"
    model.parent.mkdir(parents=True)
    model.write_text("weights")
    probe = f"""
        path = {str(model)!r}
        try:
            print("READ", open(path).read(), flush=True)
        except OSError as exc:
            print("DENIED", type(exc).__name__, flush=True)
        try:
            open(path, "a").write("tampered")
            print("WROTE", flush=True)
        except OSError:
            pass
    """
    assert backend.submit("evaluator", spec(probe, inputs=[str(model)]), {})
    assert backend.submit("stranger", spec(probe), {})
    assert final_status(backend, "evaluator").state is JobState.SUCCEEDED
    assert final_status(backend, "stranger").state is JobState.SUCCEEDED
    assert "READ weights" in job_log(backend, "evaluator") and "WROTE" not in job_log(backend, "evaluator")
    assert "DENIED" in job_log(backend, "stranger") and "WROTE" not in job_log(backend, "stranger")
    assert model.read_text() == "weights"
    with pytest.raises(JobSubmissionError, match=r"inputs: '.*owner\.key' is in a place jobs may not see"):
        backend.submit("snoop", spec(probe, inputs=[str(backend.root / "owner.key")]), {})


@needs_sandbox
def test_a_training_environment_under_tmp_is_shown_to_the_sandboxed_job(tmp_path, monkeypatch):
    """Each job's /tmp is its own and empty; an environment installed under the machine's /tmp (a clone
    or CI checkout there) is bound back read-only, so the job still finds its Python, while an
    $AIRFLOW_HOME inside it (as `make test` has it) stays hidden."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    assert str(env).startswith("/tmp/")
    home = env / "airflow-home"
    home.mkdir()
    (home / "airflow.cfg").write_text("fernet_key = secret")
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    backend = LocalBackend(tmp_path / "ml", image=str(env), cancel_grace_s=2)
    assert backend.submit("tmp-env", spec(f"""
        import os, sys
        print("prefix", sys.prefix, "home", os.listdir({str(home)!r}), flush=True)
    """), {})
    assert final_status(backend, "tmp-env").state is JobState.SUCCEEDED, job_log(backend, "tmp-env")
    assert sandboxed(backend, "tmp-env") and f"prefix {env} home []" in job_log(backend, "tmp-env")


@needs_sandbox
def test_a_training_environment_in_an_open_folder_under_tmp_is_reached_by_the_jobs_own_user(tmp_path):
    """A clone under /tmp (as CI's was: /tmp/ci/main/.venv-train, every folder 0755, $AIRFLOW_HOME and the local
    root inside the clone): the job's /tmp is its own, and the folders bubblewrap made there to show the
    environment again, or inside the hidden root within the shown clone to reach the job's model directory,
    were 0700, so the job's user could not start its Python, nor reach its directory ("Permission denied")."""
    open_folder = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        open_folder.chmod(0o755)
        env = open_folder / "clone"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        backend = LocalBackend(env / "ml", image=str(env), cancel_grace_s=2)
        model = env / "ml" / "artifacts" / "open-tmp" / "model"
        assert backend.submit("open-tmp", spec("""
            import os, sys
            open(os.path.join(os.environ["AIRFLOW_ML_MODEL_DIR"], "model.txt"), "w").write("weights")
            print("prefix", sys.prefix, flush=True)
        """, model_dir=str(model)), {})
        assert final_status(backend, "open-tmp").state is JobState.SUCCEEDED, job_log(backend, "open-tmp")
        assert f"prefix {env}" in job_log(backend, "open-tmp") and (model / "model.txt").read_text() == "weights"
    finally:
        shutil.rmtree(open_folder, ignore_errors=True)


@needs_sandbox
def test_an_editable_install_under_tmp_is_shown_to_its_job_but_not_the_checkout_around_it(tmp_path):
    """A training environment with an editable install (``pip install -e``, as `make training-env` installs this
    package) whose checkout lies under /tmp (CI's clone): the job imports the package through setuptools' finder,
    and reads nothing else of the checkout (its $AIRFLOW_HOME, its secrets)."""
    from setuptools.command.editable_wheel import (
        _finder_template,  # what setuptools writes for `pip install -e`
    )

    open_folder = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        open_folder.chmod(0o755)
        checkout, env = open_folder / "checkout", open_folder / "env"
        (checkout / "mypkg").mkdir(parents=True)
        (checkout / "mypkg" / "__init__.py").write_text("X = 'from the checkout'\n")
        (checkout / "secret.txt").write_text("not for jobs")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        [site] = env.glob("lib/python*/site-packages")
        (site / "__editable___mypkg_0_1_finder.py").write_text(
            _finder_template("__editable___mypkg_0_1_finder", {"mypkg": str(checkout / "mypkg")}, {}))
        (site / "__editable__.mypkg-0.1.pth").write_text(
            "import __editable___mypkg_0_1_finder; __editable___mypkg_0_1_finder.install()")
        for path in (checkout, checkout / "mypkg", checkout / "secret.txt"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        backend = LocalBackend(tmp_path / "ml", image=str(env), cancel_grace_s=2)
        assert backend.submit("editable", spec(f"""
            import mypkg
            print("imported", mypkg.X, flush=True)
            try:
                open({str(checkout / "secret.txt")!r}).read()
                print("read the checkout's secret", flush=True)
            except OSError:
                print("the checkout is hidden", flush=True)
        """), {})
        assert final_status(backend, "editable").state is JobState.SUCCEEDED, job_log(backend, "editable")
        log = job_log(backend, "editable")
        assert "imported from the checkout" in log and "the checkout is hidden" in log, log
    finally:
        shutil.rmtree(open_folder, ignore_errors=True)


@needs_sandbox
@needs_horovod
def test_a_horovod_job_runs_in_its_sandbox_whose_home_directory_it_cannot_write(tmp_path):
    """A fresh machine has no ``~/.horovod``: horovodrun created it (its cache of remote-host checks) and,
    the sandbox's filesystem being read-only, the first Horovod job of every new machine failed. Here
    the home directory does not exist and cannot be made; the job still trains nothing but succeeds."""
    home = Path("/") / f"no-home-{secrets.token_hex(6)}"  # (the job's own: a sandboxed job's default is its /tmp)
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2)
    job = TrainingJobSpec(framework="horovod", command=["python", "-c", "print('rank up', flush=True)"],
                          num_workers=2, env={"HOME": str(home)})
    assert backend.submit("hvd-home", job, {})
    assert final_status(backend, "hvd-home").state is JobState.SUCCEEDED, job_log(backend, "hvd-home")
    assert sandboxed(backend, "hvd-home") and job_log(backend, "hvd-home").count("rank up") == 2
    assert not home.exists()


@needs_sandbox
def test_a_file_under_the_machines_tmp_named_in_the_command_is_not_seen_and_the_submit_says_so(tmp_path, caplog):
    """Each job's /tmp is its own: a data file under the machine's /tmp that the command names is not
    there for the job, and the submit warns naming it; declared in ``inputs`` the job reads it."""
    data = tmp_path / "train.csv"
    data.write_text("rows")
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE), cancel_grace_s=2)
    reader = TrainingJobSpec(framework="generic", num_workers=1, command=[
        "python", "-c", "import sys; print('READ', open(sys.argv[1].partition('=')[2]).read(), flush=True)",
        f"--data={data}"])
    with caplog.at_level("WARNING", logger="airflow_ml_provider.jobs.backends.local.backend"):
        assert backend.submit("unseen", reader, {})
    assert f"Job unseen names {data} under /tmp, which it will not see" in caplog.text
    assert final_status(backend, "unseen").state is JobState.FAILED
    assert "FileNotFoundError" in job_log(backend, "unseen")
    caplog.clear()
    with caplog.at_level("WARNING", logger="airflow_ml_provider.jobs.backends.local.backend"):
        assert backend.submit("declared", reader.model_copy(update={"inputs": [str(data)]}), {})
    assert "will not see" not in caplog.text
    assert final_status(backend, "declared").state is JobState.SUCCEEDED
    assert "READ rows" in job_log(backend, "declared")


@needs_sandbox
def test_airflows_db_logs_and_secrets_files_are_hidden_wherever_its_configuration_puts_them(tmp_path):
    """An airflow.cfg that keeps the SQLite metadata DB (and its write-ahead log), the task logs and a local secrets backend's file
    outside $AIRFLOW_HOME (read through Airflow's configuration by the hook, not from the environment):
    before, a sandboxed job read all three; unsandboxed (``local_sandbox: off``) it still does."""
    home = tmp_path / "home"
    home.mkdir()
    # Not under /tmp, which a sandboxed job never sees anyway: beside this test's own Airflow home, which the
    # job's submitter (AIRFLOW_HOME=home) does not know of.
    outside = Path(os.environ["AIRFLOW_HOME"]) / f"elsewhere-{secrets.token_hex(4)}"
    try:
        _configured_elsewhere(tmp_path, home, outside)
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def _configured_elsewhere(tmp_path: Path, home: Path, outside: Path) -> None:
    (outside / "logs" / "dag_id=d").mkdir(parents=True)
    files = {"db": outside / "meta.db", "wal": outside / "meta.db-wal", "log": outside / "logs" / "dag_id=d" / "attempt=1.log",
             "secrets": outside / "connections.json"}
    for path in files.values():
        path.write_text(f"canary {secrets.token_hex(8)}")
    (home / "airflow.cfg").write_text(textwrap.dedent(f"""\
        [database]
        sql_alchemy_conn = sqlite:///{files["db"]}
        [logging]
        base_log_folder = {outside / "logs"}
        [secrets]
        backend_kwargs = {{"connections_file_path": "{files["secrets"]}"}}
    """))
    probe = "import json, sys\nfor path in json.loads(sys.argv[1]):\n    try:\n        open(path).read()\n" \
            "        print('READ', path, flush=True)\n    except OSError:\n        print('DENIED', path, flush=True)\n"
    script = textwrap.dedent(f"""
        import json, os, time
        from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
        from airflow_ml_provider.jobs.spec import TrainingJobSpec
        for mode in ("auto", "off"):
            os.environ["AIRFLOW_CONN_ML_TRAINING_DEFAULT"] = json.dumps({{"conn_type": "ml_training", "extra": {{
                "local_root": {str(tmp_path / "ml")!r}, "local_image": {str(TRAINING_IMAGE)!r}, "local_sandbox": mode}}}})
            backend = TrainingBackendHook().get_backend("local")
            backend.submit(mode, TrainingJobSpec(framework="generic", num_workers=1, command=[
                "python", "-c", {probe!r}, json.dumps({[str(p) for p in files.values()]!r})]), {{}})
            while not backend.status(mode).state.is_terminal:
                time.sleep(0.1)
            print(mode, backend.status(mode).state.value, open(backend.job_dir(mode) / "output.log").read(), flush=True)
    """)
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW__")}
    result = subprocess.run([sys.executable, "-c", script], env={**env, "AIRFLOW_HOME": str(home)},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    sandboxed_part, unsandboxed_part = result.stdout.split("\noff ", 1)
    assert "auto SUCCEEDED" in sandboxed_part, result.stdout
    for path in files.values():
        assert f"DENIED {path}" in sandboxed_part, sandboxed_part
        assert f"READ {path}" in unsandboxed_part, unsandboxed_part


@needs_sandbox
def test_a_bubblewrap_that_dies_before_starting_the_sandbox_fails_the_job_with_its_reason(tmp_path, monkeypatch):
    """The launcher waits for bubblewrap to report its sandbox's process (``--info-fd``) before bounding it: a
    bubblewrap that exits first (a mount it may not make, here one that says so and exits 1) is the job's failure,
    its own words in the job's log, and nothing hangs or runs unbounded."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\necho \"bwrap: Can't mount proc on /newroot/proc: Operation not permitted\""
                                " >&2\nexit 1\n")
    (fake / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    backend = LocalBackend(tmp_path / "ml", image=str(TRAINING_IMAGE))
    backend.submit("no-sandbox", spec("print('ran')"), {})
    status = final_status(backend, "no-sandbox")
    assert status.state is JobState.FAILED
    assert "bubblewrap did not start the job's sandbox" in status.message, status.message
    log = job_log(backend, "no-sandbox")
    assert "sandbox: bwrap: Can't mount proc on /newroot/proc: Operation not permitted" in log, log
    assert "] ran" not in log, log
