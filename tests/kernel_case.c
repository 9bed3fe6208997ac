/*
 * kernel_case.c — test_kernels.c's harness (kernel_case.h).
 */
#include <math.h>
#include <string.h>

#include "kernel_case.h"

ssm_vk *g_vk;
int g_log_errors, g_cases, g_skips, g_failures;
double g_worst;

void on_log(const char *msg, void *user) {
  if (!strstr(msg, "vulkan validation")) return;
  if (g_log_errors++ < 5) fprintf(stderr, "\n  %s\n", msg);
}

/* ---- random data (xorshift64*, fixed seed) ------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float rnd(float lo, float hi) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  uint64_t r = g_rng * 0x2545f4914f6cdd1dull;
  return lo + (hi - lo) * (float)((double)(r >> 40) / (double)(1ull << 24));
}

/* ---- one case: a graph around the node under test ------------------------- */



const ssm_type k_scalar = {SSM_F32, 0, {0}};

ssm_type kc_f32(int rank, const int64_t *dims) { return ssm_type_make(SSM_F32, rank, dims); }

void kc_begin(kcase *kc, const char *label) {
  *kc = (kcase){.label = label, .g = ssm_test_graph("kernel_test")};
}

/* A weight "w<i>" of type t, uniform in [lo, hi]; kc->wdata[i] may be edited. */
ssm_value *kc_weight(kcase *kc, ssm_type t, float lo, float hi) {
  CU_ASSERT_FATAL(kc->nw < MAXW);
  int i = kc->nw++;
  snprintf(kc->wname[i], sizeof kc->wname[i], "w%d", i);
  ssm_node *n = ssm_graph_append(kc->g, SSM_OP_WEIGHT, &t, 0, NULL);
  ssm_node_set_str(kc->g, n, "name", kc->wname[i]);
  int64_t count = ssm_type_numel(&t);
  kc->wdata[i] = malloc((size_t)count * sizeof(float));
  for (int64_t k = 0; k < count; k++) kc->wdata[i][k] = rnd(lo, hi);
  kc->wval[i] = n->result;
  return n->result;
}

ssm_value *kc_const(kcase *kc, double v) {
  ssm_node *n = ssm_graph_append(kc->g, SSM_OP_CONST, &k_scalar, 0, NULL);
  ssm_node_set_float(kc->g, n, "value", v);
  return n->result;
}

/* State "s<k>" for the k-th call. */
ssm_value *kc_state(kcase *kc, ssm_type t) {
  CU_ASSERT_FATAL(kc->nstates < 2);
  char *name = kc->sname[kc->nstates];
  snprintf(name, sizeof kc->sname[0], "s%d", kc->nstates++);
  ssm_node *n = ssm_graph_append(kc->g, SSM_OP_STATE, &t, 0, NULL);
  ssm_node_set_str(kc->g, n, "name", name);
  return n->result;
}

ssm_value *kc_pos(kcase *kc) {
  ssm_type t = ssm_type_make(SSM_I32, 1, (int64_t[]){1});
  ssm_node *n = ssm_graph_append(kc->g, SSM_OP_INPUT, &t, 0, NULL);
  ssm_node_set_str(kc->g, n, "name", "pos");
  return n->result;
}

ssm_value *kc_row_pos(kcase *kc, int rows, const int32_t *pos) {
  CU_ASSERT_FATAL(rows >= 1 && rows <= 64);
  memcpy(kc->row_pos, pos, (size_t)rows * 4);
  kc->nrows = rows;
  ssm_type t = ssm_type_make(SSM_I32, 1, (int64_t[]){rows});
  ssm_node *n = ssm_graph_append(kc->g, SSM_OP_INPUT, &t, 0, NULL);
  ssm_node_set_str(kc->g, n, "name", "pos");
  return n->result;
}

ssm_value *kc_tokens(kcase *kc, int count, const int32_t *ids) {
  CU_ASSERT_FATAL(count <= 512);
  memcpy(kc->tokens, ids, (size_t)count * sizeof *ids);
  kc->ntokens = count;
  ssm_type t = ssm_type_make(SSM_I32, 1, (int64_t[]){count});
  ssm_node *n = ssm_graph_append(kc->g, SSM_OP_INPUT, &t, 0, NULL);
  ssm_node_set_str(kc->g, n, "name", "tokens");
  return n->result;
}

/* The node under test; its result type is inferred when the case is run,
 * after the caller has set the attributes. */
ssm_node *kc_op(kcase *kc, ssm_op op, int nargs, ssm_value *a, ssm_value *b, ssm_value *c,
                ssm_value *d) {
  ssm_value *args[4] = {a, b, c, d};
  return ssm_graph_append(kc->g, op, &k_scalar, nargs, args);
}

