"""Log rules: which lines end a wait (succeed, fail, retry) and which carry metrics, as regexes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from math import isfinite
from operator import attrgetter
from typing import Any

from airflow_ml_provider.logs.source import LogLine

STEP_GROUP = "step"  # a metric regex's group of this name numbers the step instead of being a metric


class Verdict(str, Enum):
    SUCCEED = "succeed"
    FAIL = "fail"  # the job cannot succeed by retrying (a user error: out of memory, bad data)
    RETRY = "retry"  # an infrastructure failure: another try may succeed


@dataclass(frozen=True)
class RuleMatch:
    verdict: Verdict
    pattern: str
    line: LogLine

    def to_dict(self) -> dict[str, str]:
        return {"verdict": self.verdict.value, "pattern": self.pattern, "source": self.line.source,
                "line": self.line.text}


_REFERS_TO_GROUP = re.compile(r"\\(?:[1-9]|g<)|\(\?P=|\(\?\(")  # \1, \g<name>, (?P=name), (?(1)...)


class LogRules:
    """Regexes searched in every line. When one line matches several kinds, fail wins over retry and
    retry over succeed: a line that says both "finished" and "NCCL timeout" is not a success.

    Args:
        succeed_on / fail_on / retry_on: regexes (``re.search``) deciding the verdict.
        metrics: regexes whose named groups are numeric metrics, e.g. ``loss=(?P<loss>[0-9.e-]+)``;
            a group named ``step`` numbers the observation instead.

    Raises:
        ValueError naming the offending argument, index and pattern when a regex is invalid or a
        metric regex has no named group.
    """

    def __init__(self, succeed_on: list[str] | None = None, fail_on: list[str] | None = None,
                 retry_on: list[str] | None = None, metrics: list[str] | None = None):
        self.patterns = {"succeed_on": list(succeed_on or []), "fail_on": list(fail_on or []),
                         "retry_on": list(retry_on or []), "metrics": list(metrics or [])}
        compiled = {name: [_compile(name, i, pattern) for i, pattern in enumerate(patterns)]
                    for name, patterns in self.patterns.items()}
        for i, regex in enumerate(compiled["metrics"]):
            if not set(regex.groupindex) - {STEP_GROUP}:
                raise ValueError(f"metrics[{i}]: {regex.pattern!r} has no named group to take a metric from, "
                                 "e.g. loss=(?P<loss>[0-9.]+)")
        self._ordered = [(Verdict.FAIL, compiled["fail_on"]), (Verdict.RETRY, compiled["retry_on"]),
                         (Verdict.SUCCEED, compiled["succeed_on"])]
        verdicts = compiled["fail_on"] + compiled["retry_on"] + compiled["succeed_on"]
        self._has_verdicts, self._any = bool(verdicts), _union(verdicts)
        # A substring each rule's every match contains (None where one has none known): a batch of lines
        # none of them occurs in is given no verdict, or no metric, without a search per line.
        self._verdict_literals = _literals(verdicts)
        self._metric_literals = _literals(compiled["metrics"])
        # Each metric regex's search and its named groups' positions in ``match.groups()`` (a tuple: cheaper
        # to make than ``groupdict()``, once per metric line).
        self._metrics = [(regex.search, [(name, index - 1) for name, index in regex.groupindex.items()])
                         for regex in compiled["metrics"]]
        self.has_metrics = bool(self._metrics)
        self.metric_names = frozenset(name for regex in compiled["metrics"] for name in regex.groupindex
                                      if name != STEP_GROUP)

    def check(self, line: LogLine) -> RuleMatch | None:
        """The verdict this line gives, if any. Most lines match no rule: one search of all the rules at
        once says so, and only a line that matches is searched rule by rule for the verdict."""
        if self._any is not None and not self._any.search(line.text):
            return None
        for verdict, regexes in self._ordered:
            for regex in regexes:
                if regex.search(line.text):
                    return RuleMatch(verdict, regex.pattern, line)
        return None

    def first_match(self, lines: Sequence[LogLine]) -> tuple[int, RuleMatch | None]:
        """How many of ``lines`` come up to the first that a rule gives a verdict (that line included), and
        the verdict: ``(len(lines), None)`` when none does. One search per line, of all the rules at once."""
        if self._has_verdicts and _may_occur(self._verdict_literals, lines):
            search = self._any.search if self._any is not None else None
            for index, line in enumerate(lines):
                if (search is None or search(line.text)) and (match := self.check(line)) is not None:
                    return index + 1, match
        return len(lines), None

    def metrics_may_match(self, lines: Sequence[LogLine]) -> bool:
        """False where no metric regex can match any of ``lines`` (none of their required substrings occurs)."""
        return self.has_metrics and _may_occur(self._metric_literals, lines)

    def metrics_in(self, text: str) -> tuple[dict[str, float], int | None]:
        """Numeric named groups of every metric regex matching ``text``, and the step if one names it."""
        values: dict[str, float] = {}
        step = None
        for search, groups in self._metrics:
            if (match := search(text)) is None:
                continue
            found = match.groups()
            for name, index in groups:
                try:
                    number = float(found[index])  # a group that did not take part is None: a TypeError
                except (TypeError, ValueError):
                    continue
                if not isfinite(number):
                    continue
                if name == STEP_GROUP:
                    step = int(number)
                else:
                    values[name] = number
        return values, step

    def to_dict(self) -> dict[str, list[str]]:
        return {name: list(patterns) for name, patterns in self.patterns.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LogRules:
        return cls(**data)


def _union(regexes: list[re.Pattern]) -> re.Pattern | None:
    """One regex that matches a line exactly when one of ``regexes`` does (the only one itself), or None for
    none, and where joining them could change a pattern's meaning (a reference to a group by number or
    name, an inline flag that must come first) or fails (a group name used twice): then each is searched
    alone."""
    if len(regexes) < 2:
        return regexes[0] if regexes else None
    if any(_REFERS_TO_GROUP.search(regex.pattern) for regex in regexes):
        return None
    try:
        return re.compile("|".join(f"(?:{regex.pattern})" for regex in regexes))
    except re.error:
        return None


_SPECIAL = frozenset("\\.^$*+?{}[]|()")
_TEXT = attrgetter("text")


def _literals(regexes: list[re.Pattern]) -> list[str] | None:
    """A substring every match of each regex contains, or None where one has none known: its leading
    plain characters (the last one dropped where a quantifier may make it optional); none where an
    alternation, an ignore-case or verbose flag, or an escape comes first."""
    literals = []
    for regex in regexes:
        pattern = regex.pattern
        end = 0
        while end < len(pattern) and pattern[end] not in _SPECIAL:
            end += 1
        if end < len(pattern) and pattern[end] in "*?{":
            end -= 1
        if end <= 0 or "|" in pattern or regex.flags & (re.IGNORECASE | re.VERBOSE):
            return None
        literals.append(pattern[:end])
    return literals


def _may_occur(literals: list[str] | None, lines: Sequence[LogLine]) -> bool:
    """Whether one of ``literals`` occurs in one of the lines (True where ``literals`` is None): one scan
    of the joined text per literal (joining may add matches across lines, never lose one)."""
    if literals is None:
        return True
    text = "\n".join(map(_TEXT, lines))
    return any(literal in text for literal in literals)


def _compile(name: str, index: int, pattern: Any) -> re.Pattern:
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"{name}[{index}]: expected a non-empty regular expression string, got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{name}[{index}]: invalid regular expression {pattern!r}: {exc}") from None
