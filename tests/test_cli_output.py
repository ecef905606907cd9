"""What `fasttts solve`, `eval` and `plan` print: model text as plain text (never rich markup),
progress within a problem, the skipped problems of a rerun, self-explaining plans, help."""

from __future__ import annotations

import json
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


def test_solve_and_eval_write_plain_progress_when_not_on_a_terminal(tmp_path, capsys):
    assert main(["solve", "What is 2+3?", "--backend", "sim", "--n", "4", "--beam-width", "2"]) == 0
    err = capsys.readouterr().err
    assert "iteration" not in err and "\r" not in err and "\x1b" not in err  # no status line
    argv = ["eval", "--dataset", "gsm8k", "--limit", "2", "--backend", "sim", "--n", "4",
            "--beam-width", "2", "--output-dir", str(tmp_path / "run")]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 2 and "\r" not in err and "\x1b" not in err + out
    assert re.fullmatch(r"problem 1/2 gsm8k-test-0: answer \S+ \((correct|wrong), PRM-weighted "
                        r"vote\), 4 completions( \(best of \d+ finished paths\))?, \d+ "
                        r"iterations, \d+ tokens, \d+\.\d s; so far weighted \d\.\d\d, majority "
                        r"\d\.\d\d", lines[0])
    assert lines[1].startswith("problem 2/2 gsm8k-test-1: ")
    assert "skipped" not in err
    assert main(argv[:4] + ["3"] + argv[5:]) == 0
    err = capsys.readouterr().err
    assert "skipped 2 finished problems" in err and "1 to run" in err
    assert "problem 3/3 gsm8k-test-2: " in err
    assert main(argv) == 0
    assert "skipped 2 finished problems" in capsys.readouterr().err


def test_progress_and_table_agree_on_completions_when_beam_search_finishes_more_than_n(
        tmp_path, capsys):
    # GSM8K problem 3 (gsm8k-test-3), beam search n = 8, beam_width 4: the search refills 8
    # live paths every iteration, so more than 8 finish; the best 8 are kept, and the line
    # and the table both say 8 (the old line said "finished 11" beside "completions 8.0")
    argv = ["eval", "--dataset", "gsm8k", "--offset", "3", "--limit", "1", "--backend", "sim",
            "--method", "beam_search", "--n", "8", "--beam-width", "4",
            "--output-dir", str(tmp_path / "run")]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    finished = int(re.search(r"8 completions \(best of (\d+) finished paths\)", err).group(1))
    assert finished > 8
    assert re.search(r"completions per problem\s+│\s+8\.0", out)
    record = json.loads((tmp_path / "run" / "results.jsonl").read_text())
    assert record["num_completions"] == 8


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


def test_plan_shows_the_runnable_plan_first_and_offloading_as_a_labelled_alternative(
        monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["plan", "--hardware", "rtx3070ti", "--verifier", "skywork-prm-1.5b",
                 "--kv-budget", "300MiB"]) == 0
    out = capsys.readouterr().out
    title = "qwen2.5-math-1.5b + skywork-prm-1.5b on rtx3070ti, KV budget 0.29 GiB"
    assert title in out  # on one line
    header = next(line for line in out.splitlines() if "static split" in line)
    assert header.index("static split") < header.index("planned") < header.index(
        "offload (simulated only)")
    text = " ".join(out.split())
    # the headline is the plan real engines run: no offloading
    # decode prices vLLM's per-request seeded sampling: 64 paths x 1024 steps x 8 us = 0.524 s
    assert "planned vs static: 1.19x faster search (170.393 s -> 142.951 s predicted)" in text
    assert "B_pre 4: 16 verifier passes" in text and "B_dec 64: all 64 paths" in text
    assert ("alternative, offload (simulated only: --backend sim --offload; vLLM engines do "
            "not offload the inactive model's KV): 1.36x faster than the plan (142.951 s -> "
            "104.993 s predicted, 0.805 s of it host transfers)") in text
    assert "1.62x" not in text  # the offload plan against the static split is no headline


def test_plan_without_offloading_shows_no_alternative(capsys):
    assert main(["plan", "--hardware", "rtx3070ti", "--verifier", "skywork-prm-1.5b",
                 "--kv-budget", "300MiB", "--no-offload"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "offload (simulated only)" not in text and "offload transfer" not in text
    assert "offload inactive KV: not considered (--no-offload)" in text
    assert "planned vs static: 1.19x faster search" in text
    # Skywork's store is split by its own (S-shaped) hit model, named with its scale
    assert ("the verifier's store of whole prefixes in transformers: its recompute falls "
            "S-shaped with its size, to 1/e at 0.50 GiB") in text


def test_plan_never_says_1_00x_faster_beside_another_split(capsys):
    assert main(["plan"]) == 0  # rtx4090: the planned split differs, the time does not
    text = " ".join(capsys.readouterr().out.split())
    assert "1.00x" not in text
    assert ("planned vs static: same predicted time (18.122 s): both reach B_pre 64 and "
            "B_dec 64 and keep every prefix, so the planned split only places spare memory "
            "differently") in text
    assert "offload inactive KV: no, offloading would take" in text


def test_solve_shows_the_path_that_gave_the_answer_not_the_top_scored_one(monkeypatch, capsys):
    # weighted vote: 7 (0.6 + 0.5) beats 12 (0.9), so the answer's path is the 2nd by score
    import fasttts.backends.sim as sim
    from tests.scripted import ScriptedGenerator, ScriptedVerifier

    script = {1: "So \\boxed{12}<eos>", 2: "It is \\boxed{7}<eos>", 3: "Then \\boxed{7}<eos>"}
    scores = {"So \\boxed{12}": 0.9, "It is \\boxed{7}": 0.6, "Then \\boxed{7}": 0.5}

    def build(_cfg):
        gen = ScriptedGenerator(script)
        return gen, ScriptedVerifier(scores, gen)

    monkeypatch.setattr(sim, "build_sim", build)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["solve", "What is 3+4?", "--backend", "sim", "--method", "best_of_n",
                 "--n", "3"]) == 0
    out = capsys.readouterr().out
    assert "the path that gave the answer" in out
    assert ("PRM-weighted vote: the best of the 2 of 3 completions answering 7; score 0.600, "
            "2nd of 3 by score") in out
    assert "It is \\boxed{7}" in out and "So \\boxed{12}" not in out
    assert "answer (PRM-weighted vote): 7" in out
