"""The simulator's token streams, PRM scores, trace fitting and CPU calibration fit."""

import itertools
import json
import statistics

import pytest

from fasttts.backends.sim import tokenizer as tok
from fasttts.backends.sim.workload import (ON_TRACK, Workload, WorkloadModel,
                                           problem_difficulty)
from fasttts.perf.calibration import MeasuredStep, error_table, fit_hardware
from fasttts.perf.roofline import step_time
from fasttts.perf.specs import HardwareSpec, load_model
from fasttts.steps import build_messages, split_steps

PROBLEM = "Find x if 2x + 3 = 11."


def _path(workload, seed):
    prompt = tok.encode_chat(build_messages(PROBLEM))
    return tok.decode(list(workload.stream(prompt, seed)))


def test_tokenizer_round_trips_and_splits_prompts():
    text = "Let $x = \\frac{1}{2}$: ∑ done.\n\n"
    assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode(text)) == -(-len(text.encode()) // 4)
    ids = tok.encode_chat(build_messages(PROBLEM)) + tok.encode("step one")
    problem, start = tok.split_prompt(ids)
    assert problem == PROBLEM and tok.decode(ids[start:]) == "step one"
    with pytest.raises(ValueError, match="assistant marker"):
        tok.split_prompt(tok.encode("no template"))


def test_paths_are_deterministic_and_end_with_the_reference_when_on_track():
    w = Workload(answers={PROBLEM: "4"})
    w.register(PROBLEM, "4", difficulty=0.0)
    texts = [_path(w, s) for s in range(40)]
    assert [_path(w, s) for s in range(40)] == texts
    for t in texts:
        steps = split_steps(t)
        assert "\\boxed{" in steps[-1]
        on_track = all(s.startswith(ON_TRACK) for s in steps)
        assert ("\\boxed{4}" in steps[-1]) == on_track
    assert len(set(texts)) == 40


def test_harder_problems_derail_more():
    w = Workload()
    w.register("easy", "1", difficulty=0.0)
    w.register("hard", "1", difficulty=1.0)
    m = w.model
    assert w.derail_probability("easy") == m.derail_min
    assert w.derail_probability("hard") == m.derail_max
    assert problem_difficulty("aime24", "p") >= 0.7
    assert problem_difficulty("gsm8k", "p") <= 0.3
    assert problem_difficulty("math500", "p", level=5) >= 0.7


def test_scores_are_deterministic_correlated_and_track_the_latent_state():
    w = Workload()
    on, off, pairs = [], [], []
    for seed in range(300):
        steps = tuple(split_steps(_path(w, seed)))
        scores = w.score_steps(PROBLEM, steps)
        assert scores == w.score_steps(PROBLEM, steps)
        assert scores[:2] == w.score_steps(PROBLEM, steps[:2])  # a step's score is its prefix's
        for step, s in zip(steps, scores):
            (on if step.startswith(ON_TRACK) else off).append(s)
        pairs += list(zip(scores, scores[1:]))
    assert statistics.fmean(on) > statistics.fmean(off) + 0.1
    xs, ys = zip(*pairs)
    assert statistics.correlation(xs, ys) > 0.4
    assert all(0 < s < 1 for s in on + off)


def test_step_lengths_are_heavy_tailed():
    w = Workload()
    lengths = []
    for seed in range(200):
        text = _path(w, seed)
        ids = list(w.stream(tok.encode_chat(build_messages(PROBLEM)), seed))
        assert tok.decode(ids) == text
        lengths += [len(tok.encode(s)) for s in split_steps(text)]
    med, p99 = statistics.median(lengths), statistics.quantiles(lengths, n=100)[98]
    assert 30 < med < 70 and p99 > 4 * med


def test_workload_fitted_from_a_trace(tmp_path):
    trace = tmp_path / "trace.jsonl"
    lines = [{"id": "a", "paths": [
        {"step_tokens": [10, 20, 30], "step_scores": [0.5, 0.6, 0.9], "correct": True},
        {"step_tokens": [40, 50], "step_scores": [0.5, 0.2], "correct": False}]},
        {"id": "b", "paths": [{"step_tokens": [60], "step_scores": [0.8], "correct": True},
                              {"step_tokens": [], "step_scores": [], "correct": None}]}]
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    m = WorkloadModel.from_file(trace)
    assert m.step_lengths == (10, 20, 30, 40, 50, 60)
    assert m.final_hazard == pytest.approx(1 / 2)  # 3 paths, 6 steps
    assert m.source == "trace:trace.jsonl"
    assert m.score_margin > 0
    w = Workload(m)
    text = _path(w, 1)
    assert all(len(tok.encode(s)) <= 60 + 12 for s in split_steps(text))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="no paths"):
        WorkloadModel.from_file(empty)


