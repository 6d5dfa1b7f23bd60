"""Who may hold the exporter's connections: a cap per client address and one for all.

One client (a scanner, a broken scraper, a slowloris script; an IPv4 address or an IPv6 /64,
``client_key``) can hold at most ``per_client``
connections, so it cannot fill the global cap by itself. Many addresses together still can:
then a newcomer takes the oldest connection of the address holding the most, as long as that
address holds more than the newcomer would. An address holding no connections therefore
always gets one while any address holds two or more.

>>> admission = Admission(max_connections=3, per_client=2)
>>> [admission.admit("10.0.0.1", n) for n in ("a", "b", "c")]
[True, True, False]
>>> admission.admit("10.0.0.2", "d"), admission.admit("10.0.0.3", "e")
(True, True)
>>> admission.total, admission.evicted
(3, ['a'])
"""

from __future__ import annotations

import ipaddress
from collections.abc import Hashable


def client_key(address: str) -> str:
    """The client an address counts as, for the connection caps and the password-hashing
    budgets: an IPv4 address itself; an IPv6 address its /64, which one host commonly holds
    whole (counted by address it would be as many clients as it likes); an IPv4-mapped IPv6
    address its IPv4. Anything else (a Unix socket's empty name) as given.

    >>> client_key("10.0.0.7"), client_key("2001:db8:1:2:aaaa::1"), client_key("::ffff:10.0.0.7")
    ('10.0.0.7', '2001:db8:1:2::/64', '10.0.0.7')
    >>> client_key("fe80::1%eth0"), client_key("")
    ('fe80::/64', '')
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class Admission:
    """Connections by client address; ``evicted`` lists what ``admit`` took back, oldest
    first, for the caller to close (and then clear)."""

    def __init__(self, max_connections: int, per_client: int) -> None:
        if max_connections < 1 or per_client < 1:
            raise ValueError("connection limits must be >= 1")
        self.max_connections, self.per_client = max_connections, per_client
        self._held: dict[str, dict[Hashable, None]] = {}  # insertion order: oldest first
        self.total = 0
        self.evicted: list[Hashable] = []

    def held(self, client: str) -> int:
        return len(self._held.get(client, ()))

    def admit(self, client: str, connection: Hashable) -> bool:
        """Count ``connection`` for ``client``; False (count nothing) if it must be refused."""
        mine = self.held(client)
        if mine >= self.per_client:
            return False
        if self.total >= self.max_connections:
            heaviest = max(self._held, key=lambda other: len(self._held[other]))
            if len(self._held[heaviest]) <= mine + 1:
                return False
            victim = next(iter(self._held[heaviest]))
            self.release(heaviest, victim)
            self.evicted.append(victim)
        self._held.setdefault(client, {})[connection] = None
        self.total += 1
        return True

    def release(self, client: str, connection: Hashable) -> None:
        """Forget ``connection``; nothing if it was already released (or evicted)."""
        held = self._held.get(client)
        if held is None or connection not in held:
            return
        del held[connection]
        if not held:
            del self._held[client]
        self.total -= 1
