/*
 * cache.c — compiled models kept on disk by content, so that running a
 * model directory a second time does not compile it again.
 *
 * An entry is DIR/<key>.ssmb, an ordinary bundle that records its key
 * (ssm_manifest.cache_key). The key is an XXH3-128
 * over everything the compiled bundle depends on: the model's digest (its
 * description's text, config.json as parsed, every param: frontend.h), the
 * compile options, and the ssmc build: its version, its git revision and
 * the GNU build id of the binary that holds this code, so that a rebuilt
 * compiler never reads what an older one wrote. Entries are written
 * atomically (ssm_bundle_save: a temporary file renamed over the entry),
 * so concurrent runs at worst compile twice; an entry that does not read
 * back (the bundle's checksum, its version), or that does not record the
 * key it is named by (a file copied or written there by other means), is
 * compiled again and replaced, and the log says which entry and why. A
 * FIFO, device or socket where an entry belongs is never opened (a FIFO
 * would wait for a writer): it is removed and the entry written anew.
 * Temporary files that killed writers left behind are removed once they
 * are an hour old.
 */
#include <dirent.h>
#include <errno.h>
#include <link.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "compile/compile.h"

#define STALE_TEMP_S 3600

/* ---- the build id ------------------------------------------------------------- */

typedef struct {
  uintptr_t addr; /* an address inside the object wanted */
  unsigned char id[64];
  size_t n;
} build_id;

static void notes(const unsigned char *p, size_t size, build_id *b) {
  for (size_t at = 0; at + sizeof(ElfW(Nhdr)) <= size;) {
    const ElfW(Nhdr) *nh = (const void *)(p + at);
    size_t name = (nh->n_namesz + 3) & ~(size_t)3, desc = (nh->n_descsz + 3) & ~(size_t)3;
    const unsigned char *d = p + at + sizeof *nh + name;
    if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(p + at + sizeof *nh, "GNU", 4) &&
        nh->n_descsz <= sizeof b->id) {
      memcpy(b->id, d, nh->n_descsz);
      b->n = nh->n_descsz;
      return;
    }
    at += sizeof *nh + name + desc;
  }
}

static int find_build_id(struct dl_phdr_info *info, size_t size, void *user) {
  build_id *b = user;
  int inside = 0;
  for (int i = 0; i < info->dlpi_phnum && !inside; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    inside = ph->p_type == PT_LOAD && b->addr >= lo && b->addr < lo + ph->p_memsz;
  }
  if (!inside) return 0;
  for (int i = 0; i < info->dlpi_phnum && !b->n; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_NOTE)
      notes((const unsigned char *)(info->dlpi_addr + ph->p_vaddr), ph->p_memsz, b);
  }
  return 1;
}

/* ---- the cache ------------------------------------------------------------------ */

static ssm_status key_of(const ssm_model *m, const ssm_compile_opts *co, char out[33]) {
  build_id id = {.addr = (uintptr_t)&key_of};
  dl_iterate_phdr(find_build_id, &id);
  XXH3_state_t *h = XXH3_createState();
  if (!h) return ssm_status_new(SSM_ERR_NOMEM, "compile cache: out of host memory for a hash state");
  XXH3_128bits_reset(h);
  const char *const texts[] = {"ssmc compile cache 1", SSM_VERSION, ssm_revision()};
  for (int i = 0; i < 3; i++) XXH3_128bits_update(h, texts[i], strlen(texts[i]) + 1);
  XXH3_128bits_update(h, id.id, id.n);
  int64_t v[7] = {(int64_t)ssm_model_digest(m), ssm_compile_chunk(m, co),
                  (int64_t)co->dtype, co->no_fuse, co->slots, ssm_compile_coop_prep(co),
                  ssm_compile_delta_steps(co)};
  XXH3_128bits_update(h, v, sizeof v);
  XXH128_hash_t k = XXH3_128bits_digest(h);
  XXH3_freeState(h);
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)k.high64, (unsigned long long)k.low64);
  return NULL;
}

