from __future__ import annotations

import sys

from nvhook.cli import main

sys.exit(main())
