"""Speculative Beam Extension, the two-phase scheduler and LookAhead Verification (FastTTS 4.1),
on the simulated backend, where every path's text is a function of (path, seed)."""

import pytest

from fasttts.backends.sim import build_sim
from fasttts.beam import Beam
from fasttts.config import EngineConfig, RunConfig, RuntimeConfig, SearchConfig, SimConfig, VerifierConfig
from fasttts.runtime import spec_beam_extension as sbe_mod
from fasttts.runtime.generation import GenerationTrace, StepRequest, extend_beams
from fasttts.runtime.loop import SearchRunner
from fasttts.runtime.spec_beam_extension import SpeculativeBeamExtension, speculative_potentials
from fasttts.steps import build_messages

PROBLEMS = [
    "Find the number of ordered pairs (a, b) of integers with a^2 + b^2 = 25.",
    "Let x + 1/x = 3. Find x^3 + 1/x^3.",
    "How many positive divisors does 360 have?",
]


def _cfg(runtime, n=16, num_iterations=40, **sim):
    return RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                     verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
                     search=SearchConfig(n=n, beam_width=4, seed=1,
                                         num_iterations=num_iterations),
                     sim=SimConfig(**sim), runtime=runtime)


def _run(runtime, problem, n=16, num_iterations=40, **sim):
    """(selected beams per iteration, completions, result, generator) of one search."""
    cfg = _cfg(runtime, n, num_iterations, **sim)
    gen, ver = build_sim(cfg)
    picked = []
    runner = SearchRunner(gen, ver, cfg.search, runtime=cfg.runtime,
                          on_select=lambda it, kept: picked.append(
                              [(b.beam_id, b.text, tuple(b.step_scores)) for b in kept]))
    result = runner.run(problem, "p")
    done = [(b.beam_id, b.text, b.step_scores) for b in result.completions]
    return picked, done, result, gen


def test_potentials_follow_score_bins():
    beams = [Beam(beam_id=i, score=s) for i, s in enumerate([0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.6, 0.4])]
    # ranks 0-1 -> C_1 (M=4), 2-3 -> C_2 (M=3), 4-5 -> C_3 (M=2), 6-7 -> C_4 (M=1)
    assert speculative_potentials(beams, 4) == {0: 4, 2: 4, 4: 3, 6: 3, 7: 2, 5: 2, 3: 1, 1: 1}
    tied = [Beam(beam_id=i, score=0.5) for i in range(8)]
    assert set(speculative_potentials(tied, 4).values()) == {4}
    assert speculative_potentials([], 4) == {}


@pytest.mark.parametrize("problem", PROBLEMS)
def test_equivalence_speculation_on_off_same_selections_every_iteration(problem):
    """With R = 0 (duplicates inherit no truncated copy) every head start is the child's own
    request: a branch that ended is what the child samples, a parked one is continued in the
    engine (the simulator, like vLLM, would draw a resubmitted partial step anew), so
    selections and completions are identical, with or without LookAhead Verification (a
    step's score depends only on its prefix) and prefix-aware scheduling (order changes only
    when each sequence runs)."""
    base = _run(RuntimeConfig(), problem)
    sbe = _run(RuntimeConfig(spec_beam_extension=True, spec_truncation_ratio=0), problem)
    # whole-path scoring: LookAhead rides along (module docstring of lookahead_verification)
    both = _run(RuntimeConfig.fasttts(spec_truncation_ratio=0, prefix_aware_scheduling=True,
                                      incremental_verification=False), problem)
    assert len(base[0]) >= 3
    assert base[0] == sbe[0] == both[0]
    assert base[1] == sbe[1] == both[1]
    assert sbe[2].spec["head_start_tokens"] > 0 and sbe[2].spec["truncated_head_starts"] == 0
    assert sbe[2].spec["continued_head_starts"] > 0  # parked branches were taken over
    assert both[2].spec["lookahead_scores_used"] > 0


