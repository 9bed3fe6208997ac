/*
 * device.c — the Vulkan devices: what each offers (its properties, and the
 * optional features ssmc uses: 16-bit and 8-bit types, subgroup
 * arithmetic, cooperative matrices), listing them and choosing the
 * default, and opening one (ssm_vk_open): the device with one compute
 * queue and the features it has enabled, and the command buffer that
 * transfers use.
 */
#include <errno.h>
#include <string.h>

#include "runtime/vulkan/internal.h"

/* ---- physical devices ---------------------------------------------------- */

/* Feature structs for query and for enabling; `chain` links what applies. */
typedef struct {
  VkPhysicalDeviceFeatures2 core;
  VkPhysicalDevice16BitStorageFeatures s16;
  VkPhysicalDeviceShaderFloat16Int8Features f16i8;
  VkPhysicalDevice8BitStorageFeatures s8;
  VkPhysicalDeviceVulkanMemoryModelFeatures vmm;
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coop;
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pexec;
  bool has_f16i8, has_s8, has_vmm; /* the struct may be chained */
  bool ext_f16i8, ext_s8, ext_vmm; /* ...through an extension (Vulkan 1.1) */
  bool has_coop;                   /* VK_NV_cooperative_matrix */
  bool has_pexec;                  /* VK_KHR_pipeline_executable_properties */
} feature_chain;

