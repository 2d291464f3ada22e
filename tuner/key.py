"""What one Optuna study tunes: a SoC, a variant and a size. A leaf module: the study, the records
and the sweep all name keys without importing each other."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tiling_model import Variant


@dataclass(frozen=True)
class StudyKey:
    soc: str
    variant: Variant
    size: int

    def study_name(self, backend: str) -> str:
        v = self.variant
        w = {"full": "w", "none": "nw"}.get(v.weight, f"w_{v.weight}")
        kernel = "bce_grad" if v.mode == "grad" else "bce_with_logits_fused"  # grad keys spelled as they were
        return f"{kernel}/{self.soc}/{v.dtype}/{v.reduction}/{w}/{v.wrt}/pw_{v.pos_weight}/n{self.size}/{backend}"

    def seed(self) -> int:
        """A fixed sampler seed per key, so the same sweep gives the same table. Derived from the
        key's text as it was spelled when the shipped tables were swept (do not change it: the
        tables would no longer reproduce)."""
        v = self.variant
        weight = {"full": True, "none": False}.get(v.weight, v.weight)  # spelled as the boolean it was
        text = (
            f"StudyKey(soc={self.soc!r}, dtype={v.dtype!r}, reduction={v.reduction!r}, weight={weight!r}, "
            f"size={self.size!r}, pos_weight={v.pos_weight!r}, wrt={v.wrt!r}"
            + (f", mode={v.mode!r})" if v.mode != "grad" else ")")
        )
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")

    def label(self) -> str:
        return f"{self.variant.label()}/n={self.size}"
