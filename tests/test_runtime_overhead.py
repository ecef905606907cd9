"""The runtime's own time between engine steps (`runtime_overhead_frac`)."""

import json
import time

import pytest

from fasttts.backends.sim import build_sim
from fasttts.config import (EngineConfig, RunConfig, RuntimeConfig, SearchConfig, VerifierConfig)
from fasttts.runtime.loop import SearchRunner

PROBLEM = "Let x + 1/x = 3. Find x^3 + 1/x^3."
STEP_SLEEP, SELECT_SLEEP = 0.004, 0.05


def test_overhead_counts_the_runtimes_time_and_not_the_engines_or_the_verifiers():
    """Wall time spent inside engine.step() (here: a 4 ms sleep per step) and inside the
    verifier is not overhead; time the search spends between steps (here: a 50 ms sleep per
    selection, in the on_select hook) is."""
    cfg = RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                    verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
                    search=SearchConfig(n=8, beam_width=4, seed=3, num_iterations=4),
                    runtime=RuntimeConfig())
    gen, ver = build_sim(cfg)
    real_step, real_score = gen.step, ver.score
    gen.step = lambda: (time.sleep(STEP_SLEEP), real_step())[1]
    ver.score = lambda reqs: (time.sleep(SELECT_SLEEP), real_score(reqs))[1]
    result = SearchRunner(gen, ver, cfg.search, runtime=cfg.runtime,
                          on_select=lambda it, kept: time.sleep(SELECT_SLEEP)).run(PROBLEM, "p")
    steps = len(result.occupancy)
    assert result.selections >= 2 and steps > 50
    hooked = SELECT_SLEEP * result.selections
    # at least the hook's sleeps; far less than the step or verifier sleeps it must exclude
    assert hooked <= result.runtime_overhead_s < hooked + 0.5 * STEP_SLEEP * steps
    frac = result.runtime_overhead_frac
    assert frac == result.runtime_overhead_s / (result.runtime_overhead_s
                                                + result.engine_step_s)
    assert result.engine_step_s > 0 and 0 < frac < 1


def test_every_record_and_summary_carries_it(tmp_path):
    from fasttts.cli import main

    out = tmp_path / "o"
    assert main(["eval", "--backend", "sim", "--dataset", "gsm8k", "--limit", "2", "--n", "8",
                 "--output-dir", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    fracs = [r["runtime_overhead_frac"] for r in rows]
    assert all(0 < f < 1 for f in fracs)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runtime_overhead_frac"] == pytest.approx(sum(fracs) / len(fracs))
