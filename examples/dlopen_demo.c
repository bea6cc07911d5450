/* dlopen_demo.c - load libposenc at run time, as a language binding does.
 *
 * Opens the library by its SONAME, "libposenc.so.0" (or the path given as
 * the first argument), looks up pe_version_string and checks that the
 * library's major version is the one this program was compiled against:
 * the major version is the ABI, and the SONAME carries it. Then it makes one
 * more call through a looked-up pointer, pe_status_string.
 *
 * Needs only the header at build time, no -lposenc:
 *   cc dlopen_demo.c $(pkg-config --cflags posenc) -ldl
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <posenc.h>

typedef const char *(*version_fn)(void);
typedef const char *(*status_string_fn)(pe_status);

int main(int argc, char **argv) {
  const char *name = argc > 1 ? argv[1] : "libposenc.so.0";
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen_demo: cannot load %s: %s\n", name, dlerror());
    return 1;
  }
  /* POSIX lets a void * from dlsym be converted to a function pointer. */
  version_fn version = (version_fn)dlsym(lib, "pe_version_string");
  status_string_fn status_string = (status_string_fn)dlsym(lib, "pe_status_string");
  if (!version || !status_string) {
    fprintf(stderr, "dlopen_demo: %s lacks pe_version_string or pe_status_string\n", name);
    dlclose(lib);
    return 1;
  }
  const char *v = version();
  int major = -1, minor = -1, patch = -1;
  if (sscanf(v, "%d.%d.%d", &major, &minor, &patch) != 3) {
    fprintf(stderr, "dlopen_demo: unexpected version string \"%s\"\n", v);
    dlclose(lib);
    return 1;
  }
  printf("loaded %s: version %s; compiled against %d.%d.%d\n", name, v, PE_VERSION_MAJOR,
         PE_VERSION_MINOR, PE_VERSION_PATCH);
  printf("pe_status_string(PE_ERR_SHAPE) = \"%s\"\n", status_string(PE_ERR_SHAPE));
  int ok = major == PE_VERSION_MAJOR;
  /* Within one major version, a newer library is fine; an older one may lack
   * functions this program looks up. */
  if (ok && (minor < PE_VERSION_MINOR))
    printf("note: the library is older than the header; newer functions may be missing\n");
  printf("dlopen_demo: %s\n", ok ? "OK (major versions match)" : "FAILED: major version mismatch");
  dlclose(lib);
  return ok ? 0 : 1;
}
