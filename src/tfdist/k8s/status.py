"""What ``tfdist k8s status`` prints: a job's state and its pods, from the API server's answers. Pure."""

from __future__ import annotations

from typing import Any

#: Conditions that end a job, in the order they are reported.
FINAL = ("Complete", "Completed", "Succeeded", "Failed")


def job_state(kind: str, status: dict[str, Any]) -> str:
    """One word for the job's state: the last true final condition, else Running or Pending."""
    true = [c.get("type", "") for c in status.get("conditions") or [] if c.get("status") == "True"]
    for condition in reversed(true):
        if condition in FINAL:
            return str(condition)
    if kind == "Job":
        return "Running" if status.get("active") else "Pending"
    if kind == "TFJob" and "Running" in true:
        return "Running"
    if kind == "JobSet" and status.get("replicatedJobsStatus"):
        return "Running"
    return "Pending"


def describe(kind: str, name: str, namespace: str, status: dict[str, Any], pods: list[dict[str, Any]]) -> str:
    """The status report: one line for the job, one per pod."""
    counts = ""
    if kind == "Job":
        counts = (
            f" (active {status.get('active') or 0}, succeeded {status.get('succeeded') or 0}, "
            f"failed {status.get('failed') or 0})"
        )
    elif kind == "JobSet":
        counts = f" (restarts {status.get('restarts') or 0})"
    lines = [f"{kind} {name} in namespace {namespace}: {job_state(kind, status)}{counts}"]
    for pod in pods:
        pod_status = pod.get("status") or {}
        restarts = sum(c.get("restartCount") or 0 for c in pod_status.get("containerStatuses") or [])
        lines.append(
            f"  pod {pod['metadata']['name']}: {pod_status.get('phase', 'Unknown')}, restarts {restarts}"
        )
    if not pods:
        lines.append("  no pods (yet)")
    return "\n".join(lines) + "\n"
