"""RAY AS A PLACEMENT: ``tfdist launch --ray`` places the workers on a Ray cluster's nodes.

One room for all of it: :mod:`.address` (the cluster's address: its forms, where ``auto`` finds it, whether
it answers), :mod:`.plan` (bundles and each worker's environment; pure), :mod:`.placement` (the placement
group and its actors), :mod:`.group` (the launcher's view of the remote processes) and :mod:`.host` (what
runs on a Ray node). Ray Train users want :mod:`tfdist.ray` instead (a ``TensorflowConfig`` for its
``TensorflowTrainer``); :mod:`tfdist.env.ray` reads a process that Ray started.
"""
