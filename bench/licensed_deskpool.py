"""``deskpool`` for the login storm benchmark: trusts the benchmark's license vendor key.

The free edition allows 50 desktops and 50 sessions; the benchmark needs a thousand. Its
vendor key (made for the run, like the tests' ``license_vendor``) is trusted inside this
process only, as :func:`deskpool.licensing.keys.trust_in_process` allows in a development
build (no signed manifest): no setting of deskpool can do that. The public key is read from
``DESKPOOL_BENCH_VENDOR_KEY`` (PEM); the arguments are ``deskpool``'s.
"""

from __future__ import annotations

import os
import sys

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from deskpool.cli import main
from deskpool.licensing import keys

if __name__ == "__main__":
    key = load_pem_public_key(os.environ["DESKPOOL_BENCH_VENDOR_KEY"].encode())
    assert isinstance(key, Ed25519PublicKey), "the vendor key is an Ed25519 key"
    keys.trust_in_process(key)
    sys.exit(main())
