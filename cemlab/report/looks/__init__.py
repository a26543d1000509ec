"""The looks of a sweep that judges while it runs: its bracketing steps and its seed looks, judged
by the claims' own code (``interim_look``; from the store, for the running sweep: ``interim_look_store``).
They sit above ``claims/`` (they judge claims) and below ``pages/`` (the report replays them)."""
