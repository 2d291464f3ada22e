"""service.trust: whose X-Forwarded-For is believed (nobody by default; named addresses and networks)."""

from __future__ import annotations

import pytest

from service.trust import TrustedProxies


def test_nobody_is_trusted_by_default() -> None:
    none = TrustedProxies("")
    assert not none and "127.0.0.1" not in none


def test_addresses_and_networks_of_both_families() -> None:
    t = TrustedProxies(" 10.0.0.0/8, 192.168.1.7 ,::1")
    assert t and "10.20.30.40" in t and "192.168.1.7" in t and "::1" in t
    assert "192.168.1.8" not in t and "11.0.0.1" not in t and "::2" not in t


def test_star_trusts_everyone_and_a_name_is_never_an_address() -> None:
    assert "203.0.113.9" in TrustedProxies("*")
    assert "localhost" not in TrustedProxies("127.0.0.0/8")


def test_a_bad_entry_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="not-an-ip"):
        TrustedProxies("10.0.0.1,not-an-ip")
