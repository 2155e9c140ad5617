/*
 * Shared by the mock nvidia-smi and the stub libcuda (#included, not compiled on its own):
 * which of the profile's GPUs the calling process can reach.
 *
 * A GPU counts as visible when its /dev/nvidia<minor> opens, or fails with ENXIO: the node is
 * there and the device cgroup allows it, but no driver is behind it (the mock machine has
 * none). EPERM (cgroup denies) and ENOENT (no node) make it invisible. A MIG device is
 * visible when its GPU is and both of its /dev/nvidia-caps/nvidia-cap<n> nodes are.
 *
 * Nodes are looked up under the mock root the program runs from: a program installed at
 * <root>/usr/bin (or a library at <root>/usr/lib/x86_64-linux-gnu) uses <root>/dev, anything
 * else (a container, where the driver files sit at their usual paths) uses /dev.
 *
 * The profile comes from mock_profile.h, generated per profile by nvhook.mock.build.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct mock_gpu {
    unsigned minor;
    const char *name;
    const char *uuid;
    const char *bus_id; /* NVML form, 00000000:07:00.0 */
    unsigned memory_mib;
    int mig_enabled;
    unsigned first_mig, nmigs;
};

struct mock_mig {
    const char *profile;
    const char *uuid;
    unsigned gi_minor, ci_minor;
};

#include "mock_profile.h"

/* root = self's directory minus dir_suffix, or "" when self is not installed there. */
static void mock_root(const char *self, const char *dir_suffix, char *root, size_t size)
{
    const char *slash = strrchr(self, '/');
    size_t dirlen = slash ? (size_t)(slash - self) : 0;
    size_t suffixlen = strlen(dir_suffix);
    root[0] = '\0';
    if (dirlen >= suffixlen && !strncmp(self + dirlen - suffixlen, dir_suffix, suffixlen) &&
        dirlen - suffixlen < size)
        snprintf(root, size, "%.*s", (int)(dirlen - suffixlen), self);
}

static int mock_node_visible(const char *root, const char *node)
{
    char path[4096];
    int fd;
    if (snprintf(path, sizeof(path), "%s%s", root, node) >= (int)sizeof(path))
        return 0;
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno == ENXIO;
}

static int mock_gpu_visible(const char *root, const struct mock_gpu *gpu)
{
    char node[64];
    snprintf(node, sizeof(node), "/dev/nvidia%u", gpu->minor);
    return mock_node_visible(root, node);
}

static int mock_mig_visible(const char *root, const struct mock_mig *mig)
{
    char gi[64], ci[64];
    snprintf(gi, sizeof(gi), "/dev/nvidia-caps/nvidia-cap%u", mig->gi_minor);
    snprintf(ci, sizeof(ci), "/dev/nvidia-caps/nvidia-cap%u", mig->ci_minor);
    return mock_node_visible(root, gi) && mock_node_visible(root, ci);
}
