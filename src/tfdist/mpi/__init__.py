"""MPI stacks, one home: a stack as described and whether a launcher and a library can work together
(:mod:`.stack`, pure), what this machine's stack says of itself (:mod:`.probe`), Hydra's launch across
nodes (:mod:`.hydra`), and a rank's own start of MPI (:mod:`.rank`)."""
