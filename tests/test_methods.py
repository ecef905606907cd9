"""The method family (DVTS, VG-search, dynamic branching, self-consistency, best-of-N with an
outcome score, greedy lookahead; SART in tests/test_sart.py): exact decisions on scripted
inputs, derived by hand in the comments, plus the known faults of public implementations on the
simulated backend."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fasttts.backends.sim import build_sim
from fasttts.config import EngineConfig, RunConfig, SearchConfig, SimConfig, VerifierConfig
from fasttts.runtime.loop import SearchRunner
from fasttts.search import METHODS, SearchConfigError
from fasttts.search.dynamic_branching import allocate_children
from fasttts.steps import split_steps
from tests.scripted import ScriptedGenerator, ScriptedVerifier


def run(script, scores, agg="last", **search):
    gen = ScriptedGenerator(script)
    ver = ScriptedVerifier(scores, gen)
    picked = []
    runner = SearchRunner(gen, ver, SearchConfig(**search), agg,
                          on_select=lambda it, kept: picked.append([b.beam_id for b in kept]))
    return runner.run("problem", "p0"), picked, gen, ver


# ---- DVTS ---------------------------------------------------------------------------------
# n=4, beam_width=2: subtree 0 = beams 1, 2; subtree 1 = beams 3, 4. Iteration 0 keeps 1 (0.9)
# and 4 (0.7). Iteration 1: 1 -> 5, 6; 4 -> 7, 8. Subtree 0: 6 (0.8, live) beats 5 (0.3,
# finished), so 5 is discarded; subtree 1: 7 (0.95) finished and best: its answer. Iteration 2
# (last) expands 6 -> 9, 10 to the end; 10 (0.85) beats 9 (0.6).
DVTS_SCRIPT = {1: "A\n\n", 2: "B\n\n", 3: "C\n\n", 4: "D\n\n",
               5: "A1 \\boxed{1}\n\n", 6: "A2\n\n", 7: "D1 \\boxed{2}\n\n", 8: "D2\n\n",
               9: "A21 \\boxed{3}<eos>", 10: "A22 \\boxed{4}<eos>"}
DVTS_SCORES = {"A": 0.9, "B": 0.2, "C": 0.4, "D": 0.7, "A1 \\boxed{1}": 0.3, "A2": 0.8,
               "D1 \\boxed{2}": 0.95, "D2": 0.5, "A21 \\boxed{3}": 0.6, "A22 \\boxed{4}": 0.85}


def test_dvts_keeps_the_best_of_each_subtree_and_returns_one_per_subtree():
    res, picked, gen, _ = run(DVTS_SCRIPT, DVTS_SCORES, method="dvts", n=4, beam_width=2,
                              num_iterations=3)
    assert picked == [[1, 4], [6]]
    assert [b.beam_id for b in res.completions] == [7, 10]
    assert [b.subtree for b in res.completions] == [1, 0]
    assert all(b.finished for b in res.completions)
    assert gen.live == {}


def test_dvts_agg_strategy_ranks_the_answers():
    # with "min" the answers score 10: min(0.9, 0.8, 0.85) = 0.8 and 7: min(0.7, 0.95) = 0.7,
    # so their order flips against "last" (0.95, 0.85); the kept paths are the same here
    # because siblings share their prefix.
    res, picked, _, _ = run(DVTS_SCRIPT, DVTS_SCORES, "min", method="dvts", n=4, beam_width=2,
                            num_iterations=3)
    assert picked == [[1, 4], [6]]
    assert [(b.beam_id, b.score) for b in res.completions] == [(10, 0.8), (7, 0.7)]


def test_dvts_marks_paths_cut_by_the_token_budget():
    script = {1: "AAAAAAAAAAAAAAA", 2: "B\n\n", 3: "C\n\n", 4: "D\n\n", 5: "x", 6: "y"}
    res, _, _, _ = run(script, {"AAAAAAAAAA": 0.9, "B": 0.1, "C": 0.5, "D": 0.2, "x": 0.3,
                                "y": 0.4},
                       method="dvts", n=4, beam_width=2, num_iterations=3, max_tokens=10)
    one = [b for b in res.completions if b.subtree == 0]
    assert one[0].beam_id == 1 and one[0].finish_reason == "length" and one[0].finished


# ---- best-of-N ------------------------------------------------------------------------------
# n=2 samples of two steps each, generated to the end in one iteration: sample A (beam 1) scores
# 0.3 then 0.9, sample B (beam 2) 0.6 then 0.7. "last" ranks A first (0.9 > 0.7), "min",
# "prod" and "mean" rank B first.
BON_AGG_SCRIPT = {1: "A1\n\nA2 \\boxed{1}<eos>", 2: "B1\n\nB2 \\boxed{2}<eos>"}
BON_AGG_SCORES = {"A1": 0.3, "B1": 0.6, "A2 \\boxed{1}": 0.9, "B2 \\boxed{2}": 0.7}


@pytest.mark.parametrize("agg, ranked", [("last", [(1, 0.9), (2, 0.7)]),
                                         ("min", [(2, 0.6), (1, 0.3)]),
                                         ("prod", [(2, 0.42), (1, 0.27)]),
                                         ("mean", [(2, 0.65), (1, 0.6)])])
def test_best_of_n_agg_strategy_ranks_the_samples(agg, ranked):
    res, _, _, _ = run(BON_AGG_SCRIPT, BON_AGG_SCORES, agg, method="best_of_n", n=2, beam_width=1,
                       num_iterations=3)
    assert [(b.beam_id, round(b.score, 6)) for b in res.completions] == ranked


# ---- VG-search ----------------------------------------------------------------------------
# the beam-search scenario of tests/test_search.py
from tests.test_search import SCORES, SCRIPT  # noqa: E402


def test_vg_search_with_granularity_1_is_beam_search():
    bs, picked_bs, _, _ = run(SCRIPT, SCORES, method="beam_search", n=4, beam_width=2,
                              num_iterations=3)
    vg, picked_vg, _, _ = run(SCRIPT, SCORES, method="vg_search", n=4, beam_width=2,
                              num_iterations=3, granularity=1)
    assert picked_vg == picked_bs == [[1, 3], [6, 8]]
    assert [b.beam_id for b in vg.completions] == [b.beam_id for b in bs.completions]


def test_vg_search_verifies_and_branches_every_g_steps():
    # g=2, n=4, bw=2. Iteration 0: root -> 1..4, not verified. Iteration 1: one child each
    # (5<-1, 6<-2, 7<-3, 8<-4), verified as two-step paths; keep the 2 best by last score:
    # 5 "A B" (0.8) and 7 "C D" (0.6). Iteration 2 (last): 5 -> 9, 10; 7 -> 11, 12, to the end.
    script = {1: "A\n\n", 2: "B\n\n", 3: "C\n\n", 4: "D\n\n",
              5: "A1\n\n", 6: "B1\n\n", 7: "C1\n\n", 8: "D1\n\n",
              9: "E \\boxed{1}<eos>", 10: "F \\boxed{2}<eos>", 11: "G \\boxed{3}<eos>",
              12: "H \\boxed{4}<eos>"}
    scores = {"A": 0.1, "B": 0.9, "C": 0.2, "D": 0.8, "A1": 0.8, "B1": 0.3, "C1": 0.6,
              "D1": 0.5, "E \\boxed{1}": 0.7, "F \\boxed{2}": 0.4, "G \\boxed{3}": 0.9,
              "H \\boxed{4}": 0.2}
    res, picked, gen, ver = run(script, scores, method="vg_search", n=4, beam_width=2,
                                num_iterations=3, granularity=2)
    assert picked == [[1, 2, 3, 4], [5, 7]]
    # the first PRM call scores both steps of each path at once: start=0, two steps
    assert [(len(r.steps), r.start) for r in ver.requests[:4]] == [(2, 0)] * 4
    assert [b.beam_id for b in res.completions] == [11, 9, 10, 12]
    assert [s for s, _ in gen.added][4:8] == [f"p0/it1/b{i}" for i in (5, 6, 7, 8)]


# ---- dynamic branching ---------------------------------------------------------------------
def test_allocate_children_softmax_largest_remainder_by_hand():
    # w = exp(0), exp(-2), exp(-4) = 1, 0.1353, 0.0183 (sum 1.1536); 8 * w / sum = 6.935,
    # 0.938, 0.127 -> floors 6, 0, 0; 2 left go to the largest remainders: 0.938 then 0.935.
    assert allocate_children([0.9, 0.5, 0.1], 8, 0.2) == [7, 1, 0]
    assert allocate_children([0.5, 0.5], 3, 0.2) == [2, 1]
    assert allocate_children([0.9], 0, 0.2) == [0]


def test_dynamic_branching_budget_shrinks_with_completions():
    # n=4: iteration 0 -> 1..4; 3 finishes (C \boxed{7}). Budget 4 - 1 = 3 over live 1 (0.9),
    # 4 (0.6), 2 (0.2) at tau 0.2: w = exp(0), exp(-1.5), exp(-3.5) = 1, 0.2231, 0.0302 (sum
    # 1.2533); 3 * w / sum = 2.394, 0.534, 0.072 -> floors 2, 0, 0; the 1 left goes to the
    # largest remainder 0.534 -> [2, 1, 0]: 1 -> 5, 6; 4 -> 7.
    script = {1: "A\n\n", 2: "B\n\n", 3: "C \\boxed{7}\n\n", 4: "D\n\n",
              5: "A1 \\boxed{1}<eos>", 6: "A2 \\boxed{2}<eos>", 7: "D1 \\boxed{3}<eos>"}
    scores = {"A": 0.9, "B": 0.2, "C \\boxed{7}": 0.5, "D": 0.6, "A1 \\boxed{1}": 0.3,
              "A2 \\boxed{2}": 0.8, "D1 \\boxed{3}": 0.4}
    res, picked, _, _ = run(script, scores, method="dynamic_branching", n=4, num_iterations=2)
    assert picked == [[1, 4]]
    assert sorted(b.beam_id for b in res.completions) == [3, 5, 6, 7]
    assert len(res.completions) <= 4


# ---- self-consistency and best-of-N with an outcome score ----------------------------------
BON_SCRIPT = {1: "x\n\nso \\boxed{2}<eos>", 2: "y\n\nso \\boxed{3}<eos>", 3: "z \\boxed{2}<eos>"}


def test_self_consistency_never_calls_the_prm_and_weights_every_answer_equally():
    res, _, _, ver = run(BON_SCRIPT, {}, method="self_consistency", n=3)
    assert ver.requests == []
    assert res.verifier_time == 0.0
    assert [b.beam_id for b in res.completions] == [1, 2, 3]
    assert [b.score for b in res.completions] == [1.0, 1.0, 1.0]


def test_best_of_n_orm_scores_each_solution_once_as_a_whole():
    scores = {"x\n\nso \\boxed{2}": 0.2, "y\n\nso \\boxed{3}": 0.9, "z \\boxed{2}": 0.5}
    res, _, _, ver = run(BON_SCRIPT, scores, method="best_of_n_orm", n=3)
    assert [r.steps for r in ver.requests] == [(BON_SCRIPT[i].removesuffix("<eos>"),)
                                                for i in (1, 2, 3)]
    assert [b.beam_id for b in res.completions] == [2, 3, 1]
    assert [b.score for b in res.completions] == [0.9, 0.5, 0.2]


# ---- greedy lookahead ------------------------------------------------------------------------
def test_lookahead_scores_a_step_by_its_greedy_rollout():
    la = {"la1:1": "A+\n\n", "la1:2": "B+\n\n", "la1:3": "C+\n\n", "la1:4": "D+\n\n"}
    scores = {**SCORES, "A+": 0.1, "B+": 0.8, "C+": 0.6, "D+": 0.3}
    _, plain, _, _ = run(SCRIPT, scores, method="beam_search", n=4, beam_width=2,
                         num_iterations=2)
    res, picked, gen, _ = run({**SCRIPT, **la, 5: "x<eos>", 6: "y<eos>", 7: "z<eos>",
                               8: "w<eos>"}, {**scores, "x": .1, "y": .2, "z": .3, "w": .4},
                              method="beam_search", n=4, beam_width=2, num_iterations=2,
                              lookahead=1)
    assert plain == [[1, 3]]
    assert picked == [[2, 3]]  # B's rollout (0.8) and C's (0.6) beat A's (0.1)
    lookahead_seqs = [(s, p) for s, p in gen.added if "la1" in s]
    assert len(lookahead_seqs) == 4 and all(p.temperature == 0.0 for _, p in lookahead_seqs)
    kept = [b for b in res.completions if b.parent_id in (2, 3)]
    assert all("+" not in b.text for b in res.completions) and kept


# ---- validation ------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, msg", [
    ({"method": "sart", "n": 4, "sart_m": 5}, "sart needs M <= N"),
    ({"method": "sart", "n": 4, "sart_beta": 6}, "sart needs beta <= N"),
    ({"method": "beam_search", "n": 4, "beam_width": 2, "sart_m": 2}, "sart_m is a parameter of method sart"),
    ({"method": "dvts", "n": 6, "beam_width": 4}, "dvts needs n to be a positive multiple"),
    ({"method": "vg_search", "n": 4, "beam_width": 3}, "vg_search needs n to be a positive multiple"),
    ({"method": "self_consistency", "n": 4, "lookahead": 1}, "lookahead=1 applies to methods"),
    ({"method": "sart", "n": 4, "lookahead": 2}, "not sart"),
    ({"method": "self_consistency", "n": 4, "tie_tolerance": 0.01},
     "tie_tolerance=0.01 applies to methods that select between paths \\(beam_search, dvts"),
    ({"method": "sart", "n": 4, "tie_tolerance": 1}, "not sart; use tie_tolerance=0.0"),
    ({"method": "beam_search", "n": 4, "beam_width": 2, "granularity": 3}, "granularity is a parameter of method vg_search"),
])
def test_method_config_errors_say_what_is_allowed(kw, msg):
    with pytest.raises(ValidationError, match=msg) as e:
        SearchConfig(**kw)  # the method's rules are checked when the config is built
    assert isinstance(e.value.errors()[0]["ctx"]["error"], SearchConfigError)


# ---- known faults of public implementations, on the simulated backend -----------------------
def _sim(method: str, n: int = 8, **search):
    cfg = RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                    verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
                    search=SearchConfig(method=method, n=n, beam_width=2, seed=3,
                                        max_tokens=1024, **search),
                    sim=SimConfig(hardware="rtx4090"))
    gen, ver = build_sim(cfg)
    gen.workload.register("What is 6 times 7?", "42", 0.3)
    requests = []
    score = ver.score
    ver.score = lambda reqs: requests.extend(reqs) or score(reqs)
    res = SearchRunner(gen, ver, cfg.search).run("What is 6 times 7?", "q")
    return res, requests, gen


@pytest.mark.parametrize("method", sorted(METHODS))
def test_no_method_returns_more_than_n_or_unfinished_paths_or_leaks_blocks(method):
    res, requests, gen = _sim(method)
    assert 0 < len(res.completions) <= 8
    assert all(b.finished and b.finish_reason for b in res.completions)
    assert gen.cache_stats().num_blocks_used == 0
    if method == "dvts":
        assert len(res.completions) == 4
    # the PRM sees exactly the generator's steps: each returned path was scored, in its last
    # request, as the very steps the generator wrote (one whole-text step for an outcome score)
    scored = {tuple(r.steps) for r in requests}
    if method == "self_consistency":  # majority vote: the PRM is never asked
        assert not requests
        return
    for b in res.completions:
        want = (b.text,) if method == "best_of_n_orm" else tuple(b.steps)
        assert want in scored
        assert "".join(want) == b.text
        if method != "best_of_n_orm":
            assert len(b.step_scores) == len(b.steps)
