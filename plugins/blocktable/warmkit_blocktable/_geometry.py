"""``SlotMappingGeometry``: the constants that shape one slot mapping, and its math.

The geometry is the six numbers ``bs, K, B, W, R, I`` of
``docs/blocktable.md``. It is checked once, when it is built, and then
carries the slot math that the torch reference, the block table's input
validation and the benchmarks' plain-torch baseline all share; the Triton
kernel (``_jit.py``) is the one other implementation, and the tests hold the
two against each other.
"""

from __future__ import annotations

from typing import NamedTuple

import attrs
import torch

__all__ = ["PAD_SLOT_ID", "SlotMappingGeometry", "TokenColumns"]

#: The value written for tokens this rank does not own and for padding.
PAD_SLOT_ID = -1


class TokenColumns(NamedTuple):
    """Where each token lands, before the table is read (int64 / bool tensors)."""

    #: whether this rank owns the token
    owned: torch.Tensor
    #: offset inside this rank's allocation block, ``0 <= offset < K``
    offset: torch.Tensor
    #: column of the token's kernel block in its request's row
    column: torch.Tensor


def _floor_div(a: torch.Tensor, b: int) -> torch.Tensor:
    return torch.div(a, b, rounding_mode="floor")


@attrs.frozen(kw_only=True)
class SlotMappingGeometry:
    """The slot-mapping constants of one KV-cache group (see ``docs/blocktable.md``).

    The field names, order and defaults are those of
    :func:`~warmkit_blocktable.reference_slot_mapping`, so
    ``reference_slot_mapping(..., **attrs.asdict(geometry))`` computes with it.

    Args:
        block_size: kernel block size ``bs`` (tokens per kernel block).
        kv_cache_block_size: allocation block size ``K = B * bs``.
        blocks_per_kv_block: kernel blocks per allocation block ``B``.
        dcp_world_size: decode-context-parallel world size ``W``.
        dcp_rank: this rank ``R``, ``0 <= R < W``.
        cp_kv_cache_interleave_size: tokens per rank per round-robin turn
            ``I``; must divide ``K``.

    Raises:
        TypeError: ``dcp_rank`` is not an int.
        ValueError: a size that is not a positive int, ``K != B * bs``, a rank
            outside ``[0, W)``, or an ``I`` that does not divide ``K``.
    """

    block_size: int
    kv_cache_block_size: int
    blocks_per_kv_block: int = 1
    dcp_world_size: int = 1
    dcp_rank: int = 0
    cp_kv_cache_interleave_size: int = 1

    def __attrs_post_init__(self) -> None:
        for name in (
            "block_size",
            "kv_cache_block_size",
            "blocks_per_kv_block",
            "dcp_world_size",
            "cp_kv_cache_interleave_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        rank = self.dcp_rank
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise TypeError(f"dcp_rank must be an int, got {rank!r}")
        if self.kv_cache_block_size != self.blocks_per_kv_block * self.block_size:
            raise ValueError(
                f"kv_cache_block_size ({self.kv_cache_block_size}) must equal "
                f"blocks_per_kv_block ({self.blocks_per_kv_block}) * block_size ({self.block_size})"
            )
        if not 0 <= rank < self.dcp_world_size:
            raise ValueError(
                f"DCP rank {rank} is out of range for DCP world size {self.dcp_world_size}: "
                "need 0 <= rank < world size"
            )
        if self.kv_cache_block_size % self.cp_kv_cache_interleave_size != 0:
            raise ValueError(
                f"cp_kv_cache_interleave_size ({self.cp_kv_cache_interleave_size}) must divide "
                f"the allocation block size ({self.kv_cache_block_size})"
            )

    def kernel_space(self, block_table_stride: int) -> dict[str, int]:
        """The ``dispatch`` inputs of ``ComputeSlotMappingKernel`` for a table of this stride.

        These are also the keyword arguments of the kernel's ``__call__``
        besides the step's tensors and counts, under the kernel's names.

        Args:
            block_table_stride: the table's row stride (its row width).

        Returns:
            Plain ints, keyed by the kernel's parameter names.
        """
        return {
            "block_table_stride": block_table_stride,
            "block_size": self.block_size,
            "kv_cache_block_size": self.kv_cache_block_size,
            "blocks_per_kv_block": self.blocks_per_kv_block,
            "total_cp_world_size": self.dcp_world_size,
            "total_cp_rank": self.dcp_rank,
            "cp_kv_cache_interleave_size": self.cp_kv_cache_interleave_size,
        }

    def columns(self, positions: torch.Tensor) -> TokenColumns:
        """Ownership, rank-local offset and row column of each position (int64 math).

        With ``V = K * W``: ``o = p % V``, ``owned = (o // I) % W == R``,
        ``offset = (o // (W * I)) * I + o % I`` and
        ``column = (p // V) * B + offset // bs``. No checks: positions are
        assumed non-negative.

        Args:
            positions: int ``[num_tokens]`` positions.
        """
        w, i = self.dcp_world_size, self.cp_kv_cache_interleave_size
        virtual = self.kv_cache_block_size * w
        pos = positions.to(torch.int64)
        vb = _floor_div(pos, virtual)
        o = pos - vb * virtual
        owned = torch.remainder(_floor_div(o, i), w) == self.dcp_rank
        offset = _floor_div(o, w * i) * i + torch.remainder(o, i)
        column = vb * self.blocks_per_kv_block + _floor_div(offset, self.block_size)
        return TokenColumns(owned, offset, column)

    def slots(
        self,
        block_table: torch.Tensor,
        requests: torch.Tensor,
        columns: TokenColumns,
        pad_id: int = PAD_SLOT_ID,
    ) -> torch.Tensor:
        """The int64 slot of each token: ``block_table[r, column] * bs + offset % bs``.

        The table is read only where the token is owned (column 0 elsewhere,
        then masked to ``pad_id``), as the kernel does. No checks: owned
        columns are assumed inside the row.

        Args:
            block_table: int ``[rows, stride]`` kernel-block table.
            requests: the request (row) of each token.
            columns: :meth:`columns` of the tokens' positions.
            pad_id: value for tokens this rank does not own.
        """
        owned, offset, column = columns
        safe = torch.where(owned, column, torch.zeros_like(column))
        block_id = block_table[requests, safe].to(torch.int64)
        slot = block_id * self.block_size + torch.remainder(offset, self.block_size)
        return torch.where(owned, slot, torch.full_like(slot, pad_id))

    def locate(
        self, query_start_loc: torch.Tensor, positions: torch.Tensor, row_width: int
    ) -> tuple[torch.Tensor, TokenColumns]:
        """Check one step's inputs and place every token: its request and :meth:`columns`.

        Reads ``query_start_loc`` back to the host (it synchronizes).

        Args:
            query_start_loc: ``[num_reqs + 1]`` cumulative token offsets.
            positions: int ``[num_tokens]`` positions.
            row_width: columns per row; an owned token may not need one beyond.

        Returns:
            The request of each token (int64, on ``positions``' device) and
            the tokens' columns.

        Raises:
            ValueError: ``query_start_loc`` not starting at 0, not monotonic
                or not ending at ``num_tokens``; a negative position; an owned
                position whose column is ``>= row_width``.
        """
        device = positions.device
        num_tokens = positions.shape[0]
        num_reqs = query_start_loc.shape[0] - 1
        qsl = query_start_loc.to(device=device, dtype=torch.int64)
        span = f"query_start_loc must span [0, num_tokens={num_tokens}]"
        if int(qsl[0]) != 0:
            raise ValueError(f"{span}: query_start_loc[0] must be 0, got {int(qsl[0])}")
        counts = qsl[1:] - qsl[:-1]
        bad = torch.nonzero(counts < 0)
        if bad.numel():
            r = int(bad[0, 0])
            raise ValueError(
                f"query_start_loc is not monotonic at request {r}: query_start_loc[{r}] = "
                f"{int(qsl[r])} > query_start_loc[{r + 1}] = {int(qsl[r + 1])}"
            )
        if int(qsl[-1]) != num_tokens:
            raise ValueError(
                f"{span}: query_start_loc[num_reqs={num_reqs}] = {int(qsl[-1])} but there are "
                f"{num_tokens} tokens"
            )
        negative = torch.nonzero(positions < 0)
        if negative.numel():
            t = int(negative[0, 0])
            raise ValueError(f"token {t} has a negative position {int(positions[t])}")
        requests = torch.repeat_interleave(torch.arange(num_reqs, device=device), counts)
        columns = self.columns(positions)
        beyond = torch.nonzero(columns.owned & (columns.column >= row_width))
        if beyond.numel():
            t = int(beyond[0, 0])
            raise ValueError(
                f"token {t} (request {int(requests[t])}, position {int(positions[t])}) needs "
                f"block column {int(columns.column[t])}, beyond the row width {row_width}"
            )
        return requests, columns
