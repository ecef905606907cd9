"""Branch-level admission (SART Algorithm 1, lines 11-19): a free decode slot goes to a
waiting branch before a new request is admitted. The rule by hand, then the server's
scheduler over a scripted engine with 3 batch slots (3 characters per branch per step)."""

from __future__ import annotations

import pytest

from fasttts.config import RuntimeConfig, SearchConfig
from fasttts.serve.admission import BatchState, admits
from fasttts.serve.hub import EngineHub
from fasttts.serve.scheduler import Job, Scheduler, SharedVerifier
from tests.scripted import ScriptedGenerator, ScriptedVerifier


@pytest.mark.parametrize("in_engine, waiting, incoming, active, ok", [
    (0, 0, 0, 0, True),    # an idle engine admits
    (2, 0, 0, 1, True),    # a free slot, nobody waiting
    (3, 0, 0, 1, False),   # every slot taken
    (2, 1, 0, 1, False),   # a branch waits: it gets the free slot first
    (0, 0, 4, 1, False),   # 4 branches on their way fill the 3 slots
    (1, 0, 1, 1, True),    # 1 + 1 < 3
    (0, 0, 0, 2, False),   # the safety cap of 2 requests
])
def test_the_rule_by_hand(in_engine, waiting, incoming, active, ok):
    assert admits(BatchState(slots=3, in_engine=in_engine, waiting=waiting, incoming=incoming,
                             active=active, max_active=2)) is ok


def test_a_free_slot_goes_to_a_waiting_branch_before_a_new_request():
    # Request 1 (self-consistency, n = 4) is admitted and adds its 4 branches: b1-b3 run, b4
    # waits. Step 1: b1 ends (3 chars); its slot goes to the waiting b4 at step 2, not to
    # request 2, although request 2 was queued all along. Step 2: b2 (6 chars) and b4 (3
    # chars) end: only b3 (9 chars) is left and no branch waits -> request 2 is admitted, and
    # its branches first run at step 3 beside b3.
    script = {"req-1::1": "aaa<eos>", "req-1::2": "bbbbbb<eos>", "req-1::3": "c" * 9 + "<eos>",
              "req-1::4": "ddd<eos>", 1: "xxx<eos>", 2: "xxx<eos>", 3: "xxx<eos>",
              4: "xxx<eos>"}
    gen = ScriptedGenerator(script, max_num_seqs=3)
    added_at = []
    add = gen.add_sequence

    def recording_add(seq_id, *args, **kw):
        added_at.append((seq_id.partition("::")[0], gen.steps))
        return add(seq_id, *args, **kw)

    gen.add_sequence = recording_add
    hub = EngineHub(lambda: gen, SharedVerifier(ScriptedVerifier({}, gen)))
    sched = Scheduler(hub, hub.driver.verifier, RuntimeConfig(), max_active=8)
    try:
        search = SearchConfig(method="self_consistency", n=4, max_tokens=64)
        jobs = [Job("problem", search) for _ in range(2)]
        with hub.cv:  # both queued before the driver thread's next turn
            for job in jobs:
                sched.submit(job)
        for job in jobs:
            job.future.result(timeout=30)
    finally:
        sched.close()
        hub.close()
    step_of_req2 = min(step for req, step in added_at if req == "req-2")
    assert [step for req, step in added_at if req == "req-1"] == [0] * 4
    assert step_of_req2 == 2
    assert gen.history[0] == [f"req-1::req-1/it0/b{i}" for i in (1, 2, 3)]
    assert gen.history[1] == ["req-1::req-1/it0/b2", "req-1::req-1/it0/b3",
                              "req-1::req-1/it0/b4"]
    assert gen.history[2][0] == "req-1::req-1/it0/b3" and len(gen.history[2]) == 3
