"""The cost model: what a step of a model on a device costs, shared by every layer that prices.

- `specs`: hardware and model specs, loaded from the JSON data files under `specs/` (each
  names its source);
- `roofline`: the time of one engine step, max(FLOPs / P, Bytes / BW) plus overheads
  (FastTTS section 4.3.1);
- `calibration`: fitting a hardware spec to measured step times (the CPU calibration).

The simulator (`fasttts.backends.sim`) times its engine steps with it, the memory planner
(`fasttts.runtime.memory_planner`) and `fasttts plan` size the KV split with it, and the limit
(`fasttts.eval.limit`) prices a run's own work with it. It imports nothing else of fasttts.
"""
