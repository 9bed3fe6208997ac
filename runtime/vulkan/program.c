/*
 * program.c — programs: lists of dispatches (and buffer copies) recorded
 * once into one command buffer, with their descriptor sets written once,
 * so that a run is a single vkQueueSubmit that allocates nothing. Inside a
 * program, ssm_vk_program_add_barrier is a full compute-to-compute memory
 * barrier; a copy waits for everything before it, and what follows a copy
 * waits for it. A profiled program writes a timestamp before its first
 * dispatch and after each (ssm_vk_program_times).
 */
#include <string.h>

#include "runtime/vulkan/internal.h"

typedef struct {
  ssm_vk_kernel *kernel; /* NULL: a buffer copy */
  bool barrier_before;
  uint32_t groups[3];
  int first_binding; /* into program.bindings */
  int push_offset; /* into program.push */
  ssm_vk_buffer *copy_src, *copy_dst;
  size_t copy_src_offset, copy_dst_offset, copy_bytes;
} dispatch;

struct ssm_vk_program {
  ssm_vk *vk;
  SSM_VEC(dispatch) ops;
  SSM_VEC(ssm_vk_binding) bindings;
  SSM_VEC(uint8_t) push; /* every dispatch's push constants, one after another */
  bool barrier_pending, recorded, in_flight, profile;
  VkQueryPool queries;  /* with profile: a timestamp before the first dispatch and after each */
  uint32_t nqueries;
  VkDescriptorPool descriptor_pool;
  VkCommandPool command_pool;
  VkCommandBuffer cmd;
  VkFence fence;
};

/* ---- programs ------------------------------------------------------------ */

ssm_status ssm_vk_program_create(ssm_vk *vk, ssm_vk_program **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return ssm_status_new(SSM_ERR_NOMEM, "out of host memory");
  (*out)->vk = vk;
  return NULL;
}

ssm_status ssm_vk_program_add_dispatch(ssm_vk_program *p, ssm_vk_kernel *k,
                                       const ssm_vk_binding *bindings, const void *push,
                                       uint32_t gx, uint32_t gy, uint32_t gz) {
  const ssm_vk_device_info *info = &p->vk->info;
  int at = (int)p->ops.n;
  SSM_ASSERT(!p->recorded && k);
  const char *kn = k->name;
  uint32_t g[3] = {gx, gy, gz};
  for (int i = 0; i < 3; i++)
    if (g[i] == 0 || g[i] > info->max_workgroup_count[i])
      return ssm_status_new(SSM_ERR_INVALID,
                            "dispatch %d (%s): %u workgroups in dimension %c (1..%u on this "
                            "device)", at, kn, g[i], "xyz"[i], info->max_workgroup_count[i]);
  if (k->push_bytes && !push)
    return ssm_status_new(SSM_ERR_INVALID, "dispatch %d (%s): needs %u bytes of push constants",
                          at, kn, k->push_bytes);
  if (k->n_bindings && !bindings)
    return ssm_status_new(SSM_ERR_INVALID, "dispatch %d (%s): needs %d bindings", at, kn,
                          k->n_bindings);
  size_t align = ssm_vk_storage_alignment(p->vk);
  for (int i = 0; i < k->n_bindings; i++) {
    const ssm_vk_binding *b = &bindings[i];
    if (!b->buffer)
      return ssm_status_new(SSM_ERR_INVALID, "dispatch %d (%s) binding %d: no buffer", at, kn, i);
    if (b->offset % align)
      return ssm_status_new(SSM_ERR_INVALID,
                            "dispatch %d (%s) binding %d: offset %zu is not a multiple of the "
                            "device's minStorageBufferOffsetAlignment (%zu)",
                            at, kn, i, b->offset, align);
    size_t size = b->buffer->size;
    size_t range = b->range ? b->range : b->offset < size ? size - b->offset : 0;
    if (range == 0 || b->offset >= size || range > size - b->offset)
      return ssm_status_new(SSM_ERR_INVALID,
                            "dispatch %d (%s) binding %d: range [%zu, +%zu) is outside the "
                            "buffer of %zu bytes", at, kn, i, b->offset, range, size);
    if (range > info->max_storage_buffer_range)
      return ssm_status_new(SSM_ERR_UNSUPPORTED,
                            "dispatch %d (%s) binding %d: range of %zu bytes exceeds the "
                            "device's maxStorageBufferRange (%llu)", at, kn, i, range,
                            (unsigned long long)info->max_storage_buffer_range);
  }
  if (p->push.n > INT32_MAX - 4096 || p->ops.n == INT32_MAX)
    return ssm_status_new(SSM_ERR_INVALID, "program too large");
  dispatch op = {.kernel = k,
                 .barrier_before = p->barrier_pending,
                 .groups = {gx, gy, gz},
                 .first_binding = (int)p->bindings.n,
                 .push_offset = (int)p->push.n};
  /* room first: out of memory, the program is left as it was */
  SSM_TRY(ssm_status_wrap(ssm_vec_reserve(&p->ops, 1), "a program's dispatches"));
  SSM_TRY(ssm_status_wrap(ssm_vec_reserve(&p->bindings, (size_t)k->n_bindings), "a program's dispatches"));
  SSM_TRY(ssm_status_wrap(ssm_vec_reserve(&p->push, k->push_bytes), "a program's dispatches"));
  p->ops.items[p->ops.n++] = op;
  p->barrier_pending = false;
  for (int i = 0; i < k->n_bindings; i++) {
    ssm_vk_binding b = bindings[i];
    if (!b.range) b.range = b.buffer->size - b.offset;
    p->bindings.items[p->bindings.n++] = b;
  }
  if (k->push_bytes) memcpy(p->push.items + p->push.n, push, k->push_bytes);
  p->push.n += k->push_bytes;
  return NULL;
}

