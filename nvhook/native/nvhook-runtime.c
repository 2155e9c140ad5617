/*
 * nvhook-runtime, the native front-end (issue 16): owns the calls that ask for nothing.
 *
 * Engines call the runtime several times per container; CPython's start alone costs
 * more than the pass-through budget. This program execs the low-level runtime itself
 * only when it is certain the Python shim (NVHOOK_LAUNCHER, compiled in) would do
 * nothing but exec it with the same argv:
 *
 *   - the command is not create/run (read as runc 1.1.5 reads argv, as oci/argv.py
 *     does) nor --version (the shim prints nvhook's version first), or it is a
 *     create/run whose config.json contains none of the trigger
 *     strings the Python side wrote for it (request variables, annotation prefixes,
 *     ...), no JSON escape that could spell one (\u, \/) and no byte order mark (the
 *     shim refuses that file);
 *   - the data file the Python side wrote into the cache directory
 *     (nvhook/native/__init__.py: root-owned 0600, in a directory only root can write)
 *     describes the settings file as it is now (path, dev, inode, size, mtime and ctime ns) and
 *     does not say "handover" (debug logging, a policy the shim would refuse, ...);
 *   - the runtime is found as nvhook.shim.find_runtime finds it, from the candidates in
 *     that file and PATH, and exec succeeds.
 *
 * Any doubt (a parse error, a missing or foreign file, a limit, a failed exec) hands the
 * call over: first to nvhook-shim-server (nvhook/server.py, docs/architecture.md D12), the
 * Python shim pre-forked, when its socket is in the cache directory (shim.sock, root's,
 * in a directory only root may write) and the server is root; it runs the shim's code
 * with this process's argv, environment, cwd, umask and stdio, and replies with the
 * runtime to exec (this process execs it) or an exit code. Any failure before that reply
 * (no socket, a foreign one, no ack within NVHOOK_SERVER_DEADLINE_MS, a closed connection,
 * a malformed reply) execs the Python shim with the argv unchanged, which then decides as
 * it always has. Where that exec fails with ENOENT because the launcher's interpreter is gone
 * (a distribution upgrade removed the venv's Python), one line names it and the repair.
 * libc only; no allocation that is not bounded; build with -DNVHOOK_LAUNCHER='"/path"'.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef NVHOOK_LAUNCHER
#error "build with -DNVHOOK_LAUNCHER='\"/absolute/path/of/nvhook-runtime.py\"'"
#endif

/* Every value shared with Python (exit codes, paths, runc's flag tables, the data file's
 * and the server's words): generated from the Python values by nvhook/native/contract.py. */
#include "nvhook-contract.h"
#include "nvhook-launcher.h"

/* This program's own limits: beyond them, a handover. */
#define MAX_DATA (64 * 1024)         /* the data file */
#define MAX_SPEC (16 * 1024 * 1024)  /* config.json */
#define MAX_ITEMS 64                 /* runtime and trigger lines */
/* How long the server may take to acknowledge a request (connect, send, its peer checks):
 * a server that does not answer by then is a fallback. After its ack it runs the call, and
 * is waited for as long as the Python shim would be (a child that dies is a fallback). */
#ifndef NVHOOK_SERVER_DEADLINE_MS
#define NVHOOK_SERVER_DEADLINE_MS 3000
#endif
#define MAGIC_LEN (sizeof NVHOOK_SERVER_MAGIC - 1)
extern char **environ;

static char **original;  /* argv as given: argv[0] is replaced just before each exec */
static int original_argc;

/* Hand the call, unchanged, to the Python shim. */
static void handover(void) __attribute__((noreturn));
static void handover(void) {
    char *fallback[2] = {(char *)NVHOOK_LAUNCHER, NULL};
    char **argv = original_argc >= 1 ? original : fallback;
    argv[0] = (char *)NVHOOK_LAUNCHER;
    execv(NVHOOK_LAUNCHER, argv);
    int error = errno;
    if (error == ENOENT) interpreter_gone(NVHOOK_RUNTIME_PROGRAM, NVHOOK_EXIT_RUNTIME);
    dprintf(2, NVHOOK_RUNTIME_PROGRAM ": cannot exec %s: %s\n", NVHOOK_LAUNCHER, strerror(error));
    _exit(NVHOOK_EXIT_RUNTIME);
}

