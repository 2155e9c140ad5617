/*
 * libnvidia-ml.so.1 of the nvhook mock machine: a fake NVML that answers from a profile.
 *
 * The data file is etc/nvhook-mock/nvml.txt of the mock root, found from this library's own
 * location (dladdr: <root>/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1), or named by
 * NVHOOK_MOCK_NVML_DATA. nvhook.mock.nvmldata writes it: tab-separated records, one a line:
 *
 *   loaded  0|1
 *   driver  <driver version>
 *   nvml    <NVML version>
 *   cuda    <CUDA driver version as an int, 12040>
 *   gpu     minor uuid bus_legacy bus domain bus device pci_device_id subsystem_id arch
 *           cc_major cc_minor mem_total reserved used brand mig_capable mig_mode max_mig
 *           multiprocessors name                       (GPUs in NVML index order)
 *   mig     gpu_index uuid gi ci memory gi_slices ci_slices multiprocessors copy_engines
 *           decoders encoders jpegs ofas name         (MIG devices in index order)
 *
 * Semantics follow the NVML reference: every call but nvmlErrorString needs nvmlInit first
 * (NVML_ERROR_UNINITIALIZED), init is reference counted, NULL outputs and unknown handles are
 * NVML_ERROR_INVALID_ARGUMENT, short buffers NVML_ERROR_INSUFFICIENT_SIZE, an unknown UUID or
 * bus id NVML_ERROR_NOT_FOUND, MIG calls on a GPU that cannot do MIG NVML_ERROR_NOT_SUPPORTED,
 * an empty MIG slot NVML_ERROR_NOT_FOUND. A MIG device handle answers name, UUID, memory,
 * attributes, instance ids and its parent; PCI info, architecture, compute capability and brand
 * are its parent's; minor number and index are not supported on it.
 *
 * Fault injection: NVHOOK_MOCK_NVML_FAIL="nvmlDeviceGetUUID:999,nvmlInitWithFlags:9" makes the
 * named entry points return the given codes (checked on every call, before anything else).
 *
 * Why one file of ~700 lines: it is one shared object, compiled as one translation unit with
 * every helper static so that only NVML's entry points are exported; its parts (fault
 * injection, the data file, init and system calls, enumeration, device queries, MIG) are
 * marked below and share the device table. Splitting it would add headers and link steps to
 * the build units (nvhook.mock.userspace) for no reader's gain.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 64
#define MAX_MIGS 512
#define STR 128

struct device {
    int is_mig;
    unsigned index;          /* NVML index (GPU) or MIG index under the parent */
    struct device *parent;   /* MIG: the GPU */
    char uuid[STR];
    char name[STR];
    unsigned long long mem_total, mem_reserved, mem_used;
    unsigned multiprocessors;
    /* GPU only */
    unsigned minor;
    char bus_legacy[STR], bus[STR];
    unsigned domain, pci_bus, pci_device, pci_device_id, pci_subsystem_id;
    unsigned arch, cc_major, cc_minor, brand, mig_capable, mig_mode, max_mig;
    struct device *migs[MAX_MIGS];
    unsigned nmigs;
    /* MIG only */
    unsigned gi, ci, gi_slices, ci_slices, copy_engines, decoders, encoders, jpegs, ofas;
};

typedef struct device *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 ((unsigned)(sizeof(nvmlMemory_v2_t) | (2 << 24)))

