"""The fault matrix: break warmkit on purpose, from the outside, and count how each case ended.

    python benchmarks/fault_matrix.py [--out results.json] [--only SUBSTRING] [--tiny]

Every case runs the real ``warmkit`` CLI (or a short Python script) in a fresh
process, with real Triton compiles for ``cuda:90`` into a private Triton cache,
and is classified as one of:

* ``clear error``: refused, and the output names what the case says it must (kernel, key, path, field...);
* ``accepted``: valid input, done, and the result checked;
* ``vague``: refused, but without naming what it should (or a valid case refused);
* ``raw traceback``: a Python traceback reached the operator;
* ``hang``: no exit within the case's time limit;
* ``silent``: exit 0 (or a result) where an error or a different result was due.

``docs/reliability.md`` gives the counts of the last run; exit status 1 when any
case is silent, a hang or a raw traceback. ``--tiny`` runs only the few
configuration cases in ``TINY`` (no compile, no worker, no store): the suite's
smoke test (``tests/test_benchmarks.py``) runs it so that the script cannot rot.
"""

from __future__ import annotations

import argparse
import atexit
import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
TARGET = "cuda:90"
KINDS = ("clear error", "accepted", "vague", "raw traceback", "hang", "silent")
#: the cases ``--tiny`` runs: refused configurations, each a few seconds (one CLI start)
TINY = ("WARMKIT_BACKENDS=tritn", "--backends tritn", "WARMKIT_JOBS=0", "-j 0")


