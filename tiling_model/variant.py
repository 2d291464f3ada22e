"""What one BinaryCrossEntropyGrad call computes, apart from its size: the variant.

One frozen, hashable value, checked once when it is made, and passed whole wherever the same five
facts used to travel as loose arguments (tilings, table keys, studies, service queries). It mirrors
the C++ ``bce_grad::Variant`` of ``kernel/op_host/bce_grad_tiling_core.h``; the C++ one also carries
the class count C of a last-dim pos_weight, which here comes from the shape (the last dim).

Names: the requirement calls the probabilities ``logits`` (its formula is ``w*g*(p - y)``); the
kernel's parameters keep that name at the CANN boundary, bcetune's own API says ``p``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from tiling_model.dtypes import FLOAT_DTYPES, Dtype, Reduction, UnsupportedError, check_combination

PosWeightForm = Literal["none", "full", "last_dim"]
Wrt = Literal["logit", "probability"]
#: pos_weight absent, of the input's shape, or [C] along the last dim.
POS_WEIGHT_FORMS: tuple[PosWeightForm, ...] = get_args(PosWeightForm)
#: The gradient with respect to the logit x (p = sigmoid(x): the requirement's formula) or to p.
WRT_FORMS: tuple[Wrt, ...] = get_args(Wrt)


@dataclass(frozen=True)
class Variant:
    """dtype, reduction, weight present, pos_weight form, wrt: checked on construction."""

    dtype: Dtype
    reduction: Reduction = "none"
    weight: bool = True
    pos_weight: PosWeightForm = "none"
    wrt: Wrt = "logit"

    def __post_init__(self) -> None:
        check_combination(self.dtype, self.reduction)
        if not isinstance(self.weight, bool):
            raise UnsupportedError(f"weight must be true or false, got {self.weight!r}")
        if self.pos_weight not in POS_WEIGHT_FORMS:
            raise UnsupportedError(f"unknown pos_weight form {self.pos_weight!r}; known: {', '.join(POS_WEIGHT_FORMS)}")
        if self.wrt not in WRT_FORMS:
            raise UnsupportedError(f"unknown wrt {self.wrt!r}; known: {', '.join(WRT_FORMS)}")
        if self.wrt == "probability" and self.dtype not in FLOAT_DTYPES:
            raise UnsupportedError("wrt='probability' needs a float dtype (A2 has no integer Div)")
        if self.pos_weight != "none" and self.wrt == "probability":
            raise UnsupportedError(
                "pos_weight applies to wrt='logit' only (the probability gradient has no pos_weight term)"
            )

    def label(self) -> str:
        """Short human form, e.g. ``float16/mean/w/logit/pw_none``."""
        w = "w" if self.weight else "nw"
        return f"{self.dtype}/{self.reduction}/{w}/{self.wrt}/pw_{self.pos_weight}"


def every_variant() -> list[Variant]:
    """Every variant the kernel computes (what a full sweep tunes)."""
    from tiling_model.dtypes import valid_combinations

    out = []
    for dtype, reduction in valid_combinations():
        for wrt in WRT_FORMS:
            for pw in POS_WEIGHT_FORMS:
                for weight in (True, False):
                    try:
                        out.append(Variant(dtype, reduction, weight, pw, wrt))
                    except UnsupportedError:
                        continue
    return out
