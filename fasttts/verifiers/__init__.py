"""Verifiers (PRMs) by scoring format, and the factory that builds one from a config."""

from __future__ import annotations

from importlib import import_module
from typing import get_args

from fasttts.config import VerifierConfig, VerifierKind
from fasttts.verifiers.base import AGG_STRATEGIES, ScoreRequest, Verifier, aggregate

__all__ = ["AGG_STRATEGIES", "MODEL_FREE_KINDS", "VERIFIER_KINDS", "IncrementalNotSupported",
           "ScoreRequest", "Verifier", "aggregate", "build_verifier", "incremental_kinds",
           "infer_kind", "paged_prefix_cache", "reads_prefix_cache", "verifier_class",
           "verifier_runner"]

#: The scoring formats, as `fasttts.config.VerifierKind` names them.
VERIFIER_KINDS: tuple[str, ...] = get_args(VerifierKind)
#: Scoring format -> (module, class) of its verifier, one for each of `VERIFIER_KINDS`.
_CLASSES = {
    "judge": ("fasttts.verifiers.judge", "JudgeVerifier"),
    "math-shepherd": ("fasttts.verifiers.math_shepherd", "MathShepherdVerifier"),
    "qwen-prm": ("fasttts.verifiers.qwen_prm", "QwenPRMVerifier"),
    "skywork": ("fasttts.verifiers.skywork", "SkyworkVerifier"),
    "ovm": ("fasttts.verifiers.ovm", "OVMVerifier"),
    "confidence": ("fasttts.verifiers.confidence", "ConfidenceVerifier"),
}
assert set(_CLASSES) == set(VERIFIER_KINDS), "a verifier kind without its class, or back"
#: Kinds that load no verifier model (the generator's own confidence).
MODEL_FREE_KINDS = ("confidence",)


class IncrementalNotSupported(ValueError):
    """Incremental verification was asked of a verifier format that cannot do it."""


def infer_kind(model: str) -> str:
    """The scoring format of a verifier model from its name: Math-Shepherd, Qwen2.5-Math-PRM and
    Skywork PRMs by name, trained heads (`fasttts prm train`, names ending "-ovm") as OVMs,
    anything else (an instruct model) as a zero-shot judge."""
    low = model.lower()
    if low.rstrip("/").endswith("-ovm"):
        return "ovm"
    if "math-shepherd" in low or "math_shepherd" in low:
        return "math-shepherd"
    if "qwen2.5-math-prm" in low:
        return "qwen-prm"
    if "skywork" in low and "prm" in low:
        return "skywork"
    return "judge"


def verifier_class(kind: str) -> type[Verifier]:
    """The verifier class of scoring format `kind` (imported on demand: vLLM is heavy).

    Raises:
        ValueError: unknown kind (lists the kinds).
    """
    if kind not in _CLASSES:
        raise ValueError(f"unknown verifier kind {kind!r}; kinds: auto, {', '.join(VERIFIER_KINDS)}")
    module, name = _CLASSES[kind]
    return getattr(import_module(module), name)


def incremental_kinds() -> list[str]:
    """The scoring formats that can verify incrementally (`Verifier.supports_incremental`)."""
    return [k for k in VERIFIER_KINDS if verifier_class(k).supports_incremental]


def verifier_runner(cfg: VerifierConfig) -> str | None:
    """What runs the verifier `cfg` builds (`Verifier.runner`: "vllm", "transformers", or
    None for a verifier without a model),
    from its kind ("auto": from the model's name, so a simulated model spec named like a
    Skywork PRM is priced as the transformers model the product runs)."""
    kind = infer_kind(cfg.engine.model) if cfg.kind == "auto" else cfg.kind
    return verifier_class(kind).runner


def paged_prefix_cache(cfg: VerifierConfig) -> bool:
    """Whether the verifier `cfg` builds keeps its prefixes in vLLM's paged prefix cache (what
    the memory planner's reuse term describes, `PlanInput.verifier_paged`); False for a
    verifier run by transformers, whose store holds whole prefixes (Skywork)."""
    return verifier_runner(cfg) != "transformers"


def reads_prefix_cache(cfg) -> bool:
    """Whether the verifier of `cfg` (a RunConfig) reads its prefix cache across iterations:
    with incremental verification on, or a format that is always incremental (the judge);
    on the simulator, the incremental flag alone (its PRM is a pooling PRM)."""
    if cfg.runtime.incremental_verification:
        return True
    if cfg.backend == "sim":
        return False
    kind = infer_kind(cfg.verifier.engine.model) if cfg.verifier.kind == "auto" else cfg.verifier.kind
    return verifier_class(kind).incremental


def build_verifier(cfg: VerifierConfig, incremental: bool = False) -> Verifier:
    """Build the verifier `cfg` describes (engines are created here).

    Args:
        cfg: the verifier configuration.
        incremental: score only each new step from the PRM's prefix cache
            (`RuntimeConfig.incremental_verification`).

    Raises:
        ValueError: unknown kind (lists the kinds); model errors from `fasttts.models`.
        IncrementalNotSupported: `incremental` for a format that cannot (names those that can).
    """
    kind = infer_kind(cfg.engine.model) if cfg.kind == "auto" else cfg.kind
    cls = verifier_class(kind)
    if incremental and not cls.supports_incremental:
        raise IncrementalNotSupported(
            f"--incremental-verification: verifier kind {kind!r} cannot score steps "
            f"incrementally; kinds that can: {', '.join(incremental_kinds())}")
    window = {"window": cfg.confidence_window} if cfg.confidence_window is not None else {}
    return cls(cfg.engine, batch_size=cfg.batch_size, incremental=incremental, **window)
