"""Roofline cost model and specs against hand-computed values (FastTTS section 4.3.1)."""

import pytest

from fasttts.perf.roofline import SeqWork, StepShape, step_flops_bytes, step_time
from fasttts.perf.specs import SpecError, load_hardware, load_model, model_names


def test_param_counts_match_the_model_cards():
    for name in model_names():
        m = load_model(name)
        assert m.num_params == pytest.approx(m.published_params, rel=0.01), name


def test_kv_bytes_per_token_by_hand():
    # Qwen2.5-Math-1.5B: 2 (K, V) x 28 layers x 2 KV heads x 128 dims x 2 bytes
    assert load_model("qwen2.5-math-1.5b").kv_bytes_per_token == 2 * 28 * 2 * 128 * 2 == 28672
    # Mistral-7B (Math-Shepherd): 2 x 32 x 8 x 128 x 2
    assert load_model("math-shepherd-7b").kv_bytes_per_token == 131072


def test_decode_7b_batch1_on_4090_is_weight_bytes_over_bandwidth():
    m, hw = load_model("qwen2.5-math-7b"), load_hardware("rtx4090")
    # weights read per step: everything but the input embedding (152064 x 3584), bf16
    weight_bytes = (m.num_params - 152064 * 3584) * 2
    expected = 0.003 + weight_bytes / (1008e9 * 0.8)  # overhead + bytes / achievable BW
    t = step_time(m, hw, [SeqWork(new_tokens=1, context=100)])
    assert t == pytest.approx(expected, rel=0.01)
    assert 0.019 < t < 0.022  # ~14.1 GB / 806 GB/s + 3 ms
    flops, nbytes = step_flops_bytes(m, StepShape.of([SeqWork(1, 100)]))
    assert flops / hw.flops < nbytes / hw.bandwidth  # memory-bound


def test_prefill_turns_compute_bound_at_large_batch():
    m, hw = load_model("qwen2.5-math-7b"), load_hardware("rtx4090")
    small = StepShape.of([SeqWork(1, 0)])
    big = StepShape.of([SeqWork(512, 0)] * 16)
    f, b = step_flops_bytes(m, small)
    assert f / hw.flops < b / hw.bandwidth
    f, b = step_flops_bytes(m, big)
    assert f / hw.flops > b / hw.bandwidth
    # compute-bound: doubling the tokens about doubles the time
    t1 = step_time(m, hw, big)
    t2 = step_time(m, hw, [SeqWork(512, 0)] * 32)
    assert t2 / t1 == pytest.approx(2.0, rel=0.05)


def test_attention_pairs_are_causal():
    shape = StepShape.of([SeqWork(new_tokens=3, context=10), SeqWork(new_tokens=1, context=5)])
    # 3 new tokens after 10 cached: keys 11, 12, 13; 1 token after 5: 6 keys
    assert shape.attention_pairs == 11 + 12 + 13 + 6
    assert (shape.tokens, shape.kv_read_tokens, shape.logit_rows, shape.seqs) == (4, 15, 2, 2)


def test_empty_step_takes_no_time():
    assert step_time(load_model("qwen2.5-math-1.5b"), load_hardware("h200"), []) == 0.0


def test_cpu_terms_add_compute_and_memory():
    m = load_model("qwen2.5-coder-0.5b-instruct")
    hw = load_hardware("cpu-epyc-1thread")
    shape = StepShape.of([SeqWork(1, 64)] * 8)
    f, b = step_flops_bytes(m, shape)
    tc, tm = f / hw.flops, b / hw.bandwidth
    expected = (hw.step_overhead_s + 8 * hw.seq_overhead_s + max(tc, tm)
                + (1 - hw.overlap) * min(tc, tm))
    assert step_time(m, hw, shape) == pytest.approx(expected)


def test_unknown_spec_lists_the_known_ones(tmp_path):
    with pytest.raises(SpecError, match="rtx4090"):
        load_hardware("rtx9999")
    with pytest.raises(SpecError, match="qwen2.5-math-1.5b"):
        load_model("gpt-5")
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x"}')
    with pytest.raises(SpecError, match="bad spec file"):
        load_hardware(str(bad))


def test_generator_steps_splits_a_step_log_into_weight_kv_and_compute_seconds():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "generator_steps.py"
    spec = importlib.util.spec_from_file_location("generator_steps", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    m, hw = load_model("qwen2.5-math-7b"), load_hardware("rtx4090")
    weight_bytes = (m.num_params - 152064 * 3584) * 2  # as in the batch-1 test above
    # two decode steps: one sequence at context 100, then two at contexts 100 and 300
    log = [StepShape.of([SeqWork(1, 100)]), StepShape.of([SeqWork(1, 100), SeqWork(1, 300)])]
    out = mod.step_split(m, hw, log)
    assert (out["steps"], out["seqs"], out["tokens"]) == (2, 3, 3)
    assert out["weight_s"] == pytest.approx(2 * weight_bytes / hw.bandwidth, rel=0.01)
    # KV: cached tokens read (100 + 400) plus the 3 new tokens written, 57344 bytes each
    assert out["kv_s"] == pytest.approx(503 * 57344 / hw.bandwidth, rel=1e-9)
    f1, _ = step_flops_bytes(m, log[0])
    f2, _ = step_flops_bytes(m, log[1])
    assert out["compute_s"] == pytest.approx((f1 + f2) / hw.flops, rel=1e-9)
