"""LogRules: a verdict per line with fail > retry > succeed, metric groups, errors naming the argument."""

from __future__ import annotations

import pytest

from airflow_ml_provider.logs.rules import LogRules, Verdict
from airflow_ml_provider.logs.source import LogLine

RULES = LogRules(succeed_on=[r"Training finished"], fail_on=[r"CUDA out of memory", r"NCCL.*timeout"],
                 retry_on=[r"Connection reset by peer"],
                 metrics=[r"loss=(?P<loss>[0-9.]+)", r"epoch (?P<step>\d+).*acc=(?P<acc>[0-9.]+)"])


@pytest.mark.parametrize(
    ("text", "verdict", "pattern"),
    [("Training finished in 3 epochs", Verdict.SUCCEED, "Training finished"),
     ("RuntimeError: CUDA out of memory", Verdict.FAIL, "CUDA out of memory"),
     ("NCCL WARN socket timeout", Verdict.FAIL, "NCCL.*timeout"),
     ("recv: Connection reset by peer", Verdict.RETRY, "Connection reset by peer"),
     ("Training finished; Connection reset by peer", Verdict.RETRY, "Connection reset by peer"),
     ("Connection reset by peer after NCCL timeout", Verdict.FAIL, "NCCL.*timeout")],
)
def test_verdict_and_precedence(text, verdict, pattern):
    match = RULES.check(LogLine("pod-0", text))
    assert (match.verdict, match.pattern, match.line) == (verdict, pattern, LogLine("pod-0", text))
    assert match.to_dict() == {"verdict": verdict.value, "pattern": pattern, "source": "pod-0", "line": text}


def test_ordinary_lines_have_no_verdict():
    assert RULES.check(LogLine("pod-0", "epoch 3 loss=0.2")) is None


def test_metric_groups_and_step():
    assert RULES.metrics_in("epoch 7 loss=0.25 acc=0.91") == ({"loss": 0.25, "acc": 0.91}, 7)
    assert RULES.metrics_in("loss=nan") == ({}, None)  # non-numbers and non-finite values are not metrics
    assert RULES.metrics_in("nothing here") == ({}, None)


def test_round_trip_through_a_dict():
    assert LogRules.from_dict(RULES.to_dict()).to_dict() == RULES.to_dict()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"fail_on": ["ok", "NCCL("]}, r"fail_on\[1\]: invalid regular expression 'NCCL\('"),
     ({"retry_on": [""]}, r"retry_on\[0\]: expected a non-empty regular expression"),
     ({"metrics": [r"loss=([0-9.]+)"]}, r"metrics\[0\]: .* has no named group"),
     ({"metrics": [r"step=(?P<step>\d+)"]}, r"metrics\[0\]: .* has no named group")],
)
def test_invalid_rules_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LogRules(**kwargs)


@pytest.mark.parametrize(("rules", "joined"), [
    ({"fail_on": [r"CUDA out of memory", r"NCCL.*timeout"], "retry_on": [r"connection reset"],
      "succeed_on": [r"Training finished", r"^done$"]}, True),
    # joining these could change their meaning or fails: each is searched alone, with the same verdicts
    ({"fail_on": [r"(\w+) \1 again"], "retry_on": [r"(?P<w>x)(?P=w)"], "succeed_on": [r"Training finished"]}, False),
    ({"fail_on": [r"(?i)nccl.*TIMEOUT"], "succeed_on": [r"(?P<a>Training) finished"], "retry_on": [r"(?P<a>b)"]},
     False),
    ({"succeed_on": [r"^done$"]}, True),  # one rule: searched as it is
    ({"metrics": [r"loss=(?P<loss>[0-9.]+)"]}, False),  # no verdict rule: no line has a verdict
])
def test_a_line_gets_the_verdict_of_its_first_matching_kind_whether_rules_are_joined_or_not(rules, joined):
    """What one search of all rules at once decides equals searching each rule alone (fail, then retry,
    then succeed), including rules that cannot be joined."""
    import re

    lines = ["epoch 1 loss=0.5", "NCCL watchdog timeout", "nccl TIMEOUT", "Training finished", "done", "done!",
             "Training finished but CUDA out of memory", "connection reset; Training finished", "oops oops again",
             "xx", "b", ""]
    checked = LogRules(**rules)
    assert (checked._any is not None) is joined
    for text in lines:
        expected = next(((verdict, pattern) for verdict, kind in ((Verdict.FAIL, "fail_on"),
                         (Verdict.RETRY, "retry_on"), (Verdict.SUCCEED, "succeed_on"))
                         for pattern in rules.get(kind, []) if re.search(pattern, text)), None)
        match = checked.check(LogLine("rank 0", text))
        assert (match and (match.verdict, match.pattern)) == expected, text
    # a batch is taken up to its first line with a verdict, that line included
    batch = [LogLine("rank 0", text) for text in lines]
    first = next((i for i, line in enumerate(batch) if checked.check(line)), None)
    taken, match = checked.first_match(batch)
    assert (taken, match) == ((first + 1, checked.check(batch[first])) if first is not None else (len(batch), None))


@pytest.mark.parametrize("patterns", [
    [r"Training finished", r"NCCL.*timeout", r"ab?c"],  # each has a required literal: batches are prefiltered
    [r"Training finished", r"(?i)nccl.*timeout", r"ab?c|zzz"],  # some have none: every line is searched
])
def test_the_batch_prefilter_gives_the_same_verdicts_as_a_search_per_line(patterns):
    rules = LogRules(fail_on=patterns)
    texts = ["step 1", "NCCL WARN socket timeout", "ac", "abc", "Training", "finished", "x Training finished"]
    for text in texts:
        for before in ([], ["step 0"] * 3):
            lines = [LogLine("p", t) for t in [*before, text, "after"]]
            expected = next(((i + 1, m) for i, line in enumerate(lines) if (m := rules.check(line))), (len(lines), None))
            assert rules.first_match(lines) == expected, (patterns, text)
    # the literal split across two lines is no match: joined text only ever adds candidates
    assert rules.first_match([LogLine("p", "Training"), LogLine("p", "finished")]) == (2, None)


def test_metrics_are_searched_only_in_batches_that_can_carry_them():
    assert not RULES.metrics_may_match([LogLine("p", "step 1"), LogLine("p", "los s=1")])
    assert RULES.metrics_may_match([LogLine("p", "step 1"), LogLine("p", "loss=0.5")])
    assert LogRules(metrics=[r"(?P<loss>\d+) loss"]).metrics_may_match([LogLine("p", "no metric")])  # no literal known
