"""A gate series, one idea a module, imported from the module that holds it:

- `events`: the journal's events, typed records of the codec (what `runner` and `runloop` write);
- `replay`: a series read back from its journal, read-only (what verify, analyze, report and resume share);
- `runloop`: THE run loop, used by `gate run`, `--resume` and `gate calibrate`;
- `runner`: `SeriesRunner` — preflight, preregistration, schedule, retries and stages, the finding;
- `reservation`: finding ids reserved for one series and never overwritten.

Nothing is imported here, so reading a series (`gatekit.series.replay`) never loads the runner.
"""
