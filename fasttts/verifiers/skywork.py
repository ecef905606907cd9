"""Skywork-o1-Open-PRM (Skywork/Skywork-o1-Open-PRM-Qwen-2.5-1.5B and -7B), via transformers.

A causal LM checkpoint plus a value head (`v_head.summary`: Linear(hidden, 1)). The input is
BOS + problem + "\\n", then each step's tokens followed by the step token ("\\n"); a step's score
is sigmoid(value head) of the last hidden state at its step token. vLLM has no native
architecture for this head, so the model runs in transformers (batched, padded on the right,
B_pre paths per forward pass) on the same device vLLM uses.

Incremental mode reuses transformers' `past_key_values` along a path: the KV of every scored
prefix (cut after a step token) is kept in a least-recently-used store of at most
`kv_cache_memory_bytes`, and a new step is computed on top of its longest stored prefix, one
path at a time. The model is causal, so the score equals the whole-path score up to the
numerical difference of a cached vs a fresh forward pass.
"""

from __future__ import annotations

from collections import OrderedDict
from copy import deepcopy
from pathlib import Path

from fasttts.config import EngineConfig
from fasttts.backends.vllm_engine import resolve_dtype
from fasttts.models import resolve_model
from fasttts.verifiers.base import ScoreRequest, Verifier, score_tolerance

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
        cfg: the PRM's engine configuration (model, dtype; `kv_cache_memory_bytes` bounds the
            incremental mode's store of prefixes, bytes).
        batch_size: paths per forward pass (B_pre; whole-path mode).
        incremental: reuse each path's `past_key_values` (module docstring).

    Raises:
        ValueError: the checkpoint has no value head, or tensor parallelism asked for.
    """

    supports_incremental = True
    runner = "transformers"

    def __init__(self, cfg: EngineConfig, batch_size: int = 16, incremental: bool = False):
        if cfg.tensor_parallel_size > 1:
            raise ValueError(f"--tensor-parallel-size {cfg.tensor_parallel_size}: the Skywork "
                             f"PRM runs in transformers, unsharded; run it with 1")
        import torch
        from transformers import AutoModel, AutoTokenizer

        path = resolve_model(cfg.model)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        name = resolve_dtype(cfg.dtype, is_cpu=self.device == "cpu")
        dtype = getattr(torch, "bfloat16" if name == "auto" else name)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path, dtype=dtype).to(self.device).eval()
        weight, bias = load_value_head(path)
        self.head = torch.nn.Linear(weight.shape[1], 1).to(self.device, torch.float32)
        with torch.no_grad():
            self.head.weight.copy_(weight.float())
            self.head.bias.copy_(bias.float())
        self.batch_size = batch_size
        self.max_model_len = cfg.max_model_len
        self.score_tolerance = score_tolerance(self.runner, str(dtype))
        self.step_token_id = self.tokenizer.encode(STEP_TOKEN, add_special_tokens=False)[-1]
        self.incremental = incremental
        self.name = f"skywork({cfg.model}, {'incremental' if incremental else 'whole-path'})"
        mc = self.model.config
        heads = getattr(mc, "num_key_value_heads", None) or mc.num_attention_heads
        head_dim = getattr(mc, "head_dim", None) or mc.hidden_size // mc.num_attention_heads
        elem = torch.finfo(dtype).bits // 8 if dtype.is_floating_point else 2
        self.kv_bytes_per_token = 2 * mc.num_hidden_layers * heads * head_dim * elem
        self.store_bytes = cfg.kv_cache_memory_bytes
        self._store: OrderedDict[tuple[int, ...], object] = OrderedDict()
        self._stored_tokens = 0
        self.tokens_computed = 0

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
        if self.incremental:
            return [self._score_path(*self.prompt(r.problem, r.steps), r.start) for r in requests]
        return self._score_whole(requests)

    def _score_path(self, ids: list[int], flags: list[int], start: int) -> list[float]:
        """Scores of steps start.. of one path, each computed on its longest stored prefix."""
        import torch

        out = []
        for k in range(start, len(flags)):
            cut = ids[: flags[k] + 1]
            base = next((flags[j] + 1 for j in range(k - 1, -1, -1)
                         if tuple(ids[: flags[j] + 1]) in self._store), 0)
            past = None
            if base:
                self._store.move_to_end(tuple(ids[:base]))
                past = deepcopy(self._store[tuple(ids[:base])])
            with torch.no_grad():
                res = self.model(input_ids=torch.tensor([cut[base:]], device=self.device),
                                 past_key_values=past, use_cache=True)
                value = torch.sigmoid(self.head(res.last_hidden_state[0, -1].float()))
            self.tokens_computed += len(cut) - base
            self._keep(tuple(cut), res.past_key_values)
            out.append(float(value))
        return out

    def _keep(self, key: tuple[int, ...], past) -> None:
        """Store the KV of prefix `key`; evict least recently used prefixes over the budget."""
        if key in self._store:
            self._stored_tokens -= len(key)
        self._store[key] = past
        self._stored_tokens += len(key)
        while self._store and self._stored_tokens * self.kv_bytes_per_token > self.store_bytes:
            old, _ = self._store.popitem(last=False)
            self._stored_tokens -= len(old)

    def _score_whole(self, requests: list[ScoreRequest]) -> list[list[float]]:
        import torch

        scores: list[list[float]] = []
        for i in range(0, len(requests), self.batch_size):
            chunk = requests[i : i + self.batch_size]
            prepared = [self.prompt(r.problem, r.steps) for r in chunk]
            width = max(len(ids) for ids, _ in prepared)
            self.tokens_computed += sum(len(ids) for ids, _ in prepared)
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
        self._store.clear()
