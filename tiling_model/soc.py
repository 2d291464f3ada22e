"""SoC profiles: the sourced hardware facts the tiling and the cost model depend on.

Profiles are data (``socs/<name>.json``), each number with a one-line source note, so a
user can audit or refit them without touching code.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from tiling_model.correction import IDENTITY, KnobCorrection
from tiling_model.errors import BadRequest
from tiling_model.residual import NONE, Residual


class UnknownSocError(BadRequest):
    """Raised for a SoC name that has no profile; the message lists the known ones."""


@dataclass(frozen=True)
class SocProfile:
    name: str
    family: str
    aiv_cores: int
    ub_bytes: int
    ub_reserve_bytes: int
    clock_mhz: float
    hbm_gbps: float  # effective aggregate bandwidth the simulator streams at (fitted where measured)
    hbm_peak_gbps: float  # physical limit: what the roofline divides by
    l2_bytes: int
    l2_gbps: float
    l2_peak_gbps: float
    memory_bytes: int
    mte2_curve_kib_us: tuple[tuple[float, float], ...]
    mte3_curve_kib_us: tuple[tuple[float, float], ...]
    vector_start_cycles: float
    launch_us: float
    core_start_us: float
    misaligned_bw_factor: float
    # A factor on MSKPP's cycles per repeat (issue rates of one instruction; a chain of dependent
    # instructions may retire slower): 1 in the shipped profiles, fittable on your own measurements
    # (model_tools.calibrate.OPTIONAL_PARAMS says why it is not fitted by default).
    vector_cycle_scale: float
    # The steady state of repeated launches: the share of a launch's traffic that hits L2 is
    # 1 / (1 + (footprint / l2_half_bytes) ** l2_falloff), at most the share the L2 can hold,
    # min(1, l2_bytes / footprint) (model_types.SteadyL2).
    l2_half_bytes: float
    l2_falloff: float
    sources: dict[str, str] = field(compare=False, hash=False)
    calibration: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    # What a device's measurements of bcetune's kernel say beyond the hardware parameters (identity in
    # the shipped profiles; fitted by a sweep on a device: tiling_model.correction).
    knob_correction: KnobCorrection = IDENTITY
    # And what they say beyond the knobs, by classes of the realised tiling (none in the shipped profiles;
    # fitted by a sweep on a device, in the knob correction's place where it ranks held-out keys better:
    # tiling_model.residual).
    residual: Residual = NONE
    profile_hash: str = field(default="", compare=False)

    @property
    def vector_mhz(self) -> float:
        """MSKPP cycles retired per microsecond: the clock over the fitted chain factor."""
        return self.clock_mhz / self.vector_cycle_scale

    @property
    def ub_usable_bytes(self) -> int:
        """UB a kernel may allocate with InitBuffer: platform size less the reserve."""
        return self.ub_bytes - self.ub_reserve_bytes


PROFILES_ENV = "BCETUNE_PROFILES"


def profile_dir() -> resources.abc.Traversable | Path:
    """Shipped profiles, or the directory in $BCETUNE_PROFILES (e.g. profiles refitted on your NPU)."""
    override = os.environ.get(PROFILES_ENV)
    if override:
        return Path(override)
    return resources.files("tiling_model") / "socs"


@cache
def known_socs() -> tuple[str, ...]:
    """Names of all SoCs with a shipped profile, sorted."""
    return tuple(sorted(p.name[:-5] for p in profile_dir().iterdir() if p.name.endswith(".json")))


@cache
def load_soc(name: str) -> SocProfile:
    """Load one profile by SoC name (e.g. ``Ascend910B2``)."""
    if name not in known_socs():
        raise UnknownSocError(f"unknown SoC {name!r}; known: {', '.join(known_socs())}")
    return profile_from_json(json.loads((profile_dir() / f"{name}.json").read_bytes()))


def profile_from_json(doc: dict[str, Any]) -> SocProfile:
    """A profile from its JSON document (a profile file, or the one a device-tuned table carries); a
    document that is not one is a BadRequest naming what is wrong."""
    raw = dict(doc)
    raw.pop("$comment", None)
    try:
        raw["mte2_curve_kib_us"] = tuple(tuple(p) for p in raw["mte2_curve_kib_us"])
        raw["mte3_curve_kib_us"] = tuple(tuple(p) for p in raw["mte3_curve_kib_us"])
        if "knob_correction" in raw:
            raw["knob_correction"] = KnobCorrection.from_json(raw["knob_correction"])
        if "residual" in raw:
            raw["residual"] = Residual.from_json(raw["residual"])
        # The hash covers what predictions depend on, not the source notes or calibration residuals.
        model = {k: v for k, v in doc.items() if k not in ("sources", "calibration", "$comment")}
        raw["profile_hash"] = hashlib.sha256(json.dumps(model, sort_keys=True).encode()).hexdigest()[:16]
        return SocProfile(**raw)
    except (KeyError, TypeError, ValueError) as e:
        raise BadRequest(f"not a SoC profile: {type(e).__name__}: {e}") from None


def profile_to_json(profile: SocProfile) -> dict[str, Any]:
    """The profile as its JSON file holds it (without the derived hash): a document of its own (its dicts
    copied), so a caller that edits it (a device table's sources) leaves the profile, and the cached shipped
    one it came from, as they were."""
    d = {f: copy.deepcopy(getattr(profile, f)) for f in SocProfile.__dataclass_fields__ if f != "profile_hash"}
    d["mte2_curve_kib_us"] = [list(p) for p in profile.mte2_curve_kib_us]
    d["mte3_curve_kib_us"] = [list(p) for p in profile.mte3_curve_kib_us]
    if d["calibration"] is None:
        del d["calibration"]
    if profile.knob_correction.identity:
        del d["knob_correction"]
    else:
        d["knob_correction"] = profile.knob_correction.to_json()
    if profile.residual.identity:
        del d["residual"]
    else:
        d["residual"] = profile.residual.to_json()
    return d


def rehashed(profile: SocProfile) -> SocProfile:
    """``profile`` with the hash of what it now holds (a profile edited with ``dataclasses.replace``, as a
    fit makes one, keeps its parent's): the hash its JSON document would get."""
    return profile_from_json(profile_to_json(profile))
