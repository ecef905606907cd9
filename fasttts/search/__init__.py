"""Search methods (the policy): one file per method over the shared loop of `fasttts.runtime`."""

from fasttts.config import RunConfig, SearchConfig, add_run_check, add_runtime_defaults, add_search_check
from fasttts.search.base import SearchConfigError, SearchStrategy
from fasttts.search.beam_search import BeamSearch
from fasttts.search.best_of_n import BestOfN
from fasttts.search.best_of_n_orm import BestOfNOutcome
from fasttts.search.dvts import DVTS
from fasttts.search.dynamic_branching import DynamicBranching
from fasttts.search.sart import SART
from fasttts.search.self_consistency import SelfConsistency
from fasttts.search.vg_search import VGSearch

__all__ = ["GIVEN_ONLY", "METHODS", "METHOD_PARAMS", "SELECTION_PARAMS", "SearchConfigError",
           "SearchStrategy", "check_runtime", "check_search", "make_strategy", "methods_that",
           "runtime_defaults"]

#: Search methods by name.
METHODS: dict[str, type[SearchStrategy]] = {cls.name: cls for cls in (
    BeamSearch, BestOfN, BestOfNOutcome, DVTS, DynamicBranching, SART, SelfConsistency, VGSearch)}


#: Method-specific `SearchConfig` fields and the method they belong to (`own_params`).
METHOD_PARAMS = {param: cls.name for cls in METHODS.values() for param in cls.own_params}

#: The `SearchConfig` fields that act on the selection between paths: greedy lookahead and
#: the tie tolerance; a method that does not select paths (`SearchStrategy.selects_paths`)
#: refuses them off their defaults (`check_search`).
SELECTION_PARAMS = ("lookahead", "tie_tolerance")

#: The `SearchConfig` fields a front end passes on only when the user gives them, since
#: giving one is a choice the method's rules look at (`check_search`): the
#: `SELECTION_PARAMS` (methods that select paths) and each method's own parameters.
GIVEN_ONLY = (*SELECTION_PARAMS, *METHOD_PARAMS)


def methods_that(trait: str) -> list[str]:
    """Names of the methods whose strategy class has `trait` (a boolean class attribute of
    `SearchStrategy`, e.g. "selects_paths"), sorted."""
    return sorted(name for name, cls in METHODS.items() if getattr(cls, trait))


def check_search(cfg: SearchConfig) -> None:
    """Check `cfg` against the rules of its method: run by pydantic when a `SearchConfig` is
    built (`fasttts.config.add_search_check`), so a config that exists has passed it.

    Raises:
        SearchConfigError: unknown method (lists the methods), a parameter of another method
            set explicitly, one of `SELECTION_PARAMS` off its default for a method that does
            not select paths, or parameters the method refuses (`SearchStrategy.check`).
    """
    if cfg.method not in METHODS:
        raise SearchConfigError(
            f"unknown search method {cfg.method!r}; methods: {', '.join(sorted(METHODS))}"
        )
    for name in sorted(cfg.model_fields_set):
        owner = METHOD_PARAMS.get(name)
        if owner is not None and owner != cfg.method:
            raise SearchConfigError(f"{name} is a parameter of method {owner}, not of "
                                    f"{cfg.method}; drop it or use --method {owner}")
    for name in SELECTION_PARAMS:
        off = SearchConfig.model_fields[name].default
        if getattr(cfg, name) != off and not METHODS[cfg.method].selects_paths:
            raise SearchConfigError(
                f"{name}={getattr(cfg, name)} applies to methods that select between paths "
                f"({', '.join(methods_that('selects_paths'))}), not {cfg.method}; use "
                f"{name}={off}")
    METHODS[cfg.method].check(cfg)


add_search_check(check_search)


def runtime_defaults(cfg: SearchConfig, bundle: bool = False) -> dict[str, bool]:
    """The `RuntimeConfig` fields whose value depends on the search method when the run
    does not give them: incremental verification (the method's `incremental_default`; with
    the FastTTS bundle, `bundle` = `RuntimeConfig.fasttts_bundle`, on for every method that
    calls the PRM, `uses_verifier`: a path scored once is one request, which reads the
    problem's cached prompt, `fasttts.verifiers.pooling`) and, with the bundle, Speculative Beam Extension and
    LookAhead Verification (its `speculates`). An unknown method (its config failed to
    build) has none.

    Source: FastTTS section 4.1 (speculation needs a next step).
    """
    cls = METHODS.get(cfg.method)
    if cls is None:
        return {}
    if not bundle:
        return {"incremental_verification": cls.incremental_default}
    return {"incremental_verification": cls.uses_verifier,
            "spec_beam_extension": cls.speculates, "lookahead_verification": cls.speculates}


add_runtime_defaults(runtime_defaults)

#: The runtime options that act only through speculative beam extension.
_SPECULATION_OPTIONS = ("spec_beam_extension", "lookahead_verification", "exact")


def check_runtime(cfg: RunConfig) -> None:
    """The runtime options the run's search method can use: --spec-beam-extension,
    --lookahead-verification and --exact, given explicitly, need a method that runs
    speculative beam extension (`SearchStrategy.speculates`); the FastTTS bundle
    (--fasttts) leaves them off for the others instead (`runtime_defaults`).

    Raises:
        SearchConfigError: one of them given for a method without speculative beam
            extension (names the methods with it).
    """
    cls = METHODS.get(cfg.search.method)
    rt = cfg.runtime
    given = [name for name in _SPECULATION_OPTIONS
             if getattr(rt, name) and name in rt.model_fields_set]
    if cls is None or cls.speculates or not given:
        return
    flag = "--" + given[0].replace("_", "-")
    raise SearchConfigError(
        f"{flag} applies to speculative beam extension, which method "
        f"{cls.name} does not run (a single-pass or branch-level method has no next step to "
        f"speculate into); methods with it: {', '.join(methods_that('speculates'))}; drop "
        f"{flag} (--fasttts leaves it off for {cls.name})")


add_run_check(check_runtime)


def make_strategy(cfg: SearchConfig) -> SearchStrategy:
    """A fresh strategy for `cfg.method` (one per search; `cfg` was checked when it was built,
    by `check_search`)."""
    return METHODS[cfg.method](cfg)
