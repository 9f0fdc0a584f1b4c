"""``python -m grpo_edu.cli``: the ``grpo-edu`` command."""

import sys

from grpo_edu.cli import main

sys.exit(main())
