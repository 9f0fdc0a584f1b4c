"""The test run's tooling: pytest plugins (``lesson_times``: each lesson against its budget, on every core;
``kernel_start``: a kernel that dies while starting, started again), JupyterLab and Chromium for the browser tests
(``browser``) and the README's pictures (``screenshots``)."""