/* Removes ".<key>.ssmb.XXXXXX" files that writers killed outright left. */
static void sweep(const char *dir) {
  DIR *d = opendir(dir);
  time_t now = time(NULL);
  for (struct dirent *e; d && (e = readdir(d));) {
    const char *dot = strstr(e->d_name, ".ssmb.");
    if (e->d_name[0] != '.' || !dot || strlen(dot) != 12) continue;
    ssm_sb p = {0};
    ssm_sb_printf(&p, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (!p.failed && !lstat(p.s, &sb) && S_ISREG(sb.st_mode) && now - sb.st_mtime > STALE_TEMP_S) unlink(p.s);
    ssm_sb_free(&p);
  }
  if (d) closedir(d);
}

ssm_status ssm_cache_entry_look(const char *path, int *out_present) {
  *out_present = 0;
  struct stat sb;
  if (stat(path, &sb)) return NULL;
  if (S_ISREG(sb.st_mode)) {
    *out_present = 1;
    return NULL;
  }
  if (S_ISDIR(sb.st_mode))
    return ssm_status_new(SSM_ERR_INVALID, "%s: is a directory, where a compile-cache entry "
                          "belongs", path);
  if (unlink(path))
    return ssm_status_new(SSM_ERR_IO, "%s: is %s, where a compile-cache entry belongs, and "
                          "cannot be removed (%s)", path, ssm_file_kind(sb.st_mode), strerror(errno));
  ssm_log("compile cache: %s was %s, not a regular file; removed, to be written again", path,
          ssm_file_kind(sb.st_mode));
  return NULL;
}

ssm_status ssm_cache_compile(ssm_model *m, const ssm_compile_opts *co, const char *dir,
                             ssm_bundle **out, int *out_hit, char **out_path,
                             double *out_compile_s) {
  *out = NULL;
  *out_hit = 0;
  *out_compile_s = 0;
  char key[33];
  SSM_TRY(key_of(m, co, key));
  ssm_sb path = {0};
  ssm_sb_printf(&path, "%s/%s.ssmb", dir, key);
  SSM_TRY(ssm_sb_take(&path, "a cache entry's name", out_path));
  int present = 0;
  ssm_status look = ssm_cache_entry_look(*out_path, &present);
  if (look) ssm_log("compile cache: the compiled model is not kept: %s", ssm_status_message(look));
  int keep = !look;
  ssm_status_free(look);
  if (present) {
    ssm_status s = ssm_bundle_open(*out_path, out);
    const char *was = s ? NULL : ssm_bundle_manifest(*out)->cache_key;
    if (was && !strcmp(was, key)) {
      *out_hit = 1;
      return NULL;
    }
    if (s) ssm_log("compile cache: %s; compiling it again", ssm_status_message(s));
    else if (!was) ssm_log("compile cache: %s records no key, so it need not be this model's "
                           "compile; compiling it again", *out_path);
    else ssm_log("compile cache: %s holds the compile of key %s, not of its name; compiling it "
                 "again", *out_path, was);
    ssm_status_free(s);
    ssm_bundle_close(*out);
    *out = NULL;
  }
  double t0 = ssm_now();
  SSM_TRY(ssm_compile(m, co, out));
  *out_compile_s = ssm_now() - t0;
  ssm_manifest *mf = ssm_bundle_manifest_mut(*out);
  mf->cache_key = ssm_arena_strdup(ssm_bundle_arena(*out), key); /* NULL: not kept, a miss next time */
  if (!keep) return NULL;
  ssm_status s = ssm_file_mkdirs(dir);
  if (!s) sweep(dir);
  if (!s) s = ssm_bundle_save(*out, *out_path);
  if (s) ssm_log("compile cache: the compiled model is not kept: %s", ssm_status_message(s));
  ssm_status_free(s);
  return NULL;
}
