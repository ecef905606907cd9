"""Verifiers (PRMs) by scoring format, and the factory that builds one from a config."""

from __future__ import annotations

from fasttts.config import VerifierConfig
from fasttts.verifiers.base import AGG_STRATEGIES, ScoreRequest, Verifier, aggregate

__all__ = ["AGG_STRATEGIES", "VERIFIER_KINDS", "ScoreRequest", "Verifier", "aggregate",
           "build_verifier", "infer_kind"]

VERIFIER_KINDS = ("judge", "math-shepherd", "qwen-prm", "skywork")


def infer_kind(model: str) -> str:
    """The scoring format of a verifier model from its name: Math-Shepherd, Qwen2.5-Math-PRM and
    Skywork PRMs by name, anything else (an instruct model) as a zero-shot judge."""
    low = model.lower()
    if "math-shepherd" in low or "math_shepherd" in low:
        return "math-shepherd"
    if "qwen2.5-math-prm" in low:
        return "qwen-prm"
    if "skywork" in low and "prm" in low:
        return "skywork"
    return "judge"


def build_verifier(cfg: VerifierConfig) -> Verifier:
    """Build the verifier `cfg` describes (engines are created here).

    Raises:
        ValueError: unknown kind (lists the kinds); model errors from `fasttts.models`.
    """
    kind = infer_kind(cfg.engine.model) if cfg.kind == "auto" else cfg.kind
    if kind == "judge":
        from fasttts.verifiers.judge import JudgeVerifier

        return JudgeVerifier(cfg.engine, batch_size=cfg.batch_size)
    if kind == "math-shepherd":
        from fasttts.verifiers.math_shepherd import MathShepherdVerifier

        return MathShepherdVerifier(cfg.engine, batch_size=cfg.batch_size)
    if kind == "qwen-prm":
        from fasttts.verifiers.qwen_prm import QwenPRMVerifier

        return QwenPRMVerifier(cfg.engine, batch_size=cfg.batch_size)
    if kind == "skywork":
        from fasttts.verifiers.skywork import SkyworkVerifier

        return SkyworkVerifier(cfg.engine, batch_size=cfg.batch_size)
    raise ValueError(f"unknown verifier kind {kind!r}; kinds: auto, {', '.join(VERIFIER_KINDS)}")
