"""One source of truth for install and test commands: README, docs/usage.md and .ci/run agree line for line.

The README holds two one-line commands for a fresh machine: install and run the smoke evaluation; install what
the tests need and run them (``scripts/test.sh``). ``.ci/run`` ends with exactly the second.
"""

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def bash_blocks(text):
    return [block.strip().splitlines() for block in re.findall(r"```bash\n(.*?)```", text, re.S)]


def readme_blocks():
    blocks = bash_blocks((ROOT / "README.md").read_text())
    setup = next(b for b in blocks if any("lerobench eval --suite smoke" in line for line in b))
    tests = next(b for b in blocks if "bash scripts/test.sh" in b[-1])
    assert len(setup) == 1 and len(tests) == 1, "each set-up is one command"
    return setup, tests


def test_usage_md_shows_exactly_the_readme_commands():
    setup, tests = readme_blocks()
    usage = bash_blocks((ROOT / "docs" / "usage.md").read_text())
    assert setup in usage and tests in usage


def test_ci_runs_the_readme_test_block_line_for_line_and_ends_with_it():
    _, tests = readme_blocks()
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-len(tests):] == tests


def test_the_test_script_installs_lints_types_and_runs_every_test():
    script = (ROOT / "scripts" / "test.sh").read_text().splitlines()
    steps = [line for line in script if line and not line.startswith(("#", " ", "if", "fi", "set", "cd"))]
    assert steps[-3:] == ["ruff check lerobench tests benchmarks", "mypy", 'MUJOCO_GL=egl python -m pytest -q "$@"']
    assert any(s.startswith("pip install -q -e \".[metaworld,libero,dev]\"") for s in steps)
