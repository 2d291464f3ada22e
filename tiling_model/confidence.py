"""How far to trust a predicted time: the interval held-out measurements fell in, by traffic class.

A profile's ``calibration`` records, per traffic class (the bytes a call moves), the 10th and 90th
percentiles of measured / predicted over cases the fit did not see: leave-one-operator-out on the
shipped measurements of other operators, or folds of keys on a device's own records of bcetune's kernel
(a table tuned on a device). A prediction p then carries [p * lo, p * hi]. Narrower for a device-fitted
profile: it was cross-checked on the kernel and device it predicts.
"""

from __future__ import annotations

from tiling_model.soc import SocProfile
from tiling_model.tiling import TilingData

TRAFFIC_CLASSES = (("< 4 MB", 0.0, 4e6), ("4-100 MB", 4e6, 100e6), ("> 100 MB", 100e6, float("inf")))


def traffic_bytes(t: TilingData) -> int:
    """What a call moves element by element: every stream's elements (the classes' measure)."""
    return t.kernel.streams * t.n * t.elem_bytes


def traffic_class(nbytes: float) -> str:
    return next(name for name, lo, hi in TRAFFIC_CLASSES if lo <= nbytes < hi)


def interval(t: TilingData, soc: SocProfile, predicted_us: float) -> tuple[float, float] | None:
    """[lo, hi] microseconds the call's time is expected in (the profile's held-out 10th-90th percentile
    band of its traffic class), or None where the profile records no held-out errors."""
    bands = (soc.calibration or {}).get("intervals")
    if not isinstance(bands, dict) or predicted_us <= 0:
        return None
    band = bands.get(traffic_class(traffic_bytes(t))) or bands.get("all")
    if not (isinstance(band, list | tuple) and len(band) == 2):
        return None
    return round(predicted_us * float(band[0]), 4), round(predicted_us * float(band[1]), 4)
