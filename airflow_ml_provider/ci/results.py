"""A check's results and the three ways CI reads them: text lines, JSON, JUnit XML (one test suite per
DAG or recipe file, one test case per task or job, as CI systems show them)."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ElementTree
from dataclasses import asdict, dataclass, field


@dataclass
class Case:
    """One checked thing (a DAG file's import, a task's job, a recipe).

    ``status``: ``ok``, ``failed`` (a finding: ``message`` says what, at ``file``:``line``), ``warning`` (what
    the DAG processor warns of, e.g. a recipes folder that does not exist; not a finding) or ``skipped`` (not
    checkable here, ``message`` says why)."""

    suite: str
    name: str
    file: str
    line: int = 1
    status: str = "ok"
    message: str = ""
    details: list[str] = field(default_factory=list)  # what was checked: backends, manifests sent

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def findings(cases: list[Case]) -> list[Case]:
    return [case for case in cases if case.status == "failed"]


@dataclass
class Recipes:
    """How many recipes a check found: recipe DAGs the DAG files made, recipe files checked themselves."""

    dags: int = 0
    files: int = 0

    def __str__(self) -> str:
        return f"recipes: {self.dags} DAG(s) from DAG files, {self.files} file(s)"


def as_text(cases: list[Case], recipes: Recipes) -> str:
    """One line per finding (``file:line: suite/name: message``), warning and skip, then a one-line count."""
    lines = [f"{case.where}: {case.suite}/{case.name}: {case.message}" for case in findings(cases)]
    for status in ("warning", "skipped"):
        lines += [f"{case.where}: {case.suite}/{case.name}: {status}: {case.message}"
                  for case in cases if case.status == status]
    failed, warned, skipped = (sum(case.status == status for case in cases) for status in ("failed", "warning", "skipped"))
    lines.append(f"airflow-ml check: {len(cases)} checked, {failed} finding(s), {warned} warning(s), {skipped} "
                 f"skipped; {recipes}")
    return "\n".join(lines)


def as_json(cases: list[Case], recipes: Recipes) -> str:
    return json.dumps({"findings": len(findings(cases)), "recipes": asdict(recipes),
                       "cases": [asdict(case) for case in cases]}, indent=2)


def as_junit(cases: list[Case], recipes: Recipes) -> str:
    """JUnit XML: ``testsuites/testsuite[@name]/testcase[@classname,@name,@file,@line]`` with a
    ``failure`` (finding) or ``skipped`` child."""
    root = ElementTree.Element("testsuites", name="airflow-ml check")
    suites: dict[str, ElementTree.Element] = {}
    for case in cases:
        suite = suites.get(case.suite)
        if suite is None:
            suite = suites[case.suite] = ElementTree.SubElement(root, "testsuite", name=case.suite)
        test = ElementTree.SubElement(suite, "testcase", classname=case.suite, name=case.name,
                                      file=case.file, line=str(case.line))
        if case.status == "failed":
            failure = ElementTree.SubElement(test, "failure", message=_attribute(case.message), type="finding")
            failure.text = f"{case.where}: {case.message}"
        elif case.status == "skipped":
            ElementTree.SubElement(test, "skipped", message=_attribute(case.message))
        elif case.status == "warning":
            ElementTree.SubElement(test, "system-err").text = f"{case.where}: warning: {case.message}"
        if case.details:
            ElementTree.SubElement(test, "system-out").text = "\n".join(case.details)
    for name, suite in suites.items():
        members = [case for case in cases if case.suite == name]
        suite.set("tests", str(len(members)))
        suite.set("failures", str(sum(case.status == "failed" for case in members)))
        suite.set("skipped", str(sum(case.status == "skipped" for case in members)))
        suite.set("errors", "0")
    properties = ElementTree.SubElement(root, "properties")
    for name, value in asdict(recipes).items():
        ElementTree.SubElement(properties, "property", name=f"recipe_{name}", value=str(value))
    root.set("tests", str(len(cases)))
    root.set("failures", str(len(findings(cases))))
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True)


def _attribute(text: str) -> str:
    """XML 1.0 cannot carry most control characters, even escaped: they are dropped from attributes."""
    return "".join(ch for ch in text if ch in "\t\n\r" or ord(ch) >= 0x20)[:2000]


def relative(path: str) -> str:
    """A path as CI shows it: relative to the working directory when below it."""
    try:
        shown = os.path.relpath(path)
    except ValueError:
        return path
    return path if shown.startswith("..") else shown
