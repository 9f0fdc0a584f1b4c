"""The way beyond the course: reading a run's logs and diagnosing it (``run_log``, ``symptoms``,
``diagnose``), carrying a config to TRL and verl (``export``, ``graduation``), a real chat model
(``word_problems``), GPU memory (``memory``) and speed (``bench``). Imports ``training``,
``core`` and ``common``."""
