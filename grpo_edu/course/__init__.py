"""The course's own machinery: figures and panels (``viz``, ``widgets``), exercises and
predictions (``exercises``, ``exercise_bank``), checked claims (``claims``), the lessons'
experiments (``forgetting``, ``clinic``, ``variants``) and the browser tooling (``browser``, ``screenshots``).
Imports every layer below it; nothing imports it but the ``grpo-edu`` command."""
