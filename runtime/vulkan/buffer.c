/*
 * buffer.c — storage buffers (one VkDeviceMemory each), host-visible or
 * device-local, and the transfers to and from them. A buffer the host can
 * map is read and written in place; any other goes through a reusable
 * staging buffer, in chunks, and each transfer is synchronous.
 *
 * Synchronization is deliberately coarse: every command buffer (a
 * transfer's, a program's) begins with a global barrier against all
 * earlier compute, transfer and host writes (ssm_vk_barrier_in) and ends
 * with one that makes its writes visible to the host and to transfers
 * (ssm_vk_barrier_out).
 */
#include <string.h>

#include "runtime/vulkan/internal.h"

#define STAGING_CHUNK ((size_t)64 << 20)

/* ---- synchronization helpers -------------------------------------------- */

void ssm_vk_barrier_in(VkCommandBuffer cmd, VkPipelineStageFlags dst_stage,
                      VkAccessFlags dst_access) {
  VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT |
                                         VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_WRITE_BIT,
                        .dstAccessMask = dst_access};
  vkCmdPipelineBarrier(cmd,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
                           VK_PIPELINE_STAGE_HOST_BIT,
                       dst_stage, 0, 1, &mb, 0, NULL, 0, NULL);
}

void ssm_vk_barrier_out(VkCommandBuffer cmd, VkPipelineStageFlags src_stage,
                       VkAccessFlags src_access) {
  VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                        .srcAccessMask = src_access,
                        .dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                                         VK_ACCESS_TRANSFER_WRITE_BIT};
  vkCmdPipelineBarrier(cmd, src_stage,
                       VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0,
                       NULL, 0, NULL);
}

