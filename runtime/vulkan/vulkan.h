/*
 * vulkan.h — the Vulkan backend: devices, buffers, kernels and recorded
 * programs (the base layer: instance.c, device.c, buffer.c, kernel.c,
 * program.c), and the backend that runs a compiled bundle on them
 * (exec.c).
 */
#ifndef SSM_VULKAN_H
#define SSM_VULKAN_H

#include "bundle/bundle.h"
#include "runtime/backend/backend.h"
#include "runtime/weights/weights.h"

/* ---- devices, buffers, kernels, programs (the base layer) ------------------ */

/* The Vulkan base layer: device discovery and selection, buffers, compute
 * kernels (SPIR-V), and programs — lists of dispatches recorded once into one
 * command buffer and replayed on every run. Every Vulkan failure comes back
 * as an SSM_ERR_DEVICE status naming the call and the VkResult. Objects are
 * single-threaded: use one ssm_vk from one thread at a time. */
typedef struct ssm_vk ssm_vk;
typedef struct ssm_vk_buffer ssm_vk_buffer;
typedef struct ssm_vk_kernel ssm_vk_kernel;
typedef struct ssm_vk_program ssm_vk_program;

typedef enum {
  SSM_VK_TYPE_OTHER,
  SSM_VK_TYPE_INTEGRATED,
  SSM_VK_TYPE_DISCRETE,
  SSM_VK_TYPE_VIRTUAL,
  SSM_VK_TYPE_CPU,
} ssm_vk_device_type;

/* Optional device capabilities (bits of ssm_vk_device_info.features). */
enum {
  SSM_VK_F16_STORAGE = 1 << 0,   /* storageBuffer16BitAccess */
  SSM_VK_F16 = 1 << 1,           /* shaderFloat16 */
  SSM_VK_INT64 = 1 << 2,         /* shaderInt64 */
  SSM_VK_INT16 = 1 << 3,         /* shaderInt16 */
  SSM_VK_INT8_STORAGE = 1 << 4,  /* storageBuffer8BitAccess */
  SSM_VK_INT8 = 1 << 5,          /* shaderInt8 */
  SSM_VK_SUBGROUP_ARITH = 1 << 6, /* subgroup arithmetic in compute shaders */
  /* VK_NV_cooperative_matrix with 16 x 16 x 16 f16 x f16 + f32 tiles on
   * 32-wide subgroups, shaderFloat16 and vulkanMemoryModel: what the
   * cooperative-matrix kernel variants (codegen.h, glsl_coop) need */
  SSM_VK_COOPMAT = 1 << 7
};

/* What `ssmc devices` shows about one physical device. */
typedef struct {
  int index; /* position in ssm_vk_list_devices' order (the --device N) */
  char name[256];
  ssm_vk_device_type type;
  char driver[256];          /* driver name and info, e.g. "llvmpipe (Mesa 22.3.6)" */
  uint32_t api_version;      /* VK_MAKE_API_VERSION packing */
  uint32_t vendor_id, device_id;
  int usable;                /* Vulkan >= 1.1 and a compute queue */
  uint64_t min_storage_buffer_offset_alignment;
  uint64_t max_storage_buffer_range;
  uint64_t max_memory_allocation_size; /* 0 if unknown */
  uint64_t device_local_bytes;         /* size of the largest device-local heap */
  uint32_t max_push_constants_size;
  uint32_t max_workgroup_invocations;
  uint32_t max_workgroup_count[3];
  uint32_t subgroup_size;
  unsigned features; /* SSM_VK_* bits the device supports */
  int timestamps;             /* the compute queue writes timestamps */
  float timestamp_period_ns;  /* nanoseconds per timestamp tick */
} ssm_vk_device_info;

/* Enumerates the physical devices into a malloc'd array (free() it). No
 * Vulkan loader driver or no device is an error: "no Vulkan device found
 * (is mesa-vulkan-drivers installed?)". */