def test_calibration_fit_recovers_a_known_spec():
    model = load_model("qwen2.5-coder-0.5b-instruct")
    true = HardwareSpec(name="t", peak_flops=4e11, memory_bandwidth=3e10, memory_bytes=1 << 34,
                        step_overhead_s=0.004, seq_overhead_s=5e-4, overlap=0.2, source="test")
    grid = [("decode", b, c, 1) for b in (1, 4, 16, 64) for c in (64, 256, 1024, 2048)]
    grid += [("prefill", b, 0, n) for b, n in ((1, 64), (1, 256), (1, 1024), (4, 256), (16, 256))]
    steps = [MeasuredStep(k, b, c, n, step_time(model, true, MeasuredStep(k, b, c, n, 1).shape()))
             for k, b, c, n in grid]
    fitted = fit_hardware(model, steps, "fit", 1 << 34, "test")
    _, med, mx = error_table(model, fitted, steps)
    assert med < 0.01 and mx < 0.03
    with pytest.raises(ValueError, match="at least 5"):
        fit_hardware(model, steps[:3], "fit", 1, "x")


def test_calibration_fit_prices_a_call_as_the_sum_of_its_engine_steps():
    """Verifier calls (several engine steps, timed whole) fitted with generator steps recover
    the spec; a call's prediction is the sum of its steps' roofline times, and the steps are
    those the simulated engine logs for it."""
    from fasttts.backends.sim.engine import SimEngine, SimSequence, VirtualClock
    from fasttts.perf.calibration import MeasuredCall, predict

    model = load_model("qwen2.5-coder-0.5b-instruct")
    true = HardwareSpec(name="t", peak_flops=5e10, memory_bandwidth=3.6e10,
                        memory_bytes=1 << 34, step_overhead_s=0.3, overlap=0.0, source="test")
    engine = SimEngine(model, true, VirtualClock(), 512, 128, 64, 2048, 4096, logits=False)
    engine.kv.enable_prefix_caching = False  # whole-path: every call prefills every token
    calls = []
    for batch, length in ((4, 300), (16, 400), (2, 1500), (8, 900)):
        engine.step_log, t0 = [], engine.clock.t
        seqs = [SimSequence(f"{batch}-{i}", [7 + i] * length) for i in range(batch)]
        for s in seqs:
            engine.add(s)
        while engine.seqs:
            for s in engine.step():
                engine.finish(s)
        calls.append(MeasuredCall("verifier whole", str(batch), tuple(engine.step_log),
                                  engine.clock.t - t0))
    assert [len(c.steps) for c in calls] == [1, 4, 2, 4]  # 2048-token budget: chunked
    assert all(predict(model, true, c) == pytest.approx(c.seconds) for c in calls)
    gen = [MeasuredStep("decode", b, c, 1, 0.0) for b in (1, 4, 16) for c in (64, 1024)]
    gen = [MeasuredStep(s.kind, s.batch, s.context, 1, step_time(model, true, s.shape()))
           for s in gen]
    fitted = fit_hardware(model, gen + calls, "fit", 1 << 34, "test")
    rows, med, _ = error_table(model, fitted, gen + calls)
    assert med < 0.01
    assert rows[-1]["group"] == "8" and rows[-1]["engine_steps"] == 4


def test_a_head_start_longer_than_the_own_step_ends_at_the_next_delimiter():
    """A sibling's partial step inherited as a head start, longer than any step the seed
    would draw, is finished with the step's own ending: the stream's next tokens reach the
    delimiter before any new step starts (before the fix, it emitted nothing and began the
    next step with no delimiter, merging two steps)."""
    w = Workload(answers={PROBLEM: "4"})
    prompt = tok.encode_chat(build_messages(PROBLEM))
    seed = 3
    own_first = []
    for t in w.stream(prompt, seed):
        own_first.append(t)
        if t == tok.encode("\n\n")[0]:
            break
    assert own_first[-1] == tok.encode("\n\n")[0]  # seed 3's first step is not the final one
    inherited = [own_first[0]] + tok.encode(" word" * (w.model.step_len_max + 8))
    out = list(itertools.islice(w.stream(prompt + inherited, seed), 1))
    assert out == tok.encode("\n\n")
    text = tok.decode(inherited + list(itertools.islice(w.stream(prompt + inherited, seed), 200)))
    assert all(s.count(ON_TRACK) + s.count("\u2717") == 1 for s in split_steps(text, "\n\n"))


def _first_step(w, prompt, seed):
    out = []
    for t in w.stream(prompt, seed):
        out.append(t)
        if t in (tok.encode("\n\n")[0], tok.EOS):
            return out
    return out


def test_a_new_request_inside_a_step_draws_the_rest_anew_as_vllm_does():
    """vLLM seeds a fresh sampler for every new request: resubmitting a step's first tokens
    with the same seed does not continue the stream that wrote them. The simulator does the
    same (the rest of the step is drawn from the seed and the whole prompt), while a request
    that starts at a step boundary writes what the seed writes there, in any batch."""
    w = Workload(answers={PROBLEM: "4"})
    prompt = tok.encode_chat(build_messages(PROBLEM))
    resumed_same = 0
    for seed in range(20):
        whole = list(w.stream(prompt, seed))
        step = _first_step(w, prompt, seed)
        assert whole[:len(step)] == step
        # the next steps, from the step boundary: the same tokens the first request wrote
        assert list(w.stream(prompt + step, seed)) == whole[len(step):]
        cut = max(1, len(step) // 2)
        rest = _first_step(w, prompt + step[:cut], seed)
        resumed_same += rest == step[cut:]
        text = tok.decode(step[:cut] + rest)  # one step: its own marker, no second one
        assert text.count(ON_TRACK) + text.count("\u2717") == 1
    assert resumed_same <= 2  # the rest of a resubmitted step is (almost always) another draw
