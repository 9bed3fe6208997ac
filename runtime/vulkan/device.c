/*
 * vk.c — the Vulkan base layer under the generated-kernel runtime.
 *
 * It opens one device with one compute queue (on the process's one shared
 * instance, or an instance of its own with validation), allocates storage buffers (one
 * VkDeviceMemory each), builds compute pipelines from SPIR-V, and records
 * programs: lists of dispatches that become one command buffer with
 * descriptor sets written once, so a decode step is a single vkQueueSubmit
 * that allocates nothing. Transfers to and from buffers the host cannot map
 * go through a reusable staging buffer and are synchronous.
 *
 * Synchronization is deliberately coarse: every command buffer begins with a
 * global barrier against all earlier compute, transfer and host writes and
 * ends with one that makes its writes visible to the host and to transfers;
 * inside a program, ssm_vk_program_add_barrier is a full compute-to-compute
 * memory barrier.
 *
 * Every VkResult becomes a status in vk_check, and nothing here prints:
 * validation-layer messages are counted, the first few kept, and forwarded
 * to ssm_log.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <errno.h>
#include <string.h>
#include <vulkan/vulkan.h>

#include "runtime/vulkan/vulkan.h"

#define MAX_MESSAGES 8
#define STAGING_CHUNK ((size_t)64 << 20)
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

/* ---- VkResult → status (the one place) ---------------------------------- */

