"""The ``warmkit`` command's arguments: the parser, its help, and the exit codes.

The commands themselves are in ``_cli``; each subcommand's arguments are
here, so that ``warmkit --help`` and the code that reads ``args`` agree on
one list.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from .._envs import MONITOR_MODES, ON_ERROR_MODES

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "make_parser"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it

_EPILOG = """exit codes:
  0  ok
  1  something failed: a compile, a backend, a warmup that compiled nothing,
     a refused bundle, bad cache entries
  2  usage error: bad arguments, unknown target or backend, unreadable manifest or bundle
  130  interrupted (SIGINT): the report so far is printed, marked cancelled

-v prints tracebacks and full compiler logs; -vv adds debug logs."""
_JSON = "print the result as JSON instead of a table"
_MANIFEST = "a manifest written by WarmupRegistry.save() (JSON)"
_BUNDLE = "a .wkb bundle written by `warmkit bundle build`"
_TARGET = (
    "compile for this target, e.g. cuda:90, also on a host without a GPU (default: this device)"
)
_BACKENDS = "comma-separated backends to warm up; an unknown name is an error (default: all)"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", _EPILOG)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        # On every (sub)command, so that `warmkit plan m.json -v` works like `warmkit -v plan m.json`.
        self.add_argument(
            "-v",
            "--verbose",
            action="count",
            default=argparse.SUPPRESS,
            help="more logs; tracebacks on error",
        )
        self.add_argument(
            "--manifest-modules",
            choices=("installed", "any"),
            default=argparse.SUPPRESS,
            help="which modules a manifest may import: installed (default; not the current or "
            "the script's directory) or any (WARMKIT_MANIFEST_MODULES)",
        )

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"warmkit: error: {message}\n")


def make_parser() -> argparse.ArgumentParser:
    """The ``warmkit`` command's argument parser (every argument has help: tested)."""
    p = _Parser(prog="warmkit", description="Compile JIT kernels before serving.")
    p.add_argument("--version", action="store_true", help="print versions of warmkit and plugins")
    p.set_defaults(verbose=0)
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    _add_manifest_commands(sub)
    _add_bundle_commands(sub)
    _add_cache_commands(sub)
    _add_process_commands(sub)
    _add_check_commands(sub)
    return p


def _add_manifest_commands(sub: Any) -> None:
    """``list``, ``plan``, ``warmup``: what is installed, and a manifest's keys planned or compiled."""
    s = sub.add_parser("list", help="installed backends and kernels")
    s.add_argument(
        "--check",
        action="store_true",
        help="also load each kernel entry point and flag one that plan/warmup would refuse "
        "(a raw @triton.jit function, not a JitKernel); exit 1 if any (imports the kernels' "
        "modules: slower)",
    )
    s.add_argument("--json", action="store_true", help=_JSON)

    s = sub.add_parser("plan", help="the keys a manifest expands to, per kernel")
    s.add_argument("manifest", help=_MANIFEST)
    s.add_argument(
        "--target", help="check this target as warmup would; " + _TARGET.split(", ", 1)[1]
    )
    s.add_argument("--json", action="store_true", help=_JSON)

    s = sub.add_parser("warmup", help="compile every key of a manifest")
    s.add_argument("manifest", help=_MANIFEST)
    s.add_argument("--target", help=_TARGET)
    s.add_argument("--backends", help=_BACKENDS)
    s.add_argument("-j", "--jobs", type=int, help="parallel compiles (default: CPU count)")
    s.add_argument("--monitor", choices=MONITOR_MODES, help="monitor mode afterwards")
    s.add_argument(
        "--on-error",
        choices=ON_ERROR_MODES,
        help="stop at the first failure, or attempt every key (default: WARMKIT_ON_ERROR, "
        "else collect)",
    )
    s.add_argument("--json", action="store_true", help=_JSON)


def _add_bundle_commands(sub: Any) -> None:
    """``bundle build|install|keygen|check|inspect``."""
    s = sub.add_parser("bundle", help="build, install or inspect precompiled bundles")
    bsub = s.add_subparsers(dest="bundle_command", parser_class=_Parser, required=True)
    b = bsub.add_parser("build", help="compile a manifest's keys and pack the cache entries")
    b.add_argument("manifest", help=_MANIFEST)
    b.add_argument("-o", "--output", required=True, help="the .wkb file to write")
    b.add_argument("--target", help=_TARGET)
    b.add_argument("-j", "--jobs", type=int, help="parallel compiles (default: CPU count)")
    b.add_argument(
        "--sign", metavar="KEY", help="sign the bundle with this Ed25519 private key (PEM)"
    )
    b.add_argument(
        "--skip-refused",
        action="store_true",
        help="leave out (and list) the keys whose pinned identity this host cannot reproduce, "
        "instead of failing; the serving host compiles them. Other failures still fail",
    )
    b.add_argument("--json", action="store_true", help=_JSON)
    b = bsub.add_parser("install", help="verify a bundle and install its entries")
    b.add_argument("bundle", help=_BUNDLE)
    b.add_argument(
        "--target",
        help="the target the entries will serve; a bundle for another is refused "
        "(default: WARMKIT_TARGET, else this host's device)",
    )
    b.add_argument(
        "--trust",
        action="append",
        default=[],
        metavar="PUBKEY",
        help="require a signature by this Ed25519 public key (PEM); repeatable "
        "(default: WARMKIT_TRUST, else WARMKIT_BUNDLE_TRUST)",
    )
    _cache_dir_option(b, "install a backend's entries here instead of its default cache directory")
    b.add_argument("--json", action="store_true", help=_JSON)
    b = bsub.add_parser("keygen", help="make an Ed25519 key pair for signing bundles")
    b.add_argument("key", help="where to write the private key; the public key goes to KEY.pub")
    b = bsub.add_parser(
        "check", help="say per key whether it will hit on this host (or --target), and why not"
    )
    b.add_argument("bundle", help=_BUNDLE)
    b.add_argument(
        "--manifest", help="the keys to check (default: the manifest the bundle carries)"
    )
    b.add_argument("--target", help="the target the keys are for (default: the bundle's)")
    b.add_argument("--json", action="store_true", help=_JSON)
    b = bsub.add_parser("inspect", help="list a bundle's kernels, keys, target and sizes")
    b.add_argument("bundle", help=_BUNDLE)
    b.add_argument("--json", action="store_true", help=_JSON)


