"""SART as a branch-level search (SART section 4, Algorithm 1): exact decisions on scripted
engines, derived by hand in the comments; KV release on the simulated engine.

The scripted generator writes 3 characters (= tokens) of each running branch per engine step,
so branch b's text after k steps is the first 3k characters of its script.
"""

from __future__ import annotations

import pytest

from fasttts.backends.sim import build_sim
from fasttts.config import EngineConfig, RunConfig, SearchConfig, SimConfig, VerifierConfig
from fasttts.runtime.loop import SearchRunner
from tests.scripted import ScriptedGenerator, ScriptedVerifier

# b1: 15 chars, EOS after step 5;  b2: 9 chars, EOS after step 3;
# b3: 13 chars (would end after step 5);  b4: 20 chars (would end after step 7).
SCRIPT = {1: "A\n\nA1 \\boxed{1}<eos>", 2: "B\n\nB1\n\nB2<eos>",
          3: "C\n\nC1\n\nC2\n\nC3<eos>", 4: "D\n\nD1\n\nD2 \\boxed{2}<eos>"}
SCORES = {"A": 0.9, "B": 0.3, "C": 0.2, "D": 0.6, "A1 \\boxed{1}": 0.7, "B1": 0.4, "B2": 0.1,
          "C1": 0.5, "C2": 0.5, "C3": 0.5, "D1": 0.8, "D2 \\boxed{2}": 0.65}


def run(scores=None, max_num_seqs=256, **search):
    gen = ScriptedGenerator(SCRIPT, max_num_seqs=max_num_seqs)
    ver = ScriptedVerifier(scores or SCORES, gen)
    picked = []
    cfg = SearchConfig(**{"method": "sart", "n": 4, **search})
    runner = SearchRunner(gen, ver, cfg, on_select=lambda i, kept: picked.append(
        sorted(b.beam_id for b in kept)))
    return runner.run("problem", "p0"), picked, gen, ver


def test_pruned_mid_step_at_the_first_check_and_gone_from_the_next_engine_step():
    # N=4, M=2, alpha=0.5, beta=1, T=2. After engine step 2 (the request's 2nd decode step) the
    # first check: the complete steps are A (0.9), B (0.3), C (0.2), D (0.6); every branch is in
    # the middle of its second step (b3 has written "C1\n"). Phase 1: B and C are below 0.5,
    # the cap beta=1 prunes the lowest, b3. It is aborted in that turn: step 3 runs without it.
    res, picked, gen, _ = run(sart_t=2, sart_beta=1)
    assert picked[0] == [1, 2, 4]
    assert res.search_stats["pruned"][0] == (1, [3])
    assert gen.history[1] == ["p0/b1", "p0/b2", "p0/b3", "p0/b4"]
    assert gen.history[2] == ["p0/b1", "p0/b2", "p0/b4"]
    assert gen.aborted[0] == "p0/b3"


def test_completion_switches_phase_at_the_next_check_and_m_completions_stop_the_request():
    # Step 3: b2 completes ("B\n\nB1\n\nB2"), scored at once: B1 0.4, B2 0.1 -> reward 0.1
    # ("last"). Step 4 = the 2nd check: b2 completed since the last one -> phase 2, alpha' =
    # 0.1, cap N - 1 = 3; b1 (A 0.9) and b4 (D1 0.8) are above: nothing pruned. Step 5: b1
    # completes ("A1 \boxed{1}" 0.7): 2 = M completions stop the request while b4 is in the
    # middle of its third step ("D2 \bo..."): b4 is aborted, the engine is not stepped again.
    res, picked, gen, _ = run(sart_t=2, sart_beta=1)
    assert picked == [[1, 2, 4], [1, 4]]
    st = res.search_stats
    assert st["phase"] == "exploit" and st["threshold"] == pytest.approx(0.1)
    assert st["num_checks"] == 2 and st["num_pruned"] == 1
    assert res.stopped_early and gen.steps == 5 and gen.live == {}
    assert gen.aborted == ["p0/b3", "p0/b4"]
    assert [(b.beam_id, b.score) for b in res.completions] == [(1, 0.7), (2, 0.1)]
    assert res.completions[0].text == "A\n\nA1 \\boxed{1}"


