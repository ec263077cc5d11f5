/*
 * A mock libnvidia-ml.so.1 for running Tangram's real-GPU code path on a
 * machine without GPUs. See docs/nvml.md ("The mock NVML library").
 *
 * It serves a device table in a flat text format (written by
 * hack/mock-nvml/cmd/mock-nvml-profile from a fake-GPU profile), keeps
 * compute modes across processes in its state directory, appends every
 * mutating call to <state>/calls.log, and delivers events that tests append
 * to <state>/events, keeps MIG modes in <state>/mig-mode and per-cgroup
 * memory limits in <state>/memory-limits (<state>/fail-memory-limits makes
 * setting them fail; the calls exist only in a library built as driver
 * r615 or later), and lists the processes tests write to <state>/processes.
 * Every other NVML entry point is a weak stub
 * (stubs.c, generated from go-nvml's nvml.h) answering
 * NVML_ERROR_NOT_SUPPORTED.
 *
 * Environment:
 *   TANGRAM_MOCK_NVML_DEVICES_FILE  flat device table (default: built in)
 *   TANGRAM_MOCK_NVML_STATE_DIR     state directory (default: built in)
 *   TANGRAM_MOCK_NVML_KERNEL_DMEM   1|0: whether the kernel has the dmem
 *                                   cgroup controller (default: the running
 *                                   kernel's)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include "nvml.h"

/* Written by the build from the profile it was given. */
extern const char tangram_mock_builtin_devices[];
extern const char tangram_mock_default_state_dir[];

#define MAX_GPUS 64
#define MAX_LINE 512

struct nvmlDevice_st {
    unsigned int index;
    unsigned int minor;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]; /* 00000000:1B:00.0 */
    unsigned int domain, bus, dev;
    unsigned long long memory;
    unsigned long long reserved; /* of memory, kept by the driver (see nvmlDeviceGetMemoryInfo) */
    int numa;             /* -1: NOT_SUPPORTED */
    int arch;             /* -1: NOT_SUPPORTED */
    int brand;            /* -1: NOT_SUPPORTED */
    int cc_major, cc_minor; /* cc_major -1: NOT_SUPPORTED */
    int nlinks;           /* 0: no NVLink (NOT_SUPPORTED) */
    char link_remote[NVML_NVLINK_MAX_LINKS][NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    int has_fabric;
    unsigned char fabric_cluster[NVML_GPU_FABRIC_UUID_LEN];
    unsigned int fabric_clique;
    /* MIG (see "MIG" below): set by mig/migprofile lines. */
    int mig_capable;
    int mig_current, mig_pending; /* the devices file's modes */
    unsigned int nprofiles;
    struct mig_profile *profiles;
    struct nvmlGpuInstance_st *gis; /* MIG_MAX_GI, by GPU instance ID */
    /* A MIG device handle (nvmlDeviceGetMigDeviceHandleByIndex). */
    int is_mig;
    struct nvmlDevice_st *parent;
    unsigned int gi_id, ci_id;
};

#define MIG_MAX_PROFILES 16
#define MIG_MEMORY_SLICES 8
#define MIG_COMPUTE_SLICES 7
#define MIG_MAX_GI 15 /* GPU instance IDs 0..14: one per node of the memory slice tree */
#define MIG_MAX_CI 7
#define MIG_MAX_DEVICES 7

struct mig_profile {
    unsigned int nvml_profile, id, compute, mem_slices, instances, sms, ce, dec, enc, jpeg, ofa;
    unsigned long long mem_mib;
    unsigned int nstarts, starts[MIG_MEMORY_SLICES];
    char name[64];
};

struct nvmlComputeInstance_st {
    int used;
    struct nvmlGpuInstance_st *gi;
    unsigned int id, profile, start, size;
};

struct nvmlGpuInstance_st {
    int used;
    struct nvmlDevice_st *dev;
    unsigned int id, profile_id, start, size;
    struct nvmlComputeInstance_st cis[MIG_MAX_CI];
};

