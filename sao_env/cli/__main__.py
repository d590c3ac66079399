"""``python -m sao_env.cli``: the ``sao-env`` command without the console script."""

import sys

from sao_env.cli import main

sys.exit(main())
