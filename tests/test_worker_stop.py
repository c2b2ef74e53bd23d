"""A stop (SIGTERM's SystemExit) that lands inside a finalizer ends a worker process at once, with no traceback."""

import subprocess
import sys

SCRIPT = """
import sys
from lerobench.execution.processes import _stop_in_a_finalizer

sys.unraisablehook = _stop_in_a_finalizer(sys.unraisablehook)

class Renderer:  # like robosuite's MjRenderContext: a __del__ during which the stop arrives
    def __del__(self):
        raise {exc}

Renderer()
print("went on after the finalizer", flush=True)
"""


def _run(exc):
    return subprocess.run([sys.executable, "-c", SCRIPT.format(exc=exc)], capture_output=True, text=True, timeout=60)


def test_a_stop_inside_a_finalizer_ends_the_worker_quietly_with_its_code():
    done = _run("SystemExit(143)")
    assert done.returncode == 143 and "went on" not in done.stdout
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_any_other_error_in_a_finalizer_is_still_reported():
    done = _run("ValueError('broken renderer')")
    assert done.returncode == 0 and "went on" in done.stdout
    assert "Exception ignored" in done.stderr and "broken renderer" in done.stderr
