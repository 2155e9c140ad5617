/*
 * nvidia-cuda-mps-control of the nvhook mock machine: the MPS control daemon and its client,
 * as far as a device plugin uses them (NVIDIA's k8s-device-plugin cmd/mps-control-daemon/mps:
 * `nvidia-cuda-mps-control -d` to start, commands on the client's stdin to configure, query
 * and stop it).
 *
 *   nvidia-cuda-mps-control -d     start the daemon in the background and return 0 once it
 *                                  listens (1, with a message, if one already runs there)
 *   nvidia-cuda-mps-control        the client: send stdin's commands to the daemon, print
 *                                  its answers (1, "Cannot find MPS control daemon process",
 *                                  when none runs)
 *
 * Where: $CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps) is created and holds the daemon's
 * socket "control" and its pid file "nvidia-cuda-mps-control.pid"; $CUDA_MPS_LOG_DIRECTORY
 * (default /var/log/nvidia-mps) is created and holds "control.log", a line per command.
 * Commands (one a line): get_default_active_thread_percentage, set_default_active_thread_
 * percentage N (both answer the value as "%.1f"), set_default_device_pinned_mem_limit DEV
 * LIMIT, get_default_device_pinned_mem_limit DEV (answers the limit, or "0"),
 * get_server_list (answers nothing: no server runs), quit (stops the daemon). Anything else
 * is answered "Unknown command". Not modelled: MPS servers, per-server settings, users.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEVICES 64

static char pipe_dir[4096], log_dir[4096], sock_path[4200], pid_path[4200];
static double thread_percentage = 100.0;
static char mem_limits[MAX_DEVICES][32];
static FILE *log_file;

static void mkdirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0755);
            *p = '/';
        }
    mkdir(buf, 0755);
}

static void say(const char *fmt, ...)
{
    if (!log_file)
        return;
    time_t now = time(NULL);
    char stamp[32];
    strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", gmtime(&now));
    fprintf(log_file, "[%s] ", stamp);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(log_file, fmt, ap);
    va_end(ap);
    fputc('\n', log_file);
    fflush(log_file);
}

static int connect_daemon(void)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(sock_path) >= sizeof(addr.sun_path))
        return -1;
    strcpy(addr.sun_path, sock_path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One command line; writes the answer (with its newline, if any) to out. Returns 1 on quit. */
static int command(char *line, FILE *out)
{
    char *argv[4] = {0};
    int argc = 0;
    for (char *tok = strtok(line, " \t\r"); tok && argc < 4; tok = strtok(NULL, " \t\r"))
        argv[argc++] = tok;
    if (argc == 0)
        return 0;
    say("CMD %s%s%s%s%s", argv[0], argc > 1 ? " " : "", argc > 1 ? argv[1] : "",
        argc > 2 ? " " : "", argc > 2 ? argv[2] : "");
    if (!strcmp(argv[0], "quit")) {
        say("Exit");
        return 1;
    }
    if (!strcmp(argv[0], "get_default_active_thread_percentage")) {
        fprintf(out, "%.1f\n", thread_percentage);
    } else if (!strcmp(argv[0], "set_default_active_thread_percentage") && argc == 2) {
        thread_percentage = strtod(argv[1], NULL);
        fprintf(out, "%.1f\n", thread_percentage);
    } else if (!strcmp(argv[0], "set_default_device_pinned_mem_limit") && argc == 3) {
        int dev = atoi(argv[1]);
        if (dev < 0 || dev >= MAX_DEVICES)
            fprintf(out, "Invalid device\n");
        else
            snprintf(mem_limits[dev], sizeof(mem_limits[dev]), "%s", argv[2]);
    } else if (!strcmp(argv[0], "get_default_device_pinned_mem_limit") && argc == 2) {
        int dev = atoi(argv[1]);
        fprintf(out, "%s\n", dev >= 0 && dev < MAX_DEVICES && mem_limits[dev][0] ? mem_limits[dev]
                                                                                 : "0");
    } else if (!strcmp(argv[0], "get_server_list")) {
        /* no MPS server runs on the mock machine */
    } else {
        fprintf(out, "Unknown command\n");
    }
    return 0;
}

