"""Search decisions on scripted inputs, derived by hand (see each test's comments)."""

from __future__ import annotations

import hashlib
import math

import pytest
from pydantic import ValidationError

from fasttts.config import SearchConfig
from fasttts.runtime.generation import GenerationTrace, StepRequest, beam_seed, extend_beams
from fasttts.runtime.loop import PromptTooLongError, SearchRunner
from fasttts.search import SearchConfigError, make_strategy
from fasttts.search.base import by_score, fan_out, tie_bin
from fasttts.beam import Beam
from tests.scripted import ScriptedGenerator, ScriptedVerifier

# Beam ids are handed out in order: root 0; iteration 0 children 1-4; iteration 1 children
# 5-8 (5, 6 from beam 1; 7, 8 from beam 3); iteration 2 children 9-12 (9, 10 from 6; 11, 12 from 8).
SCRIPT = {
    1: "A\n\n", 2: "B\n\n", 3: "C\n\n", 4: "D\n\n",
    5: "A1\n\n", 6: "A2\n\n", 7: "C1 \\boxed{7}\n\n", 8: "C2\n\n",
    9: "A21\n\nA22 \\boxed{1}<eos>", 10: "A23 \\boxed{2}<eos>",
    11: "C21 \\boxed{3}<eos>", 12: "C22\n\nC23<eos>",
}
SCORES = {
    "A": 0.9, "B": 0.2, "C": 0.7, "D": 0.4,
    "A1": 0.3, "A2": 0.8, "C1 \\boxed{7}": 0.95, "C2": 0.6,
    "A21": 0.5, "A22 \\boxed{1}": 0.4, "A23 \\boxed{2}": 0.85, "C21 \\boxed{3}": 0.1,
    "C22": 0.65, "C23": 0.75,
}


def run(agg: str, **search):
    gen = ScriptedGenerator(SCRIPT)
    ver = ScriptedVerifier(SCORES, gen)
    cfg = SearchConfig(**{"method": "beam_search", "n": 4, "beam_width": 2,
                          "num_iterations": 3, **search})
    return SearchRunner(gen, ver, cfg, agg).run("problem", "p0"), gen, ver


def test_beam_search_keeps_top_n_over_beam_width_each_iteration_last_agg():
    result, gen, _ = run("last")
    # iteration 0 keeps A (0.9) and C (0.7); iteration 1: C1 finishes with a boxed answer,
    # A2 (0.8) and C2 (0.6) are kept over A1 (0.3); iteration 2 expands A2 -> 9, 10 and
    # C2 -> 11, 12 to the end. Five completions, the best four by last-step score return.
    assert [b.beam_id for b in result.completions] == [7, 10, 12, 9]
    assert [b.score for b in result.completions] == [0.95, 0.85, 0.75, 0.4]
    assert [b.parent_id for b in result.completions] == [3, 6, 8, 6]
    # submitted in search-and-learn's round-robin duplication order, parents in the order
    # they were submitted in the previous iteration
    seqs = [s for s, _ in gen.added]
    assert seqs == [f"p0/it0/b{i}" for i in (1, 2, 3, 4)] + [
        f"p0/it1/b{i}" for i in (5, 7, 6, 8)] + [f"p0/it2/b{i}" for i in (9, 11, 10, 12)]
    assert result.num_iterations == 3
    assert result.completions[0].text == "C\n\nC1 \\boxed{7}\n\n"
    assert result.completions[0].finish_reason == "answer"
    assert {b.finish_reason for b in result.completions[1:]} == {"eos"}


