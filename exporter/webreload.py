"""The web config (basic-auth users, TLS certificate and key) as it is now, without a restart.

The Prometheus exporter-toolkit reads its web config again for each connection. Here the files
(the ``--config`` file, the certificate, the key) are looked at with ``os.stat`` at most once a
``interval`` and read again only when one's inode, size or modification time changed: a kubelet
swapping a Secret's files (a renewed cert-manager certificate), an operator editing the file.
A scrape between two looks costs one clock read. ``SIGHUP`` reads them at once
(``reload_on``). A new config that does not load is not used: the last good one keeps
serving, and one line says why, once per change of the files. Only the users and the
certificate and key take effect; switching TLS on or off, the address and the collectors need
a restart (the line says so).
"""

from __future__ import annotations

import logging
import os
import signal
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from exporter.config import ConfigError, Settings
from exporter.configfile import cut
from exporter.tls import server_context
from exporter.webauth import BasicAuth

log = logging.getLogger(__name__)

RELOADED = ("web_basic_auth_users", "web_tls_cert_file", "web_tls_key_file")


@dataclass(frozen=True)
class WebConfig:
    """What one connection (``context``) and one request (``auth``) are served with."""

    settings: Settings
    auth: BasicAuth | None
    context: ssl.SSLContext | None


def build(settings: Settings, previous: WebConfig | None = None) -> WebConfig:
    """The users and TLS context of ``settings``; ``ConfigError`` naming what is wrong."""
    users = settings.web_basic_auth_users
    if not users:
        auth = None
    elif previous is not None and previous.auth is not None:
        auth = previous.auth.renewed(users)  # unchanged users' verified passwords are kept
    else:
        auth = BasicAuth(users)
    context = (server_context(settings.web_tls_cert_file, settings.web_tls_key_file)
               if settings.web_tls_cert_file else None)
    return WebConfig(settings, auth, context)


Stamp = tuple[tuple[int, int, int, int], ...]


def stamp(paths: Sequence[str]) -> Stamp:
    """(device, inode, size, mtime) of each path, following links; (-1, ...) if unreadable."""
    found = []
    for path in paths:
        try:
            info = os.stat(path)
            found.append((info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns))
        except OSError:
            found.append((-1, -1, -1, -1))
    return tuple(found)


class LiveWebConfig:
    """``current()``: the web config now. ``reread`` gives fresh settings (the flags and the
    ``--config`` file read again); ``config_path`` is that file, watched with the TLS files."""

    def __init__(self, settings: Settings, reread: Callable[[], Settings] | None = None,
                 config_path: str | None = None, interval: float = 1.0) -> None:
        self._config = build(settings)
        self._reread = reread or (lambda: settings)
        self._config_path, self._interval = config_path, interval
        self._stamp = stamp(self._watched(settings))
        self._failed: Stamp | None = None  # the files of the last refused config, logged once
        self._next = time.monotonic() + interval
        self._lock = threading.Lock()

    def current(self) -> WebConfig:
        if time.monotonic() < self._next:  # the hot path: no lock, no system call
            return self._config
        with self._lock:
            if time.monotonic() >= self._next:
                self._next = time.monotonic() + self._interval
                now = stamp(self._watched(self._config.settings))
                if now != self._stamp and now != self._failed:
                    self._load(now, "the files changed")
        return self._config

    def reload(self, why: str = "SIGHUP") -> bool:
        """Read the files again now, changed or not; False if the new config was refused."""
        with self._lock:
            return self._load(stamp(self._watched(self._config.settings)), why, forced=True)

    def reload_on(self, signum: int) -> None:
        """Reload whenever signal ``signum`` (SIGHUP) arrives; call from the main thread. The
        handler only sets an event: it may interrupt ``current()`` holding the lock."""
        wake = threading.Event()

        def reloads() -> None:
            while wake.wait():
                wake.clear()
                self.reload(signal.Signals(signum).name)

        threading.Thread(target=reloads, name="web-config-reload", daemon=True).start()
        signal.signal(signum, lambda *_: wake.set())  # its default action ends the process

    def _watched(self, settings: Settings) -> list[str]:
        paths = [self._config_path] if self._config_path else []
        return paths + [p for p in (settings.web_tls_cert_file, settings.web_tls_key_file) if p]

    def _load(self, now: Stamp, why: str, forced: bool = False) -> bool:
        old = self._config.settings
        try:
            settings = self._reread()
            if (settings.web_tls_cert_file is None) != (old.web_tls_cert_file is None):
                raise ConfigError("switching TLS on or off needs a restart")
            config = build(settings, self._config)
        except ConfigError as err:
            if forced or now != self._failed:
                log.warning("web config not reloaded (%s), still serving the last good one: %s",
                            why, cut(str(err), 400))
            self._failed = now
            return False
        # Stamped before the read: a change during it is read at the next look.
        same = self._watched(settings) == self._watched(old)
        self._config, self._failed = config, None
        self._stamp = now if same else stamp(self._watched(settings))
        pending = [f.name.replace("_", ".", 1) for f in fields(Settings)
                   if f.name not in RELOADED and getattr(settings, f.name) != getattr(old, f.name)]
        log.info("web config reloaded (%s): %d basic-auth user(s), TLS %s%s", why,
                 len(settings.web_basic_auth_users),
                 "certificate " + cut(str(settings.web_tls_cert_file), 120)
                 if settings.web_tls_cert_file else "off",
                 f"; {', '.join(pending)} changed too and take effect at restart"
                 if pending else "")
        return True
