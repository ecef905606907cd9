"""Bad input on the command line: one clear error line, exit code 2, nothing written."""

import pytest

from fasttts.cli import main, parse_size


@pytest.mark.parametrize("argv,message", [
    (["solve", ""], "problem is empty"),
    (["solve", "x", "--n", "0"], "n: Input should be greater than 0"),
    (["solve", "x", "--n", "6", "--beam-width", "4"], "n=6, beam_width=4"),
    (["solve", "x", "--method", "mcts"], "methods: beam_search, best_of_n"),
    (["solve", "x", "--generator", "no-such-model"], "unknown model 'no-such-model'"),
    (["solve", "x", "--temperature", "-1"], "temperature"),
    (["solve", "x", "--top-p", "1.5"], "top_p"),
    (["solve", "x", "--max-tokens", "0"], "max_tokens"),
    (["eval", "--dataset", "nope", "--output-dir", "OUT"], "unknown dataset 'nope'"),
    (["eval", "--dataset", "gsm8k", "--limit", "0", "--output-dir", "OUT"], "limit"),
    (["eval", "--dataset", "aime24", "--offset", "30", "--output-dir", "OUT"],
     "no problems selected"),
    (["models", "prepare", "bogus"], "unknown embedded model 'bogus'"),
])
def test_bad_input_is_one_clear_error(argv, message, tmp_path, capsys):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert not (tmp_path / "out").exists()


def test_model_folder_without_config(tmp_path, capsys):
    assert main(["solve", "x", "--verifier", str(tmp_path)]) == 2
    assert "has no config.json" in capsys.readouterr().err


def test_argparse_rejects_bad_sizes(capsys):
    with pytest.raises(SystemExit) as e:
        main(["solve", "x", "--generator-kv-cache", "lots"])
    assert e.value.code == 2
    assert "is not a size" in capsys.readouterr().err


def test_parse_size():
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("1.5GiB") == 3 << 29
    assert parse_size("2G") == 2 << 30
    assert parse_size("4096") == 4096


def test_unreadable_config_json(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{not json")
    assert main(["solve", "x", "--generator", str(tmp_path)]) == 2
    assert "config.json is unreadable" in capsys.readouterr().err


@pytest.mark.integration
def test_corrupt_weights_are_one_clear_error(tmp_path, capsys):
    import shutil

    from fasttts.config import DEFAULT_GENERATOR
    from fasttts.models import prepare_model

    src = prepare_model(DEFAULT_GENERATOR)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / name, tmp_path / name)
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 1000)
    assert main(["solve", "x", "--generator", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "error: vLLM could not load model" in err and "SafetensorError" in err


@pytest.mark.parametrize("argv,message", [
    (["--hardware", "h200"], "--hardware h200 applies to --backend sim (the simulated device) "
                             "and to the memory planner"),
    (["--hardware", "h200"], "on the CPU build of vLLM, on its CPU calibration"),
    (["--memory-fraction", "0.5", "--sim-workload", "w.json"],
     "--memory-fraction, --sim-workload apply to --backend sim"),
    (["--max-num-seqs", "8"], "--max-num-seqs applies to --backend sim (the simulated device) "
                              "only; drop it with --backend vllm"),
])
def test_simulated_device_flags_are_an_error_with_real_engines(argv, message, capsys):
    assert main(["solve", "x", "--backend", "vllm", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


def test_hardware_reaches_the_real_engines_planner():
    """With the memory planner, --hardware is the GPU real engines are planned for
    (`fasttts.engines.real.planner_hardware`); without the flag, the config's default."""
    from fasttts.cli import _run_config, build_parser
    from fasttts.config import SimConfig

    def cfg(*argv):
        return _run_config(build_parser().parse_args(["solve", "x", *argv]))

    assert cfg("--memory-planner", "--hardware", "h200").sim.hardware == "h200"
    assert cfg("--fasttts", "--hardware", "h200").sim.hardware == "h200"
    assert cfg().sim == SimConfig()
    assert cfg("--backend", "sim", "--hardware", "h200").sim.hardware == "h200"
