"""`python -m hightide.history audit ...`: the history commands without the `hightide` command."""

import sys

from hightide.history.cli import main

sys.exit(main())
