"""``tfdist bench``: scaling table, plot and bottleneck diagnosis from real distributed runs.

config (validated) · plan (pure: the runs and their order) · runner (starts them, samples CPU/GPU) · worker,
references, probes (the measured processes) · stats, breakdown, scaling, diagnose (pure arithmetic) ·
report (JSON, CSV, Markdown, PNG, table) · nodes (which nodes, reached how).
"""