@pytest.mark.parametrize("num_iterations", [2, 3, 4])
def test_equivalence_when_the_next_iteration_is_the_last(num_iterations):
    """Branches launched in the iteration before the last one are sent with the last
    iteration's stop strings (none: it generates to the end), so the child that takes one
    over goes on to its end as its own request would (with the step delimiter as their stop,
    selections differed on 2 of these 3 budgets)."""
    for problem in PROBLEMS:
        base = _run(RuntimeConfig(), problem, num_iterations=num_iterations)
        spec = _run(RuntimeConfig.fasttts(spec_truncation_ratio=0), problem,
                    num_iterations=num_iterations)
        assert base[0] == spec[0] and base[1] == spec[1]


def test_truncated_copies_are_the_only_source_of_divergence(monkeypatch):
    """With R = 0.85 duplicates inherit truncated copies of another branch's tokens (the
    paper's intended approximation). Selections match the baseline in every iteration before
    the first one whose beams start from a truncated copy; only from there may they differ."""
    problem = PROBLEMS[0]
    first_truncated = []
    adopt = SpeculativeBeamExtension.adopt

    def spy(self, children, decode):
        before = self.num_truncated
        adopt(self, children, decode)
        if self.num_truncated > before and not first_truncated:
            first_truncated.append(len(self._seen))
        self._seen.append(1)

    monkeypatch.setattr(SpeculativeBeamExtension, "_seen", [], raising=False)
    monkeypatch.setattr(SpeculativeBeamExtension, "adopt", spy)
    base = _run(RuntimeConfig(), problem)
    spec = _run(RuntimeConfig(spec_beam_extension=True, spec_truncation_ratio=0.85), problem)
    assert spec[2].spec["truncated_head_starts"] > 0
    k = first_truncated[0]  # children of iteration k got truncated copies
    assert k >= 1
    assert base[0][:k] == spec[0][:k]


def test_speculation_fills_the_batch():
    base = _run(RuntimeConfig(), PROBLEMS[1])[2]
    spec = _run(RuntimeConfig(spec_beam_extension=True), PROBLEMS[1])[2]
    assert spec.mean_occupancy > base.mean_occupancy + 0.2
    assert spec.spec["branches"] > 0 and spec.spec["spec_tokens"] > spec.spec["head_start_tokens"] > 0
    # every speculative sequence stays within the phase's batch slots
    assert all(a + b <= s for _, a, b, s in spec.occupancy)


def test_no_tail_latency_speculation_stops_with_the_last_beam():
    cfg = _cfg(RuntimeConfig(spec_beam_extension=True))
    steps = {}
    for name, use in (("base", False), ("spec", True)):
        gen, _ = build_sim(cfg)
        prompt = gen.encode_chat(build_messages(PROBLEMS[2]))
        root = Beam(beam_id=0)
        beams = [root.child(i + 1) for i in range(8)]
        req = StepRequest(prompt_ids=prompt, temperature=0.8, top_p=1.0, max_tokens=2048,
                          stop=("\n\n",), seed=0, problem_id="p", iteration=0)
        spec = SpeculativeBeamExtension(4, 0.85, 0, "p") if use else None
        extend_beams(gen, beams, req, GenerationTrace(), spec)
        steps[name] = (gen.engine.num_steps, [b.text for b in beams])
        assert gen.num_unfinished() == 0  # every speculative sequence was aborted
        assert gen.cache_stats().num_blocks_used == 0
        if use:
            assert spec.num_branches > 0 and spec.results
    # the phase takes exactly as many engine steps: the last standard beam ends it
    assert steps["base"] == steps["spec"]


def test_memory_preemption_stops_speculation_and_frees_blocks():
    problem = PROBLEMS[0]
    tiny = dict(generator_kv_cache_bytes=300 * 16 * 28672, verifier_kv_cache_bytes=2 << 30)
    base = _run(RuntimeConfig(), problem, n=32, **tiny)
    spec = _run(RuntimeConfig(spec_beam_extension=True, spec_truncation_ratio=0), problem, n=32,
                **tiny)
    assert spec[2].spec["preempted_phases"] > 0
    assert spec[3].cache_stats().num_blocks_used == 0
    assert base[0] == spec[0]  # preempted or not, the search decides the same