ssm_status ssm_vk_program_add_copy(ssm_vk_program *p, ssm_vk_buffer *src, size_t src_offset,
                                   ssm_vk_buffer *dst, size_t dst_offset, size_t bytes) {
  SSM_ASSERT(!p->recorded && src && dst);
  if (!bytes || bytes % 4 || src_offset % 4 || dst_offset % 4 || src_offset > src->size ||
      bytes > src->size - src_offset || dst_offset > dst->size || bytes > dst->size - dst_offset)
    return ssm_status_new(SSM_ERR_INVALID, "copy %zu bytes from [%zu] of a %zu-byte buffer to "
                          "[%zu] of a %zu-byte buffer: out of range or not 4-byte aligned", bytes,
                          src_offset, src->size, dst_offset, dst->size);
  dispatch op = {.copy_src = src, .copy_dst = dst, .copy_src_offset = src_offset,
                 .copy_dst_offset = dst_offset, .copy_bytes = bytes};
  SSM_TRY(ssm_status_wrap(ssm_vec_push(&p->ops, op), "a program's copies"));
  p->barrier_pending = false; /* a copy waits for everything before it */
  return NULL;
}

void ssm_vk_program_add_barrier(ssm_vk_program *p) {
  SSM_ASSERT(!p->recorded);
  if (p->ops.n) p->barrier_pending = true;
}