ssm_status ssm_vk_list_devices(ssm_vk_device_info **out_devices, int *out_count);
/* The index ssm_vk_open(-1, ...) picks: the first usable discrete GPU, then
 * integrated, virtual, CPU, other; -1 if none is usable. */
int ssm_vk_default_device(const ssm_vk_device_info *devices, int count);
/* "discrete GPU", "integrated GPU", "virtual GPU", "cpu", "other". */
const char *ssm_vk_device_type_name(ssm_vk_device_type t);
/* Formats the list for `ssmc devices`, marking the default; malloc'd text. */
char *ssm_vk_format_devices(const ssm_vk_device_info *devices, int count);

/* Opens device `device_index` (-1: ssm_vk_default_device). With
 * `validation` (or env SSM_VK_VALIDATION=1) enables VK_LAYER_KHRONOS_validation
 * with synchronization validation when the layer is installed; its messages
 * are counted, the first few kept, and each is passed to ssm_log as
 * "vulkan validation error: ..." (so messages emitted while destroying are
 * seen too). Enables storageBuffer16BitAccess, shaderFloat16, shaderInt64,
 * shaderInt16, 8-bit storage/arith where the device has them and logs the
 * ones it lacks. An index out of range is an error that says how many
 * devices exist. Env SSM_VK_FORCE_STAGING=1 makes device buffers go through
 * the staging path even on unified-memory devices (for tests). Env
 * SSM_VK_MAX_STORAGE_RANGE=BYTES lowers the device's maxStorageBufferRange
 * as ssm_vk_info reports and checks it (for tests of the split of large
 * tensors into windows); a value below 256 or not a number is an error. */
ssm_status ssm_vk_open(int device_index, int validation, ssm_vk **out);
/* Waits for the device to be idle, then frees everything the context owns
 * except buffers, kernels and programs, which must be destroyed first. */
void ssm_vk_close(ssm_vk *vk);
/* The opened device. */
const ssm_vk_device_info *ssm_vk_info(const ssm_vk *vk);
/* SSM_VK_* bits enabled on the opened device. */
unsigned ssm_vk_features(const ssm_vk *vk);
/* Error naming the device and each missing SSM_VK_* bit of `needed`
 * ("device 'X' lacks shaderFloat16 (needed for f16 kernels)"); NULL if
 * all are enabled. `why` completes the sentence. */
ssm_status ssm_vk_require(const ssm_vk *vk, unsigned needed, const char *why);
/* minStorageBufferOffsetAlignment of the device (a power of two). */
size_t ssm_vk_storage_alignment(const ssm_vk *vk);
/* `offset` rounded up to ssm_vk_storage_alignment. */
size_t ssm_vk_align(const ssm_vk *vk, size_t offset);

/* Whether VK_LAYER_KHRONOS_validation is installed (needs no device). */
int ssm_vk_validation_available(void);
/* Vulkan instances this process has made so far: sessions and device
 * listings without validation share one, kept until exit (instance.c
 * says why); each session with validation makes its own. */
int ssm_vk_instances_made(void);
/* Whether this context runs with the validation layer. */
int ssm_vk_validation_enabled(const ssm_vk *vk);
/* Validation messages of error / warning severity seen so far. */
int ssm_vk_validation_errors(const ssm_vk *vk);
int ssm_vk_validation_warnings(const ssm_vk *vk);
/* The i-th recorded validation message (the first 8 are kept); NULL past
 * the end. */
const char *ssm_vk_validation_message(const ssm_vk *vk, int i);

typedef enum {
  SSM_VK_BUFFER_DEVICE, /* device-local storage buffer */
  SSM_VK_BUFFER_HOST,   /* host-visible, coherent storage buffer (staging, readback) */
} ssm_vk_buffer_kind;

/* A storage buffer of `bytes` (> 0) with its own memory, usable as the
 * source and destination of transfers. A size beyond the device's heap or
 * allocation limit, or a failed allocation, is a clear error naming the
 * size ("vkAllocateMemory(1.2 GiB device-local): VK_ERROR_OUT_OF_DEVICE_MEMORY")
 * and nothing stays allocated. */
