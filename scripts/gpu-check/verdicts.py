#!/usr/bin/env python3
"""The GPU check's predictions against what a run measured, and what each verdict decides.

    python3 scripts/gpu-check/verdicts.py RESULTS.tar.gz [RESULTS-2.tar.gz ...] [--run N] [--all]

Reads the raw JSON lines and status rows of one or more `results*.tar.gz` that `run.sh` wrote
(a later archive's stage replaces an earlier one's of the same name) and prints a markdown table:
per prediction of docs/GPU.md the stage, the measured value (with the 95 % interval of a paired
A/B), the predicted range, whether it held, and what the verdict decides under the rule GPU.md
states for it (a form's default, a line of `kernels::forms::MEASURED`, or only a note). Only
predictions of run `--run` (default: the next run's) are shown, and of those only the ones whose
stage ran, unless `--all`. Python's standard library only.

Kinds of measurement (`what`):
  ratio       a `bench train --against…` row: the median of the blocks' step ratios, its interval
  step_ms     the measured side's median step (ms) of that row, or a plain `bench train` row's
  tflops      a `bench matmul` row (variant, case, m, n, k, operands as given): TFLOP/s
  kernel_ms   a `bench kernels` case (its name up to the shape): ms
  split_ms    a profiled `bench train --dispatches` step: the ms of the split's kernels whose
              name (shader::entry) starts with one of the given prefixes, summed
  tests       the kernel tests' row of status.tsv (pass or fail, with the failing tests)
"""

import io
import json
import os
import sys
import tarfile

