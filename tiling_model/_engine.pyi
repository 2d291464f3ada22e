"""Types of the compiled engine (tiling_model/_engine.cpp): tests/tiling_model/test_engine.py checks the
module has exactly these names."""

import enum
from collections.abc import Sequence

import numpy as np

WARMUP: int
PERIOD: int
REPEAT_BYTES: int
GM_ALIGN_BYTES: int
TILE_STEP_BYTES: int
BOUND_SLACK: float
PRUNE_MARGIN_US: float
PRUNE_RELATIVE: float
TIE_SCALE: float
DUP_CYCLES: float
MAX_CORES: int
MAX_BLOCKS: int
MAX_TILES: int
BLOCK_CLASSES: int
BUFFER_CLASSES: int
ALIGN_CLASSES: int
CORE_CLASSES: int
MAX_BUFFERS_PER_POSITION: int
SEED_SCALAR_QUEUE_ELEMS: int
SEED_BLOCK_BYTES: int
LAST_DIM_STAGE_ELEMS: int
LAST_DIM_SUPER_ELEMS: int
INPUT_BITS: tuple[tuple[str, int], ...]

class BufferPlan:
    def __init__(
        self,
        *,
        full_inputs: int,
        outputs: int,
        elem_bytes: int,
        temp_bytes_per_elem: int,
        scalar_queue_bytes: int,
        row_bytes: int,
        temp_buffers: int,
        sum_bytes: int = 0,
    ) -> None: ...
    @property
    def full_inputs(self) -> int: ...
    @property
    def outputs(self) -> int: ...
    @property
    def elem_bytes(self) -> int: ...
    @property
    def temp_bytes_per_elem(self) -> int: ...
    @property
    def scalar_queue_bytes(self) -> int: ...
    @property
    def row_bytes(self) -> int: ...
    @property
    def temp_buffers(self) -> int: ...
    @property
    def input_mask(self) -> int: ...
    @property
    def sum_bytes(self) -> int: ...
    @property
    def sum_buffer(self) -> int: ...
    def queue_bytes(self, tile_bytes: int) -> int: ...
    def temp_bytes(self, tile_bytes: int) -> int: ...
    @property
    def temp_count(self) -> int: ...
    @property
    def scalar_queue_buffer(self) -> int: ...
    @property
    def row_buffer(self) -> int: ...
    def ub_bytes(self, tile_bytes: int, buffer_num: int) -> int: ...
    def max_tile_bytes(self, budget: int, buffer_num: int) -> int: ...

def resolve_knobs(
    plan: BufferPlan,
    ub_bytes: int,
    ub_reserve_bytes: int,
    aiv_cores: int,
    scheme: str,
    block_bytes: int,
    buffer_num: int,
    tile_bytes: int,
    core_num: int,
) -> tuple[int, int, int, int]: ...
def tiling_key(
    dtype: int, reduction: int, weight: int, pos_weight: int, wrt: int, mode: int, buffer_num: int
) -> int: ...
def workspace_bytes(
    fields: Sequence[int], block_dim: int, elem_bytes: int, pos_weight_last_dim: bool, weight_last_dim: bool
) -> int: ...
def bce_grad_plan(
    dtype: int, reduction: int, weight: int, pos_weight: int, wrt: int, mode: int, scheme: str
) -> BufferPlan: ...

