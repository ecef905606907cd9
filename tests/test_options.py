"""One source for every option: the CLI's flags and the server's `tts` fields are generated from
the config models' fields and docstrings (`fasttts.options`), and `--fasttts` is
`RuntimeConfig.fasttts()`."""

from __future__ import annotations

import argparse

import pytest
from pydantic import ValidationError

from fasttts import config
from fasttts.cli import _run_config, build_parser
from fasttts.config import RuntimeConfig, SearchConfig, SimConfig
from fasttts.options import attr_docs, describe_error
from fasttts.search import GIVEN_ONLY
from fasttts.serve.protocol import TTSOptions

MODELS = (config.EngineConfig, config.VerifierConfig, SearchConfig, SimConfig, RuntimeConfig,
          config.RunConfig)


def _actions(command: str) -> dict[str, argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in sub.choices[command]._actions}


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["eval", "--backend", "sim", "--dataset", "gsm8k",
                                      "--output-dir", "/tmp/unused", *argv])


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_config_field_has_a_doc(model):
    assert set(attr_docs(model)) == set(model.model_fields)


def test_attr_docs_join_lines_and_share_entries():
    docs = attr_docs(SimConfig)
    assert docs["generator_kv_cache_bytes"] == docs["verifier_kv_cache_bytes"]
    assert docs["hardware"].startswith("hardware spec name or .json file")
    assert "the GPU the memory planner plans for" in docs["hardware"]  # a continuation line


def test_search_flags_come_from_search_config():
    actions = _actions("eval")
    docs = attr_docs(SearchConfig)
    for name, field in SearchConfig.model_fields.items():
        if name in ("step_delimiter", "system_prompt"):
            assert name not in actions
            continue
        action = actions[name]
        flag = "--" + name.replace("_", "-")
        # a switch that is on by default, or given only, also has its --no- form
        tristate = field.annotation is bool and (name in GIVEN_ONLY or field.default is True)
        assert action.option_strings == [flag, *(["--no-" + flag[2:]] if tristate else [])]
        assert action.default == (None if name in GIVEN_ONLY else field.default)
        first_words = " ".join(docs[name].replace("`", "").rstrip(".").split()[:4])
        assert first_words in " ".join(action.help.split())
    assert actions["agg_strategy"].choices == ("last", "min", "prod", "mean")
    assert actions["spec_truncation_ratio"].metavar == "R"


@pytest.mark.parametrize("command", ["solve", "eval", "serve"])
def test_model_and_engine_flags_come_from_their_configs(command):
    from fasttts.verifiers import VERIFIER_KINDS

    actions = _actions(command)
    engine = config.EngineConfig.model_fields
    for dest, flag, model, field in (
            ("backend", "--backend", config.RunConfig, "backend"),
            ("verifier_kind", "--verifier-kind", config.VerifierConfig, "kind"),
            ("max_model_len", "--max-model-len", config.EngineConfig, "max_model_len"),
            ("dtype", "--dtype", config.EngineConfig, "dtype"),
            ("tensor_parallel_size", "--tensor-parallel-size", config.EngineConfig,
             "tensor_parallel_size"),
            ("verifier_batch_size", "--verifier-batch-size", config.VerifierConfig,
             "batch_size")):
        action = actions[dest]
        assert action.option_strings == [flag]
        # the real-engine flags reach the config only when given (the simulator refuses them)
        given_only = field in config.REAL_ENGINE_FIELDS
        assert action.default == (None if given_only else model.model_fields[field].default)
        if given_only:
            assert f"(default: {model.model_fields[field].default})" in action.help
        first_words = " ".join(attr_docs(model)[field].replace("`", "").split()[:4])
        assert first_words in " ".join(action.help.split())
    assert actions["verifier_kind"].choices == ("auto", *VERIFIER_KINDS)
    assert actions["backend"].choices == ("vllm", "sim")
    assert actions["num_threads"].option_strings == ["--threads"]
    assert actions["num_threads"].default is None  # the config's default factory decides
    assert actions["block_size"].default is engine["block_size"].default is None
    for role in ("generator", "verifier"):
        assert actions[role].default is None  # resolved by backend (`_run_config`)
        assert actions[f"{role}_kv_cache"].metavar == "SIZE"


def test_plan_flags_come_from_the_fields_they_set():
    from fasttts.options import flag_name
    from fasttts.runtime.memory_planner import PlanInput

    actions = _actions("plan")
    for name in ("hardware", "memory_fraction", "generator_kv_share"):
        assert actions[name].default == SimConfig.model_fields[name].default
        assert actions[name].option_strings == [flag_name(name)]
    assert actions["beam_width"].default == SearchConfig.model_fields["beam_width"].default
    docs = attr_docs(PlanInput)
    for dest, field in (("n", "num_requests"), ("kv_budget", "memory_bytes"),
                        ("verifier_len", "verifier_len"), ("cache_len", "cache_len")):
        assert docs[field].rstrip(".") in " ".join(actions[dest].help.split())
    assert actions["cache_len"].default is PlanInput.cache_len is None


def test_serve_takes_no_search_flags_but_their_defaults():
    actions = _actions("serve")
    assert "beam_width" not in actions and "sart_m" not in actions
    args = build_parser().parse_args(["serve", "--backend", "sim"])
    assert _run_config(args).search == SearchConfig()