# The predictions. run: the GPU run they are for; doc: the section of docs/GPU.md that makes
# them; rule: what follows from the verdict (GPU.md's words, shortened).
PREDICTIONS = [
    # --- run 4 (checked in docs/GPU.md; kept so the script reproduces those verdicts) ---
    dict(run=4, id="checks-step", stage="bench-train-small-checks", what="step_ms", lo=245, hi=270,
         doc="Prediction for shader modules without wgpu's runtime checks",
         rule="faster: keep the modules without checks as a candidate form"),
    dict(run=4, id="checks-4096-nn", stage="bench-matmul-checks", what="ratio_row",
         sel=dict(variant="w128", case="nn", m=4096), lo=0.80, hi=0.93,
         doc="Prediction for shader modules without wgpu's runtime checks", rule="(the product's A/B)"),
    dict(run=4, id="split512", stage="bench-train-small-split512", what="ratio", lo=0.97, hi=0.99,
         doc="Run 4: split_k_tiles=512",
         rule="interval below 1: split_k_tiles=512 a MEASURED line for the card"),
    dict(run=4, id="coop128-4096", stage="bench-matmul-coop128", what="tflops",
         sel=dict(variant="coop128", case="nn", m=4096, operands="rh"), lo=90, hi=200,
         doc="Predictions for coop128", rule="below 90: the staging is what to rewrite (coop128v)"),
    # --- the next run (run 5): docs/GPU.md "Next run" ---
    dict(run=5, id="unchecked-tests", stage="test-kernels", what="tests",
         doc="Next run (call 1: DDL_FORMS=shader_checks=0)",
         rule="all pass: shader_checks=0 becomes the H200's MEASURED line (superseding "
              "unchecked=all-delta-shortconv); the two run-4 failures again: keep it"),
    dict(run=5, id="coop128v", stage="bench-matmul-coop128v", what="tflops",
         sel=dict(variant="coop128v", case="nn", m=4096, operands="rh"), lo=80, hi=200,
         doc="Predictions for coop128v", rule="beside coop128 in the same process (≈ 34)"),
    dict(run=5, id="coop128v-mma", stage="bench-matmul-coop128v", what="tflops",
         sel=dict(variant="coop128v:mma", case="nn", m=4096, operands="rh"), lo=200, hi=300,
         doc="Predictions for coop128v", rule="below 100: the fragment loads are slow"),
    dict(run=5, id="coop128v-stage", stage="bench-matmul-coop128v", what="tflops",
         sel=dict(variant="coop128v:stage", case="nn", m=4096, operands="rh"), lo=150, hi=None,
         doc="Predictions for coop128v", rule="below 100: the global loads and stashes are slow"),
    dict(run=5, id="coop-mma-b", stage="bench-matmul-coop128v", what="tflops",
         sel=dict(variant="coop:mma-b", case="nn", m=4096, operands="rh"), lo=100, hi=250,
         doc="Predictions for coop128v", rule="far above coop128v:mma: fragments load whole "
                                              "only from constant offsets"),
    dict(run=5, id="coop128v-f16", stage="bench-matmul-coop128v-f16", what="tflops",
         sel=dict(variant="coop128v", case="nn", m=4096, operands="f16"), lo=100, hi=250,
         doc="Predictions for coop128v", rule="(f16-stored operands)"),
    dict(run=5, id="coop128d", stage="bench-matmul-coop128v-f16", what="tflops",
         sel=dict(variant="coop128d", case="nn", m=4096, operands="f16"), lo=60, hi=200,
         doc="Predictions for coop128d",
         rule="above coop128v: staging limits, f16-stored activations are worth building; "
              "below 60: the driver's fragment loads from storage are slow"),
    dict(run=5, id="f16-coop128v-step", stage="bench-train-small-f16-coop128v", what="ratio",
         lo=0.45, hi=0.70, doc="Predictions for coop128v",
         rule="interval below 1: coop128v beats coop128 in the f16 step; matmul_coop(_v) on for "
              "the card only if that step also beats the f16 tiles' (run 4: 1.237x the f32 step)"),
    dict(run=5, id="blocked256-fwd", stage="bench-attention-blocked256", what="kernel_ms",
         name="attention_forward[blocked256]", lo=1.25, hi=1.40,
         doc="Predictions for the softmax steps by teams", rule="(fewer bytes written, every form)"),
    dict(run=5, id="blocked256-bwd", stage="bench-attention-blocked256", what="kernel_ms",
         name="attention_backward[blocked256]", lo=2.5, hi=2.8,
         doc="Predictions for the softmax steps by teams", rule="(fewer bytes written, every form)"),
    dict(run=5, id="team32-fwd", stage="bench-attention-team32", what="kernel_ms",
         name="attention_forward[blocked256]", lo=0.95, hi=1.10,
         doc="Predictions for the softmax steps by teams", rule="(teams of 32)"),
    dict(run=5, id="team32-bwd", stage="bench-attention-team32", what="kernel_ms",
         name="attention_backward[blocked256]", lo=2.3, hi=2.5,
         doc="Predictions for the softmax steps by teams", rule="(teams of 32)"),
    dict(run=5, id="team64-fwd", stage="bench-attention-team64", what="kernel_ms",
         name="attention_forward[blocked256]", rel_to="team32-fwd", lo=0.9, hi=1.1,
         doc="Predictions for the softmax steps by teams", rule="within 10 % of teams of 32"),
    dict(run=5, id="attn-team-step", stage="bench-train-small-attn-team", what="ratio",
         lo=0.965, hi=0.98, doc="Predictions for the softmax steps by teams",
         rule="interval below 1: the GPU default attn_team=32 (forms.rs defaults)"),
    dict(run=5, id="blocked512-fwd", stage="bench-attention-blocked512", what="kernel_ms",
         name="attention_forward[blocked512]", rel_to="blocked256-fwd", lo=0.9, hi=1.1,
         doc="Predictions for the softmax steps by teams (blocks of 512)",
         rule="a measurement; the step's A/B (bench-train-small-blocked512) decides"),
    dict(run=5, id="blocked512-bwd", stage="bench-attention-blocked512", what="kernel_ms",
         name="attention_backward[blocked512]", rel_to="blocked256-bwd", lo=0.9, hi=1.1,
         doc="Predictions for the softmax steps by teams (blocks of 512)",
         rule="a measurement; the step's A/B (bench-train-small-blocked512) decides"),
    dict(run=5, id="rows-split", stage="bench-train-small-ddl", what="split_ms",
         prefixes=["attention_rows::rows_fwd", "attention_rows::rows_bwd"], lo=12, hi=15,
         doc="Predictions for the softmax steps by teams",
         rule="the one-invocation softmax steps with fewer bytes (run 3: 17.1 ms)"),
    dict(run=5, id="attn-products-split", stage="bench-train-small-ddl", what="split_ms",
         prefixes=["attention:matmul::"], lo=28, hi=36,
         doc="The attention over the whole causal score matrix",
         rule="the blocked attention's products in the step (at 18-19 TFLOP/s in run 3): "
              "with blocked512's rate and the causal form's A/B, what limits them"),
    dict(run=5, id="causal-base-fwd", stage="bench-attention-causal", what="kernel_ms",
         name="attention_forward[blocked256]", lo=1.25, hi=1.40,
         doc="The attention over the whole causal score matrix",
         rule="(blocked:256 beside the causal form, the same process)"),
    dict(run=5, id="causal-base-bwd", stage="bench-attention-causal", what="kernel_ms",
         name="attention_backward[blocked256]", lo=2.5, hi=2.8,
         doc="The attention over the whole causal score matrix",
         rule="(blocked:256 beside the causal form, the same process)"),
    dict(run=5, id="causal-fwd", stage="bench-attention-causal", what="kernel_ms",
         name="attention_forward[causal]", rel_to="causal-base-fwd", lo=0.70, hi=0.88,
         doc="The attention over the whole causal score matrix",
         rule="a measurement; the step's A/B (bench-train-small-causal) decides"),
    dict(run=5, id="causal-bwd", stage="bench-attention-causal", what="kernel_ms",
         name="attention_backward[causal]", rel_to="causal-base-bwd", lo=0.70, hi=0.88,
         doc="The attention over the whole causal score matrix",
         rule="a measurement; the step's A/B (bench-train-small-causal) decides"),
    dict(run=5, id="causal-step", stage="bench-train-small-causal", what="ratio", lo=0.95, hi=0.97,
         doc="The attention over the whole causal score matrix",
         rule="interval below 1: attention=causal a MEASURED line for the H200; not below 1: "
              "dispatch size does not limit the products, read bench-attention-causal"),
    dict(run=5, id="conv-fwd-split", stage="bench-train-small-ddl-new-forms", what="split_ms",
         prefixes=["shortconv::token_forward_wb"], lo=2.2, hi=2.8,
         doc="Prediction for the compressor's batched walks",
         rule="with conv-batch's A/B: both walks faster and the interval not above 1 -> "
              "conv_batch on for GPUs (run 3's plain walk: 4.03 ms)"),
    dict(run=5, id="conv-bwd-split", stage="bench-train-small-ddl-new-forms", what="split_ms",
         prefixes=["shortconv::token_backward_wb"], lo=4.7, hi=5.9,
         doc="Prediction for the compressor's batched walks", rule="(run 3's plain walk: 6.75 ms)"),
    dict(run=5, id="conv-batch-step", stage="bench-train-small-conv-batch", what="ratio",
         lo=0.987, hi=0.995, doc="Prediction for the compressor's batched walks",
         rule="split faster and interval not above 1: conv_batch on for GPUs"),
    dict(run=5, id="norm-vec-bwd-split", stage="bench-train-small-ddl-new-forms", what="split_ms",
         prefixes=["norm::rmsnorm_backward_v"], lo=2.6, hi=3.2,
         doc="Prediction for RMSNorm's vec teams",
         rule="above run 3's dx + partial (4.05 ms): latency-bound, try chunks of 4"),
    dict(run=5, id="norm-vec-fwd-split", stage="bench-train-small-ddl-new-forms", what="split_ms",
         prefixes=["norm::rmsnorm_forward_v"], lo=1.2, hi=1.6,
         doc="Prediction for RMSNorm's vec teams", rule="(run 3: 1.73 ms)"),
    dict(run=5, id="norm-vec-step", stage="bench-train-small-norm-vec", what="ratio",
         lo=0.990, hi=0.996, doc="Prediction for RMSNorm's vec teams",
         rule="split faster and interval not above 1: norm_vec on for GPUs"),
    dict(run=5, id="head-f16", stage="bench-train-small-head-f16", what="ratio", lo=0.84, hi=0.93,
         doc="Prediction for the LM head in f16",
         rule="1.03-1.11 if coop128v stays at coop128's rate; the form stays on either way"),
    dict(run=6, id="f16-acts", stage="bench-train-small-f16-acts", what="ratio", lo=0.98, hi=1.00,
         doc="f16_acts and the f16 A/B's other side", rule="stays on (the same bits)"),
    dict(run=6, id="residual-fused", stage="bench-train-small-residual-fused", what="ratio",
         lo=0.996, hi=0.998, doc="Prediction for the residual in the products",
         rule="stays on unless the interval lies above 1"),
    dict(run=6, id="recompute", stage="bench-train-small-recompute", what="ratio", lo=1.015, hi=1.03,
         doc="Prediction for recomputing", rule="(the price of --recompute; an option, not a default)"),
    dict(run=6, id="head-chunk", stage="bench-train-small-head-chunk", what="ratio", lo=1.003, hi=1.008,
         doc="Prediction for the LM head in slices", rule="(the price of --head-chunk; an option)"),
    dict(run=6, id="attn-p16", stage="bench-train-small-attn-p16", what="ratio", lo=0.990, hi=0.997,
         doc="Prediction for P and dS in f16", rule="stays on (the same bits)"),
    dict(run=5, id="unchecked-ddl", stage="bench-train-small-unchecked", what="ratio",
         lo=0.85, hi=0.88, doc="Prediction for the H200's unchecked modules in the ddl step",
         rule="interval above 1: drop the H200's unchecked=all-delta-shortconv line"),
    dict(run=5, id="unchecked-ddl-step", stage="bench-train-small-unchecked", what="step_ms",
         lo=265, hi=275, doc="Prediction for the H200's unchecked modules in the ddl step",
         rule="(the f32 ddl step with the H200's forms)"),
    dict(run=5, id="w128-nt", stage="bench-matmul-w128-halves", what="tflops",
         sel=dict(variant="w128", case="nt", m=4096, operands="ff"), lo=35, hi=39,
         doc="Prediction for the staged tiles' halves",
         rule="(w128 beside its halves, the same process; run 4 unchecked: 36.7)"),
    dict(run=5, id="w128-mma", stage="bench-matmul-w128-halves", what="tflops",
         sel=dict(variant="w128:mma", case="nt", m=4096, operands="ff"), lo=43, hi=55,
         doc="Prediction for the staged tiles' halves",
         rule="within 10 % of w128: the arithmetic loop limits (next: its instructions: warp "
              "layout, bigger register blocks); >= 1.25x w128: the staging is not hidden"),
    dict(run=5, id="w128-stage", stage="bench-matmul-w128-halves", what="tflops",
         sel=dict(variant="w128:stage", case="nt", m=4096, operands="ff"), lo=85, hi=170,
         doc="Prediction for the staged tiles' halves",
         rule="its time + mma's near w128's: the halves do not overlap (next: three stages, "
              "or fewer registers for more resident workgroups)"),
    dict(run=5, id="w128-mma-rel", stage="bench-matmul-w128-halves", what="tflops",
         sel=dict(variant="w128:mma", case="nt", m=4096, operands="ff"), rel_to="w128-nt",
         lo=1.15, hi=1.50, doc="Prediction for the staged tiles' halves",
         rule="below 1.10: the arithmetic loop limits w128; 1.25 and above with the staging's time "
              "+ the loop's near the whole: the halves do not overlap"),
    dict(run=5, id="w128w-nt", stage="bench-matmul-w128-halves", what="tflops",
         sel=dict(variant="w128w", case="nt", m=4096, operands="ff"), lo=36, hi=41,
         doc="Prediction for the staged tiles' halves",
         rule="(w128's loop with CUTLASS's warp tiles; the autotuner picks it where faster: "
              "bench-matmul-model-halves shows where)"),
    dict(run=5, id="baseline-step", stage="bench-train-small-baseline", what="step_ms",
         lo=245, hi=250, doc="Prediction for the H200's unchecked modules in the ddl step",
         rule="(the f32 baseline step with the H200's forms: run 4's 245.6 ms configuration)"),
    # --- the next run (run 6): docs/GPU.md "Next run" (session 69, after run 5); the five
    # A/Bs above marked run=6 were run 5's predictions that its calls did not reach ---
    dict(run=6, id="h200-forms-tests", stage="test-kernels", what="tests",
         doc="Next run (run 6: the H200's forms of run 5)",
         rule="all pass with every module unchecked, the causal attention, teams of 32 and "
              "RMSNorm's vec teams as the H200's defaults; a failure: that form's line or default goes"),
    dict(run=6, id="baseline-step-h200", stage="bench-train-small-baseline", what="step_ms",
         lo=209, hi=217, doc="Next run (run 6: the H200's forms of run 5)",
         rule="(run 5: 212.7-213.5 ms in the A/Bs of its fourth call)"),
    dict(run=6, id="ddl-step-h200", stage="bench-train-small-ddl", what="step_ms",
         lo=218, hi=228, doc="Next run (run 6: the H200's forms of run 5)",
         rule="(run 5: 221.9-222.8 ms with every module unchecked)"),
    dict(run=6, id="state-split-h200", stage="bench-train-small-ddl", what="split_ms",
         prefixes=["delta::", "shortconv::"], lo=8, hi=14,
         doc="Next run (run 6: the H200's forms of run 5)",
         rule="the delta write and the compressors unchecked (run 5 checked: 24.7 ms; the step "
              "A/B saved 14 ms): their bandwidth against the copy rate decides issue 26's target"),
    dict(run=6, id="lm-head-dx-pieces", stage="bench-matmul-model", what="tflops",
         sel=dict(variant="pieces:2", case="lm_head dX = dY·W", m=8192, operands="ff"), lo=30, hi=40,
         doc="Next run (run 6: the H200's forms of run 5)",
         rule="--tune now tunes the pieces of a product past one dispatch as training does (run 5: "
              "16.4 TFLOP/s on the heuristic's tile, 35.9 in the step); below 30: the pieces' "
              "variant is not what limits the benchmark's row"),
    dict(run=6, id="ddl-vs-baseline-h200", stage="bench-train-small-ddl-vs-baseline", what="ratio",
         lo=1.03, hi=1.06, doc="Next run (run 6: the H200's forms of run 5)",
         rule="(run 5: 1.047 [1.041, 1.052] with DDL_FORMS=unchecked=all, the H200's forms since)"),
    dict(run=6, id="torch-bf16-4096", stage="torch-matmul-bf16", what="tflops",
         sel=dict(case="nn", m=4096), lo=550, hi=800, doc="Prediction for PyTorch's f32 products",
         rule="(cuBLAS's tensor-core rate, bf16; issue 29's coop128v at 4096³ measures against it)"),
    # The f32 tiles' FMAs alone (session 70): docs/GPU.md "Prediction for the f32 tiles' FMAs alone"
    dict(run=6, id="w128-mma-6", stage="bench-matmul-w128-halves", what="tflops",
         sel=dict(variant="w128:mma", case="nt", m=4096, operands="ff"), lo=40, hi=44,
         doc="Prediction for the f32 tiles' FMAs alone", rule="(run 5: 41.8; the same process's reference)"),
    dict(run=6, id="w128-fma", stage="bench-matmul-w128-halves", what="tflops",
         sel=dict(variant="w128:fma", case="nt", m=4096, operands="ff"), lo=50, hi=62,
         doc="Prediction for the f32 tiles' FMAs alone",
         rule="(the FMAs and barriers without workgroup-memory reads; 75-93 % of the 67 peak)"),
    dict(run=6, id="w128-fma-rel", stage="bench-matmul-w128-halves", what="tflops",
         sel=dict(variant="w128:fma", case="nt", m=4096, operands="ff"), rel_to="w128-mma-6",
         lo=1.2, hi=1.5, doc="Prediction for the f32 tiles' FMAs alone",
         rule="below 1.10: the FMAs as compiled (or the clock) limit the loop; 1.25 and above: "
              "the reads and their addressing do (larger register blocks next)"),
    # PyTorch's own f32 products on the card (session 70): docs/GPU.md "Prediction for
    # PyTorch's f32 products"
    dict(run=6, id="torch-sgemm-4096", stage="torch-matmul-f32", what="tflops",
         sel=dict(case="nn", m=4096), lo=44, hi=56, doc="Prediction for PyTorch's f32 products",
         rule="(cuBLAS, TF32 off) 1.3x and more of w128's 36: the f32 target is the loop's to reach; "
              "within 1.15x: the card's f32 rate bounds both, PyTorch's edge lies outside the products"),
    dict(run=6, id="torch-sgemm-head", stage="torch-matmul-f32", what="tflops",
         sel=dict(case="lm_head fwd x·Wᵀ", m=8192), lo=44, hi=56, doc="Prediction for PyTorch's f32 products",
         rule="(the step's largest product; the engine's step ran it at 34-37)"),
    dict(run=6, id="torch-sgemm-qkv", stage="torch-matmul-f32", what="tflops",
         sel=dict(case="attn.wq/wk/wv fwd x·Wᵀ", m=8192), lo=35, hi=52,
         doc="Prediction for PyTorch's f32 products",
         rule="(384 tiles of 128² on 132 multiprocessors: the last wave costs cuBLAS too)"),
    # coop128v's staging in named registers (session 70): docs/GPU.md "Prediction for coop128v's
    # quads in registers"
    dict(run=6, id="coop128-ref", stage="bench-matmul-coop128v", what="tflops",
         sel=dict(variant="coop128", case="nn", m=4096, operands="rh"), lo=27, hi=35,
         doc="Prediction for coop128v's quads in registers",
         rule="(unchanged: coop128's staging keeps its arrays; the same process's reference)"),
    dict(run=6, id="coop128v-regs-stage", stage="bench-matmul-coop128v", what="tflops",
         sel=dict(variant="coop128v:stage", case="nn", m=4096, operands="rh"), lo=80, hi=140,
         doc="Prediction for coop128v's quads in registers",
         rule="at run 5's 38-41: the arrays were not the cause (next: f16 quads in flight, or "
              "a third buffer); above 80: they were (then coop_staging's arrays go too)"),
    dict(run=6, id="coop128v-regs", stage="bench-matmul-coop128v", what="tflops",
         sel=dict(variant="coop128v", case="nn", m=4096, operands="rh"), lo=70, hi=120,
         doc="Prediction for coop128v's quads in registers",
         rule="(run 5: 33.7-35.6; one load round trip a slice overlapped with the products: "
              "about 1.1 us a slice, 8 waves of 128 slices)"),
    dict(run=6, id="coop128v-regs-rel", stage="bench-matmul-coop128v", what="tflops",
         sel=dict(variant="coop128v", case="nn", m=4096, operands="rh"), rel_to="coop128-ref",
         lo=2.0, hi=3.5, doc="Prediction for coop128v's quads in registers",
         rule="(run 5, the same process: 1.04x coop128 at nn)"),
    dict(run=6, id="coop128vq-rel", stage="bench-matmul-coop128v", what="tflops",
         sel=dict(variant="coop128vq", case="nn", m=4096, operands="rh"), rel_to="coop128v-regs",
         lo=1.05, hi=1.4, doc="Prediction for coop128v's quads in registers",
         rule="above 1.05: registers limited it (two workgroups a multiprocessor): coop128vq's "
              "parts become coop128v's; at or below 1: not registers, or each conversion waits "
              "for its load"),
    dict(run=6, id="causal-ragged-split", stage="bench-train-small-ddl", what="split_ms",
         prefixes=["attention:matmul::wm_kn", "attention:matmul::wm_mn"], lo=11, hi=18,
         doc="Prediction for the causal products' longest tiles first",
         rule="a measurement: the causal products over keys and over queries (4 a layer) in "
              "the grid's order, their rate beside the score products' (attention:matmul::wm_kk); "
              "with causal-lpt-step, how much of their time the last wave was"),
    dict(run=6, id="causal-lpt-step", stage="bench-train-small-causal-lpt", what="ratio",
         lo=0.970, hi=0.995, doc="Prediction for the causal products' longest tiles first",
         rule="interval below 1: causal_lpt on for GPUs (the same bits); containing 1: the "
              "pick holds three or more workgroups a multiprocessor, or the card does not hand "
              "out workgroups in index order: stays off"),
    dict(run=6, id="coop128v-regs-step", stage="bench-train-small-f16-coop128v", what="ratio",
         lo=0.48, hi=0.74, doc="Prediction for coop128v's quads in registers",
         rule="(run 5: 0.915 [0.909, 0.918] of coop128's f16 step); an f16 step below the f32 "
              "step's 212.7 ms: measure the cooperative matrices on by default for f16"),
    # Session 72: "Prediction for coop128v's two slices in flight".
    dict(run=6, id="coop128v2-rel", stage="bench-matmul-coop128v", what="tflops",
         sel=dict(variant="coop128v2", case="nn", m=4096, operands="rh"), rel_to="coop128v-regs",
         lo=1.15, hi=1.8, doc="Prediction for coop128v's two slices in flight",
         rule="where coop128v-regs-stage is 80 or more (one round trip a slice): above 1.15, "
              "the next slice's loads were late (matmul_coop_v2 on with matmul_coop_v); at "
              "0.9-1.1 with the staging still near 40, the loads wait on each other, not on time; "
              "below 0.9, the second set of quads spilled or cost a resident workgroup (coop128v "
              "below 128 registers after all: then coop128vq's reading applies)"),
    dict(run=6, id="coop128v2-step", stage="bench-train-small-f16-coop128v2", what="ratio",
         lo=0.75, hi=0.95, doc="Prediction for coop128v's two slices in flight",
         rule="interval below 1: matmul_coop_v2 joins matmul_coop_v wherever that goes on; "
              "containing 1: the step's products are not waiting on their loads"),
]