typedef struct {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount,
        computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int refcount;
static int loaded;
static char driver_version[STR], nvml_version[STR];
static int cuda_version;
static struct device gpus[MAX_GPUS];
static unsigned ngpus;
static struct device migs[MAX_MIGS];
static unsigned nmigs;

/* ---- fault injection ---------------------------------------------------------------------- */

static nvmlReturn_t injected(const char *fn)
{
    const char *spec = getenv("NVHOOK_MOCK_NVML_FAIL");
    size_t n = strlen(fn);
    while (spec && *spec) {
        const char *end = strchr(spec, ',');
        size_t len = end ? (size_t)(end - spec) : strlen(spec);
        if (len > n && strncmp(spec, fn, n) == 0 && spec[n] == ':')
            return (nvmlReturn_t)strtol(spec + n + 1, NULL, 10);
        spec = end ? end + 1 : NULL;
    }
    return NVML_SUCCESS;
}

#define ENTER(fn)                                                                              \
    do {                                                                                       \
        nvmlReturn_t injected_ = injected(fn);                                                 \
        if (injected_ != NVML_SUCCESS)                                                         \
            return injected_;                                                                  \
        if (refcount == 0)                                                                     \
            return NVML_ERROR_UNINITIALIZED;                                                   \
    } while (0)

/* ---- the data file ------------------------------------------------------------------------ */

static int data_path(char *out, size_t size)
{
    const char *env = getenv("NVHOOK_MOCK_NVML_DATA");
    Dl_info info;
    if (env && *env)
        return snprintf(out, size, "%s", env) < (int)size ? 0 : -1;
    if (!dladdr((void *)&data_path, &info) || !info.dli_fname)
        return -1;
    const char *slash = strrchr(info.dli_fname, '/');
    int dirlen = slash ? (int)(slash - info.dli_fname) : 1;
    const char *dir = slash ? info.dli_fname : ".";
    /* <root>/usr/lib/x86_64-linux-gnu → <root>/etc/nvhook-mock/nvml.txt */
    return snprintf(out, size, "%.*s/../../../etc/nvhook-mock/nvml.txt", dirlen, dir) < (int)size
               ? 0
               : -1;
}

static int split(char *line, char **fields, int max)
{
    int n = 0;
    char *save = NULL;
    line[strcspn(line, "\n")] = '\0';
    for (char *f = strtok_r(line, "\t", &save); f && n < max; f = strtok_r(NULL, "\t", &save))
        fields[n++] = f;
    return n;
}

#define U(s) ((unsigned)strtoul((s), NULL, 0))
#define ULL(s) strtoull((s), NULL, 0)
#define COPY(dst, src) snprintf((dst), sizeof(dst), "%s", (src))

static int load(void)
{
    char path[4096], line[1024];
    char *f[32];
    FILE *fp;

    ngpus = nmigs = 0;
    loaded = 0;
    if (data_path(path, sizeof(path)) < 0 || !(fp = fopen(path, "re")))
        return -1;
    while (fgets(line, sizeof(line), fp)) {
        if (line[0] == '#')
            continue;
        int n = split(line, f, 32);
        if (n == 2 && !strcmp(f[0], "loaded"))
            loaded = atoi(f[1]);
        else if (n == 2 && !strcmp(f[0], "driver"))
            COPY(driver_version, f[1]);
        else if (n == 2 && !strcmp(f[0], "nvml"))
            COPY(nvml_version, f[1]);
        else if (n == 2 && !strcmp(f[0], "cuda"))
            cuda_version = atoi(f[1]);
        else if (n == 22 && !strcmp(f[0], "gpu") && ngpus < MAX_GPUS) {
            struct device *d = &gpus[ngpus];
            memset(d, 0, sizeof(*d));
            d->index = ngpus++;
            d->minor = U(f[1]);
            COPY(d->uuid, f[2]);
            COPY(d->bus_legacy, f[3]);
            COPY(d->bus, f[4]);
            d->domain = U(f[5]);
            d->pci_bus = U(f[6]);
            d->pci_device = U(f[7]);
            d->pci_device_id = U(f[8]);
            d->pci_subsystem_id = U(f[9]);
            d->arch = U(f[10]);
            d->cc_major = U(f[11]);
            d->cc_minor = U(f[12]);
            d->mem_total = ULL(f[13]);
            d->mem_reserved = ULL(f[14]);
            d->mem_used = ULL(f[15]);
            d->brand = U(f[16]);
            d->mig_capable = U(f[17]);
            d->mig_mode = U(f[18]);
            d->max_mig = U(f[19]);
            d->multiprocessors = U(f[20]);
            COPY(d->name, f[21]);
        } else if (n == 15 && !strcmp(f[0], "mig") && nmigs < MAX_MIGS && U(f[1]) < ngpus) {
            struct device *m = &migs[nmigs++];
            struct device *g = &gpus[U(f[1])];
            memset(m, 0, sizeof(*m));
            m->is_mig = 1;
            m->parent = g;
            m->index = g->nmigs;
            g->migs[g->nmigs++] = m;
            COPY(m->uuid, f[2]);
            m->gi = U(f[3]);
            m->ci = U(f[4]);
            m->mem_total = ULL(f[5]);
            m->gi_slices = U(f[6]);
            m->ci_slices = U(f[7]);
            m->multiprocessors = U(f[8]);
            m->copy_engines = U(f[9]);
            m->decoders = U(f[10]);
            m->encoders = U(f[11]);
            m->jpegs = U(f[12]);
            m->ofas = U(f[13]);
            snprintf(m->name, sizeof(m->name), "%s MIG %s", g->name, f[14]);
        }
    }
    fclose(fp);
    return 0;
}

/* A handle is valid only if it points at one of our devices. */
static int valid(nvmlDevice_t d)
{
    return (d >= gpus && d < gpus + ngpus) || (d >= migs && d < migs + nmigs);
}

static struct device *gpu_of(nvmlDevice_t d)
{
    return d->is_mig ? d->parent : d;
}

static nvmlReturn_t put_string(char *buf, unsigned length, const char *value)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* ---- init, errors, system ----------------------------------------------------------------- */

API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    nvmlReturn_t rc = injected("nvmlInitWithFlags");
    (void)flags;
    if (rc != NVML_SUCCESS)
        return rc;
    pthread_mutex_lock(&lock);
    if (refcount == 0 && (load() < 0 || !loaded))
        rc = NVML_ERROR_DRIVER_NOT_LOADED;
    else
        refcount++;
    pthread_mutex_unlock(&lock);
    return rc;
}

