"""Scale-out options: tensor parallelism is checked before any engine starts and bound to the
CPU build's cores; data parallelism is refused with how to scale out; the simulator refuses
the real engines' options (`--dtype`, `--threads`, TP) instead of ignoring them."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

import fasttts.backends.parallel as parallel
from fasttts.backends.parallel import (check_tensor_parallel, cpu_thread_binding, rank_threads,
                                       threads_per_rank)
from fasttts.cli import main
from fasttts.config import (DATA_PARALLEL_HELP, SIM_GENERATOR, SIM_VERIFIER, EngineConfig,
                            RunConfig, VerifierConfig)


def _model(tmp_path, heads: int, kv: int):
    (tmp_path / "config.json").write_text(json.dumps(
        {"num_attention_heads": heads, "num_key_value_heads": kv}))
    return str(tmp_path)


@pytest.mark.parametrize("threads, tp, cores, bind", [
    (2, 2, [0, 1], "0|1"),            # this machine: one OpenMP thread per rank
    (4, 2, [0, 1, 2, 3], "0-1|2-3"),
    (3, 2, [0, 1, 2, 3], "0|1"),      # threads split evenly, the rest unused
    (4, 2, [0, 2, 4, 6], "0,2|4,6"),  # an affinity with gaps
    (8, 4, [4, 5, 6, 7], "4|5|6|7"),  # more threads than cores: the cores
])
def test_each_rank_gets_cores_of_its_own(threads, tp, cores, bind):
    assert cpu_thread_binding(threads, tp, cores) == bind
    assert threads_per_rank(min(threads, len(cores)), tp) == len(cores[:threads]) // tp


def test_rank_threads_read_the_binding_in_effect(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-3,8|4-7,9")
    assert rank_threads(2, 2) == 5  # the user's binding, not fasttts's split
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "auto")
    monkeypatch.setattr(parallel, "allowed_cores", lambda: [0, 1, 2, 3])
    assert rank_threads(4, 2) == 2


def test_tensor_parallel_beyond_the_cores_is_one_line_before_any_engine(monkeypatch, tmp_path):
    monkeypatch.setattr(parallel, "allowed_cores", lambda: [0, 1])
    model = _model(tmp_path, 14, 2)
    check_tensor_parallel(2, 2, model, is_cpu=True)  # fits: a core per rank
    with pytest.raises(ValueError, match=r"^--tensor-parallel-size 3: each rank of vLLM's CPU "
                                         r"build needs a core of its own, and this run has 2 "
                                         r"\(2 cores, 2 engine threads: --threads\); give at "
                                         r"most 2$"):
        check_tensor_parallel(3, 2, model, is_cpu=True)
    with pytest.raises(ValueError, match=r"this run has 1 .*give at most 1$"):
        check_tensor_parallel(2, 1, model, is_cpu=True)  # --threads 1
    with pytest.raises(ValueError, match=r"^--tensor-parallel-size 2: each rank needs a GPU of "
                                         r"its own and 1 are visible; give at most 1$"):
        check_tensor_parallel(2, 2, model, is_cpu=False, num_gpus=1)


@pytest.mark.parametrize("heads, kv, tp, ok", [
    (14, 2, 2, True),                     # the default 0.5B models
    (14, 2, 4, False),                    # 14 attention heads over 4 ranks
    (14, 2, 7, False),                    # 2 KV heads: neither divided by 7 nor dividing it
    (16, 4, 8, True), (16, 4, 2, True),   # KV heads replicated over 8 ranks, split over 2
    (12, 3, 6, True), (12, 3, 4, False),  # 3 KV heads: neither divided by 4 nor dividing it
])
def test_tensor_parallel_must_share_the_heads_as_vllm_does(monkeypatch, tmp_path, heads, kv,
                                                           tp, ok):
    monkeypatch.setattr(parallel, "allowed_cores", lambda: list(range(16)))
    model = _model(tmp_path, heads, kv)
    if ok:
        check_tensor_parallel(tp, 16, model, is_cpu=True)
        return
    with pytest.raises(ValueError) as err:
        check_tensor_parallel(tp, 16, model, is_cpu=True)
    msg = str(err.value)
    assert msg.startswith(f"--tensor-parallel-size {tp}: the model ") and "\n" not in msg
    assert f"has {heads} attention heads and {kv} KV heads" in msg and "sizes that fit: 1, " in msg


def test_a_hub_id_is_left_to_vllm(monkeypatch):
    monkeypatch.setattr(parallel, "allowed_cores", lambda: [0, 1])
    check_tensor_parallel(2, 2, "org/not-downloaded", is_cpu=True)  # no config.json to read


def test_data_parallelism_is_refused_with_how_to_scale_out(capsys):
    assert main(["eval", "--dataset", "gsm8k", "--limit", "1", "--output-dir", "/nonexistent/x",
                 "--data-parallel-size", "2"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --data-parallel-size 2: {DATA_PARALLEL_HELP}\n"
    assert "`fasttts serve` replicas" in err and "HTTP load balancer" in err
    with pytest.raises(ValidationError, match="data_parallel_size 2: fasttts drives one"):
        EngineConfig(model="m", extra_engine_args={"data_parallel_size": 2})
    with pytest.raises(ValidationError, match="set tensor_parallel_size itself"):
        EngineConfig(model="m", extra_engine_args={"tensor_parallel_size": 2})
    EngineConfig(model="m", extra_engine_args={"data_parallel_size": 1})


@pytest.mark.parametrize("flags, named", [
    (["--dtype", "float32"], "--dtype applies"),
    (["--threads", "1"], "--threads applies"),
    (["--tensor-parallel-size", "2"], "--tensor-parallel-size applies"),
    (["--dtype", "auto", "--threads", "2"], "--dtype, --threads apply"),  # even at defaults
])
def test_the_simulator_refuses_the_real_engines_options(capsys, tmp_path, flags, named):
    for argv in (["solve", "What is 2+3?"],
                 ["eval", "--dataset", "gsm8k", "--limit", "1", "--output-dir",
                  str(tmp_path / "run")],
                 ["serve"]):
        assert main([*argv, "--backend", "sim", *flags]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {named} to real vLLM engines (--backend vllm) only: ")
        assert err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_the_simulator_config_refuses_them_in_the_library_too():
    def sim(**engine):
        return RunConfig(backend="sim", generator=EngineConfig(model=SIM_GENERATOR, **engine),
                         verifier=VerifierConfig(engine=EngineConfig(model=SIM_VERIFIER)))

    with pytest.raises(ValidationError, match="--dtype applies to real vLLM engines"):
        sim(dtype="float32")
    with pytest.raises(ValidationError, match="--threads, --tensor-parallel-size apply"):
        sim(num_threads=99, tensor_parallel_size=2)
    dumped = EngineConfig(model=SIM_GENERATOR).model_dump()  # defaults written out: accepted
    assert RunConfig(backend="sim", generator=EngineConfig(**dumped),
                     verifier=VerifierConfig(engine=EngineConfig(model=SIM_VERIFIER)))
    RunConfig(generator=EngineConfig(model="m", dtype="float32", tensor_parallel_size=2))
