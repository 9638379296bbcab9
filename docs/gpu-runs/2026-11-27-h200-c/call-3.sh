#!/bin/bash
# Session 23's third call: the fixed tests (R16 rounding, split tests), coop speed, f16 training.
T0=$(date +%s); B=gpu-bundle; LIM=${1:-150}
el() { echo $(( $(date +%s)-T0 )); }
left() { echo $(( LIM - $(el) )); }
for f in $B/debs/*.deb; do dpkg -x $f / ; done; ldconfig
for j in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do [ -f $j ] && { export VK_DRIVER_FILES=$j VK_ICD_FILENAMES=$j; break; }; done
mkdir -p /tmp/x; for t in kernels golden ddl; do f=$B/bin/test-$t.xz; [ $t = ddl ] && f=$B/bin/ddl.xz; xz -dc $f > /tmp/x/$t; chmod +x /tmp/x/$t; done
export DDL_TEST_DATA=$PWD/$B/data DDL_CACHE_DIR=$(mktemp -d)
(export DDL_REQUIRE_COOP=1; timeout 40 /tmp/x/kernels --color never --test-threads 7 r16_operands f16_forms pack_f16 few_tile a_gpus_split blocked_attention_with_f16 cooperative > $OUT/t-kernels.log 2>&1; echo "kernels rc=$? $(el)s")
timeout 30 /tmp/x/golden --color never > $OUT/t-golden.log 2>&1; echo "golden rc=$? $(el)s"
D=/tmp/x/ddl
{ timeout 15 $D info; timeout 30 $D bench matmul --sizes 4096 --cases nn,tn --operands rh --variants all --reps 3 --json; echo coop-off; DDL_FORMS=matmul_coop=0 timeout 15 $D bench matmul --sizes 4096,8192 --cases nn --operands rh --variants auto --reps 3 --json; echo coop-on; timeout 15 $D bench matmul --sizes 8192 --cases nn --operands rh --variants auto --reps 3 --json; } > $OUT/b-coop.log 2>&1; echo "coop rc=$? $(el)s"
timeout $(( $(left) > 70 ? 70 : $(left) )) $D bench train --preset small-124m --variant baseline --precision f16 --against baseline --batch 8 --seq 1024 --steps 4 --no-autotune --json > $OUT/b-f16.log 2>&1; echo "f16 train rc=$? $(el)s"
L=$(left); [ $L -gt 5 ] && { timeout $L /tmp/x/kernels --color never every_shader_variant > $OUT/t-variants.log 2>&1; echo "variants rc=$? $(el)s"; }
tail -3 $OUT/t-kernels.log $OUT/t-golden.log; grep -i "cooperative-matrix" $OUT/b-coop.log | head -3; grep -h '"ratio\|ratio' $OUT/b-f16.log | tail -2
