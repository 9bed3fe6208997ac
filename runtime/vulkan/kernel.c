/*
 * kernel.c — compute kernels: a SPIR-V module, its descriptor set layout
 * (storage buffers only), push constants and specialization constants,
 * made into one compute pipeline. A module that declares a capability the
 * device lacks is refused by name before the driver sees it; with
 * SSM_VK_SHADER_STATS the driver's statistics of each pipeline are logged.
 */
#include <string.h>

#include "runtime/vulkan/internal.h"

/* ---- kernels ------------------------------------------------------------- */

/* The optional device features a SPIR-V module declares it needs (its
 * OpCapability instructions), as SSM_VK_* bits: so a kernel the device cannot
 * run is refused by name instead of failing inside the driver. */
static unsigned spirv_needs(const uint32_t *w, size_t words) {
  unsigned need = 0;
  for (size_t i = 5; i < words;) {
    uint32_t op = w[i] & 0xffffu, n = w[i] >> 16;
    if (!n || i + n > words) break;
    if (op == 17 /* OpCapability */ && n == 2) {
      if (w[i + 1] == 63 /* GroupNonUniformArithmetic */) need |= SSM_VK_SUBGROUP_ARITH;
      if (w[i + 1] == 9 /* Float16 */) need |= SSM_VK_F16;
      if (w[i + 1] == 5357 /* CooperativeMatrixNV */ || w[i + 1] == 5345 /* VulkanMemoryModel */)
        need |= SSM_VK_COOPMAT;
    } else if (op != 11 && op != 14 && op != 10) { /* ExtInstImport, MemoryModel, Extension */
      break;                                       /* capabilities come first */
    }
    i += n;
  }
  return need;
}

/* SSM_VK_SHADER_STATS: one line a pipeline of what its driver reports
 * (on NVIDIA: registers a thread, shared and local memory, spills). */
static void log_shader_stats(ssm_vk *vk, VkPipeline pipeline, const char *name) {
  PFN_vkGetPipelineExecutableStatisticsKHR get = (PFN_vkGetPipelineExecutableStatisticsKHR)
      vkGetDeviceProcAddr(vk->device, "vkGetPipelineExecutableStatisticsKHR");
  if (!get) return;
  VkPipelineExecutableInfoKHR info = {.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
                                      .pipeline = pipeline};
  VkPipelineExecutableStatisticKHR st[32];
  uint32_t n = 32;
  for (uint32_t i = 0; i < n; i++)
    st[i] = (VkPipelineExecutableStatisticKHR){
        .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR};
  VkResult r = get(vk->device, &info, &n, st);
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) return;
  char line[1024] = "";
  for (uint32_t i = 0; i < n; i++) {
    size_t used = strlen(line);
    const VkPipelineExecutableStatisticValueKHR *v = &st[i].value;
    switch (st[i].format) {
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
      snprintf(line + used, sizeof line - used, "; %s %s", st[i].name, v->b32 ? "yes" : "no");
      break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
      snprintf(line + used, sizeof line - used, "; %s %lld", st[i].name, (long long)v->i64);
      break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
      snprintf(line + used, sizeof line - used, "; %s %llu", st[i].name,
               (unsigned long long)v->u64);
      break;
    default:
      snprintf(line + used, sizeof line - used, "; %s %g", st[i].name, v->f64);
    }
  }
  ssm_log("vulkan: kernel '%s'%s", name, line[0] ? line + 1 : " (no statistics)");
}

