"""WHO IS SLOW, WHO IS LOST? What reads the network and names slow or lost peers, for training and bench.

peers (a lost peer named from TensorFlow's error or by knocking on every task's port; collectives that no
longer meet, with a roll call of the workers that wait) · slowness (steps that turn slow, and which node's
link: TCP round trips and send queues) · link (``python -m tfdist.diagnose.link``: the link between two
nodes measured, no TensorFlow) · linkreport (pure: the link a job ran on, the slow node).
"""
