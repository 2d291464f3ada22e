"""The model of the BinaryCrossEntropyGrad host tiling: compute, check, predict.

The cost model's engine is C++ (``include/bce_grad_cost_model.h`` and its re-fit ``bce_grad_refit.h``, bound as
``_engine``; the CANN build compiles the same headers); the rest is Python. Imports and includes nothing else of
bcetune; its command line, calibration, plots and explanations (``model_tools``), the kernel, the tuner and the
service build on it (tests/project/test_layers.py), and importing it loads no plotting, fitting or tuning library.
"""

from tiling_model.cost import Prediction, predict, predict_detail
from tiling_model.dtypes import DTYPES, REDUCTIONS, Dtype, Reduction, UnsupportedError, valid_combinations
from tiling_model.errors import (
    BadRequest,
    BcetuneError,
    BuildError,
    InvalidTiling,
    KernelFault,
    MeasurementError,
    TableError,
)
from tiling_model.kernels import SCHEMES, Scheme
from tiling_model.plan import CorePlan, core_plan
from tiling_model.soc import SocProfile, UnknownSocError, known_socs, load_soc
from tiling_model.tiling import (
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
from tiling_model.variant import POS_WEIGHT_FORMS, WRT_FORMS, PosWeightForm, Variant, Wrt, every_variant

__all__ = [
    "DTYPES",
    "POS_WEIGHT_FORMS",
    "REDUCTIONS",
    "SCHEMES",
    "WRT_FORMS",
    "BadRequest",
    "BcetuneError",
    "BuildError",
    "CorePlan",
    "Dtype",
    "InvalidTiling",
    "KernelFault",
    "MeasurementError",
    "PosWeightForm",
    "Prediction",
    "Reduction",
    "ResolvedParams",
    "Scheme",
    "SocProfile",
    "TableError",
    "TilingData",
    "TilingError",
    "TilingFields",
    "TilingParams",
    "UnknownSocError",
    "UnsupportedError",
    "Variant",
    "Violation",
    "Wrt",
    "compute_tiling",
    "core_plan",
    "element_count",
    "every_variant",
    "known_socs",
    "load_soc",
    "params_from_dict",
    "predict",
    "predict_detail",
    "valid_combinations",
    "validate",
]
