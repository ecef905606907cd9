"""The simulated backend behind the same interfaces: determinism, order independence, stats."""

import json

import pytest

from fasttts.backends.base import GenerationParams
from fasttts.backends.sim import build_sim, static_split
from fasttts.backends.sim import tokenizer as tok
from fasttts.cli import main
from fasttts.config import EngineConfig, RunConfig, SearchConfig, SimConfig, VerifierConfig
from fasttts.perf.specs import load_hardware, load_model
from fasttts.runtime.loop import SearchRunner
from fasttts.steps import build_messages

PROBLEM = "What is the sum of the first 10 positive integers?"


def _cfg(n=8, beam_width=4, method="beam_search", **sim):
    return RunConfig(
        backend="sim",
        generator=EngineConfig(model="qwen2.5-math-1.5b"),
        verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
        search=SearchConfig(method=method, n=n, beam_width=beam_width, seed=3),
        sim=SimConfig(**sim),
    )


def _texts(gen, order, params):
    prompt = gen.encode_chat(build_messages(PROBLEM))
    for i in order:
        gen.add_sequence(f"s{i}", prompt, GenerationParams(max_tokens=300, seed=i, stop=params))
    text = {f"s{i}": "" for i in order}
    while gen.num_unfinished():
        for up in gen.step():
            text[up.seq_id] += up.new_text
    return text


def test_text_is_independent_of_submission_order_and_batch_cap():
    g1, _ = build_sim(_cfg())
    g2, _ = build_sim(_cfg(max_num_seqs=1))
    a = _texts(g1, range(6), ("\n\n",))
    b = _texts(g2, list(reversed(range(6))), ("\n\n",))
    assert a == b
    assert all(t.endswith("\n\n") or "\\boxed" in t for t in a.values())
    assert len(set(a.values())) == 6  # different seeds, different steps


def test_stop_eos_length_and_blocks_back_after_abort():
    gen, _ = build_sim(_cfg())
    prompt = gen.encode_chat(build_messages(PROBLEM))
    gen.add_sequence("short", prompt, GenerationParams(max_tokens=3, seed=1))
    gen.add_sequence("long", prompt, GenerationParams(max_tokens=4000, seed=1))
    gen.add_sequence("gone", prompt, GenerationParams(max_tokens=4000, seed=2))
    reasons, ntok = {}, {}

    def run(steps):
        for _ in range(steps):
            for up in gen.step():
                ntok[up.seq_id] = ntok.get(up.seq_id, 0) + len(up.new_token_ids)
                if up.finished:
                    reasons[up.seq_id] = up.finish_reason

    run(3)
    gen.abort(["gone"])
    while gen.num_unfinished():
        run(1)
    assert reasons == {"short": "length", "long": "eos"}
    assert ntok["short"] == 3
    assert gen.cache_stats().num_blocks_used == 0
    assert gen.now() > 0
    with pytest.raises(ValueError, match="does not fit"):
        gen.add_sequence("x", [tok.ASSISTANT] * 5000, GenerationParams(max_tokens=1))
    with pytest.raises(ValueError, match="empty"):
        gen.add_sequence("x", [], GenerationParams(max_tokens=1))


class _ReversedSubmission:
    """Wraps a generator so the sequences of each batch reach the engine in reverse order."""

    def __init__(self, inner):
        self.inner, self._held = inner, []

    def add_sequence(self, *args, **kw):
        self._held.append((args, kw))

    def step(self):
        while self._held:
            args, kw = self._held.pop()
            self.inner.add_sequence(*args, **kw)
        return self.inner.step()

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _selections(cfg, wrap=None):
    gen, ver = build_sim(cfg)
    picked = []
    runner = SearchRunner(wrap(gen) if wrap else gen, ver, cfg.search,
                          on_select=lambda it, kept: picked.append([b.beam_id for b in kept]))
    result = runner.run(PROBLEM, "p")
    return picked, [(b.beam_id, b.text, b.step_scores) for b in result.completions], gen


def test_search_decisions_do_not_depend_on_order_batching_or_preemption():
    base, base_done, _ = _selections(_cfg(n=64))
    rev, rev_done, _ = _selections(_cfg(n=64), _ReversedSubmission)
    small, small_done, _ = _selections(_cfg(n=64, max_num_seqs=3))
    # a KV cache of 300 blocks (4800 tokens) for 64 paths forces preemptions (32 paths sharing
    # the prompt's blocks fit in it)
    tiny, tiny_done, gen = _selections(_cfg(n=64, generator_kv_cache_bytes=300 * 16 * 28672,
                                            verifier_kv_cache_bytes=2 << 30))
    assert gen.cache_stats().num_preemptions > 0
    assert len(base) > 2
    assert base == rev == small == tiny
    assert base_done == rev_done == small_done == tiny_done