static const char *vk_result_name(VkResult r) {
  switch (r) {
#define N(x) case x: return #x;
    N(VK_SUCCESS) N(VK_NOT_READY) N(VK_TIMEOUT) N(VK_EVENT_SET) N(VK_EVENT_RESET)
    N(VK_INCOMPLETE) N(VK_ERROR_OUT_OF_HOST_MEMORY) N(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    N(VK_ERROR_INITIALIZATION_FAILED) N(VK_ERROR_DEVICE_LOST) N(VK_ERROR_MEMORY_MAP_FAILED)
    N(VK_ERROR_LAYER_NOT_PRESENT) N(VK_ERROR_EXTENSION_NOT_PRESENT)
    N(VK_ERROR_FEATURE_NOT_PRESENT) N(VK_ERROR_INCOMPATIBLE_DRIVER)
    N(VK_ERROR_TOO_MANY_OBJECTS) N(VK_ERROR_FORMAT_NOT_SUPPORTED)
    N(VK_ERROR_FRAGMENTED_POOL) N(VK_ERROR_UNKNOWN) N(VK_ERROR_OUT_OF_POOL_MEMORY)
    N(VK_ERROR_INVALID_EXTERNAL_HANDLE) N(VK_ERROR_FRAGMENTATION)
    N(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS) N(VK_PIPELINE_COMPILE_REQUIRED)
    N(VK_ERROR_INVALID_SHADER_NV)
#undef N
  default: return "VK_ERROR_(unknown)";
  }
}

/* NULL for success codes (>= 0); otherwise SSM_ERR_DEVICE with
 * "<context>: VK_ERROR_...". */
static ssm_status vk_check(VkResult r, const char *fmt, ...) SSM_PRINTF(2, 3);
static ssm_status vk_check(VkResult r, const char *fmt, ...) {
  if (r >= 0) return NULL;
  char ctx[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  if (strstr(vk_result_name(r), "(unknown)"))
    return ssm_status_new(SSM_ERR_DEVICE, "%s: VkResult %d", ctx, (int)r);
  return ssm_status_new(SSM_ERR_DEVICE, "%s: %s", ctx, vk_result_name(r));
}

static const char *fmt_bytes(char *buf, size_t cap, uint64_t n) {
  static const char *units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (n < 1024) {
    snprintf(buf, cap, "%llu B", (unsigned long long)n);
    return buf;
  }
  double v = (double)n / 1024;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  snprintf(buf, cap, "%.1f %s", v, units[u]);
  return buf;
}

/* ---- instance ------------------------------------------------------------ */

static bool has_instance_layer(const char *name) {
  uint32_t n = 0;
  if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return false;
  VkLayerProperties *props = calloc(n, sizeof *props);
  bool found = false;
  if (props && vkEnumerateInstanceLayerProperties(&n, props) >= 0)
    for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(props[i].layerName, name);
  free(props);
  return found;
}

/* Whether an extension is offered: by the device `pd`, or else by the
 * instance (through `layer` when non-NULL). */
static bool has_ext(VkPhysicalDevice pd, const char *layer, const char *name) {
  uint32_t n = 0;
  VkExtensionProperties *props = NULL;
  VkResult r = pd ? vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL)
                  : vkEnumerateInstanceExtensionProperties(layer, &n, NULL);
  if (r != VK_SUCCESS || n == 0 || !(props = calloc(n, sizeof *props))) return false;
  r = pd ? vkEnumerateDeviceExtensionProperties(pd, NULL, &n, props)
         : vkEnumerateInstanceExtensionProperties(layer, &n, props);
  bool found = false;
  for (uint32_t i = 0; r >= 0 && i < n && !found; i++)
    found = !strcmp(props[i].extensionName, name);
  free(props);
  return found;
}
#define has_instance_ext(layer, name) has_ext(VK_NULL_HANDLE, layer, name)
#define has_device_ext(pd, name) has_ext(pd, NULL, name)

int ssm_vk_validation_available(void) { return has_instance_layer(VALIDATION_LAYER); }

static VKAPI_ATTR VkBool32 VKAPI_CALL on_debug_message(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT types,
    const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
  ssm_vk *vk = user; /* NULL while the shared instance is made: only logged */
  bool error = severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  if (!error && !(severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT)) return VK_FALSE;
  const char *kind = error ? "error" : "warning";
  const char *msg = data && data->pMessage ? data->pMessage : "(no message)";
  if (vk && error) vk->errors++;
  else if (vk) vk->warnings++;
  if (vk && vk->n_messages < MAX_MESSAGES) {
    size_t len = strlen(kind) + strlen(msg) + 4;
    char *m = malloc(len);
    if (m) {
      snprintf(m, len, "%s: %s", kind, msg);
      vk->messages[vk->n_messages++] = m;
    }
  }
  ssm_log("vulkan validation %s: %s", kind, msg);
  return VK_FALSE;
}

static void messenger_info(ssm_vk *vk, VkDebugUtilsMessengerCreateInfoEXT *ci) {
  *ci = (VkDebugUtilsMessengerCreateInfoEXT){
      .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
      .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
      .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
      .pfnUserCallback = on_debug_message,
      .pUserData = vk,
  };
}

/* Whether the validation layer can be enabled (else logs why not). */
static bool validation_usable(void) {
  if (!has_instance_layer(VALIDATION_LAYER)) {
    ssm_log("vulkan: validation requested but %s is not installed", VALIDATION_LAYER);
    return false;
  }
  if (!has_instance_ext(NULL, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) &&
      !has_instance_ext(VALIDATION_LAYER, VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
    ssm_log("vulkan: validation requested but VK_EXT_debug_utils is missing");
    return false;
  }
  return true;
}

/* Creates an instance, with the validation layer when `validation` (which
 * validation_usable allowed); what it reports while being made is logged. */
static ssm_status instance_create(bool validation, VkInstance *out, uint32_t *out_api) {
  *out = VK_NULL_HANDLE;
  uint32_t loader = VK_API_VERSION_1_0;
  if (vkEnumerateInstanceVersion(&loader) != VK_SUCCESS) loader = VK_API_VERSION_1_0;
  uint32_t api = loader < VK_API_VERSION_1_3 ? loader : VK_API_VERSION_1_3;
  api = VK_MAKE_API_VERSION(0, VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api), 0);
  *out_api = api;

  const char *exts[4];
  uint32_t n_exts = 0;
  VkInstanceCreateFlags flags = 0;
  if (has_instance_ext(NULL, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    exts[n_exts++] = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
    flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }
  const char *layers[1] = {VALIDATION_LAYER};
  uint32_t n_layers = 0;
  VkDebugUtilsMessengerCreateInfoEXT dbg;
  VkValidationFeatureEnableEXT enables[] = {
      VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  VkValidationFeaturesEXT vf = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                                .enabledValidationFeatureCount = 1,
                                .pEnabledValidationFeatures = enables};
  const void *next = NULL;
  if (validation) {
    layers[n_layers++] = VALIDATION_LAYER;
    exts[n_exts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    messenger_info(NULL, &dbg);
    next = &dbg;
    if (has_instance_ext(VALIDATION_LAYER, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
      exts[n_exts++] = VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME;
      vf.pNext = &dbg;
      next = &vf;
    }
  }
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                           .pApplicationName = "ssmc",
                           .pEngineName = "ssmc",
                           .apiVersion = api};
  VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                             .pNext = next,
                             .flags = flags,
                             .pApplicationInfo = &app,
                             .enabledLayerCount = n_layers,
                             .ppEnabledLayerNames = layers,
                             .enabledExtensionCount = n_exts,
                             .ppEnabledExtensionNames = exts};
  VkResult r = vkCreateInstance(&ci, NULL, out);
  /* Keep the validation layer mapped until exit: it holds some state past
   * vkDestroyInstance, and LeakSanitizer can only name (and suppress) it
   * while the library is still loaded. */
  if (r == VK_SUCCESS && validation)
    dlopen("libVkLayer_khronos_validation.so", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER || r == VK_ERROR_INITIALIZATION_FAILED) {
    *out = VK_NULL_HANDLE;
    return ssm_status_new(SSM_ERR_DEVICE, NO_DEVICE_MSG " (vkCreateInstance: %s)",
                          vk_result_name(r));
  }
  if (r != VK_SUCCESS) *out = VK_NULL_HANDLE;
  return vk_check(r, "vkCreateInstance");
}

/* The process's instance without the validation layer, made on first use
 * and kept until exit: sessions and device listings share it. NVIDIA's
 * driver (580, H200) stopped creating instances (VK_ERROR_INCOMPATIBLE_
 * DRIVER) after about 30 create/destroy cycles in one process (test_golden
 * opened that many sessions), and repeated cycles are reported to corrupt
 * subgroup ids on it too; a process that opens many sessions (a server, a
 * test suite, a library user) now makes one instance. A session with
 * validation makes its own, destroyed with it, so that its messenger hears
 * only its own device and the layer reports what it leaked. */
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static VkInstance shared_instance;
static uint32_t shared_api;
static int instances_made; /* under shared_lock */

int ssm_vk_instances_made(void) {
  pthread_mutex_lock(&shared_lock);
  int n = instances_made;
  pthread_mutex_unlock(&shared_lock);
  return n;
}

/* An instance, with validation when wanted and usable (`*out_own` says
 * so: then the caller destroys it), else the shared one. */
static ssm_status instance_get(bool validation, VkInstance *out, uint32_t *out_api,
                               bool *out_own) {
  *out_own = validation && validation_usable();
  ssm_status s = NULL;
  if (*out_own) {
    s = instance_create(true, out, out_api);
    pthread_mutex_lock(&shared_lock);
    instances_made += !s;
    pthread_mutex_unlock(&shared_lock);
    return s;
  }
  pthread_mutex_lock(&shared_lock);
  if (!shared_instance) {
    s = instance_create(false, &shared_instance, &shared_api);
    instances_made += !s;
  }
  *out = shared_instance;
  *out_api = shared_api;
  pthread_mutex_unlock(&shared_lock);
  return s;
}

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
  fc->ext_f16i8 = !v12 && has_device_ext(pd, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
  fc->ext_s8 = !v12 && has_device_ext(pd, VK_KHR_8BIT_STORAGE_EXTENSION_NAME);
  fc->ext_vmm = !v12 && has_device_ext(pd, VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME);
  fc->has_f16i8 = v12 || fc->ext_f16i8;
  fc->has_s8 = v12 || fc->ext_s8;
  fc->has_vmm = v12 || fc->ext_vmm;
  fc->has_coop = has_device_ext(pd, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  fc->has_pexec = has_device_ext(pd, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
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
  bool has_drv =
      api >= VK_API_VERSION_1_2 || has_device_ext(pd, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
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
  SSM_TRY(vk_check(r, "vkEnumeratePhysicalDevices"));
  VkPhysicalDevice *pds = calloc(n, sizeof *pds);
  ssm_vk_device_info *infos = calloc(n, sizeof *infos);
  if (!pds || !infos) {
    free(pds), free(infos);
    return ssm_status_new(SSM_ERR_NOMEM, "out of host memory listing Vulkan devices");
  }
  r = vkEnumeratePhysicalDevices(inst, &n, pds);
  ssm_status s = vk_check(r, "vkEnumeratePhysicalDevices");
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
  SSM_TRY(instance_get(false, &inst, &api, &own));
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
            fmt_bytes(mem, sizeof mem, d->device_local_bytes),
            d->max_memory_allocation_size
                ? fmt_bytes(alloc, sizeof alloc, d->max_memory_allocation_size)
                : "unknown");
    fprintf(f, "     storage buffers: offset alignment %llu, max range %s\n",
            (unsigned long long)d->min_storage_buffer_offset_alignment,
            fmt_bytes(range, sizeof range, d->max_storage_buffer_range));
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
  if (has_device_ext(vk->phys, "VK_KHR_portability_subset"))
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
  SSM_TRY(vk_check(vkCreateDevice(vk->phys, &ci, NULL, &vk->device),
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
  SSM_TRY(vk_check(vkCreateCommandPool(vk->device, &pci, NULL, &vk->xfer_pool),
                   "vkCreateCommandPool"));
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = vk->xfer_pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  SSM_TRY(vk_check(vkAllocateCommandBuffers(vk->device, &ai, &vk->xfer_cmd),
                   "vkAllocateCommandBuffers"));
  VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  return vk_check(vkCreateFence(vk->device, &fci, NULL, &vk->xfer_fence), "vkCreateFence");
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
  ssm_status s = instance_get(validation != 0, &vk->instance, &api, &vk->validation);
  if (!s && vk->validation) {
    VkDebugUtilsMessengerCreateInfoEXT dbg;
    messenger_info(vk, &dbg);
    PFN_vkCreateDebugUtilsMessengerEXT create_messenger =
        (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(
            vk->instance, "vkCreateDebugUtilsMessengerEXT");
    vk->destroy_messenger = (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(
        vk->instance, "vkDestroyDebugUtilsMessengerEXT");
    if (create_messenger && vk->destroy_messenger)
      s = vk_check(create_messenger(vk->instance, &dbg, NULL, &vk->messenger),
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

/* ---- synchronization helpers -------------------------------------------- */

/* Everything earlier (compute, transfer, host writes) before `dst_stage`. */
static void barrier_in(VkCommandBuffer cmd, VkPipelineStageFlags dst_stage,
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

/* Writes of `src_stage` visible to the host and to later transfers. */
static void barrier_out(VkCommandBuffer cmd, VkPipelineStageFlags src_stage,
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
  SSM_TRY(vk_check(vkResetCommandBuffer(vk->xfer_cmd, 0), "vkResetCommandBuffer"));
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  SSM_TRY(vk_check(vkBeginCommandBuffer(vk->xfer_cmd, &bi), "vkBeginCommandBuffer"));
  barrier_in(vk->xfer_cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
             VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
  return NULL;
}

static ssm_status xfer_submit_wait(ssm_vk *vk, const char *what) {
  barrier_out(vk->xfer_cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
  SSM_TRY(vk_check(vkEndCommandBuffer(vk->xfer_cmd), "vkEndCommandBuffer(%s)", what));
  VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                     .commandBufferCount = 1,
                     .pCommandBuffers = &vk->xfer_cmd};
  SSM_TRY(vk_check(vkQueueSubmit(vk->queue, 1, &si, vk->xfer_fence), "vkQueueSubmit(%s)", what));
  ssm_status s = vk_check(vkWaitForFences(vk->device, 1, &vk->xfer_fence, VK_TRUE, UINT64_MAX),
                          "vkWaitForFences(%s)", what);
  ssm_status r = vk_check(vkResetFences(vk->device, 1, &vk->xfer_fence), "vkResetFences");
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
  fmt_bytes(sz, sizeof sz, bytes);
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
                       fmt_bytes(lim, sizeof lim, limit));
    goto fail;
  }
  s = vk_check(vkCreateBuffer(vk->device, &bci, NULL, &b->buffer), "vkCreateBuffer(%s %s)", sz,
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
  s = vk_check(vkAllocateMemory(vk->device, &mai, NULL, &b->memory), "vkAllocateMemory(%s %s)",
               sz, kname);
  if (s) goto fail;
  s = vk_check(vkBindBufferMemory(vk->device, b->buffer, b->memory, 0), "vkBindBufferMemory");
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
    s = vk_check(vkMapMemory(vk->device, b->memory, 0, VK_WHOLE_SIZE, 0, &b->map),
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
  ssm_status s = vk_check(vkCreateShaderModule(vk->device, &smci, NULL, &k->module),
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
    s = vk_check(vkCreateDescriptorSetLayout(vk->device, &dci, NULL, &k->set_layout),
                 "kernel '%s': vkCreateDescriptorSetLayout", name);
  VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = d->push_bytes};
  VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                    .setLayoutCount = 1,
                                    .pSetLayouts = &k->set_layout,
                                    .pushConstantRangeCount = d->push_bytes ? 1 : 0,
                                    .pPushConstantRanges = &pcr};
  if (!s)
    s = vk_check(vkCreatePipelineLayout(vk->device, &lci, NULL, &k->layout),
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
    s = vk_check(vkCreateComputePipelines(vk->device, VK_NULL_HANDLE, 1, &pci, NULL, &k->pipeline),
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
    SSM_TRY(vk_check(vkCreateDescriptorPool(dev, &dpci, NULL, &p->descriptor_pool),
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
    s = vk_check(vkAllocateDescriptorSets(dev, &ai, &sets[i]), "vkAllocateDescriptorSets");
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
    s = vk_check(vkCreateCommandPool(dev, &cpci, NULL, &p->command_pool), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                     .commandPool = p->command_pool,
                                     .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                     .commandBufferCount = 1};
  if (!s) s = vk_check(vkAllocateCommandBuffers(dev, &cai, &p->cmd), "vkAllocateCommandBuffers");
  VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if (!s) s = vk_check(vkCreateFence(dev, &fci, NULL, &p->fence), "vkCreateFence");
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  if (!s) s = vk_check(vkBeginCommandBuffer(p->cmd, &bi), "vkBeginCommandBuffer(program)");
  if (!s && p->profile) {
    p->nqueries = (uint32_t)ssm_vk_program_dispatches(p) + 1;
    VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                 .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                 .queryCount = p->nqueries};
    s = vk_check(vkCreateQueryPool(dev, &qci, NULL, &p->queries), "vkCreateQueryPool(%u)",
                 p->nqueries);
    if (!s) vkCmdResetQueryPool(p->cmd, p->queries, 0, p->nqueries);
  }
  if (!s) {
    VkCommandBuffer cmd = p->cmd;
    uint32_t query = 0;
    if (p->queries)
      vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, p->queries, query++);
    barrier_in(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
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
    barrier_out(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    s = vk_check(vkEndCommandBuffer(cmd), "vkEndCommandBuffer(program)");
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
  ssm_status s = vk_check(vkGetQueryPoolResults(vk->device, p->queries, 0, p->nqueries,
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
  ssm_status s = vk_check(vkWaitForFences(vk->device, 1, &p->fence, VK_TRUE, UINT64_MAX),
                          "vkWaitForFences(program of %zu dispatches)", p->ops.n);
  ssm_status r = vk_check(vkResetFences(vk->device, 1, &p->fence), "vkResetFences");
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
  SSM_TRY(vk_check(vkQueueSubmit(vk->queue, 1, &si, p->fence),
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
