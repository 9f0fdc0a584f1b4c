"""Under every layer, and with no GRPO in it: argument checks (``_checks``), progress bars
(``progress``) and the display pieces every layer may show (``display``: tables, notes, the
course's colours, the library's own source). Imports nothing else from grpo_edu."""