/* --- nvhook-shim-server (nvhook/server.py has the protocol) ------------------------- */

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Wait until fd is ready for events (or hung up); deadline in now_ms() terms, -1: none. */
static int wait_for(int fd, short events, long long deadline) {
    for (;;) {
        int timeout = -1;
        if (deadline >= 0) {
            long long left = deadline - now_ms();
            if (left <= 0) return -1;
            timeout = left > INT_MAX ? INT_MAX : (int)left;
        }
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, timeout);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0 || (p.revents & (POLLERR | POLLNVAL))) return -1;
        return 0; /* ready, or POLLHUP: the next read says EOF */
    }
}

static int read_exact(int fd, char *buf, size_t n, long long deadline) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, buf + got, n - got, 0);
        if (r > 0) {
            got += (size_t)r;
        } else if (r == 0) {
            return -1; /* closed */
        } else if (errno == EINTR) {
            continue;
        } else if ((errno != EAGAIN && errno != EWOULDBLOCK) || wait_for(fd, POLLIN, deadline)) {
            return -1;
        }
    }
    return 0;
}

/* One frame's body into buf (at most cap bytes, NUL added): its length, or -1. */
static long read_frame(int fd, char *buf, size_t cap, long long deadline) {
    unsigned char head[NVHOOK_SERVER_HEADER]; /* the magic, then a 32-bit little-endian length */
    if (read_exact(fd, (char *)head, sizeof head, deadline) ||
        memcmp(head, NVHOOK_SERVER_MAGIC, MAGIC_LEN))
        return -1;
    size_t len = 0;
    for (size_t i = MAGIC_LEN; i < sizeof head; i++)
        len |= (size_t)head[i] << (8 * (i - MAGIC_LEN));
    if (len > cap || read_exact(fd, buf, len, deadline)) return -1;
    buf[len] = '\0';
    return (long)len;
}

/* The request frame (nvhook.server.parse_request), malloc'd; NULL if it would be too big. */
static char *build_request(int argc, char **argv, const char *me, size_t *size) {
    mode_t mask = umask(0);
    umask(mask);
    char numbers[3][32];
    int envc = 0;
    size_t body = 0;
    for (char **e = environ; e && *e; e++, envc++) body += strlen(*e) + 1;
    for (int i = 1; i < argc; i++) body += strlen(argv[i]) + 1;
    snprintf(numbers[0], sizeof numbers[0], "%o", (unsigned)mask);
    snprintf(numbers[1], sizeof numbers[1], "%d", argc - 1);
    snprintf(numbers[2], sizeof numbers[2], "%d", envc);
    body += sizeof NVHOOK_SERVER_PROTOCOL + strlen(me) + 1;
    for (int i = 0; i < 3; i++) body += strlen(numbers[i]) + 1;
    if (body > NVHOOK_SERVER_MAX_REQUEST) return NULL;
    char *buf = malloc(NVHOOK_SERVER_HEADER + body);
    if (buf == NULL) return NULL;
    memcpy(buf, NVHOOK_SERVER_MAGIC, MAGIC_LEN);
    for (size_t i = MAGIC_LEN; i < NVHOOK_SERVER_HEADER; i++)
        buf[i] = (char)((body >> (8 * (i - MAGIC_LEN))) & 0xff);
    char *p = buf + NVHOOK_SERVER_HEADER;
#define PUT(s) (p = stpcpy(p, (s)) + 1)
    PUT(NVHOOK_SERVER_PROTOCOL);
    PUT(numbers[0]);
    PUT(me);
    PUT(numbers[1]);
    for (int i = 1; i < argc; i++) PUT(argv[i]);
    PUT(numbers[2]);
    for (char **e = environ; e && *e; e++) PUT(*e);
#undef PUT
    *size = (size_t)(p - buf);
    return buf;
}

