#!/usr/bin/env bash
# One device call: build the MoE test and benchmark for sm_90a in build-device, run the GPU tests of the MoE
# kernel, the benchmark, a SASS summary and (if ncu is there) per-kernel counters at 1 and 64 tokens.
# Logs go to $OUT (or ./moe-out). The linker flag tolerates duplicate definitions of identical kernels that two
# other CUDA translation units may both instantiate from a shared header.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${OUT:-$root/moe-out}"
mkdir -p "$out"
b="$root/build-device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader
cmake -S "$root" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV4_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
      "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-multiple-definition" >/dev/null || exit 1
cmake --build "$b" --target dsv4_tests_ops_tests dsv4_bench_moe -j16 2>&1 | tail -2
obj="$b/src/backend/cuda/CMakeFiles/dsv4_backend_cuda.dir/kernels/moe/moe.cu.o"
if command -v cuobjdump >/dev/null || [ -x /usr/local/cuda/bin/cuobjdump ]; then
    cod="$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)"
    "$cod" --dump-sass "$obj" > "$out/moe.sass" 2>&1
    for k in ring gate_up down; do
        awk "/Function : .*sm90_moe_${k}_kernel/{f=1} f&&/Function : /&&!/${k}/{f=0} f" "$out/moe.sass" > "$out/$k.sass"
        printf '%-8s HMMA %s  LDG.128 %s  HMUL2 %s  LOP3 %s  SHF %s  LDL/STL %s  total %s\n' "$k" \
            "$(grep -c HMMA "$out/$k.sass")" "$(grep -c 'LDG.E.*128' "$out/$k.sass")" \
            "$(grep -c HMUL2 "$out/$k.sass")" "$(grep -c LOP3 "$out/$k.sass")" \
            "$(grep -c 'SHF\|SHL\|SHR' "$out/$k.sass")" \
            "$(grep -c 'LDL\|STL' "$out/$k.sass")" "$(grep -c '/\*[0-9a-f]*\*/' "$out/$k.sass")"
    done
fi
timeout 300 "$b/tests/dsv4_tests_ops_tests" --gtest_filter='*MoeDecode*' 2>&1 | tee "$out/test.txt" | \
    grep -E "bit-exact|FAILED|PASSED|rel_l2|Failure" | head -60
timeout 240 "$b/bench/moe/dsv4_bench_moe" 2>&1 | tee "$out/bench.txt"
# clocks after the run: a throttled GPU shows here (and in the copy bandwidth the benchmark prints)
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv
if command -v ncu >/dev/null; then
    for T in 1 64; do
        timeout 45 ncu --clock-control none -k regex:sm90_moe --launch-skip 6 --launch-count 3 --metrics \
gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,\
sm__inst_issued.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active \
            "$b/bench/moe/dsv4_bench_moe" --profile $T > "$out/ncu_T$T.txt" 2>&1
        grep -E "sm90_moe|gpu__time|dram__|sm__" "$out/ncu_T$T.txt" | head -24
    done
fi
