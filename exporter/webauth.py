"""HTTP basic auth against password hashes, like the Prometheus exporter-toolkit web config.

The config holds ``user: hash``, never a password. Hashes use Django's PBKDF2 format,
``pbkdf2_sha256$<iterations>$<salt>$<base64 sha256>``, because the standard library can check
it (bcrypt, the toolkit's choice, is not in it). Make one with::

    python -m exporter.webauth            # prompts for the password, prints the hash

A slow hash per request would make every scrape slow, so a verified password is remembered as
an HMAC under a per-process random key; see ``BasicAuth`` for what a wrong one costs.
"""

from __future__ import annotations

import base64
import binascii
import enum
import getpass
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping

from exporter.configfile import cut

SCHEME = "pbkdf2_sha256"
DEFAULT_ITERATIONS = 600_000  # OWASP 2023 for PBKDF2-HMAC-SHA256
# Every failed login pays this many rounds (~0.4 s per million here): a bound keeps one bad
# config from making each attempt cost minutes, and hashlib overflows past 2**31 - 1.
MAX_ITERATIONS = 2_000_000
DIGEST_BYTES = 32  # SHA-256


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
    if not iterations.isascii() or not iterations.isdigit() or not salt:
        raise ValueError(f"bad iterations or salt in {scheme} hash")
    # Compared as text first: int() of a 5,000-digit string raises Python's own error.
    if len(iterations.lstrip("0")) > len(str(MAX_ITERATIONS)) or \
            int(iterations) > MAX_ITERATIONS:
        raise ValueError(f"{cut(iterations, 20)} iterations is over the limit of "
                         f"{MAX_ITERATIONS} (the default, {DEFAULT_ITERATIONS}, is strong)")
    if int(iterations) < 1:
        raise ValueError(f"bad iterations or salt in {scheme} hash")
    try:
        raw = base64.b64decode(digest, validate=True)
    except binascii.Error:
        raise ValueError("the hash part is not base64") from None
    if len(raw) != DIGEST_BYTES:  # empty or cut: no password could ever match it
        raise ValueError(f"the hash part is {len(raw)} bytes, not the {DIGEST_BYTES} of a "
                         "SHA-256 digest (make one with `python -m exporter.webauth`)")
    return int(iterations), salt.encode(), raw


class Verdict(enum.Enum):
    OK = "ok"
    DENIED = "denied"
    BUSY = "busy"  # not checked: this client failed too often, or hashing is at its bound


class BasicAuth:
    """Checks ``Authorization: Basic ...`` headers against ``{user: hash}``.

    A verified user-and-password pair is remembered (as an HMAC of both under a per-process
    key, like exporter-toolkit's cache), so a scrape costs one PBKDF2 run per process, not one
    per request. Every other attempt costs exactly one PBKDF2 run of the largest iteration count
    in the file, whether the user exists or not (no user enumeration by timing); at most
    ``concurrent_hashes`` run at once and each client gets ``burst`` runs, refilled at
    ``per_second``, so a password flood answers BUSY instead of starving the scrapes.

    >>> auth = BasicAuth({"prometheus": hash_password("s3cret", iterations=1000)})
    >>> auth.check("Basic " + base64.b64encode(b"prometheus:s3cret").decode())
    True
    >>> auth.check("Basic " + base64.b64encode(b"prometheus:guess").decode())
    False
    """

    def __init__(self, users: Mapping[str, str], *, burst: int = 10, per_second: float = 1.0,
                 concurrent_hashes: int = 1, cached: int = 256) -> None:
        if not users:
            raise ValueError("BasicAuth needs at least one user")
        self._encoded = dict(users)
        self._users = {user: parse_hash(encoded) for user, encoded in users.items()}
        self._rounds = max(iterations for iterations, _, _ in self._users.values())
        # What an unknown user is checked against: never matches, costs the same.
        self._decoy = (self._rounds, secrets.token_bytes(16), secrets.token_bytes(32))
        self._key = secrets.token_bytes(32)
        self._burst, self._per_second, self._cached = burst, per_second, cached
        self._lock = threading.Lock()
        self._verified: OrderedDict[bytes, str] = OrderedDict()  # HMAC -> its user
        self._budgets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, when
        self._hashing = threading.BoundedSemaphore(concurrent_hashes)

    def check(self, header: str | None, client: str = "") -> bool:
        return self.verify(header, client) is Verdict.OK

    def verify(self, header: str | None, client: str = "") -> Verdict:
        user_password = _decode(header)
        if user_password is None:
            return Verdict.DENIED
        user, password = user_password
        name = user.encode(errors="replace")
        remembered = hmac.new(self._key, len(name).to_bytes(4, "big") + name + password,
                              "sha256").digest()
        with self._lock:
            if remembered in self._verified:
                self._verified.move_to_end(remembered)
                return Verdict.OK
            if not self._spend(client):
                return Verdict.BUSY
        if not self._hashing.acquire(blocking=False):
            return Verdict.BUSY
        try:
            iterations, salt, expected = self._users.get(user, self._decoy)
            actual = hashlib.pbkdf2_hmac("sha256", password, salt, iterations)
            if iterations < self._rounds:  # pad: every attempt costs the largest count
                hashlib.pbkdf2_hmac("sha256", password, salt, self._rounds - iterations)
        finally:
            self._hashing.release()
        if not (hmac.compare_digest(actual, expected) and user in self._users):
            return Verdict.DENIED
        with self._lock:
            self._verified[remembered] = user
            while len(self._verified) > self._cached:
                self._verified.popitem(last=False)
        return Verdict.OK

    def renewed(self, users: Mapping[str, str]) -> BasicAuth:
        """A ``BasicAuth`` for a reloaded ``users`` that keeps this one's key, client budgets
        and verified passwords of the users whose hash is unchanged: a removed user or a changed
        password must hash again (and fail), an unchanged one costs no PBKDF2 run."""
        renewed = BasicAuth(users, burst=self._burst, per_second=self._per_second,
                            concurrent_hashes=1, cached=self._cached)
        renewed._hashing = self._hashing  # one bound on concurrent hashing, old and new
        renewed._key = self._key
        with self._lock:
            renewed._budgets = OrderedDict(self._budgets)
            renewed._verified = OrderedDict(
                (mac, user) for mac, user in self._verified.items()
                if users.get(user) == self._encoded.get(user))
        return renewed

    def _spend(self, client: str) -> bool:
        """Take one PBKDF2 run from ``client``'s budget (a token bucket); False if empty."""
        now = time.monotonic()
        tokens, then = self._budgets.pop(client, (float(self._burst), now))
        tokens = min(float(self._burst), tokens + (now - then) * self._per_second)
        self._budgets[client] = (tokens - 1, now) if tokens >= 1 else (tokens, now)
        while len(self._budgets) > 4096:  # a flood from many addresses forgets the oldest
            self._budgets.popitem(last=False)
        return tokens >= 1


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
