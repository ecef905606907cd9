"""Hidden states at each step's end: what a bootstrapped PRM head reads (`fasttts.verifiers.ovm`).

The frozen generator is run with Hugging Face transformers (vLLM returns the last layer only)
on exactly the token ids the OVM verifier sends (`ovm_head_ids`, `ovm_step_ids`, one "\\n\\n"
tag after each step). For each candidate layer k the feature is the final RMSNorm applied to
layer k's output, which is what the verifier's checkpoint truncated to k layers returns at the
tag, so a head fitted on layer k serves unchanged from that checkpoint.
"""

from __future__ import annotations

import numpy as np

from fasttts.steps import split_steps
from fasttts.verifiers.ovm import ovm_head_ids, ovm_step_ids

__all__ = ["FeatureExtractor"]


class FeatureExtractor:
    """Step-end features of completions of one generator.

    Args:
        model_path: the generator's local Hugging Face folder.
        layers: candidate layers, 1..num_hidden_layers (layer k = the output of k layers).
        system_prompt: the generator's system prompt (None = the default).
        dtype: torch dtype name of the forward pass.

    Raises:
        ValueError: a layer outside 1..num_hidden_layers.
    """

    def __init__(self, model_path: str, layers: list[int], system_prompt: str | None = None,
                 dtype: str = "float32"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=getattr(torch, dtype)).eval()
        depth = self.model.config.num_hidden_layers
        if not layers or any(not 1 <= k <= depth for k in layers):
            raise ValueError(f"layers {layers}: each must be in 1..{depth}")
        self.layers = sorted(set(layers))
        self.depth = depth
        self.system_prompt = system_prompt
        self.tag_id = self.tokenizer.encode("\n\n", add_special_tokens=False)[-1]

    def completion_ids(self, text: str) -> tuple[list[int], list[int], list[str]]:
        """(ids after the head, tag positions within them, the steps) of one completion."""
        ids, tags, steps = [], [], [s for s in split_steps(text) if s.strip()]
        for step in steps:
            ids += ovm_step_ids(self.tokenizer, step)
            ids.append(self.tag_id)
            tags.append(len(ids) - 1)
        return ids, tags, steps

    def features(self, problem: str, texts: list[str]) -> list[np.ndarray]:
        """Features of each completion of one problem.

        Returns:
            One float32 array per text, shape [steps, len(self.layers), hidden_size]
            (steps = the non-blank `split_steps` pieces; 0 rows for an empty text).
        """
        import torch

        head = ovm_head_ids(self.tokenizer, problem, self.system_prompt)
        out = []
        with torch.no_grad():
            prefix = self.model(torch.tensor([head]), use_cache=True).past_key_values
            for text in texts:
                ids, tags, _ = self.completion_ids(text)
                if not ids:
                    out.append(np.zeros((0, len(self.layers), self.model.config.hidden_size),
                                        np.float32))
                    continue
                res = self.model(torch.tensor([ids]), past_key_values=prefix, use_cache=True,
                                 output_hidden_states=True)
                prefix.crop(len(head) - prefix.get_seq_length())  # drop this text's tokens
                rows = [self._normed(res.hidden_states, k)[0, tags] for k in self.layers]
                out.append(torch.stack(rows, dim=1).float().numpy())
        return out

    def _normed(self, hidden_states, k: int):
        """Layer k's output as the k-layer checkpoint returns it (final norm applied)."""
        h = hidden_states[k]
        return h if k == self.depth else self.model.model.norm(h)
