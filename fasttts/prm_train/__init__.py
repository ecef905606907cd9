"""`fasttts prm train`: bootstrap a PRM for a generator from its own outcome-labelled rollouts.

Outcome supervision as in OVM (Yu et al. 2024, "OVM, Outcome-supervised Value Models for
Planning in Mathematical Reasoning"): every step of a sampled completion is labelled with the
correctness of that completion's final answer, and a linear head on the frozen generator's
hidden state at each step's end learns to predict it. The stages, one module each:

- `rollouts`: sample completions of training problems, graded, stored append-only (resumable);
- `features`: hidden states at each step's end, every candidate layer, in the verifier's format;
- `fit`: a logistic head per layer (scikit-learn), the layer chosen on held-out problems;
- `head`: the trained head saved with its provenance, and the servable checkpoint built from it.
"""
