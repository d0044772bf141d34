"""Writes the variables tfdist gave this worker to OUT/rank<R>.json (a launch's placement, read back)."""

import json
import os
import sys

out = sys.argv[1]
with open(os.path.join(out, f"rank{os.environ['TFDIST_RANK']}.json"), "w", encoding="utf-8") as fh:
    json.dump({k: os.environ.get(k) for k in ("TFDIST_RANK", "TFDIST_WORLD_SIZE", "TF_CONFIG")}, fh)