static int serve(int listener)
{
    for (;;) {
        int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        int wfd = dup(fd);
        FILE *in = fdopen(fd, "r"), *out = wfd >= 0 ? fdopen(wfd, "w") : NULL;
        if (!in || !out) {
            if (in)
                fclose(in);
            else
                close(fd);
            if (wfd >= 0 && !out)
                close(wfd);
            continue;
        }
        char line[512];
        int quit = 0;
        while (!quit && fgets(line, sizeof(line), in)) {
            line[strcspn(line, "\n")] = '\0';
            quit = command(line, out);
            fflush(out);
        }
        fclose(out);
        fclose(in);
        if (quit) {
            unlink(sock_path);
            unlink(pid_path);
            return 0;
        }
    }
}

static int start_daemon(void)
{
    int fd = connect_daemon();
    if (fd >= 0) {
        close(fd);
        fprintf(stderr, "An instance of this daemon is already running\n");
        return 1;
    }
    mkdirs(pipe_dir);
    mkdirs(log_dir);
    unlink(sock_path);
    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (listener < 0 || strlen(sock_path) >= sizeof(addr.sun_path)) {
        fprintf(stderr, "nvidia-cuda-mps-control: pipe directory path too long: %s\n", pipe_dir);
        return 1;
    }
    strcpy(addr.sun_path, sock_path);
    if (bind(listener, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(listener, 16) < 0) {
        fprintf(stderr, "nvidia-cuda-mps-control: cannot listen in %s: %s\n", pipe_dir,
                strerror(errno));
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid > 0)
        return 0; /* listening already: clients can connect as soon as we return */
    setsid();
    signal(SIGHUP, SIG_IGN);
    char path[4200];
    snprintf(path, sizeof(path), "%s/control.log", log_dir);
    log_file = fopen(path, "a");
    FILE *pidf = fopen(pid_path, "w");
    if (pidf) {
        fprintf(pidf, "%d\n", (int)getpid());
        fclose(pidf);
    }
    int null = open("/dev/null", 2);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    say("Starting control daemon (nvhook mock machine)");
    _exit(serve(listener));
}

static int client(void)
{
    int fd = connect_daemon();
    if (fd < 0) {
        fprintf(stderr, "Cannot find MPS control daemon process\n");
        return 1;
    }
    /* the daemon closes the connection after "quit": a write after that is EPIPE, not a
     * signal, and the answer read so far is the answer */
    signal(SIGPIPE, SIG_IGN);
    char buf[4096];
    size_t n;
    char last = '\n';
    while ((n = fread(buf, 1, sizeof(buf), stdin)) > 0) {
        if (write(fd, buf, n) != (ssize_t)n) {
            if (errno == EPIPE)
                break;
            return 1;
        }
        last = buf[n - 1];
    }
    if (last != '\n' && write(fd, "\n", 1) != 1 && errno != EPIPE)
        return 1; /* a last line without its newline: the daemon reads whole lines */
    shutdown(fd, SHUT_WR);
    ssize_t got;
    while ((got = read(fd, buf, sizeof(buf))) > 0)
        fwrite(buf, 1, (size_t)got, stdout);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
    const char *log = getenv("CUDA_MPS_LOG_DIRECTORY");
    snprintf(pipe_dir, sizeof(pipe_dir), "%s", pipe && *pipe ? pipe : "/tmp/nvidia-mps");
    snprintf(log_dir, sizeof(log_dir), "%s", log && *log ? log : "/var/log/nvidia-mps");
    snprintf(sock_path, sizeof(sock_path), "%s/control", pipe_dir);
    snprintf(pid_path, sizeof(pid_path), "%s/nvidia-cuda-mps-control.pid", pipe_dir);
    if (argc > 1 && !strcmp(argv[1], "-d"))
        return start_daemon();
    if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-v"))) {
        printf("nvidia-cuda-mps-control: version %s (nvhook mock machine)\n", MOCK_DRIVER_VERSION);
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "nvidia-cuda-mps-control (nvhook mock): unsupported option %s\n", argv[1]);
        return 1;
    }
    return client();
}
