"""Which peers' forwarded headers the service believes: none unless the operator names them."""

from __future__ import annotations

import ipaddress


class TrustedProxies:
    """The addresses whose X-Forwarded-For is believed (uvicorn's ``forwarded_allow_ips``, off by
    default): a comma-separated list of addresses and networks, or ``*``."""

    def __init__(self, spec: str) -> None:
        items = [s.strip() for s in spec.split(",") if s.strip()]
        self.everyone = "*" in items
        self.networks = [ipaddress.ip_network(s, strict=False) for s in items if s != "*"]

    def __bool__(self) -> bool:
        return self.everyone or bool(self.networks)

    def __contains__(self, host: str) -> bool:
        if self.everyone:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in n for n in self.networks)