def test_exact_refuses_stopped_branches_that_would_resume_from_a_new_stream():
    """A preemption aborts speculative branches mid-step. Resubmitted, such a head start's
    step goes on from a freshly seeded sampler (vLLM, and the simulator since it draws a
    resubmitted partial step anew): the search then differs from the baseline. `exact` (the
    default) drops them instead and stays equal."""
    tiny = dict(generator_kv_cache_bytes=300 * 16 * 28672, verifier_kv_cache_bytes=2 << 30)
    base = _run(RuntimeConfig(), PROBLEMS[0], n=32, **tiny)
    exact = _run(RuntimeConfig(spec_beam_extension=True, spec_truncation_ratio=0), PROBLEMS[0],
                 n=32, **tiny)
    loose = _run(RuntimeConfig(spec_beam_extension=True, spec_truncation_ratio=0, exact=False),
                 PROBLEMS[0], n=32, **tiny)
    assert exact[2].spec["refused_head_starts"] > 0 and exact[2].spec["refused_tokens"] > 0
    assert loose[2].spec["refused_head_starts"] == 0
    assert base[0] == exact[0] and base[1] == exact[1]
    assert base[0] != loose[0]


def test_a_parked_branch_is_continued_not_resubmitted():
    """The branch still generating when the last standard beam ends its step stays in the
    engine; the kept child that owns its stream takes that sequence over (no new request),
    the other parked branches are aborted at the selection, and the child's step is exactly
    what its own request writes."""
    from fasttts.runtime.driver import Driver, Generate
    from fasttts.runtime.generation import generate_step

    cfg = _cfg(RuntimeConfig(spec_beam_extension=True))
    gen, _ = build_sim(cfg)
    req = StepRequest(prompt_ids=gen.encode_chat(build_messages(PROBLEMS[0])), temperature=0.8,
                      top_p=1.0, max_tokens=2048, stop=("\n\n",), seed=0, problem_id="p",
                      iteration=0)
    req1 = StepRequest(**{**req.__dict__, "iteration": 1})
    root = Beam(beam_id=0)
    beams = [root.child(i + 1) for i in range(8)]
    spec = SpeculativeBeamExtension(4, 0.0, 0, "p")
    seen = {}

    def search():
        yield from generate_step(gen, beams, req, GenerationTrace(), spec)
        seen["parked"] = parked = spec.parked()
        seen["running"] = gen.num_unfinished()
        beam_id, branch = int(parked[0].split("/b")[1].split("/")[0]), int(parked[0][-1])
        owner = next(b for b in beams if b.beam_id == beam_id)
        children = [owner.child(100 + j) for j in range(branch + 1)]
        seen["drop"] = spec.adopt(children[-1:], gen.decode)
        seen["head"] = children[-1].head_start.seq_id
        yield Generate(abort=seen["drop"], step=False)
        added = []
        real_add = gen.add_sequence
        gen.add_sequence = lambda *a, **k: (added.append(a[0]), real_add(*a, **k))
        yield from generate_step(gen, children[-1:], req1, GenerationTrace())
        seen["added"] = added
        return children[-1], owner

    child, owner = Driver(gen).run(search())
    assert len(seen["parked"]) >= 2 and seen["running"] == len(seen["parked"])
    assert seen["head"] == seen["parked"][0] and set(seen["drop"]) == set(seen["parked"][1:])
    assert seen["added"] == []  # taken over, not resubmitted
    fresh, _ = build_sim(cfg)
    own = Beam(beam_id=99, parent_id=owner.beam_id, branch=child.branch,
               token_ids=list(owner.token_ids), text=owner.text, steps=list(owner.steps))
    extend_beams(fresh, [own], req1, GenerationTrace())
    assert child.text == own.text and child.token_ids == own.token_ids
    assert gen.num_unfinished() == 0 and gen.cache_stats().num_blocks_used == 0