def test_phase_2_prunes_below_the_first_completion_reward():
    # As above, but B2 scores 0.85: at the 2nd check alpha' = 0.85 and b4 (D1 0.8) is pruned
    # (cap 3, 1 used); b1 (0.9) goes on and completes at step 5: completed + pruned = N, the
    # request ends with no branch left (not an early stop).
    res, picked, gen, _ = run({**SCORES, "B2": 0.85}, sart_t=2, sart_beta=1)
    assert picked == [[1, 2, 4], [1]]
    assert res.search_stats["pruned"] == [(1, [3]), (2, [4])]
    assert not res.stopped_early and gen.live == {}
    assert [b.beam_id for b in res.completions] == [2, 1]


def test_the_prm_scores_each_complete_step_once():
    # check 1: one new step each; step 3: b2's B1 and B2 (its final, partial step included);
    # check 2: b4's D1 only (b1 has no new complete step: it is inside "A1 \boxed"); step 5:
    # b1's final step. Every request starts after the steps already scored.
    _, _, _, ver = run(sart_t=2, sart_beta=1)
    assert [(r.steps, r.start) for r in ver.requests] == [
        (("A\n\n",), 0), (("B\n\n",), 0), (("C\n\n",), 0), (("D\n\n",), 0),
        (("B\n\n", "B1\n\n", "B2"), 1),
        (("D\n\n", "D1\n\n"), 1),
        (("A\n\n", "A1 \\boxed{1}"), 1)]


def test_phase_1_cap_and_pruning_off():
    # beta=0: phase 1 prunes nothing although B and C are below alpha.
    _, picked, _, _ = run(sart_t=2, sart_beta=0)
    assert picked[0] == [1, 2, 3, 4]
    # sart_prune off: no check runs (nothing to prune, live branches are never scored). b2
    # completes at step 3; at step 5 b1 and b3 complete together (both count: 3 >= M = 2)
    # and the request stops; b4 is aborted. Only the three completions were scored.
    res, picked, gen, ver = run(sart_t=2, sart_prune=False)
    assert res.search_stats["num_checks"] == 0 and picked == []
    assert res.stopped_early and gen.aborted == ["p0/b4"]
    assert [r.start for r in ver.requests] == [0, 0, 0]
    assert sorted(b.beam_id for b in res.completions) == [1, 2, 3]


def test_no_check_before_t_decode_steps_of_the_request():
    # T=400 (the paper's default) is longer than every branch: no check runs, nothing is
    # pruned; b2 completes at step 3, b1 and b3 at step 5, which stops the request.
    res, picked, _, ver = run()
    assert picked == [] and res.search_stats["num_checks"] == 0 and res.stopped_early
    assert [r.start for r in ver.requests] == [0, 0, 0]  # the three completions, whole


def test_decode_steps_count_only_engine_steps_in_which_the_request_ran():
    # One batch slot: the four branches decode one after another (b1 runs alone for its 5
    # steps, then b2 for 3...). T=2 counts the request's decode steps, which here is every
    # engine step (one of its branches ran in each); after step 2 only b1 has a complete
    # step (A 0.9): nothing is below alpha.
    res, picked, gen, _ = run(max_num_seqs=1, sart_t=2, sart_beta=1)
    assert gen.history[:3] == [["p0/b1"]] * 3
    assert picked[0] == [1, 2, 3, 4]


def _sim(method, **search):
    cfg = RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                    verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
                    search=SearchConfig(method=method, **search), sim=SimConfig())
    return cfg, *build_sim(cfg)


@pytest.mark.parametrize("method, search", [
    ("self_consistency", {}), ("sart", {"sart_t": 16})])
def test_a_finished_branch_releases_its_kv_blocks_at_once(method, search):
    # On the simulated engine (paged KV cache, vLLM-style): in the step after a branch ends,
    # the blocks in use drop while the request's other branches go on decoding; at the end no
    # block is held.
    cfg, gen, ver = _sim(method, n=8, **search)
    ended, step = [], gen.step

    def checked():
        ups = step()
        held = {b for s in gen.engine.seqs.values() for b in s.kv.blocks}
        assert gen.cache_stats().num_blocks_used == len(held)  # no block outside a sequence
        done = [u.seq_id for u in ups if u.finished]
        assert not set(done) & set(gen.engine.seqs)  # an ended branch holds nothing
        ended.extend((d, gen.num_unfinished()) for d in done)
        return ups

    gen.step = checked
    SearchRunner(gen, ver, cfg.search).run("what is 2 + 2?", "p0")
    assert ended and ended[0][1] > 0  # the first ended while others were still decoding
    assert gen.cache_stats().num_blocks_used == 0 and gen.num_unfinished() == 0
