/*
 * libcuda.so.1 of the nvhook mock machine: just enough of the CUDA driver API to prove that a
 * container got its GPUs. cuInit, cuDriverGetVersion and cuDeviceGetCount, counting the GPUs
 * this process can open (visible.c): a GPU in MIG mode counts its visible MIG devices instead
 * of itself, as CUDA does.
 */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "visible.c"

#define API __attribute__((visibility("default")))

typedef int CUresult;
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
};

static int initialized;
static int ndevices;

static int count_visible(void)
{
    char root[4096] = "";
    Dl_info info;
    int n = 0;
    if (dladdr((void *)&count_visible, &info) && info.dli_fname)
        mock_root(info.dli_fname, "/usr/lib/x86_64-linux-gnu", root, sizeof(root));
    for (unsigned i = 0; i < MOCK_NGPUS; i++) {
        const struct mock_gpu *g = &mock_gpus[i];
        if (!mock_gpu_visible(root, g))
            continue;
        if (!g->mig_enabled) {
            n++;
            continue;
        }
        for (unsigned m = g->first_mig; m < g->first_mig + g->nmigs; m++)
            n += mock_mig_visible(root, &mock_migs[m]);
    }
    return n;
}

API CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!MOCK_MODULE_LOADED)
        return CUDA_ERROR_NO_DEVICE;
    ndevices = count_visible();
    if (ndevices == 0)
        return CUDA_ERROR_NO_DEVICE;
    initialized = 1;
    return CUDA_SUCCESS;
}

API CUresult cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = MOCK_CUDA_VERSION;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    *count = ndevices;
    return CUDA_SUCCESS;
}
