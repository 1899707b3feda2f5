"""`warmkit run`'s startup hook in processes the command spawns: the user's own, yes; warmkit's compile workers, never.

Found on the GPU host: a spawned compile worker inherits the hook's PYTHONPATH and
WARMKIT_MANIFEST, so each worker warmed the whole manifest up again, with workers of its own
(a 66-key replay of flash-linear-attention ran past 400 s instead of ~11 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import warmkit
from warmkit._cli.startup import hook_environment

WARMED = "warmkit run: warmed 0 key(s)"

_WORKERS = """
from warmkit._warmup import workers as _workers

if __name__ == "__main__":
    _workers.start_workers(2, modules=[])
    futures = [_workers._pool.schedule(_workers._ping) for _ in range(6)]
    print("workers answered", len({f.result() for f in futures}) >= 1, flush=True)
    _workers.shutdown()
"""

_USER_SPAWN = """
import multiprocessing, sys

def child():
    print("child ran", flush=True)

if __name__ == "__main__":
    p = multiprocessing.get_context("spawn").Process(target=child)
    p.start(); p.join()
    sys.exit(p.exitcode)
"""


def _run(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    manifest = tmp_path / "empty.json"
    warmkit.WarmupRegistry().save(manifest)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env = hook_environment(dict(env, WARMKIT_MANIFEST=str(manifest)))
    script = tmp_path / "main.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def test_compile_workers_do_not_run_the_hook(tmp_path: Path) -> None:
    proc = _run(tmp_path, _WORKERS)
    assert proc.returncode == 0, proc.stderr
    assert "workers answered True" in proc.stdout
    assert proc.stderr.count(WARMED) == 1, proc.stderr  # the command's process only


def test_a_process_the_command_spawns_is_warmed_up_before_its_target(tmp_path: Path) -> None:
    proc = _run(tmp_path, _USER_SPAWN)
    assert proc.returncode == 0, proc.stderr
    assert "child ran" in proc.stdout
    # the command's process and its child; not multiprocessing's resource tracker
    assert proc.stderr.count(WARMED) == 2, proc.stderr


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )


def test_a_plugins_warning_reaches_stderr_when_the_command_configured_logging() -> None:
    """The hook gives the plugins' loggers (``warmkit_triton``...) warmkit's handler: a library of
    the command that configured the root logger (here at ERROR) no longer swallows them."""
    code = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.ERROR, stream=sys.stdout)\n"
        "from warmkit._cli.startup import _configure_logging\n"
        "_configure_logging()\n"
        "logging.getLogger('warmkit_triton._record').warning('winner measured on another GPU')\n"
        "logging.getLogger('warmkit_triton._record').info('not news')\n"
        "logging.getLogger('warmkit._warmup').warning('core warning')\n"
    )
    proc = _python(code)
    assert proc.stderr.splitlines() == [
        "warmkit: WARNING winner measured on another GPU",
        "warmkit: WARNING core warning",
    ]


def test_a_discovery_failure_while_naming_the_plugins_loggers_is_a_warning_not_a_stop() -> None:
    code = (
        "import warmkit._plugin.discovery as D\n"
        "def broken(group, **kw):\n"
        "    raise OSError('entry points unreadable')\n"
        "D.discover = broken\n"
        "from warmkit._cli.startup import _configure_logging\n"
        "_configure_logging()\n"
        "print('went on')\n"
    )
    proc = _python(code)
    assert proc.stdout == "went on\n"
    assert proc.stderr.splitlines() == [
        (
            "warmkit: WARNING the plugins' loggers were not set up (plugin discovery failed: "
            "OSError: entry points unreadable); their warnings go wherever this command's "
            "logging sends them"
        )
    ]


_SITE_KERNEL = '''
import threading

import attrs
import warmkit


class SiteKernel(warmkit.JitKernel["SiteKernel.CompileKey"]):
    """Its compile imports, on another thread, a module that imports site (as torch.cuda does)."""

    @attrs.frozen
    class CompileKey:
        n: int

    def dispatch(self, *, n):
        return self.CompileKey(n=n)

    def compile(self, key):
        t = threading.Thread(target=__import__, args=("wk_imports_site",), daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "a thread's import of site never finished"
        return lambda *args: None
'''


def test_a_warmup_thread_may_import_site_while_the_hook_runs_inside_sites_import(
    tmp_path: Path, monkeypatch
) -> None:
    """Found under `warmkit record`: a compile thread importing torch (cuda.pathfinder imports site)
    waited for site's import, which waited for the hook, which waited for the thread."""
    (tmp_path / "wk_site_kernels.py").write_text(_SITE_KERNEL)
    (tmp_path / "wk_imports_site.py").write_text("import site\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from wk_site_kernels import SiteKernel  # type: ignore[import-not-found]

    registry = warmkit.WarmupRegistry()
    registry.add(SiteKernel, n=[1, 2])
    manifest = registry.save(tmp_path / "site.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env = hook_environment(dict(env, WARMKIT_MANIFEST=str(manifest)))
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", "print('command ran')"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "command ran" in proc.stdout and "warmkit run: warmed 2 key(s)" in proc.stderr


def test_warmkit_run_becomes_the_command_and_keeps_its_exit_status(tmp_path: Path) -> None:
    """No second process waits beside the command: `warmkit run` execs it under the hook."""
    manifest = warmkit.WarmupRegistry().save(tmp_path / "empty.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    code = "import os, sys; print(os.getppid(), 'sitecustomize' in sys.modules); sys.exit(7)"
    proc = subprocess.Popen(
        [sys.executable, "-m", "warmkit", "run", "-m", str(manifest), "--", sys.executable, "-c", code],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 7, err
    assert out.split() == [str(os.getpid()), "True"], (out, err)
    assert "warmkit run: warmed 0 key(s)" in err


_BEFORE_EXEC = """
import json, os, sys
def execvpe(file, args, env):  # what `warmkit run`'s own process imported when it execs
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("attrs", "attr", "warmkit"))))
    sys.stdout.flush()
    os._exit(0)
os.execvpe = execvpe
from warmkit._cli.commands import main
main(["run", "-m", sys.argv[1], "--", "true"])
"""


def test_warmkit_run_imports_only_the_cli_before_it_execs_the_command(tmp_path: Path) -> None:
    """`warmkit run`'s own process is pure start-up cost before the command's (issue 30): it
    imported attrs and the report (~16 ms of 59 on the 2-core box) for nothing it does."""
    manifest = warmkit.WarmupRegistry().save(tmp_path / "empty.json")
    proc = subprocess.run(
        [sys.executable, "-c", _BEFORE_EXEC, str(manifest)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    imported = set(json.loads(proc.stdout))
    assert imported - {
        "warmkit", "warmkit._version", "warmkit._cli", "warmkit._cli.commands",
        "warmkit._cli.args", "warmkit._cli.output", "warmkit._cli.startup",
        "warmkit._exceptions", "warmkit._envs", "warmkit._compat",
    } == set(), imported  # fmt: skip


@pytest.mark.parametrize("command", ["run", "record"])
def test_warmkit_run_names_a_command_it_cannot_run(tmp_path: Path, command: str) -> None:
    manifest = warmkit.WarmupRegistry().save(tmp_path / "empty.json")
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    args = ["-m", str(manifest)] if command == "run" else ["-o", str(tmp_path / "rec.json")]
    for cmd, why in ((str(script), "Permission denied"), ("no-such-command-wk", "No such file")):
        proc = subprocess.run(
            [sys.executable, "-m", "warmkit", command, *args, "--", cmd],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode != 0
        assert f"cannot run {cmd!r}: {why}" in proc.stderr, proc.stderr
        assert proc.stderr.count("cannot run") == 1


@pytest.fixture(scope="module")
def python_without_warmkit(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Python that runs the hook (it reads PYTHONPATH) but cannot import warmkit: a bare venv."""
    where = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = str(where / "bin" / "python")
    probe = subprocess.run(
        [python, "-c", "import warmkit"], cwd=where, capture_output=True, text=True, check=False
    )
    if probe.returncode == 0:  # warmkit is installed for the base interpreter too
        pytest.skip("every Python here can import warmkit")
    return python


def test_a_command_whose_python_cannot_import_warmkit_does_not_run_unwarmed(
    tmp_path: Path, python_without_warmkit: str
) -> None:
    """`warmkit run -- python serve.py` with `python` outside warmkit's environment (a pipx
    install): Python printed "Error in sitecustomize" and ran the command unwarmed, exit 0.
    The hook names both interpreters and the command does not run; its own Python children
    that lack warmkit are told so and run (a helper tool must not die of it)."""
    manifest = warmkit.WarmupRegistry().save(tmp_path / "empty.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [sys.executable, "-m", "warmkit", "run", "-m", str(manifest), "--",
         python_without_warmkit, "-c", "print('command ran')"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "command ran" not in proc.stdout, (proc.stdout, proc.stderr)
    assert proc.stderr.count("cannot import warmkit") == 1, proc.stderr
    assert f"this Python ({python_without_warmkit})" in proc.stderr
    assert f"({sys.executable})" in proc.stderr and "The command did not run." in proc.stderr
    assert "Error in sitecustomize" not in proc.stderr and "Traceback" not in proc.stderr

    child = f"import subprocess; subprocess.run([{python_without_warmkit!r}, '-c', 'print(7)'])"
    proc = subprocess.run(
        [sys.executable, "-m", "warmkit", "run", "-m", str(manifest), "--",
         sys.executable, "-c", child],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.split() == ["7"], (proc.stdout, proc.stderr)
    assert WARMED in proc.stderr and "It runs without warmkit." in proc.stderr


@pytest.mark.parametrize(
    ("cmd", "flag"),
    [
        (["python", "-I", "serve.py"], "-I"),
        (["python3.12", "-uE", "serve.py"], "-E"),
        (["/usr/bin/python3", "-W", "error", "-S", "-m", "vllm"], "-S"),
        (["python", "-Xdev", "-s", "serve.py"], None),  # -s: no user site; PYTHONPATH is read
        (["python", "-c", "import sys; sys.argv", "-I"], None),  # the program's own arguments
        (["python", "serve.py", "-I"], None),
        (["python", "-X", "E", "serve.py"], None),  # -X's value, not an option
        (["bash", "-E", "run.sh"], None),  # not Python: its options are its own
    ],
)
def test_hookless_python_reads_pythons_own_options(cmd: list[str], flag: str | None) -> None:
    from warmkit._cli.startup import hookless_python

    assert hookless_python(cmd) == flag


@pytest.mark.parametrize("command", ["run", "record"])
def test_warmkit_run_refuses_a_python_that_would_skip_the_hook(tmp_path: Path, command: str):
    """`python -I` ignores PYTHONPATH: the command would have run unwarmed (or unrecorded)."""
    manifest = warmkit.WarmupRegistry().save(tmp_path / "empty.json")
    args = ["-m", str(manifest)] if command == "run" else ["-o", str(tmp_path / "rec.json")]
    proc = subprocess.run(
        [sys.executable, "-m", "warmkit", command, *args, "--",
         sys.executable, "-I", "-c", "print('command ran')"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "command ran" not in proc.stdout, proc.stdout
    assert proc.stderr.count("runs Python with -I") == 1, proc.stderr
    assert "drop -I" in proc.stderr and not (tmp_path / "rec.json").exists()
