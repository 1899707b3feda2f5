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

import enum
import logging
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch

from ._geometry import PAD_SLOT_ID, SlotMappingGeometry
from ._jit import compute_slot_mapping_kernel
from ._kernel import ComputeSlotMappingKernel, get_kernel
from ._reference import checked_slot_mapping

__all__ = ["BlockTable", "Implementation", "SlotMappingMode", "check_int"]

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


def check_int(name: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _from_geometry(field: str, doc: str) -> Any:
    """A read-only ``BlockTable`` attribute that reads its geometry (one source of truth)."""
    return property(lambda table: getattr(table.geometry, field), doc=doc)


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

    # The geometry's constants under this class's names (``block_size`` is ``K`` here);
    # typed as the ints they are (read-only: a property of the geometry).
    block_size: int = _from_geometry("kv_cache_block_size", "Allocation block size ``K``.")
    kernel_block_size: int = _from_geometry("block_size", "Kernel block size ``bs``.")
    blocks_per_kv_block: int = _from_geometry("blocks_per_kv_block", "``B = K // bs``.")
    dcp_world_size: int = _from_geometry("dcp_world_size", "DCP world size ``W``.")
    dcp_rank: int = _from_geometry("dcp_rank", "This DCP rank ``R``.")
    cp_kv_cache_interleave_size: int = _from_geometry("cp_kv_cache_interleave_size", "DCP ``I``.")

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
        #: The slot-mapping constants of this table (checked on construction).
        self.geometry, row_width = _checked_geometry(
            block_size=block_size,
            max_num_reqs=max_num_reqs,
            max_num_blocks_per_req=max_num_blocks_per_req,
            max_num_batched_tokens=max_num_batched_tokens,
            kernel_block_size=block_size if kernel_block_size is None else kernel_block_size,
            dcp_world_size=dcp_world_size,
            dcp_rank=dcp_rank,
            cp_kv_cache_interleave_size=cp_kv_cache_interleave_size,
        )
        kernel_block_size = self.geometry.block_size
        blocks_per_kv_block = self.geometry.blocks_per_kv_block

        self.device = _normalize_device(device)
        #: ``"triton"`` or ``"reference"``: what ``compute_slot_mapping`` runs.
        self.implementation = _choose_implementation(self.device, implementation)

        self.max_num_reqs = max_num_reqs
        self.max_num_blocks_per_req = max_num_blocks_per_req
        self.row_width = row_width
        self.max_num_batched_tokens = max_num_batched_tokens
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

        # the kernel's keyword arguments besides the step's own, built once
        self._space = self.geometry.kernel_space(row_width)
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
        return dict(self._space)

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
            checked_slot_mapping(
                self.geometry,
                query_start_loc=query_start_loc[: num_reqs + 1],
                positions=positions,
                block_table=self.block_table[:num_reqs],
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
            slot_mapping=self.slot_mapping,
            **self._space,
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
        positions = positions.to("cpu")
        requests, columns = self.geometry.locate(
            query_start_loc[: num_reqs + 1].to("cpu"), positions, self.row_width
        )
        filled = torch.from_numpy(self.num_blocks_per_row[:num_reqs].astype(np.int64))[requests]
        unfilled = torch.nonzero(columns.owned & (columns.column >= filled))
        if unfilled.numel():
            t = int(unfilled[0, 0])
            r = int(requests[t])
            raise ValueError(
                f"token {t} (request {r}, position {int(positions[t])}) needs block column "
                f"{int(columns.column[t])}, but row {r} holds only {int(filled[t])} kernel blocks"
            )


def _checked_geometry(
    *,
    block_size: int,
    max_num_reqs: int,
    max_num_blocks_per_req: int,
    max_num_batched_tokens: int,
    kernel_block_size: int,
    dcp_world_size: int,
    dcp_rank: int,
    cp_kv_cache_interleave_size: int,
) -> tuple[SlotMappingGeometry, int]:
    """A table's geometry and row width, every size checked (``BlockTable``'s arguments).

    Raises:
        ValueError: the inconsistencies ``BlockTable`` lists.
    """
    check_int("block_size", block_size, minimum=1)
    check_int("max_num_reqs", max_num_reqs, minimum=1)
    check_int("max_num_blocks_per_req", max_num_blocks_per_req, minimum=1)
    check_int("max_num_batched_tokens", max_num_batched_tokens, minimum=1)
    check_int("kernel_block_size", kernel_block_size, minimum=1)
    if block_size % kernel_block_size != 0:
        raise ValueError(
            f"kernel_block_size ({kernel_block_size}) must divide the allocation "
            f"block_size ({block_size})"
        )
    blocks_per_kv_block = block_size // kernel_block_size
    geometry = SlotMappingGeometry(
        block_size=kernel_block_size,
        kv_cache_block_size=block_size,
        blocks_per_kv_block=blocks_per_kv_block,
        dcp_world_size=dcp_world_size,
        dcp_rank=dcp_rank,
        cp_kv_cache_interleave_size=cp_kv_cache_interleave_size,
    )
    row_width = max_num_blocks_per_req * blocks_per_kv_block
    if max_num_reqs * row_width > _INT32_MAX:
        raise ValueError(f"a {max_num_reqs} x {row_width} table has more than 2**31 - 1 entries")
    return geometry, row_width


def _choose_implementation(
    device: torch.device, implementation: str
) -> Literal["triton", "reference"]:
    """What ``compute_slot_mapping`` runs on ``device`` for ``implementation`` (``BlockTable``'s argument).

    Raises:
        ValueError: an unknown implementation, or ``"triton"`` where it cannot run.
    """
    if implementation == "auto":
        return "triton" if device.type == "cuda" else "reference"
    if implementation == "reference":
        return "reference"
    if implementation != "triton":
        raise ValueError(
            f"implementation must be 'auto', 'triton' or 'reference', got {implementation!r}"
        )
    if device.type != "cuda" and not _interpreted():
        raise ValueError(
            f"implementation='triton' needs a CUDA device, got {device} (or Triton's "
            "interpreter, TRITON_INTERPRET=1, for CPU tensors); use 'reference' (or 'auto') "
            "on other devices"
        )
    return "triton"
