"""invocations.jsonl (issue 20 item 4): a sweep call is recorded when it starts, so one killed
outright still shows in the report's provenance, as interrupted, with the runs it trained."""
import json

import pandas as pd

from arch_zoo.reports.runstore import read_invocations
from arch_zoo.reports.provenance import provenance_lines, sweep_calls
from arch_zoo.sweeps.store import Store


def test_a_killed_call_reads_as_interrupted_and_a_torn_line_does_not_swallow_the_next(tmp_path):
    store = Store(tmp_path)
    old = {"command": "arch-zoo sweep s.yaml", "started": "t0", "ended": "t1", "wall_s": 5, "outcome": "finished",
           "runs_trained": 1, "workers": 1, "launcher": "local"}  # the one-line form of earlier versions
    store.log_invocation(old)
    head = {"invocation": "a", "command": "arch-zoo sweep s.yaml --workers 2", "started": "t2", "workers": 2,
            "launcher": "local"}
    store.log_invocation({**head, "event": "started"})
    store.log_invocation({"invocation": "a", "event": "run", "run_id": "r1", "status": "completed", "at": "t3"})
    with (tmp_path / "invocations.jsonl").open("a") as f:
        f.write('{"invocation": "a", "event": "ru')  # the kill came mid-append
    store.log_invocation({"invocation": "b", "command": "arch-zoo sweep s.yaml", "started": "t4", "event": "started"})
    store.log_invocation({"invocation": "b", "event": "run", "run_id": "r2", "status": "completed", "at": "t5"})
    store.log_invocation({"invocation": "b", "command": "arch-zoo sweep s.yaml", "started": "t4", "event": "ended",
                          "ended": "t6", "wall_s": 9, "outcome": "finished", "runs_trained": 1, "workers": 1})

    records = read_invocations(tmp_path)
    assert len(records) == 6  # only the torn line is lost
    calls = sweep_calls(records)
    assert [(c["started"], c["outcome"], c["runs_trained"]) for c in calls] == [
        ("t0", "finished", 1), ("t2", "killed", 1), ("t4", "finished", 1)]
    runs = pd.DataFrame({"wall_time_s": [1.0, 2.0]})
    runs.attrs["invocations"] = records
    lines = provenance_lines(runs)
    assert lines[1] == ("sweep: `arch-zoo sweep s.yaml --workers 2` — started t2, interrupted: killed before it "
                        "could record its end; 1 run trained, the last at t3; 2 local workers; arch_zoo commit "
                        "unknown; machine: unknown")
    assert "1 run trained (finished)" in lines[0] and "1 run trained (finished)" in lines[2]
    assert all(json.loads(line) for line in (tmp_path / "invocations.jsonl").read_text().splitlines()[:3])
