"""The README's two commands are the project's contract with a fresh machine."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text, flags=re.DOTALL)[:2]


def test_readme_starts_with_install_and_test_commands():
    install, test = _readme_commands()
    assert "constraints-cpu.txt" in install and "examples/serve.py" in install
    for plugin in sorted(p.name for p in (ROOT / "plugins").iterdir() if p.is_dir()):
        assert f"./plugins/{plugin}" in install, f"plugin {plugin} is not installed by the README"
        assert f"./plugins/{plugin}" in test
    assert ".venv/bin/python -m pytest" in _steps(test), "the full suite runs with no path filter"


def _steps(command: str) -> list[str]:
    return [step.strip() for step in command.split(" && ")]


def test_readme_test_command_reruns_the_triton_tests_under_triton36():
    _, test = _readme_commands()
    steps = _steps(test)
    installs = [s for s in steps if s.startswith(".venv/bin/") and " install " in s]
    installs36 = [s for s in steps if s.startswith(".venv36/bin/") and " install " in s]
    assert len(installs) == 2, installs  # pip: torch and uv; uv: the rest
    # the second venv installs exactly what the first does, only against other pins
    assert installs36 == [
        s.replace(".venv/", ".venv36/")
        .replace("-p .venv ", "-p .venv36 ")
        .replace("constraints-cpu.txt", "constraints-triton36.txt")
        for s in installs
    ]
    assert steps.index("python3 -m venv .venv36") > steps.index(".venv/bin/python -m pytest")
    # last, so that CI's exit status is this pytest's once the full suite has passed
    assert steps[-1] == ".venv36/bin/python -m pytest tests/triton_backend tests/blocktable"
    assert ".venv36/" in (ROOT / ".gitignore").read_text().splitlines()


def test_ci_runs_exactly_the_readme_test_command():
    _, test = _readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == test.strip()


def test_cpu_constraints_pin_cpu_torch():
    pins = (ROOT / "constraints-cpu.txt").read_text()
    assert re.search(r"^torch==2\.13\.0$", pins, flags=re.MULTILINE)


def test_triton36_constraints_pin_triton36_beside_the_same_cpu_torch():
    pins36 = (ROOT / "constraints-triton36.txt").read_text()
    torch_pin = re.search(r"^torch==.+$", (ROOT / "constraints-cpu.txt").read_text(), re.MULTILINE)
    assert torch_pin and re.search(f"^{re.escape(torch_pin[0])}$", pins36, flags=re.MULTILINE)
    assert re.search(r"^triton==3\.6\.0$", pins36, flags=re.MULTILINE)
    # Triton 3.6's interpreter breaks under NumPy >= 2.4 (tests/blocktable/interp_kernel.py)
    numpy_pin = re.search(r"^numpy==(\d+)\.(\d+)\.\d+$", pins36, flags=re.MULTILINE)
    assert numpy_pin and (int(numpy_pin[1]), int(numpy_pin[2])) < (2, 4)


def test_the_test_command_takes_torch_from_pip_and_compiles_what_uv_installs():
    """pip installs torch, so it comes from wherever pip is configured to look (the CI box's
    local CPU build; uv does not read pip's configuration). uv installs the rest, byte-compiled:
    the CI box sets PYTHONDONTWRITEBYTECODE, so a module without a .pyc is compiled again by
    every process that imports it."""
    _, test = _readme_commands()
    for venv, pins in ((".venv", "constraints-cpu.txt"), (".venv36", "constraints-triton36.txt")):
        steps = _steps(test)
        assert f"{venv}/bin/pip install -q -c {pins} torch uv" in steps
        uv = next(s for s in steps if s.startswith(f"{venv}/bin/uv pip install"))
        assert f"--compile-bytecode -p {venv} -c {pins} " in uv
        assert steps.index(uv) == steps.index(f"{venv}/bin/pip install -q -c {pins} torch uv") + 1
        assert re.search(r"^uv==[\d.]+$", (ROOT / pins).read_text(), flags=re.MULTILINE)