def test_prefix_aware_scheduling_groups_siblings_same_decisions():
    from fasttts.config import RuntimeConfig

    gen = ScriptedGenerator(SCRIPT)
    cfg = SearchConfig(method="beam_search", n=4, beam_width=2, num_iterations=3)
    rt = RuntimeConfig(prefix_aware_scheduling=True)
    result = SearchRunner(gen, ScriptedVerifier(SCORES, gen), cfg, "last", rt).run("problem", "p0")
    assert [b.beam_id for b in result.completions] == [7, 10, 12, 9]
    assert [s for s, _ in gen.added] == [f"p0/it0/b{i}" for i in (1, 2, 3, 4)] + [
        f"p0/it1/b{i}" for i in (5, 6, 7, 8)] + [f"p0/it2/b{i}" for i in (9, 10, 11, 12)]
    # single-CoT cost: iteration 1 grouped (A1 A2 C1 C2) shares the parent between siblings
    baseline, _, _ = run("last")
    assert result.schedule_cost < baseline.schedule_cost


def test_agg_strategy_changes_the_decision():
    result, _, _ = run("min")
    # min over steps: 10 -> min(.9,.8,.85)=.8, 7 -> min(.7,.95)=.7, 12 -> .6, 9 -> .4, 11 -> .1
    assert [b.beam_id for b in result.completions] == [10, 7, 12, 9]
    assert [round(b.score, 6) for b in result.completions] == [0.8, 0.7, 0.6, 0.4]


def test_last_iteration_generates_to_the_end_and_only_new_steps_are_verified():
    result, gen, ver = run("last")
    stops = {seq.split("/")[1]: p.stop for seq, p in gen.added}
    assert stops == {"it0": ("\n\n",), "it1": ("\n\n",), "it2": ()}
    # Beam 9 came from beam 6 (2 scored steps) and produced 2 new steps: only those are scored.
    req9 = [r for r in ver.requests if r.steps[-1] == "A22 \\boxed{1}"]
    assert len(req9) == 1 and req9[0].start == 2 and len(req9[0].steps) == 4
    b9 = next(b for b in result.completions if b.beam_id == 9)
    assert b9.step_scores == [0.9, 0.8, 0.5, 0.4]
    assert b9.steps == ["A\n\n", "A2\n\n", "A21\n\n", "A22 \\boxed{1}"]


def test_beam_times_follow_the_iterations_they_took_part_in():
    result, _, _ = run("last")
    b7, b10 = result.completions[0], result.completions[1]
    assert b7.iterations == 2 and b10.iterations == 3
    assert b7.finish_time < b10.finish_time <= result.end_time
    assert b7.start_time == b10.start_time == result.start_time
    # each iteration adds one 10 ms verifier call on the scripted clock
    assert b7.verifier_time == pytest.approx(0.02) and b10.verifier_time == pytest.approx(0.03)
    assert result.generator_time + result.verifier_time == pytest.approx(result.latency)


def test_never_more_than_n_completions():
    result, _, _ = run("last")
    assert len(result.completions) == 4  # five finished, n = 4


def test_best_of_n_samples_n_paths_to_the_end_in_one_iteration():
    gen = ScriptedGenerator({1: "x\n\ny \\boxed{1}<eos>", 2: "z \\boxed{2}<eos>",
                             3: "w\n\nv<eos>"})
    ver = ScriptedVerifier({"x": 0.9, "y \\boxed{1}": 0.3, "z \\boxed{2}": 0.6, "w": 0.1,
                            "v": 0.5})
    cfg = SearchConfig(method="best_of_n", n=3, beam_width=1)
    result = SearchRunner(gen, ver, cfg, "mean").run("q", "p")
    assert [p.stop for _, p in gen.added] == [(), (), ()]
    # mean: beams 1 and 2 tie at .6 (order by text hash, see by_score), beam 3 has .3
    h = {b.beam_id: hashlib.blake2b(b.text.encode(), digest_size=8).digest()
         for b in result.completions}
    first_two = sorted([1, 2], key=lambda i: h[i])
    assert [b.beam_id for b in result.completions] == [*first_two, 3]
    assert [round(b.score, 6) for b in result.completions] == [0.6, 0.6, 0.3]


