"""The exporter's TLS context, loaded so that no certificate or key file can hang or prompt.

Each file is read first as the config file is (``exporter.configfile.read_text``): a FIFO or a
device would block OpenSSL's open forever, a huge file would be read whole. A key protected by
a passphrase is refused by name: OpenSSL would ask for the passphrase on the terminal (and wait
forever there) or fail with "Invalid argument" where there is none. Every error is a
``ConfigError`` naming the setting and the file, raised before the exporter starts anything.
"""

from __future__ import annotations

import ssl

from exporter.config import ConfigError
from exporter.configfile import cut, read_text


def check_pem(key: str, path: str, private: bool) -> None:
    """``ConfigError`` unless ``path`` is a readable, small PEM file (an unencrypted key when
    ``private``)."""
    where, what = f"{key}: {cut(path, 120)}", "key" if private else "certificate"
    try:
        text = read_text(path)
    except OSError as err:
        raise ConfigError(f"{where}: cannot load TLS {what}: {err.strerror or err}") from None
    except ValueError as err:  # not a regular file, too big, not UTF-8
        raise ConfigError(f"{where}: cannot load TLS {what}: {err}") from None
    if "-----BEGIN " not in text:
        raise ConfigError(f"{where}: not a PEM file")
    if private and ("-----BEGIN ENCRYPTED" in text or "Proc-Type: 4,ENCRYPTED" in text):
        raise ConfigError(f"{where}: protected by a passphrase, which the exporter cannot be "
                          "given; store it unencrypted (openssl pkey -in KEY -out NEW)")


def server_context(cert: str, key: str | None) -> ssl.SSLContext:
    """A TLS 1.2+ server context for ``cert`` and ``key``; ``ConfigError`` naming the culprit."""
    check_pem("web.tls_cert_file", cert, private=False)
    check_pem("web.tls_key_file", str(key), private=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except (OSError, ssl.SSLError, _Encrypted) as err:
        raise ConfigError(f"cannot load TLS certificate {cut(cert, 120)} / key "
                          f"{cut(str(key), 120)}: {err}") from None
    return context


class _Encrypted(Exception):
    pass


def _no_passphrase() -> str:
    # Without a callback OpenSSL asks on the terminal, and the exporter waits there forever.
    raise _Encrypted("the key is protected by a passphrase; store it unencrypted")
