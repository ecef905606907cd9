"""`fasttts plan`: the what-if memory planner for a user's GPU."""

from fasttts.cli import main


def test_plan_prints_both_splits(capsys):
    assert main(["plan", "--hardware", "rtx3070ti", "--generator", "qwen2.5-math-1.5b",
                 "--verifier", "skywork-prm-1.5b", "--n", "64", "--kv-budget", "300MiB"]) == 0
    out = capsys.readouterr().out
    assert "B_pre (verifier batch)" in out and "static split" in out and "planned" in out
    assert "faster search" in out and "beam_search: 16 iterations" in out
    assert "prefix recompute s" in out


def test_plan_prices_reuse_only_for_step_by_step_methods(capsys):
    assert main(["plan", "--n", "64", "--method", "self_consistency"]) == 0
    out = capsys.readouterr().out
    # one pass: no reuse term, and independent paths share nothing
    assert "self_consistency: 1 iterations, search tree 65536 tokens" in out
    assert main(["plan", "--n", "64", "--method", "dvts"]) == 0
    assert "dvts: 16 iterations, search tree 19456 tokens" in capsys.readouterr().out


def test_plan_errors_are_one_line(capsys):
    assert main(["plan", "--hardware", "cpu-epyc-1thread", "--kv-budget", "20MiB"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: a KV budget of 20.0 MiB cannot hold one verifier sequence")
    assert main(["plan", "--hardware", "tpu9"]) == 2
    assert "unknown hardware spec 'tpu9'" in capsys.readouterr().err
    assert main(["plan", "--n", "0"]) == 2
    assert "n: Input should be greater than 0" in capsys.readouterr().err
    assert main(["plan", "--method", "mcts"]) == 2
    assert "unknown search method 'mcts'; methods: beam_search" in capsys.readouterr().err
    assert main(["plan", "--n", "6"]) == 2
    assert "needs n to be a positive multiple of beam_width" in capsys.readouterr().err


def test_plan_sizes_a_batch_of_all_paths_at_their_kv_peak_when_given(capsys):
    """Fig. 11's first best-of-N request (RTX 4090, 1.5B + 7B, n = 128, 1,280-token paths):
    sized at every path holding 1,280 tokens 2 decode rounds of 64; at the 648-token peak of
    paths that end apart, one round of 128."""
    args = ["plan", "--hardware", "rtx4090", "--generator", "qwen2.5-math-1.5b", "--verifier",
            "math-shepherd-7b", "--n", "128", "--method", "best_of_n", "--verifier-len", "1280",
            "--decode-len", "1280"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "- B_dec 64: 2 decode rounds over the 128 paths" in out and "KV peak" not in out
    assert main([*args, "--decode-peak-len", "648"]) == 0
    out = capsys.readouterr().out
    assert "KV peak 648 a path when all N run at once" in out
    assert "- B_dec 128: all 128 paths in one decode round" in out
    assert main([*args, "--decode-peak-len", "2000"]) == 2
    assert "decode_peak_len must be within 1..S_dec = 1280, got 2000" in capsys.readouterr().err