ssm_status ssm_vk_buffer_create(ssm_vk *vk, size_t bytes, ssm_vk_buffer_kind kind,
                                ssm_vk_buffer **out);
/* NULL is fine. The buffer must not be in use by a pending program. */
void ssm_vk_buffer_destroy(ssm_vk *vk, ssm_vk_buffer *b);
size_t ssm_vk_buffer_size(const ssm_vk_buffer *b);
/* The persistent host mapping of a HOST buffer (or of a DEVICE buffer on a
 * unified-memory device); NULL when the buffer is not mapped. */
void *ssm_vk_buffer_map(const ssm_vk_buffer *b);
/* Copies `n` bytes between host memory and [offset, offset+n) of `b`,
 * through a reusable staging buffer when `b` is not mapped. Synchronous: the
 * data is in place (or read) when they return. Ranges are checked. */
ssm_status ssm_vk_buffer_upload(ssm_vk *vk, ssm_vk_buffer *b, size_t offset,
                                const void *data, size_t n);
ssm_status ssm_vk_buffer_download(ssm_vk *vk, ssm_vk_buffer *b, size_t offset,
                                  void *data, size_t n);
/* Fills [offset, offset+n) with the 32-bit `value` (offset and n multiples
 * of 4); synchronous. */
ssm_status ssm_vk_buffer_fill(ssm_vk *vk, ssm_vk_buffer *b, size_t offset, size_t n,
                              uint32_t value);

/* One device-to-device copy of ssm_vk_buffer_copy. */
typedef struct {
  ssm_vk_buffer *src, *dst;
  size_t src_offset, dst_offset, bytes;
} ssm_vk_copy;

/* Runs the `n` copies (vkCmdCopyBuffer) in one submission after all
 * earlier work and waits for them: the data never passes through the
 * host. Ranges are checked first; on error nothing is copied. */
ssm_status ssm_vk_buffer_copy(ssm_vk *vk, const ssm_vk_copy *copies, int n);

/* A compute kernel: SPIR-V with entry point "main", storage buffers at set
 * 0, bindings 0..n_bindings-1, and `push_bytes` of push constants. */
typedef struct {
  const char *name; /* for messages; NULL: "kernel" */
  const uint32_t *spirv;
  size_t words;
  int n_bindings;
  uint32_t push_bytes;         /* multiple of 4, <= maxPushConstantsSize */
  const uint32_t *spec_values; /* 32-bit specialization constant i = constant_id i */
  int n_spec;                  /* e.g. {64} sets local_size_x_id = 0 to 64 */
} ssm_vk_kernel_desc;

/* Creates the descriptor set layout, pipeline layout and compute pipeline
 * once. Bad SPIR-V or limits are errors naming the kernel. */
ssm_status ssm_vk_kernel_create_desc(ssm_vk *vk, const ssm_vk_kernel_desc *desc,
                                     ssm_vk_kernel **out);
/* Shorthand for a nameless kernel without specialization constants. */
ssm_status ssm_vk_kernel_create(ssm_vk *vk, const uint32_t *spirv, size_t words,
                                int n_bindings, uint32_t push_bytes,
                                ssm_vk_kernel **out);
/* NULL is fine. No program using it may still exist. */
void ssm_vk_kernel_destroy(ssm_vk *vk, ssm_vk_kernel *k);

/* One storage-buffer binding of a dispatch: `offset` must be a multiple of
 * ssm_vk_storage_alignment; `range` 0 means to the end of the buffer; the
 * range must not exceed maxStorageBufferRange. */
typedef struct {
  ssm_vk_buffer *buffer;
  size_t offset;
  size_t range;
} ssm_vk_binding;

