"""Offline validation of rendered manifests: what an API server of the supported Kubernetes range would refuse,
and what it would drop without a word, with no cluster.

- **Built-in kinds** (batch/v1 Job, v1 Service, RBAC, ...) against the strict JSON schemas of the oldest and newest
  Kubernetes the provider supports (``KUBERNETES_VERSIONS``), from PyPI's ``kubernetes-validate`` (the
  ``kubernetes`` extra): strict means a field the release does not declare is an error. Every error is reported.
- **CRD kinds** (MPIJob, Volcano Job, TrainJob and the training runtimes, JobSet, Kueue's objects) against the
  ``openAPIV3Schema`` of the CRD pinned in requirements/crds.lock, with every field the schema does not declare
  an error: an API server prunes such a field silently (structural schemas,
  ``x-kubernetes-preserve-unknown-fields`` aside), so the job would run without it. ``nullable`` and
  ``x-kubernetes-int-or-string`` are honoured; CEL rules (``x-kubernetes-validations``) are not evaluated. A CRD
  instance's own ``metadata`` is ObjectMeta, checked as the built-in kinds' is.

Where the CRD schemas come from at run time: the package itself (``crds/``, beside this module): each pinned CRD
file byte for byte (gzip-compressed), with a copy of requirements/crds.lock, and each file's sha256 checked
against that lock before it is read, so a damaged or edited copy is refused naming the file. Nothing is fetched:
a check runs where CI has no network and no local mirror. The files are the upstream projects' (Kubeflow MPI
operator and Trainer, Volcano, JobSet, Kueue), all Apache-2.0, as crds/NOTICE says; ``python
scripts/fetch_crds.py --package`` writes them from the verified cache when the lock changes, and
tests/unit/jobs/backends/test_offline_validation.py fails while they differ from it.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

# The Kubernetes releases the provider supports, oldest and newest (docs/cluster.md): every manifest is checked
# against both. The newest is the newest release kubernetes-validate 1.37.0 has schemas for.
KUBERNETES_VERSIONS = ("1.29", "1.37")
PACKAGED_CRDS = Path(__file__).resolve().parent / "crds"
_INSTALL = "pip install 'airflow-ml-provider[kubernetes]'"


class SchemaError(RuntimeError):
    """A pinned CRD that cannot be read as pinned (missing, or not the lock's bytes)."""


@dataclass(frozen=True)
class _Pin:
    file: str
    repo: str
    ref: str
    path: str
    sha256: str

    @property
    def source(self) -> str:
        return f"{self.repo}@{self.ref}:{self.path}"


def _pins(folder: Path) -> list[_Pin]:
    """The rows of the packaged lock (the same table scripts/fetch_crds.py reads)."""
    pins = []
    for line in (folder / "crds.lock").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 5 and cells[0] != "file" and not set(cells[0]) <= {"-"}:
            pins.append(_Pin(*cells))
    return pins


@lru_cache(maxsize=None)
def _crd_documents(folder: Path, file: str, sha256: str) -> tuple[dict, ...]:
    packed = folder / f"{file}.gz"
    try:
        data = gzip.decompress(packed.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise SchemaError(f"CRD {file}: cannot read {packed} ({exc})") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SchemaError(f"CRD {file}: {packed} is not the file requirements/crds.lock pins (sha256 "
                          f"{hashlib.sha256(data).hexdigest()}, pinned {sha256}); reinstall the package, or run "
                          "scripts/fetch_crds.py --package")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(doc for doc in yaml.load_all(data, Loader=loader) if doc and doc.get("kind") == "CustomResourceDefinition")


@lru_cache(maxsize=None)
def crd_schema(api_version: str, kind: str, folder: Path = PACKAGED_CRDS) -> tuple[dict, str] | None:
    """(the JSON Schema an instance of ``api_version``/``kind`` is checked against, its CRD's source) from the
    pinned CRDs, or None when no pinned CRD serves it. Only the files of the kind's API group are read."""
    group, _, version = api_version.rpartition("/")
    if not group:
        return None
    for pin in _pins(folder):
        if not Path(pin.file).name.startswith(f"{group}_"):
            continue
        for crd in _crd_documents(folder, pin.file, pin.sha256):
            spec = crd["spec"]
            if spec["group"] != group or spec["names"]["kind"] != kind:
                continue
            for served in spec["versions"]:
                if served["name"] == version:
                    schema = (served.get("schema") or spec.get("validation") or {}).get("openAPIV3Schema")
                    if schema is None:
                        raise SchemaError(f"CRD {pin.file}: {kind} {version} has no openAPIV3Schema")
                    return _closed(schema, root=True), f"CRD {pin.source}"
    return None


def _closed(node: Any, root: bool = False, branch: bool = False) -> Any:
    """``node`` (a structural OpenAPI v3 schema) as a JSON Schema in which a field the schema does not declare is
    an error, as a server's pruning would drop it: an object schema without ``additionalProperties`` and without
    ``x-kubernetes-preserve-unknown-fields`` admits only its ``properties``. Inside ``allOf``/``anyOf``/``oneOf``/
    ``not`` (``branch``) nothing is closed: a structural schema declares its fields outside them, and a branch only
    restates some of them (closing it would refuse the others)."""
    if not isinstance(node, dict):
        return node
    out = {key: value for key, value in node.items() if key not in ("description", "x-kubernetes-validations")}
    for key in ("properties", "patternProperties"):
        if key in out:
            out[key] = {name: _closed(sub, branch=branch) for name, sub in out[key].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _closed(out[key], branch=branch)
    if isinstance(out.get("not"), dict):
        out["not"] = _closed(out["not"], branch=True)
    for key in ("allOf", "anyOf", "oneOf"):
        if key in out:
            out[key] = [_closed(sub, branch=True) for sub in out[key]]
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("anyOf", None)
        out["type"] = ["integer", "string"]
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    embedded = out.pop("x-kubernetes-embedded-resource", False)
    preserve = out.pop("x-kubernetes-preserve-unknown-fields", False)
    if root:
        out.setdefault("properties", {})["metadata"] = {"type": "object"}  # ObjectMeta: checked on its own
    is_object = out.get("type") == "object" or "properties" in out
    if is_object and not preserve and not branch and "additionalProperties" not in out:
        if embedded:
            props = out.setdefault("properties", {})
            for name in ("apiVersion", "kind"):
                props.setdefault(name, {"type": "string"})
            props.setdefault("metadata", {"type": "object"})
        out["additionalProperties"] = False
    return out


def _where(path) -> str:
    parts = []
    for part in path:
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    return "".join(parts).lstrip(".") or "(the object)"


def _message(error) -> str:
    if error.validator == "additionalProperties" and error.validator_value is False:
        declared = set(error.schema.get("properties") or {})
        extra = sorted(set(error.instance) - declared) if isinstance(error.instance, dict) else []
        names = ", ".join(repr(name) for name in extra)
        return f"undeclared field{'s' if len(extra) > 1 else ''} {names} (the API server would drop it)"
    return error.message


def validate(obj: dict, versions: tuple[str, ...] = KUBERNETES_VERSIONS, crds: Path = PACKAGED_CRDS) -> list[str]:
    """What is wrong with ``obj`` offline, one line per error naming the object, the field and the schema checked;
    empty when it passes. Raises ``SchemaError`` for a pinned CRD that cannot be read as pinned, and
    ``ModuleNotFoundError`` (naming the extra) without kubernetes-validate."""
    import jsonschema

    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    what = f"{kind} {(obj.get('metadata') or {}).get('name', '?')}"
    if not isinstance(kind, str) or not isinstance(api_version, str):
        return [f"{what}: apiVersion and kind must be strings"]
    found = crd_schema(api_version, kind, crds)
    if found is None:
        return _builtin(obj, what, versions)
    schema, source = found
    validator = jsonschema.Draft202012Validator(schema)
    errors = [f"{what}: {_where(e.absolute_path)}: {_message(e)} ({source})"
              for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]
    if isinstance(obj.get("metadata"), dict):  # the server's ObjectMeta, the same for every kind
        meta = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}
        errors += _builtin(meta, what, versions)
    return errors


def _builtin(obj: dict, what: str, versions: tuple[str, ...]) -> list[str]:
    try:
        import kubernetes_validate
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(f"offline validation of built-in kinds needs kubernetes-validate ({_INSTALL})",
                                  name=exc.name) from None
    errors = []
    for version in versions:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as first:
            errors += [f"{what}: {_where(error.absolute_path)}: {_message(error)} (Kubernetes {version})"
                       for error in _every_error(obj, version) or [first]]
        except kubernetes_validate.SchemaNotFoundError:
            errors.append(f"{what}: Kubernetes {version} has no {obj['apiVersion']} {obj['kind']}, and no pinned "
                          "CRD serves it")
    return errors


def _every_error(obj: dict, version: str) -> list:
    """Every error of a built-in object under ``version``'s strict schema, where kubernetes-validate reports the
    first only: its own schema files, read as ``kubernetes_validate.validate`` reads them (kubernetes-validate
    1.37.0 utils.py); empty where that layout is not found, and the caller keeps the first error."""
    import re

    import jsonschema
    from kubernetes_validate import utils
    from referencing import Registry, Resource

    try:
        folder = f"kubernetes-json-schema/v{version}.0-local-strict"
        group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", obj["apiVersion"])
        schema = utils.schema_contents(f"{folder}/{obj['kind'].lower()}-{group_version}.json", version)
        definitions = utils.schema_contents(f"{folder}/_definitions.json", version)
        registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
        validator = jsonschema.validators.Draft202012Validator(schema, registry=registry)
        return sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    except Exception:  # noqa: BLE001 - another layout: the first error still stands
        return []


def validate_all(objs: list[dict], versions: tuple[str, ...] = KUBERNETES_VERSIONS) -> list[str]:
    return [error for obj in objs for error in validate(copy.deepcopy(obj), versions)]