/* Send the request, with cwd and stdio as SCM_RIGHTS on its first bytes. */
static int send_request(int sock, const char *buf, size_t size, int cwd, long long deadline) {
    size_t sent = 0;
    while (sent < size) {
        ssize_t r;
        if (sent == 0) {
            int fds[NVHOOK_SERVER_FDS] = {cwd, 0, 1, 2};
            union {
                char buf[CMSG_SPACE(sizeof fds)];
                struct cmsghdr align;
            } control;
            memset(&control, 0, sizeof control);
            struct iovec iov = {(void *)buf, size};
            struct msghdr msg = {0};
            msg.msg_iov = &iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.buf;
            msg.msg_controllen = sizeof control.buf;
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof fds);
            memcpy(CMSG_DATA(c), fds, sizeof fds);
            r = sendmsg(sock, &msg, MSG_NOSIGNAL);
        } else {
            r = send(sock, buf + sent, size - sent, MSG_NOSIGNAL);
        }
        if (r > 0) {
            sent += (size_t)r;
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) ||
                   wait_for(sock, POLLOUT, deadline)) {
            return -1;
        }
    }
    return 0;
}

/* The server's verdict: exec the runtime it names (never returns), exit with its code
 * (never returns), or return: any failure before a well-formed reply, for the caller to
 * hand the call to the Python shim. */
static void try_server(const char *dir) {
    struct stat st;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int n = snprintf(path, sizeof path, "%s/" NVHOOK_SERVER_SOCKET, dir);
    if (dir[0] != '/' || n < 0 || (size_t)n >= sizeof path) return;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022))
        return;
    if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != 0) return;
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0) return; /* a closed stdio: the shim's own business */
    char me[PATH_MAX];
    if (realpath("/proc/self/exe", me) == NULL) return;
    size_t size = 0;
    char *request = build_request(original_argc, original, me, &size);
    if (request == NULL) return;
    long long deadline = now_ms() + NVHOOK_SERVER_DEADLINE_MS;
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct sockaddr_un addr = {0};
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, path, (size_t)n + 1);
    struct ucred cred;
    socklen_t credlen = sizeof cred;
    static char reply[PATH_MAX + 64];
    long len = -1;
    if (sock >= 0 && cwd >= 0 && connect(sock, (struct sockaddr *)&addr, sizeof addr) == 0 &&
        getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &credlen) == 0 &&
        credlen == sizeof cred && cred.uid == 0 &&
        send_request(sock, request, size, cwd, deadline) == 0 &&
        read_frame(sock, reply, sizeof reply - 1, deadline) == sizeof NVHOOK_SERVER_ACK - 1 &&
        memcmp(reply, NVHOOK_SERVER_ACK, sizeof NVHOOK_SERVER_ACK - 1) == 0)
        len = read_frame(sock, reply, sizeof reply - 1, -1); /* the call runs: no deadline */
    free(request);
    if (cwd >= 0) close(cwd);
    if (sock >= 0) close(sock);
    /* "exec\0PATH" or "exit\0CODE": the word with its NUL, then the value */
    const long word = (long)sizeof NVHOOK_SERVER_EXEC;
    if (len > word && memcmp(reply, NVHOOK_SERVER_EXEC, (size_t)word) == 0 &&
        strlen(reply + word) == (size_t)(len - word)) {
        original[0] = reply + word;
        execv(reply + word, original);
        handover(); /* the shim reports why exec failed (the call is idempotent: D12) */
    }
    const long exit_word = (long)sizeof NVHOOK_SERVER_EXIT;
    if (len > exit_word && len <= exit_word + 3 &&
        memcmp(reply, NVHOOK_SERVER_EXIT, (size_t)exit_word) == 0) {
        char *end;
        long code = strtol(reply + exit_word, &end, 10);
        if (end == reply + len && reply[exit_word] >= '0' && reply[exit_word] <= '9' &&
            code <= 255)
            _exit((int)code);
    }
}