def _add_cache_commands(sub: Any) -> None:
    """``cache verify|info|prune|push|pull|clear-store``."""
    s = sub.add_parser("cache", help="check the backends' persistent compile caches")
    csub = s.add_subparsers(dest="cache_command", parser_class=_Parser, required=True)
    c = csub.add_parser(
        "verify",
        help="verify every cache entry (recorded sha256s and sizes, parseable metadata, "
        "non-empty binaries); exit 1 naming each bad entry",
    )
    _cache_dir_option(c, "verify this directory for BACKEND instead of its default cache directory")
    c.add_argument(
        "--quarantine",
        action="store_true",
        help="also move each bad entry into <cache>/.warmkit-quarantine/ (it is then recompiled)",
    )
    c.add_argument("--json", action="store_true", help=_JSON)
    c = csub.add_parser(
        "info", help="entries and bytes per kernel and backend, and which are stale here"
    )
    _cache_dir_option(c)
    c.add_argument("--json", action="store_true", help=_JSON)
    c = csub.add_parser(
        "prune",
        help="remove stale, old, or least recently used entries (one rename each)",
    )
    _cache_dir_option(c)
    c.add_argument("--max-size", metavar="SIZE", help="keep at most SIZE (e.g. 500M, 2G) per cache")
    c.add_argument("--older-than", metavar="AGE", help="remove entries unused for AGE (7d, 12h)")
    c.add_argument("--stale", action="store_true", help="remove entries stale for this host")
    c.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    c.add_argument("--keep", metavar="MANIFEST", help="never remove the entries MANIFEST needs")
    c.add_argument("--target", help="the target --keep's keys are for (default: this device)")
    c.add_argument("--json", action="store_true", help=_JSON)
    for verb, what in (("push", "copy complete local entries to"), ("pull", "install entries of")):
        c = csub.add_parser(verb, help=f"{what} a store (redis://..., or a directory)")
        c.add_argument("url", help="the store: redis://host:port/db, rediss://..., or a directory")
        _cache_dir_option(c, f"{verb} BACKEND's entries of DIR instead of its default cache")
        c.add_argument("--json", action="store_true", help=_JSON)
    c = csub.add_parser("clear-store", help="delete every entry of a store (a fresh start)")
    c.add_argument("url", help="the store: redis://host:port/db, rediss://..., or a directory")
    c.add_argument("--dry-run", action="store_true", help="say what would go; delete nothing")
    c.add_argument("--json", action="store_true", help=_JSON)


def _add_process_commands(sub: Any) -> None:
    """``record`` and ``run``: a command run under warmkit (the startup hook)."""
    s = sub.add_parser("record", help="run a command, recording every runtime JIT compile")
    s.add_argument("-o", "--output", required=True, help="the manifest to record into ({rank} ok)")
    s.add_argument("--monitor", choices=("warn", "error"), help="monitor mode in the command")
    s.add_argument("--json", action="store_true", help=_JSON)
    s.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")

    s = sub.add_parser("run", help="run a command warmed up from a manifest, monitor armed")
    s.add_argument("-m", "--manifest", required=True, help="the manifest to warm before CMD runs")
    s.add_argument("--monitor", choices=MONITOR_MODES, help="monitor mode afterwards")
    s.add_argument("--record", help="also record runtime compiles into this manifest")
    s.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")


def _add_check_commands(sub: Any) -> None:
    """``explain`` and ``coverage``: checks of a manifest, nothing compiles."""
    s = sub.add_parser("explain", help="say why a manifest's keys miss a bundle or a cache")
    s.add_argument("manifest", help="a manifest (declared or recorded keys)")
    s.add_argument("--bundle", help="check against this bundle (default: the backends' caches)")
    _cache_dir_option(s, "check this directory for BACKEND instead of its default cache directory")
    s.add_argument("--target", help="the target the keys are for (default: this host's device)")
    s.add_argument("--kernel", help="only this kernel's keys")
    s.add_argument("--key", help="only keys whose text contains KEY")
    s.add_argument("--json", action="store_true", help=_JSON)

    s = sub.add_parser("coverage", help="check that a manifest covers what a run compiled")
    s.add_argument("manifest", help="the deployment's manifest (declared and recorded)")
    s.add_argument("--recorded", required=True, help="the manifest `warmkit record` wrote")
    s.add_argument("--target", help="target to specialize declared keys for (default cuda:90)")
    s.add_argument("--json", action="store_true", help=_JSON)


def _cache_dir_option(
    parser: argparse.ArgumentParser,
    help: str = "use this directory for BACKEND instead of its default cache directory",
) -> None:
    parser.add_argument(
        "--cache-dir", action="append", default=[], metavar="BACKEND=DIR", help=help
    )
