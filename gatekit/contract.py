"""The trainer contract's environment variables (DESIGN "Trainer contract").

Every run's trainer finds its arm, run label, run directory and result path in these. They live here, with no
gatekit imports, so process cleanup can find a run's leftovers without depending on the plugin registry;
`gatekit.driver` re-exports them for plugins.
"""

from __future__ import annotations

ENV_ARM = "GATEKIT_ARM"  # the arm's name
ENV_RUN = "GATEKIT_RUN"  # the run's label, e.g. "off-r3"
ENV_RUN_DIR = "GATEKIT_RUN_DIR"  # the run's directory; processes that escape the trainer's group keep it
ENV_RESULT = "GATEKIT_RESULT"  # where the trainer writes its result JSON
# Set by `gate bisect` for its probes' gate processes (and so their trainers): the bisect's folder. A process
# that carries the same value is a sibling probe, which the preflight's busy check does not wait for.
ENV_BISECT = "GATEKIT_BISECT"
# The trace key a driver sets on a run forked from a warm parent (`[driver] preload`): that parent's pid, which
# the finding's run row shows as `warm_parent`.
TRACE_WARM_PARENT = "gatekit_warm_parent"
