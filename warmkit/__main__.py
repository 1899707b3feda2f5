import sys

from ._cli.commands import main

sys.exit(main())
