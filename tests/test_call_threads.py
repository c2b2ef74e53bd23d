"""The thread-count plan of CPU model calls (``policies/call_threads.py``): which counts are checked and kept.

Pure logic on made-up outputs; the real kernels are checked on ACT and a thread-dependent torch policy in
tests/test_batch_invariance.py.
"""

import numpy as np

from lerobench.policies.call_threads import candidate_counts, check_counts
from lerobench.policies.invariance import summarize_threads


def test_the_pool_hands_out_one_the_powers_of_two_below_the_cores_and_the_cores():
    assert candidate_counts(1) == (1,)
    assert candidate_counts(2) == (1, 2)
    assert candidate_counts(6) == (1, 2, 4, 6)
    assert candidate_counts(16) == (1, 2, 4, 8, 16)


def _runner(outputs, calls):
    def run_at(compute, observation, texts, count):
        calls.append(count)
        value = outputs[count]
        if isinstance(value, Exception):
            raise value
        return np.array([[value, 0.5]])
    return run_at


def test_only_counts_with_one_threads_bits_are_kept_and_the_others_named():
    calls = []
    plan = check_counts(lambda: None, {}, [], 8, _runner({1: 1.0, 2: 1.0, 4: 1.0 + 2e-7, 8: RuntimeError("x")}, calls),
                        mkl="strict")
    assert plan.counts == (1, 2) and plan.checked == (1, 2, 4, 8) and plan.status == "verified"
    assert plan.rejected[4] == np.float64(1.0 + 2e-7) - 1.0 and plan.rejected[8] is None
    assert "4 threads" in plan.reason and "8 threads (raised)" in plan.reason
    assert plan.best(8) == 2 and plan.best(1) == 1
    assert sorted(calls) == [1, 2, 4, 8]


def test_the_real_calls_output_saves_the_one_thread_call_unless_a_count_disagrees_with_it():
    calls = []
    plan = check_counts(lambda: None, {}, [], 2, _runner({1: 1.0, 2: 1.0}, calls), reference=np.array([[1.0, 0.5]]))
    assert plan.counts == (1, 2) and calls == [2]
    calls.clear()  # the real object's row had state of its own: a twin's one-thread output decides
    plan = check_counts(lambda: None, {}, [], 2, _runner({1: 1.0, 2: 1.0}, calls), reference=np.array([[3.0, 0.5]]))
    assert plan.counts == (1, 2) and calls == [2, 1]


def test_one_core_checks_nothing_and_says_so():
    plan = check_counts(lambda: None, {}, [], 1, _runner({}, []))
    assert plan.counts == (1,) and plan.status == "unchecked" and "one usable core" in plan.reason


def test_a_runs_processes_are_summed_into_one_record():
    a = {"status": "verified", "counts": [1, 2], "checked": [1, 2], "rejected": {}, "check_s": 0.2, "mkl": "strict"}
    b = {"status": "unchecked", "counts": [1], "checked": [1, 2], "rejected": {"2": 1e-7}, "reason": "r",
         "check_s": 0.3, "mkl": "default"}
    out = summarize_threads([a, b])
    assert out["status"] == "verified" and out["counts"] == [1, 2] and out["rejected"] == {"2": 1e-7}
    assert out["check_s"] == 0.5 and out["mkl"] == ["default", "strict"] and out["reason"] == "r"
    assert summarize_threads([]) is None