/* Starts an empty program. Dispatches and barriers are collected, then
 * ssm_vk_program_end builds every descriptor set and records one command
 * buffer; ssm_vk_program_run replays it without allocating anything. Each
 * run begins after all earlier work of the queue, memory included, and its
 * writes are visible to the host and to transfers when it completes. */
ssm_status ssm_vk_program_create(ssm_vk *vk, ssm_vk_program **out);
/* Appends a dispatch of `k` over groups gx*gy*gz, with k's n_bindings
 * `bindings` and k's push_bytes from `push` (copied). Checked against the
 * device limits; on error nothing is appended. */
ssm_status ssm_vk_program_add_dispatch(ssm_vk_program *p, ssm_vk_kernel *k,
                                       const ssm_vk_binding *bindings,
                                       const void *push, uint32_t gx, uint32_t gy,
                                       uint32_t gz);
/* Appends a full compute-to-compute memory barrier: dispatches after it see
 * the writes of the dispatches before it. */
void ssm_vk_program_add_barrier(ssm_vk_program *p);
/* Appends a copy of `bytes` (a multiple of 4, as the offsets) from `src` at
 * `src_offset` to `dst` at `dst_offset` (vkCmdCopyBuffer). It waits for every
 * dispatch and copy before it; the dispatches after it see what it wrote.
 * Ranges are checked; on error nothing is appended. */
ssm_status ssm_vk_program_add_copy(ssm_vk_program *p, ssm_vk_buffer *src, size_t src_offset,
                                   ssm_vk_buffer *dst, size_t dst_offset, size_t bytes);
/* Asks for a timestamp around every dispatch (before ssm_vk_program_end);
 * an error on a device whose compute queue has none. */
ssm_status ssm_vk_program_profile(ssm_vk_program *p);
/* After a run of a profiled program: the time of each dispatch in
 * microseconds (out_us holds ssm_vk_program_dispatches entries): from the
 * end of the one before (the start, for the first) to its end, so a
 * barrier's wait counts with the dispatch after it. */
ssm_status ssm_vk_program_times(ssm_vk *vk, ssm_vk_program *p, double *out_us);
/* Builds the descriptor sets and records the command buffer. */
ssm_status ssm_vk_program_end(ssm_vk_program *p);
/* Number of dispatches recorded. */
int ssm_vk_program_dispatches(const ssm_vk_program *p);
/* Submits the recorded program; returns without waiting. A program already
 * in flight is waited for first. */
ssm_status ssm_vk_program_submit(ssm_vk *vk, ssm_vk_program *p);
/* Waits until the last submission of `p` has completed. */
ssm_status ssm_vk_program_wait(ssm_vk *vk, ssm_vk_program *p);
/* Submit, then wait. */
ssm_status ssm_vk_program_run(ssm_vk *vk, ssm_vk_program *p);
/* Waits for it if in flight, then frees it. NULL is fine. */
void ssm_vk_program_destroy(ssm_vk *vk, ssm_vk_program *p);

/* ---- the Vulkan backend (exec.c) ------------------------------------------ */

typedef struct {
  int device;     /* --device N; -1 picks (a discrete GPU first) */
  int validation; /* enable VK_LAYER_KHRONOS_validation */
  ssm_progress progress; /* reading the weights (ssm_st_set_progress); may cancel */
} ssm_vk_backend_opts;

/* A backend (backend.h) that runs `bundle` (owned by the backend from now
 * on, also when opening fails) on a Vulkan device with the checkpoint at
 * `weights`: buffers sized from the manifest, weights uploaded once
 * (converted as the manifest says), pipelines and command buffers made once,
 * state kept on the device across runs. A missing tensor or a shape
 * mismatch names the tensor. */
ssm_status ssm_vk_backend_open(ssm_bundle *bundle, const char *weights,
                               const ssm_vk_backend_opts *opts, ssm_backend **out);
/* The device of a Vulkan backend (for its info and validation counts). */
ssm_vk *ssm_vk_backend_device(ssm_backend *b);

#endif