static void feature_chain_init(feature_chain *fc, VkPhysicalDevice pd, uint32_t api) {
  memset(fc, 0, sizeof *fc);
  fc->core.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  fc->s16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
  fc->f16i8.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
  fc->s8.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES;
  fc->vmm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES;
  fc->coop.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
  fc->pexec.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR;
  bool v12 = api >= VK_API_VERSION_1_2;
  fc->ext_f16i8 = !v12 && ssm_vk_has_device_ext(pd, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
  fc->ext_s8 = !v12 && ssm_vk_has_device_ext(pd, VK_KHR_8BIT_STORAGE_EXTENSION_NAME);
  fc->ext_vmm = !v12 && ssm_vk_has_device_ext(pd, VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME);
  fc->has_f16i8 = v12 || fc->ext_f16i8;
  fc->has_s8 = v12 || fc->ext_s8;
  fc->has_vmm = v12 || fc->ext_vmm;
  fc->has_coop = ssm_vk_has_device_ext(pd, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  fc->has_pexec = ssm_vk_has_device_ext(pd, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  void **tail = &fc->core.pNext;
  *tail = &fc->s16, tail = &fc->s16.pNext;
  if (fc->has_f16i8) *tail = &fc->f16i8, tail = &fc->f16i8.pNext;
  if (fc->has_s8) *tail = &fc->s8, tail = &fc->s8.pNext;
  if (fc->has_vmm) *tail = &fc->vmm, tail = &fc->vmm.pNext;
  if (fc->has_coop) *tail = &fc->coop, tail = &fc->coop.pNext;
  if (fc->has_pexec) *tail = &fc->pexec, tail = &fc->pexec.pNext;
}

/* Takes `link` out of fc's chain: a struct of an extension that the device
 * is not created with must not go with its features. */
static void feature_chain_drop(feature_chain *fc, void *link) {
  for (VkBaseOutStructure *b = (VkBaseOutStructure *)&fc->core; b->pNext; b = b->pNext)
    if (b->pNext == (VkBaseOutStructure *)link) {
      b->pNext = ((VkBaseOutStructure *)link)->pNext;
      return;
    }
}

static unsigned feature_bits(const feature_chain *fc) {
  unsigned f = 0;
  if (fc->s16.storageBuffer16BitAccess) f |= SSM_VK_F16_STORAGE;
  if (fc->f16i8.shaderFloat16) f |= SSM_VK_F16;
  if (fc->core.features.shaderInt64) f |= SSM_VK_INT64;
  if (fc->core.features.shaderInt16) f |= SSM_VK_INT16;
  if (fc->s8.storageBuffer8BitAccess) f |= SSM_VK_INT8_STORAGE;
  if (fc->f16i8.shaderInt8) f |= SSM_VK_INT8;
  /* the memory model at device scope too: with the model enabled, the
   * atomics of every other kernel (the sampler's) need it */
  if (fc->coop.cooperativeMatrix && fc->vmm.vulkanMemoryModel &&
      fc->vmm.vulkanMemoryModelDeviceScope && fc->f16i8.shaderFloat16)
    f |= SSM_VK_COOPMAT; /* and the tile shape: coop_shape() */
  return f;
}

/* Whether the device multiplies 16 x 16 x 16 tiles of f16 into f32 with
 * subgroup scope (VK_NV_cooperative_matrix's list of shapes). */
static bool coop_shape(VkInstance inst, VkPhysicalDevice pd) {
  PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV get =
      (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)vkGetInstanceProcAddr(
          inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
  uint32_t n = 0;
  if (!get || get(pd, &n, NULL) != VK_SUCCESS || !n) return false;
  VkCooperativeMatrixPropertiesNV *p = calloc(n, sizeof *p);
  if (!p) return false;
  for (uint32_t i = 0; i < n; i++) p[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
  bool ok = false;
  if (get(pd, &n, p) == VK_SUCCESS)
    for (uint32_t i = 0; i < n && !ok; i++)
      ok = p[i].MSize == 16 && p[i].NSize == 16 && p[i].KSize == 16 &&
           p[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV && p[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
           p[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV && p[i].DType == VK_COMPONENT_TYPE_FLOAT32_NV &&
           p[i].scope == VK_SCOPE_SUBGROUP_NV;
  free(p);
  return ok;
}

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

static void device_info(VkInstance inst, VkPhysicalDevice pd, int index, uint32_t instance_api,
                        ssm_vk_device_info *out) {
  memset(out, 0, sizeof *out);
  out->index = index;
  VkPhysicalDeviceProperties p;
  vkGetPhysicalDeviceProperties(pd, &p);
  uint32_t api = min_u32(p.apiVersion, instance_api);
  snprintf(out->name, sizeof out->name, "%s", p.deviceName);
  switch (p.deviceType) {
  case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: out->type = SSM_VK_TYPE_INTEGRATED; break;
  case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: out->type = SSM_VK_TYPE_DISCRETE; break;
  case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: out->type = SSM_VK_TYPE_VIRTUAL; break;
  case VK_PHYSICAL_DEVICE_TYPE_CPU: out->type = SSM_VK_TYPE_CPU; break;
  default: out->type = SSM_VK_TYPE_OTHER; break;
  }
  out->api_version = p.apiVersion;
  out->vendor_id = p.vendorID;
  out->device_id = p.deviceID;
  out->min_storage_buffer_offset_alignment = p.limits.minStorageBufferOffsetAlignment;
  out->timestamp_period_ns = p.limits.timestampPeriod;
  out->max_storage_buffer_range = p.limits.maxStorageBufferRange;
  out->max_push_constants_size = p.limits.maxPushConstantsSize;
  out->max_workgroup_invocations = p.limits.maxComputeWorkGroupInvocations;
  memcpy(out->max_workgroup_count, p.limits.maxComputeWorkGroupCount,
         sizeof out->max_workgroup_count);
  snprintf(out->driver, sizeof out->driver, "driver version 0x%x", p.driverVersion);

  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  for (uint32_t i = 0; i < mp.memoryHeapCount; i++)
    if ((mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
        mp.memoryHeaps[i].size > out->device_local_bytes)
      out->device_local_bytes = mp.memoryHeaps[i].size;

  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, NULL);
  VkQueueFamilyProperties *qf = calloc(nq ? nq : 1, sizeof *qf);
  bool compute = false;
  if (qf) {
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf);
    for (uint32_t i = 0; i < nq; i++) {
      compute |= (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) != 0;
      if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && qf[i].timestampValidBits)
        out->timestamps = 1;
    }
    free(qf);
  }
  if (api < VK_API_VERSION_1_1) return; /* not usable: no properties2 / 16-bit storage */
  out->usable = compute;

  VkPhysicalDeviceDriverProperties drv = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceMaintenance3Properties m3 = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceSubgroupProperties sg = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &m3};
  VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                    .pNext = &sg};
  bool has_drv = api >= VK_API_VERSION_1_2 ||
                 ssm_vk_has_device_ext(pd, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
  if (has_drv) m3.pNext = &drv;
  vkGetPhysicalDeviceProperties2(pd, &p2);
  if (has_drv)
    snprintf(out->driver, sizeof out->driver, "%.120s (%.120s)", drv.driverName, drv.driverInfo);
  out->subgroup_size = sg.subgroupSize;
  out->max_memory_allocation_size = m3.maxMemoryAllocationSize;

  feature_chain fc;
  feature_chain_init(&fc, pd, api);
  vkGetPhysicalDeviceFeatures2(pd, &fc.core);
  out->features = feature_bits(&fc);
  /* the gemv kernel keeps a partial sum per subgroup for LOCAL / 4 of them */
  if ((sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
      (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) && sg.subgroupSize >= 4)
    out->features |= SSM_VK_SUBGROUP_ARITH;
  /* gemm_coop.glsl.in: subgroups of 32, 16 of them in a workgroup, its
   * tile shape, and 41 KiB of shared memory (a pool of 40 KiB for blocks of
   * 128 x 128, and the norm's row sums) */
  const VkPhysicalDeviceLimits *lim = &p2.properties.limits;
  if ((out->features & SSM_VK_COOPMAT) &&
      (sg.subgroupSize != 32 || !coop_shape(inst, pd) ||
       lim->maxComputeSharedMemorySize < 48u * 1024u ||
       lim->maxComputeWorkGroupInvocations < 512u || lim->maxComputeWorkGroupSize[0] < 512u))
    out->features &= ~(unsigned)SSM_VK_COOPMAT;
}

/* Enumerates into a malloc'd array; zero devices is the no-device error. */
static ssm_status enumerate(VkInstance inst, uint32_t api, VkPhysicalDevice **out_pds,
                            ssm_vk_device_info **out_infos, int *out_count) {
  *out_pds = NULL, *out_infos = NULL, *out_count = 0;
  uint32_t n = 0;
  VkResult r = vkEnumeratePhysicalDevices(inst, &n, NULL);
  if (r == VK_ERROR_INITIALIZATION_FAILED || (r == VK_SUCCESS && n == 0))
    return ssm_status_new(SSM_ERR_DEVICE, NO_DEVICE_MSG);
  SSM_TRY(ssm_vk_check(r, "vkEnumeratePhysicalDevices"));
  VkPhysicalDevice *pds = calloc(n, sizeof *pds);
  ssm_vk_device_info *infos = calloc(n, sizeof *infos);
  if (!pds || !infos) {
    free(pds), free(infos);
    return ssm_status_new(SSM_ERR_NOMEM, "out of host memory listing Vulkan devices");
  }
  r = vkEnumeratePhysicalDevices(inst, &n, pds);
  ssm_status s = ssm_vk_check(r, "vkEnumeratePhysicalDevices");
  if (!s && n == 0) s = ssm_status_new(SSM_ERR_DEVICE, NO_DEVICE_MSG);
  if (s) {
    free(pds), free(infos);
    return s;
  }
  for (uint32_t i = 0; i < n; i++) device_info(inst, pds[i], (int)i, api, &infos[i]);
  *out_pds = pds, *out_infos = infos, *out_count = (int)n;
  return NULL;
}

ssm_status ssm_vk_list_devices(ssm_vk_device_info **out_devices, int *out_count) {
  *out_devices = NULL, *out_count = 0;
  VkInstance inst;
  uint32_t api;
  bool own;
  SSM_TRY(ssm_vk_instance_get(false, &inst, &api, &own));
  VkPhysicalDevice *pds;
  ssm_status s = enumerate(inst, api, &pds, out_devices, out_count);
  free(pds);
  return s;
}

int ssm_vk_default_device(const ssm_vk_device_info *devices, int count) {
  static const ssm_vk_device_type order[] = {SSM_VK_TYPE_DISCRETE, SSM_VK_TYPE_INTEGRATED,
                                             SSM_VK_TYPE_VIRTUAL, SSM_VK_TYPE_CPU,
                                             SSM_VK_TYPE_OTHER};
  for (size_t o = 0; o < sizeof order / sizeof order[0]; o++)
    for (int i = 0; i < count; i++)
      if (devices[i].usable && devices[i].type == order[o]) return i;
  return -1;
}

const char *ssm_vk_device_type_name(ssm_vk_device_type t) {
  switch (t) {
  case SSM_VK_TYPE_DISCRETE: return "discrete GPU";
  case SSM_VK_TYPE_INTEGRATED: return "integrated GPU";
  case SSM_VK_TYPE_VIRTUAL: return "virtual GPU";
  case SSM_VK_TYPE_CPU: return "cpu";
  default: return "other";
  }
}

static const struct {
  unsigned bit;
  const char *vk_name, *short_name;
} feature_names[] = {
    {SSM_VK_F16_STORAGE, "storageBuffer16BitAccess", "fp16-storage"},
    {SSM_VK_F16, "shaderFloat16", "fp16"},
    {SSM_VK_INT64, "shaderInt64", "int64"},
    {SSM_VK_INT16, "shaderInt16", "int16"},
    {SSM_VK_INT8_STORAGE, "storageBuffer8BitAccess", "int8-storage"},
    {SSM_VK_INT8, "shaderInt8", "int8"},
    {SSM_VK_SUBGROUP_ARITH, "subgroup arithmetic", "subgroup-arith"},
    {SSM_VK_COOPMAT, "cooperativeMatrix (NV, 16x16x16 f16 to f32)", "coopmat"},
};
#define N_FEATURES (sizeof feature_names / sizeof feature_names[0])

char *ssm_vk_format_devices(const ssm_vk_device_info *devices, int count) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return NULL;
  int def = ssm_vk_default_device(devices, count);
  fprintf(f, "Vulkan devices: %d\n", count);
  for (int i = 0; i < count; i++) {
    const ssm_vk_device_info *d = &devices[i];
    char mem[32], range[32], alloc[32];
    fprintf(f, "%c %d: %s\n", i == def ? '*' : ' ', d->index, d->name);
    fprintf(f, "     %s, Vulkan %u.%u.%u, %s, vendor 0x%04x device 0x%04x%s\n",
            ssm_vk_device_type_name(d->type), VK_API_VERSION_MAJOR(d->api_version),
            VK_API_VERSION_MINOR(d->api_version), VK_API_VERSION_PATCH(d->api_version),
            d->driver, d->vendor_id, d->device_id,
            d->usable ? "" : " (not usable: needs Vulkan 1.1 and a compute queue)");
    fprintf(f, "     device-local memory %s, max allocation %s\n",
            ssm_vk_fmt_bytes(mem, sizeof mem, d->device_local_bytes),
            d->max_memory_allocation_size
                ? ssm_vk_fmt_bytes(alloc, sizeof alloc, d->max_memory_allocation_size)
                : "unknown");
    fprintf(f, "     storage buffers: offset alignment %llu, max range %s\n",
            (unsigned long long)d->min_storage_buffer_offset_alignment,
            ssm_vk_fmt_bytes(range, sizeof range, d->max_storage_buffer_range));
    fprintf(f, "     compute: %u invocations per workgroup, subgroup %u, push constants %u B\n",
            d->max_workgroup_invocations, d->subgroup_size, d->max_push_constants_size);
    fprintf(f, "     features:");
    for (size_t k = 0; k < N_FEATURES; k++)
      fprintf(f, " %s %s%s", feature_names[k].short_name,
              d->features & feature_names[k].bit ? "yes" : "no", k + 1 < N_FEATURES ? "," : "");
    fprintf(f, "\n");
  }
  if (def >= 0) fprintf(f, "* the default device (choose another with --device N)\n");
  fclose(f);
  return text;
}

/* ---- context ------------------------------------------------------------- */

static ssm_status device_create(ssm_vk *vk) {
  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(vk->phys, &nq, NULL);
  VkQueueFamilyProperties *qf = calloc(nq ? nq : 1, sizeof *qf);
  if (!qf) return ssm_status_new(SSM_ERR_NOMEM, "out of host memory");
  vkGetPhysicalDeviceQueueFamilyProperties(vk->phys, &nq, qf);
  uint32_t family = UINT32_MAX;
  for (uint32_t i = 0; i < nq && family == UINT32_MAX; i++)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = i;
  free(qf);
  if (family == UINT32_MAX)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "Vulkan device '%s' has no compute queue",
                          vk->info.name);
  vk->queue_family = family;

  feature_chain have, want;
  feature_chain_init(&have, vk->phys, vk->api);
  vkGetPhysicalDeviceFeatures2(vk->phys, &have.core);
  feature_chain_init(&want, vk->phys, vk->api);
  want.core.features.shaderInt64 = have.core.features.shaderInt64;
  want.core.features.shaderInt16 = have.core.features.shaderInt16;
  want.s16.storageBuffer16BitAccess = have.s16.storageBuffer16BitAccess;
  want.s16.uniformAndStorageBuffer16BitAccess = have.s16.uniformAndStorageBuffer16BitAccess;
  want.s16.storagePushConstant16 = have.s16.storagePushConstant16;
  want.f16i8.shaderFloat16 = have.f16i8.shaderFloat16;
  want.f16i8.shaderInt8 = have.f16i8.shaderInt8;
  want.s8.storageBuffer8BitAccess = have.s8.storageBuffer8BitAccess;
  want.s8.uniformAndStorageBuffer8BitAccess = have.s8.uniformAndStorageBuffer8BitAccess;
  want.s8.storagePushConstant8 = have.s8.storagePushConstant8;
  /* cooperative matrices where the device has the whole set (feature_bits) */
  bool coop = vk->info.features & SSM_VK_COOPMAT;
  want.vmm.vulkanMemoryModel = want.vmm.vulkanMemoryModelDeviceScope = coop;
  want.coop.cooperativeMatrix = coop;
  vk->features = feature_bits(&want) | (vk->info.features & SSM_VK_SUBGROUP_ARITH);
  /* what the driver says of each pipeline, asked for by SSM_VK_SHADER_STATS */
  if (vk->shader_stats && !have.pexec.pipelineExecutableInfo) {
    ssm_log("vulkan: SSM_VK_SHADER_STATS: device '%s' lacks pipelineExecutableInfo "
            "(VK_KHR_pipeline_executable_properties); no statistics", vk->info.name);
    vk->shader_stats = false;
  }
  want.pexec.pipelineExecutableInfo = vk->shader_stats;
  /* the structs of extensions enabled only when used go only then */
  if (!vk->shader_stats) feature_chain_drop(&want, &want.pexec);
  if (!coop) feature_chain_drop(&want, &want.coop);
  if (!coop && want.ext_vmm) feature_chain_drop(&want, &want.vmm);

  const char *exts[7];
  uint32_t n_exts = 0;
  if (ssm_vk_has_device_ext(vk->phys, "VK_KHR_portability_subset"))
    exts[n_exts++] = "VK_KHR_portability_subset"; /* required where present (MoltenVK) */
  if (want.ext_f16i8) exts[n_exts++] = VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME;
  if (want.ext_s8) exts[n_exts++] = VK_KHR_8BIT_STORAGE_EXTENSION_NAME;
  if (coop) exts[n_exts++] = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
  if (coop && want.ext_vmm) exts[n_exts++] = VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME;
  if (vk->shader_stats) exts[n_exts++] = VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;

  char missing[256] = "";
  for (size_t k = 0; k < N_FEATURES; k++)
    if (!(vk->features & feature_names[k].bit))
      snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s",
               missing[0] ? ", " : "", feature_names[k].vk_name);
  if (missing[0]) ssm_log("vulkan: device '%s' lacks %s", vk->info.name, missing);

  float priority = 1.0f;
  VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                 .queueFamilyIndex = family,
                                 .queueCount = 1,
                                 .pQueuePriorities = &priority};
  VkDeviceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                           .pNext = &want.core,
                           .queueCreateInfoCount = 1,
                           .pQueueCreateInfos = &qci,
                           .enabledExtensionCount = n_exts,
                           .ppEnabledExtensionNames = exts};
  SSM_TRY(ssm_vk_check(vkCreateDevice(vk->phys, &ci, NULL, &vk->device),
                       "vkCreateDevice('%s')", vk->info.name));
  vkGetDeviceQueue(vk->device, family, 0, &vk->queue);
  vkGetPhysicalDeviceMemoryProperties(vk->phys, &vk->mem);
  if (vk->api >= VK_API_VERSION_1_3) {
    VkPhysicalDeviceMaintenance4Properties m4 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &m4};
    vkGetPhysicalDeviceProperties2(vk->phys, &p2);
    vk->max_buffer_size = m4.maxBufferSize;
  }

  VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                 .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                 .queueFamilyIndex = family};
  SSM_TRY(ssm_vk_check(vkCreateCommandPool(vk->device, &pci, NULL, &vk->xfer_pool),
                       "vkCreateCommandPool"));
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = vk->xfer_pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  SSM_TRY(ssm_vk_check(vkAllocateCommandBuffers(vk->device, &ai, &vk->xfer_cmd),
                       "vkAllocateCommandBuffers"));
  VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  return ssm_vk_check(vkCreateFence(vk->device, &fci, NULL, &vk->xfer_fence), "vkCreateFence");
}

