"""Skywork-o1-Open-PRM (Skywork/Skywork-o1-Open-PRM-Qwen-2.5-1.5B and -7B), via transformers.

A causal LM checkpoint plus a value head (`v_head.summary`: Linear(hidden, 1)). The input is
BOS + problem + "\\n", then each step's tokens followed by the step token ("\\n"); a step's score
is sigmoid(value head) of the last hidden state at its step token. vLLM has no native
architecture for this head, so the model runs in transformers (batched, padded on the right,
B_pre paths per forward pass) on the same device vLLM uses.
"""

from __future__ import annotations

from pathlib import Path

from fasttts.config import EngineConfig
from fasttts.models import resolve_model
from fasttts.verifiers.base import ScoreRequest, Verifier

__all__ = ["SkyworkVerifier", "load_value_head"]

STEP_TOKEN = "\n"


def load_value_head(model_dir: str):
    """The `v_head.summary` weight (1 x hidden) and bias (1) from a checkpoint's safetensors.

    Raises:
        ValueError: no safetensors file of the folder holds `v_head.summary.weight`.
    """
    from safetensors import safe_open

    folder = Path(model_dir)
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(model_dir, allow_patterns=["*.safetensors", "*.json"]))
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            if "v_head.summary.weight" in f.keys():
                return f.get_tensor("v_head.summary.weight"), f.get_tensor("v_head.summary.bias")
    raise ValueError(f"{model_dir}: no v_head.summary.weight in its safetensors (not a Skywork PRM)")


class SkyworkVerifier(Verifier):
    """Value-head PRM in transformers.

    Args:
        cfg: the PRM's engine configuration (model, dtype; KV-cache settings do not apply).
        batch_size: paths per forward pass (B_pre).

    Raises:
        ValueError: the checkpoint has no value head.
    """

    def __init__(self, cfg: EngineConfig, batch_size: int = 16):
        import torch
        from transformers import AutoModel, AutoTokenizer

        path = resolve_model(cfg.model)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = getattr(torch, cfg.dtype) if isinstance(cfg.dtype, str) else cfg.dtype
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path, dtype=dtype).to(self.device).eval()
        weight, bias = load_value_head(path)
        self.head = torch.nn.Linear(weight.shape[1], 1).to(self.device, torch.float32)
        with torch.no_grad():
            self.head.weight.copy_(weight.float())
            self.head.bias.copy_(bias.float())
        self.batch_size = batch_size
        self.max_model_len = cfg.max_model_len
        self.step_token_id = self.tokenizer.encode(STEP_TOKEN, add_special_tokens=False)[-1]
        self.name = f"skywork({cfg.model})"

    def prompt(self, problem: str, steps: tuple[str, ...]) -> tuple[list[int], list[int]]:
        """(token ids, positions of the step tokens) of one path."""
        bos = self.tokenizer.bos_token or ""
        ids = list(self.tokenizer.encode(bos + problem + "\n", add_special_tokens=False))
        flags = []
        for step in steps:
            ids += self.tokenizer.encode(step.strip(), add_special_tokens=False)
            ids.append(self.step_token_id)
            flags.append(len(ids) - 1)
        if len(ids) > self.max_model_len:
            raise ValueError(f"PRM input of {len(ids)} tokens exceeds max_model_len "
                             f"{self.max_model_len}")
        return ids, flags

    def score(self, requests: list[ScoreRequest]) -> list[list[float]]:
        import torch

        scores: list[list[float]] = []
        for i in range(0, len(requests), self.batch_size):
            chunk = requests[i : i + self.batch_size]
            prepared = [self.prompt(r.problem, r.steps) for r in chunk]
            width = max(len(ids) for ids, _ in prepared)
            pad = self.tokenizer.pad_token_id or 0
            input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in prepared])
            mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in prepared])
            with torch.no_grad():
                hidden = self.model(input_ids=input_ids.to(self.device),
                                    attention_mask=mask.to(self.device)).last_hidden_state
                values = torch.sigmoid(self.head(hidden.float()).squeeze(-1)).cpu()
            for req, (_, flags), row in zip(chunk, prepared, values):
                scores.append([float(row[p]) for p in flags[req.start :]])
        return scores

    def close(self) -> None:
        self.model = None
