/*
 * abi.h — the constants that the compiler and the runtimes both read: how
 * a bundle's kernels bind memory, what a dispatch is pushed, and the prefill
 * chunk's default and bound. A kernel generated with one value and run with
 * another would read the wrong memory, so each is named once, here. The
 * WebGPU host (runtime/web/) reads the same values from the manifest.
 */
#ifndef SSM_BUNDLE_ABI_H
#define SSM_BUNDLE_ABI_H

#include <stdint.h>

/* The most tensors one kernel binds (its result first, then every tensor
 * it reads). */
#define SSM_BUNDLE_MAX_BINDINGS 32

/* Storage buffer bindings lie at multiples of this many bytes: the largest
 * minStorageBufferOffsetAlignment Vulkan allows, so a bundle works on every
 * device. */
#define SSM_BUNDLE_ALIGN 256

/* A WGSL storage binding covers at most this many bytes by default: 128
 * MiB, the maxStorageBufferBindingSize that every WebGPU adapter supports.
 * Larger GLSL tensors are counted in windows of the same size. */
#define SSM_BUNDLE_WINDOW ((uint64_t)1 << 27)

/* The most windows one WGSL slot may be bound as: a sanity bound (8 TiB at
 * the default window), not a device limit. A bundle compiles whatever
 * WebGPU can bind; the WebGPU host refuses a kernel with more storage
 * bindings than its adapter allows, naming the limit. */
#define SSM_BUNDLE_WGSL_MAX_WINDOWS 65536

/* Vulkan: a GLSL kernel binds one storage buffer per tensor, and a device
 * binds at most maxStorageBufferRange bytes (at least 128 MiB, the same as
 * WebGPU's window) of one. A tensor that the kernel only reads and that is
 * larger than the bundle's window is bound as several windows: its reads
 * pick the window by index, and the window's size in 32-bit words is
 * specialization constant SSM_BUNDLE_GLSL_WINDOW_ID, which the runtime sets
 * from the device's limit at load time (larger windows than the bundle's
 * leave the last ones unused). A tensor that a kernel writes is never
 * split. */
#define SSM_BUNDLE_GLSL_WINDOW_ID 0
/* The most windows of one GLSL tensor, and of storage bindings of one GLSL
 * kernel with its windows (the Vulkan runtime's descriptor set layout). */
#define SSM_BUNDLE_GLSL_MAX_WINDOWS 32
#define SSM_BUNDLE_GLSL_MAX_BINDINGS 64

/* A kernel that reads the run's token count (a prefill run shorter than its
 * program) gets it as a u32 push constant of this many bytes. */
#define SSM_BUNDLE_RUN_PUSH_BYTES 4

/* The prefill program's token count (its chunk) when none is asked for,
 * and the most one may have. A prompt's last part is one run of any length
 * up to the chunk, so a short prompt does not pay for a large one. */
#define SSM_CHUNK_DEFAULT 512
#define SSM_CHUNK_MAX 4096

/* Vulkan: the scratch that the cooperative-matrix GEMMs' prep kernels
 * share ends in this many 32-bit counters, zero at its allocation, which
 * no kernel's own scratch reaches: a GEMM split over k across workgroups
 * (gemm_coop.glsl.in's SPLIT) counts a tile's finished parts in counter
 * `tile` (from the binding's end), and the last part sets it back to 0. */
#define SSM_SCRATCH_COUNTERS 1024

#endif
