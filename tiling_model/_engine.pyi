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
    ) -> None: ...
    @property
    def name(self) -> str: ...
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
def pipelines(
    kinds: Kinds, tile_elems: int, buffer_num: int, kernel: Kernel, soc: Soc, hit: float
) -> tuple[
    list[tuple[tuple[float, float, float], tuple[float, float, float], float]],
    float,
]: ...
def knob_factor(soc: Soc, kernel: Kernel, block_bytes: int, buffer_num: int, tile_bytes: int, cores: int) -> float: ...
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
def tie_key(us: float) -> float: ...
