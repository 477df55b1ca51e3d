#!/bin/sh
# A trainer of about 50 ms for the harness-overhead benchmark: it sleeps, then writes its result file
# (trainer contract: GATEKIT_RESULT, GATEKIT_ARM). The shell and `sleep` add ~2 ms of process start-up,
# which the benchmark's baseline loop pays too.
sleep "${1:-0.05}"
printf '{"metrics": {"train_elapsed_s": %s}, "config": {"arm": "%s"}}\n' "${1:-0.05}" "$GATEKIT_ARM" > "$GATEKIT_RESULT"
