/*
 * The driver's other binaries on the nvhook mock machine (nvidia-persistenced,
 * nvidia-cuda-mps-control, nvidia-debugdump, …): one static program named by argv[0] that
 * reports its version and otherwise does nothing. They exist so that discovery finds, mounts
 * and runs real executables.
 */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-v"))) {
        printf("%s: version %s (nvhook mock machine)\n", name, MOCK_DRIVER_VERSION);
        return 0;
    }
    fprintf(stderr, "%s: stand-in of the nvhook mock machine (driver %s); it does nothing\n",
            name, MOCK_DRIVER_VERSION);
    return 0;
}