ssm_st *kc_write_weights(kcase *kc, int index) {
  char file[64];
  const char *names[MAXW];
  ssm_type types[MAXW];
  const float *data[MAXW];
  for (int i = 0; i < kc->nw; i++) {
    names[i] = kc->wname[i];
    types[i] = kc->wval[i]->type;
    data[i] = kc->wdata[i];
  }
  snprintf(file, sizeof file, "kernels%d.safetensors", index);
  const char *path = ssm_test_write_safetensors(file, kc->nw, names, types, data);
  ssm_st *st = NULL;
  SSM_ASSERT_OK(ssm_st_open(path, &st));
  return st;
}

/* ---- the two sides --------------------------------------------------------- */

/* The node whose states a case compares: its anchor, or the node under test. */
static const ssm_node *stateful(const kcase *kc, const ssm_node *n) {
  return kc->anchor ? kc->anchor : n;
}

/* Elements of all the node's states together. */
size_t kc_states_count(const ssm_node *n) {
  int si[2], ns = ssm_op_state_operands(n->op, si);
  size_t c = 0;
  for (int j = 0; j < ns; j++) c += (size_t)ssm_type_numel(&n->args[si[j]]->type);
  return c;
}

/* Runs the graph `runs` times on the interpreter: out gets runs * numel
 * results, state (if any) the final states, one after another. */
ssm_status kc_cpu_side(kcase *kc, const ssm_st *st, const ssm_node *n, int runs, float *out,
                       float *state) {
  ssm_cpu *c = NULL;
  SSM_TRY(ssm_cpu_create(st, &c));
  size_t count = (size_t)ssm_type_numel(&n->result->type);
  ssm_status s = NULL;
  int64_t at[64];
  for (int r = 0; r < runs && !s; r++) {
    for (int t = 0; t < kc->nrows; t++) at[t] = kc->row_pos[t] + r;
    if (kc->nrows) ssm_cpu_set_row_positions(c, at, kc->nrows);
    s = ssm_cpu_run(c, kc->g, kc->tokens, out + (size_t)r * count, count);
  }
  const ssm_node *owner = stateful(kc, n);
  int si[2], ns = ssm_op_state_operands(owner->op, si);
  for (int j = 0; j < ns && !s; j++) {
    const ssm_value *sv = owner->args[si[j]];
    ssm_graph *peek = ssm_test_graph("peek");
    ssm_node *sn = ssm_graph_append(peek, SSM_OP_STATE, &sv->type, 0, NULL);
    ssm_node_set_str(peek, sn, "name", ssm_node_str(sv->def, "name", ""));
    ssm_graph_append(peek, SSM_OP_OUTPUT, NULL, 1, &sn->result);
    s = ssm_cpu_run(c, peek, NULL, state, (size_t)ssm_type_numel(&sv->type));
    state += ssm_type_numel(&sv->type);
    ssm_graph_destroy(peek);
  }
  ssm_cpu_destroy(c);
  return s;
}

/* Host data of operand v (NULL: zeros, for a state). */
static const void *operand_data(kcase *kc, const ssm_value *v, float *scratch) {
  switch (v->def->op) {
  case SSM_OP_WEIGHT:
    for (int i = 0; i < kc->nw; i++)
      if (kc->wval[i] == v) return kc->wdata[i];
    break;
  case SSM_OP_CONST: *scratch = (float)ssm_node_float(v->def, "value", 0); return scratch;
  case SSM_OP_INPUT: return kc->tokens;
  default: break;
  }
  return NULL;
}

/* Generates, compiles and runs n's kernel `runs` times. A device limit the
 * kernel exceeds is written to `skip` and nothing runs. */
