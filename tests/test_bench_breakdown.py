"""Where a comparison's time goes (`fasttts.bench.breakdown`) and the problems a configuration
loses on, by hand, and as the real-ablation report section shows them."""

from __future__ import annotations

from dataclasses import replace

from fasttts.bench.breakdown import breakdown_table, losses


def _row(pid, config, *, gen, ver, lat, tokens, scored, goodput, spec=None, n=16):
    return {"id": pid, "setting": "s", "n": n, "config": config, "generator_time_s": gen,
            "verifier_time_s": ver, "latency_s": lat, "tokens_generated": tokens,
            "verifier_prompt_tokens": scored, "precise_goodput_tok_s": goodput,
            "batch_occupancy": 0.5, "runtime_overhead_frac": 0.004, "spec": spec}


ROWS = [
    _row("a", "baseline", gen=20.0, ver=30.0, lat=50.0, tokens=1000, scored=10000, goodput=2.0),
    _row("b", "baseline", gen=10.0, ver=10.0, lat=20.0, tokens=400, scored=5000, goodput=4.0),
    _row("a", "x", gen=18.0, ver=2.0, lat=20.0, tokens=900, scored=10000, goodput=2.2,
         spec={"spec_tokens": 30, "head_start_tokens": 12, "declined_slots": 7}),
    _row("b", "x", gen=12.0, ver=9.0, lat=21.0, tokens=480, scored=4000, goodput=3.0,
         spec={"spec_tokens": 5, "head_start_tokens": 0, "declined_slots": 40}),
]


def test_the_breakdown_is_each_quantity_s_range_over_the_problems():
    lines = breakdown_table(ROWS, ("baseline", "x")).splitlines()
    assert lines[0].startswith("| setting | n | config | problems | generator ms / generated "
                               "token | verifier ms / scored token | verifier share |")
    # baseline: 20 s / 1000 tok = 20.0 ms, 10 s / 400 = 25.0 ms; 30 s / 10000 = 3.00 ms,
    # 10 s / 5000 = 2.00 ms; shares 0.60 and 0.50; no speculation: 0
    assert lines[2] == ("| s | 16 | baseline | 2 | 20.0-25.0 | 2.00-3.00 | 0.50-0.60 | 0.50 | "
                        "0.40 | 0 | 0 | 0 |")
    # x: 18/900 = 20.0, 12/480 = 25.0 ms; 2/10000 = 0.20, 9/4000 = 2.25 ms; 0.10, 0.43
    assert lines[3] == ("| s | 16 | x | 2 | 20.0-25.0 | 0.20-2.25 | 0.10-0.43 | 0.50 | 0.40 | "
                        "5-30 | 0-12 | 7-40 |")


def test_losses_name_each_problem_a_configuration_is_worse_on():
    assert losses(ROWS, ("baseline", "x")) == [
        "s, n = 16, x: goodput below the baseline's on 1 of 2 problems (b x0.75)"]
    assert losses(ROWS, ("baseline", "x"), "latency_s") == [
        "s, n = 16, x: latency above the baseline's on 1 of 2 problems (b x1.05)"]
    better = [r for r in ROWS if r["id"] == "a"]
    assert losses(better, ("baseline", "x")) == []
    # 3.99 / 4.0 = 0.9975: a loss, printed with the digit that shows it
    near = [*ROWS[:2], ROWS[2], {**ROWS[3], "precise_goodput_tok_s": 3.99}]
    assert losses(near, ("baseline", "x")) == [
        "s, n = 16, x: goodput below the baseline's on 1 of 2 problems (b x0.998)"]


def test_the_real_ablation_section_shows_ranges_the_breakdown_and_the_losses(tmp_path):
    from fasttts.bench import real_ablation
    from fasttts.bench.compare import FASTTTS

    plan = replace(real_ablation.plan(False), ns=(16,), limit=2)
    rows = [{"key": f"{r['id']}{c}", "requests": [], "row": {
        **r, "config": c, "dataset": "math500", "clock": "wall", "limit_s": 1.0,
        "mean_tokens_per_beam": 10, "correct": None, "completions_sha": r["id"] + c}}
        for c in plan.configs for r in ROWS if r["config"] == ("baseline" if c == "baseline"
                                                                  else "x")]
    section = real_ablation.report({"plan": plan.as_config()}, rows, tmp_path)
    # FastTTS's per-problem ratios: goodput 1.1 and 0.75 (median 0.925), latency 0.4 and 1.05
    assert ("medians of per-problem ratios [their range over the problems]: n = 16: goodput "
            "x0.93 [0.75-1.10], latency x0.73 [0.40-1.05].") in section.ours
    assert "| s | 16 | iv | 2 | 20.0-25.0 | 0.20-2.25 | 0.10-0.43 |" in section.ours
    assert (f"- s, n = 16, {FASTTTS}: goodput below the baseline's on 1 of 2 problems (b x0.75)."
            in section.shortfall)
    assert ("- the median of per-problem goodput ratios x0.93 is below the paper's average x2.2."
            in section.shortfall)


def test_the_compare_command_prints_the_breakdown_and_losses_on_request(tmp_path, capsys):
    import json

    from fasttts.bench import compare

    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"key": f"{r['id']}{r['config']}", "row": {
        **r, "clock": "wall", "limit_s": 1.0, "mean_tokens_per_beam": 10, "correct": None}})
        + "\n" for r in ROWS))
    assert compare.main([str(path)]) == 0
    assert "declined slots" not in capsys.readouterr().out
    assert compare.main([str(path), "--breakdown"]) == 0
    out = capsys.readouterr().out
    assert "| s | 16 | x | 2 | 20.0-25.0 | 0.20-2.25 | 0.10-0.43 | 0.50 | 0.40 |" in out
    assert out.rstrip().endswith(
        "s, n = 16, x: latency above the baseline's on 1 of 2 problems (b x1.05)")


def test_the_real_ablation_section_names_a_configuration_whose_accuracy_fell(tmp_path):
    from fasttts.bench import real_ablation
    from fasttts.bench.compare import FASTTTS

    plan = replace(real_ablation.plan(False), ns=(16,), limit=2)

    def correct(pid, config):  # baseline: a right, b right in some path only;
        # FASTTTS: a right, b wrong in every path; the other configurations right everywhere
        right = {("a", "baseline"): (True, True), ("b", "baseline"): (False, True),
                 ("a", FASTTTS): (True, True), ("b", FASTTTS): (False, False)}
        majority, any_ = right.get((pid, config), (True, True))
        return {"majority": majority, "weighted": majority, "best": majority,
                "pass@n": any_, "answer": majority}

    rows = [{"key": f"{r['id']}{c}", "requests": [], "row": {
        **r, "config": c, "dataset": "math500", "clock": "wall", "limit_s": 1.0,
        "mean_tokens_per_beam": 10, "correct": correct(r["id"], c),
        "completions_sha": r["id"] + c}}
        for c in plan.configs for r in ROWS if r["config"] == ("baseline" if c == "baseline"
                                                                  else "x")]
    section = real_ablation.report({"plan": plan.as_config()}, rows, tmp_path)
    # pass@n: baseline 2/2 = 1.00, FASTTTS 1/2 = 0.50; top-1 1/2 in both (not a loss);
    # every other configuration is right everywhere (1.00, 1.00): no line
    assert (f"- s, n = 16, {FASTTTS}: accuracy below the baseline's on the same 2 problems "
            f"(pass@n 0.50 vs 1.00).") in section.shortfall
    assert section.shortfall.count("accuracy below") == 1