static ssm_status program_record(ssm_vk_program *p) {
  ssm_vk *vk = p->vk;
  VkDevice dev = vk->device;
  int n_sets = 0;
  for (size_t i = 0; i < p->ops.n; i++)
    n_sets += p->ops.items[i].kernel && p->ops.items[i].kernel->n_bindings > 0;
  VkDescriptorSet *sets = NULL;
  VkDescriptorBufferInfo *infos = NULL;
  VkWriteDescriptorSet *writes = NULL;
  ssm_status s = NULL;
  if (n_sets) {
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                               .descriptorCount = (uint32_t)p->bindings.n};
    VkDescriptorPoolCreateInfo dpci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                       .maxSets = (uint32_t)n_sets,
                                       .poolSizeCount = 1,
                                       .pPoolSizes = &ps};
    SSM_TRY(ssm_vk_check(vkCreateDescriptorPool(dev, &dpci, NULL, &p->descriptor_pool),
                         "vkCreateDescriptorPool(%d sets)", n_sets));
    sets = calloc(p->ops.n, sizeof *sets);
    infos = calloc(p->bindings.n, sizeof *infos);
    writes = calloc(p->bindings.n, sizeof *writes);
    if (!sets || !infos || !writes) s = ssm_status_new(SSM_ERR_NOMEM, "out of host memory");
  }
  int n_writes = 0;
  for (size_t i = 0; i < p->ops.n && !s; i++) {
    dispatch *op = &p->ops.items[i];
    if (!op->kernel || !op->kernel->n_bindings) continue;
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = p->descriptor_pool,
                                      .descriptorSetCount = 1,
                                      .pSetLayouts = &op->kernel->set_layout};
    s = ssm_vk_check(vkAllocateDescriptorSets(dev, &ai, &sets[i]), "vkAllocateDescriptorSets");
    for (int j = 0; j < op->kernel->n_bindings && !s; j++) {
      const ssm_vk_binding *b = &p->bindings.items[op->first_binding + j];
      infos[n_writes] = (VkDescriptorBufferInfo){b->buffer->buffer, b->offset, b->range};
      writes[n_writes] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                                .dstSet = sets[i],
                                                .dstBinding = (uint32_t)j,
                                                .descriptorCount = 1,
                                                .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                .pBufferInfo = &infos[n_writes]};
      n_writes++;
    }
  }
  if (!s && n_writes) vkUpdateDescriptorSets(dev, (uint32_t)n_writes, writes, 0, NULL);

  VkCommandPoolCreateInfo cpci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .queueFamilyIndex = vk->queue_family};
  if (!s)
    s = ssm_vk_check(vkCreateCommandPool(dev, &cpci, NULL, &p->command_pool),
                     "vkCreateCommandPool");
  VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                     .commandPool = p->command_pool,
                                     .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                     .commandBufferCount = 1};
  if (!s)
    s = ssm_vk_check(vkAllocateCommandBuffers(dev, &cai, &p->cmd), "vkAllocateCommandBuffers");
  VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if (!s) s = ssm_vk_check(vkCreateFence(dev, &fci, NULL, &p->fence), "vkCreateFence");
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  if (!s) s = ssm_vk_check(vkBeginCommandBuffer(p->cmd, &bi), "vkBeginCommandBuffer(program)");
  if (!s && p->profile) {
    p->nqueries = (uint32_t)ssm_vk_program_dispatches(p) + 1;
    VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                 .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                 .queryCount = p->nqueries};
    s = ssm_vk_check(vkCreateQueryPool(dev, &qci, NULL, &p->queries), "vkCreateQueryPool(%u)",
                     p->nqueries);
    if (!s) vkCmdResetQueryPool(p->cmd, p->queries, 0, p->nqueries);
  }
  if (!s) {
    VkCommandBuffer cmd = p->cmd;
    uint32_t query = 0;
    if (p->queries)
      vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, p->queries, query++);
    ssm_vk_barrier_in(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                      VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    ssm_vk_kernel *bound = NULL;
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
    /* a copy waits for all earlier compute and copies; what follows a copy
     * waits for it */
    VkMemoryBarrier to_copy = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                               .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT |
                                                VK_ACCESS_TRANSFER_WRITE_BIT,
                               .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT |
                                                VK_ACCESS_TRANSFER_WRITE_BIT};
    VkMemoryBarrier from_copy = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                 .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT |
                                                  VK_ACCESS_TRANSFER_WRITE_BIT,
                                 .dstAccessMask = VK_ACCESS_SHADER_READ_BIT |
                                                  VK_ACCESS_SHADER_WRITE_BIT};
    bool after_copy = false;
    for (size_t i = 0; i < p->ops.n; i++) {
      dispatch *op = &p->ops.items[i];
      ssm_vk_kernel *k = op->kernel;
      if (!k) {
        vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &to_copy, 0, NULL, 0, NULL);
        VkBufferCopy region = {op->copy_src_offset, op->copy_dst_offset, op->copy_bytes};
        vkCmdCopyBuffer(cmd, op->copy_src->buffer, op->copy_dst->buffer, 1, &region);
        after_copy = true;
        continue;
      }
      if (after_copy)
        vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &from_copy, 0, NULL, 0,
                             NULL);
      after_copy = false;
      if (op->barrier_before)
        vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                             VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
      if (k != bound) vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipeline);
      bound = k;
      if (k->n_bindings)
        vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, k->layout, 0, 1, &sets[i], 0,
                                NULL);
      if (k->push_bytes)
        vkCmdPushConstants(cmd, k->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, k->push_bytes,
                           p->push.items + op->push_offset);
      vkCmdDispatch(cmd, op->groups[0], op->groups[1], op->groups[2]);
      if (p->queries)
        vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, p->queries, query++);
    }
    ssm_vk_barrier_out(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    s = ssm_vk_check(vkEndCommandBuffer(cmd), "vkEndCommandBuffer(program)");
  }
  free(sets);
  free(infos);
  free(writes);
  return s;
}