static const char *cache_dir(void) {
    const char *dir = getenv(NVHOOK_ENV_CACHE_DIR);
    return dir == NULL || dir[0] == '\0' ? NVHOOK_DEFAULT_CACHE_DIR : dir;
}

/* Hand the call over: to the server if one answers, else to the Python shim. */
static void delegate(void) __attribute__((noreturn));
static void delegate(void) {
    try_server(cache_dir());
    handover();
}

/* --- argv, as oci/argv.py reads it -------------------------------------------------- */

static const char *const TRUE_WORDS[] = NVHOOK_TRUE_WORDS;
static const char *const FALSE_WORDS[] = NVHOOK_FALSE_WORDS;

struct table {
    const char *const *values; /* flags that take a value */
    const char *const *bools;  /* flags that do not ("help", "h" included) */
    const char *const *aliases; /* pairs: short, long */
};

static const char *const GLOBAL_VALUES[] = NVHOOK_GLOBAL_VALUES;
static const char *const GLOBAL_BOOLS[] = NVHOOK_GLOBAL_BOOLS;
static const char *const GLOBAL_ALIASES[] = NVHOOK_GLOBAL_ALIASES;
static const char *const CREATE_VALUES[] = NVHOOK_CREATE_VALUES;
static const char *const CREATE_BOOLS[] = NVHOOK_CREATE_BOOLS;
static const char *const CREATE_ALIASES[] = NVHOOK_CREATE_ALIASES;
static const char *const RUN_VALUES[] = NVHOOK_RUN_VALUES;
static const char *const RUN_BOOLS[] = NVHOOK_RUN_BOOLS;
static const char *const RUN_ALIASES[] = NVHOOK_RUN_ALIASES;

static const struct table GLOBAL = {GLOBAL_VALUES, GLOBAL_BOOLS, GLOBAL_ALIASES};
static const struct table CREATE = {CREATE_VALUES, CREATE_BOOLS, CREATE_ALIASES};
static const struct table RUN = {RUN_VALUES, RUN_BOOLS, RUN_ALIASES};

/* The entry of list that is s[0..n), or NULL. */
static const char *find(const char *const *list, const char *s, size_t n) {
    for (; *list; list++)
        if (strlen(*list) == n && memcmp(*list, s, n) == 0) return *list;
    return NULL;
}

static int in_list(const char *const *list, const char *s, size_t n) {
    return find(list, s, n) != NULL;
}

static const char *long_name(const struct table *t, const char *name) {
    for (const char *const *a = t->aliases; *a; a += 2)
        if (strcmp(a[0], name) == 0) return a[1];
    return name;
}

/* What parse_flags found of the flags that matter here (the last value wins, as in Go). */
struct flags {
    int help, version;   /* given, and true */
    const char *bundle;  /* NULL: not given */
    const char *form[4]; /* the spelling first used of help, version, bundle, detach */
};

static int is_true(const char *value) {
    return value == NULL || in_list(TRUE_WORDS, value, strlen(value));
}

static int form_slot(const char *long_) {
    static const char *const LONGS[] = {NVHOOK_FLAG_HELP, NVHOOK_FLAG_VERSION, NVHOOK_FLAG_BUNDLE,
                                        NVHOOK_FLAG_DETACH, NULL};
    for (int i = 0; LONGS[i]; i++)
        if (strcmp(LONGS[i], long_) == 0) return i;
    return -1;
}

/* Go's flag.FlagSet.Parse from args[start]; the index of the first non-flag, or -1 where
 * runc refuses the command line (oci.argv._parse_flags raises ArgvError). */