API nvmlReturn_t nvmlInit_v2(void)
{
    nvmlReturn_t rc = injected("nvmlInit_v2");
    return rc != NVML_SUCCESS ? rc : nvmlInitWithFlags(0);
}

API nvmlReturn_t nvmlInit(void)
{
    nvmlReturn_t rc = injected("nvmlInit");
    return rc != NVML_SUCCESS ? rc : nvmlInitWithFlags(0);
}

API nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t rc = injected("nvmlShutdown");
    if (rc != NVML_SUCCESS)
        return rc;
    pthread_mutex_lock(&lock);
    if (refcount == 0)
        rc = NVML_ERROR_UNINITIALIZED;
    else
        refcount--;
    pthread_mutex_unlock(&lock);
    return rc;
}

API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt request issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 25: return "The provided version is invalid/unsupported";
    case 28: return "The GPU was not found";
    default: return "Unknown Error";
    }
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    ENTER("nvmlSystemGetDriverVersion");
    return put_string(version, length, driver_version);
}

API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    ENTER("nvmlSystemGetNVMLVersion");
    return put_string(version, length, nvml_version);
}

static nvmlReturn_t cuda_driver_version(int *version)
{
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_version;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    ENTER("nvmlSystemGetCudaDriverVersion");
    return cuda_driver_version(version);
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    ENTER("nvmlSystemGetCudaDriverVersion_v2");
    return cuda_driver_version(version);
}

/* ---- enumeration -------------------------------------------------------------------------- */

static nvmlReturn_t count(unsigned int *n)
{
    if (!n)
        return NVML_ERROR_INVALID_ARGUMENT;
    *n = ngpus;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
    ENTER("nvmlDeviceGetCount_v2");
    return count(n);
}

API nvmlReturn_t nvmlDeviceGetCount(unsigned int *n)
{
    ENTER("nvmlDeviceGetCount");
    return count(n);
}

static nvmlReturn_t by_index(unsigned int index, nvmlDevice_t *device)
{
    if (!device || index >= ngpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    ENTER("nvmlDeviceGetHandleByIndex_v2");
    return by_index(index, device);
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    ENTER("nvmlDeviceGetHandleByIndex");
    return by_index(index, device);
}

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    ENTER("nvmlDeviceGetHandleByUUID");
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < ngpus; i++)
        if (!strcmp(gpus[i].uuid, uuid))
            return *device = &gpus[i], NVML_SUCCESS;
    for (unsigned i = 0; i < nmigs; i++)
        if (!strcmp(migs[i].uuid, uuid))
            return *device = &migs[i], NVML_SUCCESS;
    return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t by_bus_id(const char *bus_id, nvmlDevice_t *device)
{
    unsigned domain = 0, bus, dev, fn = 0;
    if (!bus_id || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) {
        domain = 0;
        if (sscanf(bus_id, "%x:%x.%x", &bus, &dev, &fn) != 3)
            return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned i = 0; i < ngpus; i++)
        if (gpus[i].domain == domain && gpus[i].pci_bus == bus && gpus[i].pci_device == dev &&
            fn == 0)
            return *device = &gpus[i], NVML_SUCCESS;
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device)
{
    ENTER("nvmlDeviceGetHandleByPciBusId_v2");
    return by_bus_id(bus_id, device);
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus_id, nvmlDevice_t *device)
{
    ENTER("nvmlDeviceGetHandleByPciBusId");
    return by_bus_id(bus_id, device);
}

/* ---- device queries ----------------------------------------------------------------------- */

#define CHECK_DEVICE(d, out)                                                                   \
    do {                                                                                       \
        if (!valid(d) || !(out))                                                               \
            return NVML_ERROR_INVALID_ARGUMENT;                                                \
    } while (0)

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    ENTER("nvmlDeviceGetName");
    CHECK_DEVICE(device, name);
    return put_string(name, length, device->name);
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    ENTER("nvmlDeviceGetUUID");
    CHECK_DEVICE(device, uuid);
    return put_string(uuid, length, device->uuid);
}

