# warmkit's startup hook (warmkit record / warmkit run put this folder first on PYTHONPATH).
# Python imports it at startup, before the command's own code: see warmkit/_cli/startup.py.
import warmkit._cli.startup

warmkit._cli.startup.main(__file__)
