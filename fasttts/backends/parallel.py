"""Tensor parallelism of a vLLM engine, and the threads it runs: checked before any engine
starts, and set up the way vLLM's CPU build needs it.

Tensor parallelism (TP) shards each layer's heads over `tensor_parallel_size` ranks. vLLM runs
the ranks as worker processes of its multiprocessing executor (the engine core stays in this
process, so the runtime still reads its scheduler); on the CPU build they all-reduce through
shared memory (`vllm.distributed.device_communicators.cpu_communicator`, `_CPUSHMDistributed`)
and each rank runs its own OpenMP pool, bound to the cores `VLLM_CPU_OMP_THREADS_BIND` gives it
("0|1": rank 0 on core 0, rank 1 on core 1). vLLM's own default ("auto") binds one NUMA node
per rank, so TP = 2 on a one-node machine fails; `cpu_thread_binding` splits this process's
cores between the ranks instead.

Data parallelism (engine replicas) is refused: fasttts drives one in-process `LLMEngine` per
model, which runs no replicas; requests are independent, so replicas of the whole server scale
out instead (`fasttts.config.DATA_PARALLEL_HELP`, docs/serving.md "Scaling out").
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fasttts.config import DATA_PARALLEL_HELP

__all__ = ["allowed_cores", "check_data_parallel", "check_tensor_parallel",
           "cpu_thread_binding", "engine_threads", "rank_threads", "threads_per_rank"]


def check_data_parallel(size: int) -> None:
    """Raise ValueError for a data-parallel size above 1 (`DATA_PARALLEL_HELP`)."""
    if size > 1:
        raise ValueError(f"--data-parallel-size {size}: {DATA_PARALLEL_HELP}")


def allowed_cores() -> list[int]:
    """The CPU cores this process may run on (its affinity), in order."""
    return sorted(os.sched_getaffinity(0))


def engine_threads(num_threads: int) -> int:
    """The OpenMP threads an in-process (TP = 1) engine of `EngineConfig.num_threads` runs:
    the user's `OMP_NUM_THREADS` if set (vLLM and torch read it; fasttts leaves it), else
    `num_threads`."""
    try:
        return int(os.environ["OMP_NUM_THREADS"])
    except (KeyError, ValueError):
        return num_threads


def threads_per_rank(num_threads: int, tensor_parallel_size: int) -> int:
    """Threads each tensor-parallel rank runs on the CPU build: the engine's threads split
    evenly over its ranks (at least 1)."""
    return max(1, num_threads // tensor_parallel_size)


def rank_threads(num_threads: int, tensor_parallel_size: int) -> int:
    """Threads each tensor-parallel rank of the CPU build runs: the cores of rank 0 in
    `VLLM_CPU_OMP_THREADS_BIND` as in effect (the user's, or `cpu_thread_binding`'s), else
    `threads_per_rank` of the cores this process may use."""
    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
    if bind in ("auto", "nobind"):
        return threads_per_rank(min(num_threads, len(allowed_cores())), tensor_parallel_size)
    count = 0
    for part in bind.split("|")[0].split(","):
        first, _, last = part.partition("-")
        count += int(last or first) - int(first) + 1
    return count


def cpu_thread_binding(num_threads: int, tensor_parallel_size: int,
                       cores: list[int] | None = None) -> str:
    """`VLLM_CPU_OMP_THREADS_BIND` for an engine of `tensor_parallel_size` ranks on the CPU
    build using `num_threads` of `cores` (default: this process's): consecutive groups of
    `threads_per_rank` cores, one per rank, "|"-separated ("0|1"; "0-1|2-3").

    Raises:
        ValueError: fewer cores than ranks (`check_tensor_parallel` reports it first).
    """
    cores = allowed_cores() if cores is None else cores
    per_rank = threads_per_rank(min(num_threads, len(cores)), tensor_parallel_size)
    if per_rank * tensor_parallel_size > len(cores):
        raise ValueError(f"tensor_parallel_size {tensor_parallel_size} needs a core per rank; "
                         f"this process may use {len(cores)}")
    groups = [cores[i * per_rank:(i + 1) * per_rank] for i in range(tensor_parallel_size)]
    return "|".join(_cpu_list(g) for g in groups)


def _cpu_list(cores: list[int]) -> str:
    """A core list as vLLM parses it: "3", "2-5" for a run, else "1,4,6"."""
    if len(cores) == 1:
        return str(cores[0])
    if cores == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))


def _heads(model_dir: str) -> tuple[int, int] | None:
    """(attention heads, KV heads) from a local model folder's config.json; None when the
    folder or the fields are missing (a hub id: vLLM checks it when it loads)."""
    config = Path(model_dir) / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    data = data.get("text_config", data)
    heads = data.get("num_attention_heads")
    if not isinstance(heads, int):
        return None
    kv = data.get("num_key_value_heads", heads)
    return heads, kv if isinstance(kv, int) else heads


def check_tensor_parallel(tensor_parallel_size: int, num_threads: int, model_dir: str | None,
                          is_cpu: bool, num_gpus: int = 0) -> None:
    """Fail with one line, before any engine starts, on a tensor-parallel size vLLM cannot
    run: more ranks than cores this process may use and threads it is given (CPU build: a
    rank needs a core), or than GPUs; attention heads it does not divide, or KV heads it
    neither divides nor is a multiple of (vLLM's own rules: `ModelConfig.verify_with_parallel_config`
    and its attention layers' KV-head sharding).

    Args:
        tensor_parallel_size: the ranks (`EngineConfig.tensor_parallel_size`).
        num_threads: the engine's threads (`EngineConfig.num_threads`).
        model_dir: the resolved model (a local folder is read; None or a hub id: no head check).
        is_cpu: vLLM's CPU build.
        num_gpus: the visible GPUs (GPU build).

    Raises:
        ValueError: the size cannot run; the message says what is allowed.
    """
    tp = tensor_parallel_size
    if tp == 1:
        return
    if is_cpu:
        cores = len(allowed_cores())
        usable = min(cores, num_threads)
        if tp > usable:
            raise ValueError(
                f"--tensor-parallel-size {tp}: each rank of vLLM's CPU build needs a core of "
                f"its own, and this run has {usable} ({cores} cores, {num_threads} engine "
                f"thread{'' if num_threads == 1 else 's'}: --threads); give at most {usable}")
    elif tp > num_gpus:
        raise ValueError(f"--tensor-parallel-size {tp}: each rank needs a GPU of its own and "
                         f"{num_gpus} are visible; give at most {num_gpus}")
    heads = _heads(model_dir) if model_dir else None
    if heads is None:
        return
    attn, kv = heads
    if attn % tp or (kv % tp and tp % kv):
        fits = [d for d in range(1, attn + 1) if attn % d == 0 and (kv % d == 0 or d % kv == 0)]
        raise ValueError(
            f"--tensor-parallel-size {tp}: the model {Path(model_dir).name} has {attn} "
            f"attention heads and {kv} KV heads, which {tp} ranks cannot share; sizes that fit: "
            f"{', '.join(map(str, fits))}")