class Soc:
    def __init__(
        self,
        *,
        name: str,
        aiv_cores: int,
        launch_us: float,
        core_start_us: float,
        vector_start_cycles: float,
        vector_mhz: float,
        misaligned_factor: float,
        hbm_gbps: float,
        l2_gbps: float,
        hbm_peak_gbps: float,
        l2_peak_gbps: float,
        l2_half_bytes: float,
        l2_falloff: float,
        l2_bytes: float,
        mte2_curve_kib_us: list[tuple[float, float]],
        mte3_curve_kib_us: list[tuple[float, float]],
        block_factors: list[float] = ...,
        buffer_factors: list[float] = ...,
        align_factors: list[float] = ...,
        core_factors: list[float] = ...,
        residual_factors: list[float] = ...,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def learned(self) -> bool: ...
    @property
    def aiv_cores(self) -> int: ...
    @property
    def mte2_tail(self) -> tuple[float, float]: ...
    @property
    def mte3_tail(self) -> tuple[float, float]: ...

class Kernel:
    def __init__(
        self,
        *,
        elem_bytes: int,
        full_inputs: int,
        outputs: int,
        scalar_inputs: int,
        row_bytes: int,
        ops: list[tuple[float, float]],
        workspace_inputs: int,
        row_inputs: int,
        row_len: int,
        row_expand_bytes: int,
        scalar_queue_bytes: int,
        corrected: bool = ...,
    ) -> None: ...
    @property
    def elem_bytes(self) -> int: ...

class Kinds:
    def __init__(
        self,
        *,
        counts: tuple[int, int, int],
        elems: tuple[int, int, int],
        tiles: tuple[int, int, int],
        tail: tuple[int, int, int],
        aligned: tuple[bool, bool, bool],
        cores: int,
    ) -> None: ...
    @property
    def counts(self) -> tuple[int, int, int]: ...
    @property
    def elems(self) -> tuple[int, int, int]: ...
    @property
    def tiles(self) -> tuple[int, int, int]: ...
    @property
    def tail(self) -> tuple[int, int, int]: ...
    @property
    def aligned(self) -> tuple[bool, bool, bool]: ...
    @property
    def cores(self) -> int: ...

class L2State:
    class Kind(enum.Enum):
        STEADY = 0
        COLD = 1
        WARM = 2
        CURVE = 3

    def __init__(
        self, kind: L2State.Kind, *, half_bytes: float = 0.0, falloff: float = 0.0, l2_bytes: float = 0.0
    ) -> None: ...
    @property
    def kind(self) -> L2State.Kind: ...

class Prediction:
    @property
    def us(self) -> float: ...
    @property
    def lower(self) -> float: ...
    @property
    def certain(self) -> bool: ...
    @property
    def core_us(self) -> float: ...
    @property
    def bandwidth_us(self) -> float: ...
    @property
    def busy_us(self) -> tuple[float, float, float]: ...
    @property
    def bytes_moved(self) -> float: ...
    @property
    def roofline_us(self) -> float: ...

class RefitChoice:
    @property
    def block_bytes(self) -> int: ...
    @property
    def tile_bytes(self) -> int: ...
    @property
    def core_num(self) -> int: ...
    @property
    def us(self) -> float: ...

def l2_hit(kernel: Kernel, soc: Soc, n: int, l2: L2State) -> float: ...
def evaluate(
    kinds: Kinds, tile_elems: int, buffer_num: int, kernel: Kernel, soc: Soc, hit: float, exact: bool = True
) -> Prediction: ...
def score(
    n: int,
    block_bytes: np.ndarray,
    buffer_num: np.ndarray,
    tile_bytes: np.ndarray,
    core_num: np.ndarray,
    kernel: Kernel,
    soc: Soc,
    hit: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...
def score_groups(
    ns: np.ndarray,
    kernels: list[Kernel],
    states: list[L2State],
    starts: np.ndarray,
    block_bytes: np.ndarray,
    buffer_num: np.ndarray,
    tile_bytes: np.ndarray,
    core_num: np.ndarray,
    soc: Soc,
) -> np.ndarray: ...
def bound(
    n: int,
    block_bytes: np.ndarray,
    buffer_num: np.ndarray,
    tile_bytes: np.ndarray,
    core_num: np.ndarray,
    kernel: Kernel,
    soc: Soc,
    hit: float,
) -> tuple[np.ndarray, np.ndarray]: ...
def refit(
    n: int,
    blocks: list[int],
    buffer_num: int,
    tile_top: int,
    max_cores: int,
    kernel: Kernel,
    soc: Soc,
    *,
    seed_block: int = 0,
    seed_tile: int = 0,
    seed_cores: int = 0,
) -> RefitChoice: ...
def refit_across(
    n: int,
    blocks: list[int],
    slices: list[tuple[int, int]],
    max_cores: int,
    kernel: Kernel,
    soc: Soc,
    *,
    seed_block: int = 0,
    seed_tile: int = 0,
    seed_cores: int = 0,
) -> tuple[int, int, int, int]: ...
def pipelines(
    kinds: Kinds, tile_elems: int, buffer_num: int, kernel: Kernel, soc: Soc, hit: float
) -> tuple[
    list[tuple[tuple[float, float, float], tuple[float, float, float], float]],
    float,
]: ...
def knob_factor(soc: Soc, kernel: Kernel, block_bytes: int, buffer_num: int, tile_bytes: int, cores: int) -> float: ...
def refit_stats(
    n: int, blocks: list[int], buffer_num: int, tile_top: int, max_cores: int, kernel: Kernel, soc: Soc
) -> dict[str, int]: ...
def config_factor(
    soc: Soc, kernel: Kernel, kinds: Kinds, block_bytes: int, buffer_num: int, tile_bytes: int
) -> float: ...
def tiling_fields(
    scheme: str,
    n: int,
    elem_bytes: int,
    block_bytes: int,
    tile_bytes: int,
    core_num: int,
    reduction: int,
    classes: int,
    weight_period: int,
    tiling_key: int,
) -> tuple[list[int], int]: ...
def core_runs(fields: Sequence[int], block_dim: int) -> list[tuple[int, int, int, int, int, int]]: ...
def kinds_of_struct(fields: Sequence[int], block_dim: int, elem_bytes: int) -> Kinds: ...
def kinds_of(n: int, elem_bytes: int, block_bytes: int, tile_bytes: int, core_num: int) -> Kinds: ...
def vecin_queues(full_inputs: int, scalar_queue_bytes: int) -> int: ...
def queue_limit_allows(vecin_queues: int, vecout_queues: int, buffer_num: int) -> bool: ...
def best_index(
    predicted_us: np.ndarray,
    block_bytes: np.ndarray,
    buffer_num: np.ndarray,
    tile_bytes: np.ndarray,
    core_num: np.ndarray,
) -> int: ...
def space_cores(n: int, elem_bytes: int, block_bytes: int, max_cores: int) -> int: ...
def tie_key(us: float) -> float: ...

RESIDUAL_FEATURES: list[tuple[str, int]]
RESIDUAL_WIDTH: int

def residual_levels(
    n: int,
    elem_bytes: int,
    block_bytes: np.ndarray,
    buffer_num: np.ndarray,
    tile_bytes: np.ndarray,
    core_num: np.ndarray,
) -> np.ndarray: ...
