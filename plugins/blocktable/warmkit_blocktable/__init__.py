"""warmkit-blocktable: the paged-KV-cache slot-mapping kernel as a warmkit kernel provider.

* :class:`ComputeSlotMappingKernel`: the Triton kernel wrapped as a
  ``warmkit_triton.TritonKernel`` (entry point ``blocktable.slot_mapping`` in
  the group ``warmkit.kernels``).
* :class:`BlockTable` / :class:`MultiGroupBlockTable`: block tables that
  register, when built, exactly the kernel variant they will launch.
* :class:`SlotMappingGeometry`: the checked constants of one slot mapping
  (block sizes, DCP geometry) and the slot math the reference and the
  tables' input validation share.
* :func:`reference_slot_mapping`: a vectorized torch reference of the same
  math, used by the tests and on CPU devices.

See ``docs/blocktable.md``.
"""

from __future__ import annotations

import logging

from ._block_table import BlockTable, SlotMappingMode
from ._geometry import PAD_SLOT_ID, SlotMappingGeometry
from ._kernel import ComputeSlotMappingKernel
from ._multi_group import MultiGroupBlockTable
from ._reference import reference_slot_mapping

__all__ = [
    "PAD_SLOT_ID",
    "BlockTable",
    "ComputeSlotMappingKernel",
    "MultiGroupBlockTable",
    "SlotMappingGeometry",
    "SlotMappingMode",
    "reference_slot_mapping",
]

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
