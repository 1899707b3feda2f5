"""``MultiGroupBlockTable``: one :class:`~warmkit_blocktable.BlockTable` per KV-cache group.

A model with several KV-cache groups (attention layers of different block
sizes, state-space layers) keeps one table per group; every row update,
commit and slot-mapping step goes to all of them together, and a row update
that fails in one group changes none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch

import warmkit

from ._block_table import BlockTable, Implementation, SlotMappingMode, check_int

__all__ = ["MultiGroupBlockTable"]


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
        check_int("max_model_len", max_model_len, minimum=1)
        check_int("dcp_world_size", dcp_world_size, minimum=1)
        self.block_tables: list[BlockTable] = []
        # Groups register into a staging registry, passed on only once every group is
        # built: a group that fails must not leave the others registered (half-done).
        outer = warmkit.active_registry()
        staged = warmkit.WarmupRegistry()
        with staged.activate():
            for block_size, kernel_block_size, mode in zip(block_sizes, kernel_sizes, group_modes):
                check_int("block_size", block_size, minimum=1)
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

    def _update_row(
        self,
        update: Callable[[BlockTable, Sequence[int], int], None],
        block_ids: Sequence[Sequence[int]],
        row_idx: int,
    ) -> None:
        """Apply a row update to every group, restoring every group's row if one fails."""
        self.block_tables[0]._check_row(row_idx)
        if len(block_ids) != len(self.block_tables):
            raise ValueError(
                f"expected one block-id list per group ({len(self.block_tables)}), got {len(block_ids)}"
            )
        saved = [
            t._rows[row_idx, : int(t.num_blocks_per_row[row_idx])].copy() for t in self.block_tables
        ]
        try:
            for table, ids in zip(self.block_tables, block_ids):
                update(table, ids, row_idx)
        except BaseException:
            for table, old in zip(self.block_tables, saved):
                table._rows[row_idx, : old.size] = old
                table.num_blocks_per_row[row_idx] = old.size
            raise

    def append_row(self, block_ids: Sequence[Sequence[int]], row_idx: int) -> None:
        """Append allocation blocks to one row of every group, all or nothing.

        Args:
            block_ids: one list of allocation-block ids per group.
            row_idx: the row.

        Raises:
            ValueError: a wrong number of lists, or as ``BlockTable.append_row``
                in any group; no group's row has changed then.
        """
        self._update_row(BlockTable.append_row, block_ids, row_idx)

    def add_row(self, block_ids: Sequence[Sequence[int]], row_idx: int) -> None:
        """Replace one row of every group, all or nothing (as :meth:`append_row`)."""
        self._update_row(BlockTable.add_row, block_ids, row_idx)

    # The whole-row operations below only delegate: each group checks its
    # arguments and raises as the BlockTable method of the same name.

    def clear_row(self, row_idx: int) -> None:
        """Empty one row of every group (``BlockTable.clear_row``)."""
        for table in self.block_tables:
            table.clear_row(row_idx)

    def move_row(self, src: int, tgt: int) -> None:
        """Copy row ``src`` onto ``tgt`` in every group (``BlockTable.move_row``)."""
        for table in self.block_tables:
            table.move_row(src, tgt)

    def swap_row(self, a: int, b: int) -> None:
        """Exchange rows ``a`` and ``b`` in every group (``BlockTable.swap_row``)."""
        for table in self.block_tables:
            table.swap_row(a, b)

    def commit(self, num_reqs: int) -> None:
        """Copy rows ``[0, num_reqs)`` of every group to the device (``BlockTable.commit``)."""
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