static ssm_status xfer_begin(ssm_vk *vk) {
  SSM_TRY(ssm_vk_check(vkResetCommandBuffer(vk->xfer_cmd, 0), "vkResetCommandBuffer"));
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  SSM_TRY(ssm_vk_check(vkBeginCommandBuffer(vk->xfer_cmd, &bi), "vkBeginCommandBuffer"));
  ssm_vk_barrier_in(vk->xfer_cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
                    VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
  return NULL;
}

static ssm_status xfer_submit_wait(ssm_vk *vk, const char *what) {
  ssm_vk_barrier_out(vk->xfer_cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
  SSM_TRY(ssm_vk_check(vkEndCommandBuffer(vk->xfer_cmd), "vkEndCommandBuffer(%s)", what));
  VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                     .commandBufferCount = 1,
                     .pCommandBuffers = &vk->xfer_cmd};
  SSM_TRY(ssm_vk_check(vkQueueSubmit(vk->queue, 1, &si, vk->xfer_fence), "vkQueueSubmit(%s)",
                       what));
  ssm_status s = ssm_vk_check(vkWaitForFences(vk->device, 1, &vk->xfer_fence, VK_TRUE, UINT64_MAX),
                              "vkWaitForFences(%s)", what);
  ssm_status r = ssm_vk_check(vkResetFences(vk->device, 1, &vk->xfer_fence), "vkResetFences");
  if (s) {
    ssm_status_free(r);
    return s;
  }
  return r;
}

/* ---- buffers ------------------------------------------------------------- */

static int find_memory_type(const ssm_vk *vk, uint32_t bits, VkMemoryPropertyFlags want) {
  for (uint32_t i = 0; i < vk->mem.memoryTypeCount; i++)
    if ((bits & (1u << i)) && (vk->mem.memoryTypes[i].propertyFlags & want) == want) return (int)i;
  return -1;
}

ssm_status ssm_vk_buffer_create(ssm_vk *vk, size_t bytes, ssm_vk_buffer_kind kind,
                                ssm_vk_buffer **out) {
  *out = NULL;
  const char *kname = kind == SSM_VK_BUFFER_HOST ? "host-visible" : "device-local";
  char sz[32];
  ssm_vk_fmt_bytes(sz, sizeof sz, bytes);
  if (bytes == 0) return ssm_status_new(SSM_ERR_INVALID, "a Vulkan buffer of 0 bytes");
  ssm_vk_buffer *b = calloc(1, sizeof *b);
  if (!b) return ssm_status_new(SSM_ERR_NOMEM, "out of host memory");
  b->size = bytes;
  b->kind = kind;
  VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                            .size = bytes,
                            .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                            .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  ssm_status s = NULL;
  VkMemoryRequirements req = {0};
  int type = -1;
  uint64_t max_alloc = vk->info.max_memory_allocation_size, heap = 0;
  VkMemoryPropertyFlags need = kind == SSM_VK_BUFFER_HOST ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
                                                          : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  for (uint32_t i = 0; i < vk->mem.memoryTypeCount; i++)
    if ((vk->mem.memoryTypes[i].propertyFlags & need) == need &&
        vk->mem.memoryHeaps[vk->mem.memoryTypes[i].heapIndex].size > heap)
      heap = vk->mem.memoryHeaps[vk->mem.memoryTypes[i].heapIndex].size;
  const char *limit_name = NULL;
  uint64_t limit = 0;
  if (heap && bytes > heap) limit_name = "largest such heap", limit = heap;
  else if (max_alloc && bytes > max_alloc)
    limit_name = "maxMemoryAllocationSize", limit = max_alloc;
  else if (vk->max_buffer_size && bytes > vk->max_buffer_size)
    limit_name = "maxBufferSize", limit = vk->max_buffer_size;
  if (limit_name) {
    char lim[32];
    s = ssm_status_new(SSM_ERR_DEVICE, "vkAllocateMemory(%s %s): VK_ERROR_OUT_OF_DEVICE_MEMORY "
                       "(the device's %s is %s)", sz, kname, limit_name,
                       ssm_vk_fmt_bytes(lim, sizeof lim, limit));
    goto fail;
  }
  s = ssm_vk_check(vkCreateBuffer(vk->device, &bci, NULL, &b->buffer), "vkCreateBuffer(%s %s)", sz,
                   kname);
  if (s) goto fail;
  vkGetBufferMemoryRequirements(vk->device, b->buffer, &req);
  if (kind == SSM_VK_BUFFER_HOST) {
    type = find_memory_type(vk, req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                                        VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                                                        VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (type < 0)
      type = find_memory_type(vk, req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                                          VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
  } else {
    type = find_memory_type(vk, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (type < 0) type = find_memory_type(vk, req.memoryTypeBits, 0);
  }
  if (type < 0) {
    s = ssm_status_new(SSM_ERR_UNSUPPORTED, "Vulkan device '%s' has no %s memory type for a "
                       "storage buffer", vk->info.name, kname);
    goto fail;
  }
  VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                              .allocationSize = req.size,
                              .memoryTypeIndex = (uint32_t)type};
  s = ssm_vk_check(vkAllocateMemory(vk->device, &mai, NULL, &b->memory), "vkAllocateMemory(%s %s)",
                   sz, kname);
  if (s) goto fail;
  s = ssm_vk_check(vkBindBufferMemory(vk->device, b->buffer, b->memory, 0), "vkBindBufferMemory");
  if (s) goto fail;
  VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                               VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  VkMemoryPropertyFlags flags = vk->mem.memoryTypes[type].propertyFlags;
  bool map = kind == SSM_VK_BUFFER_HOST
                 ? (flags & host) == host
                 : !vk->force_staging &&
                       (flags & (host | VK_MEMORY_PROPERTY_HOST_CACHED_BIT)) ==
                           (host | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  if (map) {
    s = ssm_vk_check(vkMapMemory(vk->device, b->memory, 0, VK_WHOLE_SIZE, 0, &b->map),
                     "vkMapMemory(%s %s)", sz, kname);
    if (s) goto fail;
  }
  *out = b;
  return NULL;
fail:
  ssm_vk_buffer_destroy(vk, b);
  return s;
}

void ssm_vk_buffer_destroy(ssm_vk *vk, ssm_vk_buffer *b) {
  if (!b) return;
  if (b->buffer) vkDestroyBuffer(vk->device, b->buffer, NULL);
  if (b->memory) vkFreeMemory(vk->device, b->memory, NULL); /* unmaps too */
  free(b);
}

size_t ssm_vk_buffer_size(const ssm_vk_buffer *b) { return b->size; }
void *ssm_vk_buffer_map(const ssm_vk_buffer *b) { return b->map; }

static ssm_status check_range(const ssm_vk_buffer *b, size_t offset, size_t n, const char *what) {
  size_t end;
  if (!b) return ssm_status_new(SSM_ERR_INVALID, "%s: no buffer", what);
  if (!ssm_size_add(offset, n, &end) || end > b->size)
    return ssm_status_new(SSM_ERR_INVALID,
                          "%s: range [%zu, +%zu) is outside the buffer of %zu bytes", what, offset,
                          n, b->size);
  return NULL;
}

/* The staging buffer, grown to hold min(n, STAGING_CHUNK) bytes. */
static ssm_status staging_reserve(ssm_vk *vk, size_t n, size_t *out_chunk) {
  size_t want = n < STAGING_CHUNK ? n : STAGING_CHUNK;
  if (!vk->staging || vk->staging->size < want) {
    ssm_vk_buffer_destroy(vk, vk->staging);
    vk->staging = NULL;
    SSM_TRY(ssm_vk_buffer_create(vk, want, SSM_VK_BUFFER_HOST, &vk->staging));
  }
  *out_chunk = vk->staging->size < STAGING_CHUNK ? vk->staging->size : STAGING_CHUNK;
  return NULL;
}

ssm_status ssm_vk_buffer_upload(ssm_vk *vk, ssm_vk_buffer *b, size_t offset, const void *data,
                                size_t n) {
  SSM_TRY(check_range(b, offset, n, "ssm_vk_buffer_upload"));
  if (n == 0) return NULL;
  if (b->map) {
    memcpy((uint8_t *)b->map + offset, data, n);
    return NULL;
  }
  size_t chunk;
  SSM_TRY(staging_reserve(vk, n, &chunk));
  for (size_t done = 0; done < n; done += chunk) {
    size_t m = n - done < chunk ? n - done : chunk;
    memcpy(vk->staging->map, (const uint8_t *)data + done, m);
    SSM_TRY(xfer_begin(vk));
    VkBufferCopy c = {.srcOffset = 0, .dstOffset = offset + done, .size = m};
    vkCmdCopyBuffer(vk->xfer_cmd, vk->staging->buffer, b->buffer, 1, &c);
    SSM_TRY(xfer_submit_wait(vk, "upload"));
  }
  return NULL;
}

ssm_status ssm_vk_buffer_download(ssm_vk *vk, ssm_vk_buffer *b, size_t offset, void *data,
                                  size_t n) {
  SSM_TRY(check_range(b, offset, n, "ssm_vk_buffer_download"));
  if (n == 0) return NULL;
  if (b->map) {
    memcpy(data, (const uint8_t *)b->map + offset, n);
    return NULL;
  }
  size_t chunk;
  SSM_TRY(staging_reserve(vk, n, &chunk));
  for (size_t done = 0; done < n; done += chunk) {
    size_t m = n - done < chunk ? n - done : chunk;
    SSM_TRY(xfer_begin(vk));
    VkBufferCopy c = {.srcOffset = offset + done, .dstOffset = 0, .size = m};
    vkCmdCopyBuffer(vk->xfer_cmd, b->buffer, vk->staging->buffer, 1, &c);
    SSM_TRY(xfer_submit_wait(vk, "download"));
    memcpy((uint8_t *)data + done, vk->staging->map, m);
  }
  return NULL;
}

ssm_status ssm_vk_buffer_fill(ssm_vk *vk, ssm_vk_buffer *b, size_t offset, size_t n,
                              uint32_t value) {
  SSM_TRY(check_range(b, offset, n, "ssm_vk_buffer_fill"));
  if (offset % 4 || n % 4)
    return ssm_status_new(SSM_ERR_INVALID,
                          "ssm_vk_buffer_fill: offset %zu and size %zu must be multiples of 4",
                          offset, n);
  if (n == 0) return NULL;
  if (b->map) {
    uint32_t *p = (uint32_t *)((uint8_t *)b->map + offset);
    for (size_t i = 0; i < n / 4; i++) p[i] = value;
    return NULL;
  }
  SSM_TRY(xfer_begin(vk));
  vkCmdFillBuffer(vk->xfer_cmd, b->buffer, offset, n, value);
  return xfer_submit_wait(vk, "fill");
}

ssm_status ssm_vk_buffer_copy(ssm_vk *vk, const ssm_vk_copy *copies, int n) {
  for (int i = 0; i < n; i++) {
    SSM_TRY(check_range(copies[i].src, copies[i].src_offset, copies[i].bytes, "ssm_vk_buffer_copy"));
    SSM_TRY(check_range(copies[i].dst, copies[i].dst_offset, copies[i].bytes, "ssm_vk_buffer_copy"));
  }
  if (n <= 0) return NULL;
  SSM_TRY(xfer_begin(vk));
  for (int i = 0; i < n; i++) {
    VkBufferCopy c = {copies[i].src_offset, copies[i].dst_offset, copies[i].bytes};
    if (c.size) vkCmdCopyBuffer(vk->xfer_cmd, copies[i].src->buffer, copies[i].dst->buffer, 1, &c);
  }
  return xfer_submit_wait(vk, "copy");
}