def open_results(path):
    """The archive at PATH (a results*.tar.gz of run.sh), or an exit that names it, the reason and
    what was expected (the scripts of this folder read their archives through it)."""
    try:
        return tarfile.open(path)
    except (OSError, tarfile.TarError) as e:
        # (tarfile's own words for a file of another kind are a line per compression it tried.)
        why = "not a tar archive" if isinstance(e, tarfile.ReadError) else e
        sys.exit(f"{os.path.basename(sys.argv[0])}: cannot read {path}: {why} (expected a results*.tar.gz that run.sh wrote)")


def load(paths):
    """stage name -> list of JSON objects; plus the status rows (stage -> (status, details))."""
    lines, status = {}, {}
    for path in paths:
        tar = open_results(path)
        this = {}
        for m in tar.getmembers():
            base = m.name.rsplit("/", 1)[-1]
            if not m.isfile():
                continue
            if base.endswith(".jsonl") or base.endswith(".log"):
                stage = base.rsplit(".", 1)[0]
                text = tar.extractfile(m).read().decode("utf-8", "replace")
                rows = []
                for line in text.splitlines():
                    if line.startswith("{"):
                        try:
                            rows.append(json.loads(line))
                        except json.JSONDecodeError:
                            pass
                # A stage's .jsonl and .log hold the same JSON lines; keep one.
                if rows and (stage not in this or base.endswith(".jsonl")):
                    this[stage] = rows
            elif base == "status.tsv":
                for row in tar.extractfile(m).read().decode("utf-8", "replace").splitlines():
                    f = row.split("\t")
                    # A later call that skipped the stage keeps an earlier call's result, and
                    # so does a later kernels row whose kernel tests were not selected (it ran
                    # only the golden or decode tests).
                    not_run = f[1] == "skipped" or (f[0] == "kernels" and "kernels: not selected" in f[-1])
                    if len(f) >= 4 and (not not_run or f[0] not in status):
                        status[f[0]] = (f[1], f[3])
        lines.update(this)
    return lines, status


