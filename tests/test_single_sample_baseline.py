"""`fasttts eval --single-sample-baseline`: one greedy sample beside the search (issue 18)."""

from __future__ import annotations

import json

from fasttts.cli import main
from fasttts.eval.metrics import summarize


def _run(out, *extra):
    return main(["eval", "--backend", "sim", "--dataset", "gsm8k", "--limit", "2", "--method",
                 "beam_search", "--n", "8", "--output-dir", str(out), *extra])


def test_records_and_summary_hold_the_baseline(tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(out, "--single-sample-baseline") == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    singles = [r["single_sample"] for r in records]
    assert all(set(s) == {"answer", "correct", "num_tokens", "latency_s"} for s in singles)
    assert all(s["num_tokens"] > 0 for s in singles)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["single_sample"]["accuracy"] == sum(s["correct"] for s in singles) / 2
    assert json.loads((out / "config.json").read_text())["single_sample_baseline"] == {
        "method": "self_consistency", "n": 1, "beam_width": 1, "temperature": 0.0}
    assert "accuracy of one greedy sample" in capsys.readouterr().out
    # the same folder without the baseline is another configuration
    assert _run(out) == 2
    assert "another configuration (single_sample_baseline:" in capsys.readouterr().err


def test_summary_without_baseline_is_unchanged():
    record = {"latency_s": 1.0, "precise_goodput_tok_s": 2.0, "generator_time_s": 0.5,
              "verifier_time_s": 0.5, "tokens_generated": 10, "mean_tokens_per_beam": 5,
              "num_completions": 2}
    assert "single_sample" not in summarize([record])
    both = [record | {"single_sample": {"answer": "1", "correct": c, "num_tokens": t,
                                        "latency_s": 2.0}} for c, t in ((True, 10), (False, 30))]
    assert summarize(both)["single_sample"] == {"accuracy": 0.5, "num_tokens": 20, "latency_s": 2.0}
    assert "single_sample" not in summarize(both[:1] + [record])  # only when every record has it


def test_baseline_drops_the_methods_own_parameters(tmp_path):
    out = tmp_path / "sart"
    assert main(["eval", "--backend", "sim", "--dataset", "gsm8k", "--limit", "1", "--method",
                 "sart", "--n", "8", "--sart-t", "32", "--single-sample-baseline",
                 "--output-dir", str(out)]) == 0
    record = json.loads((out / "results.jsonl").read_text())
    assert record["single_sample"]["num_tokens"] > 0