def test_ties_are_broken_by_content_not_by_beam_id():
    texts = [f"step {c}" for c in "abcdefgh"]

    def beams(ids):
        return [Beam(beam_id=i, text=t, score=0.5) for i, t in zip(ids, texts)]

    picked = [b.text for b in by_score(beams(range(8)))[:4]]
    assert picked == [b.text for b in by_score(beams(range(8, 0, -1)))[:4]]
    assert picked == sorted(texts, key=lambda t: hashlib.blake2b(t.encode(), digest_size=8).digest())[:4]
    same = [Beam(beam_id=i, text="same", score=0.5) for i in (5, 3, 9)]
    assert [b.beam_id for b in by_score(same)] == [3, 5, 9]


def test_tie_bins_are_logit_bins():
    assert tie_bin(0.3, 0.0) == 0.3  # no tolerance: the score itself
    assert tie_bin(0.5, 0.01) == 0.0
    assert tie_bin(0.7, 0.01) == 84.0  # logit(0.7) = 0.8473
    assert tie_bin(0.3, 0.01) == -85.0  # logit(0.3) = -0.8473
    assert tie_bin(6.5761655e-05, 0.01) == tie_bin(6.5761029e-05, 0.01) == -963.0
    assert tie_bin(0.0, 0.01) == -math.inf and tie_bin(1.0, 0.01) == math.inf


def test_tie_tolerance_ranks_a_bin_by_text_and_the_rest_by_score():
    h = {t: hashlib.blake2b(t.encode(), digest_size=8).digest() for t in ("x", "y")}
    lo, hi = sorted(("x", "y"), key=h.get)  # lo ranks first among tied beams
    near = [Beam(beam_id=1, text=hi, score=0.7 + 1e-9), Beam(beam_id=2, text=lo, score=0.7)]
    assert [b.text for b in by_score(near)] == [hi, lo]  # exact scores
    assert [b.text for b in by_score(near, 1e-3)] == [lo, hi]  # one bin: the text's hash
    far = [Beam(beam_id=1, text=hi, score=0.6), Beam(beam_id=2, text=lo, score=0.3)]
    assert [b.text for b in by_score(far, 1e-3)] == [hi, lo]


def test_tie_tolerance_keeps_a_near_tie_selection_stable():
    # C (0.7) and D (0.7 +- 1e-9) tie within float noise. Exact ranking keeps the higher, so
    # the nudge's sign decides which subtree the search goes on with; a tolerance of 1e-3
    # logits keeps the one whose text ranks first (D's), whichever is higher.
    def kept(nudge, tol):
        gen = ScriptedGenerator(SCRIPT)
        cfg = SearchConfig(method="beam_search", n=4, beam_width=2, num_iterations=2,
                           tie_tolerance=tol)
        ver = ScriptedVerifier({**SCORES, "D": 0.7 + nudge}, gen)
        res = SearchRunner(gen, ver, cfg, "last").run("problem", "p0")
        return sorted({b.text.split("\n\n")[0] for b in res.completions})

    assert kept(1e-9, 0.0) == ["A", "D"] and kept(-1e-9, 0.0) == ["A", "C"]
    rank = {t: hashlib.blake2b(f"{t}\n\n".encode(), digest_size=8).digest() for t in "CD"}
    first = min("CD", key=rank.get)
    assert kept(1e-9, 1e-3) == kept(-1e-9, 1e-3) == ["A", first]


def test_token_budget_finishes_a_beam_with_length():
    gen = ScriptedGenerator({1: "abcdefghij<eos>"})
    ver = ScriptedVerifier({"abcd": 0.5})
    cfg = SearchConfig(method="best_of_n", n=1, max_tokens=4)
    result = SearchRunner(gen, ver, cfg).run("q", "p")
    (beam,) = result.completions
    assert (beam.text, beam.finish_reason, beam.num_tokens) == ("abcd", "length", 4)


