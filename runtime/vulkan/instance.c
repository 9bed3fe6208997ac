/*
 * instance.c — the bottom of the Vulkan base layer: every VkResult becomes
 * a status here (ssm_vk_check), and the instance is made here: the
 * process's shared one, or one with the validation layer, whose messages
 * are counted, kept and logged.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>

#include "runtime/vulkan/internal.h"

/* ---- VkResult → status (the one place) ---------------------------------- */

const char *ssm_vk_result_name(VkResult r) {
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

ssm_status ssm_vk_check(VkResult r, const char *fmt, ...) {
  if (r >= 0) return NULL;
  char ctx[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  if (strstr(ssm_vk_result_name(r), "(unknown)"))
    return ssm_status_new(SSM_ERR_DEVICE, "%s: VkResult %d", ctx, (int)r);
  return ssm_status_new(SSM_ERR_DEVICE, "%s: %s", ctx, ssm_vk_result_name(r));
}

const char *ssm_vk_fmt_bytes(char *buf, size_t cap, uint64_t n) {
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

bool ssm_vk_has_ext(VkPhysicalDevice pd, const char *layer, const char *name) {
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

void ssm_vk_messenger_info(ssm_vk *vk, VkDebugUtilsMessengerCreateInfoEXT *ci) {
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
  if (!ssm_vk_has_instance_ext(NULL, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) &&
      !ssm_vk_has_instance_ext(VALIDATION_LAYER, VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
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
  if (ssm_vk_has_instance_ext(NULL, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
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
    ssm_vk_messenger_info(NULL, &dbg);
    next = &dbg;
    if (ssm_vk_has_instance_ext(VALIDATION_LAYER, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
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
                          ssm_vk_result_name(r));
  }
  if (r != VK_SUCCESS) *out = VK_NULL_HANDLE;
  return ssm_vk_check(r, "vkCreateInstance");
}

/* The process's instance without the validation layer, made on first use
 * and kept until exit: sessions and device listings share it, so that a
 * process that opens many sessions (a server, a test suite, a library
 * user) makes one instance. Some drivers do not survive many
 * create/destroy cycles: NVIDIA's (580) refuses to create instances
 * (VK_ERROR_INCOMPATIBLE_DRIVER) after about 30 in one process, and
 * repeated cycles are reported to corrupt subgroup ids on it too. A
 * session with validation makes its own, destroyed with it, so that its
 * messenger hears only its own device and the layer reports what it
 * leaked. */
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

ssm_status ssm_vk_instance_get(bool validation, VkInstance *out, uint32_t *out_api,
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
