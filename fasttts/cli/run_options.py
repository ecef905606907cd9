"""The flags that make a `RunConfig` (`fasttts solve`, `eval`, `serve`), generated from the
config models (`fasttts.options`): models and engines, simulated device, FastTTS techniques
and search; and the checks a command runs on the config before it starts an engine."""

from __future__ import annotations

import argparse

from fasttts.cli.sizes import POSITIVE_INT, parse_size

__all__ = ["add_run_options", "check_models", "run_config", "runtime_config", "setting_changes",
           "techniques_on"]

#: The `EngineConfig` fields both engines take from one flag each; `num_threads` is --threads.
_ENGINE_FLAGS = ("block_size", "max_model_len", "dtype", "num_threads", "tensor_parallel_size")
#: Those that reach the config only when given (the real-engine ones, which the simulator
#: refuses: `fasttts.config.REAL_ENGINE_FIELDS`).
_GIVEN_ENGINE_FLAGS = ("dtype", "num_threads", "tensor_parallel_size")

#: The `SimConfig` fields with a flag of their own (the KV sizes and the block size come from
#: the "models" flags); `workload` is --sim-workload.
_SIM_FLAGS = ("hardware", "memory_fraction", "generator_kv_share", "max_num_seqs",
              "max_num_batched_tokens", "workload")


def _add_model_options(p: argparse.ArgumentParser) -> None:
    """The "models" flags: backend, the two models and their engines, generated from
    `RunConfig`, `EngineConfig` and `VerifierConfig`."""
    from fasttts.config import (DEFAULT_GENERATOR, DEFAULT_VERIFIER, SIM_GENERATOR, SIM_VERIFIER,
                                EngineConfig, RunConfig, SimConfig, VerifierConfig)
    from fasttts.options import add_flags

    g = p.add_argument_group("models")
    add_flags(g, RunConfig, ["backend"])
    for role, prefix, default, sim in (("generator", "", DEFAULT_GENERATOR, SIM_GENERATOR),
                                       ("verifier", "PRM: ", DEFAULT_VERIFIER, SIM_VERIFIER)):
        add_flags(g, EngineConfig, ["model"], given_only=["model"], flags={"model": f"--{role}"},
                  dests={"model": role}, prefixes={"model": prefix},
                  notes={"model": f" (default: {default}); with --backend sim a model spec "
                                  f"name (default: {sim})"})
    add_flags(g, VerifierConfig, ["kind"], flags={"kind": "--verifier-kind"},
              dests={"kind": "verifier_kind"})
    kv = "kv_cache_memory_bytes"
    kv_gib = EngineConfig.model_fields[kv].default / (1 << 30)
    for role in ("generator", "verifier"):
        add_flags(g, EngineConfig, [kv], given_only=[kv], flags={kv: f"--{role}-kv-cache"},
                  dests={kv: f"{role}_kv_cache"}, types={kv: parse_size},
                  metavars={kv: "SIZE"}, prefixes={kv: f"the {role}'s "}, shown={kv: None},
                  notes={kv: f" (default: {kv_gib:g}GiB; with --backend sim: the static "
                             f"split)"})
    add_flags(g, EngineConfig, _ENGINE_FLAGS, given_only=_GIVEN_ENGINE_FLAGS,
              flags={"num_threads": "--threads"}, metavars={"num_threads": "THREADS"},
              notes={"block_size": "; with --backend sim the simulated device's (16 on "
                                   "GPUs, 128 on CPU specs)",
                     **dict.fromkeys(_GIVEN_ENGINE_FLAGS, "; real engines only")})
    g.add_argument("--data-parallel-size", type=POSITIVE_INT, default=1, metavar="N",
                   help="vLLM's engine replicas: only 1; fasttts runs one in-process engine per "
                        "model, so scale out with `fasttts serve` replicas behind a load "
                        "balancer (docs/serving.md, Scaling out)")
    add_flags(g, VerifierConfig, ["batch_size"], flags={"batch_size": "--verifier-batch-size"},
              dests={"batch_size": "verifier_batch_size"})
    add_flags(g, VerifierConfig, ["confidence_window"], metavars={"confidence_window": "TOKENS"})


