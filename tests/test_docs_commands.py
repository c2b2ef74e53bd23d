"""One source of truth for install and test commands: README, docs/usage.md and .ci/run agree line for line."""

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def bash_blocks(text):
    return [block.strip().splitlines() for block in re.findall(r"```bash\n(.*?)```", text, re.S)]


def readme_blocks():
    blocks = bash_blocks((ROOT / "README.md").read_text())
    setup = next(b for b in blocks if any("lerobench eval --suite smoke" in line for line in b))
    tests = next(b for b in blocks if b[-1].endswith("python -m pytest -q"))
    return setup, tests


def test_usage_md_shows_exactly_the_readme_commands():
    setup, tests = readme_blocks()
    usage = bash_blocks((ROOT / "docs" / "usage.md").read_text())
    assert setup in usage and tests in usage


def test_ci_runs_the_readme_test_block_line_for_line_and_ends_with_it():
    _, tests = readme_blocks()
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-len(tests):] == tests
