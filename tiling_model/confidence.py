"""How far to trust a predicted time: every prediction carries an interval, and says what it rests on.

A profile's ``calibration`` records, per traffic class (the bytes a call moves), the 10th and 90th
percentiles of measured / predicted over cases the fit did not see. The shipped profiles: leave one
operator out on the shipped measurements of other operators. A device-fitted profile (a table tuned on
a device): its sweep's records of bcetune's kernel held out by key (``intervals``: a variant the sweep
measured, at sizes it did not time) and by variant (``intervals_unmeasured``: a variant it never
measured), each class with the keys it rests on. A prediction p then carries [p * lo, p * hi].

Where the class has too few held-out cases the band falls back to one that has seen such cases and is
never narrower: the profile's overall band; for a device fit whose class holds some keys but fewer than a
band needs, the overall band joined with those keys' held-out range (``intervals_few_keys``: the device's
own cases of the class); where the device held out none of the class, the overall band joined with the
shipped profile's band of the class (other operators, other errors), widened by the device fit's
in-sample errors where the fit had too few keys for folds at all. A variant the sweep never measured takes
at least the measured variants' band of its class. The basis names which band it is and why.

Measured on stand-in devices after 4-key sweeps (``benchmarks/interval_coverage.py``, 80% claimed): the
shipped band in a class's place held the device's time for 99% of untimed sizes and 95% of untuned
variants (seeds 6-15; other operators miss by far more than a device fit of bcetune's kernel does); the
class's own few keys in its place, 86% and 87%.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from tiling_model.soc import SocProfile, known_socs, load_soc
from tiling_model.tiling import TilingData

TRAFFIC_CLASSES = (("< 4 MB", 0.0, 4e6), ("4-100 MB", 4e6, 100e6), ("> 100 MB", 100e6, float("inf")))

Band = tuple[float, float]


@dataclass(frozen=True)
class Interval:
    """Where a call's time is expected (``lo_us``..``hi_us``) and the band's basis, in words."""

    lo_us: float
    hi_us: float
    basis: str

    def fields(self) -> dict[str, Any]:
        """As an answer carries it (``POST /tiling``, ``model_tools predict``)."""
        return {"predicted_interval_us": [self.lo_us, self.hi_us], "predicted_interval_basis": self.basis}


def traffic_bytes(t: TilingData) -> int:
    """What a call moves element by element: every stream's elements (the classes' measure)."""
    return t.kernel.streams * t.n * t.elem_bytes


def traffic_class(nbytes: float) -> str:
    return next(name for name, lo, hi in TRAFFIC_CLASSES if lo <= nbytes < hi)


def _band(value: Any) -> Band | None:
    if isinstance(value, list | tuple) and len(value) == 2 and 0 < float(value[0]) <= float(value[1]):
        return float(value[0]), float(value[1])
    return None


def _union(*bands: Band | None) -> Band:
    got = [b for b in bands if b is not None]
    return min(b[0] for b in got), max(b[1] for b in got)


def _profile_band(calibration: dict[str, Any] | None, cls: str) -> tuple[Band, str] | None:
    """A (shipped or hand-made) profile's own held-out band for the class, or its overall band."""
    bands = (calibration or {}).get("intervals")
    if not isinstance(bands, dict):
        return None
    own = _band(bands.get(cls))
    if own is not None:
        return own, f"held-out {cls} band"
    overall = _band(bands.get("all"))
    return (overall, f"overall held-out band (no {cls} cases held out)") if overall else None


@cache
def _widest_shipped(cls: str) -> Band:
    """The union of every shipped profile's band for the class: the band of last resort."""
    return _union(*(got[0] for s in known_socs() if (got := _profile_band(load_soc(s).calibration, cls))))


def _shipped(soc: SocProfile, cls: str) -> tuple[Band, str]:
    """The shipped profile's band for the class (this SoC's, else the widest any shipped profile has)."""
    if soc.name in known_socs():
        got = _profile_band(load_soc(soc.name).calibration, cls)
        if got is not None:
            return got[0], f"shipped {soc.name} profile's {got[1]} (other operators, left out one at a time)"
    return _widest_shipped(cls), f"widest {cls} band of the shipped profiles ({soc.name} ships none)"


def _device_band(t: TilingData, soc: SocProfile, cal: dict[str, Any], cls: str) -> tuple[Band, str]:
    """The device fit's band for the call: a measured variant's (held out by key), or an unmeasured one's
    (held out by variant) joined with the measured variants' band of the class: a variant the sweep never
    measured is at a size it never timed too, so its band is never narrower than theirs."""
    measured = t.variant.label() in cal.get("measured_variants", ())
    band, basis = _device_class_band(soc, cal, cls, measured)
    if measured:
        return band, basis
    theirs, _ = _device_class_band(soc, cal, cls, True)
    joined = _union(band, theirs)
    if joined != band:
        basis += ", joined with the measured variants' band of the class (never narrower than theirs)"
    return joined, basis


def _device_class_band(soc: SocProfile, cal: dict[str, Any], cls: str, measured: bool) -> tuple[Band, str]:
    which = "intervals" if measured else "intervals_unmeasured"
    what = "a variant the sweep measured" if measured else "a variant the sweep did not measure"
    got = cal.get(which)
    bands: dict[str, Any] = got if isinstance(got, dict) else {}
    keys = (cal.get("interval_keys") or {}).get("measured" if measured else "unmeasured", {})
    own = _band(bands.get(cls))
    if own is not None:
        return own, f"this device's held-out {cls} band for {what} ({keys.get(cls, '?')} keys)"
    overall = _band(bands.get("all"))
    few_keys = (cal.get("intervals_few_keys") or {}).get("measured" if measured else "unmeasured") or {}
    few = _band(few_keys.get(cls)) if isinstance(few_keys, dict) else None
    if overall is not None and few is not None:
        return _union(overall, few), (
            f"{what}: this device holds out {keys.get(cls, '?')} {cls} keys (too few for a band of their own), so "
            f"their held-out range joined with its overall band ({keys.get('all', '?')} keys)"
        )
    shipped, shipped_basis = _shipped(soc, cls)
    if overall is not None:
        return _union(overall, shipped), (
            f"{what}: this device holds out too few {cls} keys ({keys.get(cls, 0)}), so its overall band "
            f"({keys.get('all', '?')} keys) joined with the {shipped_basis}"
        )
    in_sample = _band(cal.get("in_sample_band"))
    return _union(shipped, in_sample), (
        f"{what}: the device fit has too few keys or variants to hold any out, so the {shipped_basis}, "
        "widened by the device fit's in-sample errors"
    )


def interval(t: TilingData, soc: SocProfile, predicted_us: float) -> Interval:
    """The interval ``predicted_us`` carries for the call ``t`` under ``soc`` (never none: a class or a
    profile without held-out cases takes a wider band, and the basis says so)."""
    if predicted_us <= 0:
        return Interval(0.0, 0.0, "nothing to launch")
    cls = traffic_class(traffic_bytes(t))
    cal = soc.calibration or {}
    if cal.get("device"):
        (lo, hi), basis = _device_band(t, soc, cal, cls)
    else:
        got = _profile_band(cal, cls)
        (lo, hi), basis = (got[0], f"{soc.name} profile's {got[1]}") if got else _shipped(soc, cls)
    return Interval(round(predicted_us * lo, 4), round(predicted_us * hi, 4), basis)
