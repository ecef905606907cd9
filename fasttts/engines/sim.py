"""The memory plan applied to the simulated device: the engines' sizes and the replanner.

The simulator's KV budget is what the static split gives the two caches together
(`fasttts.backends.sim.static_split`); the planner re-splits it and sets the batch caps, and
the replanner keeps the plan matched to each problem's workload.
"""

from __future__ import annotations

from fasttts.backends.sim import SimDevice, SimSizes, sim_block_sizes
from fasttts.config import RunConfig
from fasttts.perf.specs import load_hardware
from fasttts.runtime.memory_planner import MemoryPlan
from fasttts.runtime.plan_workload import plan_for_run
from fasttts.runtime.replan import Replanner

__all__ = ["kv_floors", "plan_sim", "sim_replanner"]


def _whole_blocks(tokens: int, block_size: int) -> int:
    """`tokens` rounded up to whole KV blocks (tokens)."""
    return -(-tokens // block_size) * block_size


def kv_floors(cfg: RunConfig) -> tuple[int, int]:
    """(verifier, generator) KV floors of a simulated run: one max_model_len sequence each,
    rounded up to whole blocks of each simulated engine's block size (`cfg.sim.block_size`,
    else the device's default: `fasttts.backends.sim.sim_block_sizes`) (tokens, tokens)."""
    bs, ver_bs = sim_block_sizes(cfg, load_hardware(cfg.sim.hardware))
    return (_whole_blocks(cfg.verifier.engine.max_model_len, ver_bs),
            _whole_blocks(cfg.generator.max_model_len, bs))


def plan_sim(cfg: RunConfig, device: SimDevice) -> tuple[MemoryPlan, SimSizes]:
    """The memory plan of a simulated run and the engine sizes under it: the static split's
    two KV caches together are the budget M; without offloading the verifier gets the plan's
    share and the generator the rest, with offloading each gets all of M; the caps are
    B_dec and B_pre, and the verifier charges one iteration's transfers per scoring call.

    Raises:
        fasttts.runtime.memory_planner.PlanError: nothing fits.
    """
    split = device.split
    budget = split.generator_kv + split.verifier_kv
    ver_floor, gen_floor = kv_floors(cfg)
    plan, ver_kv = plan_for_run(cfg, budget, device.generator, device.verifier,
                                device.hardware, cfg.runtime.offload,
                                verifier_min_tokens=ver_floor, generator_min_tokens=gen_floor)
    gen_kv = budget if plan.offload else budget - ver_kv
    return plan, SimSizes(gen_kv, ver_kv, plan.b_dec, plan.b_pre, plan.t_offload_per_iteration)


def sim_replanner(cfg: RunConfig, device: SimDevice, plan: MemoryPlan,
                  sizes: SimSizes) -> Replanner:
    """The replanner of simulated engines built with `plan` and `sizes` (`plan_sim`)."""
    split = device.split
    ver_floor, gen_floor = kv_floors(cfg)
    return Replanner(split.generator_kv + split.verifier_kv, device.generator, device.verifier,
                     device.hardware, cfg.runtime.offload, ver_floor, plan, sizes.generator_kv,
                     sizes.verifier_kv, cfg.runtime.replan_min_shift,
                     generator_min_tokens=gen_floor)