def _add_sim_options(p: argparse.ArgumentParser) -> None:
    """The "simulated device" flags, generated from `SimConfig`; they reach the config only
    when given (`run_config` rejects them with real engines)."""
    from fasttts.config import SimConfig
    from fasttts.options import add_flags

    add_flags(p.add_argument_group("simulated device (--backend sim)"), SimConfig, _SIM_FLAGS,
              given_only=_SIM_FLAGS, flags={"workload": "--sim-workload"},
              metavars={"workload": "FILE"})


def _technique_flags() -> list[str]:
    """The `RuntimeConfig` switches, one per FastTTS technique (its bool fields, and the
    bool-or-None ones whose default the search method sets)."""
    from fasttts.config import RuntimeConfig

    return [name for name, f in RuntimeConfig.model_fields.items()
            if f.annotation in (bool, bool | None) and name != "fasttts_bundle"]


def setting_changes(model, skip=(), always=()) -> list[str]:
    """The fields of config `model` off their defaults (and those in `always`), but those in
    `skip`, as "name value" (floats in %g)."""
    return [f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
            for k, v in model.model_dump().items() if k not in skip
            and (k in always or v != type(model).model_fields[k].get_default())]


def techniques_on(rt) -> str:
    """The FastTTS techniques a `RuntimeConfig` `rt` runs, as one phrase for a run's header
    (`fasttts eval`) and the server's start line: "techniques: " and the switches on (after
    the method's defaults), then their settings off their defaults (with Speculative Beam
    Extension always its spec_truncation_ratio, and "exact off" where it is); or "baseline
    (no FastTTS technique)"."""
    switches = {k: v for k, v in rt.model_dump().items() if isinstance(v, bool)}
    on = [k for k, v in switches.items() if v and k not in ("fasttts_bundle", "exact")]
    if not on:
        return "baseline (no FastTTS technique)"
    r = "spec_truncation_ratio"  # Speculative Beam Extension's R: always shown with it
    skip = list(switches) + ([] if rt.spec_beam_extension else [r])
    on += setting_changes(rt, skip=skip, always=(r,))
    on += [] if rt.exact or not rt.spec_beam_extension else ["exact off"]
    return "techniques: " + ", ".join(on)


def _add_technique_options(p: argparse.ArgumentParser) -> None:
    """The "FastTTS techniques" flags: --fasttts (`RuntimeConfig.fasttts`), --baseline, and
    the technique switches and R, generated from `RuntimeConfig`."""
    from fasttts.config import RuntimeConfig
    from fasttts.options import add_flags, flag_name

    f = p.add_argument_group("FastTTS techniques (default: all off, the search-and-learn baseline)")
    f.add_argument("--fasttts", action="store_true",
                   help=f"turn on the FastTTS techniques the search method uses: "
                        f"{', '.join(map(flag_name, RuntimeConfig.FASTTTS))} (best-of-N "
                        f"and SART run no speculation; self-consistency calls no PRM, so "
                        f"no incremental verification)")
    f.add_argument("--baseline", action="store_true",
                   help="turn every FastTTS technique off (the default, but for SART's "
                        "incremental verification)")
    add_flags(f, RuntimeConfig, [*_technique_flags(), "spec_truncation_ratio"],
              metavars={"spec_truncation_ratio": "R"})


def _search_flags() -> list[tuple[type, str]]:
    """(config model, field) of each "search" flag, in help order: the `SearchConfig` fields
    but the step delimiter and system prompt, and the verifier's `agg_strategy` after
    max_tokens."""
    from fasttts.config import SearchConfig, VerifierConfig

    fields = [(SearchConfig, f) for f in SearchConfig.model_fields
              if f not in ("step_delimiter", "system_prompt")]
    at = [f for _, f in fields].index("max_tokens") + 1
    return [*fields[:at], (VerifierConfig, "agg_strategy"), *fields[at:]]


