"""Argument parsing shared by the tiling_model commands."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeAlias

from tiling_model.model_types import L2_STATES, L2State
from tiling_model.variant import MODES, POS_WEIGHT_FORMS, WEIGHT_FORMS, WRT_FORMS, Broadcast, weight_spec


class Parser(argparse.ArgumentParser):
    """argparse that fails with one line (and exit 2) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


#: The subcommand registry every command module adds its parser to.
SubParsers: TypeAlias = "argparse._SubParsersAction[Parser]"


def csv_of(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated list, each item one of ``choices`` (at least one)."""

    def parse(text: str) -> list[str]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(choices)}")
        return items

    return parse


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def parse_shape(text: str) -> list[int]:
    """``1024,1024``, ``1024x1024``, ``[1024, 1024]`` or ``1024 1024``: what the explorer accepts."""
    t = text.strip().removeprefix("[").removesuffix("]").strip()
    if t == "":
        return []
    try:
        dims = [int(x) for x in re.split(r"[,x\s]+", t)]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"shape must be integers separated by ',' or 'x' (1024,1024 or 1024x1024), got {text!r}"
        ) from None
    return dims


def parse_weight(text: str) -> str:
    """true / false (full / none) or a broadcast form."""
    t = text.lower()
    alias = {"1": "full", "true": "full", "yes": "full", "0": "none", "false": "none", "no": "none"}
    if t in alias or t in WEIGHT_FORMS:
        return alias.get(t, t)
    raise argparse.ArgumentTypeError(f"expected true, false or one of {', '.join(WEIGHT_FORMS)}, got {text!r}")


def weight_of(a: argparse.Namespace) -> Broadcast:
    """The weight's form and period: from --weight-shape (as PyTorch broadcasts it), else --weight with the
    period of a [C] (last_dim) or [..., 1] (rows) weight: the last dim."""
    shape = getattr(a, "weight_shape", None)
    return weight_spec(a.weight if shape is None else shape, a.shape)


def variant_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--weight", type=parse_weight, default="full",
        help="true / false, or a broadcast form: full, none, last_dim ([C]), rows ([..., 1]), scalar (default true)",
    )  # fmt: skip
    p.add_argument(
        "--weight-shape", type=parse_shape, default=None,
        help="the weight's shape D1,D2,.. (any shape broadcastable to --shape; overrides --weight); '' for []",
    )  # fmt: skip
    p.add_argument("--pos-weight", default="none", choices=POS_WEIGHT_FORMS, help="pos_weight form")
    p.add_argument("--wrt", default="logit", choices=WRT_FORMS, help="gradient w.r.t. the logit or p")
    p.add_argument(
        "--mode", default="grad", choices=MODES,
        help="the kernel: grad (BinaryCrossEntropyGrad) or fused (BCEWithLogits' loss and gradient in one pass)",
    )  # fmt: skip


def knob_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--block-bytes", type=int)
    p.add_argument("--buffer-num", type=int)
    p.add_argument("--tile-bytes", type=int)
    p.add_argument("--core-num", type=int)


L2_CHOICES = tuple(L2_STATES)
L2_HELP = (
    "L2 state of the prediction: cold (default, what bcetune tunes for: in training the inputs were written "
    "long before the backward pass; all HBM), steady (repeated launches, what a profiler that repeats a launch "
    "reports; the SoC profile's fitted curve) or warm (all that fits in L2 hits)"
)


def l2_state(name: str) -> L2State:
    """The simulator's L2 state for a ``--l2`` choice."""
    return L2_STATES[name]
