"""Self-signed certificates for tests: a CA certificate to trust, a TLS server to start.

:func:`self_signed` makes an EC P-256 certificate valid for a day (from a minute ago), a CA
(``BasicConstraints(ca=True)``), optionally naming an IP address; :class:`SelfSigned` gives
its PEM, its SHA-256 fingerprint as deskpool shows one, and a TLS server context using it.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class SelfSigned:
    """A self-signed certificate and its private key."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def pem(self) -> str:
        """The certificate, PEM-encoded."""
        return self.certificate.public_bytes(serialization.Encoding.PEM).decode()

    @property
    def fingerprint(self) -> str:
        """The SHA-256 fingerprint of the certificate: colon-separated upper-case hex pairs."""
        der = self.certificate.public_bytes(serialization.Encoding.DER)
        return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())

    def server_context(self, directory: Path) -> ssl.SSLContext:
        """A TLS server context presenting this certificate (files written to ``directory``)."""
        cert_file, key_file = directory / "server.pem", directory / "server.key"
        cert_file.write_text(self.pem)
        key_file.write_bytes(
            self.key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        return context


def self_signed(common_name: str = "deskpool test CA", *, ip: str | None = None) -> SelfSigned:
    """A self-signed CA certificate for ``common_name``, valid for a day from a minute ago.

    :param ip: an IP address the certificate names (subject alternative name), for a server.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    )
    if ip is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]),
            critical=False,
        )
    return SelfSigned(builder.sign(key, hashes.SHA256()), key)
