/*
 * knobs.h — the generator's tuning knobs: workgroup sizes, tiles, and the
 * thresholds that choose one kernel over another, each with the reason for
 * its value in one line. A knob changes how fast a kernel runs, never what
 * it computes beyond the order of f32 sums that the families document. The
 * measurements behind the values are in docs/performance.md; what each
 * language allows is in lang.def.
 */
#ifndef SSM_CODEGEN_KNOBS_H
#define SSM_CODEGEN_KNOBS_H

/* ---- one item a thread ---------------------------------------------------- */

/* elementwise work: 256 threads hide memory latency on any GPU */
#define KNOB_POINTWISE_THREADS 256
/* embedding rows: element copies, as elementwise work */
#define KNOB_EMBED_THREADS 256
/* reduce: one output a thread, each a serial loop over the axis */
#define KNOB_REDUCE_THREADS 256
/* rope, gather, topk, matmul_sel: few items of serial work, so small workgroups */
#define KNOB_ITEMS_THREADS 64
/* attention: a workgroup a query head and token, its threads over the head's dims (DPT each) */
#define KNOB_ATTENTION_THREADS 64
/* delta_rule: threads a workgroup, a value column each (fewer for a narrow head) */
#define KNOB_DELTA_THREADS 64
/* conv1d: a thread a channel and block of steps; 64 is a wave or two subgroups anywhere */
#define KNOB_CONV1D_THREADS 64
/* conv1d: steps a thread, so that its window's K - 1 past inputs are read once a block */
#define KNOB_CONV1D_STEPS 16

/* ---- threads that share a row --------------------------------------------- */

/* a row's threads at least: one subgroup, so that its reduction has no idle lanes */
#define KNOB_ROW_THREADS_MIN 32
/* a row's threads at most: WebGPU's default limit, which every device allows */
#define KNOB_ROW_THREADS_MAX 256
/* sample: a vocabulary row is long, so two subgroups at least */
#define KNOB_SAMPLE_THREADS_MIN 64

/* ---- matmul: which kernel -------------------------------------------------- */

/* decode of a few sequences: the weight's bytes are the cost, gemv streams them once */
#define KNOB_GEMV_MAX_ROWS 4
/* a batched program's rows up to this many: gemv too, in tiles of rows
 * (beyond, the GEMM: at 64 rows it takes half gemv's time on an H200) */
#define KNOB_GEMV_BATCH_MAX_ROWS 16
/* ... of at most this many rows (a power of two dividing KNOB_ROW_THREADS_MAX) */
#define KNOB_GEMV_TILE_ROWS 16
/* ... and this many columns a workgroup, of a wide matmul */
#define KNOB_GEMV_TILE_COLS 16
/* ... each thread reading this many steps of k at once */
#define KNOB_GEMV_TILE_AHEAD 4
/* a few more rows: the matmul template, one tile of rows for each read of a weight */
#define KNOB_MATMUL_MAX_ROWS SSM_MATMUL_MAX_ROWS /* passes.h: fuse.c agrees */
/* matmul: rows of a tile, whose sums a thread keeps in registers */
#define KNOB_MATMUL_TILE_ROWS 8
/* WGSL's matmul of COLS columns a workgroup (decode's gemv there): up to this many at once,
 * their sums through one pass of the reduction (its tree's barriers once, not per column) */
#define KNOB_WGSL_MATMUL_COLS_AT_ONCE 8
/* ... within WebGPU's default workgroup storage */
#define KNOB_WGSL_WORKGROUP_BYTES 16384

/* ---- gemv ------------------------------------------------------------------- */

/* 2 columns a workgroup (ROWS), sharing each read of x, from this many columns */
#define KNOB_GEMV_ROWS2_N 512
/* 4 columns a workgroup from this many columns, where the grid still fills a GPU */
#define KNOB_GEMV_ROWS4_N 2048
/* 8 columns where k is this long, so that x's long row is read once for more columns */
#define KNOB_GEMV_ROWS8_K 8192
/* COLS columns a workgroup, x held in registers across them, from this many columns */
#define KNOB_GEMV_COLS_N 8192
/* ... where k is this long, so that a thread's slice of x is worth keeping */
#define KNOB_GEMV_COLS_K 1024
/* ... or, whatever k, where the columns are more than this (an lm_head) */
#define KNOB_GEMV_COLS_ANY_K_N 16384
/* COLS: small workgroups leave a short tail after the grid's last wave */
#define KNOB_GEMV_COLS 8
/* up to KNOB_GEMV_COLS_ANY_K_N columns of a k this long, wider workgroups: */
#define KNOB_GEMV_WIDE_K 4096
/* ... of this many columns, about one wave of a large GPU */
#define KNOB_GEMV_WIDE_COLS 32
/* ... taken 8 at a time (ROWS), as the widest ROWS form does */
#define KNOB_GEMV_WIDE_ROWS 8
/* a ROWS workgroup reads its epilogue's operands before the weights, to wait for both at once */
#define KNOB_GEMV_TOUCH 1

