#!/bin/bash
# Session 23's second call: the failing tests by name (their messages), then the benches cut off.
T0=$(date +%s); B=gpu-bundle
for f in $B/debs/*.deb; do dpkg -x $f / ; done; ldconfig
for j in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do [ -f $j ] && { export VK_DRIVER_FILES=$j VK_ICD_FILENAMES=$j; break; }; done
mkdir -p /tmp/x; for t in kernels golden; do xz -dc $B/bin/test-$t.xz > /tmp/x/test-$t; chmod +x /tmp/x/test-$t; done
export DDL_TEST_DATA=$PWD/$B/data DDL_REQUIRE_COOP=1 DDL_CACHE_DIR=$(mktemp -d)
timeout 110 /tmp/x/test-kernels --color never --test-threads 5 matmul::a_gpus_split_along_k matmul::cooperative_matrix matmul::f16_forms_are attention::blocked_attention_with_f16 matmul::few_tile_products > $OUT/fail-kernels.log 2>&1; echo "kernels rc=$? $(( $(date +%s)-T0 ))s"
timeout 40 /tmp/x/test-golden --color never golden_f16_precision --nocapture > $OUT/fail-golden.log 2>&1; echo "golden rc=$? $(( $(date +%s)-T0 ))s"
unset DDL_REQUIRE_COOP
L=$(( ${1:-400} - ($(date +%s)-T0) ))
bash $B/run.sh --stages bench,torch --only 'bench-train-small-f16-vs-f32,bench-kernels,bench-state-seg*,bench-state-finish-*,torch-small-baseline-bf16-compile' --budget $L
