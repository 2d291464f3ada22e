"""Pure-Python model of the BinaryCrossEntropyGrad host tiling: compute, check, predict.

Imports nothing else of bcetune; the kernel, tuner and service build on it.
"""

from tiling_model.cost import Prediction, predict, predict_detail
from tiling_model.dtypes import DTYPES, REDUCTIONS, UnsupportedError, check_combination, valid_combinations
from tiling_model.plan import CorePlan, core_plan
from tiling_model.soc import SocProfile, UnknownSocError, known_socs, load_soc
from tiling_model.tiling import (
    SCHEMES,
    ResolvedParams,
    TilingData,
    TilingError,
    TilingFields,
    TilingParams,
    compute_tiling,
    element_count,
    params_from_dict,
)
from tiling_model.validate import Violation, validate

__all__ = [
    "DTYPES",
    "REDUCTIONS",
    "SCHEMES",
    "CorePlan",
    "Prediction",
    "ResolvedParams",
    "SocProfile",
    "TilingData",
    "TilingError",
    "TilingFields",
    "TilingParams",
    "UnknownSocError",
    "UnsupportedError",
    "Violation",
    "check_combination",
    "compute_tiling",
    "core_plan",
    "element_count",
    "known_socs",
    "load_soc",
    "params_from_dict",
    "predict",
    "predict_detail",
    "valid_combinations",
    "validate",
]
