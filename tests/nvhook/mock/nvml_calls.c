/*
 * nvml_calls: resolve every NVML name read from stdin in a fake libnvidia-ml.so.1 and call it.
 *
 *   nvml_calls LIBRARY < names
 *
 * LIBRARY is the dgx-a100 mock's library. Each name must resolve (dlsym). A function this
 * program knows (the fake's implemented API) is called with real arguments and its return
 * code checked; any other is called without arguments and must answer NOT_SUPPORTED (3).
 * Output: "called NAME" or "stub NAME" per name, "FAIL …" lines; exit 1 on any failure.
 * The structures here are written from nvml.h, independently of the fake's source, and the
 * versioned ones carry nvml.h's version constants, so a layout drift fails the V calls.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef void *handle;
typedef int (*fn_t)(void);

static union {
    char bytes[8192];
    unsigned u[2048];
    unsigned long ul[1024];
    handle h[1024];
} buf;
static handle d0, d2, mig, gi, ci;
static int failures;

#define IS(n) (!strcmp(name, #n))
#define F(...) ((int (*)(__VA_ARGS__))fn)
#define CLEAR() memset(&buf, 0, sizeof(buf))

/* Call `name` (resolved as `fn`); sets *expect. Returns -1 when it is not an implemented call. */
static int call(const char *name, void *fn, int *expect)
{
    unsigned u = 0, n = 0;
    int i = 0, j = 0;
    handle h = NULL;
    *expect = 0;
    CLEAR();
    if (IS(nvmlInit) || IS(nvmlInit_v2))
        return F(void)();
    if (IS(nvmlInitWithFlags))
        return F(unsigned)(0);
    if (IS(nvmlShutdown)) {
        int rc = F(void)();
        void *init = dlsym(RTLD_DEFAULT, "nvmlInit_v2");
        return rc ? rc : init ? ((fn_t)init)() : -2;
    }
    if (IS(nvmlErrorString))
        return strcmp(((const char *(*)(int))fn)(6), "Not Found") ? 1 : 0;
    if (IS(nvmlSystemGetDriverVersion) || IS(nvmlSystemGetNVMLVersion))
        return F(char *, unsigned)(buf.bytes, 80);
    if (IS(nvmlSystemGetCudaDriverVersion) || IS(nvmlSystemGetCudaDriverVersion_v2))
        return F(int *)(&i);
    if (IS(nvmlDeviceGetCount) || IS(nvmlDeviceGetCount_v2))
        return F(unsigned *)(&u) || u != 8;
    if (IS(nvmlDeviceGetHandleByIndex) || IS(nvmlDeviceGetHandleByIndex_v2))
        return F(unsigned, handle *)(7, &h);
    if (IS(nvmlDeviceGetHandleByUUID))
        return F(const char *, handle *)("MIG-a1d5c39a-2905-47eb-b305-71fbf59c3472", &h);
    if (IS(nvmlDeviceGetHandleByPciBusId) || IS(nvmlDeviceGetHandleByPciBusId_v2))
        return F(const char *, handle *)("00000000:4E:00.0", &h);
    if (IS(nvmlDeviceGetName) || IS(nvmlDeviceGetUUID))
        return F(handle, char *, unsigned)(mig, buf.bytes, 96);
    if (IS(nvmlDeviceGetMinorNumber) || IS(nvmlDeviceGetArchitecture) || IS(nvmlDeviceGetBrand) ||
        IS(nvmlDeviceGetIndex))
        return F(handle, unsigned *)(d2, &u);
    if (IS(nvmlDeviceGetPciInfo) || IS(nvmlDeviceGetPciInfo_v2) || IS(nvmlDeviceGetPciInfo_v3))
        return F(handle, void *)(d2, &buf);
    if (IS(nvmlDeviceGetMemoryInfo) || IS(nvmlDeviceGetAttributes_v2))
        return F(handle, void *)(mig, &buf);
    if (IS(nvmlDeviceGetMemoryInfo_v2)) {
        buf.u[0] = 0x02000028; /* nvmlMemory_v2 */
        return F(handle, void *)(d2, &buf);
    }
    if (IS(nvmlDeviceGetNumGpuCores)) /* an A100's 6912 FP32 cores */
        return F(handle, unsigned *)(d2, &u) || u != 6912;
    if (IS(nvmlDeviceGetCudaComputeCapability))
        return F(handle, int *, int *)(d0, &i, &j) || i != 8 || j != 0;
    if (IS(nvmlDeviceGetMigMode))
        return F(handle, unsigned *, unsigned *)(d0, &u, &n) || u != 1 || n != 1;
    if (IS(nvmlDeviceGetMaxMigDeviceCount))
        return F(handle, unsigned *)(d0, &u) || u != 7;
    if (IS(nvmlDeviceGetMigDeviceHandleByIndex))
        return F(handle, unsigned, handle *)(d0, 2, &h);
    if (IS(nvmlDeviceGetDeviceHandleFromMigDeviceHandle))
        return F(handle, handle *)(mig, &h) || h != d0;
    if (IS(nvmlDeviceIsMigDeviceHandle))
        return F(handle, unsigned *)(mig, &u) || u != 1;
    if (IS(nvmlDeviceGetGpuInstanceId) || IS(nvmlDeviceGetComputeInstanceId))
        return F(handle, unsigned *)(mig, &u);
    /* GPU and compute instances */
    if (IS(nvmlDeviceGetGpuInstanceProfileInfo))
        return F(handle, unsigned, void *)(d0, 2, &buf) || buf.u[0] != 9;
    if (IS(nvmlDeviceGetGpuInstanceProfileInfoV)) {
        buf.u[0] = 0x02000098; /* nvmlGpuInstanceProfileInfo_v2 */
        return F(handle, unsigned, void *)(d0, 2, &buf) || buf.u[1] != 9;
    }
    if (IS(nvmlDeviceGetGpuInstanceProfileInfoByIdV)) {
        buf.u[0] = 0x02000098;
        return F(handle, unsigned, void *)(d0, 9, &buf) || buf.u[3] != 3;
    }
    if (IS(nvmlDeviceGetGpuInstancePossiblePlacements_v2)) {
        u = 8;
        return F(handle, unsigned, void *, unsigned *)(d0, 9, &buf, &u) || u != 2;
    }
    if (IS(nvmlDeviceGetGpuInstanceRemainingCapacity))
        return F(handle, unsigned, unsigned *)(d0, 19, &u) || u != 0;
    if (IS(nvmlDeviceGetGpuInstances))
        return F(handle, unsigned, handle *, unsigned *)(d0, 14, buf.h, &u) || u != 2;
    if (IS(nvmlDeviceGetGpuInstanceById))
        return F(handle, unsigned, handle *)(d0, 4, &h);
    if (IS(nvmlGpuInstanceGetInfo))
        return F(handle, void *)(gi, &buf) || buf.h[0] != d0;
    if (IS(nvmlGpuInstanceGetComputeInstanceProfileInfo))
        return F(handle, unsigned, unsigned, void *)(gi, 0, 0, &buf) || buf.u[2] != 3;
    if (IS(nvmlGpuInstanceGetComputeInstanceProfileInfoV)) {
        buf.u[0] = 0x02000088; /* nvmlComputeInstanceProfileInfo_v2 */
        return F(handle, unsigned, unsigned, void *)(gi, 2, 0, &buf) || buf.u[2] != 3;
    }
    if (IS(nvmlGpuInstanceGetComputeInstanceRemainingCapacity))
        return F(handle, unsigned, unsigned *)(gi, 0, &u) || u != 0;
    if (IS(nvmlGpuInstanceGetComputeInstances))
        return F(handle, unsigned, handle *, unsigned *)(gi, 2, buf.h, &u) || u != 1;
    if (IS(nvmlGpuInstanceGetComputeInstanceById))
        return F(handle, unsigned, handle *)(gi, 0, &h) || h != ci;
    if (IS(nvmlComputeInstanceGetInfo) || IS(nvmlComputeInstanceGetInfo_v2))
        return F(handle, void *)(ci, &buf) || buf.h[0] != d0 || buf.h[1] != gi;
    /* topology */
    if (IS(nvmlDeviceGetTopologyCommonAncestor))
        return F(handle, handle, unsigned *)(d0, d2, &u) || u != 50;
    if (IS(nvmlDeviceGetTopologyNearestGpus)) {
        u = 8;
        return F(handle, unsigned, unsigned *, handle *)(d0, 20, &u, buf.h) || u != 1;
    }
    if (IS(nvmlSystemGetTopologyGpuSet)) {
        u = 8;
        return F(unsigned, unsigned *, handle *)(50, &u, buf.h) || u != 2 || buf.h[0] != d0;
    }
    if (IS(nvmlDeviceGetCpuAffinity))
        return F(handle, unsigned, unsigned long *)(d0, 4, buf.ul) ||
               buf.ul[0] != 0xffff000000000000UL;
    if (IS(nvmlDeviceGetCpuAffinityWithinScope) || IS(nvmlDeviceGetMemoryAffinity))
        return F(handle, unsigned, unsigned long *, int)(d0, 4, buf.ul, 1) || buf.ul[0] == 0;
    if (IS(nvmlDeviceGetNvLinkState) || IS(nvmlDeviceGetNvLinkVersion) ||
        IS(nvmlDeviceGetNvLinkRemoteDeviceType))
        return F(handle, unsigned, unsigned *)(d0, 11, &u) || u == 0;
    if (IS(nvmlDeviceGetNvLinkRemotePciInfo_v2))
        return F(handle, unsigned, void *)(d0, 11, &buf) || strcmp((char *)buf.bytes + 36,
                                                                   "00000000:C9:00.0");
    /* processes, utilization, sensors */
    if (IS(nvmlDeviceGetComputeRunningProcesses_v3) || IS(nvmlDeviceGetComputeRunningProcesses_v2)) {
        u = 4;
        return F(handle, unsigned *, void *)(d2, &u, &buf) || u != 1 || buf.u[0] != 48213;
    }
    if (IS(nvmlDeviceGetGraphicsRunningProcesses_v3) || IS(nvmlDeviceGetGraphicsRunningProcesses_v2) ||
        IS(nvmlDeviceGetMPSComputeRunningProcesses_v3) ||
        IS(nvmlDeviceGetMPSComputeRunningProcesses_v2))
        return F(handle, unsigned *, void *)(d2, &u, NULL) || u != 0;
    if (IS(nvmlSystemGetProcessName))
        return F(unsigned, char *, unsigned)(48213, (char *)buf.bytes, 64) ||
               strcmp((char *)buf.bytes, "python3");
    if (IS(nvmlDeviceGetUtilizationRates))
        return F(handle, void *)(d2, &buf) || buf.u[0] != 87;
    if (IS(nvmlDeviceGetTemperature))
        return F(handle, int, unsigned *)(d2, 0, &u) || u < 20 || u > 90;
    if (IS(nvmlDeviceGetTemperatureV)) {
        buf.u[0] = 0x0100000C; /* nvmlTemperature_v1 */
        return F(handle, void *)(d2, &buf) || buf.u[2] < 20 || buf.u[2] > 90;
    }
    if (IS(nvmlDeviceGetPowerUsage) || IS(nvmlDeviceGetEnforcedPowerLimit) ||
        IS(nvmlDeviceGetPowerManagementLimit))
        return F(handle, unsigned *)(d2, &u) || u < 20000 || u > 400000;
    if (IS(nvmlDeviceGetPersistenceMode) || IS(nvmlDeviceGetPerformanceState) ||
        IS(nvmlDeviceGetComputeMode))
        return F(handle, int *)(d2, &i);
    /* events (nvml.h: nvmlEventData_t is device, eventType, eventData, GI id, CI id) */
    if (IS(nvmlDeviceGetSupportedEventTypes)) {
        unsigned long long types = 0;
        return F(handle, unsigned long long *)(d2, &types) || !(types & 0x8);
    }
    if (IS(nvmlEventSetCreate))
        return F(handle *)(&h) || !h;
    if (IS(nvmlDeviceRegisterEvents) || IS(nvmlEventSetWait_v2) || IS(nvmlEventSetFree)) {
        void *create = dlsym(RTLD_DEFAULT, "nvmlEventSetCreate");
        if (!create || ((int (*)(handle *))create)(&h) || !h)
            return -2;
        if (IS(nvmlDeviceRegisterEvents))
            return F(handle, unsigned long long, handle)(d2, 0x8, h);
        if (IS(nvmlEventSetFree))
            return F(handle)(h);
        *expect = 10; /* nothing posted: NVML_ERROR_TIMEOUT */
        return F(handle, void *, unsigned)(h, &buf, 1);
    }
    return -1;
}

