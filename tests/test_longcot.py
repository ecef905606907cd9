"""The long chain-of-thought workload of the simulator: its fit to the recorded GPQA-Diamond
lengths (`../shared/data/longcot-gpqa`, when present), the order statistics SART relies on,
the scaling rule, and the streams and scores it gives the simulated engines."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from fasttts.backends.sim import load_workload
from fasttts.backends.sim import tokenizer as tok
from fasttts.backends.sim.longcot import LongCoTModel, LongCoTWorkload, mean_length
from fasttts.backends.sim.longcot_fit import fit_lengths, load_lengths, main
from fasttts.steps import split_steps

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "longcot-gpqa" / "lengths.jsonl"
CAP = 30268
MODEL = LongCoTModel.load("longcot-gpqa")


def _pools(model: LongCoTModel, questions: int, per: int = 8):
    return [[model.branch(f"q{q}", s) for s in range(per)] for q in range(questions)]


def test_longest_of_8_over_4th_shortest_matches_the_data():
    # the data: sum over questions of E[max of 8] / sum of E[4th smallest of 8] = 1.393
    pools = _pools(MODEL, 3000)
    longest = sum(max(min(b[0], CAP) for b in pool) for pool in pools)
    fourth = sum(sorted(min(b[0], CAP) for b in pool)[3] for pool in pools)
    assert longest / fourth == pytest.approx(1.393, abs=0.04)


def test_accuracy_is_the_target_and_only_weakly_tied_to_length_within_a_question():
    pools = _pools(MODEL, 3000)
    acc = statistics.fmean(b[1] and b[0] < CAP for pool in pools for b in pool)
    assert acc == pytest.approx(MODEL.target_accuracy, abs=0.015)
    # within mixed questions, right branches are only a little shorter
    ratios = []
    for pool in pools:
        right = [b[0] for b in pool if b[1]]
        wrong = [b[0] for b in pool if not b[1]]
        if right and wrong:
            ratios.append(statistics.fmean(right) / statistics.fmean(wrong))
    assert 0.85 < statistics.median(ratios) < 1.0


def test_the_committed_fit_reproduces_the_data():
    assert MODEL.fitted_accuracy == pytest.approx(0.664, abs=0.01)  # the data's 0.664
    assert MODEL.length_scale == 1.0 and MODEL.num_choices == 4
    lengths = sorted(min(b[0], CAP) for pool in _pools(MODEL.model_copy(
        update={"shift": 0.0}), 2000) for b in pool)
    assert statistics.median(lengths) == pytest.approx(10485, rel=0.06)  # the data's median
    assert mean_length(MODEL, CAP) == pytest.approx(11382, rel=0.08)  # the data's mean


@pytest.mark.skipif(not DATA.exists(), reason="the recorded data is not beside the checkout")
def test_fitting_the_recorded_data_gives_the_committed_parameters():
    fields = fit_lengths(load_lengths(DATA))
    for key, value in fields.items():
        assert getattr(MODEL, key) == pytest.approx(value, rel=1e-3), key


def test_a_branch_streams_its_length_its_markers_and_its_answer():
    wl = LongCoTWorkload(MODEL, answers={"Q": "C"})
    prompt = tok.encode_chat([{"role": "user", "content": "Q"}])
    for seed in range(6):
        length, right, derail = MODEL.branch("Q", seed)
        ids = list(wl.stream(prompt, seed))
        assert ids[-1] == tok.EOS and len(ids) - 1 == length  # tokens before EOS
        text = tok.decode(ids[:-1])
        assert text.endswith(f"\\boxed{{{'C' if right else text[-3]}}}.")
        assert (text[-3] == "C") is right
        steps = split_steps(text)
        assert all(s.startswith("\u2713") for s in steps) if right else \
            steps[-1].startswith("\u2717")
        # a resumed sequence (the path so far in its prompt) goes on exactly
        cut = len(ids) // 2
        assert list(wl.stream(prompt + ids[:cut], seed)) == ids[cut:]


def test_the_prm_separates_right_from_wrong_completions():
    wl = LongCoTWorkload(MODEL, answers={f"q{i}": "A" for i in range(40)})
    right, wrong = [], []
    for i in range(40):
        prompt = tok.encode_chat([{"role": "user", "content": f"q{i}"}])
        for seed in range(4):
            text = tok.decode(list(wl.stream(prompt, seed))[:-1])
            score = wl.score_steps(f"q{i}", tuple(split_steps(text)))[-1]
            (right if text.endswith("{A}.") else wrong).append(score)
    assert statistics.fmean(right) > statistics.fmean(wrong) + 0.1


def test_load_workload_by_name_and_file(tmp_path):
    assert isinstance(load_workload("longcot-gpqa"), LongCoTWorkload)
    f = tmp_path / "m.json"
    f.write_text(json.dumps(MODEL.model_dump() | {"length_scale": 0.5}))
    wl = load_workload(str(f))
    assert isinstance(wl, LongCoTWorkload) and wl.longcot.length_scale == 0.5
    f.write_text('{"log_median_loc": 9, "oops": 1}')
    with pytest.raises(ValueError, match="m.json"):
        load_workload(str(f))


def test_the_fit_command_names_a_bad_line(tmp_path, capsys):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"source_problem_id": "a", "num_tokens": 5, "correct": true}\n{"x": 1}\n')
    assert main([str(f)]) == 2
    assert f"{f}:2: expected an object" in capsys.readouterr().err
    assert main([str(f), "--target-accuracy", "1.5"]) == 2