static int parse_flags(char *const *args, int n, int start, const struct table *t,
                       struct flags *out) {
    int i = start;
    while (i < n) {
        const char *arg = args[i];
        if (arg[0] != '-' || arg[1] == '\0') break;
        if (strcmp(arg, "--") == 0) return i + 1;
        const char *body = arg[1] == '-' ? arg + 2 : arg + 1;
        if (body[0] == '\0' || body[0] == '-' || body[0] == '=') return -1;
        size_t len = strcspn(body, "=");
        const char *value = body[len] == '=' ? body + len + 1 : NULL;
        const char *spelled; /* the table's entry for this name: a stable string */
        if ((spelled = find(t->bools, body, len)) != NULL) {
            if (value && !in_list(TRUE_WORDS, value, strlen(value)) &&
                !in_list(FALSE_WORDS, value, strlen(value)))
                return -1;
        } else if ((spelled = find(t->values, body, len)) != NULL) {
            if (value == NULL) {
                if (i + 1 >= n) return -1;
                value = args[++i];
            }
        } else { /* unknown: skipped as a boolean */
            i++;
            continue;
        }
        const char *long_ = long_name(t, spelled);
        if (strcmp(long_, NVHOOK_FLAG_HELP) == 0) out->help = is_true(value);
        if (strcmp(long_, NVHOOK_FLAG_VERSION) == 0) out->version = is_true(value);
        if (strcmp(long_, NVHOOK_FLAG_BUNDLE) == 0) out->bundle = value;
        int slot = form_slot(long_);
        if (slot >= 0) {
            if (out->form[slot] == NULL)
                out->form[slot] = spelled;
            else if (strcmp(out->form[slot], spelled) != 0)
                return -1; /* runc: cannot use two forms of the same flag */
        }
        i++;
    }
    return i;
}

/* urfave's argIsFlag: one of the command's flags ("-" and "--" never are). */
static int is_flag_of(const struct table *t, const char *arg) {
    if (arg[0] != '-' || strcmp(arg, "-") == 0 || strcmp(arg, "--") == 0) return 0;
    const char *p = arg;
    if (p[0] == '-' && p[1] == '-') p += 2;
    if (p[0] == '-') p += 1;
    size_t len = strcspn(p, "=");
    return in_list(t->values, p, len) || in_list(t->bools, p, len);
}

/* urfave/cli v1.22 reorderArgs (oci.argv._reorder) of args[0..n) into out (n slots):
 * the command's flags first, each with the argument after it when written without "="
 * unless that argument is one of the command's flags; a "--" not taken as a value goes
 * before the other arguments and ends the reordering. others: n slots of scratch. */
static void reorder(char *const *args, int n, const struct table *t, char **out, char **others) {
    int nflags = 0, nothers = 0, value_may_follow = 0;
    for (int k = 0; k < n; k++) {
        int is_flag = is_flag_of(t, args[k]);
        if (value_may_follow && !is_flag) {
            value_may_follow = 0;
            out[nflags++] = args[k];
        } else if (strcmp(args[k], "--") == 0) {
            memmove(others + 1, others, (size_t)nothers * sizeof *others);
            others[0] = args[k];
            nothers++;
            while (++k < n) others[nothers++] = args[k];
            break;
        } else if (is_flag) {
            out[nflags++] = args[k];
            value_may_follow = strchr(args[k], '=') == NULL;
        } else {
            others[nothers++] = args[k];
        }
    }
    memcpy(out + nflags, others, (size_t)nothers * sizeof *others);
}

/* 1: create/run that runs (bundle set in *bundle); 0: any other call; -1: doubt. */
static int classify(int argc, char **argv, const char **bundle, const char **id,
                    const char **command_name) {
    char **args = argv + 1;
    int n = argc - 1;
    struct flags global = {0};
    int i = parse_flags(args, n, 0, &GLOBAL, &global);
    if (i < 0) return -1;
    if (global.version) return -1; /* the shim prints nvhook's version before the runtime's */
    if (i >= n || global.help) return 0;
    const struct table *t;
    if (strcmp(args[i], NVHOOK_CMD_CREATE) == 0)
        t = &CREATE;
    else if (strcmp(args[i], NVHOOK_CMD_RUN) == 0)
        t = &RUN;
    else
        return 0;
    int rest = n - i - 1;
    char **moved = calloc(2 * (size_t)rest + 2, sizeof *moved);
    if (moved == NULL) return -1;
    reorder(args + i + 1, rest, t, moved, moved + rest + 1);
    struct flags command = {0};
    int j = parse_flags(moved, rest, 0, t, &command);
    *id = j >= 0 && j < rest ? moved[j] : NULL;
    free(moved);
    if (j < 0) return -1;
    if (command.help) return 0;
    if (rest - j != 1) return -1; /* runc: requires exactly 1 argument */
    *bundle = command.bundle ? command.bundle : "";
    *command_name = args[i];
    return 1;
}

