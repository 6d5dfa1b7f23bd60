"""HTTP basic auth against password hashes, like the Prometheus exporter-toolkit web config.

The config holds ``user: hash``, never a password. Hashes use Django's PBKDF2 format,
``pbkdf2_sha256$<iterations>$<salt>$<base64 sha256>``, because the standard library can check
it (bcrypt, the toolkit's choice, is not in it). Make one with::

    python -m exporter.webauth            # prompts for the password, prints the hash

A slow hash per request would make every scrape slow, so a verified password is remembered as
an HMAC under a per-process random key; a wrong one pays the full PBKDF2 cost every time.
"""

from __future__ import annotations

import base64
import binascii
import getpass
import hashlib
import hmac
import secrets
from collections.abc import Mapping

SCHEME = "pbkdf2_sha256"
DEFAULT_ITERATIONS = 600_000  # OWASP 2023 for PBKDF2-HMAC-SHA256
# Every failed login pays this many rounds (~0.4 s per million here): a bound keeps one bad
# config from making each attempt cost minutes, and hashlib overflows past 2**31 - 1.
MAX_ITERATIONS = 2_000_000


def hash_password(password: str, iterations: int = DEFAULT_ITERATIONS,
                  salt: str | None = None) -> str:
    """The config-file form of ``password``.

    >>> hash_password("s3cret", iterations=1000, salt="NaCl")
    'pbkdf2_sha256$1000$NaCl$Imh763JHpNtotacn8DcAwY+kYUnmnd4ansM++FZKFSs='
    """
    salt = salt or secrets.token_urlsafe(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), iterations)
    return f"{SCHEME}${iterations}${salt}${base64.b64encode(digest).decode()}"


def parse_hash(encoded: str) -> tuple[int, bytes, bytes]:
    """(iterations, salt, digest) of a hash; ``ValueError`` says what is wrong with it."""
    parts = encoded.split("$")
    if len(parts) != 4 or parts[0] != SCHEME:
        raise ValueError(f"expected {SCHEME}$<iterations>$<salt>$<hash> "
                         "(make one with `python -m exporter.webauth`)")
    scheme, iterations, salt, digest = parts
    if not iterations.isdigit() or int(iterations) < 1 or not salt:
        raise ValueError(f"bad iterations or salt in {scheme} hash")
    if int(iterations) > MAX_ITERATIONS:
        raise ValueError(f"{int(iterations)} iterations is over the limit of {MAX_ITERATIONS} "
                         f"(the default, {DEFAULT_ITERATIONS}, is strong)")
    try:
        raw = base64.b64decode(digest, validate=True)
    except binascii.Error:
        raise ValueError("the hash part is not base64") from None
    return int(iterations), salt.encode(), raw


class BasicAuth:
    """Checks ``Authorization: Basic ...`` headers against ``{user: hash}``.

    >>> auth = BasicAuth({"prometheus": hash_password("s3cret", iterations=1000)})
    >>> auth.check("Basic " + base64.b64encode(b"prometheus:s3cret").decode())
    True
    >>> auth.check("Basic " + base64.b64encode(b"prometheus:guess").decode())
    False
    """

    def __init__(self, users: Mapping[str, str]) -> None:
        if not users:
            raise ValueError("BasicAuth needs at least one user")
        self._users = {user: parse_hash(encoded) for user, encoded in users.items()}
        # An unknown user costs as much as a known one, so timing does not reveal user names.
        self._decoy = next(iter(self._users.values()))
        self._key = secrets.token_bytes(32)
        self._verified: dict[str, bytes] = {}

    def check(self, header: str | None) -> bool:
        user_password = _decode(header)
        if user_password is None:
            return False
        user, password = user_password
        remembered = hmac.new(self._key, password, "sha256").digest()
        if hmac.compare_digest(self._verified.get(user, b""), remembered):
            return True
        iterations, salt, expected = self._users.get(user, self._decoy)
        actual = hashlib.pbkdf2_hmac("sha256", password, salt, iterations)
        if hmac.compare_digest(actual, expected) and user in self._users:
            self._verified[user] = remembered
            return True
        return False


def _decode(header: str | None) -> tuple[str, bytes] | None:
    if not header or not header.startswith("Basic "):
        return None
    try:
        raw = base64.b64decode(header[len("Basic "):], validate=True)
    except ValueError:  # binascii.Error, or a non-ASCII character (headers arrive as Latin-1)
        return None
    user, sep, password = raw.partition(b":")
    if not sep:
        return None
    return user.decode(errors="replace"), password


def main() -> None:
    password = getpass.getpass("password: ")
    if password != getpass.getpass("again: "):
        raise SystemExit("the passwords differ")
    print(hash_password(password))


if __name__ == "__main__":
    main()
