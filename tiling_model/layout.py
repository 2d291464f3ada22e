"""What the kernel keeps in UB for one variant: streams, queues and temporaries.

The UB budget, the queue limit and the cost model all read the same layout, so the kernel's
buffer plan is described in exactly one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiling_model.dtypes import DTYPE_BYTES, FLOAT_DTYPES

#: AscendC: at most 8 queue buffers carrying sync events per TPosition on A2/310B
#: (ascendc-api.md s2.5, "max buffer number in same queue position").
MAX_BUFFERS_PER_POSITION = 8
#: The seed's sum/mean kernel keeps the scalar grad in a 16-element queue.
SEED_SCALAR_QUEUE_ELEMS = 16
#: fp32 working tiles that half-precision variants use to compute in float32 (A2 has no
#: bfloat16 arithmetic; fp16 is widened too for accuracy).
HALF_TEMP_TILES = 2


@dataclass(frozen=True)
class KernelLayout:
    """Streams and UB buffers of one kernel variant under one scheme."""

    full_inputs: tuple[str, ...]  # inputs read element by element through VECIN queues
    scalar_inputs: tuple[str, ...]  # inputs read as one value
    outputs: tuple[str, ...]  # outputs written element by element through VECOUT queues
    elem_bytes: int
    scalar_queue_bytes: int  # a small VECIN queue per buffer (seed's grad scalar), else 0
    temp_bytes_per_elem: int  # TBuf bytes per tile element (fp32 temporaries)

    @property
    def vecin_queues(self) -> int:
        return len(self.full_inputs) + (1 if self.scalar_queue_bytes else 0)

    @property
    def vecout_queues(self) -> int:
        return len(self.outputs)

    def ub_bytes(self, tile_bytes: int, buffer_num: int) -> int:
        """UB bytes InitBuffer asks for (each buffer rounded up to 32 B, as TPipe does)."""
        tile_alloc = _round_up(tile_bytes, 32)
        queues = (len(self.full_inputs) + len(self.outputs)) * buffer_num * tile_alloc
        scalar = buffer_num * _round_up(self.scalar_queue_bytes, 32) if self.scalar_queue_bytes else 0
        temps = _round_up(self.temp_bytes_per_elem * (tile_bytes // self.elem_bytes), 32)
        return queues + scalar + temps

    def max_tile_bytes(self, ub_budget: int, buffer_num: int) -> int:
        """Largest 32-B multiple tile whose layout fits in ``ub_budget`` (0 if none)."""
        scalar = buffer_num * _round_up(self.scalar_queue_bytes, 32) if self.scalar_queue_bytes else 0
        per_tile_byte = (len(self.full_inputs) + len(self.outputs)) * buffer_num + (
            self.temp_bytes_per_elem / self.elem_bytes
        )
        tile = int((ub_budget - scalar) / per_tile_byte) // 32 * 32
        while tile > 0 and self.ub_bytes(tile, buffer_num) > ub_budget:
            tile -= 32
        return max(tile, 0)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def kernel_layout(dtype: str, reduction: str, weight: bool, scheme: str) -> KernelLayout:
    """The buffer plan of the kernel that runs a tiling of this scheme.

    ``seed``: the requirement's kernel: four VECIN queues and one VECOUT queue of full tiles
    (grad becomes a 16-element queue for sum/mean; weight is always read), no temporaries.
    ``exact``: bcetune's kernel: absent inputs are not read, a scalar grad is read once with
    no queue, and half-precision types compute in two fp32 temporaries.
    """
    elem = DTYPE_BYTES[dtype]
    if scheme == "seed":
        full = ("grad", "logits", "labels", "weight") if reduction == "none" else ("logits", "labels", "weight")
        scalar = () if reduction == "none" else ("grad",)
        scalar_q = 0 if reduction == "none" else SEED_SCALAR_QUEUE_ELEMS * elem
        return KernelLayout(full, scalar, ("z",), elem, scalar_q, 0)
    full_list = ["logits", "labels"]
    if reduction == "none":
        full_list.insert(0, "grad")
    if weight:
        full_list.append("weight")
    scalar = () if reduction == "none" else ("grad",)
    temps = HALF_TEMP_TILES * 4 if dtype in FLOAT_DTYPES and elem == 2 else 0
    return KernelLayout(tuple(full_list), scalar, ("z",), elem, 0, temps)
