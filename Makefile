# The developer loop; CI (.ci/run) runs `lint` and `test` on a clean clone.
.PHONY: lint format-check test test-file

lint:            ## ruff: errors, imports, docstrings (pyproject [tool.ruff])
	ruff check lerobench tests benchmarks

format-check:    ## what ruff would re-sort or fix, without changing files
	ruff check --diff lerobench tests benchmarks

test:            ## every test, on the real simulators (about 10-15 minutes on 2 cores)
	MUJOCO_GL=egl python -m pytest -q

test-file:       ## one file: make test-file F=tests/test_batch_invariance.py
	MUJOCO_GL=egl python -m pytest -q $(F)