def test_speculative_sequences_are_preempted_first():
    """Under memory pressure the engine preempts a speculative sequence, not a standard beam
    that arrived after it."""
    from fasttts.backends.sim.engine import SimEngine, SimSequence, VirtualClock
    from fasttts.perf.specs import load_hardware, load_model

    eng = SimEngine(load_model("qwen2.5-math-1.5b"), load_hardware("rtx4090"), VirtualClock(),
                    num_blocks=6, block_size=4, max_num_seqs=8, max_num_batched_tokens=64,
                    max_model_len=16)
    spec = SimSequence("spec", list(range(100, 108)), priority=sbe_mod.SPEC_PRIORITY)
    std = SimSequence("std", list(range(200, 208)), priority=7)  # a late standard beam
    eng.add(spec)
    eng.add(std)
    while not eng.num_preemptions:
        for s in eng.step():
            s.token_ids.append(1)
    assert not spec.running and std.running


def test_runtime_config_rules():
    with pytest.raises(ValueError, match="lookahead_verification needs spec_beam_extension"):
        RuntimeConfig(lookahead_verification=True)
    with pytest.raises(ValueError):
        RuntimeConfig(spec_truncation_ratio=1.5)
    on = RuntimeConfig.fasttts()
    assert on.spec_beam_extension and on.lookahead_verification


def test_cli_technique_flags(tmp_path, capsys):
    import json

    from fasttts.cli import main

    args = ["eval", "--backend", "sim", "--dataset", "aime24", "--limit", "2", "--n", "8"]
    assert main(args + ["--fasttts", "--output-dir", str(tmp_path / "f")]) == 0
    cfg = json.loads((tmp_path / "f" / "config.json").read_text())["config"]["runtime"]
    assert cfg["spec_beam_extension"] and cfg["lookahead_verification"]
    assert cfg["prefix_aware_scheduling"] and cfg["memory_planner"] and not cfg["offload"]
    rec = json.loads((tmp_path / "f" / "results.jsonl").read_text().splitlines()[0])
    assert rec["spec"]["branches"] > 0 and rec["batch_occupancy"] > 0
    assert "generation batch occupancy" in capsys.readouterr().out
    for bad, msg in ((["--fasttts", "--baseline"], "contradict"),
                     (["--baseline", "--spec-beam-extension"], "--baseline turns every technique off"),
                     (["--lookahead-verification"], "needs spec_beam_extension"),
                     (["--offload"], "offload is an option of memory_planner"),
                     (["--spec-beam-extension", "--spec-truncation-ratio", "2"],
                      "spec_truncation_ratio: R must be a number within [0, 1]"),
                     (["--spec-beam-extension", "--spec-truncation-ratio", "-0.5"],
                      "got -0.5"),
                     (["--spec-beam-extension", "--spec-truncation-ratio", "nan"], "got nan"),
                     (["--exact"], "exact is an option of spec_beam_extension"),
                     (["--fasttts", "--exact", "--method", "best_of_n"],
                      "--exact applies to speculative beam extension, which method best_of_n "
                      "does not run"),
                     (["--fasttts", "--exact", "--method", "sart"],
                      "which method sart does not run")):
        assert main(args + bad + ["--output-dir", str(tmp_path / "bad")]) == 2
        assert msg in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_lookahead_appends_one_complete_branch_per_beam_the_lowest_numbered():
    from fasttts.beam import Beam
    from fasttts.runtime.lookahead_verification import plan_requests
    from fasttts.runtime.spec_beam_extension import SpecBranch

    a = Beam(1, text="x = 1\n\n", steps=["x = 1\n\n"])
    b = Beam(2, text="y = 2\n\n", steps=["y = 2\n\n"])
    branches = [SpecBranch(1, 1, "s1", text="x + 1 = 2\n\n", finish_reason="stop"),
                SpecBranch(1, 0, "s0", text="so 2\n\n", finish_reason="stop")]
    plan = plan_requests("p", [a, b], branches, "\n\n")
    assert [r.steps for r in plan.requests] == [("x = 1\n\n", "so 2\n\n"), ("y = 2\n\n",)]
    assert [r.start for r in plan.requests] == [0, 0] and plan.num_lookahead == 1
    plan.apply([[0.9, 0.8], [0.7]])
    assert (a.step_scores, b.step_scores) == ([0.9], [0.7])
    assert (branches[1].step_scores, branches[0].step_scores) == ([0.8], [])


