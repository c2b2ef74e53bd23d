# The developer loop; CI (.ci/run) runs the lint, types and test commands on a clean clone.
.PHONY: check lint format-check types fast test sweeps test-file

check: lint types fast   ## what to run before a commit (about a minute)

lint:            ## ruff: errors, imports, docstrings (pyproject [tool.ruff])
	ruff check lerobench tests benchmarks examples

format-check:    ## what ruff would re-sort or fix, without changing files
	ruff check --diff lerobench tests benchmarks examples

types:           ## mypy on the typed seams: plan/, execution/, rollout/ (pyproject [tool.mypy])
	mypy

fast:            ## the fast loop: no simulator (one built fails: tests/simguard), nothing slow, under a minute
	PYTHONPATH=tests/simguard$${PYTHONPATH:+:$$PYTHONPATH} python -m pytest -q -m "not sim and not slow"

test:            ## every test, on the real simulators, two at a time (as scripts/test.sh; README gives its time)
	MUJOCO_GL=egl python -m pytest -q -n 2

sweeps:          ## the tests that sweep whole suites, over every case (CI runs every third: tests/helpers.swept)
	LEROBENCH_FULL_SWEEPS=1 MUJOCO_GL=egl python -m pytest -q tests/test_resets.py

test-file:       ## one file: make test-file F=tests/test_batch_invariance.py
	MUJOCO_GL=egl python -m pytest -q $(F)