ssm_status ssm_vk_kernel_create_desc(ssm_vk *vk, const ssm_vk_kernel_desc *d,
                                     ssm_vk_kernel **out) {
  *out = NULL;
  const char *name = d->name ? d->name : "kernel";
  if (!d->spirv || d->words < 5 || d->spirv[0] != 0x07230203u)
    return ssm_status_new(SSM_ERR_INVALID, "kernel '%s': not SPIR-V (bad magic or too short)",
                          name);
  if (d->n_bindings < 0 || d->n_bindings > 64)
    return ssm_status_new(SSM_ERR_INVALID, "kernel '%s': %d bindings (0..64 supported)", name,
                          d->n_bindings);
  if (d->push_bytes % 4 || d->push_bytes > vk->info.max_push_constants_size)
    return ssm_status_new(SSM_ERR_INVALID,
                          "kernel '%s': %u bytes of push constants (a multiple of 4, at most "
                          "the device's maxPushConstantsSize %u)",
                          name, d->push_bytes, vk->info.max_push_constants_size);
  if (d->n_spec < 0 || d->n_spec > 32 || (d->n_spec && !d->spec_values))
    return ssm_status_new(SSM_ERR_INVALID, "kernel '%s': %d specialization constants (0..32)",
                          name, d->n_spec);
  char why[160];
  snprintf(why, sizeof why, "by kernel '%s'", name);
  SSM_TRY(ssm_vk_require(vk, spirv_needs(d->spirv, d->words), why));
  ssm_vk_kernel *k = calloc(1, sizeof *k);
  if (!k || !(k->name = strdup(name))) {
    free(k);
    return ssm_status_new(SSM_ERR_NOMEM, "out of host memory");
  }
  k->n_bindings = d->n_bindings;
  k->push_bytes = d->push_bytes;

  VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                   .codeSize = d->words * 4,
                                   .pCode = d->spirv};
  ssm_status s = ssm_vk_check(vkCreateShaderModule(vk->device, &smci, NULL, &k->module),
                              "kernel '%s': vkCreateShaderModule", name);
  VkDescriptorSetLayoutBinding binds[64];
  for (int i = 0; i < d->n_bindings; i++)
    binds[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
  VkDescriptorSetLayoutCreateInfo dci = {
      .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
      .bindingCount = (uint32_t)d->n_bindings,
      .pBindings = binds};
  if (!s)
    s = ssm_vk_check(vkCreateDescriptorSetLayout(vk->device, &dci, NULL, &k->set_layout),
                     "kernel '%s': vkCreateDescriptorSetLayout", name);
  VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = d->push_bytes};
  VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                    .setLayoutCount = 1,
                                    .pSetLayouts = &k->set_layout,
                                    .pushConstantRangeCount = d->push_bytes ? 1 : 0,
                                    .pPushConstantRanges = &pcr};
  if (!s)
    s = ssm_vk_check(vkCreatePipelineLayout(vk->device, &lci, NULL, &k->layout),
                     "kernel '%s': vkCreatePipelineLayout", name);
  VkSpecializationMapEntry entries[32];
  for (int i = 0; i < d->n_spec; i++)
    entries[i] = (VkSpecializationMapEntry){.constantID = (uint32_t)i,
                                            .offset = (uint32_t)(4 * i),
                                            .size = 4};
  VkSpecializationInfo spec = {.mapEntryCount = (uint32_t)d->n_spec,
                               .pMapEntries = entries,
                               .dataSize = 4 * (size_t)d->n_spec,
                               .pData = d->spec_values};
  VkComputePipelineCreateInfo pci = {
      .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
      .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                .module = k->module,
                .pName = "main",
                .pSpecializationInfo = d->n_spec ? &spec : NULL},
      .layout = k->layout};
  if (vk->shader_stats) pci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  if (!s)
    s = ssm_vk_check(vkCreateComputePipelines(vk->device, VK_NULL_HANDLE, 1, &pci, NULL,
                                              &k->pipeline),
                     "kernel '%s': vkCreateComputePipelines", name);
  if (!s && vk->shader_stats) log_shader_stats(vk, k->pipeline, name);
  if (s) {
    ssm_vk_kernel_destroy(vk, k);
    return s;
  }
  *out = k;
  return NULL;
}

ssm_status ssm_vk_kernel_create(ssm_vk *vk, const uint32_t *spirv, size_t words, int n_bindings,
                                uint32_t push_bytes, ssm_vk_kernel **out) {
  ssm_vk_kernel_desc d = {.spirv = spirv, .words = words, .n_bindings = n_bindings,
                          .push_bytes = push_bytes};
  return ssm_vk_kernel_create_desc(vk, &d, out);
}

void ssm_vk_kernel_destroy(ssm_vk *vk, ssm_vk_kernel *k) {
  if (!k) return;
  if (k->pipeline) vkDestroyPipeline(vk->device, k->pipeline, NULL);
  if (k->layout) vkDestroyPipelineLayout(vk->device, k->layout, NULL);
  if (k->set_layout) vkDestroyDescriptorSetLayout(vk->device, k->set_layout, NULL);
  if (k->module) vkDestroyShaderModule(vk->device, k->module, NULL);
  free(k->name);
  free(k);
}
