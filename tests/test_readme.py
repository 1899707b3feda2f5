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
    assert test.rstrip().endswith("pytest")


def test_ci_runs_exactly_the_readme_test_command():
    _, test = _readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == test.strip()


def test_cpu_constraints_pin_cpu_torch():
    pins = (ROOT / "constraints-cpu.txt").read_text()
    assert re.search(r"^torch==2\.13\.0$", pins, flags=re.MULTILINE)
