"""The scaling model checked across a real link: alpha and beta fitted to all-reduces measured between two
test hosts at each link rate, each configuration's efficiency predicted, and set beside ``tfdist bench``'s
measurement on the same link (both from ``benchmarks/bench_nodes.py``).

Model (scaling_model.py's, no overlap: tfdist's backends and TensorFlow's loop reduce after the backward
pass): step = compute + all-reduce(gradient bytes), with
- compute: the step of the ``independent`` copies at the same node count (the same processes sharing the
  same machine, nothing synchronised), so the efficiency predicted is against that limit, as measured;
- all-reduce: t(n) = 2*alpha + n*beta (a 2-rank ring), alpha from the smallest size, beta from the two
  largest, fitted per backend and link rate (``tf`` for tf, raw-tf and keras-fit; ``mpi`` for mpi);
- plus, where the program reduces a scalar every step (raw-tf's loss, keras-fit's logs), one more
  2*alpha.
Error = (predicted - measured) / measured.

    python benchmarks/scaling_check.py --results benchmarks/results/bench-nodes
writes scaling_check.json and scaling_check.png beside the results.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py and the benchmarks it checks
from _common import write_json
from allreduce import FLOATS
from scaling_model import fit

#: Which all-reduce each configuration runs, and how many extra small reductions per step.
ALLREDUCE_OF = {"tf": ("tf", 0), "raw-tf": ("tf", 1), "keras-fit": ("tf", 1), "mpi": ("mpi", 0)}


def check_link(rate: str, probes: list[dict[str, Any]], bench: dict[str, Any]) -> dict[str, Any]:
    """Predicted vs measured efficiency (against ``independent``) of every configuration on one link."""
    fits = {p["backend"]: fit(sorted(p["sizes"], key=lambda s: s["bytes"])) for p in probes}
    runs = {r["name"]: r for r in bench["runs"]}
    rows = []
    for name, run in runs.items():
        if run["backend"] not in ALLREDUCE_OF or run.get("nodes", 1) < 2:
            continue
        limit = runs.get(name.replace(run["backend"], "independent", 1))
        backend, small = ALLREDUCE_OF[run["backend"]]
        if limit is None or backend not in fits:
            continue
        sw = fits[backend]
        compute = limit["step_time_median_s"]
        allreduce = 2 * sw["alpha_s"] + FLOATS * 4 * sw["beta_s_per_byte"] + small * 2 * sw["alpha_s"]
        predicted = compute / (compute + allreduce)
        measured = run["vs_independent"]
        rows.append(
            {
                "configuration": name,
                "link": rate,
                "link_measured": run.get("link_text"),
                "allreduce_backend": backend,
                "compute_ms": compute * 1e3,
                "allreduce_ms": allreduce * 1e3,
                "measured_step_ms": run["step_time_median_s"] * 1e3,
                "predicted_vs_independent": predicted,
                "measured_vs_independent": measured,
                "error": (predicted - measured) / measured,
                "load_1min": run.get("load_1min"),
            }
        )
    return {
        "fits": {
            b: {"alpha_ms": f["alpha_s"] * 1e3, "beta_ms_per_mb": f["beta_s_per_byte"] * 1e9}
            | {"measured_ms_per_size": f["measured_ms_per_size"], "bytes": f["bytes"]}
            for b, f in fits.items()
        },
        "rows": rows,
    }


def plot(check: dict[str, Any], path: Path) -> None:
    """Predicted and measured efficiency (against independent) side by side, per configuration and link."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for link in check["links"].values() for r in link["rows"]]
    labels = [f"{r['configuration'].split('-n')[0]}\n{r['link']}" for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.9), 4))
    ax.bar([i - 0.2 for i in x], [r["predicted_vs_independent"] for r in rows], 0.4, label="predicted")
    ax.bar([i + 0.2 for i in x], [r["measured_vs_independent"] for r in rows], 0.4, label="measured")
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_ylabel("examples/s vs independent (2 hosts)")
    ax.set_ylim(0, 1.1)
    ax.legend()
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", default="benchmarks/results/bench-nodes")
    args = parser.parse_args()
    root = Path(args.results)
    summary = json.loads((root / "summary.json").read_text())
    out: dict[str, Any] = {
        "benchmark": "scaling-check",
        "gradient_bytes": FLOATS * 4,
        "commit": summary["started"]["commit"],
        "links": {},
    }
    for rate, measured in summary["links"].items():
        bench = json.loads((root / rate / "bench" / "results.json").read_text())
        out["links"][rate] = check_link(rate, measured["allreduce"], bench)
    errors = [abs(r["error"]) for link in out["links"].values() for r in link["rows"]]
    out["max_abs_error"] = max(errors) if errors else None
    write_json(root / "scaling_check.json", out)
    plot(out, root / "scaling_check.png")
    for link in out["links"].values():
        for r in link["rows"]:
            print(
                f"{r['link']:>9} {r['configuration']:<18} predicted {r['predicted_vs_independent']:.2f} "
                f"measured {r['measured_vs_independent']:.2f} error {r['error']:+.0%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
