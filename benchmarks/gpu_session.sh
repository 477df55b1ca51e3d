#!/usr/bin/env bash
# The GPU measurements of docs/benchmarks.md, on a CUDA host where torch is installed:
#
#   bash benchmarks/gpu_session.sh setup           # gatekit + the cuda extra into this Python (wheels in .whl/)
#   bash benchmarks/gpu_session.sh one-gpu OUT     # start-up overhead, GPU-seconds per decision (classic and
#                                                  # sequential), a cpu-slot duet vs interleaved on this host,
#                                                  # the three committed gates as a campaign, back to back
#   bash benchmarks/gpu_session.sh two-gpus OUT    # duet vs interleaved on two GPUs, the campaign on both GPUs
#   bash benchmarks/gpu_session.sh cache OUT       # start-up of a second series in the same runs folder
#   bash benchmarks/gpu_session.sh duet OUT        # the numpy demo gate, two rounds: a cpu-slot duet at its
#                                                  # default 12 pairs, interleaved 6 + 6 (equal wall time) and
#                                                  # interleaved at its own n = 3 (OUT/round1, OUT/round2)
#   bash benchmarks/gpu_session.sh clocks OUT      # NVML recordings (idle with a clock probe, busy during a
#                                                  # run), an A/A of the graph MLP (n = 6), then the three
#                                                  # committed gates as a campaign, all with the clock state
#   bash benchmarks/gpu_session.sh ray OUT         # the campaign through a local Ray (ray installed), then the
#                                                  # same campaign through the local engine, on this host's GPUs
#   bash benchmarks/gpu_session.sh ttq OUT         # the time-to-target example (docs/time-to-target.md): the numpy
#                                                  # pair on CPU (also pinned to a core, and the wall time under
#                                                  # the sequential policy), then the torch pair where torch sees
#                                                  # CUDA; each pair's time-to-target gate and its wall-time gate
#                                                  # on the same arms, every series verified (about 6 minutes)
#   bash benchmarks/gpu_session.sh warm OUT        # the warm start: the graph MLP gate with preload (median
#                                                  # start-up per run, target <= 1.0 s), an A/A of warm vs cold
#                                                  # start (n = 6), then GPU co-tenants: one holding 0.76 GiB
#                                                  # idle, one computing, beside a short A/A each (~4 min GPU)
#                                                  # STEPS=50 LOAD_LIMIT=100: a CPU dry run of the script
#   bash benchmarks/gpu_session.sh tenants OUT     # the co-tenant step of warm alone (~1 min GPU)
#
# Every gate writes its findings and series folders under OUT (nothing into the repository's findings/);
# OUT/wall.txt gets "name seconds exit-code" per gate.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STEP=${1:?setup, one-gpu, two-gpus, cache, duet, clocks, ray, ttq, warm or tenants}
OUT=$(realpath -m "${2:-gpu-out}")
GATE=(${GATE:-$PY -m gatekit.cli})

timed() {  # timed NAME CMD...: run CMD, append "NAME seconds exit" to OUT/wall.txt
    local name=$1; shift
    local began code=0
    began=$(date +%s.%N)
    "$@" > "$OUT/$name.log" 2>&1 || code=$?
    echo "$name $(python3 -c 'import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))' \
        "$began" "$(date +%s.%N)") $code" | tee -a "$OUT/wall.txt"
}

campaign_file() {  # campaign_file NAME: configs/nightly.toml writing under OUT/NAME
    sed -e "s|^out = .*|out = \"$OUT/$1/findings\"|" -e "s|^runs = .*|runs = \"$OUT/$1/runs\"|" \
        -e 's|^gate = "|gate = "'"$PWD"'/configs/|' configs/nightly.toml > "$OUT/$1.toml"
    echo "$OUT/$1.toml"
}