ssm_status kc_gpu_side(kcase *kc, const ssm_node *n, int runs, float *out, float *state,
                       char *skip, size_t skip_n) {
  ssm_arena *arena = ssm_test_arena();
  ssm_vk_buffer *bufs[1 + MAXW] = {0};
  ssm_vk_binding binds[1 + MAXW] = {{0}};
  ssm_vk_kernel *k = NULL;
  ssm_vk_program *p = NULL;
  uint32_t *words = NULL;
  size_t nwords = 0;
  ssm_cg_kernel kern;
  ssm_status s;
  if (kc->norm) { /* the two as one fused group, as passes/fuse.c makes them */
    ssm_node_set_int(kc->g, kc->norm, "group", 0);
    ssm_node_set_int(kc->g, (ssm_node *)n, "group", 0);
    ssm_group gr = {.id = 0, .first = kc->norm, .root = (ssm_node *)n, .anchor = (ssm_node *)n,
                    .norm = kc->norm};
    s = ssm_cg_kernel_for_group(kc->g, &gr, arena, &kern);
  } else if (kc->first) {
    ssm_group gr = {.id = 0, .first = kc->first, .root = (ssm_node *)n, .anchor = kc->anchor};
    s = ssm_cg_kernel_for_group(kc->g, &gr, arena, &kern);
  } else {
    s = ssm_cg_kernel_for_node(kc->g, n, arena, &kern);
  }
  const ssm_vk_device_info *info = ssm_vk_info(g_vk);
  if (!s) {
    const char *ls = strstr(kern.glsl, "local_size_x = ");
    unsigned local = ls ? (unsigned)atoi(ls + 15) : 1;
    if (local > info->max_workgroup_invocations)
      snprintf(skip, skip_n, "workgroup of %u invocations > the device's %u (%s)", local,
               info->max_workgroup_invocations, kern.params);
    for (int d = 0; d < 3; d++)
      if (kern.groups[d] > info->max_workgroup_count[d])
        snprintf(skip, skip_n, "grid dim %d of %u groups > the device's %u (%s)", d,
                 kern.groups[d], info->max_workgroup_count[d], kern.params);
    if (skip[0]) goto done;
    CU_ASSERT_EQUAL_FATAL(kern.bind[0], n->result);
    if (kc->family) CU_ASSERT_STRING_EQUAL(kern.family, kc->family);
    s = ssm_cg_compile_glsl(kern.glsl, kc->label, &words, &nwords);
  }
  if (!s) {
    ssm_vk_kernel_desc d = {.name = kc->label, .spirv = words, .words = nwords,
                            .n_bindings = kern.nbindings,
                            .push_bytes = kern.run_count ? SSM_BUNDLE_RUN_PUSH_BYTES : 0};
    s = ssm_vk_kernel_create_desc(g_vk, &d, &k);
  }
  for (int b = 0; !s && b < kern.nbindings; b++) {
    const ssm_value *v = kern.bind[b]; /* the result, then what the kernel reads */
    size_t bytes = (size_t)ssm_type_numel(&v->type) * 4;
    s = ssm_vk_buffer_create(g_vk, bytes, SSM_VK_BUFFER_DEVICE, &bufs[b]);
    float scratch;
    const void *data = b ? operand_data(kc, v, &scratch) : NULL;
    uint16_t *half = NULL; /* a 16-bit weight goes up as its 16-bit values */
    if (data && ssm_dtype_is_quant(v->type.dtype)) { /* a quantized one as its bytes */
      ssm_qlayout l = ssm_qlayout_of(&v->type);
      half = calloc(l.bytes / 2 + 2, 2);
      CU_ASSERT_EQUAL(ssm_quantize(data, &l, (uint8_t *)half), -1);
      data = half;
      bytes = (size_t)l.bytes;
    } else if (data && (v->type.dtype == SSM_F16 || v->type.dtype == SSM_BF16)) {
      half = calloc(bytes / 4 + 2, 2);
      for (size_t e = 0; e < bytes / 4; e++)
        half[e] = v->type.dtype == SSM_F16 ? ssm_f32_to_f16(((const float *)data)[e])
                                           : ssm_f32_to_bf16(((const float *)data)[e]);
      data = half;
      bytes = (bytes / 2 + 3) / 4 * 4;
    }
    if (!s && data) s = ssm_vk_buffer_upload(g_vk, bufs[b], 0, data, bytes);
    else if (!s) s = ssm_vk_buffer_fill(g_vk, bufs[b], 0, bytes, b ? 0 : 0x7fc00000u /* NaN */);
    free(half);
    binds[b] = (ssm_vk_binding){bufs[b], 0, 0};
  }
  if (!s) s = ssm_vk_program_create(g_vk, &p);
  /* a whole run (kernels with run_count), or the case's count */
  uint32_t run_tokens = (uint32_t)(kc->count ? kc->count : kc->ntokens);
  if (!s) s = ssm_vk_program_add_dispatch(p, k, binds, kern.run_count ? &run_tokens : NULL,
                                          kern.groups[0], kern.groups[1], kern.groups[2]);
  if (!s) s = ssm_vk_program_end(p);
  size_t count = (size_t)ssm_type_numel(&n->result->type);
  int32_t *ints = malloc(count * 4);
  int pb = -1; /* the input "pos": the run's first position, as the runtimes keep it */
  for (int b = 1; b < kern.nbindings; b++)
    if (kern.bind[b]->def->op == SSM_OP_INPUT &&
        !strcmp(ssm_node_str(kern.bind[b]->def, "name", ""), "pos"))
      pb = b;
  for (int r = 0; r < runs && !s; r++) {
    int32_t pos[64] = {r * kc->ntokens};
    for (int t = 0; t < kc->nrows; t++) pos[t] = kc->row_pos[t] + r;
    if (pb > 0) s = ssm_vk_buffer_upload(g_vk, bufs[pb], 0, pos, 4 * (size_t)(kc->nrows ? kc->nrows : 1));
    if (!s) s = ssm_vk_program_run(g_vk, p);
    if (!s) s = ssm_vk_buffer_download(g_vk, bufs[0], 0, ints, count * 4);
    for (size_t i = 0; !s && i < count; i++)
      out[(size_t)r * count + i] = n->result->type.dtype == SSM_I32
                                       ? (float)ints[i]
                                       : ((float *)ints)[i];
  }
  free(ints);
  const ssm_node *stn = stateful(kc, n);
  int si[2], ns = ssm_op_state_operands(stn->op, si);
  for (int j = 0; j < ns; j++) {
    int sb = -1;
    for (int b = 0; b < kern.nbindings; b++)
      if (kern.bind[b] == stn->args[si[j]]) sb = b;
    CU_ASSERT(sb > 0);
    size_t sn = (size_t)ssm_type_numel(&stn->args[si[j]]->type);
    if (!s && sb > 0) s = ssm_vk_buffer_download(g_vk, bufs[sb], 0, state, sn * 4);
    state += sn;
  }
done:
  ssm_vk_program_destroy(g_vk, p);
  ssm_vk_kernel_destroy(g_vk, k);
  for (int b = 0; b < 1 + MAXW; b++) ssm_vk_buffer_destroy(g_vk, bufs[b]);
  free(words);
  ssm_arena_destroy(arena);
  return s;
}

