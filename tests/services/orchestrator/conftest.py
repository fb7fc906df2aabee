from __future__ import annotations

import sys
from pathlib import Path

# engine_kit.py (tests import with --import-mode=importlib)
sys.path.insert(0, str(Path(__file__).resolve().parent))
