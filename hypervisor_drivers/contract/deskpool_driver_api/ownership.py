"""deskpool's ownership tags, and the check every destructive call makes first.

Every VM a driver creates carries two tags: the *owner tag* (``deskpool`` unless the platform
chose another, say one per installation) and a *desktop tag* naming the desktop it was made
for (``deskpool-desktop-<desktop id>``). Hypervisors reuse VM ids, so before deleting,
stopping, shutting down or resetting a VM the base driver re-reads its tags and refuses with
:class:`~deskpool_driver_api.errors.NotOwned` unless they are still there. Tags use only the
characters every hypervisor we know accepts (Proxmox VE: ``[a-z0-9_][a-z0-9_+.-]*``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from deskpool_driver_api.errors import NotOwned
from deskpool_driver_api.model import VirtualMachine

#: The owner tag unless the platform chooses another.
DEFAULT_OWNER_TAG = "deskpool"

_TAG = re.compile(r"[a-z0-9_][a-z0-9_+.\-]*")
_DESKTOP_ID = re.compile(r"[a-z0-9_+.\-]+")


@dataclass(frozen=True)
class OwnershipTags:
    """The tags that mark a VM as deskpool's, for one owner tag.

    :param owner_tag: the tag every deskpool VM carries.
    :raises ValueError: when ``owner_tag`` is not a valid tag.
    """

    owner_tag: str = DEFAULT_OWNER_TAG

    def __post_init__(self) -> None:
        if not _TAG.fullmatch(self.owner_tag):
            raise ValueError(
                f"invalid owner tag {self.owner_tag!r}: use lower-case letters, digits, _ + . -"
            )

    @property
    def desktop_prefix(self) -> str:
        """The prefix of the desktop tag (``deskpool-desktop-``)."""
        return f"{self.owner_tag}-desktop-"

    def desktop_tag(self, desktop_id: str) -> str:
        """The tag naming ``desktop_id``.

        :raises ValueError: when the desktop id cannot be written as a tag.
        """
        if not _DESKTOP_ID.fullmatch(desktop_id):
            raise ValueError(
                f"desktop id {desktop_id!r} cannot be a tag: use lower-case letters, digits, "
                "_ + . -"
            )
        return self.desktop_prefix + desktop_id

    def tags_for(self, desktop_id: str) -> tuple[str, str]:
        """The two tags a VM made for ``desktop_id`` carries."""
        return (self.owner_tag, self.desktop_tag(desktop_id))

    def is_owned(self, tags: Iterable[str]) -> bool:
        """Whether ``tags`` include the owner tag."""
        return self.owner_tag in {tag.lower() for tag in tags}

    def desktop_id_of(self, tags: Iterable[str]) -> str | None:
        """The desktop id named by ``tags``, or ``None`` when there is none (or several)."""
        found = {
            tag.lower()[len(self.desktop_prefix) :]
            for tag in tags
            if tag.lower().startswith(self.desktop_prefix)
        }
        found.discard("")
        return found.pop() if len(found) == 1 else None

    def merged(self, existing: Iterable[str], desktop_id: str) -> tuple[str, ...]:
        """``existing`` tags with deskpool's replaced by those for ``desktop_id``, sorted.

        Tags a template carried for other reasons are kept; any ownership tags it carried
        (a template must not, but an administrator may have copied them) are replaced.
        """
        kept = {
            tag.lower()
            for tag in existing
            if tag
            and tag.lower() != self.owner_tag
            and not tag.lower().startswith(self.desktop_prefix)
        }
        return tuple(sorted(kept | set(self.tags_for(desktop_id))))

    def check(self, vm: VirtualMachine, desktop_id: str | None = None) -> None:
        """Refuse unless ``vm`` carries the owner tag (and ``desktop_id``'s tag, when given).

        :raises NotOwned: when the VM is a template, lacks the owner tag, or names another
            desktop.
        """
        if vm.template or not self.is_owned(vm.tags):
            raise NotOwned(
                f"VM {vm.id} ({vm.name}) does not carry the ownership tag {self.owner_tag!r}; "
                "deskpool does not touch VMs it did not create",
                vm_id=vm.id,
            )
        if desktop_id is not None and self.desktop_id_of(vm.tags) != desktop_id:
            raise NotOwned(
                f"VM {vm.id} ({vm.name}) belongs to another desktop than {desktop_id!r}",
                vm_id=vm.id,
            )