/* max|g - c| / max(max|c|, 1e-30) over n values, the index of the largest
 * difference in *at; NaN where the CPU has a number makes the error inf. */
double kc_compare(const float *g, const float *c, size_t n, size_t *at) {
  double maxdiff = 0, maxref = 0;
  *at = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)g[i] - (double)c[i]);
    if (g[i] == c[i]) d = 0; /* equal infinities */
    if (isnan(d)) d = INFINITY;
    if (d > maxdiff) {
      maxdiff = d;
      *at = i;
    }
    if (isfinite(c[i])) maxref = fmax(maxref, fabs((double)c[i]));
  }
  return maxdiff / fmax(maxref, 1e-30);
}

/* Completes the graph around `n`, runs both sides, compares, prints the
 * measured error against `tol` and frees the case. */
void kc_verdict(const char *label, double err, double tol, int also, const float *gpu,
                const float *cpu, size_t at) {
  int ok = err <= tol && also;
  g_failures += !ok;
  if (ok && err > g_worst) g_worst = err;
  printf("\n    %-4s %-46s err %.2e  tol %.0e", ok ? "ok" : "FAIL", label, err, tol);
  if (!ok) printf("  (at [%zu]: gpu %.9g cpu %.9g)", at, gpu[at], cpu[at]);
  CU_ASSERT(ok);
}

void kc_check(kcase *kc, ssm_node *n, double tol) {
  ssm_status s = ssm_op_infer(n, &n->result->type);
  SSM_ASSERT_OK(s);
  ssm_graph_append(kc->g, SSM_OP_OUTPUT, NULL, 1, &n->result);
  SSM_ASSERT_OK(ssm_graph_verify(kc->g));
  ssm_st *st = kc_write_weights(kc, g_cases);
  size_t scount = kc_states_count(n);
  int runs = kc->runs ? kc->runs : scount ? 2 : 1;
  size_t count = (size_t)ssm_type_numel(&n->result->type);
  float *cpu = calloc(runs * count + scount + 1, sizeof(float));
  float *gpu = calloc(runs * count + scount + 1, sizeof(float));
  char skip[256] = "";
  g_cases++;
  ssm_status cs = st ? kc_cpu_side(kc, st, n, runs, cpu, cpu + runs * count) : NULL;
  ssm_status gs = st && !cs ? kc_gpu_side(kc, n, runs, gpu, gpu + runs * count, skip, sizeof skip)
                            : NULL;
  if (cs) fprintf(stderr, "\n  %s: cpu: %s\n", kc->label, ssm_status_message(cs));
  if (gs) fprintf(stderr, "\n  %s: gpu: %s\n", kc->label, ssm_status_message(gs));
  CU_ASSERT_PTR_NULL(cs);
  CU_ASSERT_PTR_NULL(gs);
  if (skip[0]) {
    g_skips++;
    printf("\n    SKIP %-46s %s", kc->label, skip);
  } else if (st && !cs && !gs) {
    size_t at;
    double err = kc_compare(gpu, cpu, runs * count + scount, &at);
    kc_verdict(kc->label, err, tol, 1, gpu, cpu, at);
  }
  fflush(stdout);
  ssm_status_free(cs);
  ssm_status_free(gs);
  free(cpu);
  free(gpu);
  ssm_st_close(st);
  for (int i = 0; i < kc->nw; i++) free(kc->wdata[i]);
  ssm_graph_destroy(kc->g);
  kc->g = NULL;
}


/* Ends a test's list of case lines, so CUnit's verdict gets its own line. */
void end_list(void) { printf("\n  "); }