static void *must(void *lib, const char *name)
{
    void *fn = dlsym(lib, name);
    if (!fn) {
        printf("FAIL %s: %s\n", name, dlerror());
        failures++;
    }
    return fn;
}

int main(int argc, char **argv)
{
    char name[256];
    void *lib;
    if (argc != 2 || !(lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL))) {
        fprintf(stderr, "usage: nvml_calls LIBRARY < names (%s)\n", dlerror());
        return 2;
    }
    fn_t init = (fn_t)must(lib, "nvmlInit_v2");
    int (*by_index)(unsigned, handle *) = (int (*)(unsigned, handle *))must(lib, "nvmlDeviceGetHandleByIndex_v2");
    int (*mig_by_index)(handle, unsigned, handle *) =
        (int (*)(handle, unsigned, handle *))must(lib, "nvmlDeviceGetMigDeviceHandleByIndex");
    int (*gi_by_id)(handle, unsigned, handle *) =
        (int (*)(handle, unsigned, handle *))must(lib, "nvmlDeviceGetGpuInstanceById");
    int (*ci_by_id)(handle, unsigned, handle *) =
        (int (*)(handle, unsigned, handle *))must(lib, "nvmlGpuInstanceGetComputeInstanceById");
    if (failures || init() || by_index(0, &d0) || by_index(2, &d2) || mig_by_index(d0, 0, &mig) ||
        gi_by_id(d0, 2, &gi) || ci_by_id(gi, 0, &ci)) {
        printf("FAIL setup: cannot open the dgx-a100 mock's GPU 0, its GI 2 and CI 0\n");
        return 1;
    }
    while (fgets(name, sizeof(name), stdin)) {
        name[strcspn(name, "\n")] = '\0';
        void *fn = name[0] ? must(lib, name) : NULL;
        if (!fn)
            continue;
        int expect, rc = call(name, fn, &expect);
        if (rc == -1) {
            rc = ((fn_t)fn)();
            expect = 3; /* NVML_ERROR_NOT_SUPPORTED */
            printf("stub %s\n", name);
        } else {
            printf("called %s\n", name);
        }
        if (rc != expect) {
            printf("FAIL %s: returned %d, expected %d\n", name, rc, expect);
            failures++;
        }
    }
    return failures ? 1 : 0;
}
