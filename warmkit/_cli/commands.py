"""The ``warmkit`` command line.

Exit codes (also in ``warmkit --help``):

* 0: ok (also when stdout is a pipe closed early, as ``warmkit plan m.json | head``);
* 1: something failed: a compile error, a backend that is missing or cannot
  compile here (reported per key, with the report), a warmup that compiled
  nothing because every key was filtered out, a bundle that was refused
  (fingerprint or target mismatch, corruption, bad signature), bad cache entries;
* 2: usage errors: bad arguments, an unknown target or backend name, a
  manifest or bundle that does not exist or cannot be read, a kernel it names
  that cannot be loaded;
* 130: interrupted (SIGINT / Ctrl-C): queued compiles are cancelled at once,
  and the report so far is printed, marked cancelled.
* 1 also: ``warmkit coverage`` found specializations the manifest misses;
  ``warmkit record``/``warmkit run`` return the command's own exit code;

An error prints one line; ``-v`` adds the traceback and full compiler logs. With
``--json``, stdout is one JSON document: anything else written to stdout meanwhile
(a library's log lines, C code, the command of ``record``/``run``) goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

from .._exceptions import (
    BackendUnavailableError,
    BundleError,
    ManifestError,
    PluginLoadError,
    WarmupError,
    not_in_report,
)
from .._version import __version__
from .args import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, make_parser
from .output import json_stdout, print_json

__all__ = ["main"]

logger = logging.getLogger(__name__)


def _versions() -> str:
    from .._plugin.discovery import BACKENDS_GROUP, KERNELS_GROUP, discover

    lines = [f"warmkit {__version__}"]
    for group in (BACKENDS_GROUP, KERNELS_GROUP):
        for info in discover(group):
            lines.append(f"  {group} {info.name}: {info.distribution} {info.version}")
    return "\n".join(lines)


def _cmd_list(args: argparse.Namespace) -> int:
    from .._plugin.discovery import BACKENDS_GROUP, KERNELS_GROUP, discover, get_backend

    backends = []
    for info in discover(BACKENDS_GROUP):
        row: dict[str, Any] = {
            "name": info.name,
            "distribution": info.distribution,
            "distribution_version": info.version,
            "entry_point": info.value,
        }
        try:
            status = get_backend(info.name).available()
            row |= {
                "available": status.ok,
                "version": status.version,
                "reason": status.reason,
                "install_hint": status.install_hint,
            }
        except Exception as exc:  # noqa: BLE001 -- one broken plugin must not hide the others
            row |= {"available": False, "version": None, "reason": str(exc), "install_hint": None}
        if info.conflicts:
            row["conflicts"] = list(info.conflicts)
        if info.replaces:
            row["replaces"] = info.replaces
        backends.append(row)
    kernels = [
        {
            "name": i.name,
            "distribution": i.distribution,
            "distribution_version": i.version,
            "entry_point": i.value,
            **({"conflicts": list(i.conflicts)} if i.conflicts else {}),
            **(_kernel_problem(i.name) if args.check else {}),
        }
        for i in discover(KERNELS_GROUP)
    ]
    code = EXIT_FAILED if any("problem" in k for k in kernels) else EXIT_OK
    if args.json:
        print_json(json.dumps({"backends": backends, "kernels": kernels}, indent=2))
        return code
    print("backends:")
    for b in backends:
        state = "available" if b["available"] else "unavailable"
        extra = f" ({b['reason']})" if b["reason"] else ""
        hint = f" -> {b['install_hint']}" if b["install_hint"] and not b["available"] else ""
        ver = f" {b['version']}" if b["version"] else ""
        print(
            f"  {b['name']:<12} {state}{ver}{extra}{hint}  [{b['distribution']} {b['distribution_version']}]"
        )
    if not backends:
        print("  (none)")
    print("kernels:")
    for k in kernels:
        print(
            f"  {k['name']:<28} {k['entry_point']}  [{k['distribution']} {k['distribution_version']}]"
        )
        if "problem" in k:
            print(f"    UNUSABLE: {k['problem']}")
    if not kernels:
        print("  (none)")
    return code


def _kernel_problem(name: str) -> dict[str, str]:
    """``{"problem": why}`` when a kernel entry point would be refused by ``plan``/``warmup``.

    A raw ``@triton.jit`` function (or anything not a ``JitKernel`` subclass)
    installs and lists fine but plans nothing; ``list --check`` says so up
    front. Opt-in: loading a kernel imports its module (torch, for some).
    """
    from .._plugin.discovery import load_kernel

    try:
        load_kernel(name)
    except (LookupError, TypeError, PluginLoadError) as exc:
        return {"problem": f"{exc}; `warmkit plan` and `warmup` refuse it"}
    return {}


def _cmd_plan(args: argparse.Namespace) -> int:
    from .._registry.recorded import resolve_recorded
    from .._registry.registry import WarmupRegistry

    registry = WarmupRegistry.load(args.manifest)
    target = args.target or _envs_target()
    if target is not None:
        from .._plugin.discovery import check_target

        backends: set[str | None] = {r.kernel_cls.backend for r in registry}
        backends |= {e.backend for e in registry.recorded()}
        check_target(target, sorted(b for b in backends if b is not None))
    plan = {name: [repr(k) for k in keys] for name, keys in registry.plan().items()}
    recorded: dict[str, list[str]] = {}
    for item in resolve_recorded(registry.recorded()):
        e = item.entry
        if item.kernel is not None:
            line = repr(item.key)
        elif item.error is not None:
            line = f"CANNOT PLAN ({type(item.error).__name__}: {item.error}) {e.id}"
        else:
            line = f"NOT REPLAYABLE ({e.reason}) {e.id}"
        recorded.setdefault(e.name, []).append(line)
    modules = _plan_modules(registry)
    if args.json:
        out = plan | {"recorded": recorded} if recorded else dict(plan)
        listed = [
            {"module": m.module, "distribution": m.distribution, "file": m.file} for m in modules
        ]
        print_json(json.dumps(out | {"modules": listed}, indent=2))
        return EXIT_OK
    notes = _tuning_notes(registry, target)
    for title, section in (("", plan), (" [recorded]", recorded)):
        for name, keys in section.items():
            print(f"{name}{title}: {len(keys)} key(s)")
            for key in keys:
                note = notes.get((name, key)) if not title else None
                print(f"  {key}" + (f"  [{note}]" if note else ""))
    print("modules this manifest imports (a manifest names code):")
    for m in modules:
        where = f"distribution {m.distribution}" if m.distribution else "no installed distribution"
        print(f"  {m.module}  ({where})  {m.file or '(not found)'}")
    n = sum(map(len, plan.values())) + sum(map(len, recorded.values()))
    print(f"total: {n} key(s) in {len(plan) + len(recorded)} kernel(s)")
    return EXIT_OK


def _plan_modules(registry: Any) -> list[Any]:
    """The modules a loaded manifest imported, with their distributions (``_manifest_modules``)."""
    from .._plugin.discovery import kernel_ref
    from .._registry.manifest.modules import manifest_modules

    classes = {r.kernel_cls for r in registry}
    refs = [kernel_ref(c) for c in classes] + [e.kernel for e in registry.recorded() if e.kernel]
    return sorted(manifest_modules(refs), key=lambda m: m.module)


def _tuning_notes(registry: Any, target: str | None) -> dict[tuple[str, str], str]:
    """(kernel, repr(key)) -> what its backend says about tuning (autotuned keys only)."""
    from .._plugin.components import capability
    from .._plugin.contract import TuningPlan
    from .._plugin.discovery import call_hook, get_backend

    out: dict[tuple[str, str], str] = {}
    for name, (kernel, keys) in registry.resolve().items():
        backend_name = type(kernel).backend
        if backend_name is None:
            continue
        try:
            backend = get_backend(backend_name, kernel=name)
        except Exception as exc:  # noqa: BLE001 - plan lists keys even where the backend is missing
            logger.debug("plan: no tuning notes for %s (backend %s: %s)", name, backend_name, exc)
            continue
        planner = capability(backend, TuningPlan)
        if planner is not None:
            notes = call_hook(
                backend_name, "tuning_plan", planner.tuning_plan, kernel, keys, target
            )
            for key, note in notes.items():
                out[(name, repr(key))] = note
    return out


def _cmd_warmup(args: argparse.Namespace) -> int:
    from .._registry.registry import WarmupRegistry
    from .._warmup.config import WarmupConfig
    from .._warmup.orchestrate import warmup

    registry = WarmupRegistry.load(args.manifest)
    overrides: dict[str, Any] = {}
    if args.on_error:
        overrides["on_error"] = args.on_error
    elif "WARMKIT_ON_ERROR" not in os.environ:
        # An operator wants every failure at once; the library default stays fail-fast.
        overrides["on_error"] = "collect"
    if args.target:
        overrides["target"] = args.target
    if args.backends is not None:
        overrides["backends"] = args.backends
    if args.jobs is not None:
        overrides["jobs"] = args.jobs
    if args.monitor:
        overrides["monitor"] = args.monitor
    if args.json:
        overrides["progress"] = "off"
    config = WarmupConfig.from_env(**overrides)
    try:
        report = warmup(config, registry)
    except WarmupError as exc:
        if exc.report is None:
            raise
        _print_report(exc.report, args.json, args.verbose)
        print(f"warmkit: {exc.report.count('failed')} key(s) failed", file=sys.stderr)
        return EXIT_FAILED
    _print_report(report, args.json)
    if not report.warm:
        print(
            f"warmkit: nothing was warmed up: all {len(report.entries)} key(s) were skipped by "
            f"the backends allow-list {list(config.backends or ())}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


def _cmd_bundle(args: argparse.Namespace) -> int:
    from .._cache.bundle import inspect_bundle, install_bundle
    from .._registry.registry import WarmupRegistry
    from .._warmup.build import build_bundle

    if args.bundle_command == "build":
        registry = WarmupRegistry.load(args.manifest)
        meta = build_bundle(
            registry,
            args.output,
            target=args.target or _envs_target(),
            jobs=args.jobs,
            progress="off" if args.json else "auto",
            sign=args.sign,
            skip_refused=args.skip_refused,
        )
        info = inspect_bundle(args.output)
        if args.json:  # the refused keys were logged (a WARNING), each with its reason
            refused = {"refused": meta["refused"]} if args.skip_refused else {}
            extra = {"output": args.output} | refused
            print_json(json.dumps(info["totals"] | extra, indent=2))
        else:
            t = info["totals"]
            print(
                f"wrote {args.output}: {t['kernels']} kernel(s), {t['keys']} key(s), "
                f"{t['files']} file(s), {t['bytes']:,} bytes, target {meta['target'] or 'this device'}"
            )
        return EXIT_OK
    if args.bundle_command == "install":
        dirs = _cache_dirs(args.cache_dir)  # install_bundle checks them against the bundle
        result = install_bundle(
            args.bundle,
            cache_dirs=dirs or None,
            target=args.target or None,
            trust=args.trust or None,
        )
        summary = {
            "installed": len(result.installed),
            "unchanged": len(result.unchanged),
            "replaced": len(result.replaced),
            "directories": result.directories,
            "signed_by": result.signed_by,
            "prepared": result.prepared,
        }
        if args.json:
            print_json(json.dumps(summary, indent=2))
        else:
            signed = f" (signature by trusted key {result.signed_by})" if result.signed_by else ""
            print(
                f"installed {summary['installed']}, unchanged {summary['unchanged']}, "
                f"replaced {summary['replaced']} entr(ies) into "
                + ", ".join(f"{k}: {v}" for k, v in result.directories.items())
                + signed
            )
            for name, what in result.prepared.items():
                print(f"{name}: {what}")
        return EXIT_OK
    if args.bundle_command == "check":
        return _cmd_explain(args, bundle=args.bundle)
    if args.bundle_command == "keygen":
        from .._cache.signing import generate_key

        private, public = generate_key(args.key)
        print(f"wrote private key {private} (keep it secret) and public key {public}")
        return EXIT_OK
    info = inspect_bundle(args.bundle)
    if args.json:
        print_json(json.dumps(info, indent=2))
        return EXIT_OK
    t = info["totals"]
    print(
        f"bundle {args.bundle}: target {info['target'] or 'build host device'}, created {info['created']}"
    )
    print(
        f"  {t['kernels']} kernel(s), {t['keys']} key(s), {t['files']} file(s), {t['bytes']:,} bytes"
    )
    sig = info["signature"]
    print(
        f"  signature: by key {sig.get('key_id')} (checked at install against trusted keys)"
        if sig["signed"]
        else "  signature: unsigned (only its sha256s protect it; see docs/bundles.md)"
    )
    for name, b in info["backends"].items():
        size = sum(e["size"] for e in b["entries"])
        print(f"  backend {name}: {len(b['entries'])} file(s), {size:,} bytes")
        for field, value in sorted(b["fingerprint"].items()):
            # ptxas --version is several lines: keep one line per field
            print(f"    {field}: {' / '.join(str(value).split(chr(10)))}")
        for r in b.get("tuned", []):
            print(
                f"    tuned: {r['kernel']} autotune key {r['autotune_key']} on {r['gpu']}: "
                f"config {r['winner']} {r['winner_config']}"
            )
    for name, keys in info["kernels"].items():
        print(f"  {name}: {len(keys)} key(s)")
        for key in keys:
            print(f"    {key}")
    return EXIT_OK


def _cache_dirs(items: Sequence[str], known: Sequence[str] | None = None) -> dict[str, str]:
    """``BACKEND=DIR`` options -> a dict; an unknown backend is a usage error naming the known ones."""
    dirs = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--cache-dir takes BACKEND=DIR, got {item!r}")
        if known is not None and name not in known:
            raise ValueError(
                f"--cache-dir names backend {name!r}, which is not one of "
                f"{', '.join(known) or '(none)'}"
            )
        dirs[name] = path
    return dirs


def _cache_backends(args: argparse.Namespace) -> Iterator[tuple[str, Any, str]]:
    """``(name, backend, cache directory)`` of every usable backend with a persistent cache."""
    from .._plugin.components import capability
    from .._plugin.contract import BundleCapable, CacheProbe
    from .._plugin.discovery import BACKENDS_GROUP, discover, get_backend

    names = [info.name for info in discover(BACKENDS_GROUP)]
    dirs = _cache_dirs(getattr(args, "cache_dir", []), names)
    for name in sorted(dirs) if dirs else names:
        backend = get_backend(name)
        cache: CacheProbe | BundleCapable | None = capability(backend, CacheProbe)
        if cache is None:
            cache = capability(backend, BundleCapable)
        if cache is None:
            continue  # no persistent cache
        if name not in dirs and not backend.available().ok:
            continue
        yield name, backend, dirs.get(name) or str(cache.cache_dir())


def _cmd_cache(args: argparse.Namespace) -> int:
    if args.cache_command != "verify":
        return _cmd_cache_upkeep(args)
    from .._cache.fleet import provenance_check
    from .._cache.integrity import iter_entries, verify_cache
    from .._plugin.contract import entry_check

    result: dict[str, Any] = {}
    for name, backend, root in _cache_backends(args):
        # entries that came from a store: their signature and signed sha256s too
        check = provenance_check(backend, entry_check(backend))
        bad = verify_cache(root, check, move=args.quarantine)
        result[name] = {
            "directory": root,
            "entries": sum(1 for _ in iter_entries(root)) + (len(bad) if args.quarantine else 0),
            "bad": bad,
        }
    n_bad = sum(len(r["bad"]) for r in result.values())
    if args.json:
        print_json(json.dumps(result, indent=2))
    else:
        for name, r in result.items():
            print(f"{name}: {r['directory']}: {r['entries']} entr(ies), {len(r['bad'])} bad")
            for entry, problems in r["bad"].items():
                moved = " (quarantined)" if args.quarantine else ""
                print(f"  BAD {entry}{moved}: {'; '.join(problems)}")
        if not result:
            print("no backend with a persistent cache is available")
    if n_bad:
        hint = "" if args.quarantine else "; rerun with --quarantine to move them aside"
        print(f"warmkit: {n_bad} bad cache entr(ies){hint}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _command(args: argparse.Namespace) -> list[str]:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ValueError(
            f"warmkit {args.command}: give the command after --, e.g. -- python serve.py"
        )
    from .startup import refuse_hookless

    refuse_hookless(args.command, cmd)
    return cmd


def _cmd_record(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .._registry.recorded import RecordedEntry, Recorder, expand_path, read_recorded
    from .startup import nothing_recorded_hint, record_refusal, run_under_hook

    cmd = _command(args)
    refusal = record_refusal(os.environ)
    if refusal is not None:
        raise ValueError(f"warmkit record: {refusal}")
    out = Path(args.output).absolute()
    env = dict(os.environ, WARMKIT_RECORD=str(out))
    env.pop("WARMKIT_MANIFEST", None)
    if args.monitor:
        env["WARMKIT_MONITOR"] = args.monitor
    before = set()
    plain = expand_path(out, 0) if "{rank}" in str(out) else out
    if "{rank}" not in str(out) and plain.exists():
        before = {e.id for e in read_recorded(plain)}
    rc = run_under_hook(cmd, env)
    paths = (
        sorted(out.parent.glob(out.name.replace("{rank}", "*"))) if "{rank}" in out.name else [out]
    )
    if not any(p.exists() for p in paths):
        # The run compiled nothing: say so with a valid, empty manifest, so the next
        # step of a CI chain (`record && coverage`, `run -m`) reads 0 instead of failing.
        Recorder(plain).ensure_written()
        paths = [plain]
    entries: dict[str, RecordedEntry] = {}
    for path in paths:
        if path.exists():
            for e in read_recorded(path):
                entries.setdefault(e.id, e)
    kernels = sorted({e.name for e in entries.values()})
    hint = nothing_recorded_hint(rc) if rc != 0 and not entries else None
    if hint is not None:
        logger.error("warmkit record: %s", hint)
    bad = [e for e in entries.values() if not e.replayable]
    summary = {
        "output": [str(p) for p in paths],
        "exit_code": rc,
        "kernels": len(kernels),
        "specializations": len(entries),
        "new": len(set(entries) - before),
        "unreplayable": [{"kernel": e.name, "reason": e.reason} for e in bad],
    }
    if args.json:
        print_json(json.dumps(summary, indent=2))
    else:
        print(
            f"recorded {summary['specializations']} specialization(s) of {len(kernels)} "
            f"kernel(s) ({summary['new']} new) into {', '.join(map(str, paths)) or out}"
        )
        for name in kernels:
            n = sum(1 for e in entries.values() if e.name == name)
            print(f"  {name}: {n}")
        for e in bad:
            print(f"  CANNOT REPLAY {e.name}: {e.reason}")
    return rc


def _cmd_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .startup import exec_under_hook

    cmd = _command(args)
    manifest = Path(args.manifest)
    if not manifest.is_file():
        raise FileNotFoundError(f"manifest {args.manifest!r} does not exist")
    env = dict(os.environ, WARMKIT_MANIFEST=str(manifest.absolute()))
    # The command becomes this process (exec): a hook that cannot import warmkit knows it by
    # this pid, and stops it rather than run it unwarmed (hook/sitecustomize.py).
    env["WARMKIT_COMMAND_PID"] = str(os.getpid())
    if args.monitor:
        env["WARMKIT_MONITOR"] = args.monitor
    if args.record:
        env["WARMKIT_RECORD"] = str(Path(args.record).absolute())
    exec_under_hook(cmd, env)


def _cmd_explain(args: argparse.Namespace, bundle: str | None = None) -> int:
    from .._warmup.explain import explain, explanations_json

    dirs = _cache_dirs(getattr(args, "cache_dir", None) or [])
    found = explain(
        args.manifest, bundle=bundle or getattr(args, "bundle", None), cache_dirs=dirs,
        target=args.target, kernel=getattr(args, "kernel", None), key=getattr(args, "key", None),
    )  # fmt: skip
    misses = sum(e.status == "miss" for e in found)
    if args.json:
        print_json(explanations_json(found))
    else:
        for e in found:
            print(e.line())
        print(f"{len(found)} key(s): {misses} miss(es)")
    return EXIT_FAILED if misses else EXIT_OK


def _cmd_coverage(args: argparse.Namespace) -> int:
    from .._registry.coverage import coverage
    from .._registry.recorded import read_recorded
    from .._registry.registry import WarmupRegistry

    registry = WarmupRegistry.load(args.manifest)
    report = coverage(registry, read_recorded(args.recorded), target=args.target)
    print_json(json.dumps(report.to_dict(), indent=2) if args.json else report.text())
    return EXIT_OK if report.ok else EXIT_FAILED


def _cmd_cache_upkeep(args: argparse.Namespace) -> int:
    from .._cache import upkeep as _cache
    from .._plugin.components import capability
    from .._plugin.contract import FleetCapable
    from .._warmup.explain import manifest_entries

    cmd = args.cache_command
    if cmd == "clear-store":
        return _cmd_clear_store(args)
    if cmd == "prune":
        limits = {
            "max_size": None if args.max_size is None else _cache.parse_size(args.max_size),
            "older_than": None if args.older_than is None else _cache.parse_age(args.older_than),
            "stale": args.stale,
            "dry_run": args.dry_run,
        }
        if limits["max_size"] is None and limits["older_than"] is None and not args.stale:
            raise ValueError("warmkit cache prune needs --max-size, --older-than or --stale")
    result: dict[str, Any] = {}
    for name, backend, root in _cache_backends(args):
        if cmd == "info":
            result[name] = _cache.cache_info(backend, root)
        elif cmd == "prune":
            keep = args.keep and manifest_entries(name, backend, args.keep, args.target)
            result[name] = _cache.prune_cache(backend, root, keep=keep or None, **limits)
        elif capability(backend, FleetCapable) is None:
            continue  # cannot address its entries in a store
        elif cmd == "push":
            result[name] = _cache.push_cache(backend, args.url, root)
        else:
            result[name] = _cache.pull_cache(backend, args.url, root)
    if args.json:
        print_json(json.dumps(result, indent=2, default=str))
        return EXIT_FAILED if any(r.get("refused") for r in result.values()) else EXIT_OK
    for name, r in result.items():
        if cmd == "info":
            print(f"{name}: {r['directory']}: {r['entries']} entr(ies), {r['bytes']} bytes")
            for kernel, k in r["kernels"].items():
                stale = f", {k['stale']} stale" if k["stale"] else ""
                print(f"  {kernel}: {k['entries']} entr(ies), {k['bytes']} bytes{stale}")
            for entry, why in r["stale"].items():
                print(f"  STALE {entry}: {why}")
        elif cmd == "prune":
            verb = "would remove" if args.dry_run else "removed"
            print(f"{name}: {r['directory']}: {verb} {len(r['removed'])} entr(ies), {r['freed']} "
                  f"bytes; {r['kept']} kept ({r['bytes']} bytes)")  # fmt: skip
            for entry, why in r["removed"].items():
                print(f"  {entry}: {why}")
        elif cmd == "push":
            print(f"{name} -> {r['store']}: {len(r['pushed'])} pushed, {len(r['present'])} "
                  f"already there, {len(r['skipped'])} skipped")  # fmt: skip
            for entry, why in r["skipped"].items():
                print(f"  skipped {entry}: {why}")
        else:
            print(f"{name} <- {r['store']}: {len(r['pulled'])} pulled, {len(r['present'])} "
                  f"already here, {len(r['refused'])} refused")  # fmt: skip
            for entry in r["refused"]:
                print(f"  REFUSED {entry} (see the log above)")
    if not result:
        print("no backend with a persistent cache is available")
    return EXIT_FAILED if any(r.get("refused") for r in result.values()) else EXIT_OK


def _cmd_clear_store(args: argparse.Namespace) -> int:
    from .._cache.upkeep import clear_store

    result = clear_store(args.url, dry_run=args.dry_run)
    if args.json:
        print_json(json.dumps(result, indent=2))
    else:
        verb = "would delete" if args.dry_run else "deleted"
        print(f"{result['store']}: {verb} {len(result['found'])} entr(ies)")
    return EXIT_OK


def _envs_target() -> str | None:
    from .. import _envs

    return _envs.get("WARMKIT_TARGET")


def _print_report(report: Any, as_json: bool, verbose: int = 0) -> None:
    if as_json:
        print_json(report.to_json())
    else:
        print(report.table())
    if verbose:  # the full compiler logs that the table cut to their first and last lines
        for e in report.failures:
            if e.exception is not None:
                print(f"--- {e.kernel} {e.key!r}:", file=sys.stderr)
                traceback.print_exception(e.exception, file=sys.stderr)


def _quiet_fp_fusion_advice() -> None:
    """Leave out Triton 3.9's advice to set ``TRITON_DEFAULT_FP_FUSION`` in warmkit's commands.

    Any value of it, Triton's default ``1`` included, is part of Triton's cache
    keys: a bundle built where it is set misses (and is refused) on every host
    where it is not. Set it on every host or on none (docs/bundles.md).
    """
    import warnings

    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION is unset")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = make_parser()
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(not_in_report)  # a failed warmup's table says it: not twice
    logging.basicConfig(
        level=logging.DEBUG
        if args.verbose > 1
        else logging.INFO
        if args.verbose
        else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        handlers=[handler],  # installed only where the root logger has none yet
    )
    _quiet_fp_fusion_advice()
    if args.version:
        print(_versions())
        return EXIT_OK
    commands = {
        "list": _cmd_list,
        "plan": _cmd_plan,
        "warmup": _cmd_warmup,
        "bundle": _cmd_bundle,
        "cache": _cmd_cache,
        "record": _cmd_record,
        "run": _cmd_run,
        "coverage": _cmd_coverage,
        "explain": _cmd_explain,
    }
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if getattr(args, "manifest_modules", None):  # for this command (and `run`'s child)
        os.environ["WARMKIT_MANIFEST_MODULES"] = args.manifest_modules
    try:
        with json_stdout(bool(getattr(args, "json", False))):
            return commands[args.command](args)
    except KeyboardInterrupt as exc:
        report = getattr(exc, "report", None)
        if report is not None:
            _print_report(report, getattr(args, "json", False))
        print("warmkit: cancelled (SIGINT)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`warmkit plan m.json | head`): not an error. Point stdout
        # at devnull so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except (WarmupError, BundleError) as exc:  # before ValueError: BundleError is one
        _error(exc, args.verbose)
        return EXIT_FAILED
    except (
        ManifestError,
        BackendUnavailableError,
        PluginLoadError,
        FileNotFoundError,
        FileExistsError,
        ValueError,
        TypeError,
        LookupError,
    ) as exc:
        _error(exc, args.verbose)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 -- the CLI turns any error into one line
        _error(exc, args.verbose)
        return EXIT_FAILED


def _error(exc: BaseException, verbose: int) -> None:
    if verbose:
        traceback.print_exception(exc, file=sys.stderr)
    lines = [*str(exc).splitlines(), *getattr(exc, "__notes__", ())]
    first = " ".join(line.strip() for line in lines if line.strip()) or type(exc).__name__
    more = "" if verbose else " (run with -v for the traceback)"
    print(f"warmkit: error: {type(exc).__name__}: {first}{more}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
