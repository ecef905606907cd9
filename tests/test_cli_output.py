"""What `fasttts solve`, `eval` and `plan` print: model text as plain text (never rich markup),
progress within a problem, the skipped problems of a rerun, self-explaining plans, help."""

from __future__ import annotations

import re

import pytest

from fasttts.cli import build_parser, main
from fasttts.verifiers.base import Verifier
from tests.scripted import ScriptedGenerator

# A path whose steps and answer hold rich markup, LaTeX brackets and unbalanced brackets.
STEPS = ["Close a tag that was never opened: [/x] and [bold]",
         r"\[ 15\% \text{ of } 80 = 0.15 \times 80 \]",
         "Unbalanced [[red] brackets ]] and [link=x]",
         r"So the answer is \boxed{[/x]12}"]


class _Constant(Verifier):
    name = "constant"

    def score(self, requests):
        return [[0.5] * (len(r.steps) - r.start) for r in requests]


@pytest.fixture
def scripted_backend(monkeypatch):
    """`--backend sim` builds the scripted engine: beam 1 writes STEPS, then stops."""
    import fasttts.backends.sim as sim

    def build(_cfg):
        return ScriptedGenerator({1: "\n\n".join(STEPS) + "<eos>"}, chars_per_step=50), _Constant()

    monkeypatch.setattr(sim, "build_sim", build)
    monkeypatch.setenv("COLUMNS", "200")


def test_solve_prints_model_text_verbatim(scripted_backend, capsys):
    assert main(["solve", "What is 15% of 80?", "--backend", "sim", "--method", "best_of_n",
                 "--n", "1"]) == 0
    out = capsys.readouterr().out
    for step in STEPS:
        assert step in out  # each step exactly as generated, brackets and all
    assert "answer (PRM-weighted vote): [/x]12" in out
    assert "PRM-weighted vote: [/x]12   majority vote: [/x]12   best path: [/x]12" in out


def test_solve_and_eval_show_progress_within_a_problem(tmp_path, capsys):
    assert main(["solve", "What is 2+3?", "--backend", "sim", "--n", "4", "--beam-width", "2"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"search: iteration 1/40, live 4, finished 0, \d+ tokens, \d+ s", err)
    argv = ["eval", "--dataset", "gsm8k", "--limit", "2", "--backend", "sim", "--n", "4",
            "--beam-width", "2", "--output-dir", str(tmp_path / "run")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert re.search(r"problem \S+: iteration [1-9]\d*/40, live \d+, finished \d+, \d+ tokens, \d+ s",
                     err)
    assert "skipped" not in err
    assert main(argv[:4] + ["3"] + argv[5:]) == 0
    err = capsys.readouterr().err
    assert "skipped 2 finished problems" in err and "1 to run" in err
    assert main(argv) == 0
    assert "skipped 2 finished problems" in capsys.readouterr().err


def test_help_names_every_command_and_plan_lists_specs_and_defaults(capsys):
    from fasttts.perf.specs import hardware_names, model_names

    assert all(c in build_parser().description for c in ("solve", "eval", "serve", "plan"))
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(name in out for name in hardware_names() + model_names())
    for default in ("(default: rtx4090)", "(default: qwen2.5-math-1.5b)",
                    "(default: math-shepherd-7b)", "(default: 64)", "(default: 1024)"):
        assert default in out


def test_plan_explains_each_recommendation(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["plan", "--hardware", "rtx3070ti", "--verifier", "skywork-prm-1.5b",
                 "--kv-budget", "300MiB"]) == 0
    out = capsys.readouterr().out
    title = "qwen2.5-math-1.5b + skywork-prm-1.5b on rtx3070ti, KV budget 0.29 GiB"
    assert title in out  # on one line
    text = " ".join(out.split())
    # decode prices vLLM's per-request seeded sampling: 64 paths x 1024 steps x 8 us = 0.524 s
    assert "offload inactive KV: yes, 19.906 s with 0.805 s of host transfers, against " \
           "44.141 s without offloading" in text
    assert "KV split: none, each model has the whole 0.29 GiB while it runs" in text
    assert "B_pre 64: all 64 paths in one verifier pass" in text
    assert "planned vs static: 3.04x faster search (60.539 s -> 19.906 s predicted)" in text


def test_plan_never_says_1_00x_faster_beside_another_split(capsys):
    assert main(["plan"]) == 0  # rtx4090: the planned split differs, the time does not
    text = " ".join(capsys.readouterr().out.split())
    assert "1.00x" not in text
    assert ("planned vs static: same predicted time (18.122 s): both reach B_pre 64 and "
            "B_dec 64 and keep every prefix, so the planned split only places spare memory "
            "differently") in text
    assert "offload inactive KV: no, offloading would take" in text
