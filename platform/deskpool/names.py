"""What a display name may be (a cluster's, a pool's): one rule, one pattern.

The pattern is written for both Python and the ECMA-262 dialect of the API document, so the
document states exactly the rule the server applies: no control characters (C0, DEL, C1)
anywhere, and no white space (as ``str.isspace`` means it) at either end. Unpaired surrogates
(which UTF-8 cannot encode, and which no conforming JSON text generator produces) are refused
too, outside the pattern: ECMA-262 reads a character outside the BMP as two surrogates.
"""

from __future__ import annotations

import re

__all__ = ["NAME_PATTERN", "SPACE", "UNPRINTABLE", "is_display_name"]

#: The characters ``str.isspace`` calls white space, as a character-class body.
SPACE = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
#: Control characters, as a character-class body.
UNPRINTABLE = r"\x00-\x1f\x7f-\x9f"
#: A display name, whole (match it with ``fullmatch``).
NAME_PATTERN = rf"^[^{SPACE}{UNPRINTABLE}](?:[^{UNPRINTABLE}]*[^{SPACE}{UNPRINTABLE}])?$"

_NAME = re.compile(NAME_PATTERN)
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def is_display_name(text: str) -> bool:
    """Whether ``text`` is a display name (see the module documentation)."""
    return _NAME.fullmatch(text) is not None and _SURROGATE.search(text) is None
