/*
 * nvidia-smi of the nvhook mock machine, linked statically so that it runs in any container.
 *
 *   nvidia-smi -L | --list-gpus   one line per GPU this process can open (visible.c), numbered
 *                                 from 0 in PCI bus order as NVML would inside the container,
 *                                 with the MIG devices it can reach under each MIG GPU
 *   nvidia-smi --version          versions of the mock driver
 *   nvidia-smi                    a short table of the visible GPUs
 *
 * Exit codes as the real one: 9 when the driver is not loaded, 6 when no GPU is found.
 */
#include <stdlib.h>

#include "visible.c"

static char root[4096];

static int list(int table)
{
    int shown = 0;
    if (table) {
        printf("+-----------------------------------------------------------------------------+\n");
        printf("| NVIDIA-SMI %-14s Driver Version: %-12s CUDA Version: %-6s |\n",
               MOCK_DRIVER_VERSION, MOCK_DRIVER_VERSION, MOCK_CUDA_VERSION_STRING);
        printf("| nvhook mock machine: %-54s |\n", MOCK_PROFILE_NAME);
        printf("|-----------------------------------------------------------------------------|\n");
        printf("| GPU  Name                            Bus-Id                   Memory        |\n");
    }
    for (unsigned i = 0; i < MOCK_NGPUS; i++) {
        const struct mock_gpu *g = &mock_gpus[i];
        if (!mock_gpu_visible(root, g))
            continue;
        if (table)
            printf("| %3d  %-31s %-19s %8uMiB        |\n", shown, g->name, g->bus_id,
                   g->memory_mib);
        else
            printf("GPU %d: %s (UUID: %s)\n", shown, g->name, g->uuid);
        shown++;
        if (table || !g->mig_enabled)
            continue;
        int mig_index = 0;
        for (unsigned m = g->first_mig; m < g->first_mig + g->nmigs; m++) {
            if (!mock_mig_visible(root, &mock_migs[m]))
                continue;
            printf("  MIG %-12s Device %2d: (UUID: %s)\n", mock_migs[m].profile, mig_index++,
                   mock_migs[m].uuid);
        }
    }
    if (table)
        printf("+-----------------------------------------------------------------------------+\n");
    if (shown == 0) {
        printf("No devices were found\n");
        return 6;
    }
    return 0;
}

int main(int argc, char **argv)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        mock_root(self, "/usr/bin", root, sizeof(root));
    }
    if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-h") ||
                     !strcmp(argv[1], "--help"))) {
        if (strcmp(argv[1], "--version")) {
            printf("nvidia-smi of the nvhook mock machine: -L | --list-gpus | --version\n");
            return 0;
        }
        printf("NVIDIA-SMI version  : %s\n", MOCK_DRIVER_VERSION);
        printf("DRIVER version      : %s\n", MOCK_DRIVER_VERSION);
        printf("CUDA Version        : %s\n", MOCK_CUDA_VERSION_STRING);
        return 0;
    }
    int list_only = argc > 1 && (!strcmp(argv[1], "-L") || !strcmp(argv[1], "--list-gpus"));
    if (argc > 1 && !list_only) {
        fprintf(stderr, "nvidia-smi (nvhook mock): unsupported option %s; try -L\n", argv[1]);
        return 2;
    }
    if (!MOCK_MODULE_LOADED) {
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n\n");
        return 9;
    }
    return list(!list_only);
}