/* ---- gemm (portable) -------------------------------------------------------- */

/* blocks of 64 x 64 outputs, 4 x 4 a thread: 256 threads, staging well within 16 KiB */
#define KNOB_GEMM_BLOCK 64
/* blocks shrink to 32 x 32 (rows first) while the grid is thin, and M of 32 or less takes 32 */
#define KNOB_GEMM_BLOCK_MIN 32
/* a grid of fewer workgroups than this leaves most of a large GPU idle */
#define KNOB_GEMM_MIN_GROUPS 512
/* k of a staged slice: its 16 products a sum, then those sums in order, for accuracy */
#define KNOB_GEMM_BK 16
/* columns a thread: one 16-byte read of staged w per k */
#define KNOB_GEMM_TN 4
/* GLSL: big blocks where there are this many, which still fill a large GPU */
#define KNOB_GEMM_BIG_GROUPS 256
/* big blocks: 128 x 128, half the shared-memory reads and loop overhead a product */
#define KNOB_GEMM_BIG_BLOCK 128
/* big blocks: 8 x 8 outputs a thread, 256 threads */
#define KNOB_GEMM_BIG_TILE 8
/* big blocks: k in slices of 32, summed as two of 16 (the same sums as KNOB_GEMM_BK) */
#define KNOB_GEMM_BIG_BK 32
/* GLSL's split-K on thin grids: k-groups until the grid has about this many threads */
#define KNOB_GEMM_SPLIT_K_THREADS 32768
/* at least 3 k-groups, or none: a split must shorten the walk over k to pay for its sums */
#define KNOB_GEMM_SPLIT_K_MIN 3
/* 7 k-groups of 4.5 KiB staging fit the 32 KiB of shared memory of the smallest GPUs */
#define KNOB_GEMM_SPLIT_K_MAX 7
/* slices of k a k-group takes at least: the next one loads while one is multiplied */
#define KNOB_GEMM_SPLIT_K_SLICES 2

/* ---- gemm on cooperative matrices (GLSL) ----------------------------------- */

/* tiles of 128 x 128 where there are this many (about one wave), else 128 x 64;
 * with x made ready before the GEMM (coop_prep), 128 x 128 at any count: a
 * narrow tile takes about as long as a wide one (docs/performance.md) */
#define KNOB_COOP_BIG_TILES 128
/* fewer tiles than this of 128 rows over a long k (x_proj) leave a GPU idle: portable gemm */
#define KNOB_COOP_THIN_TILES 64
/* ... a k this long, where the few tiles would each walk far */
#define KNOB_COOP_THIN_K 1024
/* ... unless x is made ready first (coop_prep): then split over k across the grid's
 * workgroups, each part at least this many slices of 32 */
#define KNOB_COOP_SPLIT_SLICES 8
/* ... into parts enough for about this many workgroups (two a multiprocessor of a large GPU) */
#define KNOB_COOP_SPLIT_GROUPS 256
/* slices of w read into L2 ahead on wide tiles: a workgroup waits for each slice otherwise */
#define KNOB_COOP_AHEAD 2
/* two slices' staging, one barrier a slice (gemm_coop's DB): fewer waits on each slice's
 * loads, except on narrow tiles with an rmsnorm prologue, which were slower with it */
#define KNOB_COOP_DOUBLE 1
#define KNOB_COOP_DOUBLE_NARROW_NORM 0

/* a batched program's matmuls of gemv's rows (up to 16): coop_few (gemv_coop.glsl.in), those
 * of at least this many columns (x_proj's 160 take 28 us in gemv, 36 in coop_few's 10
 * workgroups, on an H200) */
#define KNOB_COOP_FEW_MIN_COLS 256
/* ... tiles of 16 columns a workgroup (half of it beyond 32 rows: the sums' registers) */
#define KNOB_COOP_FEW_COLS 4
/* ... fewer of them while the workgroups are fewer than this (about a wave) */
#define KNOB_COOP_FEW_GROUPS 128
/* ... subgroups that split k, at most */
#define KNOB_COOP_FEW_SUBGROUPS 16
/* ... each thread with this many loads of 8 weights in flight */
#define KNOB_COOP_FEW_AHEAD 4
/* ... within this much shared memory (device.c's condition for the variants) */
#define KNOB_COOP_FEW_SHARED (48 * 1024)

/* a batched program's matmuls of more rows, up to this many: coop_rows (gemm_few.glsl.in, x
 * made ready by gemm_coop_prep.glsl.in), where k is a multiple of 16 */