def test_preemptions_are_reported_under_memory_pressure():
    cfg = _cfg(n=64, generator_kv_cache_bytes=300 * 16 * 28672, verifier_kv_cache_bytes=2 << 30,
               max_num_seqs=256)
    gen, ver = build_sim(cfg)
    result = SearchRunner(gen, ver, cfg.search).run(PROBLEM, "p")
    assert result.cache.num_preemptions > 0
    assert result.cache.num_recomputed_tokens > 0
    assert gen.cache_stats().num_blocks_used == 0


def test_static_split_and_a_clear_error_when_models_do_not_fit():
    hw, g, v = load_hardware("rtx4090"), load_model("qwen2.5-math-1.5b"), load_model("math-shepherd-7b")
    split = static_split(hw, g, v, SimConfig())
    assert split.generator_kv + split.verifier_kv == (
        int(hw.memory_bytes * 0.9) - g.weight_bytes - v.weight_bytes - (1 << 30))
    assert split.generator_kv == pytest.approx(split.verifier_kv, abs=1)
    with pytest.raises(ValueError, match="do not fit in 0.9 x rtx3070ti"):
        build_sim(_cfg(hardware="rtx3070ti"))


def test_simulated_results_are_labelled():
    gen, ver = build_sim(_cfg())
    result = SearchRunner(gen, ver, _cfg().search).run(PROBLEM, "p")
    assert result.clock == "simulated"
    assert result.latency == pytest.approx(result.generator_time + result.verifier_time)
    assert all(len(b.step_tokens) == len(b.steps) and sum(b.step_tokens) == b.num_tokens
               for b in result.completions)


SIM_ARGS = ["eval", "--backend", "sim", "--dataset", "aime24", "--limit", "3", "--n", "8",
            "--beam-width", "4", "--hardware", "rtx4090"]


#: Fields measured on the wall clock even on the simulator (the runtime's own Python time).
WALL_FIELDS = ("runtime_overhead_frac",)


def _without_wall(text: str) -> list:
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    for row in rows:
        for key in WALL_FIELDS:
            assert key not in row or row[key] is None or 0 <= row[key] < 1
            row.pop(key, None)
    return rows


def test_same_config_twice_gives_byte_identical_files(tmp_path, capsys):
    """Everything but the runtime's own wall-clock overhead is a function of the config."""
    for d in ("a", "b"):
        assert main(SIM_ARGS + ["--output-dir", str(tmp_path / d)]) == 0
    for f in ("trace.jsonl", "config.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    for f in ("results.jsonl", "summary.json"):
        a, b = ((tmp_path / d / f).read_text() for d in "ab")
        if f == "summary.json":
            a, b = json.dumps(json.loads(a)), json.dumps(json.loads(b))
        assert _without_wall(a) == _without_wall(b), f
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["clock"] == "simulated" and summary["num_problems"] == 3
    out = " ".join(capsys.readouterr().out.split())
    assert "simulated rtx4090, virtual-clock seconds" in out


@pytest.mark.parametrize("extra, message", [
    (["--hardware", "rtx9999"], "unknown hardware spec 'rtx9999'; known: cpu-epyc-1thread, "
     "cpu-epyc-avx512-bf16-2thread, cpu-epyc-avx512-fp32-2thread, cpu-epyc-fp32-1thread, "
     "cpu-epyc-fp32-2thread, cpu-xeon-amx-bf16-2thread, cpu-xeon-amx-fp32-2thread, h100, "
     "h200"),
    (["--generator", "llama-70b"], "unknown model spec 'llama-70b'"),
    (["--hardware", "rtx3070ti", "--verifier", "math-shepherd-7b", "--generator",
      "qwen2.5-math-7b"], "do not fit"),
    (["--memory-fraction", "1.5"], "memory_fraction"),
    (["--sim-workload", "/nonexistent/w.json"],
     "bad workload file /nonexistent/w.json: cannot be read (No such file"),
])
def test_bad_sim_options_fail_before_running(tmp_path, capsys, extra, message):
    out = tmp_path / "o"
    assert main(SIM_ARGS + ["--output-dir", str(out)] + extra) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_the_tokenizer_encodes_4_byte_chunks_and_round_trips():
    import random

    rng = random.Random(0)
    texts = ["", "a", "abcd", "abcde", "héllo wörld ✓ \n\n", "x" * 1001] + [
        "".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(0, 50)))
        for _ in range(500)]
    for text in texts:
        data = text.encode()
        assert tok.encode(text) == [tok.chunk_id(data[i:i + 4]) for i in range(0, len(data), 4)]
        assert tok.decode(tok.encode(text)) == text
