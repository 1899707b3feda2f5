"""Block tables: per-request rows of KV-cache block ids, and their slot mapping.

A :class:`BlockTable` owns an int32 ``[max_num_reqs, row_width]`` table on the
device, a CPU mirror (pinned when the device is CUDA) that the row methods
edit, and an int64 ``slot_mapping`` buffer of ``max_num_batched_tokens``.
``commit(num_reqs)`` copies the edited rows to the device;
``compute_slot_mapping`` fills the buffer for one step.

Which implementation computes the slot mapping is explicit
(:attr:`BlockTable.implementation`): the warmkit-managed Triton kernel
(:class:`~warmkit_blocktable.ComputeSlotMappingKernel`) on CUDA devices, and
the vectorized torch reference (:func:`~warmkit_blocktable.reference_slot_mapping`)
everywhere else, since Triton kernels do not run on a CPU. Both compute the
same numbers (tests check it).
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np
import torch

import warmkit

from ._jit import compute_slot_mapping_kernel
from ._kernel import ComputeSlotMappingKernel, get_kernel
from ._reference import PAD_SLOT_ID, check_geometry, reference_slot_mapping

__all__ = ["BlockTable", "MultiGroupBlockTable", "SlotMappingMode"]

logger = logging.getLogger(__name__)

Implementation = Literal["auto", "triton", "reference"]

_INT32_MAX = 2**31 - 1


class SlotMappingMode(enum.Enum):
    """What a KV-cache group needs from its block table each step."""

    #: Attention layers: map every scheduled token to its KV-cache slot.
    TOKEN_TO_KV_SLOT = "token_to_kv_slot"
    #: State-space (Mamba-like) layers: the rows are kept, but no slot mapping
    #: is computed and no kernel is registered or launched.
    NONE = "none"


def _interpreted() -> bool:
    """Whether the kernel was defined under Triton's interpreter (``TRITON_INTERPRET=1``)."""
    return type(compute_slot_mapping_kernel).__name__ == "InterpretedFunction"


