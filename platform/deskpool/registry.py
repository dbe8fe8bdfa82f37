"""Named registries that registration hooks fill.

A registration hook receives a registry and adds to it (``registry.add("proxmox", Driver)``), in
the style of tox's ``tox_register_tox_env``. The registry remembers which plugin added each name
so that a clash names both plugins.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A mapping from names to implementations, filled once by registration hooks.

    :param kind: what the registry holds, for messages (``"hypervisor driver"``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> None:
        """Register ``item`` under ``name``; a name may be registered only once.

        A name is letters, digits, ``_`` and ``-``, in dot-separated parts
        (``desktop.provision``).
        """
        parts = name.split(".")
        if not all(part.replace("_", "").replace("-", "").isalnum() for part in parts):
            raise ValueError(f"invalid {self.kind} name {name!r}")
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._items[name] = item

    def get(self, name: str) -> T:
        """Return the item registered as ``name``.

        :raises KeyError: with a message listing what is registered.
        """
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "none"
            raise KeyError(f"no {self.kind} named {name!r} (registered: {known})") from None

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        """The registered (name, item) pairs, sorted by name."""
        return sorted(self._items.items())

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