/* --- the data file the Python side wrote ------------------------------------------- */

struct data {
    char buf[MAX_DATA + 1];
    const char *log; /* the shim's log, when it records creates that ask for nothing */
    const char *runtimes[MAX_ITEMS];
    const char *triggers[MAX_ITEMS];
    int nruntimes, ntriggers;
};

/* FNV-1a, 64 bits (oci._cache.fnv1a64): the algorithm's offset basis and prime. */
static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

/* An absolute path that os.path.abspath leaves as it is. */
static int normalised(const char *p) {
    size_t n = strlen(p);
    if (p[0] != '/' || n >= PATH_MAX) return 0;
    if (n > 1 && p[n - 1] == '/') return 0;
    if (strstr(p, "//") || strstr(p, "/./") || strstr(p, "/../")) return 0;
    if ((n >= 2 && strcmp(p + n - 2, "/.") == 0) || (n >= 3 && strcmp(p + n - 3, "/..") == 0))
        return 0;
    return 1;
}

/* Read fd (a regular file of at most limit bytes) into buf; its length, or -1. */
static long read_all(int fd, char *buf, long limit) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > limit) return -1;
    long got = 0;
    for (;;) {
        ssize_t r = read(fd, buf + got, (size_t)(limit + 1 - got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += r;
        if (got > limit) return -1;
    }
    return got == st.st_size ? got : -1;
}

/* The next line of the data file: "key value", value non-empty; NULL at a mismatch. */
static char *field(char **cursor, const char *key) {
    char *line = *cursor;
    char *nl = strchr(line, '\n');
    size_t k = strlen(key);
    if (nl == NULL || strncmp(line, key, k) != 0 || line[k] != ' ' || line + k + 1 == nl)
        return NULL;
    *nl = '\0';
    *cursor = nl + 1;
    return line + k + 1;
}

static int next_is(const char *cursor, const char *key) {
    size_t k = strlen(key);
    return strncmp(cursor, key, k) == 0 && cursor[k] == ' ';
}

/* A trigger the byte search can find: printable ASCII, no quote, no backslash. */
static int searchable(const char *s) {
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e || *s == '"' || *s == '\\') return 0;
    return 1;
}

/* A time in nanoseconds, as Python's st_*time_ns: 0, or -1 when it does not fit. */
static int ns(const struct timespec *t, long long *out) {
    long long sec = (long long)t->tv_sec;
    if (sec > LLONG_MAX / 1000000000LL - 1 || sec < LLONG_MIN / 1000000000LL + 1) return -1;
    *out = sec * 1000000000LL + (long long)t->tv_nsec;
    return 0;
}

