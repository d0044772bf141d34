"""tfdist's worker bootstrap, imported by Python's ``site`` at start-up in processes tfdist launches.

It first runs the user's own ``sitecustomize`` (the next one on ``sys.path``), then tfdist's bootstrap.
It must stay cheap and must never stop the program: any failure here is reported and ignored.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _chain_user_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module  # it is the sitecustomize of this process from now on
    spec.loader.exec_module(module)


def _start() -> None:
    try:
        _chain_user_sitecustomize()
    finally:
        if os.environ.get("TFDIST_BOOTSTRAP", "1") != "0":  # tfdist.variables is not importable yet
            try:
                from tfdist.worker import bootstrap

                bootstrap.start()
            except Exception as exc:  # the user's program runs even if tfdist's bootstrap cannot
                print(f"[tfdist] worker bootstrap failed: {type(exc).__name__}: {exc}", file=sys.stderr)


_start()
