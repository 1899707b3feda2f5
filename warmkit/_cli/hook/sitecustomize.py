# warmkit's startup hook (warmkit record / warmkit run put this folder first on PYTHONPATH).
# Python imports it at startup, before the command's own code: see warmkit/_cli/startup.py.
try:
    import warmkit._cli.startup
except ImportError as exc:
    # This Python cannot import warmkit: the command runs under another interpreter than the
    # one warmkit is installed in (a pipx install, `python` outside the venv). Python itself
    # would print one "Error in sitecustomize" line and run the command unwarmed; say why and
    # how to fix it, and when this process is `warmkit run`'s command itself (it exec'd into
    # it, so the pid is the same), do not run it: the warmup asked for cannot happen.
    import os
    import sys

    _run = os.environ.get("WARMKIT_MANIFEST")
    _command = os.environ.get("WARMKIT_COMMAND_PID") == str(os.getpid())
    sys.stderr.write(
        f"warmkit: this Python ({sys.executable}) cannot import warmkit ({exc}), so "
        + (
            f"`warmkit run` cannot warm {_run} up in it"
            if _run
            else "`warmkit record` cannot record it"
        )
        + ". Install warmkit and its plugins into this Python, or start the command with the "
        "Python warmkit is installed in ("
        + os.environ.get("WARMKIT_PYTHON", "the one that runs `warmkit`")
        + ")."
        + (" The command did not run.\n" if _run and _command else " It runs without warmkit.\n")
    )
    if _run and _command:
        sys.stderr.flush()
        os._exit(1)  # SystemExit here would be a fatal interpreter error with a traceback
else:
    warmkit._cli.startup.main(__file__)