struct nvmlEventSet_st {
    unsigned long long mask[MAX_GPUS];
    off_t offset; /* how far into the events file this set has read */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static struct nvmlDevice_st gpus[MAX_GPUS];
static unsigned int ngpus;
static char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
static int cuda_driver_version = -1;
static char state_dir[4096];

static void complain(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("tangram mock NVML: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int parse_bus_id(const char *s, unsigned int *domain, unsigned int *bus, unsigned int *dev) {
    unsigned int fn;
    return sscanf(s, "%x:%x:%x.%x", domain, bus, dev, &fn) == 4 ? 0 : -1;
}

static struct nvmlDevice_st *gpu_by_index(unsigned int index) {
    for (unsigned int i = 0; i < ngpus; i++)
        if (gpus[i].index == index)
            return &gpus[i];
    return NULL;
}

/* parse_line reads one line of the flat format; 0 on success. */
static int parse_line(char *line, int lineno) {
    char kind[32];
    int n = 0;
    if (line[0] == '#' || line[0] == '\0')
        return 0;
    if (sscanf(line, "%31s %n", kind, &n) != 1)
        return 0;
    char *rest = line + n;
    if (strcmp(kind, "tangram-mock-nvml") == 0) {
        if (strcmp(rest, "1") != 0) {
            complain("line %d: unknown format version %s (rebuild the library and the devices file together)", lineno, rest);
            return -1;
        }
        return 0;
    }
    if (strcmp(kind, "driver") == 0) {
        char v[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
        if (sscanf(rest, "%79s %d", v, &cuda_driver_version) != 2) {
            complain("line %d: want 'driver <version|-> <cuda version|-1>'", lineno);
            return -1;
        }
        snprintf(driver_version, sizeof driver_version, "%s", strcmp(v, "-") == 0 ? "" : v);
        return 0;
    }
    if (strcmp(kind, "gpu") == 0) {
        struct nvmlDevice_st g;
        memset(&g, 0, sizeof g);
        char bus[64], uuid[128];
        if (ngpus == MAX_GPUS) {
            complain("line %d: more than %d GPUs", lineno, MAX_GPUS);
            return -1;
        }
        /* The reserved memory column is optional: none reserved. */
        int fields = sscanf(rest, "%u %u %127s %63s %llu %d %d %d %d %d %llu", &g.index, &g.minor, uuid, bus, &g.memory,
                            &g.numa, &g.arch, &g.brand, &g.cc_major, &g.cc_minor, &g.reserved);
        if ((fields != 10 && fields != 11) ||
            parse_bus_id(bus, &g.domain, &g.bus, &g.dev) != 0 || strlen(uuid) >= sizeof g.uuid ||
            strlen(bus) >= sizeof g.bus_id) {
            complain("line %d: want 'gpu <index> <minor> <uuid> <bus id> <memory> <numa> <arch> <brand> <cc major> <cc minor> "
                     "[<reserved memory>]'", lineno);
            return -1;
        }
        if (g.reserved >= g.memory) {
            complain("line %d: reserved memory %llu must be below the card's memory %llu", lineno, g.reserved, g.memory);
            return -1;
        }
        strcpy(g.uuid, uuid);
        strcpy(g.bus_id, bus);
        gpus[ngpus++] = g;
        return 0;
    }
    if (strcmp(kind, "name") != 0 && strcmp(kind, "nvlink") != 0 && strcmp(kind, "fabric") != 0 &&
        strcmp(kind, "mig") != 0 && strcmp(kind, "migprofile") != 0) {
        complain("line %d: unknown line kind %s", lineno, kind);
        return -1;
    }
    unsigned int index;
    if (sscanf(rest, "%u %n", &index, &n) != 1) {
        complain("line %d: %s needs a GPU index", lineno, kind);
        return -1;
    }
    struct nvmlDevice_st *g = gpu_by_index(index);
    if (g == NULL) {
        complain("line %d: %s of GPU %u, which has no gpu line before it", lineno, kind, index);
        return -1;
    }
    rest += n;
    if (strcmp(kind, "name") == 0) {
        snprintf(g->name, sizeof g->name, "%s", rest);
        return 0;
    }
    if (strcmp(kind, "nvlink") == 0) {
        char remote[64];
        unsigned int d, b, v;
        if (g->nlinks == NVML_NVLINK_MAX_LINKS || sscanf(rest, "%63s", remote) != 1 ||
            parse_bus_id(remote, &d, &b, &v) != 0 || strlen(remote) >= sizeof g->link_remote[0]) {
            complain("line %d: want 'nvlink <index> <remote bus id>', at most %d per GPU", lineno, NVML_NVLINK_MAX_LINKS);
            return -1;
        }
        strcpy(g->link_remote[g->nlinks++], remote);
        return 0;
    }
    if (strcmp(kind, "fabric") == 0) {
        char hex[64];
        if (sscanf(rest, "%63s %u", hex, &g->fabric_clique) != 2 || strlen(hex) != 2 * NVML_GPU_FABRIC_UUID_LEN) {
            complain("line %d: want 'fabric <index> <32 hex digits> <clique id>'", lineno);
            return -1;
        }
        for (int i = 0; i < NVML_GPU_FABRIC_UUID_LEN; i++) {
            unsigned int byte;
            if (sscanf(hex + 2 * i, "%2x", &byte) != 1) {
                complain("line %d: fabric cluster UUID is not hex", lineno);
                return -1;
            }
            g->fabric_cluster[i] = (unsigned char)byte;
        }
        g->has_fabric = 1;
        return 0;
    }
    if (strcmp(kind, "mig") == 0) {
        if (sscanf(rest, "%d %d", &g->mig_current, &g->mig_pending) != 2) {
            complain("line %d: want 'mig <index> <current 0|1> <pending 0|1>'", lineno);
            return -1;
        }
        g->mig_capable = 1;
        return 0;
    }
    if (strcmp(kind, "migprofile") == 0) {
        struct mig_profile p;
        char starts[64];
        memset(&p, 0, sizeof p);
        if (!g->mig_capable || g->nprofiles == MIG_MAX_PROFILES ||
            sscanf(rest, "%u %u %u %u %u %u %u %u %u %u %u %llu %63s %63s", &p.nvml_profile, &p.id, &p.compute,
                   &p.mem_slices, &p.instances, &p.sms, &p.ce, &p.dec, &p.enc, &p.jpeg, &p.ofa, &p.mem_mib, starts,
                   p.name) != 14 ||
            p.nvml_profile >= NVML_GPU_INSTANCE_PROFILE_COUNT || p.mem_slices == 0 || p.mem_slices > MIG_MEMORY_SLICES ||
            p.compute == 0 || p.compute > MIG_COMPUTE_SLICES) {
            complain("line %d: want 'migprofile <index> <nvml profile> <id> <compute slices> <memory slices> <instances> "
                     "<SMs> <CEs> <decoders> <encoders> <JPEGs> <OFAs> <memory MiB> <starts> <name>' after the card's mig line, "
                     "at most %d per card", lineno, MIG_MAX_PROFILES);
            return -1;
        }
        for (char *tok = strtok(starts, ","); tok; tok = strtok(NULL, ",")) {
            unsigned int start = (unsigned int)atoi(tok);
            if (p.nstarts == MIG_MEMORY_SLICES || start + p.mem_slices > MIG_MEMORY_SLICES) {
                complain("line %d: placement %u+%u is outside the card's %d memory slices", lineno, start, p.mem_slices,
                         MIG_MEMORY_SLICES);
                return -1;
            }
            p.starts[p.nstarts++] = start;
        }
        if (g->profiles == NULL)
            g->profiles = calloc(MIG_MAX_PROFILES, sizeof *g->profiles);
        if (g->gis == NULL)
            g->gis = calloc(MIG_MAX_GI, sizeof *g->gis);
        if (g->profiles == NULL || g->gis == NULL) {
            complain("line %d: out of memory", lineno);
            return -1;
        }
        g->profiles[g->nprofiles++] = p;
        return 0;
    }
    complain("line %d: unknown line kind %s", lineno, kind);
    return -1;
}

static int parse_devices(const char *text) {
    char line[MAX_LINE];
    int lineno = 0;
    ngpus = 0;
    driver_version[0] = '\0';
    cuda_driver_version = -1;
    while (*text) {
        size_t len = strcspn(text, "\n");
        lineno++;
        if (len >= sizeof line) {
            complain("line %d is too long", lineno);
            return -1;
        }
        memcpy(line, text, len);
        line[len] = '\0';
        text += len + (text[len] == '\n');
        if (parse_line(line, lineno) != 0)
            return -1;
    }
    return 0;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0) {
            char *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

static int load(void) {
    const char *path = getenv("TANGRAM_MOCK_NVML_DEVICES_FILE");
    const char *dir = getenv("TANGRAM_MOCK_NVML_STATE_DIR");
    snprintf(state_dir, sizeof state_dir, "%s", dir && *dir ? dir : tangram_mock_default_state_dir);
    if (path == NULL || *path == '\0')
        return parse_devices(tangram_mock_builtin_devices);
    char *text = read_file(path);
    if (text == NULL) {
        complain("reading TANGRAM_MOCK_NVML_DEVICES_FILE=%s: %s", path, strerror(errno));
        return -1;
    }
    int rc = parse_devices(text);
    free(text);
    return rc;
}

/* ---- state directory: calls.log, events, compute modes ---- */

static int state_path(char *out, size_t size, const char *name) {
    return snprintf(out, size, "%s/%s", state_dir, name) < (int)size ? 0 : -1;
}

/* mkdir_p creates dir and its parents, like mkdir -p. */
static int mkdir_p(const char *dir) {
    char path[4200];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -1;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int ensure_state_dir(void) {
    char path[4200];
    if (mkdir_p(state_dir) != 0) {
        complain("creating state directory %s: %s", state_dir, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s/compute-mode", state_dir);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        complain("creating %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* log_call appends one line in a single write, so that lines of several
 * processes never interleave. A call that cannot be logged fails: a test
 * must never miss a mutation. */
static nvmlReturn_t log_call(const char *fmt, ...) {
    char path[4200], line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof line - 1)
        return NVML_ERROR_UNKNOWN;
    line[n++] = '\n';
    if (ensure_state_dir() != 0 || state_path(path, sizeof path, "calls.log") != 0)
        return NVML_ERROR_UNKNOWN;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        complain("opening %s: %s", path, strerror(errno));
        return NVML_ERROR_UNKNOWN;
    }
    ssize_t w = write(fd, line, n);
    close(fd);
    return w == n ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

static const char *compute_mode_name(nvmlComputeMode_t mode) {
    switch (mode) {
    case NVML_COMPUTEMODE_DEFAULT: return "DEFAULT";
    case NVML_COMPUTEMODE_EXCLUSIVE_THREAD: return "EXCLUSIVE_THREAD";
    case NVML_COMPUTEMODE_PROHIBITED: return "PROHIBITED";
    case NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: return "EXCLUSIVE_PROCESS";
    default: return NULL;
    }
}

static int check_driver_symbols(void);

/* ---- lifecycle ---- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (init_count == 0 && (load() != 0 || check_driver_symbols() != 0))
        ret = NVML_ERROR_UNKNOWN;
    if (ret == NVML_SUCCESS)
        init_count++;
    pthread_mutex_unlock(&lock);
    return ret;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (init_count == 0)
        ret = NVML_ERROR_UNINITIALIZED;
    else
        init_count--;
    pthread_mutex_unlock(&lock);
    return ret;
}

static int ready(void) {
    pthread_mutex_lock(&lock);
    int ok = init_count > 0;
    pthread_mutex_unlock(&lock);
    return ok;
}

/* device checks a handle: it must point into the table. */
static nvmlReturn_t device(nvmlDevice_t d) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (d.handle == NULL || d.handle < gpus || d.handle >= gpus + ngpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    default: return "Unknown Error";
    }
}

/* ---- system ---- */

static nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src) {
    if (dst == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (driver_version[0] == '\0')
        return NVML_ERROR_NOT_SUPPORTED;
    return copy_string(version, length, driver_version);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    return copy_string(version, length, "13.580.95.05-tangram-mock");
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (v == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (cuda_driver_version < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *v = cuda_driver_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return nvmlSystemGetCudaDriverVersion_v2(v); }

/* ---- device lookup ---- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = ngpus;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *d) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (d == NULL || gpu_by_index(index) == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    d->handle = gpu_by_index(index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *d) { return nvmlDeviceGetHandleByIndex_v2(index, d); }

static nvmlReturn_t mig_handle_by_uuid(const char *uuid, nvmlDevice_t *d);

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || d == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < ngpus; i++)
        if (strcmp(gpus[i].uuid, uuid) == 0) {
            d->handle = &gpus[i];
            return NVML_SUCCESS;
        }
    /* nvml.h: "uuid: The UUID of the target GPU or MIG instance", answered
     * with "the device handle or MIG device handle". */
    return mig_handle_by_uuid(uuid, d);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *busId, nvmlDevice_t *d) {
    unsigned int domain, bus, dev;
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (busId == NULL || d == NULL || parse_bus_id(busId, &domain, &bus, &dev) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < ngpus; i++)
        if (gpus[i].domain == domain && gpus[i].bus == bus && gpus[i].dev == dev) {
            d->handle = &gpus[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *busId, nvmlDevice_t *d) { return nvmlDeviceGetHandleByPciBusId_v2(busId, d); }

/* ---- device attributes ---- */

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS || index == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    *index = d.handle->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS || minor == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    *minor = d.handle->minor;
    return NVML_SUCCESS;
}

static nvmlReturn_t any_device(nvmlDevice_t d);

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    nvmlReturn_t ret = any_device(d);
    return ret != NVML_SUCCESS ? ret : copy_string(uuid, length, d.handle->uuid);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS)
        return ret;
    if (d.handle->name[0] == '\0')
        return NVML_ERROR_NOT_SUPPORTED;
    return copy_string(name, length, d.handle->name);
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, nvmlBrandType_t *brand) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS || brand == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    if (d.handle->brand < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *brand = (nvmlBrandType_t)d.handle->brand;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, nvmlDeviceArchitecture_t *arch) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS || arch == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    if (d.handle->arch < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *arch = (nvmlDeviceArchitecture_t)d.handle->arch;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS || major == NULL || minor == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    if (d.handle->cc_major < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *major = d.handle->cc_major;
    *minor = d.handle->cc_minor;
    return NVML_SUCCESS;
}

/* ---- memory: the driver keeps part of each card (the devices file's
 * reserved column, 0 when absent), as NVIDIA documents it (nvml.h of
 * go-nvml v0.13.4-1, nvmlMemory_t and nvmlMemory_v2_t; NVIDIA-FACTS.md,
 * "Round two", "Memory the driver keeps"):
 *   - v1 (nvmlMemory_t): total = free + used, used being "the sum of
 *     reserved and allocated" memory;
 *   - v2 (nvmlMemory_v2_t, version nvmlMemory_v2): total, reserved,
 *     free = total - reserved - used, used being the allocated memory.
 * (nvml.h's text of nvmlDeviceGetMemoryInfo_v2 says it "includes [reserved]
 * in the used memory amount", against its struct's fields; free is the
 * same either way. The mock follows the struct; a GPU run should record
 * what a real driver reports.) No process allocates anything here:
 * allocated memory is 0. A v2 call with another struct version is refused
 * as NVML refuses it. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS || m == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    m->total = d.handle->memory;
    m->used = d.handle->reserved;
    m->free = d.handle->memory - m->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS || m == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    m->total = d.handle->memory;
    m->reserved = d.handle->reserved;
    m->used = 0;
    m->free = d.handle->memory - m->reserved - m->used;
    return NVML_SUCCESS;
}

static void fill_pci(const char *bus_id, nvmlPciInfo_t *p) {
    unsigned int domain = 0, bus = 0, dev = 0;
    parse_bus_id(bus_id, &domain, &bus, &dev);
    memset(p, 0, sizeof *p);
    snprintf(p->busId, sizeof p->busId, "%s", bus_id);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%04X:%02X:%02X.0", domain & 0xffff, bus, dev);
    p->domain = domain;
    p->bus = bus;
    p->device = dev;
    p->pciDeviceId = 0x233010de; /* H100 SXM5; only the vendor half (NVIDIA) matters */
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS || p == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    fill_pci(d.handle->bus_id, p);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) { return nvmlDeviceGetPciInfo_v3(d, p); }
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) { return nvmlDeviceGetPciInfo_v3(d, p); }

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *node) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS || node == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    if (d.handle->numa < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned int)d.handle->numa;
    return NVML_SUCCESS;
}


/* NVLink: links 0..nlinks-1 are active; a card with none has no NVLink
 * (NOT_SUPPORTED), and a link past the last is INVALID_ARGUMENT, as on
 * real cards. */
static nvmlReturn_t link_of(nvmlDevice_t d, unsigned int link) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS)
        return ret;
    if (d.handle->nlinks == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (unsigned int)d.handle->nlinks)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, nvmlEnableState_t *active) {
    nvmlReturn_t ret = link_of(d, link);
    if (ret != NVML_SUCCESS || active == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    *active = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *p) {
    nvmlReturn_t ret = link_of(d, link);
    if (ret != NVML_SUCCESS || p == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    fill_pci(d.handle->link_remote[link], p);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *p) {
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(d, link, p);
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t d, nvmlGpuFabricInfo_t *info) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS || info == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    if (!d.handle->has_fabric)
        return NVML_ERROR_NOT_SUPPORTED;
    memcpy(info->clusterUuid, d.handle->fabric_cluster, sizeof info->clusterUuid);
    info->status = NVML_SUCCESS;
    info->cliqueId = d.handle->fabric_clique;
    info->state = NVML_GPU_FABRIC_STATE_COMPLETED;
    return NVML_SUCCESS;
}

/* ---- compute mode: kept in <state>/compute-mode/<uuid>, so that every
 * process loading the library (the plugin, a restarted plugin, nvidia-smi
 * stand-ins) sees the same mode, as with a real driver. ---- */

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, nvmlComputeMode_t *mode) {
    char path[4400];
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS || mode == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    *mode = NVML_COMPUTEMODE_DEFAULT;
    snprintf(path, sizeof path, "%s/compute-mode/%s", state_dir, d.handle->uuid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NVML_SUCCESS;
    int m;
    if (fscanf(f, "%d", &m) == 1 && compute_mode_name((nvmlComputeMode_t)m) != NULL)
        *mode = (nvmlComputeMode_t)m;
    fclose(f);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t d, nvmlComputeMode_t mode) {
    char path[4400], tmp[4500];
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS)
        return ret;
    const char *name = compute_mode_name(mode);
    if (name == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    ret = log_call("nvmlDeviceSetComputeMode index=%u uuid=%s mode=%s", d.handle->index, d.handle->uuid, name);
    if (ret != NVML_SUCCESS)
        return ret;
    snprintf(path, sizeof path, "%s/compute-mode/%s", state_dir, d.handle->uuid);
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        complain("writing %s: %s", tmp, strerror(errno));
        return NVML_ERROR_UNKNOWN;
    }
    fprintf(f, "%d\n", (int)mode);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        complain("saving compute mode in %s: %s", path, strerror(errno));
        return NVML_ERROR_UNKNOWN;
    }
    return NVML_SUCCESS;
}

