"""``python -m proofs_check.vectors --write | --check [--dir DIR]``."""

import sys

from proofs_check.vectors.cli import main

sys.exit(main())