demo_duet_file() {  # the numpy demo gate as a duet on two halves of this host's cores, at the duet's own
    # default number of pairs (the file states no n); its path on stdout
    local half=$(( $(nproc) / 2 ))
    sed -e 's|^id = .*|id = "demo-duet"|' -e 's|^order = .*|mode = "duet"|' -e '/^n = 3$/d' \
        -e '/^seed = 0$/d' configs/demo/gate.toml > configs/demo/duet-generated.toml
    printf '\n[duet]\nslots = ["cpu:0-%d", "cpu:%d-%d"]\n' $((half - 1)) "$half" $((2 * half - 1)) \
        >> configs/demo/duet-generated.toml
    echo configs/demo/duet-generated.toml
}

arm_config() {  # arm_config NAME: torch/NAME.toml, or with STEPS set a copy of it that runs STEPS steps
    if [ -z "${STEPS:-}" ]; then echo "torch/$1.toml"; return; fi
    sed -e "s|^steps = .*|steps = $STEPS|" -e 's|^warmup_steps = .*|warmup_steps = 5|' "configs/torch/$1.toml" \
        > "configs/$1-steps-generated.toml"
    echo "$1-steps-generated.toml"
}

graph_aa_file() {  # graph_aa_file ID N OFF ON [COLD]: the graph MLP against itself (arms OFF and ON, n = N;
    # the arm COLD started cold despite preload) as configs/ID-generated.toml; its path on stdout
    local graph; graph=$(arm_config mlp-graph)
    sed -e "s|^id = .*|id = \"$1\"|" -e "s|^title = .*|title = \"A/A: the graph MLP against itself ($1)\"|" \
        -e "s|^n = 3|n = $2|" -e 's|^expect_diff = .*|expect_diff = []|' -e "s|^\[arms.resident\]|[arms.$3]|" \
        -e "s|^\[arms.graph\]|[arms.$4]|" -e "s|torch/mlp-resident.toml|$graph|" -e "s|torch/mlp-graph.toml|$graph|" \
        ${5:+-e "s|^preload = .*|&\ncold_arms = [\"$5\"]|"} configs/resident-graph.toml > "configs/$1-generated.toml"
    echo "configs/$1-generated.toml"
}