static int load_data(struct data *d) {
    const char *named = getenv(NVHOOK_ENV_CONFIG);
    int explicit = named != NULL && named[0] != '\0';
    const char *config = explicit ? named : NVHOOK_DEFAULT_CONFIG;
    const char *dir = cache_dir();
    if (!normalised(config) || dir[0] != '/') return -1;

    char identity[160];
    struct stat st;
    if (stat(config, &st) != 0) {
        if (errno != ENOENT || explicit) return -1; /* the shim fails: let it say why */
        snprintf(identity, sizeof identity, "%s", NVHOOK_DATA_ABSENT);
    } else { /* nvhook.native._identity: dev-ino-size-mtime_ns-ctime_ns */
        long long mtime, ctime;
        if (ns(&st.st_mtim, &mtime) || ns(&st.st_ctim, &ctime)) return -1;
        snprintf(identity, sizeof identity, "%llu-%llu-%lld-%lld-%lld",
                 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
                 (long long)st.st_size, mtime, ctime);
    }
    char name[256];
    snprintf(name, sizeof name, NVHOOK_DATA_PREFIX "%016llx-%s",
             (unsigned long long)fnv1a64(config), identity);

    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return -1;
    uid_t euid = geteuid();
    if (fstat(dfd, &st) != 0 || st.st_uid != euid || (st.st_mode & 022)) {
        close(dfd);
        return -1;
    }
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    close(dfd);
    if (fd < 0) return -1;
    long len = -1;
    if (fstat(fd, &st) == 0 && st.st_uid == euid && (st.st_mode & 07777) == 0600)
        len = read_all(fd, d->buf, MAX_DATA);
    close(fd);
    if (len <= 0 || memchr(d->buf, '\0', (size_t)len) || d->buf[len - 1] != '\n') return -1;
    d->buf[len] = '\0';

    char *cursor = d->buf;
    const char *v;
    if ((v = field(&cursor, NVHOOK_DATA_MAGIC)) == NULL || strcmp(v, NVHOOK_DATA_FORMAT) != 0)
        return -1;
    if ((v = field(&cursor, NVHOOK_DATA_CONFIG)) == NULL || strcmp(v, config) != 0) return -1;
    if ((v = field(&cursor, NVHOOK_DATA_SETTINGS)) == NULL || strcmp(v, identity) != 0)
        return -1;
    if (next_is(cursor, NVHOOK_DATA_LOG) &&
        ((d->log = field(&cursor, NVHOOK_DATA_LOG)) == NULL || d->log[0] != '/'))
        return -1;
    while (next_is(cursor, NVHOOK_DATA_RUNTIME)) {
        if (d->nruntimes == MAX_ITEMS) return -1;
        if ((d->runtimes[d->nruntimes++] = field(&cursor, NVHOOK_DATA_RUNTIME)) == NULL)
            return -1;
    }
    while (next_is(cursor, NVHOOK_DATA_TRIGGER)) {
        const char *trigger;
        if (d->ntriggers == MAX_ITEMS) return -1;
        if ((trigger = field(&cursor, NVHOOK_DATA_TRIGGER)) == NULL || !searchable(trigger))
            return -1;
        d->triggers[d->ntriggers++] = trigger;
    }
    /* a handover line or anything unexpected fails here */
    if (strcmp(cursor, NVHOOK_DATA_END "\n") != 0 || d->nruntimes == 0 || d->ntriggers == 0)
        return -1;
    return 0;
}

/* --- the bundle's config.json ------------------------------------------------------ */

/* 0: config.json holds no trigger and no escape that could spell one; -1: doubt. */
static int asks_for_nothing(const char *bundle, const struct data *d) {
    char path[PATH_MAX];
    int n = bundle[0] ? snprintf(path, sizeof path, "%s/" NVHOOK_CONFIG_JSON, bundle)
                      : snprintf(path, sizeof path, NVHOOK_CONFIG_JSON);
    if (n < 0 || (size_t)n >= sizeof path) return -1;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    char *buf = NULL;
    long len = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= MAX_SPEC &&
        (buf = malloc((size_t)st.st_size + 1)) != NULL)
        len = read_all(fd, buf, (long)st.st_size);
    close(fd);
    int verdict = len < 0 ? -1 : 0;
    /* a byte order mark: oci.jsoncodec.loadb refuses it (as Go does), and so the shim */
    if (verdict == 0 && len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0) verdict = -1;
    if (verdict == 0 && (memmem(buf, (size_t)len, "\\u", 2) || memmem(buf, (size_t)len, "\\/", 2)))
        verdict = -1;
    for (int i = 0; verdict == 0 && i < d->ntriggers; i++)
        if (memmem(buf, (size_t)len, d->triggers[i], strlen(d->triggers[i]))) verdict = -1;
    free(buf);
    return verdict;
}

/* --- the runtime, as nvhook.shim.find_runtime finds it ----------------------------- */

/* An executable regular file that is not this program: not the same file (device and
 * inode, links followed), so that no link to it, symbolic or hard, is exec'd as the runtime. */
