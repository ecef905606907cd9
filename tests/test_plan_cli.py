"""`fasttts plan`: the what-if memory planner for a user's GPU."""

from fasttts.cli import main


def test_plan_prints_both_splits(capsys):
    assert main(["plan", "--hardware", "rtx3070ti", "--generator", "qwen2.5-math-1.5b",
                 "--verifier", "skywork-prm-1.5b", "--n", "64", "--kv-budget", "300MiB"]) == 0
    out = capsys.readouterr().out
    assert "B_pre (verifier batch)" in out and "static split" in out and "planned" in out
    assert "faster iteration" in out


def test_plan_errors_are_one_line(capsys):
    assert main(["plan", "--hardware", "cpu-epyc-1thread", "--kv-budget", "20MiB"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: a KV budget of 20.0 MiB cannot hold one verifier sequence")
    assert main(["plan", "--hardware", "tpu9"]) == 2
    assert "unknown hardware spec 'tpu9'" in capsys.readouterr().err
    assert main(["plan", "--n", "0"]) == 2
    assert "num_requests must be >= 1" in capsys.readouterr().err