tenant() {  # tenant MODE WAIT_FOR: a process outside the gate that holds 0.76 GiB on GPU 0 and, in mode busy,
    # computes (matmuls) from when the glob WAIT_FOR matches (a run folder: after the gate's preflight) on;
    # its pid on stdout once its memory is held
    "$PY" - "$1" "$2" "$OUT/tenant-$1.ready" <<'TENANT' > "$OUT/tenant-$1.log" 2>&1 &
import glob, sys, time
import torch
mode, wait_for, ready = sys.argv[1:4]
held = torch.empty(int(0.76 * 2**30), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
open(ready, "w").close()
if mode == "busy":
    while not glob.glob(wait_for):
        time.sleep(0.05)
    a = torch.randn(4096, 4096, device="cuda")
    while True:
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
time.sleep(3600)
TENANT
    local pid=$!
    for _ in $(seq 600); do [ -e "$OUT/tenant-$1.ready" ] && break; sleep 0.1; done
    echo "$pid"
}

case "$STEP" in
warm)
    mkdir -p "$OUT"
    nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv > "$OUT/gpus.csv" 2>&1
    limit=(${LOAD_LIMIT:+--load-limit "$LOAD_LIMIT"})  # a dry run on a busy CPU box: LOAD_LIMIT=100
    common=(--out "$OUT/findings" --runs "$OUT/runs" "${limit[@]}")
    # (i) the graph MLP gate as committed (configs/resident-graph.toml preloads numpy and torch), n = 4
    graph_gate=configs/resident-graph.toml
    if [ -n "${STEPS:-}" ]; then
        sed -e "s|torch/mlp-resident.toml|$(arm_config mlp-resident)|" -e "s|torch/mlp-graph.toml|$(arm_config mlp-graph)|" \
            configs/resident-graph.toml > configs/graph-warm-generated.toml
        graph_gate=configs/graph-warm-generated.toml
    fi
    timed graph-warm "${GATE[@]}" run resident graph --gate "$graph_gate" --n 4 "${common[@]}"
    # (ii) A/A: the same graph arm forked warm or started cold (driver.cold_arms), interleaved, n = 6
    timed warm-cold-aa "${GATE[@]}" run cold warm --gate "$(graph_aa_file warm-cold-aa 6 cold warm cold)" "${common[@]}"
    "$PY" benchmarks/startup_summary.py --target 1.0 "$OUT"/findings/*.json | tee "$OUT/startup.txt"
    bash "$0" tenants "$OUT"
    ;;
tenants)
    mkdir -p "$OUT"
    limit=(${LOAD_LIMIT:+--load-limit "$LOAD_LIMIT"})
    # (iii) GPU co-tenants, each beside a short A/A of the graph arm (n = 2): one holding 0.76 GiB idle (no run
    # may be flagged), one computing from the first run on (every run flagged); NVML recorded beside each
    if "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
        for mode in idle busy; do
            rm -f "$OUT/tenant-$mode.ready"
            pid=$(tenant "$mode" "$OUT/tenant-$mode/runs/*/*-r[0-9]*")
            "$PY" -m gatekit_drivers.backends.record_nvml --samples 40 --interval 0.25 \
                > "$OUT/nvml-tenant-$mode.json" 2>&1 &
            recorder=$!
            timed "tenant-$mode" "${GATE[@]}" run a b --gate "$(graph_aa_file "tenant-$mode" 2 a b)" \
                --out "$OUT/tenant-$mode/findings" --runs "$OUT/tenant-$mode/runs" "${limit[@]}"
            wait "$recorder"
            kill "$pid"; wait "$pid" 2>/dev/null
            "$PY" benchmarks/startup_summary.py "$OUT/tenant-$mode"/findings/*.json | tee "$OUT/tenant-$mode.txt"
        done
    else
        echo "no CUDA GPU here: the co-tenant check needs one" | tee "$OUT/tenant.txt"
    fi
    ;;
clocks)
    mkdir -p "$OUT"
    nvidia-smi -q -d CLOCK,PERFORMANCE,ECC,COMPUTE > "$OUT/nvidia-smi-q.txt" 2>&1  # read-only, to compare
    "$PY" -m gatekit_drivers.backends.record_nvml --probe --samples 5 --interval 0.2 > "$OUT/nvml-idle.json"
    # the committed gates with the clock rule and the cycle check preregistered (copies; the committed files
    # stay as they are), and an A/A of the graph MLP against itself
    for gate in resident-mlp resident-graph image-precision; do
        sed -e '/^\[rules\]/a min_clock_share = 0.9\nconfirm_cycles = true' "configs/$gate.toml" \
            > "configs/$gate-clocks-generated.toml"
    done
    sed -e 's|^id = .*|id = "graph-aa"|' -e 's|^title = .*|title = "A/A: the graph MLP against itself"|' \
        -e 's|^n = 3|n = 6|' -e 's|^expect_diff = .*|expect_diff = []|' -e 's|^\[arms.resident\]|[arms.graph_again]|' \
        -e 's|torch/mlp-resident.toml|torch/mlp-graph.toml|' configs/resident-graph-clocks-generated.toml \
        > configs/graph-aa-generated.toml
    "$PY" -m gatekit_drivers.backends.record_nvml --samples 60 --interval 0.25 > "$OUT/nvml-busy.json" &
    recorder=$!
    common=(--out "$OUT/findings" --runs "$OUT/runs")
    timed graph-aa "${GATE[@]}" run graph_again graph --gate configs/graph-aa-generated.toml "${common[@]}"
    wait "$recorder"
    campaign=$(campaign_file campaign-one-gpu)
    sed -i -e 's|\(gate = ".*\)\.toml"|\1-clocks-generated.toml"|' "$campaign"
    timed campaign-one-gpu "${GATE[@]}" campaign "$campaign" --max-parallel 1
    ;;
setup)
    for wheel in .whl/*.whl .whl/extra/*.whl; do
        [ -e "$wheel" ] || continue
        module=$(basename "$wheel" | cut -d- -f1 | tr 'A-Z' 'a-z')
        case "$module" in nvidia_ml_py) module=pynvml ;; python_dateutil) module=dateutil ;; pillow) module=PIL ;; esac
        "$PY" -c "import $module" 2>/dev/null || "$PY" -m pip install -q --no-index --no-deps --no-compile "$wheel"
    done
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
    "$PY" -c "import torch, gatekit, pynvml; print('torch', torch.__version__, 'GPUs', torch.cuda.device_count())"
    ;;
one-gpu)
    mkdir -p "$OUT"
    nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv > "$OUT/gpus.csv"
    common=(--out "$OUT/findings" --runs "$OUT/runs")
    timed graph-classic "${GATE[@]}" run resident graph --gate configs/resident-graph.toml --n 4 "${common[@]}"
    timed graph-sequential "${GATE[@]}" run resident graph --gate configs/resident-graph.toml --policy sequential \
        "${common[@]}"
    # the numpy demo gate, interleaved on the whole host vs a duet on two halves of its cores, at equal wall
    # time as the duet policy counts it: its default 12 pairs (a pair costs its slower run) against 6 + 6 runs
    timed demo-interleaved "${GATE[@]}" run off on --gate configs/demo/gate.toml --n 6 "${common[@]}"
    timed demo-duet "${GATE[@]}" run off on --gate "$(demo_duet_file)" "${common[@]}"
    timed campaign-one-gpu "${GATE[@]}" campaign "$(campaign_file campaign-one-gpu)" --max-parallel 1
    ;;
duet)
    # two rounds, the second in the reverse order, so a host that slows down during the session does not
    # favour one design; interleaved at its own n = 3 last in each
    duet_gate=$(demo_duet_file)
    for round in 1 2; do
        mkdir -p "$OUT/round$round"
        common=(--out "$OUT/round$round/findings" --runs "$OUT/round$round/runs")
        interleaved=("${GATE[@]}" run off on --gate configs/demo/gate.toml --n 6 "${common[@]}")
        duet=("${GATE[@]}" run off on --gate "$duet_gate" "${common[@]}")
        if [ "$round" = 1 ]; then
            timed r1-interleaved-6 "${interleaved[@]}"; timed r1-duet-12 "${duet[@]}"
        else
            timed r2-duet-12 "${duet[@]}"; timed r2-interleaved-6 "${interleaved[@]}"
        fi
        timed "r$round-interleaved-3" "${GATE[@]}" run off on --gate configs/demo/gate.toml "${common[@]}"
    done
    ;;
cache)
    mkdir -p "$OUT"
    common=(--out "$OUT/findings" --runs "$OUT/runs")
    timed graph-series-1 "${GATE[@]}" run resident graph --gate configs/resident-graph.toml --n 2 "${common[@]}"
    timed graph-series-2 "${GATE[@]}" run resident graph --gate configs/resident-graph.toml --n 2 "${common[@]}"
    ;;
two-gpus)
    mkdir -p "$OUT"
    for index in 0 1; do
        "$PY" -m gatekit_drivers.backends.record_nvml --index "$index" --samples 1 > "$OUT/nvml-gpu$index.json"
    done
    common=(--out "$OUT/findings" --runs "$OUT/runs")
    timed graph-interleaved "${GATE[@]}" run resident graph --gate configs/resident-graph.toml --n 4 "${common[@]}"
    timed graph-duet "${GATE[@]}" run resident graph --gate configs/resident-graph-duet.toml "${common[@]}"
    timed image-interleaved "${GATE[@]}" run fp32 bf16 --gate configs/image-precision.toml --n 4 "${common[@]}"
    timed image-duet "${GATE[@]}" run fp32 bf16 --gate configs/image-precision-duet.toml "${common[@]}"
    timed campaign-one-gpu env CUDA_VISIBLE_DEVICES=0 "${GATE[@]}" campaign "$(campaign_file campaign-one-gpu)"
    timed campaign-two-gpus "${GATE[@]}" campaign "$(campaign_file campaign-two-gpus)" --max-parallel 2
    ;;
ray)
    mkdir -p "$OUT"
    "$PY" -c "import ray; print('ray', ray.__version__)" 2>/dev/null ||
        { echo "ray: $PY cannot import ray; install it first ($("$PY" -c 'from gatekit.distribution import install_hint; print(install_hint("ray"))'))" >&2; exit 2; }
    gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
    timed campaign-ray "${GATE[@]}" campaign "$(campaign_file campaign-ray)" --engine ray
    timed campaign-local "${GATE[@]}" campaign "$(campaign_file campaign-local)" --max-parallel "$gpus"
    ;;
ttq)
    # An idle host, BLAS threads pinned to 1 (the numpy trainer's default, stated here so host.txt records it).
    # Expected: each time-to-target gate a regression (exit 1 under --fail-on regression), each wall-time gate on
    # the same arms rejected or equivalent (exit 0); the numpy wall-time gate also under the sequential policy,
    # which can say equivalent. OUT/exits.txt "gate exit-code", OUT/verify.txt "series finding exit-code" (0:
    # verified).
    mkdir -p "$OUT"
    export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
    {
        nproc; uptime; env | grep -E '^(OPENBLAS|OMP|MKL)_NUM_THREADS=' | sort | tr '\n' ' '; echo
        "$PY" -c 'import numpy; print("numpy", numpy.__version__)'
        "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
                  torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1 | tail -1
    } > "$OUT/host.txt"
    ttq_gate() {  # ttq_gate NAME FILE [ARGS...]: gate run on configs/time-to-target/FILE, its exit in exits.txt
        local name=$1 file=$2; shift 2
        timed "$name" "${GATE[@]}" run --gate "configs/time-to-target/$file" --out "$OUT/findings" \
            --runs "$OUT/runs" --fail-on regression "$@"
        echo "$name $(tail -1 "$OUT/wall.txt" | cut -d' ' -f3)" >> "$OUT/exits.txt"
    }
    ttq_gate numpy gate.toml
    ttq_gate numpy-wall-time wall-time.toml
    ttq_gate numpy-wall-time-sequential wall-time.toml --policy sequential
    # each numpy gate again with every trainer pinned to one core (the last): where cores differ in speed (a VM's
    # vCPUs, a busy SMT sibling) the core a run lands on can matter more than its length; the 300-step runs of
    # findings/h200-2026-12-02-ttq took 50 to 84 ms on an idle host
    if command -v taskset > /dev/null; then
        core=$(( $(nproc) - 1 ))
        for file in gate wall-time; do
            sed -e 's|^id = "\(.*\)"|id = "\1-pinned"|' \
                -e "s|^argv = \[\"{python}\"|argv = [\"taskset\", \"-c\", \"$core\", \"{python}\"|" \
                "configs/time-to-target/$file.toml" > "configs/time-to-target/$file-pinned-generated.toml"
        done
        ttq_gate numpy-pinned gate-pinned-generated.toml
        ttq_gate numpy-wall-time-pinned wall-time-pinned-generated.toml
    fi
    if "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
        ttq_gate torch torch.toml
        ttq_gate torch-wall-time torch-wall-time.toml
    else
        echo "torch pair skipped: $PY has no torch that sees CUDA" | tee "$OUT/torch-skipped.txt"
    fi
    for series in "$OUT"/runs/*/; do
        [ -e "$series/predecision.toml" ] || continue
        name=$(basename "$series")
        finding=$(grep -l "\"series_id\": \"$name\"" "$OUT"/findings/*.json 2>/dev/null | head -1)
        echo "$name ${finding:+$(basename "$finding")} $("${GATE[@]}" verify "$series" $finding > /dev/null 2>&1;
            echo $?)" >> "$OUT/verify.txt"
    done
    cat "$OUT/exits.txt" "$OUT/verify.txt"
    ;;
*)
    echo "unknown step $STEP (setup, one-gpu, two-gpus, cache, duet, clocks, ray, ttq, warm, tenants)" >&2
    exit 2
    ;;
esac