API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
    ENTER("nvmlDeviceGetMinorNumber");
    CHECK_DEVICE(device, minor);
    if (device->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *minor = device->minor;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    ENTER("nvmlDeviceGetIndex");
    CHECK_DEVICE(device, index);
    if (device->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *index = device->index;
    return NVML_SUCCESS;
}

static nvmlReturn_t pci_info(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    CHECK_DEVICE(device, pci);
    struct device *g = gpu_of(device);
    memset(pci, 0, sizeof(*pci));
    COPY(pci->busIdLegacy, g->bus_legacy);
    COPY(pci->busId, g->bus);
    pci->domain = g->domain;
    pci->bus = g->pci_bus;
    pci->device = g->pci_device;
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = g->pci_subsystem_id;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    ENTER("nvmlDeviceGetPciInfo_v3");
    return pci_info(device, pci);
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    ENTER("nvmlDeviceGetPciInfo_v2");
    return pci_info(device, pci);
}

API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    ENTER("nvmlDeviceGetPciInfo");
    return pci_info(device, pci);
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    ENTER("nvmlDeviceGetMemoryInfo");
    CHECK_DEVICE(device, memory);
    memory->total = device->mem_total;
    memory->used = device->mem_reserved + device->mem_used;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    ENTER("nvmlDeviceGetMemoryInfo_v2");
    CHECK_DEVICE(device, memory);
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = device->mem_total;
    memory->reserved = device->mem_reserved;
    memory->used = device->mem_used;
    memory->free = memory->total - memory->reserved - memory->used;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch)
{
    ENTER("nvmlDeviceGetArchitecture");
    CHECK_DEVICE(device, arch);
    *arch = gpu_of(device)->arch;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    ENTER("nvmlDeviceGetCudaComputeCapability");
    CHECK_DEVICE(device, major);
    if (!minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = (int)gpu_of(device)->cc_major;
    *minor = (int)gpu_of(device)->cc_minor;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, unsigned int *brand)
{
    ENTER("nvmlDeviceGetBrand");
    CHECK_DEVICE(device, brand);
    *brand = gpu_of(device)->brand;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attrs)
{
    ENTER("nvmlDeviceGetAttributes_v2");
    CHECK_DEVICE(device, attrs);
    memset(attrs, 0, sizeof(*attrs));
    attrs->multiprocessorCount = device->multiprocessors;
    attrs->memorySizeMB = device->mem_total >> 20;
    if (device->is_mig) {
        attrs->sharedCopyEngineCount = device->copy_engines;
        attrs->sharedDecoderCount = device->decoders;
        attrs->sharedEncoderCount = device->encoders;
        attrs->sharedJpegCount = device->jpegs;
        attrs->sharedOfaCount = device->ofas;
        attrs->gpuInstanceSliceCount = device->gi_slices;
        attrs->computeInstanceSliceCount = device->ci_slices;
    }
    return NVML_SUCCESS;
}

/* ---- MIG ---------------------------------------------------------------------------------- */

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
                                      unsigned int *pending)
{
    ENTER("nvmlDeviceGetMigMode");
    CHECK_DEVICE(device, current);
    if (!pending || device->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = device->mig_mode;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *n)
{
    ENTER("nvmlDeviceGetMaxMigDeviceCount");
    CHECK_DEVICE(device, n);
    if (device->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    *n = device->mig_mode ? device->max_mig : 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                     nvmlDevice_t *mig)
{
    ENTER("nvmlDeviceGetMigDeviceHandleByIndex");
    CHECK_DEVICE(device, mig);
    if (device->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!device->mig_mode || index >= device->max_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < device->nmigs; i++)
        if (device->migs[i]->index == index)
            return *mig = device->migs[i], NVML_SUCCESS;
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig,
                                                              nvmlDevice_t *device)
{
    ENTER("nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    CHECK_DEVICE(mig, device);
    if (!mig->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = mig->parent;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig)
{
    ENTER("nvmlDeviceIsMigDeviceHandle");
    CHECK_DEVICE(device, is_mig);
    *is_mig = (unsigned)device->is_mig;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    ENTER("nvmlDeviceGetGpuInstanceId");
    CHECK_DEVICE(device, id);
    if (!device->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = device->gi;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    ENTER("nvmlDeviceGetComputeInstanceId");
    CHECK_DEVICE(device, id);
    if (!device->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = device->ci;
    return NVML_SUCCESS;
}
