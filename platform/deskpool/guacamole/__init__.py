"""The Apache Guacamole protocol: instructions, guacd's parser limits and status codes.

What the gateway (``plugins/deskpool_gateway``) and the desktop daemon simulator
(:mod:`deskpool.desktopd`) share: an instruction is ``LENGTH.VALUE`` elements separated by
``,`` and ended by ``;``, where ``LENGTH`` counts the Unicode code points of ``VALUE`` (the
protocol reference of the Guacamole manual). The parser enforces guacd's own limits
(``GUAC_INSTRUCTION_MAX_LENGTH``, ``GUAC_INSTRUCTION_MAX_DIGITS``,
``GUAC_INSTRUCTION_MAX_ELEMENTS`` of libguac's ``parser-constants.h``).
"""

from deskpool.guacamole.instruction import (
    INTERNAL_OPCODE,
    MAX_DIGITS,
    MAX_ELEMENTS,
    MAX_INSTRUCTION_LENGTH,
    MAX_LENGTH,
    SHORT_INSTRUCTIONS,
    Instruction,
    InstructionParser,
    ProtocolError,
    encode,
)
from deskpool.guacamole.status import Status

__all__ = [
    "INTERNAL_OPCODE",
    "MAX_DIGITS",
    "MAX_ELEMENTS",
    "MAX_INSTRUCTION_LENGTH",
    "MAX_LENGTH",
    "SHORT_INSTRUCTIONS",
    "Instruction",
    "InstructionParser",
    "ProtocolError",
    "Status",
    "encode",
]
