import pytest

from fasttts.beam import Beam
from fasttts.eval.metrics import percentile, precise_goodput, problem_record, summarize
from fasttts.runtime.loop import SearchResult


def beam(i, tokens, start, finish, text="", score=0.5):
    return Beam(beam_id=i, token_ids=[0] * tokens, start_time=start, finish_time=finish,
                text=text, score=score, finished=True, finish_reason="eos")


def test_precise_goodput_is_mean_tokens_over_mean_completion_time():
    # tokens 100, 300 -> mean 200; times 2 s, 6 s -> mean 4 s; goodput 50 tok/s
    # (not the mean of per-beam rates 50 and 50, nor total tokens / max time 400/6)
    beams = [beam(1, 100, 10.0, 12.0), beam(2, 300, 10.0, 16.0)]
    assert precise_goodput(beams) == pytest.approx(50.0)
    beams = [beam(1, 100, 0.0, 1.0), beam(2, 20, 0.0, 3.0)]
    assert precise_goodput(beams) == pytest.approx(60 / 2)


def test_precise_goodput_errors():
    with pytest.raises(ValueError, match="at least one"):
        precise_goodput([])
    with pytest.raises(ValueError, match="finish_time"):
        precise_goodput([Beam(beam_id=1)])


def test_percentile_matches_linear_interpolation():
    xs = [4.0, 1.0, 3.0, 2.0]
    assert percentile(xs, 50) == 2.5
    assert percentile(xs, 0) == 1.0 and percentile(xs, 100) == 4.0
    assert percentile(xs, 90) == pytest.approx(3.7)
    with pytest.raises(ValueError):
        percentile([], 50)


def result_with(texts_scores, gen=3.0, ver=1.0):
    beams = [beam(i, 10 * (i + 1), 0.0, 2.0 + i, text=t, score=s)
             for i, (t, s) in enumerate(texts_scores)]
    return SearchResult("p1", beams, 2, 0.0, 4.5, gen, ver, 123, 8, 40)


def test_problem_record_votes_and_correctness():
    r = result_with([("\\boxed{3}", 0.2), ("\\boxed{5}", 0.9), ("\\boxed{3}", 0.3),
                     ("no answer", 0.99)])
    rec = problem_record(r, "3", "q")
    assert rec["pred"] == {"majority": "3", "weighted": "5", "best": "5"}
    assert rec["correct"] == {"majority": True, "weighted": False, "best": False, "pass@n": True,
                              "answer": False}  # beam search answers by the weighted vote
    assert rec["answer_rule"] == "weighted" and rec["answer"] == rec["pred"]["weighted"]
    # tokens 10, 20, 30, 40 -> 25; times 2, 3, 4, 5 -> 3.5
    assert rec["precise_goodput_tok_s"] == pytest.approx(25 / 3.5)
    assert rec["latency_s"] == 4.5 and rec["generator_time_s"] == 3.0
    assert rec["num_completions"] == 4 and rec["tokens_generated"] == 123
    assert rec["distinct_answers"] == 2  # 3, 5, 3 and no answer
    assert problem_record(r, None)["correct"] is None


def test_distinct_answers_count_equivalent_answers_once():
    r = result_with([("\\boxed{0.5}", 0.1), ("\\boxed{\\frac{1}{2}}", 0.2), ("\\boxed{7}", 0.3)])
    assert problem_record(r, "7")["distinct_answers"] == 2
    assert problem_record(result_with([("no answer", 0.1)]), "7")["distinct_answers"] == 0


def test_summarize_hand_computed():
    recs = [problem_record(result_with([("\\boxed{1}", 0.5)]), "1"),
            problem_record(result_with([("\\boxed{2}", 0.5)]), "1")]
    recs[1]["latency_s"] = 8.5
    s = summarize(recs)
    assert s["num_problems"] == 2
    assert s["accuracy"] == {"majority": 0.5, "weighted": 0.5, "best": 0.5, "pass@n": 0.5}
    assert s["latency_s"]["mean"] == pytest.approx(6.5)
    assert s["latency_s"]["p50"] == pytest.approx(6.5)
    assert s["precise_goodput_tok_s"] == pytest.approx(5.0)  # 10 tokens / 2 s each
    with pytest.raises(ValueError):
        summarize([])


def test_unboxed_answers_are_graded_by_the_fallbacks():
    r = result_with([("so the answer is **7**.", 0.5), ("I count 3 cats and 7 dogs", 0.4)])
    assert problem_record(r, "7")["pred"]["majority"] == "7"
    assert problem_record(r, "7")["completions"][1]["answer"] is None  # no stated answer
    numeric = problem_record(r, "7", numeric=True)
    assert [c["answer"] for c in numeric["completions"]] == ["7", "7"]
    assert numeric["correct"]["majority"] is True
