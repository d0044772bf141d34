"""Kubernetes: the manifests of one training job (pure rendering) and the client calls that submit and watch
them (the official ``kubernetes`` client, installed with ``tfdist[k8s]``)."""

from __future__ import annotations

from tfdist.k8s.manifest import render_manifests, render_yaml
from tfdist.k8s.spec import KINDS, K8sJobSpec

__all__ = ["KINDS", "K8sJobSpec", "render_manifests", "render_yaml"]