class Env:
    """A private work directory, Triton cache and environment for a group of cases."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cache = root / "triton-cache"
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("WARMKIT_", "TRITON_"))
        }
        self.env["TRITON_CACHE_DIR"] = str(self.cache)
        self.env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(root)])

    def run(
        self,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        timeout: float = 180,
        stdin: str | None = None,
    ) -> tuple[int | None, str, str]:
        try:
            p = subprocess.run(
                argv,
                env=self.env | (env or {}),
                cwd=self.root,
                capture_output=True,
                text=True,
                timeout=timeout,
                input=stdin,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            return None, str(exc.stdout or ""), str(exc.stderr or "")
        return p.returncode, p.stdout, p.stderr

    def cli(self, *args: str, env: dict[str, str] | None = None, timeout: float = 180):
        return self.run([sys.executable, "-m", "warmkit", *args], env=env, timeout=timeout)

    def py(self, code: str, *, env: dict[str, str] | None = None, timeout: float = 180):
        return self.run([sys.executable, "-c", code], env=env, timeout=timeout)


def manifest(env: Env, name: str = "m.json", **space: object) -> Path:
    code = (
        "import warmkit; from triton_backend._kernels import Add\n"
        "reg = warmkit.WarmupRegistry()\n"
        f"reg.add(Add, **{space or {'n': [64, 65], 'block': 128}!r})\n"
        f"reg.save({str(env.root / name)!r})\n"
    )
    rc, _out, err = env.py(code)
    assert rc == 0, err
    return env.root / name


def edit_json(path: Path, fn: Callable[[dict], None], name: str) -> Path:
    data = json.loads(path.read_text())
    fn(data)
    out = path.with_name(name)
    out.write_text(json.dumps(data))
    return out


def entries(cache: Path) -> list[Path]:
    return (
        sorted(p for p in cache.iterdir() if p.is_dir() and not p.name.startswith("."))
        if cache.exists()
        else []
    )


def damage_first(cache: Path, suffix: str, how: str) -> Path:
    entry = next(e for e in entries(cache) if list(e.glob(f"*{suffix}")))
    f = next(p for p in entry.glob(f"*{suffix}") if not p.name.startswith(("__grp__", "warmkit-")))
    data = f.read_bytes()
    if how == "truncate":
        f.write_bytes(data[: max(1, len(data) // 3)])
    elif how == "flip":
        b = bytearray(data)
        b[len(b) // 2] ^= 1
        f.write_bytes(bytes(b))
    else:
        f.write_bytes(b"")
    return entry


def rewrite_bundle(src: Path, dst: Path, *, meta=None, member=None) -> Path:
    with tarfile.open(src, "r:gz") as tin, tarfile.open(dst, "w:gz") as tout:
        for info in tin.getmembers():
            data = tin.extractfile(info).read()
            if info.name == "bundle.json" and meta is not None:
                doc = json.loads(data)
                meta(doc)
                data = json.dumps(doc).encode()
            elif member is not None:
                data = member(info.name, data)
            info.size = len(data)
            tout.addfile(info, io.BytesIO(data))
    return dst


# -- classification ----------------------------------------------------------------------------


def classify(
    result,
    *,
    expect: str,
    words=(),
    check: Callable[[int, str, str], bool] | None = None,
    codes=None,
) -> tuple[str, str]:
    """``expect`` is "error" (words must appear) or "accept" (``check`` must hold)."""
    rc, out, err = result
    text = out + err
    if rc is None:
        return "hang", "timed out"
    if "Traceback (most recent call last)" in err:
        return "raw traceback", err.strip().splitlines()[-1][:200]
    if expect == "error":
        if rc == 0 and not (check and check(rc, out, err)):
            return "silent", "exit 0"
        if codes is not None and rc not in codes:
            return "vague", f"exit {rc}, expected {codes}"
        missing = [w for w in words if w not in text]
        if missing:
            return "vague", f"does not name {missing}: {err.strip()[:200]}"
        return "clear error", (err.strip().splitlines() or [""])[-1][:200]
    if rc != 0:
        return "vague", f"valid case refused (exit {rc}): {err.strip()[:200]}"
    if check is not None and not check(rc, out, err):
        return "silent", f"exit 0 but the result is wrong: {out.strip()[:200]}"
    return "accepted", ""


# -- the shared store (issue 26): its trouble never fails a key, its data is never a path ------


def _tamper(client, key: str, fn: Callable[[dict, dict], None], dest: str | None = None) -> None:
    """Rewrite store entry ``key`` (at ``dest``) as a writer of the Redis could, hashes made valid."""
    raw = client.hgetall(f"warmkit:entry:{key}")
    files = {k[5:].decode(): v for k, v in raw.items() if k.startswith(b"file:")}
    meta = json.loads(raw[b"meta"])
    fn(files, meta)
    meta["files"] = {
        n: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for n, d in files.items()
    }
    name = f"warmkit:entry:{dest or key}"
    client.delete(name)
    client.hset(
        name, mapping={"meta": json.dumps(meta)} | {f"file:{n}": d for n, d in files.items()}
    )


def store_cases(case: Callable[..., None], tmp: Path) -> None:
    """Configuration, poisoning and server trouble of a store, with a real redis-server."""
    from redis_server import RedisServer

    from warmkit._cache.signing import generate_key

    e = Env(tmp / "store")
    e.root.mkdir(parents=True)
    m = manifest(e, dtype=["float32", "float16"], n=[64, 65], block=[64, 128])  # 8 entries
    err, acc = "error", "accept"
    store = {"WARMKIT_STORE": str(e.root / "dir-store")}
    (private, public) = generate_key(e.root / "fleet.pem")
    for name, env, words in [
        ("WARMKIT_TRUST empty", {"WARMKIT_TRUST": ""}, ["WARMKIT_TRUST"]),
        (
            "WARMKIT_TRUST and WARMKIT_BUNDLE_TRUST differ",
            {"WARMKIT_TRUST": str(public), "WARMKIT_BUNDLE_TRUST": "/x.pub"},
            ["WARMKIT_TRUST", "WARMKIT_BUNDLE_TRUST"],
        ),
        ("WARMKIT_TRUST unreadable", {"WARMKIT_TRUST": "/nonexistent.pub"}, ["/nonexistent.pub"]),
        ("WARMKIT_SIGNING_KEY unreadable", {"WARMKIT_SIGNING_KEY": "/no.pem"}, ["/no.pem"]),
        ("WARMKIT_LEASE_SECONDS=inf", {"WARMKIT_LEASE_SECONDS": "inf"}, ["WARMKIT_LEASE_SECONDS"]),
        ("store URL with a bad port", {"WARMKIT_STORE": "redis://127.0.0.1:x/0"}, ["127.0.0.1:x"]),
    ]:
        case(
            f"store: {name}",
            lambda env=env, words=words: classify(
                e.cli("warmup", str(m), "--target", TARGET, env=store | env),
                expect=err,
                words=words,
                codes=[2],
            ),
        )
    server = RedisServer().start()
    try:
        client = server.client()
        sign = {"WARMKIT_STORE": server.url, "WARMKIT_SIGNING_KEY": str(private)}
        seed = e.cli("warmup", str(m), "--target", TARGET, env=sign)
        assert seed[0] == 0, seed[2]
        keys = sorted(k.decode()[len("warmkit:entry:") :] for k in client.keys("warmkit:entry:*"))
        outside = e.root / "outside"
        outside.mkdir()

        def forge(files, _meta):
            files["add_kernel.cubin"] = files["add_kernel.cubin"][:-16] + bytes(16)

        def escape(files, _meta):
            files[f"../../../../../../../..{outside}/owned"] = b"x"

        _tamper(client, keys[0], forge)
        _tamper(client, keys[1], escape)
        _tamper(client, keys[2], lambda _f, meta: meta.update(key=keys[3]), dest=keys[3])
        other = {"TRITON_CACHE_DIR": str(e.root / "host-b"), "WARMKIT_TRUST": str(public)}

        def refused_all(rc, out, err):
            report = json.loads(out)
            return (
                sorted(report["store_refused"]) == [keys[0], keys[1], keys[3]]
                and not list(outside.iterdir())
                and report["totals"]["compiled"] == 3
            )

        case(
            "store: forged, ../-named and moved entries under trust",
            lambda: classify(
                e.cli("warmup", str(m), "--target", TARGET, "--json", env=sign | other),
                expect=acc,
                check=refused_all,
            ),
        )
        client.set(f"warmkit:entry:{keys[0]}", b"a plain string")
        case(
            "store: WRONGTYPE at an entry",
            lambda: classify(
                e.cli(
                    "warmup",
                    str(m),
                    "--target",
                    TARGET,
                    "--json",
                    env=sign | other | {"TRITON_CACHE_DIR": str(e.root / "host-c")},
                ),
                expect=acc,
                check=lambda rc, out, err: list(json.loads(out)["store_refused"]) == [keys[0]],
            ),
        )
        _tamper(client, keys[1], lambda _f, meta: meta.pop("signature"))
        case(
            "store: unsigned entry, trust and store_required",
            lambda: classify(
                e.cli(
                    "warmup",
                    str(m),
                    "--target",
                    TARGET,
                    env=sign
                    | other
                    | {"TRITON_CACHE_DIR": str(e.root / "host-d"), "WARMKIT_STORE_REQUIRED": "1"},
                ),
                expect=err,
                words=[server.url, keys[1], "unsigned"],
                codes=[1],
            ),
        )
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", 1)
        client.flushall()
        case(
            "store: Redis out of memory",
            lambda: classify(
                e.cli(
                    "warmup",
                    str(m),
                    "--target",
                    TARGET,
                    env=sign | other | {"TRITON_CACHE_DIR": str(e.root / "host-e")},
                ),
                expect=acc,
                check=lambda rc, out, err: err.count("OutOfMemoryError") == 1,
            ),
        )
    finally:
        server.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write the cases and counts as JSON here")
    ap.add_argument("--only", help="run only cases whose name contains this")
    ap.add_argument("--tiny", action="store_true", help=f"run only the cases {', '.join(TINY)}")
    args = ap.parse_args()
    results: list[dict] = []
    tmp = Path(tempfile.mkdtemp(prefix="warmkit-faults-"))
    # removed at exit, however the run ends
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)

    def case(name: str, fn: Callable[[], tuple[str, str]]) -> None:
        if (args.only and args.only not in name) or (args.tiny and name not in TINY):
            return
        t0 = time.perf_counter()
        try:
            kind, note = fn()
        except Exception as exc:  # noqa: BLE001 -- a broken case is reported, not hidden
            kind, note = "vague", f"case setup failed: {type(exc).__name__}: {exc}"
        results.append(
            {
                "case": name,
                "ended": kind,
                "note": note,
                "seconds": round(time.perf_counter() - t0, 2),
            }
        )
        print(f"{kind:14} {name}  {note}", flush=True)

    e = Env(tmp / "base")
    e.root.mkdir(parents=True)
    m = manifest(e)
    err, acc = "error", "accept"

    # -- configuration: nothing is skipped silently
    case(
        "WARMKIT_BACKENDS=tritn",
        lambda: classify(
            e.cli("warmup", str(m), "--target", TARGET, env={"WARMKIT_BACKENDS": "tritn"}),
            expect=err,
            words=["tritn", "triton"],
            codes=[2],
        ),
    )
    case(
        "--backends tritn",
        lambda: classify(
            e.cli("warmup", str(m), "--target", TARGET, "--backends", "tritn"),
            expect=err,
            words=["tritn", "triton"],
            codes=[2],
        ),
    )
    case(
        "WARMKIT_PLUGINS=tritn",
        lambda: classify(
            e.cli("warmup", str(m), "--target", TARGET, env={"WARMKIT_PLUGINS": "tritn"}),
            expect=err,
            words=["tritn"],
            codes=[2],
        ),
    )
    case(
        "every key filtered out",
        lambda: classify(
            e.cli("warmup", str(m), "--target", TARGET, "--backends", "tilelang"),
            expect=err,
            words=["nothing was warmed up"],
            codes=[1],
        ),
    )
    case(
        "WARMKIT_JOBS=0",
        lambda: classify(
            e.cli("warmup", str(m), env={"WARMKIT_JOBS": "0"}),
            expect=err,
            words=["WARMKIT_JOBS"],
            codes=[2],
        ),
    )
    case(
        "WARMKIT_ENABLED empty",
        lambda: classify(
            e.cli("warmup", str(m), env={"WARMKIT_ENABLED": ""}),
            expect=err,
            words=["WARMKIT_ENABLED"],
            codes=[2],
        ),
    )
    case(
        "WARMKIT_COMPILE_TIMEOUT=-1",
        lambda: classify(
            e.cli("warmup", str(m), env={"WARMKIT_COMPILE_TIMEOUT": "-1"}),
            expect=err,
            words=["WARMKIT_COMPILE_TIMEOUT"],
            codes=[2],
        ),
    )
    case(
        "-j 0",
        lambda: classify(e.cli("warmup", str(m), "-j", "0"), expect=err, words=["jobs"], codes=[2]),
    )
    case(
        "no GPU, no target",
        lambda: classify(
            e.cli("warmup", str(m)),
            expect=err,
            words=["--target cuda:90", "WarmupConfig(target="],
            codes=[1],
        ),
    )

    def one_line(result, words):
        kind, note = classify(result, expect=err, words=words, codes=[2])
        if kind == "clear error" and len(result[2].strip().splitlines()) != 1:
            return "vague", f"{len(result[2].strip().splitlines())} lines of output"
        return kind, note

    for cmd in (["warmup"], ["plan"], ["bundle", "build"]):
        extra = ["-o", str(e.root / "x.wkb")] if cmd[0] == "bundle" else []
        case(
            f"{' '.join(cmd)} --target cuda:999",
            lambda cmd=cmd, extra=extra: one_line(
                e.cli(*cmd, str(m), "--target", "cuda:999", *extra), ["cuda:999", "supported"]
            ),
        )
    case(
        "--target bogus",
        lambda: classify(
            e.cli("warmup", str(m), "--target", "bogus"),
            expect=err,
            words=["bogus", "accepted"],
            codes=[2],
        ),
    )
    case(
        "unknown subcommand",
        lambda: classify(e.cli("warmpu"), expect=err, words=["warmpu"], codes=[2]),
    )

    # -- manifests
    case(
        "renamed space field",
        lambda: classify(
            e.cli(
                "plan",
                str(
                    edit_json(
                        m,
                        lambda d: d["registrations"][0].update(
                            spaces=d["registrations"][0].pop("space")
                        ),
                        "r.json",
                    )
                ),
            ),
            expect=err,
            words=["$.registrations[0]", "space", "Add"],
            codes=[2],
        ),
    )
    zm = e.root / "z.json"
    e.py(
        "import warmkit; from triton_backend._kernels import Add\nreg=warmkit.WarmupRegistry(); reg.add(Add, warmkit.zip_inputs({'n': 64, 'block': 64}, {'n': 65, 'block': 128})); reg.save('z.json')"
    )
    case(
        "zip row shorter than its names",
        lambda: classify(
            e.cli(
                "plan",
                str(
                    edit_json(
                        zm, lambda d: d["registrations"][0]["zip"][0]["rows"][1].pop(), "z2.json"
                    )
                ),
            ),
            expect=err,
            words=["rows[1]", "one value per name"],
            codes=[2],
        ),
    )
    case(
        "range of 2 numbers",
        lambda: classify(
            e.cli(
                "plan",
                str(
                    edit_json(
                        m,
                        lambda d: d["registrations"][0]["space"].update(n={"range": [1, 5]}),
                        "g.json",
                    )
                ),
            ),
            expect=err,
            words=["space.n.range", "[start, stop, step]"],
            codes=[2],
        ),
    )
    case(
        "unknown kernel ref",
        lambda: classify(
            e.cli(
                "plan",
                str(
                    edit_json(
                        m, lambda d: d["registrations"][0].update(kernel="nope.mod:Nope"), "k.json"
                    )
                ),
            ),
            expect=err,
            words=["nope.mod"],
            codes=[2],
        ),
    )
    case(
        "truncated manifest",
        lambda: classify(
            e.cli(
                "plan",
                str(Path(e.root / "t.json").write_text(m.read_text()[:50]) and e.root / "t.json"),
            ),
            expect=err,
            words=["invalid JSON", "t.json"],
            codes=[2],
        ),
    )
    case(
        "missing manifest",
        lambda: classify(e.cli("plan", "nope.json"), expect=err, words=["nope.json"], codes=[2]),
    )
    case(
        "manifest version 99",
        lambda: classify(
            e.cli("plan", str(edit_json(m, lambda d: d.update(version=99), "v.json"))),
            expect=err,
            words=["version 99"],
            codes=[2],
        ),
    )
    case(
        "valid manifest plan",
        lambda: classify(
            e.cli("plan", str(m)), expect=acc, check=lambda rc, o, _e: "total: 2 key(s)" in o
        ),
    )
    case(
        "plan | head (broken pipe)",
        lambda: classify(
            e.run(
                [
                    "bash",
                    "-c",
                    f"{sys.executable} -m warmkit plan {m} | head -c 1 >/dev/null; exit ${{PIPESTATUS[0]}}",
                ]
            ),
            expect=acc,
        ),
    )
    case(
        "save() of a __main__ kernel",
        lambda: classify(
            e.py(
                "import attrs, warmkit\nclass K(warmkit.JitKernel['K.CompileKey']):\n @attrs.frozen\n class CompileKey:\n  n: int\n def dispatch(self, *, n): return self.CompileKey(n)\n def compile(self, key): return object()\nr=warmkit.WarmupRegistry(); r.add(K, n=1)\nimport sys\ntry: r.save('main.json')\nexcept warmkit.ManifestError as e: print(e, file=sys.stderr); sys.exit(2)"
            ),
            expect=err,
            words=["__main__"],
            codes=[2],
        ),
    )
    (e.root / "stateful.py").write_text(
        "import attrs, warmkit\nclass S(warmkit.JitKernel['S.CompileKey']):\n @attrs.frozen\n class CompileKey:\n  n: int\n  b: int\n def __init__(self, b=64): self.b = b\n def dispatch(self, *, n): return self.CompileKey(n, self.b)\n def compile(self, key): return object()\n"
    )
    case(
        "save() of a dispatch reading instance state",
        lambda: classify(
            e.py(
                "import sys, warmkit\nfrom stateful import S\nr=warmkit.WarmupRegistry()\nk = S(128)\nwith r.activate(): k.register_warmup(n=1)\ntry: r.save('s.json')\nexcept warmkit.ManifestError as e: print(e, file=sys.stderr); sys.exit(2)"
            ),
            expect=err,
            words=["instance state", "b=128"],
            codes=[2],
        ),
    )
    case(
        "register from an unbound thread",
        lambda: classify(
            e.py(
                "import threading, warmkit\nfrom triton_backend._kernels import Add\nr=warmkit.WarmupRegistry()\nwith r.activate():\n t=threading.Thread(target=Add().register_warmup, kwargs={'n': 64}); t.start(); t.join()\nimport sys; sys.exit(3 if len(r)==0 else 0)"
            ),
            expect=err,
            words=["registry.bind", "Add", "RuntimeWarning"],
            codes=[3],
        ),
    )

    # -- the cache
    e.cli("warmup", str(m), "--target", TARGET, "--json")  # fill the cache
    for suffix, how in (
        (".cubin", "truncate"),
        (".cubin", "flip"),
        (".json", "truncate"),
        (".ptx", "empty"),
    ):

        def one(suffix=suffix, how=how):
            entry = damage_first(e.cache, suffix, how)
            r = e.cli("warmup", str(m), "--target", TARGET, "--json")
            if r[0] != 0:
                return classify(r, expect=err, words=[entry.name])
            statuses = [x["status"] for x in json.loads(r[1])["entries"]]
            if "compiled" in statuses and entry.name in r[2] and "quarantine" in r[2]:
                return (
                    "accepted",
                    f"named in a WARNING, quarantined and recompiled ({entry.name[:12]}...)",
                )
            return "silent", f"statuses {statuses}, warning: {r[2].strip()[:120]}"

        case(f"cache entry: {how} {suffix}", one)

    def verify_bad():
        entry = damage_first(e.cache, ".cubin", "truncate")
        return classify(
            e.cli("cache", "verify", "--cache-dir", f"triton={e.cache}"),
            expect=err,
            words=[entry.name],
            codes=[1],
        )

    case("cache verify names a bad entry", verify_bad)
    case(
        "cache verify --quarantine",
        lambda: classify(
            e.cli("cache", "verify", "--cache-dir", f"triton={e.cache}", "--quarantine"),
            expect=err,
            words=["quarantined"],
            codes=[1],
        ),
    )
    case(
        "cache verify clean",
        lambda: classify(
            e.cli("cache", "verify", "--cache-dir", f"triton={e.cache}"),
            expect=acc,
            check=lambda rc, o, _e: "0 bad" in o,
        ),
    )
    case(
        "cache verify unknown backend",
        lambda: classify(
            e.cli("cache", "verify", "--cache-dir", "tritn=/x"),
            expect=err,
            words=["tritn", "triton"],
            codes=[2],
        ),
    )

    # -- bundles
    b = Env(tmp / "bundles")
    b.root.mkdir()
    bm = manifest(b)
    wkb = b.root / "k.wkb"
    case(
        "bundle build",
        lambda: classify(
            b.cli("bundle", "build", str(bm), "--target", TARGET, "-o", str(wkb)),
            expect=acc,
            check=lambda *_: wkb.exists(),
        ),
    )
    case(
        "bundle inspect (unsigned)",
        lambda: classify(
            b.cli("bundle", "inspect", str(wkb)),
            expect=acc,
            check=lambda rc, o, _e: (
                "unsigned" in o
                and len([ln for ln in o.splitlines() if ln.startswith("    ptxas")]) == 1
            ),
        ),
    )
    serve = {"WARMKIT_TARGET": TARGET, "TRITON_CACHE_DIR": str(b.root / "serve")}
    case(
        "bundle install",
        lambda: classify(
            b.cli("bundle", "install", str(wkb), "--json", env=serve),
            expect=acc,
            check=lambda rc, o, _e: json.loads(o)["installed"] == 2,
        ),
    )
    case(
        "bundle reinstall is unchanged",
        lambda: classify(
            b.cli("bundle", "install", str(wkb), "--json", env=serve),
            expect=acc,
            check=lambda rc, o, _e: json.loads(o)["unchanged"] == 2,
        ),
    )
    wkb2 = b.root / "k2.wkb"
    case(
        "rebuilt bundle reinstalls unchanged",
        lambda: (
            classify(
                b.cli("bundle", "install", str(wkb2), "--json", env=serve),
                expect=acc,
                check=lambda rc, o, _e: json.loads(o)["unchanged"] == 2,
            )
            if b.cli(
                "bundle",
                "build",
                str(bm),
                "--target",
                TARGET,
                "-o",
                str(wkb2),
                env={"TRITON_CACHE_DIR": str(b.root / "c2")},
            )[0]
            == 0
            else ("vague", "rebuild failed")
        ),
    )
    case(
        "install for another target",
        lambda: classify(
            b.cli("bundle", "install", str(wkb), "--target", "cuda:80", env=serve),
            expect=err,
            words=["cuda:80", "cuda:90"],
            codes=[1],
        ),
    )

    def flipped():
        data = bytearray(wkb.read_bytes())
        content = gzip.decompress(bytes(data))
        for i in range(len(data) // 2, len(data) - 8):
            d = bytearray(data)
            d[i] ^= 0x10
            try:
                same = gzip.decompress(bytes(d)) == content
            except Exception:  # noqa: BLE001 -- not gzip any more: a refusal is due
                same = False
            if same:
                continue
            (b.root / "f.wkb").write_bytes(bytes(d))
            return classify(
                b.cli("bundle", "install", str(b.root / "f.wkb"), env=serve),
                expect=err,
                words=["BundleError", "f.wkb"],
                codes=[1],
            )
        return "vague", "no flip changed the content"

    case("bit-flipped bundle", flipped)
    case(
        "truncated bundle",
        lambda: classify(
            b.cli(
                "bundle",
                "install",
                str(
                    Path(b.root / "t.wkb").write_bytes(wkb.read_bytes()[:-300]) and b.root / "t.wkb"
                ),
                env=serve,
            ),
            expect=err,
            words=["BundleError", "t.wkb"],
            codes=[1],
        ),
    )

    def tampered(with_hash: bool, trust: bool):
        with tarfile.open(wkb) as t:
            meta = json.loads(t.extractfile("bundle.json").read())
        victim = next(
            x["path"] for x in meta["backends"]["triton"]["entries"] if x["path"].endswith(".cubin")
        )
        evil = b"\x7fELF evil"

        def member(name, data):
            return evil if name == f"backends/triton/{victim}" else data

        def edit(doc):
            for x in doc["backends"]["triton"]["entries"]:
                if with_hash and x["path"] == victim:
                    x.update(sha256=hashlib.sha256(evil).hexdigest(), size=len(evil))

        out = rewrite_bundle(
            signed if trust else wkb, b.root / "evil.wkb", meta=edit, member=member
        )
        extra = ["--trust", str(pub)] if trust else []
        return classify(
            b.cli("bundle", "install", str(out), *extra, env=serve),
            expect=err,
            words=["signed" if trust else victim.split("/")[0]],
            codes=[1],
        )

    key = b.root / "sign.pem"
    pub = Path(f"{key}.pub")
    signed = b.root / "signed.wkb"
    b.cli("bundle", "keygen", str(key))
    b.cli("bundle", "keygen", str(b.root / "other.pem"))
    b.cli(
        "bundle",
        "build",
        str(bm),
        "--target",
        TARGET,
        "-o",
        str(signed),
        "--sign",
        str(key),
        env={"TRITON_CACHE_DIR": str(b.root / "c3")},
    )
    case("tampered entry (hash mismatch)", lambda: tampered(False, False))
    case("tampered entry and hash, trust configured", lambda: tampered(True, True))
    case(
        "unsigned with --trust",
        lambda: classify(
            b.cli("bundle", "install", str(wkb), "--trust", str(pub), env=serve),
            expect=err,
            words=["unsigned"],
            codes=[1],
        ),
    )
    case(
        "unsigned with WARMKIT_BUNDLE_TRUST",
        lambda: classify(
            b.cli("bundle", "install", str(wkb), env=serve | {"WARMKIT_BUNDLE_TRUST": str(pub)}),
            expect=err,
            words=["unsigned"],
            codes=[1],
        ),
    )
    case(
        "signed with --trust",
        lambda: classify(
            b.cli("bundle", "install", str(signed), "--trust", str(pub), "--json", env=serve),
            expect=acc,
            check=lambda rc, o, _e: json.loads(o)["signed_by"],
        ),
    )
    case(
        "signed by another key",
        lambda: classify(
            b.cli(
                "bundle",
                "install",
                str(signed),
                "--trust",
                str(b.root / "other.pem.pub"),
                env=serve,
            ),
            expect=err,
            words=["not trusted"],
            codes=[1],
        ),
    )
    case(
        "keygen over an existing key",
        lambda: classify(
            b.cli("bundle", "keygen", str(key)), expect=err, words=["never overwritten"], codes=[2]
        ),
    )
    case(
        "--sign with a missing key",
        lambda: classify(
            b.cli(
                "bundle",
                "build",
                str(bm),
                "--target",
                TARGET,
                "-o",
                str(b.root / "n.wkb"),
                "--sign",
                "nokey.pem",
            ),
            expect=err,
            words=["nokey.pem"],
            codes=[2],
        ),
    )
    case(
        "install --cache-dir tilelang=/x",
        lambda: classify(
            b.cli("bundle", "install", str(wkb), "--cache-dir", "tilelang=/x", env=serve),
            expect=err,
            words=["tilelang", "triton"],
            codes=[2],
        ),
    )
    (b.root / "file").write_text("x")
    case(
        "build -o under a regular file",
        lambda: classify(
            b.cli(
                "bundle", "build", str(bm), "--target", TARGET, "-o", str(b.root / "file" / "k.wkb")
            ),
            expect=err,
            words=["not a directory", "file"],
            codes=[2],
        ),
    )
    case(
        "inspect a non-bundle",
        lambda: classify(
            b.cli("bundle", "inspect", str(bm)), expect=err, words=["m.json"], codes=[1]
        ),
    )
    case(
        "fingerprint: TRITON_DEFAULT_FP_FUSION set at install only",
        lambda: classify(
            b.cli(
                "bundle",
                "install",
                str(wkb),
                env=serve
                | {"TRITON_DEFAULT_FP_FUSION": "1", "TRITON_CACHE_DIR": str(b.root / "fp")},
            ),
            expect=err,
            words=["env", "TRITON_DEFAULT_FP_FUSION"],
            codes=[1],
        ),
    )

    # -- cancellation and timeouts (self-compiling kernels in a module of the work dir)
    (e.root / "slow.py").write_text(
        "import attrs, threading, time, warmkit\n"
        "class Slow(warmkit.JitKernel['Slow.CompileKey']):\n"
        " @attrs.frozen\n class CompileKey:\n  n: int\n"
        " def dispatch(self, *, n): return self.CompileKey(n)\n"
        " def compile(self, key):\n  time.sleep(0.4); return object()\n"
        "class Hung(Slow):\n"
        " def compile(self, key):\n  if key.n == 1: threading.Event().wait()\n  return object()\n"
    )
    e.py(
        "import warmkit, slow\nr=warmkit.WarmupRegistry(); r.add(slow.Slow, n=warmkit.IntRange(0, 40)); r.save('slow.json')\n"
        "r=warmkit.WarmupRegistry(); r.add(slow.Hung, n=warmkit.IntRange(0, 4)); r.save('hung.json')"
    )

    def sigint():
        p = subprocess.Popen(
            [sys.executable, "-m", "warmkit", "warmup", "slow.json", "-j", "2", "--json"],
            cwd=e.root,
            env=e.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # An interactive Ctrl-C: SIGINT handled (a shell's background jobs ignore it).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
        )
        time.sleep(3.0)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        try:
            out, errs = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            return "hang", "no exit 10 s after SIGINT"
        took = time.monotonic() - t0
        r = classify((p.returncode, out, errs), expect=err, words=["cancelled"], codes=[130])
        if r[0] == "clear error" and (took > 2.5 or not json.loads(out)["cancelled"]):
            return "vague", f"exit {took:.1f}s after SIGINT"
        return r[0], f"{r[1]} ({took:.2f}s after SIGINT)"

    case("SIGINT during a parallel warmup", sigint)
    case(
        "hung compile with WARMKIT_COMPILE_TIMEOUT=1",
        lambda: classify(
            e.cli(
                "warmup", "hung.json", "-j", "2", env={"WARMKIT_COMPILE_TIMEOUT": "1"}, timeout=60
            ),
            expect=err,
            words=["compile_timeout=1s", "Hung", "n=1"],
            codes=[1],
        ),
    )

    # -- errors from user code name the kernel
    (e.root / "bad.py").write_text(
        "import attrs, warmkit\n"
        "class BadDispatch(warmkit.JitKernel['BadDispatch.CompileKey']):\n"
        " @attrs.frozen\n class CompileKey:\n  n: int\n"
        " def dispatch(self, *, n):\n  if n > 2: raise ValueError('n too big')\n  return self.CompileKey(n)\n"
        " def compile(self, key): return object()\n"
    )
    case(
        "dispatch raises ValueError",
        lambda: classify(
            e.py(
                "import warmkit, bad\nr=warmkit.WarmupRegistry()\nwith r.activate(): bad.BadDispatch().register_warmup(n=[1, 5])\ntry: warmkit.warmup(warmkit.WarmupConfig(progress='off'), r)\nexcept Exception as exc:\n import sys; print(f'{type(exc).__name__}: {exc}', *getattr(exc, '__notes__', []), file=sys.stderr); sys.exit(1)"
            ),
            expect=err,
            words=["BadDispatch", "n too big"],
            codes=[1],
        ),
    )
    case(
        "n=2**70 for a Triton kernel",
        lambda: classify(
            e.cli(
                "warmup",
                str(
                    edit_json(
                        m, lambda d: d["registrations"][0]["space"].update(n=2**70), "big.json"
                    )
                ),
                "--target",
                TARGET,
            ),
            expect=err,
            words=["Add"],
            codes=[1, 2],
        ),
    )
    case(
        "empty choices list",
        lambda: classify(
            e.cli(
                "plan",
                str(
                    edit_json(
                        m,
                        lambda d: d["registrations"][0]["space"].update(n={"list": []}),
                        "empty.json",
                    )
                ),
            ),
            expect=err,
            words=["space.n"],
            codes=[2],
        ),
    )

    if args.tiny:  # the groups below set up workers and a redis-server before their cases
        return _finish(results, args.out)
    _worker_and_config_cases(case, e, m)
    if not args.only or "store" in args.only:  # it starts a redis-server and seeds it
        store_cases(case, tmp)

    return _finish(results, args.out)


def _finish(results: list[dict], out: str | None) -> int:
    """Print the counts, write them with the cases to ``out``; 1 if any case must be fixed."""
    counts = {k: sum(1 for r in results if r["ended"] == k) for k in KINDS}
    print(json.dumps({"cases": len(results), **counts}))
    if out:
        Path(out).write_text(json.dumps({"cases": results, "counts": counts}, indent=2))
    return 1 if counts["silent"] or counts["hang"] or counts["raw traceback"] else 0


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _proc_sigint(e: Env, twice: bool) -> tuple[str, str]:
    """Ctrl-C (once, or twice with a clean-up that hangs) with 4 worker processes stuck, 2 of them
    ignoring SIGTERM (``core._sigint_proc_child``): exit 130 within 2 s, no key started after the
    signal, no worker left."""
    out_dir = Path(tempfile.mkdtemp(dir=e.root))
    p = subprocess.Popen(
        [sys.executable, "-m", "core._sigint_proc_child", str(out_dir), *(["stuck-scope"] * twice)],
        cwd=e.root,
        env=e.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    log = out_dir / "log"
    deadline = time.monotonic() + 120
    while (
        not log.exists() or len(log.read_text().split("\n")) < 5
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    t_signal = time.monotonic()  # one system-wide clock with the child's log: no slack needed
    p.send_signal(signal.SIGINT)
    if twice:
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    try:
        out, errs = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        return "hang", "no exit 20 s after SIGINT"
    took = time.monotonic() - t0
    pids = {int(x) for x in (out_dir / "pids").read_text().split()}
    pids |= {int(line.split()[0]) for line in log.read_text().splitlines()}
    started_after = [
        line for line in log.read_text().splitlines() if float(line.split()[2]) > t_signal
    ]
    time.sleep(0.5)
    left = sorted(pid for pid in pids if _alive(pid))
    if left:
        return "silent", f"worker process(es) {left} outlived the warmup"
    if started_after:
        return "silent", f"{len(started_after)} key(s) started after SIGINT"
    words = ["second Ctrl-C"] if twice else ["cancelled"]
    r = classify((p.returncode, out, errs), expect="error", words=words, codes=[130])
    if r[0] == "clear error" and took > 2.0:
        return "vague", f"exit {took:.1f}s after SIGINT"
    return r[0], f"{r[1]} ({took:.2f}s after SIGINT)"


_PROC_TIMEOUT = """
import os, sys, warmkit
from warmkit._warmup import workers as _workers
from warmkit.testing import backend_override
from core._proc_kernels import ProcBackend, ProcKernel
os.environ["WARMKIT_COMPILE_PROCESSES"] = "on"
_workers.start_workers(4, modules=[])
while len({f.result() for f in [_workers._pool.schedule(_workers._ping) for _ in range(8)]}) < 4:
    pass
