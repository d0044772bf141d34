"""``tfdist bench``: scaling table, plot and bottleneck diagnosis from real distributed runs.

config (what was asked, validated) · plan (pure: the runs, their order, warnings) · worker (one measured
training process) · probes (all-reduce alone) · runner (starts runs, samples CPU/GPU) · stats (pure: step
times, speed-up, efficiency) · diagnose (pure: names the bottleneck) · report (JSON, CSV, Markdown, PNG,
table) · nodes (which nodes, reached how). The link between the nodes is probed and read by
tfdist.diagnose (link, linkreport).
"""
