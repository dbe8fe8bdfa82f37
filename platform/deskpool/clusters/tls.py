"""TLS settings of a cluster connection, checked and normalized before they are stored.

A cluster is reached over TLS, verified by default against the system's CAs. Its record may
instead name a CA certificate (PEM text, for a cluster with its own CA) or pin the SHA-256
fingerprint of the server certificate (for a self-signed one: the pin is checked, the chain is
not). Both are public values, stored in clear and returned by the API. These functions have no
I/O.
"""

from __future__ import annotations

import re

from cryptography import x509

#: The longest CA certificate text accepted (a bundle of a few certificates fits).
MAX_CA_CERTIFICATE_LENGTH = 64 * 1024

#: PEM text of one or more certificates (RFC 7468, lines of at most 76 base64 characters), as
#: the API document states it. Whether each block is an X.509 certificate needs parsing it.
PEM_CERTIFICATES = (
    r"^\s*(?:-----BEGIN CERTIFICATE-----\r?\n(?:[A-Za-z0-9+/=]{1,76}\r?\n)+"
    r"-----END CERTIFICATE-----\s*)+$"
)

#: A SHA-256 fingerprint as :func:`normalize_fingerprint` accepts it: 64 hex digits, with
#: colons or white space anywhere between them (the API document states it).
FINGERPRINT_TEXT = r"^[\s:]*(?:[0-9A-Fa-f][\s:]*){64}$"

_HEX_PAIRS = re.compile(r"^[0-9A-F]{64}$")
_SEPARATORS = re.compile(r"[\s:]")


def normalize_fingerprint(value: str) -> str:
    """A SHA-256 fingerprint as upper-case hex pairs joined by colons (``AB:CD:...``).

    Accepts hex digits in either case, with or without colons or spaces between pairs (as
    ``openssl x509 -fingerprint -sha256`` and the Proxmox VE node summary show them).

    :raises ValueError: it is not 32 bytes of hex.
    """
    digits = _SEPARATORS.sub("", value).upper()
    if not _HEX_PAIRS.match(digits):
        raise ValueError(
            "Must be the SHA-256 fingerprint of the server certificate: 64 hex digits, "
            "colons allowed."
        )
    return ":".join(digits[index : index + 2] for index in range(0, 64, 2))


def check_ca_certificate(value: str) -> str:
    """Check that ``value`` is PEM text holding at least one X.509 certificate; return it.

    :raises ValueError: it is too long, holds no certificate, or one does not parse.
    """
    if len(value) > MAX_CA_CERTIFICATE_LENGTH:
        raise ValueError(f"Must be at most {MAX_CA_CERTIFICATE_LENGTH} characters.")
    if "-----BEGIN CERTIFICATE-----" not in value:
        raise ValueError("Must be PEM text with at least one -----BEGIN CERTIFICATE----- block.")
    try:
        x509.load_pem_x509_certificates(value.encode())
    except ValueError:
        raise ValueError("Must be PEM text of X.509 certificates; it does not parse.") from None
    return value.strip() + "\n"