reg = warmkit.WarmupRegistry()
reg.add(ProcKernel, mode="ok", n=[0, 1, 2, 3])
reg.add(ProcKernel, mode=sys.argv[1], n=[0])
with backend_override("fakeproc", ProcBackend()):
    try:
        warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="off", jobs=4,
                       compile_timeout=1.0, on_error="collect"), reg)
    except warmkit.WarmupError as exc:
        for e in exc.report.failures:
            print(e.error, file=sys.stderr)
        print("statuses", sorted(e.status for e in exc.report.entries), file=sys.stderr)
        sys.exit(1)
"""


def _worker_and_config_cases(case: Callable[..., None], e: Env, m: Path) -> None:
    """Worker processes always stop; set-but-ignored variables; a manifest that brings code."""
    for mode in ("hang", "sleep", "ignore_term", "segv"):
        words = ["exit code -11"] if mode == "segv" else ["worker process was killed"]
        case(
            f"worker process: a compile that {mode}s (compile_timeout=1)",
            lambda mode=mode, words=words: classify(
                e.run([sys.executable, "-c", _PROC_TIMEOUT, mode], timeout=90),
                expect="error",
                words=[*words, f"mode='{mode}'", "'compiled', 'compiled', 'compiled', 'compiled'"],
                codes=[1],
            ),
        )
    case("worker processes: Ctrl-C with stuck workers", lambda: _proc_sigint(e, twice=False))
    case("worker processes: a second Ctrl-C", lambda: _proc_sigint(e, twice=True))
    case(
        "WARMKIT_STORE set, explicit WarmupConfig",
        lambda: classify(
            e.py(
                "import warmkit, logging, sys\nlogging.basicConfig()\n"
                "warmkit.warmup(warmkit.WarmupConfig(progress='off'), warmkit.WarmupRegistry())\n"
                "sys.exit(1)",
                env={"WARMKIT_STORE": str(e.root / "store"), "WARMKIT_READ_ONLY": "1"},
            ),
            expect="error",
            words=["WARMKIT_STORE", "WARMKIT_READ_ONLY", "not applied", "WarmupConfig.from_env("],
            codes=[1],
        ),
    )
    cwd_mod = Path(tempfile.mkdtemp(dir=e.root))
    (cwd_mod / "planted.py").write_text(
        "import pathlib, warmkit\npathlib.Path('RAN').write_text('x')\nfrom slow import Slow as K\n"
    )
    planted = cwd_mod / "planted.json"
    planted.write_text(
        json.dumps(
            {
                "format": "warmkit.manifest",
                "version": 1,
                "registrations": [{"kernel": "planted:K", "space": {"n": 1}}],
            }
        )
    )

    def planted_module() -> tuple[str, str]:
        env = e.env | {"PYTHONPATH": str(TESTS) + os.pathsep + str(e.root)}
        p = subprocess.run(
            [sys.executable, "-m", "warmkit", "plan", "planted.json"],
            cwd=cwd_mod, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if (cwd_mod / "RAN").exists():
            return "silent", "the manifest's module in the current directory ran"
        return classify(
            (p.returncode, p.stdout, p.stderr),
            expect="error",
            words=["planted", "current directory", "WARMKIT_MANIFEST_MODULES=any"],
            codes=[2],
        )

    case("manifest naming a module in the current directory", planted_module)


if __name__ == "__main__":
    sys.exit(main())