/* ---- processes: tests write <state>/processes, a line per process they
 * "run" on a card:
 *   <card uuid> <pid> <used bytes, or - for NVML_VALUE_NOT_AVAILABLE> <GPU instance ID, or -> [mps]
 * A line ending in "mps" is an MPS client, listed by
 * nvmlDeviceGetMPSComputeRunningProcesses_v3; the others are compute
 * processes (nvmlDeviceGetComputeRunningProcesses_v3). Both follow NVML's
 * size protocol: *infoCount too small (0 to ask) answers
 * NVML_ERROR_INSUFFICIENT_SIZE with the count needed, or NVML_SUCCESS when
 * there is none; infos may be NULL only then. A card in MIG mode lists
 * every instance's processes with their GPU instance IDs, as NVML does for
 * a privileged caller of the card's handle; a MIG device handle is refused
 * (INVALID_ARGUMENT), which NVML would serve. A GPU instance on a card not
 * in MIG mode is served as written: the test owns the file. More than
 * MAX_PROCESSES on a card answers NVML_ERROR_UNKNOWN, never a short list.
 * ---- */

#define MAX_PROCESSES 256

static nvmlReturn_t list_processes(nvmlDevice_t d, unsigned int *infoCount, nvmlProcessInfo_t *infos, int mps) {
    char path[4200], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], used[32], gi[16], line[MAX_LINE];
    nvmlProcessInfo_t found[MAX_PROCESSES];
    unsigned int n = 0, pid;
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS)
        return ret;
    if (infoCount == NULL || (infos == NULL && *infoCount != 0))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (state_path(path, sizeof path, "processes") != 0)
        return NVML_ERROR_UNKNOWN;
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        char kind[8] = "";
        int fields = sscanf(line, "%95s %u %31s %15s %7s", uuid, &pid, used, gi, kind);
        if (fields < 4 || strcmp(uuid, d.handle->uuid) != 0 || (strcmp(kind, "mps") == 0) != mps)
            continue;
        if (n == MAX_PROCESSES) {
            /* A real driver lists them all: never a silent short list. */
            complain("%s lists more than %d processes on %s", path, MAX_PROCESSES, d.handle->uuid);
            fclose(f);
            return NVML_ERROR_UNKNOWN;
        }
        nvmlProcessInfo_t *p = &found[n++];
        p->pid = pid;
        p->usedGpuMemory = strcmp(used, "-") == 0 ? (unsigned long long)NVML_VALUE_NOT_AVAILABLE : strtoull(used, NULL, 10);
        p->gpuInstanceId = p->computeInstanceId = 0xFFFFFFFFu;
        if (strcmp(gi, "-") != 0) {
            p->gpuInstanceId = (unsigned int)strtoul(gi, NULL, 10);
            p->computeInstanceId = 0;
        }
    }
    if (f != NULL)
        fclose(f);
    if (*infoCount < n) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0)
        memcpy(infos, found, n * sizeof found[0]);
    *infoCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *infoCount, nvmlProcessInfo_t *infos) {
    return list_processes(d, infoCount, infos, 0);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *infoCount, nvmlProcessInfo_t *infos) {
    return list_processes(d, infoCount, infos, 1);
}