def test_only_given_method_parameters_reach_the_config():
    assert _run_config(_args()).search.model_fields_set.isdisjoint(GIVEN_ONLY)
    cfg = _run_config(_args("--method", "sart", "--sart-t", "32")).search
    assert cfg.sart_t == 32 and "sart_t" in cfg.model_fields_set and cfg.sart_m is None


@pytest.mark.parametrize("argv, runtime", [
    ([], RuntimeConfig()),
    (["--fasttts"], RuntimeConfig.fasttts()),
    (["--fasttts", "--offload"], RuntimeConfig.fasttts(offload=True)),
    (["--fasttts", "--spec-truncation-ratio", "0"], RuntimeConfig.fasttts(spec_truncation_ratio=0)),
    (["--spec-beam-extension", "--lookahead-verification"],
     RuntimeConfig(spec_beam_extension=True, lookahead_verification=True)),
])
def test_the_fasttts_flag_is_runtime_config_fasttts(argv, runtime):
    # beam search (the default method) scores whole paths unless a flag says otherwise
    resolved = runtime.model_copy(update={
        "incremental_verification": bool(runtime.incremental_verification)})
    assert _run_config(_args(*argv)).runtime == resolved


@pytest.mark.parametrize("argv, incremental", [
    (["--method", "sart"], True), (["--method", "sart", "--no-incremental-verification"], False),
    (["--method", "sart", "--baseline"], False), (["--method", "beam_search"], False),
    (["--incremental-verification"], True), (["--method", "sart", "--fasttts"], True),
    (["--method", "sart", "--fasttts", "--no-incremental-verification"], False)])
def test_incremental_verification_defaults_on_for_sart_only(argv, incremental):
    runtime = _run_config(_args(*argv)).runtime
    assert runtime.incremental_verification is incremental


def test_fasttts_turns_on_its_five_techniques():
    on = RuntimeConfig.fasttts()
    assert all(getattr(on, name) for name in RuntimeConfig.FASTTTS)
    assert not on.offload
    assert "--memory-planner" in _actions("eval")["fasttts"].help


@pytest.mark.parametrize("method, sbe, iv", [
    ("beam_search", True, True), ("dvts", True, True), ("sart", False, True),
    ("best_of_n", False, True), ("best_of_n_orm", False, True),
    ("self_consistency", False, False)])
def test_fasttts_turns_on_what_the_method_uses(method, sbe, iv):
    # best-of-N, like SART, has no next step to speculate into; self-consistency calls no
    # PRM; planner and scheduling stay on
    runtime = _run_config(_args("--fasttts", "--method", method)).runtime
    assert (runtime.spec_beam_extension, runtime.lookahead_verification, runtime.exact,
            runtime.incremental_verification) == (sbe, sbe, sbe, iv)
    assert runtime.memory_planner and runtime.prefix_aware_scheduling and runtime.fasttts_bundle


def test_a_technique_given_explicitly_overrides_the_bundle():
    runtime = _run_config(_args("--fasttts", "--incremental-verification",
                                "--method", "best_of_n")).runtime
    assert runtime.incremental_verification and not runtime.spec_beam_extension


@pytest.mark.parametrize("argv, flag", [
    (["--spec-beam-extension", "--method", "best_of_n"], "--spec-beam-extension"),
    (["--fasttts", "--spec-beam-extension", "--method", "sart"], "--spec-beam-extension"),
    (["--spec-beam-extension", "--lookahead-verification", "--method", "self_consistency"],
     "--spec-beam-extension")])
def test_speculation_given_for_a_method_without_it_is_refused(argv, flag):
    with pytest.raises(ValidationError) as e:
        _run_config(_args(*argv))
    method = argv[argv.index("--method") + 1]
    assert (f"{flag} applies to speculative beam extension, which method {method} does not "
            f"run") in str(e.value)
    assert "methods with it: beam_search, dvts, dynamic_branching, vg_search" in str(e.value)


def test_tts_fields_come_from_search_config():
    fields = TTSOptions.model_fields
    assert list(fields)[:5] == ["method", "n", "beam_width", "num_iterations", "agg_strategy"]
    assert set(list(fields)[5:]) == set(GIVEN_ONLY)
    for name in GIVEN_ONLY:
        assert fields[name].default is None
    for name in ("method", "n", "beam_width", "num_iterations"):
        assert fields[name].default == SearchConfig.model_fields[name].default
        assert fields[name].description == attr_docs(SearchConfig)[name]
    with pytest.raises(ValidationError, match="greater than 0"):
        TTSOptions(n=0)
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        TTSOptions(sart_alpha=2.0)
    assert TTSOptions(sart_m=None).sart_m is None


def test_a_method_rule_reads_as_itself_and_other_errors_name_the_field():
    with pytest.raises(ValidationError) as e:
        SearchConfig(method="mcts")
    assert describe_error(e.value).startswith("unknown search method 'mcts'; methods: ")
    with pytest.raises(ValidationError) as e:
        SearchConfig(n=0)
    assert describe_error(e.value) == "invalid configuration: n: Input should be greater than 0"