def _add_search_options(p: argparse.ArgumentParser, search: bool) -> None:
    """The "search" flags, generated from `SearchConfig`; a method's own parameters and greedy
    lookahead reach the config only when given. Without `search` (the server: each request
    brings its search), no flags, only their defaults."""
    from fasttts.options import add_flags, flag_defaults
    from fasttts.search import GIVEN_ONLY, METHOD_PARAMS, METHODS, SELECTION_PARAMS, methods_that

    if not search:
        for model, name in _search_flags():
            p.set_defaults(**flag_defaults(model, [name], GIVEN_ONLY))
        return
    s = p.add_argument_group("search")
    notes = {"method": f": {', '.join(sorted(METHODS))}",
             **dict.fromkeys(SELECTION_PARAMS, f": {', '.join(methods_that('selects_paths'))}")}
    prefixes = {name: f"{owner}: " for name, owner in METHOD_PARAMS.items()}
    for model, name in _search_flags():
        add_flags(s, model, [name], given_only=GIVEN_ONLY, notes=notes, prefixes=prefixes)


def add_run_options(p: argparse.ArgumentParser, search: bool = True) -> None:
    """Add the flags that make a `RunConfig` (`run_config`) to `p`: models, simulated device,
    FastTTS techniques and, with `search`, the search."""
    _add_model_options(p)
    _add_sim_options(p)
    _add_technique_options(p)
    _add_search_options(p, search)


def runtime_config(args: argparse.Namespace):
    """The `RuntimeConfig` of the technique flags: `RuntimeConfig.fasttts()` with --fasttts,
    else the baseline, with each technique flag given turned on (`--no-x` turns off one
    whose default the search method sets; --baseline turns those off too).

    Raises:
        ValueError: --fasttts with --baseline, or --baseline with a technique flag.
        pydantic.ValidationError: a technique without the one it needs, R out of range.
    """
    from fasttts.config import RuntimeConfig

    if args.fasttts and args.baseline:
        raise ValueError("--fasttts and --baseline contradict each other; give one")
    flags = _technique_flags()
    on = [name for name in flags if getattr(args, name)]
    if args.baseline and on:
        raise ValueError("--baseline turns every technique off; drop it or the technique flags")
    # --no-x of a switch whose default the method sets (None when not given)
    off = [name for name in flags if getattr(args, name) is False
           and RuntimeConfig.model_fields[name].default is None]
    if args.baseline:
        off = [name for name in flags if RuntimeConfig.model_fields[name].default is None]
    build = RuntimeConfig.fasttts if args.fasttts else RuntimeConfig
    return build(**dict.fromkeys(on, True), **dict.fromkeys(off, False),
                 spec_truncation_ratio=args.spec_truncation_ratio)


def _sim_config(args: argparse.Namespace, runtime):
    """The `SimConfig` of the "simulated device" flags and, with --backend sim, the KV sizes
    and block size. With real engines only --hardware may be given, and only for the memory
    planner (`fasttts.engines.real.planner_hardware` prices real engines on it on a GPU).

    Raises:
        ValueError: a simulated-device flag given with --backend vllm.
    """
    from fasttts.config import SimConfig
    from fasttts.options import flag_name, flag_values

    given = flag_values(args, _SIM_FLAGS, _SIM_FLAGS)
    if args.backend == "sim":
        return SimConfig(**given, generator_kv_cache_bytes=args.generator_kv_cache,
                         verifier_kv_cache_bytes=args.verifier_kv_cache,
                         **({"block_size": args.block_size} if args.block_size else {}))
    if "hardware" in given and not runtime.memory_planner:
        raise ValueError(
            f"--hardware {given['hardware']} applies to --backend sim (the simulated device) "
            f"and to the memory planner (--memory-planner, --fasttts), which prices real "
            f"engines on it on a GPU (on the CPU build of vLLM, on its CPU calibration); "
            f"with --backend vllm and no planner nothing uses it: drop it, or add "
            f"--backend sim or --memory-planner")
    other = [flag_name(n).replace("--workload", "--sim-workload") for n in given
             if n != "hardware"]
    if other:
        raise ValueError(f"{', '.join(other)} {'apply' if len(other) > 1 else 'applies'} to "
                         f"--backend sim (the simulated device) only; drop "
                         f"{'them' if len(other) > 1 else 'it'} with --backend vllm, or add "
                         f"--backend sim")
    return SimConfig(**given)


