"""The driver loop (`fasttts.runtime.driver`): many searches on one engine decide what each
decides alone; a cancelled search leaves no sequence behind; priorities keep their order."""

from __future__ import annotations

from fasttts.backends.base import GenerationParams
from fasttts.config import SearchConfig
from fasttts.runtime.driver import Driver, Generate, NewSequence, Task
from fasttts.runtime.loop import SearchRunner
from fasttts.runtime.priorities import RANK_SLOTS, REQUEST_SLOTS, engine_priority
from tests.scripted import ScriptedGenerator, ScriptedVerifier
from tests.test_search import SCORES, SCRIPT

CFG = SearchConfig(method="beam_search", n=4, beam_width=2, num_iterations=3)


def _decisions(result):
    return [(b.beam_id, b.text, b.step_scores) for b in result.completions]


def test_searches_sharing_one_driver_decide_as_they_do_alone():
    gen = ScriptedGenerator(SCRIPT)
    alone = SearchRunner(gen, ScriptedVerifier(SCORES, gen), CFG).run("problem", "p0")
    steps_alone = gen.steps

    gen = ScriptedGenerator(SCRIPT)
    ver = ScriptedVerifier(SCORES, gen)
    driver = Driver(gen, ver)
    runner = SearchRunner(gen, ver, CFG)
    tasks = [driver.add(Task(runner.search("problem", "p0"), prefix=f"r{i}::"))
             for i in range(3)]
    while driver.advance():
        pass
    assert all(t.done and t.error is None for t in tasks)
    for t in tasks:
        assert _decisions(t.result) == _decisions(alone)
    # the three searches shared the engine's steps (one batch), and its verifier calls
    assert gen.steps == steps_alone
    assert driver.num_merged > 0 and gen.num_unfinished() == 0 and not driver.sequence_ids


def test_a_cancelled_search_has_every_sequence_aborted():
    gen = ScriptedGenerator({1: "a" * 30, 2: "b" * 30})

    def search():
        params = GenerationParams(max_tokens=100)
        yield Generate(add=[NewSequence("p/it0/b1", [1], params),
                            NewSequence("p/it0/b2", [1], params, speculative=True)])
        while True:
            yield Generate()

    ended = []
    driver = Driver(gen)
    task = driver.add(Task(search(), on_done=lambda t: ended.append(gen.num_unfinished())))
    driver.advance()
    driver.advance()
    assert gen.num_unfinished() == 2
    driver.cancel(task, RuntimeError("cancelled"))
    assert task.done and isinstance(task.error, RuntimeError)
    assert ended == [0] and sorted(gen.aborted) == ["p/it0/b1", "p/it0/b2"]


def test_priorities_rank_class_then_arrival_then_rank():
    spec_first = engine_priority(speculative=True)
    latest_standard = engine_priority(rank=RANK_SLOTS * 4, arrival=REQUEST_SLOTS * 4)
    assert latest_standard < spec_first
    assert engine_priority(rank=RANK_SLOTS - 1, arrival=0) < engine_priority(arrival=1)
    assert engine_priority(rank=1) < engine_priority(rank=2)
    assert engine_priority(arrival=0, speculative=True) < engine_priority(arrival=1,
                                                                          speculative=True)
