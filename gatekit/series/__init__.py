"""A gate series as it runs and writes, one idea a module, imported from the module that holds it:

- `runloop`: THE run loop, used by `gate run`, `--resume` and `gate calibrate`;
- `runner`: `SeriesRunner` — preflight, preregistration, schedule, retries and stages, the finding;
- `reservation`: finding ids reserved for one series and never overwritten.

What reads a series back lives below this folder, so the read-only verifier never imports the runner (which
verifies a series before it reports on it): `gatekit.series_events` (the journal's events, typed records of
the codec) and `gatekit.series_replay` (a series read back from its journal: what verify, analyze, report and
resume share). Nothing is imported here.
"""