ssm_status ssm_vk_open(int device_index, int validation, ssm_vk **out) {
  *out = NULL;
  ssm_vk *vk = calloc(1, sizeof *vk);
  if (!vk) return ssm_status_new(SSM_ERR_NOMEM, "out of host memory");
  const char *env = getenv("SSM_VK_VALIDATION");
  if (env && env[0] && strcmp(env, "0") != 0) validation = 1;
  env = getenv("SSM_VK_FORCE_STAGING");
  vk->force_staging = env && env[0] && strcmp(env, "0") != 0;
  env = getenv("SSM_VK_SHADER_STATS");
  vk->shader_stats = env && env[0] && strcmp(env, "0") != 0;
  uint64_t range_cap = 0;
  env = getenv("SSM_VK_MAX_STORAGE_RANGE");
  if (env && env[0]) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(env, &end, 10);
    if (errno || *end || env[0] == '-' || v < 256) {
      free(vk);
      return ssm_status_new(SSM_ERR_INVALID, "SSM_VK_MAX_STORAGE_RANGE=%s: expected a number of "
                            "bytes, at least 256", env);
    }
    range_cap = v;
  }

  uint32_t api;
  VkPhysicalDevice *pds = NULL;
  ssm_vk_device_info *infos = NULL;
  int n = 0;
  ssm_status s = ssm_vk_instance_get(validation != 0, &vk->instance, &api, &vk->validation);
  if (!s && vk->validation) {
    VkDebugUtilsMessengerCreateInfoEXT dbg;
    ssm_vk_messenger_info(vk, &dbg);
    PFN_vkCreateDebugUtilsMessengerEXT create_messenger =
        (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(
            vk->instance, "vkCreateDebugUtilsMessengerEXT");
    vk->destroy_messenger = (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(
        vk->instance, "vkDestroyDebugUtilsMessengerEXT");
    if (create_messenger && vk->destroy_messenger)
      s = ssm_vk_check(create_messenger(vk->instance, &dbg, NULL, &vk->messenger),
                       "vkCreateDebugUtilsMessengerEXT");
  }
  if (!s) s = enumerate(vk->instance, api, &pds, &infos, &n);
  if (!s) {
    if (device_index < 0) {
      device_index = ssm_vk_default_device(infos, n);
      if (device_index < 0)
        s = ssm_status_new(SSM_ERR_UNSUPPORTED,
                           "none of the %d Vulkan device(s) is usable (ssmc needs Vulkan "
                           "1.1 and a compute queue; see 'ssmc devices')", n);
    } else if (device_index >= n) {
      char list[1024] = "";
      for (int i = 0; i < n; i++) {
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%d '%s'", i ? ", " : "", i, infos[i].name);
      }
      s = ssm_status_new(SSM_ERR_INVALID,
                         "device index %d out of range: %d Vulkan device%s found: %s "
                         "(see 'ssmc devices')",
                         device_index, n, n == 1 ? "" : "s", list);
    } else if (!infos[device_index].usable) {
      s = ssm_status_new(SSM_ERR_UNSUPPORTED,
                         "Vulkan device %d ('%s') is not usable: ssmc needs Vulkan 1.1 "
                         "and a compute queue", device_index, infos[device_index].name);
    }
  }
  if (!s) {
    vk->phys = pds[device_index];
    vk->info = infos[device_index];
    vk->api = min_u32(api, vk->info.api_version);
    if (range_cap && range_cap < vk->info.max_storage_buffer_range) {
      vk->info.max_storage_buffer_range = range_cap;
      ssm_log("vulkan: maxStorageBufferRange capped at %llu bytes (SSM_VK_MAX_STORAGE_RANGE)",
              (unsigned long long)range_cap);
    }
    s = device_create(vk);
  }
  free(pds);
  free(infos);
  if (s) {
    ssm_vk_close(vk);
    return s;
  }
  ssm_log("vulkan: using device %d '%s' (%s)%s", vk->info.index, vk->info.name,
          ssm_vk_device_type_name(vk->info.type), vk->validation ? " with validation" : "");
  *out = vk;
  return NULL;
}

void ssm_vk_close(ssm_vk *vk) {
  if (!vk) return;
  if (vk->device) {
    vkDeviceWaitIdle(vk->device);
    ssm_vk_buffer_destroy(vk, vk->staging);
    if (vk->xfer_fence) vkDestroyFence(vk->device, vk->xfer_fence, NULL);
    if (vk->xfer_pool) vkDestroyCommandPool(vk->device, vk->xfer_pool, NULL);
    vkDestroyDevice(vk->device, NULL);
  }
  if (vk->messenger) vk->destroy_messenger(vk->instance, vk->messenger, NULL);
  if (vk->instance && vk->validation) vkDestroyInstance(vk->instance, NULL);
  /* (without validation, the instance is shared and stays: instance_get) */
  for (int i = 0; i < vk->n_messages; i++) free(vk->messages[i]);
  free(vk);
}

const ssm_vk_device_info *ssm_vk_info(const ssm_vk *vk) { return &vk->info; }
unsigned ssm_vk_features(const ssm_vk *vk) { return vk->features; }

ssm_status ssm_vk_require(const ssm_vk *vk, unsigned needed, const char *why) {
  unsigned lack = needed & ~vk->features;
  if (!lack) return NULL;
  char list[256] = "";
  for (size_t k = 0; k < N_FEATURES; k++)
    if (lack & feature_names[k].bit)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
               list[0] ? ", " : "", feature_names[k].vk_name);
  return ssm_status_new(SSM_ERR_UNSUPPORTED, "Vulkan device '%s' lacks %s (needed %s)",
                        vk->info.name, list, why ? why : "here");
}

size_t ssm_vk_storage_alignment(const ssm_vk *vk) {
  size_t a = (size_t)vk->info.min_storage_buffer_offset_alignment;
  return a ? a : 1;
}

size_t ssm_vk_align(const ssm_vk *vk, size_t offset) {
  size_t a = ssm_vk_storage_alignment(vk);
  return (offset + a - 1) / a * a;
}

int ssm_vk_validation_enabled(const ssm_vk *vk) { return vk->validation; }
int ssm_vk_validation_errors(const ssm_vk *vk) { return vk->errors; }
int ssm_vk_validation_warnings(const ssm_vk *vk) { return vk->warnings; }
const char *ssm_vk_validation_message(const ssm_vk *vk, int i) {
  return i >= 0 && i < vk->n_messages ? vk->messages[i] : NULL;
}
