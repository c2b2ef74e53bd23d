"""Exit 4 unless every episode of the run in argv[1] succeeded (the Docker smoke's LIBERO episode must succeed)."""

import json
import sys
from pathlib import Path

overall = json.loads((Path(sys.argv[1]) / "results.json").read_text())["overall"]
print(f"docker-smoke: {overall['successes']} of {overall['n_episodes']} episodes succeeded")
sys.exit(0 if overall["n_episodes"] > 0 and overall["successes"] == overall["n_episodes"] else 4)