#define KNOB_COOP_ROWS_MAX 64
/* ... tiles of 16 columns a subgroup: two from this many tiles on (wide matrices), else one */
#define KNOB_COOP_ROWS_WIDE_TILES 256
/* ... subgroups that split k, enough for about this many subgroups in all (measured on an
 * H200 in bench/gemm_lab/few.glsl: 1,024 took the least time on matrices from 160 x 4096
 * to 32768 x 2048) */
#define KNOB_COOP_ROWS_SUBGROUPS 1024
/* ... at most this many a column group, each with at least this many steps of 16 values */
#define KNOB_COOP_ROWS_SPLIT 16
#define KNOB_COOP_ROWS_MIN_STEPS 4
/* ... and at least this many subgroups a workgroup (column groups side by side) */
#define KNOB_COOP_ROWS_GROUP_SUBGROUPS 4

/* ---- scan ------------------------------------------------------------------- */

/* state elements of a row, a thread each: WebGPU's default workgroup size limit */
#define KNOB_SCAN_MAX_N 256
/* threads a workgroup, rows of N packed up to it, so that small states fill a workgroup */
#define KNOB_SCAN_THREADS 128
/* floats of products c*h kept for a pass: 16 KiB, WebGPU's default workgroup storage */
#define KNOB_SCAN_SHARED 4096
/* steps whose inputs a thread reads before it advances: their loads overlap */
#define KNOB_SCAN_UNROLL 8
/* a prefill run's scan (scan_ch): threads it aims for (a quarter of the H200's
 * resident threads), ... */
#define KNOB_SCAN_CH_THREADS 32768
/* ... the inputs (a, b and c each) a thread holds for its group of steps, at most */
#define KNOB_SCAN_CH_INPUTS 32
/* ... the steps of a pass, whose cached norms are computed at its start */
#define KNOB_SCAN_CH_PASS 64

/* ---- ssd: the chunked scan of a separable state (Mamba-2's prefill) --------- */

/* programs of fewer tokens a run keep the sequential scan: its walk is a few
 * steps, and it is decode's arithmetic, so their runs give decode's logits
 * bit for bit (a reordered f32 sum in a hybrid's scan moves its logits by
 * about 1e-6: zamba2_tiny's by 2.4e-6 with y's sum over N reversed) */
#define KNOB_SSD_MIN_TOKENS 8
/* tokens a chunk (L): G = C B^T costs 2 L N a token, the walk T / L steps;
 * halved per language until the tiles fit its workgroup memory (at a slice
 * of 64 and a state of 128: 32 in GLSL, 16 in WGSL) */
#define KNOB_SSD_CHUNK 64
/* head channels a workgroup (the P slice; one grid for both languages): all
 * of mamba2-2.7b's 64, so that its C B^T, C and B are computed once a head,
 * not once a slice; its 80 workgroups (a head each) are fewer than a large
 * GPU's multiprocessors */
#define KNOB_SSD_SLICE 64
/* state columns (of N) staged a step of C, B and the state's tile: 32, or
 * fewer where L's tiles leave no room */
#define KNOB_SSD_TILE_N 32
/* the shortest chunk and narrowest tile the plan shrinks to before a smaller slice */
#define KNOB_SSD_MIN 8
/* threads a workgroup: 8 warps share each staged tile; fewer where the tiles are small */
#define KNOB_SSD_THREADS 256
/* a thread's state elements, in registers: a slice of 64 x 128 over 256 threads is 32 */
#define KNOB_SSD_STATE_REGS 64

/* ---- delta_rule: the chunked form (the WY / UT representation) ------------- */

/* programs of fewer tokens a run keep the step-by-step kernel: decode's
 * arithmetic, so a short prefill gives decode's logits bit for bit, and a
 * walk of a few steps gains nothing from the chunk's products */
#define KNOB_DELTA_MIN_TOKENS 8
/* tokens a chunk (C): the triangular solve costs C^2 / 2 a column, the walk
 * T / C steps; halved per language until K, Q [C][DK] and the C x C tiles fit
 * its workgroup memory (at DK = 128: 16 in GLSL, 8 in WGSL) */
#define KNOB_DELTA_CHUNK 64
/* the shortest chunk the plan shrinks to before it keeps the sequential kernel */
#define KNOB_DELTA_MIN_CHUNK 4
/* value columns (threads) a workgroup of the chunked kernel, each thread a
 * column of the state through the chunk's products: its walk is latency-bound,
 * so warps a multiprocessor count for more than workgroups (at Qwen3-Next's
 * widths on an H200, 64 gave 1.19 ms a layer and chunk of 512, 32 gave 1.72) */
#define KNOB_DELTA_CHUNK_THREADS 64

#endif