def test_prompt_too_long_is_a_clear_error():
    gen = ScriptedGenerator({}, max_model_len=5)
    runner = SearchRunner(gen, ScriptedVerifier({}), SearchConfig(method="best_of_n", n=1))
    with pytest.raises(PromptTooLongError, match="has 9 tokens but the model's context is 5 tokens"):
        runner.run("too long!", "p")
    with pytest.raises(ValueError, match="problem is empty"):
        runner.run("  ", "p")


@pytest.mark.parametrize("n,bw", [(6, 4), (2, 4)])
def test_beam_search_rejects_n_not_multiple_of_beam_width(n, bw):
    with pytest.raises(ValidationError, match=f"n={n}, beam_width={bw}") as e:
        SearchConfig(method="beam_search", n=n, beam_width=bw)  # checked when built
    assert isinstance(e.value.errors()[0]["ctx"]["error"], SearchConfigError)


def test_unknown_method_lists_the_methods():
    with pytest.raises(ValidationError, match="methods: beam_search, best_of_n"):
        SearchConfig(method="mcts")


def test_a_copy_with_updates_is_checked_like_a_new_config():
    cfg = SearchConfig(method="beam_search", n=8, beam_width=4)
    assert cfg.model_copy(update={"n": 16}).n == 16
    with pytest.raises(ValidationError, match="n=6, beam_width=4"):
        cfg.model_copy(update={"n": 6})
    with pytest.raises(ValidationError, match="sart_m is a parameter of method sart"):
        cfg.model_copy(update={"sart_m": 2})  # an update counts as set explicitly
    assert make_strategy(cfg).cfg is cfg


def test_fan_out_spreads_round_robin_grouped_by_parent():
    ids = iter(range(100, 200))
    kept = [Beam(beam_id=i) for i in (1, 2, 3)]
    children = fan_out(kept, 8, lambda: next(ids))
    assert [c.parent_id for c in children] == [1, 1, 1, 2, 2, 2, 3, 3]
    assert [c.beam_id for c in children] == list(range(100, 108))


def test_generation_error_aborts_every_sequence_it_added():
    class Failing(ScriptedGenerator):
        def step(self):
            if self.steps == 1:
                raise RuntimeError("engine died")
            return super().step()

    gen = Failing({1: "aaaaaaaaaa\n\n", 2: "bbbbbbbbbb\n\n"})
    beams = [Beam(beam_id=1), Beam(beam_id=2)]
    req = StepRequest([1], 0.8, 1.0, 100, ("\n\n",), 0, "p", 0)
    with pytest.raises(RuntimeError, match="engine died"):
        extend_beams(gen, beams, req, GenerationTrace())
    assert gen.num_unfinished() == 0
    assert sorted(gen.aborted) == ["p/it0/b1", "p/it0/b2"]


def test_beam_seed_is_stable_and_distinct():
    assert beam_seed(0, "p", 1, 2) == beam_seed(0, "p", 1, 2)
    seeds = {beam_seed(0, "p", parent, b) for parent in range(5) for b in range(20)}
    assert len(seeds) == 100 and all(0 <= s < 2**31 for s in seeds)


def test_the_search_tree_size_counts_shared_prefixes_once():
    result, _, _ = run("last")
    # largest tree: iteration 2, lineages (1, 6, 9), (1, 6, 10), (3, 8, 11), (3, 8, 12):
    # A 3 + A2 4 + C 3 + C2 4 tokens shared, then 9: "A21\n\nA22 \boxed{1}" 18, 10 and 11:
    # 13 each, 12: "C22\n\nC23" 8 (the last iteration generates to the end)
    assert result.tree_tokens == result.prompt_tokens + 3 + 4 + 3 + 4 + 18 + 13 + 13 + 8
    # the generator's peak of it, had the four children run together: their new tokens
    # 8, 13, 13, 18 end apart and hold at most 13 * 3 (at 13 tokens, three still running)
    assert result.decode_tree_tokens == result.prompt_tokens + 3 + 4 + 3 + 4 + 13 * 3