def _normalize_device(device: torch.device | str | int) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _check_int(name: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class BlockTable:
    """The block table of one KV-cache group, and its slot-mapping buffer.

    ``block_size`` is the *allocation* block size (tokens per block the KV
    allocator hands out); ``kernel_block_size`` (default: the same) is the block
    size the attention kernels use. When they differ (hybrid models) each
    allocation block ``b`` is stored as the ``B = block_size // kernel_block_size``
    kernel blocks ``b*B, ..., b*B + B - 1``. Block ids given to the row methods
    are allocation-block ids.

    ``max_num_blocks_per_req`` counts allocation blocks; a row holds
    ``row_width = max_num_blocks_per_req * B`` kernel-block ids, and that is the
    table's row stride.

    In ``TOKEN_TO_KV_SLOT`` mode the constructor calls
    ``ComputeSlotMappingKernel.register_warmup`` with the plain scalars it will
    launch with (stride, kernel block size, allocation block size, ``B`` and
    the DCP geometry). Inside ``WarmupRegistry.activate()`` that records the
    variant for ``warmkit.warmup``; outside one it does nothing. The
    registration happens whatever the device: on a CPU-only build host it
    describes what the GPU deployment will launch.

    Args:
        block_size: allocation block size ``K``.
        max_num_reqs: number of rows.
        max_num_blocks_per_req: allocation blocks per row.
        max_num_batched_tokens: capacity of the slot-mapping buffer.
        device: where the table and the buffer live.
        kernel_block_size: kernel block size ``bs``; must divide ``block_size``.
        dcp_world_size: decode-context-parallel world size ``W``.
        dcp_rank: this rank, ``0 <= dcp_rank < dcp_world_size``.
        cp_kv_cache_interleave_size: tokens per rank per round-robin turn; must
            divide ``block_size``.
        mode: ``TOKEN_TO_KV_SLOT`` or ``NONE``.
        validate: default for ``compute_slot_mapping(validate=...)``: run the
            complete (synchronizing) input checks on every step.
        implementation: ``"auto"`` (Triton on CUDA devices, the torch reference
            elsewhere), ``"triton"`` (CUDA devices, or CPU tensors under
            ``TRITON_INTERPRET=1``) or ``"reference"``.

    Raises:
        ValueError: on an inconsistent geometry (sizes not positive, a kernel
            block size that does not divide the allocation block, a DCP rank
            >= the world size, an interleave size that does not divide the
            allocation block, a row wider than int32), or ``"triton"`` on a
            non-CUDA device.
    """

    def __init__(
        self,
        *,
        block_size: int,
        max_num_reqs: int,
        max_num_blocks_per_req: int,
        max_num_batched_tokens: int,
        device: torch.device | str | int,
        kernel_block_size: int | None = None,
        dcp_world_size: int = 1,
        dcp_rank: int = 0,
        cp_kv_cache_interleave_size: int = 1,
        mode: SlotMappingMode = SlotMappingMode.TOKEN_TO_KV_SLOT,
        validate: bool = False,
        implementation: Implementation = "auto",
    ) -> None:
        if not isinstance(mode, SlotMappingMode):
            raise TypeError(f"mode must be a SlotMappingMode, got {mode!r}")
        _check_int("block_size", block_size, minimum=1)
        _check_int("max_num_reqs", max_num_reqs, minimum=1)
        _check_int("max_num_blocks_per_req", max_num_blocks_per_req, minimum=1)
        _check_int("max_num_batched_tokens", max_num_batched_tokens, minimum=1)
        if kernel_block_size is None:
            kernel_block_size = block_size
        _check_int("kernel_block_size", kernel_block_size, minimum=1)
        if block_size % kernel_block_size != 0:
            raise ValueError(
                f"kernel_block_size ({kernel_block_size}) must divide the allocation "
                f"block_size ({block_size})"
            )
        blocks_per_kv_block = block_size // kernel_block_size
        check_geometry(
            block_size=kernel_block_size,
            kv_cache_block_size=block_size,
            blocks_per_kv_block=blocks_per_kv_block,
            dcp_world_size=dcp_world_size,
            dcp_rank=dcp_rank,
            cp_kv_cache_interleave_size=cp_kv_cache_interleave_size,
        )
        row_width = max_num_blocks_per_req * blocks_per_kv_block
        if max_num_reqs * row_width > _INT32_MAX:
            raise ValueError(
                f"a {max_num_reqs} x {row_width} table has more than 2**31 - 1 entries"
            )

        self.device = _normalize_device(device)
        if implementation == "auto":
            implementation = "triton" if self.device.type == "cuda" else "reference"
        elif implementation not in ("triton", "reference"):
            raise ValueError(
                f"implementation must be 'auto', 'triton' or 'reference', got {implementation!r}"
            )
        if implementation == "triton" and self.device.type != "cuda" and not _interpreted():
            raise ValueError(
                f"implementation='triton' needs a CUDA device, got {self.device} (or Triton's "
                "interpreter, TRITON_INTERPRET=1, for CPU tensors); use 'reference' (or 'auto') "
                "on other devices"
            )
        #: ``"triton"`` or ``"reference"``: what ``compute_slot_mapping`` runs.
        self.implementation: Literal["triton", "reference"] = implementation

        self.block_size = block_size
        self.kernel_block_size = kernel_block_size
        self.blocks_per_kv_block = blocks_per_kv_block
        self.max_num_reqs = max_num_reqs
        self.max_num_blocks_per_req = max_num_blocks_per_req
        self.row_width = row_width
        self.max_num_batched_tokens = max_num_batched_tokens
        self.dcp_world_size = dcp_world_size
        self.dcp_rank = dcp_rank
        self.cp_kv_cache_interleave_size = cp_kv_cache_interleave_size
        self.mode = mode
        self.validate = validate

        pin = self.device.type == "cuda" and torch.cuda.is_available()
        self.block_table = torch.zeros(
            (max_num_reqs, row_width), dtype=torch.int32, device=self.device
        )
        self.block_table_cpu = torch.zeros(
            (max_num_reqs, row_width), dtype=torch.int32, device="cpu", pin_memory=pin
        )
        self._rows = self.block_table_cpu.numpy()
        #: kernel blocks filled in each row
        self.num_blocks_per_row = np.zeros(max_num_reqs, dtype=np.int32)
        self._expand = np.arange(blocks_per_kv_block, dtype=np.int64)

        self.slot_mapping: torch.Tensor | None = None
        self._kernel: ComputeSlotMappingKernel | None = None
        if mode is SlotMappingMode.TOKEN_TO_KV_SLOT:
            self.slot_mapping = torch.full(
                (max_num_batched_tokens,), PAD_SLOT_ID, dtype=torch.int64, device=self.device
            )
            self._kernel = get_kernel()
            self._kernel.register_warmup(**self.warmup_space())
        logger.debug(
            "BlockTable(K=%d, bs=%d, B=%d, stride=%d, DCP %d/%d, I=%d, mode=%s, device=%s, %s)",
            block_size,
            kernel_block_size,
            blocks_per_kv_block,
            row_width,
            dcp_rank,
            dcp_world_size,
            cp_kv_cache_interleave_size,
            mode.value,
            self.device,
            self.implementation,
        )

    # -- what this table launches ------------------------------------------------------

    def warmup_space(self) -> dict[str, int]:
        """The plain scalars this table launches the kernel with (its registration).

        Returns:
            ``dispatch`` inputs of :class:`ComputeSlotMappingKernel`.
        """
        return {
            "block_table_stride": self.row_width,
            "block_size": self.kernel_block_size,
            "kv_cache_block_size": self.block_size,
            "blocks_per_kv_block": self.blocks_per_kv_block,
            "total_cp_world_size": self.dcp_world_size,
            "total_cp_rank": self.dcp_rank,
            "cp_kv_cache_interleave_size": self.cp_kv_cache_interleave_size,
        }

    # -- rows (CPU mirror) ----------------------------------------------------------

    def _check_row(self, row_idx: int) -> None:
        if isinstance(row_idx, bool) or not isinstance(row_idx, (int, np.integer)):
            raise TypeError(f"row index must be an int, got {row_idx!r}")
        if not 0 <= row_idx < self.max_num_reqs:
            raise ValueError(f"row {row_idx} is out of range [0, {self.max_num_reqs})")

    def _kernel_ids(self, block_ids: Sequence[int] | np.ndarray, row_idx: int) -> np.ndarray:
        ids = np.asarray(block_ids, dtype=np.int64).reshape(-1)
        if ids.size and (
            ids.min() < 0 or (ids.max() + 1) * self.blocks_per_kv_block - 1 > _INT32_MAX
        ):
            raise ValueError(
                f"row {row_idx}: block ids must lie in [0, 2**31 / {self.blocks_per_kv_block}), "
                f"got min {int(ids.min())}, max {int(ids.max())}"
            )
        if self.blocks_per_kv_block == 1:
            return ids
        return (ids[:, None] * self.blocks_per_kv_block + self._expand).reshape(-1)

    def append_row(self, block_ids: Sequence[int] | np.ndarray, row_idx: int) -> None:
        """Append allocation blocks to a row.

        Args:
            block_ids: allocation-block ids, in order.
            row_idx: the row.

        Raises:
            ValueError: a row index out of range, a negative or too large
                block id, or more blocks than the row holds.
            TypeError: a row index that is not an int.
        """
        self._check_row(row_idx)
        kernel_ids = self._kernel_ids(block_ids, row_idx)
        start = int(self.num_blocks_per_row[row_idx])
        end = start + kernel_ids.size
        if end > self.row_width:
            raise ValueError(
                f"row {row_idx}: {start // self.blocks_per_kv_block} + "
                f"{kernel_ids.size // self.blocks_per_kv_block} allocation blocks exceed "
                f"max_num_blocks_per_req ({self.max_num_blocks_per_req})"
            )
        self._rows[row_idx, start:end] = kernel_ids
        self.num_blocks_per_row[row_idx] = end

    def add_row(self, block_ids: Sequence[int] | np.ndarray, row_idx: int) -> None:
        """Replace a row's blocks.

        Args:
            block_ids: allocation-block ids, in order.
            row_idx: the row.

        Raises:
            ValueError: as :meth:`append_row`.
        """
        self._check_row(row_idx)
        filled = int(self.num_blocks_per_row[row_idx])
        self.num_blocks_per_row[row_idx] = 0
        try:
            self.append_row(block_ids, row_idx)
        except BaseException:
            # append_row writes nothing before its checks pass: the row is as it was
            self.num_blocks_per_row[row_idx] = filled
            raise

    def clear_row(self, row_idx: int) -> None:
        """Empty a row.

        Like the other row methods this only updates the row's block count and
        the CPU mirror's entries in use; stale entries beyond the count are
        left in place (``compute_slot_mapping(validate=True)`` rejects
        positions that would read them).

        Args:
            row_idx: the row.

        Raises:
            ValueError: a bad row index.
        """
        self._check_row(row_idx)
        self.num_blocks_per_row[row_idx] = 0

    def move_row(self, src: int, tgt: int) -> None:
        """Copy row ``src`` onto row ``tgt`` (``src`` is left as it is).

        Args:
            src: the source row.
            tgt: the target row.

        Raises:
            ValueError: a bad row index.
        """
        self._check_row(src)
        self._check_row(tgt)
        n = int(self.num_blocks_per_row[src])
        self._rows[tgt, :n] = self._rows[src, :n]
        self.num_blocks_per_row[tgt] = n

    def swap_row(self, a: int, b: int) -> None:
        """Exchange rows ``a`` and ``b``.

        Args:
            a: one row.
            b: the other row.

        Raises:
            ValueError: a bad row index.
        """
        self._check_row(a)
        self._check_row(b)
        n = int(max(self.num_blocks_per_row[a], self.num_blocks_per_row[b]))
        self._rows[[a, b], :n] = self._rows[[b, a], :n]
        self.num_blocks_per_row[[a, b]] = self.num_blocks_per_row[[b, a]]

    def row(self, row_idx: int) -> np.ndarray:
        """The kernel-block ids of one row, as a copy.

        Args:
            row_idx: the row.

        Raises:
            ValueError: a bad row index.
        """
        self._check_row(row_idx)
        return self._rows[row_idx, : int(self.num_blocks_per_row[row_idx])].copy()

    def commit(self, num_reqs: int) -> None:
        """Copy rows ``[0, num_reqs)`` of the CPU mirror to the device table.

        The copy is asynchronous from pinned memory on CUDA; it is ordered
        before any later kernel on the current stream.

        Args:
            num_reqs: number of leading rows to copy.

        Raises:
            ValueError: ``num_reqs`` outside ``[0, max_num_reqs]``.
        """
        if (
            isinstance(num_reqs, bool)
            or not isinstance(num_reqs, int)
            or not 0 <= num_reqs <= self.max_num_reqs
        ):
            raise ValueError(f"num_reqs {num_reqs!r} is outside [0, {self.max_num_reqs}]")
        self.block_table[:num_reqs].copy_(self.block_table_cpu[:num_reqs], non_blocking=True)

    def clear(self) -> None:
        """Empty every row, on the mirror and on the device."""
        self.block_table.zero_()
        self.block_table_cpu.zero_()
        self.num_blocks_per_row[:] = 0

    # -- the slot mapping ------------------------------------------------------------

    def compute_slot_mapping(
        self,
        num_reqs: int,
        query_start_loc: torch.Tensor,
        positions: torch.Tensor,
        *,
        validate: bool | None = None,
    ) -> torch.Tensor | None:
        """Fill and return the whole ``slot_mapping`` buffer for one step.

        Tokens ``[0, num_tokens)`` get their slots (or ``PAD_SLOT_ID`` where
        another DCP rank owns them), ``[num_tokens, max_num_batched_tokens)``
        gets ``PAD_SLOT_ID``. Uses the rows last :meth:`commit`-ted. Runs the
        Triton kernel or the torch reference, per :attr:`implementation`.

        The cheap checks (no device synchronization) always run; the complete
        ones run when ``validate`` (default: the constructor's) is true.

        Args:
            num_reqs: requests in this step (rows ``[0, num_reqs)``).
            query_start_loc: int32, at least ``num_reqs + 1`` cumulative token
                offsets (only the first ``num_reqs + 1`` are read).
            positions: int64 ``[num_tokens]`` positions.
            validate: run the complete checks.

        Returns:
            The ``slot_mapping`` buffer, or ``None`` in ``NONE`` mode (nothing
            is computed there).

        Raises:
            ValueError: cheap: ``num_reqs`` over capacity, too many tokens,
                wrong dtype, shape or device; complete: ``query_start_loc`` not
                starting at 0, not monotonic or not ending at ``num_tokens``, a
                negative position, a position whose block column is beyond the
                row width or beyond the row's filled blocks.
        """
        if self.slot_mapping is None:
            return None
        self._check_inputs(num_reqs, query_start_loc, positions)
        if self.validate if validate is None else validate:
            self._validate_inputs(num_reqs, query_start_loc, positions)
        if self.implementation == "triton":
            self._launch_kernel(num_reqs, query_start_loc, positions)
        else:
            reference_slot_mapping(
                query_start_loc=query_start_loc[: num_reqs + 1],
                positions=positions,
                block_table=self.block_table[:num_reqs],
                block_size=self.kernel_block_size,
                kv_cache_block_size=self.block_size,
                blocks_per_kv_block=self.blocks_per_kv_block,
                dcp_world_size=self.dcp_world_size,
                dcp_rank=self.dcp_rank,
                cp_kv_cache_interleave_size=self.cp_kv_cache_interleave_size,
                max_num_tokens=self.max_num_batched_tokens,
                out=self.slot_mapping,
            )
        return self.slot_mapping

    def _launch_kernel(
        self, num_reqs: int, query_start_loc: torch.Tensor, positions: torch.Tensor
    ) -> None:
        assert self._kernel is not None and self.slot_mapping is not None
        self._kernel(
            num_reqs=num_reqs,
            num_tokens=positions.shape[0],
            max_num_tokens=self.max_num_batched_tokens,
            query_start_loc=query_start_loc,
            positions=positions,
            block_table=self.block_table,
            block_table_stride=self.row_width,
            block_size=self.kernel_block_size,
            slot_mapping=self.slot_mapping,
            kv_cache_block_size=self.block_size,
            blocks_per_kv_block=self.blocks_per_kv_block,
            total_cp_world_size=self.dcp_world_size,
            total_cp_rank=self.dcp_rank,
            cp_kv_cache_interleave_size=self.cp_kv_cache_interleave_size,
        )

    def _check_inputs(
        self, num_reqs: int, query_start_loc: torch.Tensor, positions: torch.Tensor
    ) -> None:
        """O(1) checks that never synchronize with the device."""
        if (
            isinstance(num_reqs, bool)
            or not isinstance(num_reqs, int)
            or not 0 <= num_reqs <= self.max_num_reqs
        ):
            raise ValueError(
                f"num_reqs {num_reqs!r} is outside [0, max_num_reqs={self.max_num_reqs}]"
            )
        if query_start_loc.dtype != torch.int32:
            raise ValueError(f"query_start_loc must be int32, got {query_start_loc.dtype}")
        if positions.dtype != torch.int64:
            raise ValueError(f"positions must be int64, got {positions.dtype}")
        if query_start_loc.ndim != 1 or query_start_loc.shape[0] < num_reqs + 1:
            raise ValueError(
                f"query_start_loc must be 1-D with at least num_reqs + 1 = {num_reqs + 1} "
                f"elements, got shape {tuple(query_start_loc.shape)}"
            )
        if positions.ndim != 1:
            raise ValueError(f"positions must be 1-D, got shape {tuple(positions.shape)}")
        if positions.shape[0] > self.max_num_batched_tokens:
            raise ValueError(
                f"{positions.shape[0]} tokens exceed the slot-mapping buffer "
                f"(max_num_batched_tokens={self.max_num_batched_tokens})"
            )
        for name, t in (("query_start_loc", query_start_loc), ("positions", positions)):
            if t.device != self.device:
                raise ValueError(f"{name} is on {t.device}, the block table on {self.device}")
        if query_start_loc.stride(0) != 1 or positions.stride(0) != 1:
            raise ValueError("query_start_loc and positions must be contiguous")

    def _validate_inputs(
        self, num_reqs: int, query_start_loc: torch.Tensor, positions: torch.Tensor
    ) -> None:
        """Complete checks: reads the inputs back to the host."""
        qsl = query_start_loc[: num_reqs + 1].to("cpu", torch.int64)
        pos = positions.to("cpu")
        num_tokens = pos.shape[0]
        if int(qsl[0]) != 0:
            raise ValueError(f"query_start_loc[0] must be 0, got {int(qsl[0])}")
        counts = qsl[1:] - qsl[:-1]
        bad = torch.nonzero(counts < 0)
        if bad.numel():
            r = int(bad[0, 0])
            raise ValueError(
                f"query_start_loc is not monotonic at request {r}: "
                f"query_start_loc[{r}] = {int(qsl[r])} > query_start_loc[{r + 1}] = {int(qsl[r + 1])}"
            )
        if int(qsl[-1]) != num_tokens:
            raise ValueError(
                f"query_start_loc[num_reqs={num_reqs}] = {int(qsl[-1])} but there are {num_tokens} tokens"
            )
        negative = torch.nonzero(pos < 0)
        if negative.numel():
            t = int(negative[0, 0])
            raise ValueError(f"token {t} has a negative position {int(pos[t])}")
        if num_tokens == 0:
            return
        req = torch.repeat_interleave(torch.arange(num_reqs), counts)
        k, w, i = self.block_size, self.dcp_world_size, self.cp_kv_cache_interleave_size
        vb = pos // (k * w)
        o = pos - vb * (k * w)
        owned = (o // i) % w == self.dcp_rank
        lo = (o // (w * i)) * i + o % i
        col = vb * self.blocks_per_kv_block + lo // self.kernel_block_size
        beyond = torch.nonzero(owned & (col >= self.row_width))
        if beyond.numel():
            t = int(beyond[0, 0])
            raise ValueError(
                f"token {t} (request {int(req[t])}, position {int(pos[t])}) needs block column "
                f"{int(col[t])}, beyond the row width {self.row_width}"
            )
        filled = torch.from_numpy(self.num_blocks_per_row[:num_reqs].astype(np.int64))[req]
        unfilled = torch.nonzero(owned & (col >= filled))
        if unfilled.numel():
            t = int(unfilled[0, 0])
            r = int(req[t])
            raise ValueError(
                f"token {t} (request {r}, position {int(pos[t])}) needs block column "
                f"{int(col[t])}, but row {r} holds only {int(filled[t])} kernel blocks"
            )


class MultiGroupBlockTable:
    """One :class:`BlockTable` per KV-cache group, edited and committed together.

    Every group shares ``max_num_reqs``, the token buffer size, the device and
    the DCP geometry; each has its own allocation block size, kernel block
    size and mode. A group's row holds
    ``cdiv(max_model_len, block_size * dcp_world_size)`` allocation blocks.

    Args:
        block_sizes: allocation block size of each group.
        max_num_reqs: rows per table.
        max_model_len: longest sequence, in tokens.
        max_num_batched_tokens: slot-mapping buffer size.
        device: where tables and buffers live.
        kernel_block_sizes: kernel block size of each group (``None`` entries,
            or ``None`` for all: the allocation block size).
        modes: mode of each group (default: all ``TOKEN_TO_KV_SLOT``).
        dcp_world_size: DCP world size.
        dcp_rank: this DCP rank.
        cp_kv_cache_interleave_size: DCP interleave size.
        validate: default of ``compute_slot_mapping(validate=...)``.
        implementation: as for :class:`BlockTable`.

    Raises:
        ValueError: no group, per-group lists of different lengths, or any
            error of :class:`BlockTable`.
    """

    def __init__(
        self,
        *,
        block_sizes: Sequence[int],
        max_num_reqs: int,
        max_model_len: int,
        max_num_batched_tokens: int,
        device: torch.device | str | int,
        kernel_block_sizes: Sequence[int | None] | None = None,
        modes: Sequence[SlotMappingMode] | None = None,
        dcp_world_size: int = 1,
        dcp_rank: int = 0,
        cp_kv_cache_interleave_size: int = 1,
        validate: bool = False,
        implementation: Implementation = "auto",
    ) -> None:
        block_sizes = list(block_sizes)
        if not block_sizes:
            raise ValueError("MultiGroupBlockTable needs at least one KV-cache group")
        kernel_sizes = (
            list(kernel_block_sizes)
            if kernel_block_sizes is not None
            else [None] * len(block_sizes)
        )
        group_modes = (
            list(modes)
            if modes is not None
            else [SlotMappingMode.TOKEN_TO_KV_SLOT] * len(block_sizes)
        )
        if not len(kernel_sizes) == len(group_modes) == len(block_sizes):
            raise ValueError(
                f"block_sizes ({len(block_sizes)}), kernel_block_sizes ({len(kernel_sizes)}) and "
                f"modes ({len(group_modes)}) must have one entry per KV-cache group"
            )
        _check_int("max_model_len", max_model_len, minimum=1)
        _check_int("dcp_world_size", dcp_world_size, minimum=1)
        self.block_tables: list[BlockTable] = []
        # Groups register into a staging registry, passed on only once every group is
        # built: a group that fails must not leave the others registered (half-done).
        outer = warmkit.active_registry()
        staged = warmkit.WarmupRegistry()
        with staged.activate():
            for block_size, kernel_block_size, mode in zip(block_sizes, kernel_sizes, group_modes):
                _check_int("block_size", block_size, minimum=1)
                per_row = -(-max_model_len // (block_size * dcp_world_size))
                self.block_tables.append(
                    BlockTable(
                        block_size=block_size,
                        kernel_block_size=kernel_block_size,
                        max_num_reqs=max_num_reqs,
                        max_num_blocks_per_req=per_row,
                        max_num_batched_tokens=max_num_batched_tokens,
                        device=device,
                        dcp_world_size=dcp_world_size,
                        dcp_rank=dcp_rank,
                        cp_kv_cache_interleave_size=cp_kv_cache_interleave_size,
                        mode=mode,
                        validate=validate,
                        implementation=implementation,
                    )
                )
        if outer is not None:
            for reg in staged:
                outer.add(reg.kernel_cls, *reg.zip_groups, **reg.space)

    def __len__(self) -> int:
        return len(self.block_tables)

    def __getitem__(self, group: int) -> BlockTable:
        return self.block_tables[group]

    def __iter__(self) -> Iterator[BlockTable]:
        return iter(self.block_tables)

    def _per_group(self, block_ids: Sequence[Sequence[int]]) -> Sequence[Sequence[int]]:
        if len(block_ids) != len(self.block_tables):
            raise ValueError(
                f"expected one block-id list per group ({len(self.block_tables)}), got {len(block_ids)}"
            )
        return block_ids

    @contextlib.contextmanager
    def _all_or_nothing(self, row_idx: int) -> Iterator[None]:
        """Restore row ``row_idx`` of every group if an update fails in one."""
        self.block_tables[0]._check_row(row_idx)
        saved = [
            t._rows[row_idx, : int(t.num_blocks_per_row[row_idx])].copy() for t in self.block_tables
        ]
        try:
            yield
        except BaseException:
            for table, ids in zip(self.block_tables, saved):
                table._rows[row_idx, : ids.size] = ids
                table.num_blocks_per_row[row_idx] = ids.size
            raise

    def append_row(self, block_ids: Sequence[Sequence[int]], row_idx: int) -> None:
        """Append allocation blocks to one row of every group.

        Args:
            block_ids: one list of allocation-block ids per group.
            row_idx: the row.

        Raises:
            ValueError: a wrong number of lists, or as ``BlockTable.append_row``.
        """
        with self._all_or_nothing(row_idx):
            for table, ids in zip(self.block_tables, self._per_group(block_ids)):
                table.append_row(ids, row_idx)

    def add_row(self, block_ids: Sequence[Sequence[int]], row_idx: int) -> None:
        """Replace one row of every group.

        Args:
            block_ids: one list of allocation-block ids per group.
            row_idx: the row.

        Raises:
            ValueError: a wrong number of lists, or as ``BlockTable.add_row``.
        """
        with self._all_or_nothing(row_idx):
            for table, ids in zip(self.block_tables, self._per_group(block_ids)):
                table.add_row(ids, row_idx)

    def clear_row(self, row_idx: int) -> None:
        """Empty one row of every group.

        Args:
            row_idx: the row.

        Raises:
            ValueError: a bad row index.
        """
        for table in self.block_tables:
            table.clear_row(row_idx)

    def move_row(self, src: int, tgt: int) -> None:
        """Copy row ``src`` onto ``tgt`` in every group.

        Args:
            src: the source row.
            tgt: the target row.

        Raises:
            ValueError: a bad row index.
        """
        for table in self.block_tables:
            table.move_row(src, tgt)

    def swap_row(self, a: int, b: int) -> None:
        """Exchange rows ``a`` and ``b`` in every group.

        Args:
            a: one row.
            b: the other row.

        Raises:
            ValueError: a bad row index.
        """
        for table in self.block_tables:
            table.swap_row(a, b)

    def commit(self, num_reqs: int) -> None:
        """Copy rows ``[0, num_reqs)`` of every group to the device.

        Args:
            num_reqs: number of leading rows.

        Raises:
            ValueError: ``num_reqs`` out of range.
        """
        for table in self.block_tables:
            table.commit(num_reqs)

    def clear(self) -> None:
        """Empty every row of every group."""
        for table in self.block_tables:
            table.clear()

    def compute_slot_mapping(
        self,
        num_reqs: int,
        query_start_loc: torch.Tensor,
        positions: torch.Tensor,
        *,
        validate: bool | None = None,
    ) -> list[torch.Tensor | None]:
        """Compute every group's slot mapping for one step.

        Args:
            num_reqs: requests in this step.
            query_start_loc: int32 cumulative token offsets.
            positions: int64 positions.
            validate: run the complete checks.

        Returns:
            One buffer per group; ``None`` for ``NONE``-mode groups.

        Raises:
            ValueError: as ``BlockTable.compute_slot_mapping``.
        """
        return [
            table.compute_slot_mapping(num_reqs, query_start_loc, positions, validate=validate)
            for table in self.block_tables
        ]