def run_config(args: argparse.Namespace):
    """The `RunConfig` of the parsed flags (`add_run_options`).

    Raises:
        ValueError: contradicting technique flags (`runtime_config`), a simulated-device
            flag with real engines (`_sim_config`), a real-engine flag with the simulator
            (`fasttts.config.sim_refuses`), --data-parallel-size above 1.
        pydantic.ValidationError: a value out of range, a method rule broken.
    """
    from fasttts.backends.parallel import check_data_parallel
    from fasttts.config import (DEFAULT_GENERATOR, DEFAULT_VERIFIER, SIM_GENERATOR,
                                SIM_VERIFIER, RunConfig, SearchConfig, sim_refuses)
    from fasttts.options import flag_values
    from fasttts.search import GIVEN_ONLY

    sim = args.backend == "sim"
    generator = args.generator if args.generator is not None else (
        SIM_GENERATOR if sim else DEFAULT_GENERATOR)  # "" is refused by EngineConfig
    verifier = args.verifier if args.verifier is not None else (
        SIM_VERIFIER if sim else DEFAULT_VERIFIER)
    if args.verifier is not None and args.verifier_kind == "confidence":
        raise ValueError("--verifier-kind confidence scores steps with the generator's own token "
                         "log-probabilities and loads no verifier model; drop --verifier")
    check_data_parallel(args.data_parallel_size)
    given = [name for name in _GIVEN_ENGINE_FLAGS if getattr(args, name) is not None]
    if sim and given:
        raise ValueError(sim_refuses(given))
    shared = flag_values(args, _ENGINE_FLAGS, _GIVEN_ENGINE_FLAGS) | {"seed": args.seed}

    def engine(model: str, kv: int | None) -> dict:
        """An `EngineConfig`'s fields, checked with the RunConfig (errors name the role)."""
        size = {"kv_cache_memory_bytes": kv} if kv else {}  # else the config's default
        return {"model": model, **size, **shared}

    runtime = runtime_config(args)
    search = [name for model, name in _search_flags() if model is SearchConfig]
    return RunConfig(
        backend=args.backend,
        sim=_sim_config(args, runtime),
        runtime=runtime,
        generator=engine(generator, args.generator_kv_cache),
        verifier={"kind": args.verifier_kind, "engine": engine(verifier, args.verifier_kv_cache),
                  "agg_strategy": args.agg_strategy, "batch_size": args.verifier_batch_size,
                  "confidence_window": args.confidence_window},
        search=SearchConfig(**flag_values(args, search, GIVEN_ONLY)),
    )


def check_models(cfg) -> None:
    """Fail fast on model names that cannot resolve, before any engine starts.

    Raises:
        ValueError: an unknown model or spec, missing packages of an embedded model, a
            simulated configuration that does not fit (`fasttts.engines.check_sim_engines`),
            a tensor-parallel size the machine or model cannot run
            (`fasttts.backends.vllm_engine.check_engine`).
    """
    from fasttts.models import EMBEDDED_MODELS, resolve_model
    from fasttts.verifiers import MODEL_FREE_KINDS

    if cfg.backend == "sim":
        from fasttts.engines import check_sim_engines

        check_sim_engines(cfg)
        return

    free = cfg.verifier.kind in MODEL_FREE_KINDS
    for model in (cfg.generator.model, *(() if free else (cfg.verifier.engine.model,))):
        if model in EMBEDDED_MODELS:
            EMBEDDED_MODELS[model].part_paths()  # raises if the packages are missing
        else:
            resolve_model(model)
    for engine in (cfg.generator, *(() if free else (cfg.verifier.engine,))):
        if engine.tensor_parallel_size > 1:
            from fasttts.backends.vllm_engine import check_engine

            check_engine(engine)  # more ranks than cores or GPUs, heads it does not divide