def match(row, sel):
    return all(str(row.get(k)) == str(v) for k, v in sel.items())


def measure(p, lines, status, done):
    """(value, interval or None, text) or None when the stage did not run or lacks the row."""
    w = p["what"]
    if w == "tests":
        st = status.get("kernels")
        if not st:
            return None
        return (st[0] == "pass", None, f"{st[0]}: {st[1][:300]}")
    rows = lines.get(p["stage"])
    if not rows:
        return None
    if w in ("ratio", "step_ms"):
        r = next((r for r in rows if r.get("bench") == "train_compare"), None)
        if r is None and w == "step_ms":
            r = next((r for r in rows if r.get("bench") == "train"), None)
            if r is None:
                return None
            return (r["step_ms"], None, f"{r['step_ms']:.1f} ms")
        if r is None:
            return None
        if w == "step_ms":
            return (r["median_step_ms"], None,
                    f"{r['median_step_ms']:.1f} ms (other side {r['against_median_step_ms']:.1f})")
        ci = r.get("ratio_median_ci95")
        same = {True: ", same losses", False: ", losses differ"}.get(r.get("losses_identical"), "")
        text = f"{r['ratio_median_block']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else " (no interval)") + same
        return (r["ratio_median_block"], ci, text)
    if w == "ratio_row":
        r = next((r for r in rows if r.get("bench") == "matmul" and "ratio_median_block" in r and match(r, p["sel"])), None)
        if r is None:
            return None
        ci = r.get("ratio_median_ci95")
        return (r["ratio_median_block"], ci, f"{r['ratio_median_block']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""))
    if w == "tflops":
        # (The engine's rows give GFLOP/s; PyTorch's, scripts/torch_matmul_bench.py, TFLOP/s.)
        r = [r for r in rows if r.get("bench") == "matmul" and ("gflop_per_s" in r or "tflops" in r)
             and match(r, p["sel"])]
        if not r:
            return None
        best = max(x["gflop_per_s"] / 1000 if "gflop_per_s" in x else x["tflops"] for x in r)
        if "rel_to" in p:
            base = done.get(p["rel_to"])
            if base is None:
                return None
            return (best / base, None, f"{best:.1f} TFLOP/s = {best / base:.3f}x {p['rel_to']}")
        return (best, None, f"{best:.1f} TFLOP/s")
    if w == "kernel_ms":
        r = next((r for r in rows if r.get("bench") == "kernel" and r.get("name", "").startswith(p["name"] + " ")), None)
        if r is None:
            return None
        v = r["ms"]
        if "rel_to" in p:
            base = done.get(p["rel_to"])
            if base is None:
                return None
            return (v / base, None, f"{v:.3f} ms = {v / base:.3f}x {p['rel_to']}")
        return (v, None, f"{v:.3f} ms")
    if w == "split_ms":
        r = next((r for r in rows if r.get("bench") == "train" and "split_ms" in r), None)
        if r is None:
            return None
        hits = {k: v for k, v in r["split_ms"].items() if any(k.startswith(x) for x in p["prefixes"])}
        if not hits:
            return (None, None, "not in the split: " + ", ".join(p["prefixes"]))
        v = sum(hits.values())
        # The products' rate where the split has their FLOPs (since session 40).
        g = sum(r.get("split_gflop", {}).get(k, 0.0) for k in hits)
        rate = f", {g / v:.1f} TFLOP/s" if g > 0 and v > 0 else ""
        return (v, None, f"{v:.2f} ms{rate} ({', '.join(f'{k} {x:.2f}' for k, x in sorted(hits.items()))})")
    raise ValueError(f"unknown kind {w}")


def verdict(p, m):
    v, ci, _ = m
    if p["what"] == "tests":
        return "held" if v else "missed"
    if v is None:
        return "no row"
    lo, hi = p.get("lo"), p.get("hi")
    where = "held" if (lo is None or v >= lo) and (hi is None or v <= hi) else ("below" if lo is not None and v < lo else "above")
    if ci and p["what"] in ("ratio", "ratio_row"):
        side = "below 1" if ci[1] < 1 else "above 1" if ci[0] > 1 else "includes 1"
        where += f"; interval {side}"
    return where


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    # (A misspelt option was dropped without a word: `--al` listed only the runs that ran.)
    for a in argv:
        if a.startswith("--") and a not in ("--run", "--all"):
            sys.exit(f"verdicts.py: unknown option '{a}' (expected --run N, --all, and results*.tar.gz files)")
    run = 6
    if "--run" in argv:
        i = argv.index("--run")
        if i + 1 >= len(argv) or not argv[i + 1].isdigit():
            sys.exit("verdicts.py: --run takes a run number, e.g. --run 4")
        run = int(argv[i + 1])
        args = [a for a in args if a != argv[i + 1]]
        runs = sorted({p["run"] for p in PREDICTIONS})
        if run not in runs:
            sys.exit(f"verdicts.py: --run {run}: no prediction of this page is for run {run} "
                     f"(runs with predictions: {', '.join(map(str, runs))})")
    if not args:
        sys.exit(__doc__)
    lines, status = load(args)
    out = ["| prediction | stage | measured | predicted | verdict | rule |", "|---|---|---|---|---|---|"]
    done, shown = {}, 0
    for p in [p for p in PREDICTIONS if p["run"] == run]:
        m = measure(p, lines, status, done)
        if m is not None and m[0] is not None and p["what"] in ("kernel_ms", "tflops") and "rel_to" not in p:
            done[p["id"]] = m[0]
        if m is None and "--all" not in argv:
            continue
        rng = "pass" if p["what"] == "tests" else f"{p.get('lo', '')}–{p.get('hi') if p.get('hi') is not None else ''}"
        got = "not run" if m is None else m[2]
        ver = "–" if m is None else verdict(p, m)
        out.append(f"| {p['id']} | {p['stage']} | {got} | {rng} | {ver} | {p['rule']} (GPU.md: {p['doc']}) |")
        shown += 1
    print("\n".join(out))
    print(f"\n{shown} of {sum(p['run'] == run for p in PREDICTIONS)} predictions of run {run} shown"
          + ("" if "--all" in argv else " (those whose stage ran; --all lists the rest)"))


if __name__ == "__main__":
    main(sys.argv[1:])
