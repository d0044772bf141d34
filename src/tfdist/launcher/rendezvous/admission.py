"""Which connections that have not authenticated yet the rendezvous keeps, bounded in all and per address:
the oldest makes room (a node's handshake takes one round trip, so a flood drops its own first). Pure."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

#: Connections without a verified join, in all and from one address.
MAX_PENDING = 512
MAX_PENDING_PER_ADDRESS = 64


class Admission(Generic[K]):
    """The connections waiting for their join (keyed by the caller: a socket's file number), oldest first.

    Input/Output: with ``total=2, per_address=1``, ``admit(1, "a", 0)`` -> ``[]``, ``admit(2, "a", 0)``
    -> ``[1]`` (a's oldest makes room), ``admit(3, "b", 0)`` -> ``[]``, ``admit(4, "c", 0)`` -> ``[2]``.
    """

    def __init__(self, total: int = MAX_PENDING, per_address: int = MAX_PENDING_PER_ADDRESS) -> None:
        self.total, self.per_address = total, per_address
        self._all: OrderedDict[K, tuple[str, float]] = OrderedDict()  # key -> (address, deadline)
        self._by_address: dict[str, OrderedDict[K, None]] = {}

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, key: object) -> bool:
        return key in self._all

    def from_address(self, address: str) -> int:
        """How many waiting connections came from ``address``."""
        return len(self._by_address.get(address, ()))

    def oldest(self) -> K | None:
        """The key waiting longest, if any."""
        return next(iter(self._all), None)

    def admit(self, key: K, address: str, deadline: float) -> list[K]:
        """Keep ``key`` (from ``address``, to be verified by ``deadline``); the keys dropped to make room."""
        dropped: list[K] = []
        mine = self._by_address.get(address)
        if mine is not None and len(mine) >= self.per_address:
            dropped.append(self._drop(next(iter(mine))))
        if len(self._all) >= self.total:
            dropped.append(self._drop(next(iter(self._all))))
        self._all[key] = (address, deadline)
        self._by_address.setdefault(address, OrderedDict())[key] = None
        return dropped

    def remove(self, key: K) -> None:
        """``key`` is verified or closed: it no longer counts (nothing when it was not here)."""
        if key in self._all:
            self._drop(key)

    def expired(self, now: float) -> list[K]:
        """The keys whose deadline passed, removed (constant time when none: the deadlines are in order)."""
        gone: list[K] = []
        while self._all:
            key, (_, deadline) = next(iter(self._all.items()))
            if deadline > now:
                break
            gone.append(self._drop(key))
        return gone

    def _drop(self, key: K) -> K:
        address, _ = self._all.pop(key)
        mine = self._by_address[address]
        del mine[key]
        if not mine:
            del self._by_address[address]
        return key
