"""``TritonRecording``: the recording component of ``TritonBackend`` (``backend.recording``).

``warmkit.RecordReplay`` (a recorded raw ``@triton.jit`` entry replayed as a
kernel and key: ``_record``) and ``warmkit.SpecializationMap`` (declared keys in
the recorded entries' form, for ``warmkit coverage``: ``_coverage``). Both
modules are imported at first use: ``_record`` takes ~7 ms to import, and
``import warmkit_triton`` does not need it.
"""

from __future__ import annotations

from typing import Any

from ._triton_api import require_triton

__all__ = ["TritonRecording"]


class TritonRecording:
    """Recorded entries: replaying them, and declared keys in their recorded form."""

    def recorded_kernel(self, entry: Any) -> tuple[Any, Any]:
        """The kernel and key that replay a recorded raw ``@triton.jit`` entry (``docs/record.md``).

        Nothing is imported here: the function is imported, and its source
        checked, when the key compiles, so a stale entry fails alone.
        """
        from ._record import recorded_kernel

        return recorded_kernel(entry)

    def specializations(
        self, kernel: Any, keys: list[Any], target: str | None
    ) -> list[tuple[str, dict[str, Any]]]:
        """Map a declared kernel's keys to the Triton specializations they compile, without compiling.

        Used by ``warmkit coverage``; no GPU needed (see ``_coverage.declared_specializations``).
        """
        require_triton()
        from ._coverage import declared_specializations

        return declared_specializations(kernel, keys, target)
