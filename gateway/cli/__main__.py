"""`python -m gateway.cli …` is `jarvis …`."""

import sys

from . import main

sys.exit(main())
