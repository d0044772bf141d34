"""``--ray ADDRESS``: the forms a Ray cluster address takes. Pure, no imports from the rest of launch/."""

from __future__ import annotations

from tfdist.errors import ConfigError


def check_address(address: str) -> str:
    """``--ray ADDRESS``: ``auto`` (RAY_ADDRESS or this machine's cluster), ``HOST:PORT`` or
    ``ray://HOST:PORT``.

    Input/Output: ``"10.0.0.1:6379"`` -> same; ``"train.py"`` -> ConfigError naming the form.
    """
    text = address.strip()
    if text == "auto" or text.startswith("ray://"):
        return text
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(
            f"--ray {address!r} is not a Ray address. Hint: --ray HOST:PORT (the head's GCS address, "
            "as ray start --head prints it), --ray auto, or --ray with no value before another option."
        )
    return text
