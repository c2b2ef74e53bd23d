# The developer loop; CI (.ci/run) runs the lint, types and test commands on a clean clone.
.PHONY: check lint format-check types fast test test-file

check: lint types fast   ## what to run before a commit (about a minute)

lint:            ## ruff: errors, imports, docstrings (pyproject [tool.ruff])
	ruff check lerobench tests benchmarks examples

format-check:    ## what ruff would re-sort or fix, without changing files
	ruff check --diff lerobench tests benchmarks examples

types:           ## mypy on the typed seams: plan/, execution/, rollout/ (pyproject [tool.mypy])
	mypy

fast:            ## the fast loop: no simulator (one built fails: tests/simguard), nothing slow, under a minute
	PYTHONPATH=tests/simguard$${PYTHONPATH:+:$$PYTHONPATH} python -m pytest -q -m "not sim and not slow"

test:            ## every test, on the real simulators (about 10-15 minutes on 2 cores)
	MUJOCO_GL=egl python -m pytest -q

test-file:       ## one file: make test-file F=tests/test_batch_invariance.py
	MUJOCO_GL=egl python -m pytest -q $(F)