ssm_status ssm_vk_program_profile(ssm_vk_program *p) {
  SSM_ASSERT(!p->recorded);
  if (!p->vk->info.timestamps)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "device '%s' has no timestamps on its compute "
                          "queue: it cannot be profiled", p->vk->info.name);
  p->profile = true;
  return NULL;
}

ssm_status ssm_vk_program_times(ssm_vk *vk, ssm_vk_program *p, double *out_us) {
  SSM_ASSERT(p->recorded && p->queries);
  SSM_TRY(ssm_vk_program_wait(vk, p));
  uint64_t *ts;
  SSM_TRY(ssm_status_wrap(ssm_alloc(p->nqueries, sizeof *ts, (void **)&ts), "timestamps"));
  ssm_status s =
      ssm_vk_check(vkGetQueryPoolResults(vk->device, p->queries, 0, p->nqueries,
                                         sizeof *ts * p->nqueries, ts, sizeof *ts,
                                         VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
                   "vkGetQueryPoolResults");
  for (uint32_t i = 0; !s && i + 1 < p->nqueries; i++)
    out_us[i] = (double)(ts[i + 1] - ts[i]) * vk->info.timestamp_period_ns * 1e-3;
  free(ts);
  return s;
}

ssm_status ssm_vk_program_end(ssm_vk_program *p) {
  SSM_ASSERT(!p->recorded);
  SSM_TRY(program_record(p));
  p->recorded = true;
  return NULL;
}

int ssm_vk_program_dispatches(const ssm_vk_program *p) {
  int n = 0;
  for (size_t i = 0; i < p->ops.n; i++) n += p->ops.items[i].kernel != NULL;
  return n;
}

ssm_status ssm_vk_program_wait(ssm_vk *vk, ssm_vk_program *p) {
  if (!p->in_flight) return NULL;
  p->in_flight = false;
  ssm_status s = ssm_vk_check(vkWaitForFences(vk->device, 1, &p->fence, VK_TRUE, UINT64_MAX),
                              "vkWaitForFences(program of %zu dispatches)", p->ops.n);
  ssm_status r = ssm_vk_check(vkResetFences(vk->device, 1, &p->fence), "vkResetFences");
  if (s) {
    ssm_status_free(r);
    return s;
  }
  return r;
}

ssm_status ssm_vk_program_submit(ssm_vk *vk, ssm_vk_program *p) {
  SSM_ASSERT(p->recorded);
  SSM_TRY(ssm_vk_program_wait(vk, p));
  VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                     .commandBufferCount = 1,
                     .pCommandBuffers = &p->cmd};
  SSM_TRY(ssm_vk_check(vkQueueSubmit(vk->queue, 1, &si, p->fence),
                       "vkQueueSubmit(program of %zu dispatches)", p->ops.n));
  p->in_flight = true;
  return NULL;
}

ssm_status ssm_vk_program_run(ssm_vk *vk, ssm_vk_program *p) {
  SSM_TRY(ssm_vk_program_submit(vk, p));
  return ssm_vk_program_wait(vk, p);
}

void ssm_vk_program_destroy(ssm_vk *vk, ssm_vk_program *p) {
  if (!p) return;
  ssm_status_free(ssm_vk_program_wait(vk, p));
  if (p->fence) vkDestroyFence(vk->device, p->fence, NULL);
  if (p->queries) vkDestroyQueryPool(vk->device, p->queries, NULL);
  if (p->command_pool) vkDestroyCommandPool(vk->device, p->command_pool, NULL);
  if (p->descriptor_pool) vkDestroyDescriptorPool(vk->device, p->descriptor_pool, NULL);
  ssm_vec_free(&p->ops);
  ssm_vec_free(&p->bindings);
  ssm_vec_free(&p->push);
  free(p);
}
