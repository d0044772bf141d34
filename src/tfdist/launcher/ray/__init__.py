"""RAY AS A PLACEMENT: ``tfdist launch --ray`` places the workers on a Ray cluster's nodes.

One room for all of it: :mod:`.address`, :mod:`.plan` (pure), :mod:`.placement`, :mod:`.group` (the
launcher's side) and :mod:`.host` (the node's side). Ray Train users want :mod:`tfdist.ray` instead.
"""