@pytest.mark.parametrize("keep, path, cached, rides", [
    (0.4, 300, False, True),    # 0.4 x (50 + 300) = 140 >= 50
    (0.1, 300, False, False),   # 0.1 x 350 = 35 < 50
    (0.15, 300, False, True),   # 0.15 x 350 = 52.5 >= 50
    (0.4, 300, True, False),    # 0.4 x 50 = 20 < 50: the cached path saves nothing
    (1.0, 300, True, True),     # a branch certain to be kept costs nothing extra
])
def test_lookahead_rides_along_only_where_its_expected_saving_covers_the_step(keep, path, cached,
                                                                             rides):
    """P x (L + uncached path tokens) >= L (lookahead_verification's docstring), with L = 50
    speculative tokens after a 300-token path."""
    from fasttts.runtime.lookahead_verification import plan_requests, rides_along
    from fasttts.runtime.spec_beam_extension import SpecBranch

    beam = Beam(1, text="x = 1\n\n", steps=["x = 1\n\n"], token_ids=list(range(path)))
    br = SpecBranch(1, 0, "s0", token_ids=list(range(50)), text="so 2\n\n",
                    finish_reason="stop", keep_probability=keep)
    assert rides_along(br, beam, cached) is rides
    plan = plan_requests("p", [beam], [br], "\n\n", prefix_cached=cached)
    assert (plan.num_lookahead, plan.num_declined) == ((1, 0) if rides else (0, 1))
    assert plan.requests[0].steps == (("x = 1\n\n", "so 2\n\n") if rides else ("x = 1\n\n",))


def test_lookahead_beside_incremental_verification_declines_and_changes_nothing():
    """With the verifier reading its prefix cache, no branch of B = 4 bins (P <= 0.4) is worth
    scoring ahead: every complete one is declined, and the search is the same as without
    LookAhead."""
    problem = PROBLEMS[0]
    rt = dict(spec_truncation_ratio=0, incremental_verification=True)
    off = _run(RuntimeConfig(spec_beam_extension=True, **rt), problem)
    on = _run(RuntimeConfig(spec_beam_extension=True, lookahead_verification=True, **rt),
              problem)
    assert on[0] == off[0] and on[1] == off[1]
    assert on[2].spec["lookahead_requests"] == 0 and on[2].spec["lookahead_declined"] > 0
    assert on[2].verifier_time == off[2].verifier_time


def test_branches_carry_their_bins_keep_probability(monkeypatch):
    """Each speculative branch is launched with the prior P of its beam's bin,
    2 M_i / (B (B + 1)) at B = 4 (spec_cost.keep_probability)."""
    cfg = _cfg(RuntimeConfig(spec_beam_extension=True, spec_truncation_ratio=0), n=8)
    gen, ver = build_sim(cfg)
    seen = []
    real = sbe_mod.SpeculativeBeamExtension._launch

    def spy(self, free, running):
        adds = real(self, free, running)
        seen.extend((c.potential, br.keep_probability) for brs in self.results.values()
                    for br in brs for c in self._cands if c.beam.beam_id == br.beam_id)
        return adds

    monkeypatch.setattr(sbe_mod.SpeculativeBeamExtension, "_launch", spy)
    SearchRunner(gen, ver, cfg.search, runtime=cfg.runtime).run(PROBLEMS[1], "p")
    assert seen and all(p == pytest.approx(m / 10) for m, p in seen)
    assert {m for m, _ in seen} >= {4}
