"""A real model on a real Triton library: HF ``transformers`` Llama (random init) patched with Liger-Kernel.

Nothing is downloaded: the model is built from a ``LlamaConfig`` and seeded, so
every process gets the same weights and, greedy, the same tokens. Liger-Kernel
replaces Llama's RMSNorm, rotary embedding and SwiGLU MLP with its own raw
``@triton.jit`` kernels, which Triton compiles at runtime on first use: the
compiles warmkit records (``warmkit record``) and replays (``warmkit run``).

Prints, one per line::

    TOKENS [...]             the generated token ids (the recorded run's must match)
    MAIN_AT_S s              from the process launch to this script's first line (under
                             `warmkit run`: the interpreter's start and the startup hook's warmup)
    IMPORTS_S s              this script's imports of torch, transformers and Liger-Kernel (about
                             0 under `warmkit run`, whose warmup imported them already)
    FIRST_RESPONSE_S s       from the process launch to the end of the first generate()
    STEADY_S s               the second generate() of the same prompt
    COMPILES n               Triton compiles that were not disk hits (Triton's own listener)
    JIT_EVENTS n [kinds]     only when warmkit is loaded (under `warmkit run`/`record`):
                             the monitor's runtime JIT events

The launch time is ``REAL_MODEL_LAUNCH`` (seconds since the epoch, set by the
driver just before it starts the command, so ``warmkit run``'s own start is
counted), else this process's start time from ``/proc/self/stat``.

Needs a CUDA GPU (see README.md); ``record_cpu.py`` reuses :func:`build_model`
and :func:`generate` on a CPU host.
"""

from __future__ import annotations

import os
import sys
import time

LAUNCH_ENV = "REAL_MODEL_LAUNCH"
PROMPT = [1, 306, 1966, 304, 1017, 1371, 889, 450, 1900, 982, 304, 1207]
MAX_NEW_TOKENS = 32


def launch_time() -> float:
    """The launch time, in seconds since the epoch: ``REAL_MODEL_LAUNCH``, else this process's start."""
    if os.environ.get(LAUNCH_ENV):
        return float(os.environ[LAUNCH_ENV])
    # Field 22 of /proc/self/stat is the start in clock ticks since boot; /proc/uptime is
    # "now" on the same clock, with 10 ms resolution (btime in /proc/stat is whole seconds).
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


def build_model(device: str):
    """A small Llama, Liger-patched, seeded, in bf16 on ``device``."""
    import torch
    from liger_kernel.transformers import apply_liger_kernel_to_llama

    # Before the model is built: Liger swaps the classes the model's modules are made of.
    apply_liger_kernel_to_llama()
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=2048,
        hidden_size=512,
        intermediate_size=1376,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(cfg)
    return model.to(device=device, dtype=torch.bfloat16).eval()


def generate(model, device: str) -> list[int]:
    """Greedy, exactly MAX_NEW_TOKENS new tokens of the fixed prompt."""
    import torch

    ids = torch.tensor([PROMPT], device=device)
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=MAX_NEW_TOKENS,
            min_new_tokens=MAX_NEW_TOKENS,  # a random model may pick EOS early
            pad_token_id=0,
        )
    if device == "cuda":
        torch.cuda.synchronize()
    return out[0, len(PROMPT) :].tolist()


def _count_compiles() -> list[str]:
    from triton import knobs

    compiles: list[str] = []
    previous = knobs.compilation.listener

    def listener(**kw):  # chained: warmkit's own listener (under `warmkit run`) still runs
        if not kw.get("cache_hit"):
            compiles.append(str(kw.get("src")))
        if previous is not None:
            previous(**kw)

    knobs.compilation.listener = listener
    return compiles


def main() -> None:
    launched = launch_time()
    main_at = time.time() - launched
    t0 = time.perf_counter()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(
            "gen.py: no CUDA GPU is visible (torch.cuda.is_available() is False); "
            "run it on a GPU host (examples/real_model/README.md). On a CPU host, "
            "examples/real_model/record_cpu.py records the same model's kernels."
        )
    import liger_kernel.transformers  # noqa: F401 -- timed here: build_model() imports it
    import transformers  # noqa: F401 -- timed here: build_model() imports it

    imports = time.perf_counter() - t0
    compiles = _count_compiles()
    model = build_model("cuda")
    tokens = generate(model, "cuda")
    first = time.time() - launched
    t0 = time.perf_counter()
    again = generate(model, "cuda")
    steady = time.perf_counter() - t0
    if again != tokens:
        raise SystemExit(f"gen.py: the second generate() gave other tokens: {again} != {tokens}")
    print(f"TOKENS {tokens}")
    print(f"MAIN_AT_S {main_at:.3f}")
    print(f"IMPORTS_S {imports:.3f}")
    print(f"FIRST_RESPONSE_S {first:.3f}")
    print(f"STEADY_S {steady:.3f}")
    print(f"COMPILES {len(compiles)}")
    if "warmkit" in sys.modules:  # loaded by `warmkit run`/`record`'s startup hook
        from warmkit import monitor

        events = monitor.events()  # every runtime JIT event: compile, disk hit, load, autotune
        print(f"JIT_EVENTS {len(events)} {sorted({e.kind for e in events})}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