/* ---- events: tests append lines to <state>/events:
 *   xid <index> <xid>     an XID critical error on the card
 *   gpu-lost <index>      the card fell off the bus: the wait answers
 *                         NVML_ERROR_GPU_IS_LOST
 * A set sees only lines appended after it was created. ---- */

#define SUPPORTED_EVENTS (nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError)

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS || types == NULL)
        return ret != NVML_SUCCESS ? ret : NVML_ERROR_INVALID_ARGUMENT;
    *types = SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

static off_t events_size(void) {
    char path[4200];
    struct stat st;
    if (state_path(path, sizeof path, "events") != 0 || stat(path, &st) != 0)
        return 0;
    return st.st_size;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlEventSet_st *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    s->offset = events_size();
    set->handle = s;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS)
        return ret;
    if (set.handle == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~(unsigned long long)SUPPORTED_EVENTS)
        return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&lock);
    set.handle->mask[d.handle - gpus] |= types;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

/* next_event reads complete lines after the set's offset and returns the
 * first one for a registered card: SUCCESS (data filled), GPU_IS_LOST, or
 * TIMEOUT when there is none yet. */
static nvmlReturn_t next_event(nvmlEventSet_t set, nvmlEventData_t *data) {
    char path[4200], line[MAX_LINE];
    if (state_path(path, sizeof path, "events") != 0)
        return NVML_ERROR_UNKNOWN;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NVML_ERROR_TIMEOUT;
    nvmlReturn_t ret = NVML_ERROR_TIMEOUT;
    if (fseeko(f, set.handle->offset, SEEK_SET) != 0) {
        fclose(f);
        return NVML_ERROR_TIMEOUT;
    }
    while (ret == NVML_ERROR_TIMEOUT && fgets(line, sizeof line, f) != NULL) {
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n')
            break; /* a line still being written */
        set.handle->offset += len;
        char kind[16];
        unsigned int index;
        unsigned long long xid = 0;
        int n = sscanf(line, "%15s %u %llu", kind, &index, &xid);
        struct nvmlDevice_st *g = n >= 2 ? gpu_by_index(index) : NULL;
        if (g == NULL) {
            complain("events: ignoring line %.*s", (int)len - 1, line);
            continue;
        }
        unsigned long long mask = set.handle->mask[g - gpus];
        if (strcmp(kind, "xid") == 0 && n == 3 && (mask & nvmlEventTypeXidCriticalError)) {
            memset(data, 0, sizeof *data);
            data->device.handle = g;
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = xid;
            data->gpuInstanceId = 0xFFFFFFFF;
            data->computeInstanceId = 0xFFFFFFFF;
            ret = NVML_SUCCESS;
        } else if (strcmp(kind, "gpu-lost") == 0 && mask != 0) {
            memset(data, 0, sizeof *data);
            data->device.handle = g;
            ret = NVML_ERROR_GPU_IS_LOST;
        } else if (strcmp(kind, "xid") != 0 && strcmp(kind, "gpu-lost") != 0) {
            complain("events: ignoring unknown event %s", kind);
        }
    }
    fclose(f);
    return ret;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (set.handle == NULL || data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec start, now, pause = {0, 10 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        pthread_mutex_lock(&lock);
        nvmlReturn_t ret = next_event(set, data);
        pthread_mutex_unlock(&lock);
        if (ret != NVML_ERROR_TIMEOUT)
            return ret;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long elapsed = (now.tv_sec - start.tv_sec) * 1000LL + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (elapsed >= timeoutms)
            return NVML_ERROR_TIMEOUT;
        nanosleep(&pause, NULL);
    }
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (set.handle == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    free(set.handle);
    return NVML_SUCCESS;
}

#include "mig.inc" /* MIG: mode, GPU and compute instances, MIG devices */

/* The driver release the library was built as decides whether it has the
 * per-cgroup memory limit calls (r615 and later; NVIDIA-FACTS.md): before,
 * the symbols do not exist at all, as in NVIDIA's own library. The build
 * defines TANGRAM_MOCK_MEMORY_LIMITS to 0 or 1 from the built-in driver
 * version; a devices file naming a driver of the other kind fails Init. */
#ifndef TANGRAM_MOCK_MEMORY_LIMITS
#error "build with -DTANGRAM_MOCK_MEMORY_LIMITS=0|1 (hack/mock-nvml/build.sh)"
#endif

static int check_driver_symbols(void) {
    int major = atoi(driver_version);
    if (driver_version[0] == '\0')
        return 0;
    if ((major >= 615) != (TANGRAM_MOCK_MEMORY_LIMITS != 0)) {
        complain("the devices file names driver %s, but this library was built as a driver %s r615 (%s nvmlDeviceSetMemoryLimits_v1): "
                 "build it with TANGRAM_MOCK_NVML_DRIVER_VERSION=%s", driver_version,
                 TANGRAM_MOCK_MEMORY_LIMITS ? "from" : "before", TANGRAM_MOCK_MEMORY_LIMITS ? "with" : "without", driver_version);
        return -1;
    }
    return 0;
}

#if TANGRAM_MOCK_MEMORY_LIMITS
/* ---- per-cgroup memory limits (driver 615+), as NVIDIA documents them
 * (nvml.h of go-nvml v0.13.4-1; NVIDIA-FACTS.md "Per-cgroup GPU memory
 * limits"):
 *   - root only: NO_PERMISSION otherwise;
 *   - MIG mode on: NOT_SUPPORTED;
 *   - soft above hard, or a limit above the card's memory: INVALID_ARGUMENT;
 *   - a cgroup path that cannot be opened: OPERATING_SYSTEM;
 *   - on a kernel with the dmem controller, a cgroup without dmem.* files
 *     (dmem not enabled in its parent's cgroup.subtree_control): NOT_FOUND.
 *     Whether the kernel has dmem: TANGRAM_MOCK_NVML_KERNEL_DMEM=1|0, else
 *     the running kernel's (dmem in /proc/cgroups or the cgroup v2 root's
 *     cgroup.controllers); without it the driver's own backend takes any
 *     existing cgroup directory (unconfirmed: NVIDIA documents no more).
 * Every set that passes the argument checks is logged to calls.log with
 * the cgroup path, both limits, the wall-clock time and its result, and a
 * successful one is kept in <state>/memory-limits, so that a getter in
 * another process reads it back (nvidia-smi memory-limits --get). A test
 * makes every set fail by writing <state>/fail-memory-limits; its content
 * is the nvmlReturn_t to answer (empty: NVML_ERROR_UNKNOWN). ---- */

static nvmlReturn_t memory_limit_failure(void) {
    char path[4200];
    if (state_path(path, sizeof path, "fail-memory-limits") != 0)
        return NVML_ERROR_UNKNOWN;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NVML_SUCCESS;
    int code;
    nvmlReturn_t ret = fscanf(f, "%d", &code) == 1 && code != 0 ? (nvmlReturn_t)code : NVML_ERROR_UNKNOWN;
    fclose(f);
    return ret;
}

static int file_lists_word(const char *path, const char *word) {
    char buf[256];
    int found = 0;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    while (!found && fscanf(f, "%255s", buf) == 1)
        found = strcmp(buf, word) == 0;
    fclose(f);
    return found;
}

static int kernel_has_dmem(void) {
    const char *knob = getenv("TANGRAM_MOCK_NVML_KERNEL_DMEM");
    if (knob != NULL && *knob != '\0')
        return strcmp(knob, "1") == 0;
    return file_lists_word("/proc/cgroups", "dmem") || file_lists_word("/sys/fs/cgroup/cgroup.controllers", "dmem");
}

/* cgroup_answer is what the driver says of the cgroup at path. */
static nvmlReturn_t cgroup_answer(const char *path) {
    char file[4200];
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return NVML_ERROR_OPERATING_SYSTEM;
    if (!kernel_has_dmem())
        return NVML_SUCCESS;
    if (snprintf(file, sizeof file, "%s/dmem.max", path) >= (int)sizeof file)
        return NVML_ERROR_INVALID_ARGUMENT;
    return stat(file, &st) == 0 ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t d, nvmlSetMemoryLimits_v1_t *limits) {
    char path[4200], stamp[64];
    struct timespec now;
    struct tm tm;
    unsigned int mig;
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS)
        return ret;
    if (limits == NULL || limits->nameSpace == NULL || limits->nameSpace[0] != '/' ||
        strpbrk(limits->nameSpace, " \t\n") != NULL || limits->softLimit > limits->hardLimit ||
        (limits->hardLimit > d.handle->memory && limits->hardLimit != NVML_DEVICE_MEMORY_LIMIT_MAX))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (geteuid() != 0)
        ret = NVML_ERROR_NO_PERMISSION;
    else if (mig_mode(d.handle, &mig) == NVML_SUCCESS && mig == NVML_DEVICE_MIG_ENABLE)
        ret = NVML_ERROR_NOT_SUPPORTED;
    else
        ret = cgroup_answer(limits->nameSpace);
    if (ret == NVML_SUCCESS)
        ret = memory_limit_failure();
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    size_t n = strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(stamp + n, sizeof stamp - n, ".%09ldZ", now.tv_nsec);
    nvmlReturn_t logged = log_call("nvmlDeviceSetMemoryLimits_v1 index=%u uuid=%s namespace=%s soft=%llu hard=%llu time=%s result=%d",
                                   d.handle->index, d.handle->uuid, limits->nameSpace, limits->softLimit,
                                   limits->hardLimit, stamp, (int)ret);
    if (ret != NVML_SUCCESS)
        return ret;
    if (logged != NVML_SUCCESS)
        return logged;
    if (state_path(path, sizeof path, "memory-limits") != 0)
        return NVML_ERROR_UNKNOWN;
    char line[4400];
    int len = snprintf(line, sizeof line, "%s %s %llu %llu\n", d.handle->uuid, limits->nameSpace,
                       limits->softLimit, limits->hardLimit);
    if (len < 0 || len >= (int)sizeof line)
        return NVML_ERROR_INVALID_ARGUMENT;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        complain("opening %s: %s", path, strerror(errno));
        return NVML_ERROR_UNKNOWN;
    }
    ssize_t w = write(fd, line, len);
    close(fd);
    return w == len ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

/* The last limits set for this card and cgroup; NOT_FOUND if none,
 * OPERATING_SYSTEM if the cgroup cannot be opened, NOT_SUPPORTED in MIG
 * mode. */
nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t d, nvmlGetMemoryLimits_v1_t *limits) {
    char path[4200], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], ns[4096];
    unsigned long long soft, hard;
    struct stat st;
    unsigned int mig;
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS)
        return ret;
    if (limits == NULL || limits->nameSpace == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (mig_mode(d.handle, &mig) == NVML_SUCCESS && mig == NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_NOT_SUPPORTED;
    if (stat(limits->nameSpace, &st) != 0 || !S_ISDIR(st.st_mode))
        return NVML_ERROR_OPERATING_SYSTEM;
    if (state_path(path, sizeof path, "memory-limits") != 0)
        return NVML_ERROR_UNKNOWN;
    ret = NVML_ERROR_NOT_FOUND;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return ret;
    while (fscanf(f, "%95s %4095s %llu %llu", uuid, ns, &soft, &hard) == 4) {
        if (strcmp(uuid, d.handle->uuid) == 0 && strcmp(ns, limits->nameSpace) == 0) {
            limits->softLimit = soft;
            limits->hardLimit = hard;
            limits->currentUsed = 0;
            ret = NVML_SUCCESS;
        }
    }
    fclose(f);
    return ret;
}
#endif

/* ---- SM utilisation: tests write <state>/utilization, a line per process:
 *   <card uuid> <pid> <SM %> <memory %>
 * Its processes keep those rates while the file stays: each call returns
 * one sample per process with a non-zero rate (NVML samples only those),
 * stamped with the time of the call in microseconds (NVML's CPU
 * timestamps), so a sample is always newer than the lastSeenTimeStamp a
 * caller took from the previous one. nvmlDeviceGetProcessUtilization as
 * NVML's reference describes it: utilization NULL asks the count of
 * samples (NVML_ERROR_INSUFFICIENT_SIZE with it); no sample (no process
 * with a non-zero rate) answers NVML_ERROR_NOT_FOUND; a count too small
 * answers NVML_ERROR_INSUFFICIENT_SIZE; otherwise the samples, the count
 * set to those written. A card in MIG mode answers NVML_ERROR_NOT_SUPPORTED
 * (NVML reports no utilisation in MIG mode), and so does every card while
 * the file is absent: the test decides whether the cards support it.
 * ---- */

#define MAX_SAMPLES 256

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *utilization, unsigned int *processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) {
    char path[4200], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], line[MAX_LINE];
    nvmlProcessUtilizationSample_t found[MAX_SAMPLES];
    unsigned int n = 0, pid, sm, mem;
    nvmlReturn_t ret = device(d);
    if (ret != NVML_SUCCESS)
        return ret;
    if (processSamplesCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (mig_enabled(d.handle))
        return NVML_ERROR_NOT_SUPPORTED;
    if (state_path(path, sizeof path, "utilization") != 0)
        return NVML_ERROR_UNKNOWN;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    unsigned long long stamp = (unsigned long long)now.tv_sec * 1000000ull + (unsigned long long)now.tv_nsec / 1000ull;
    while (stamp > lastSeenTimeStamp && fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "%95s %u %u %u", uuid, &pid, &sm, &mem) != 4 || strcmp(uuid, d.handle->uuid) != 0 || (sm == 0 && mem == 0))
            continue;
        if (n == MAX_SAMPLES) {
            complain("%s holds more than %d samples of %s", path, MAX_SAMPLES, d.handle->uuid);
            fclose(f);
            return NVML_ERROR_UNKNOWN;
        }
        nvmlProcessUtilizationSample_t *s = &found[n++];
        memset(s, 0, sizeof *s);
        s->pid = pid;
        s->timeStamp = stamp;
        s->smUtil = sm;
        s->memUtil = mem;
    }
    fclose(f);
    if (n == 0)
        return NVML_ERROR_NOT_FOUND;
    if (utilization == NULL || *processSamplesCount < n) {
        *processSamplesCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(utilization, found, n * sizeof found[0]);
    *processSamplesCount = n;
    return NVML_SUCCESS;
}
