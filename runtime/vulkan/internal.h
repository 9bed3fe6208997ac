/*
 * internal.h — what the files of the Vulkan base layer share and nothing
 * else sees: the objects behind ssm_vk, ssm_vk_buffer and ssm_vk_kernel,
 * and the helpers that more than one of those files calls.
 *
 * The base layer opens one device with one compute queue (on the process's
 * one shared instance, or an instance of its own with validation),
 * allocates storage buffers (one VkDeviceMemory each), builds compute
 * pipelines from SPIR-V, and records programs: lists of dispatches that
 * become one command buffer with descriptor sets written once, so a decode
 * step is a single vkQueueSubmit that allocates nothing. From the bottom up
 * (each file uses only those listed before it):
 *
 *   instance.c  VkResult to status (the one place), the instance, and the
 *               validation layer's messages
 *   buffer.c    buffers, the transfers to and from them, and the barriers
 *               that begin and end a command buffer
 *   device.c    the physical devices, their features, and opening one
 *   kernel.c    compute pipelines from SPIR-V
 *   program.c   programs: recorded, submitted, waited for, timed
 *
 * Nothing here prints: validation-layer messages are counted, the first
 * few kept, and forwarded to ssm_log.
 */
#ifndef SSM_VULKAN_INTERNAL_H
#define SSM_VULKAN_INTERNAL_H

#include <stdbool.h>
#include <vulkan/vulkan.h>

#include "runtime/vulkan/vulkan.h"

#define MAX_MESSAGES 8 /* validation messages kept (ssm_vk_validation_message) */
#define NO_DEVICE_MSG "no Vulkan device found (is mesa-vulkan-drivers installed?)"
#define VALIDATION_LAYER "VK_LAYER_KHRONOS_validation"

struct ssm_vk {
  VkInstance instance;
  VkDebugUtilsMessengerEXT messenger;
  PFN_vkDestroyDebugUtilsMessengerEXT destroy_messenger;
  VkPhysicalDevice phys;
  VkDevice device;
  VkQueue queue;
  uint32_t queue_family;
  uint32_t api; /* effective version: min(instance, device) */
  ssm_vk_device_info info;
  unsigned features; /* enabled SSM_VK_* bits */
  VkPhysicalDeviceMemoryProperties mem;
  uint64_t max_buffer_size; /* 0: unknown (before Vulkan 1.3) */
  bool validation, force_staging;
  bool shader_stats; /* SSM_VK_SHADER_STATS: the driver's statistics of each pipeline */
  int errors, warnings, n_messages;
  char *messages[MAX_MESSAGES];
  VkCommandPool xfer_pool;
  VkCommandBuffer xfer_cmd;
  VkFence xfer_fence;
  ssm_vk_buffer *staging;
};

struct ssm_vk_buffer {
  VkBuffer buffer;
  VkDeviceMemory memory;
  size_t size;
  ssm_vk_buffer_kind kind;
  void *map;
};

struct ssm_vk_kernel {
  char *name;
  VkShaderModule module;
  VkDescriptorSetLayout set_layout;
  VkPipelineLayout layout;
  VkPipeline pipeline;
  int n_bindings;
  uint32_t push_bytes;
};

/* ---- VkResult to status, the instance (instance.c) --------------------------- */

/* NULL for success codes (>= 0); otherwise SSM_ERR_DEVICE with
 * "<context>: VK_ERROR_...". Every VkResult goes through it. */
ssm_status ssm_vk_check(VkResult r, const char *fmt, ...) SSM_PRINTF(2, 3);
/* The name of a VkResult ("VK_ERROR_DEVICE_LOST"). */
const char *ssm_vk_result_name(VkResult r);
/* `n` bytes as text into buf ("1.5 GiB"); returns buf. */
const char *ssm_vk_fmt_bytes(char *buf, size_t cap, uint64_t n);

/* Whether an extension is offered: by the device `pd`, or else by the
 * instance (through `layer` when non-NULL). */
bool ssm_vk_has_ext(VkPhysicalDevice pd, const char *layer, const char *name);
#define ssm_vk_has_instance_ext(layer, name) ssm_vk_has_ext(VK_NULL_HANDLE, layer, name)
#define ssm_vk_has_device_ext(pd, name) ssm_vk_has_ext(pd, NULL, name)

/* An instance, with validation when wanted and usable (`*out_own` says
 * so: then the caller destroys it), else the shared one. */
ssm_status ssm_vk_instance_get(bool validation, VkInstance *out, uint32_t *out_api,
                               bool *out_own);
/* The create info of a messenger whose messages `vk` counts and keeps. */
void ssm_vk_messenger_info(ssm_vk *vk, VkDebugUtilsMessengerCreateInfoEXT *ci);

/* ---- synchronization (buffer.c) ------------------------------------------------- */

/* Everything earlier (compute, transfer, host writes) before `dst_stage`. */
void ssm_vk_barrier_in(VkCommandBuffer cmd, VkPipelineStageFlags dst_stage,
                       VkAccessFlags dst_access);
/* Writes of `src_stage` visible to the host and to later transfers. */
void ssm_vk_barrier_out(VkCommandBuffer cmd, VkPipelineStageFlags src_stage,
                        VkAccessFlags src_access);

#endif