static int usable(const char *path, const struct stat *me) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || access(path, X_OK) != 0) return 0;
    return st.st_dev != me->st_dev || st.st_ino != me->st_ino;
}

/* The runtime's path into path (PATH_MAX bytes): 0, or -1 (none, or a doubt). */
static int find_runtime(const struct data *d, char *path) {
    struct stat me;
    if (stat("/proc/self/exe", &me) != 0) return -1;
    const char *search = getenv("PATH");
    if (search == NULL || search[0] == '\0') search = NVHOOK_DEFAULT_PATH;
    for (int i = 0; i < d->nruntimes; i++) {
        const char *name = d->runtimes[i];
        if (strchr(name, '/')) {
            if (strlen(name) >= PATH_MAX) return -1;
            if (usable(name, &me)) {
                strcpy(path, name);
                return 0;
            }
            continue;
        }
        for (const char *p = search;; p++) {
            size_t len = strcspn(p, ":");
            const char *dirname = len ? p : ".";
            size_t dlen = len ? len : 1;
            const char *sep = dirname[dlen - 1] == '/' ? "" : "/";
            int w = snprintf(path, PATH_MAX, "%.*s%s%s", (int)dlen, dirname, sep, name);
            if (w < 0 || w >= PATH_MAX) return -1;
            if (usable(path, &me)) return 0;
            p += len;
            if (*p == '\0') break;
        }
    }
    return -1;
}

/* --- the shim's log line for a create that asks for nothing ------------------------ */

/* What nvhook.shim._log writes for it (level info), when id needs no JSON escape (its keys
 * are the shim's record's, spelled here: test_frontend.py compares the two lines);
 * 0, or -1 (an id the line cannot hold as it is: the shim writes it). Never fails a call. */
static int log_create(const struct data *d, const char *command, const char *id,
                      const struct timespec *started) {
    if (d->log == NULL) return 0;
    if (!searchable(id)) return -1;
    struct timespec now;
    struct tm tm;
    char when[32], ms[32], line[1024];
    time_t t = time(NULL);
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (gmtime_r(&t, &tm) == NULL || strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        return 0;
    double elapsed = (double)(now.tv_sec - started->tv_sec) * 1e3 +
                     (double)(now.tv_nsec - started->tv_nsec) / 1e6;
    snprintf(ms, sizeof ms, "%.2f", elapsed); /* Python's repr of round(x, 2): 1.0, 0.1, 0.12 */
    size_t n = strlen(ms);
    while (n > 0 && ms[n - 1] == '0' && ms[n - 2] != '.') ms[--n] = '\0';
    int w = snprintf(line, sizeof line,
                     "{\"time\":\"%s\",\"level\":\"info\",\"id\":\"%s\",\"command\":\"%s\","
                     "\"mode\":null,\"devices\":\"\",\"written\":false,\"duration_ms\":%s,"
                     "\"pid\":%ld}\n",
                     when, id, command, ms, (long)getpid());
    if (w < 0 || (size_t)w >= sizeof line) return -1;
    int fd = open(d->log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, NVHOOK_LOG_MODE);
    if (fd >= 0) {
        ssize_t r = write(fd, line, (size_t)w);
        (void)r; /* a log must not fail a start, as in the shim */
        close(fd);
    }
    return 0;
}

int main(int argc, char **argv) {
    struct timespec started;
    clock_gettime(CLOCK_MONOTONIC, &started);
    original = argv;
    original_argc = argc;
    if (argc < 1) handover();
    const char *bundle = NULL, *id = NULL, *command = NULL;
    int kind = classify(argc, argv, &bundle, &id, &command);
    if (kind < 0) delegate();
    static struct data d;
    if (load_data(&d) != 0) delegate();
    if (kind == 1 && asks_for_nothing(bundle, &d) != 0) delegate();
    static char path[PATH_MAX];
    if (find_runtime(&d, path) != 0) delegate(); /* the shim says what is missing */
    if (kind == 1 && log_create(&d, command, id, &started) != 0) delegate();
    original[0] = path;
    execv(path, original);
    handover(); /* the shim reports why exec failed */
}
