/*
 * nvhook-hook, the native hook (issue 16 item 3; docs/architecture.md D13): the
 * createContainer work without starting Python.
 *
 * Every GPU container runs `nvhook-hook create-container` once, in its namespaces, before
 * pivot_root; CPython's start alone is several times what ldconfig costs. This program
 * does what nvhook.hook.create_container.create_container does, step for step and byte for byte:
 *
 *   create-container [--params FILE] [--link TARGET::LINK]... [--device-link TARGET::LINK]...
 *                    [--folder DIR]... [--ldconfig PATH] [--cuda-compat VERSION]
 *                    [--application-profile FILE]
 *
 * (and update-ldcache and create-symlinks, the same with fewer options), where it is
 * certain of the outcome: the OCI state on stdin and the bundle's config.json parse and
 * pass the checks oci.state.State.parse and oci.bundle.check_spec make; the kernel has
 * openat2 (every rootfs path is resolved with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS, as
 * nvhook/rootfs/safepath.py does); the text it writes or compares is printable ASCII.
 *
 * Any doubt (another command or option, a parse error, a limit, an errno it does not
 * expect, a link in the way, a folder that does not resolve, a compat variable in the
 * container's env...) hands the call over: the Python hook (NVHOOK_LAUNCHER, compiled in)
 * is exec'd with the argv unchanged and the same state on stdin (replayed from a memfd),
 * and decides as it always has: it prints the notes, the refusals and their exit codes.
 * Every step is checked before anything is written, so a doubt hands over the rootfs as it
 * was; after the first write, only where the Python hook, run again from the start, does
 * what it would have done alone (see main).
 *
 * The ld cache step is the Python hook's: our conf file (a temp file renamed over it, no
 * fsync), ld.so.conf with the include line when the image has none (fsync'd), then the
 * host's ldconfig -r ROOTFS with an empty environment and RLIMIT_DATA capped, in a private
 * mount namespace with every procfs under the rootfs detached when there is one (see
 * nvhook/hook/update_ldcache.py for why). libc only; build with
 * -DNVHOOK_LAUNCHER='"/path/nvhook-hook.py"'. NVHOOK_HOOK_TRACE=1 (a boolean, read as
 * nvhook.native.contract.trace_enabled reads it) in the environment prints the source line
 * of each handover.
 *
 * main runs the steps of create-container one after the other, each a function returning a
 * status (OK, HAND_OVER, or an exit code); buffers and descriptors a step owns go with
 * cleanup attributes (autofree, autoclose: crun's style).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef NVHOOK_LAUNCHER
#error "build with -DNVHOOK_LAUNCHER='\"/absolute/path/of/nvhook-hook.py\"'"
#endif

/* Every value shared with Python (exit codes, paths, names, limits, options): generated
 * from the Python values by nvhook/native/contract.py. */
#include "nvhook-contract.h"
#include "nvhook-launcher.h"

#define PROGRAM NVHOOK_HOOK_PROGRAM
#define EXIT_HOOK NVHOOK_EXIT_HOOK
#define CONF_DIR NVHOOK_CONF_DIR
#define CONF_NAME NVHOOK_CONF_NAME
#define LD_SO_CONF NVHOOK_LD_SO_CONF
#define MAX_LD_SO_CONF NVHOOK_READ_FILE_LIMIT /* what RootFd.read_file reads of ld.so.conf */
/* This program's own limits: beyond them, a handover. */
#define MAX_STATE (1 << 20)          /* the OCI state on stdin */
#define MAX_CONFIG (4 << 20)         /* config.json; a larger one goes to Python */
#define MAX_ITEMS 512                /* --link and --folder values */
#define MAX_DEPTH NVHOOK_JSON_MAX_DEPTH /* JSON nesting: what oci.jsoncodec reads */
#define MAX_PROCFS 64                /* procfs mounts under the rootfs */

/* The newer syscalls' numbers where the C library's headers predate them: the same on every
 * architecture of the unified table (x86, arm, arm64, powerpc, s390, riscv); elsewhere
 * (alpha, ia64, mips) a build needs headers that know them. */
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || defined(__arm__) || \
    defined(__powerpc__) || defined(__s390__) || defined(__riscv)
#define NVHOOK_UNIFIED_SYSCALLS 1
#endif
#if !defined(NVHOOK_UNIFIED_SYSCALLS) && !(defined(SYS_openat2) && defined(SYS_open_tree) && \
                                           defined(SYS_move_mount) && defined(SYS_mount_setattr))
#error "openat2, open_tree, move_mount or mount_setattr unknown here: build with newer headers"
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
/* linux/openat2.h (not every C library's headers have it) */
#define RESOLVE_NO_MAGICLINKS_ 0x02
#define RESOLVE_IN_ROOT_ 0x10

struct open_how_ {
    uint64_t flags, mode, resolve;
};

static char **original; /* argv as given */
static int original_argc;
static const char *state_data; /* what was read from stdin, replayed on handover */
static size_t state_len;
static int stdin_read; /* 1 once stdin was read (to EOF, or to the limit: 2) */

/* --- handing over -------------------------------------------------------------------- */

/* Write all of data to fd: 0, or -1 with errno. */
static int write_all(int fd, const char *data, size_t len) {
    for (size_t done = 0; done < len;) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        done += (size_t)w;
    }
    return 0;
}

/* 2 * bytes random hex digits and a NUL into out (names nobody can guess): 0, or -1. */
static int random_hex(char *out, size_t bytes) {
    unsigned char rnd[16];
    if (bytes > sizeof rnd || syscall(SYS_getrandom, rnd, bytes, 0) != (long)bytes) return -1;
    for (size_t i = 0; i < bytes; i++) sprintf(out + 2 * i, "%02x", rnd[i]);
    return 0;
}

/* Copy the rest of fd 0 into out (after a read that stopped at the limit). */
static int copy_rest(int out) {
    char buf[65536];
    for (;;) {
        ssize_t r = read(0, buf, sizeof buf);
        if (r == 0) return 0;
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (write_all(out, buf, (size_t)r)) return -1;
    }
}

/* Hand the call, unchanged, to the Python hook (the state it was given on stdin again). */
static void handover(void) __attribute__((noreturn));
static void forget_params(void);
static void handover(void) {
    forget_params(); /* a private params file made for a mount not attached */
    if (stdin_read) {
        /* MFD_CLOEXEC: linux/memfd.h */
        int fd = (int)syscall(SYS_memfd_create, PROGRAM "-state", 1U);
        if (fd < 0 || write_all(fd, state_data, state_len) || (stdin_read == 2 && copy_rest(fd)) ||
            lseek(fd, 0, SEEK_SET) != 0 || dup2(fd, 0) != 0) {
            dprintf(2, PROGRAM ": cannot hand the container state over to %s: %s\n",
                    NVHOOK_LAUNCHER, strerror(errno ? errno : EIO));
            _exit(EXIT_HOOK);
        }
    }
    char *fallback[2] = {(char *)NVHOOK_LAUNCHER, NULL};
    char **argv = original_argc >= 1 ? original : fallback;
    argv[0] = (char *)NVHOOK_LAUNCHER;
    execv(NVHOOK_LAUNCHER, argv);
    int error = errno;
    if (error == ENOENT) interpreter_gone(PROGRAM, EXIT_HOOK);
    dprintf(2, PROGRAM ": cannot exec %s: %s\n", NVHOOK_LAUNCHER, strerror(error));
    _exit(EXIT_HOOK);
}

/* --- statuses and cleanups ------------------------------------------------------------ */

/* What a step returns: OK (go on), HAND_OVER (a doubt: the Python hook decides), or an exit
 * code (> 0: the call ends with it, its message written). */
enum { OK = 0, HAND_OVER = -1 };

/* NVHOOK_HOOK_TRACE as nvhook.native.contract.trace_enabled reads it: Go's ParseBool true
 * once blanks are stripped. */
static int tracing(void) {
    static const char *const TRUE_WORDS[] = NVHOOK_TRUE_WORDS;
    const char *value = getenv(NVHOOK_ENV_HOOK_TRACE);
    if (value == NULL) return 0;
    value += strspn(value, NVHOOK_BOOL_BLANKS);
    size_t len = strlen(value);
    while (len > 0 && strchr(NVHOOK_BOOL_BLANKS, value[len - 1])) len--;
    for (const char *const *w = TRUE_WORDS; *w; w++)
        if (strlen(*w) == len && !memcmp(*w, value, len)) return 1;
    return 0;
}

/* A doubt at a source line: HAND_OVER, traced when asked. */
static int doubt(int line) {
    if (tracing()) dprintf(2, PROGRAM ": handing over (line %d)\n", line);
    return HAND_OVER;
}

/* In a step: a condition that must hold, else the call is handed over. */
#define CHECK(cond)                                  \
    do {                                             \
        if (!(cond)) return doubt(__LINE__);         \
    } while (0)
#define DOUBT() return doubt(__LINE__)

static void free_ptr(void *p) { free(*(void **)p); }
static void close_fd(const int *fd) {
    if (*fd >= 0) close(*fd);
}
#define autofree __attribute__((cleanup(free_ptr)))
#define autoclose __attribute__((cleanup(close_fd)))

/* --- a strict JSON reader (oci/jsoncodec.py's rules; anything it might read differently
 * is a doubt) ----------------------------------------------------------------------------
 * Tokens in document order; each knows where its subtree ends, so lookups skip siblings.
 * Strings are unescaped into a pool, NUL-terminated; a NUL, a lone surrogate or invalid
 * UTF-8 is a doubt. */

enum { J_NULL, J_BOOL, J_INT, J_FLOAT, J_STR, J_ARR, J_OBJ };

struct tok {
    int type;
    unsigned end;    /* index after this token's subtree */
    const char *s;   /* J_STR: the unescaped text; J_INT/J_FLOAT: the literal (both in the
                      * pool, NUL-terminated) */
    size_t len;
};

struct doc {
    struct tok *t;
    unsigned n, cap;
    char *pool;
    size_t used;
    const char *p, *e;
};

static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned cp;
        if (c >= 0xC2 && c <= 0xDF) k = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) k = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) k = 3, cp = c & 0x07;
        else return 0;
        if (n - i <= k) return 0; /* k continuation bytes must follow */
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}

static int new_tok(struct doc *d, int type) {
    if (d->n == d->cap) {
        unsigned cap = d->cap ? d->cap * 2 : 256;
        struct tok *t = realloc(d->t, cap * sizeof *t);
        if (!t) return -1;
        d->t = t, d->cap = cap;
    }
    d->t[d->n] = (struct tok){type, 0, NULL, 0};
    return (int)d->n++;
}

static void skip_ws(struct doc *d) {
    while (d->p < d->e && (*d->p == ' ' || *d->p == '\t' || *d->p == '\n' || *d->p == '\r'))
        d->p++;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static int parse_string(struct doc *d, const char **out, size_t *len) {
    d->p++; /* the opening quote */
    char *o = d->pool + d->used, *start = o;
    while (d->p < d->e) {
        unsigned char c = (unsigned char)*d->p;
        if (c == '"') {
            d->p++;
            *o++ = '\0';
            *out = start, *len = (size_t)(o - start - 1);
            d->used += (size_t)(o - start);
            return 0;
        }
        if (c < 0x20) return -1;
        if (c != '\\') {
            *o++ = (char)c, d->p++;
            continue;
        }
        if (d->e - d->p < 2) return -1;
        char x = d->p[1];
        d->p += 2;
        switch (x) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (d->e - d->p < 4 || hex4(d->p, &cp)) return -1;
            d->p += 4;
            if (cp == 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return -1;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (d->e - d->p < 6 || d->p[0] != '\\' || d->p[1] != 'u' || hex4(d->p + 2, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return -1;
                d->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            /* at most 4 bytes out for 6 or 12 bytes in: the pool never overflows */
            if (cp < 0x80) {
                *o++ = (char)cp;
            } else if (cp < 0x800) {
                *o++ = (char)(0xC0 | cp >> 6), *o++ = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                *o++ = (char)(0xE0 | cp >> 12), *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
                *o++ = (char)(0x80 | (cp & 0x3F));
            } else {
                *o++ = (char)(0xF0 | cp >> 18), *o++ = (char)(0x80 | (cp >> 12 & 0x3F));
                *o++ = (char)(0x80 | (cp >> 6 & 0x3F)), *o++ = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default: return -1;
        }
    }
    return -1;
}

static int parse_number(struct doc *d, int i) {
    const char *s = d->p;
    int fl = 0;
    if (d->p < d->e && *d->p == '-') d->p++;
    if (d->p >= d->e) return -1;
    if (*d->p == '0') {
        d->p++;
    } else if (*d->p >= '1' && *d->p <= '9') {
        while (d->p < d->e && *d->p >= '0' && *d->p <= '9') d->p++;
    } else {
        return -1;
    }
    if (d->p < d->e && *d->p == '.') {
        fl = 1, d->p++;
        if (d->p >= d->e || *d->p < '0' || *d->p > '9') return -1;
        while (d->p < d->e && *d->p >= '0' && *d->p <= '9') d->p++;
    }
    if (d->p < d->e && (*d->p == 'e' || *d->p == 'E')) {
        fl = 1, d->p++;
        if (d->p < d->e && (*d->p == '+' || *d->p == '-')) d->p++;
        if (d->p >= d->e || *d->p < '0' || *d->p > '9') return -1;
        while (d->p < d->e && *d->p >= '0' && *d->p <= '9') d->p++;
    }
    size_t len = (size_t)(d->p - s);
    if (len > 400) return -1; /* Python's 4300-digit limit, a float's range: not worth it */
    if (fl) {
        char buf[401];
        memcpy(buf, s, len), buf[len] = '\0';
        errno = 0;
        (void)strtod(buf, NULL);
        if (errno == ERANGE) return -1; /* 1e400 is refused; 1e-400 is a doubt */
    }
    d->t[i].type = fl ? J_FLOAT : J_INT;
    /* a NUL-terminated copy in the pool: a number's text plus its NUL never needs more than
     * the bytes around it in the input (a delimiter), nor a string's more than its quotes */
    char *copy = d->pool + d->used;
    memcpy(copy, s, len), copy[len] = '\0';
    d->used += len + 1;
    d->t[i].s = copy, d->t[i].len = len;
    return 0;
}

static int parse_value(struct doc *d, int depth) {
    skip_ws(d);
    if (d->p >= d->e || depth > MAX_DEPTH) return -1;
    int i = new_tok(d, J_NULL);
    if (i < 0) return -1;
    char c = *d->p;
    if (c == '{' || c == '[') {
        d->t[i].type = c == '{' ? J_OBJ : J_ARR;
        char close = c == '{' ? '}' : ']';
        d->p++;
        skip_ws(d);
        if (d->p < d->e && *d->p == close) {
            d->p++;
        } else {
            for (;;) {
                if (c == '{') {
                    skip_ws(d);
                    if (d->p >= d->e || *d->p != '"') return -1;
                    if (parse_value(d, depth + 1)) return -1; /* the key, a J_STR */
                    skip_ws(d);
                    if (d->p >= d->e || *d->p != ':') return -1;
                    d->p++;
                }
                if (parse_value(d, depth + 1)) return -1;
                skip_ws(d);
                if (d->p < d->e && *d->p == ',') {
                    d->p++;
                    continue;
                }
                if (d->p < d->e && *d->p == close) {
                    d->p++;
                    break;
                }
                return -1;
            }
        }
    } else if (c == '"') {
        d->t[i].type = J_STR;
        if (parse_string(d, &d->t[i].s, &d->t[i].len)) return -1;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        if (parse_number(d, i)) return -1;
    } else if (d->e - d->p >= 4 && !memcmp(d->p, "null", 4)) {
        d->p += 4;
    } else if (d->e - d->p >= 4 && !memcmp(d->p, "true", 4)) {
        d->t[i].type = J_BOOL, d->p += 4;
    } else if (d->e - d->p >= 5 && !memcmp(d->p, "false", 5)) {
        d->t[i].type = J_BOOL, d->p += 5;
    } else {
        return -1;
    }
    d->t[i].end = d->n;
    return 0;
}

/* Parse data[0:len] as one JSON value; 0, or -1 for anything doubtful. */
static int parse_doc(struct doc *d, const char *data, size_t len) {
    memset(d, 0, sizeof *d);
    if (!utf8_valid((const unsigned char *)data, len)) return -1;
    d->pool = malloc(len + 1);
    if (!d->pool) return -1;
    d->p = data, d->e = data + len;
    if (parse_value(d, 0)) return -1;
    skip_ws(d);
    return d->p == d->e ? 0 : -1;
}

/* The value of key in the object at token obj (the last one, as Python keeps it), or -1. */
static int get(const struct doc *d, int obj, const char *key) {
    if (obj < 0 || d->t[obj].type != J_OBJ) return -1;
    int found = -1;
    for (unsigned k = (unsigned)obj + 1; k < d->t[obj].end;) {
        unsigned v = k + 1;
        if (!strcmp(d->t[k].s, key)) found = (int)v; /* no NUL in a key: a doubt */
        k = d->t[v].end;
    }
    return found;
}

/* --- oci.state.State.parse and oci.bundle.check_spec, as yes/no ------------------------ */

static int is_type(const struct doc *d, int i, int type) { return i >= 0 && d->t[i].type == type; }

/* An integer literal from 0 to max (no sign, no fraction). */
static int is_uint(const struct doc *d, int i, unsigned long long max) {
    if (!is_type(d, i, J_INT) || d->t[i].s[0] == '-' || d->t[i].len > 19) return 0;
    char buf[24];
    memcpy(buf, d->t[i].s, d->t[i].len), buf[d->t[i].len] = '\0';
    return strtoull(buf, NULL, 10) <= max;
}

/* Each item of the array at i is a type (for J_OBJ: with a string field `required`). */
static int all_items(const struct doc *d, int i, int type, const char *required) {
    if (!is_type(d, i, J_ARR)) return 0;
    for (unsigned k = (unsigned)i + 1; k < d->t[i].end; k = d->t[k].end) {
        if (d->t[k].type != type) return 0;
        if (required && !is_type(d, get(d, (int)k, required), J_STR)) return 0;
    }
    return 1;
}

/* Each value of the object at i is of `type` (arrays of objects with `required`: J_ARR). */
static int all_values(const struct doc *d, int i, int type, const char *required) {
    if (!is_type(d, i, J_OBJ)) return 0;
    for (unsigned k = (unsigned)i + 1; k < d->t[i].end;) {
        unsigned v = k + 1;
        if (type == J_ARR ? !all_items(d, (int)v, J_OBJ, required) : d->t[v].type != type)
            return 0;
        k = d->t[v].end;
    }
    return 1;
}

/* `key` absent from the object at i, or present and passing `ok`. */
#define ABSENT_OR(d, i, key, ok) (get(d, i, key) < 0 || (ok))

static int state_ok(const struct doc *d) {
    if (!is_type(d, 0, J_OBJ)) return 0;
    const char *keys[] = {"ociVersion", "id", "status", "bundle"};
    for (size_t k = 0; k < 4; k++)
        if (!is_type(d, get(d, 0, keys[k]), J_STR)) return 0;
    int id = get(d, 0, "id"), bundle = get(d, 0, "bundle"), pid = get(d, 0, "pid");
    int ann = get(d, 0, "annotations");
    return d->t[id].len > 0 && d->t[bundle].s[0] == '/' &&
           (pid < 0 || is_type(d, pid, J_NULL) || is_uint(d, pid, ~0ULL >> 1)) &&
           (ann < 0 || is_type(d, ann, J_NULL) || all_values(d, ann, J_STR, NULL));
}

static int spec_ok(const struct doc *d) {
    const unsigned long long u32 = 0xFFFFFFFFULL;
    if (!is_type(d, 0, J_OBJ)) return 0;
    int process = get(d, 0, "process");
    if (process >= 0) {
        if (!is_type(d, process, J_OBJ)) return 0;
        if (!ABSENT_OR(d, process, "env", all_items(d, get(d, process, "env"), J_STR, NULL)))
            return 0;
        int user = get(d, process, "user");
        if (user >= 0) {
            if (!is_type(d, user, J_OBJ)) return 0;
            if (!ABSENT_OR(d, user, "uid", is_uint(d, get(d, user, "uid"), u32)) ||
                !ABSENT_OR(d, user, "gid", is_uint(d, get(d, user, "gid"), u32)))
                return 0;
            int gids = get(d, user, "additionalGids");
            if (gids >= 0) {
                if (!is_type(d, gids, J_ARR)) return 0;
                for (unsigned k = (unsigned)gids + 1; k < d->t[gids].end; k = d->t[k].end)
                    if (!is_uint(d, (int)k, u32)) return 0;
            }
        }
    }
    int root = get(d, 0, "root");
    if (root >= 0 && (!is_type(d, root, J_OBJ) ||
                      !ABSENT_OR(d, root, "path", is_type(d, get(d, root, "path"), J_STR))))
        return 0;
    if (!ABSENT_OR(d, 0, "mounts", all_items(d, get(d, 0, "mounts"), J_OBJ, "destination")) ||
        !ABSENT_OR(d, 0, "hooks", all_values(d, get(d, 0, "hooks"), J_ARR, "path")) ||
        !ABSENT_OR(d, 0, "annotations", all_values(d, get(d, 0, "annotations"), J_STR, NULL)))
        return 0;
    int linux_ = get(d, 0, "linux");
    if (linux_ >= 0) {
        if (!is_type(d, linux_, J_OBJ)) return 0;
        if (!ABSENT_OR(d, linux_, "devices",
                       all_items(d, get(d, linux_, "devices"), J_OBJ, "path")))
            return 0;
        int res = get(d, linux_, "resources");
        if (res >= 0 && (!is_type(d, res, J_OBJ) ||
                         !ABSENT_OR(d, res, "devices",
                                    all_items(d, get(d, res, "devices"), J_OBJ, NULL))))
            return 0;
    }
    return 1;
}

/* --- files ------------------------------------------------------------------------------ */

/* Read a whole fd into a malloc'd buffer (at most limit bytes; *more set when there was
 * more). */
static char *read_fd(int fd, size_t limit, size_t *len, int *more) {
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    *more = 0;
    while (buf) {
        if (n == cap) {
            if (cap > limit) {
                *more = 1;
                break;
            }
            char *b = realloc(buf, cap * 2 + 1);
            if (!b) {
                free(buf);
                return NULL;
            }
            buf = b, cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            free(buf);
            return NULL;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    if (buf && n > limit) *more = 1;
    if (buf) buf[n] = '\0', *len = n;
    return buf;
}

static int rootfd = -1;
static int inside_of(int fd, char *out);

/* openat2 inside the root, retried on EAGAIN (safepath._openat2_retry); -1 with errno. */
static int in_root(const char *path, int flags, int mode) {
    struct open_how_ how = {(uint64_t)(flags | O_CLOEXEC), (uint64_t)mode,
                            RESOLVE_IN_ROOT_ | RESOLVE_NO_MAGICLINKS_};
    for (int tries = 0; tries < NVHOOK_EAGAIN_TRIES; tries++) {
        long fd = syscall(SYS_openat2, rootfd, path, &how, sizeof how);
        if (fd >= 0) return (int)fd;
        if (errno != EAGAIN && errno != EINTR) return -1;
    }
    return -1;
}

/* Printable ASCII only (what this program writes or compares without a doubt). */
static int plain(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7F) return 0;
    return 1;
}

/* An absolute path whose components are neither "", "." nor ".." (no "//", no "/" at the
 * end: what posixpath.normpath leaves as it is). */
static int clean_path(const char *p) {
    if (p[0] != '/' || !p[1]) return 0;
    for (const char *c = p; *c;) {
        const char *next = strchr(c + 1, '/');
        size_t len = next ? (size_t)(next - c - 1) : strlen(c + 1);
        if (len == 0 || (len == 1 && c[1] == '.') || (len == 2 && c[1] == '.' && c[2] == '.'))
            return 0;
        if (!next) break;
        c = next;
    }
    return 1;
}

/* Write data to `name` in the directory dirfd: a temp file of that mode renamed over it
 * (write_file). */
static int replace_file(int dirfd, const char *name, const char *data, size_t len, int mode,
                        int sync) {
    char hex[13], tmp[300];
    if (random_hex(hex, 6)) return -1;
    snprintf(tmp, sizeof tmp, ".%.200s.%s.nvhook", name, hex); /* safepath.RootFd.write_file's */
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    int ok = !write_all(fd, data, len);
    if (ok && fchmod(fd, (mode_t)mode)) ok = 0;
    if (ok && sync && fsync(fd)) ok = 0;
    if (close(fd)) ok = 0;
    if (ok && renameat(dirfd, tmp, dirfd, name)) ok = 0;
    if (!ok) {
        int e = errno;
        unlinkat(dirfd, tmp, 0);
        errno = e;
        return -1;
    }
    return 0;
}

/* --- procfs under the rootfs (update_ldcache.procfs_mounts_under) -------------------- */

static void unescape(char *f) {
    char *o = f;
    for (char *i = f; *i;) {
        if (i[0] == '\\' && i[1] >= '0' && i[1] <= '7' && i[2] >= '0' && i[2] <= '7' &&
            i[3] >= '0' && i[3] <= '7') {
            *o++ = (char)((i[1] - '0') * 64 + (i[2] - '0') * 8 + (i[3] - '0'));
            i += 4;
        } else {
            *o++ = *i++;
        }
    }
    *o = '\0';
}

/* The procfs mount points at or under real (count; -1 on a doubt); into out when given. */
static int procfs_under(const char *real, char (*out)[PATH_MAX]) {
    int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t len;
    int more;
    char *text = read_fd(fd, 16 << 20, &len, &more);
    close(fd);
    if (!text || more || memchr(text, '\0', len)) {
        free(text);
        return -1;
    }
    size_t rlen = strlen(real);
    while (rlen > 0 && real[rlen - 1] == '/') rlen--;
    int count = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        char *f[64];
        int n = 0;
        for (char *c = line; c;) {
            if (n == 64) { /* more fields than any mount has: read by Python */
                free(text);
                return -1;
            }
            f[n++] = c;
            c = strchr(c, ' ');
            if (c) *c++ = '\0';
        }
        int sep = -1;
        for (int k = 6; k < n; k++)
            if (!strcmp(f[k], "-")) {
                sep = k;
                break;
            }
        if (sep < 0 || sep + 1 >= n || strcmp(f[sep + 1], "proc")) continue;
        unescape(f[4]);
        if (!strcmp(f[4], real) || (!strncmp(f[4], real, rlen) && f[4][rlen] == '/')) {
            if (count >= MAX_PROCFS || strlen(f[4]) >= PATH_MAX) {
                free(text);
                return -1;
            }
            if (out) strcpy(out[count], f[4]);
            count++;
        }
    }
    free(text);
    return count;
}

/* --- ldconfig -------------------------------------------------------------------------- */

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* In the child: a private mount namespace without the procfs mounts, then exec. */
static void child(char **argv, const char *real, char (*procfs)[PATH_MAX], int nprocfs,
                  int out, int err) __attribute__((noreturn));
static void child(char **argv, const char *real, char (*procfs)[PATH_MAX], int nprocfs,
                  int out, int err) {
    const char *what = "";
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) goto fail;
    if (nprocfs > 0) {
        what = "private mounts";
        if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
            goto fail;
        for (int done = 0; done < nprocfs; done++) { /* the longest first */
            int best = -1;
            for (int k = 0; k < nprocfs; k++)
                if (procfs[k][0] && (best < 0 || strlen(procfs[k]) > strlen(procfs[best])))
                    best = k;
            if (umount2(procfs[best], MNT_DETACH | UMOUNT_NOFOLLOW) && errno != EINVAL &&
                errno != ENOENT)
                goto fail;
            procfs[best][0] = '\0';
        }
        if (procfs_under(real, NULL) != 0) {
            errno = EBUSY;
            goto fail;
        }
    }
    struct rlimit rl;
    what = "RLIMIT_DATA";
    if (getrlimit(RLIMIT_DATA, &rl)) goto fail;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (rlim_t)NVHOOK_LDCONFIG_MAX_DATA)
        rl.rlim_cur = (rlim_t)NVHOOK_LDCONFIG_MAX_DATA;
    if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (rlim_t)NVHOOK_LDCONFIG_MAX_DATA)
        rl.rlim_max = (rlim_t)NVHOOK_LDCONFIG_MAX_DATA;
    if (setrlimit(RLIMIT_DATA, &rl)) goto fail;
    char *empty[] = {NULL};
    what = "exec";
    execve(argv[0], argv, empty);
fail:
    dprintf(err, "%s: %s", what, strerror(errno));
    _exit(127);
}

#define MAX_OUTPUT (16 << 20) /* ldconfig's output kept for its last line */

/* The last line of ldconfig's output as update_ldcache reports it (Python's
 * ``output.strip().splitlines()[-1]``, "no output" when empty) into out: 0, or -1 when the
 * output is not text this reads exactly as Python does (invalid UTF-8, a non-ASCII space or
 * line break, too long). */
static int last_line(const char *text, size_t len, int complete, char *out, size_t cap) {
    if (!complete || !utf8_valid((const unsigned char *)text, len)) return -1;
    for (size_t i = 0; i < len; i++) { /* U+0085, U+00A0, U+1680, U+2000-200A, U+2028/9, ... */
        const unsigned char *u = (const unsigned char *)text + i;
        if ((u[0] == 0xC2 && i + 1 < len && (u[1] == 0x85 || u[1] == 0xA0)) ||
            (u[0] == 0xE1 && i + 2 < len && u[1] == 0x9A && u[2] == 0x80) ||
            (u[0] == 0xE2 && i + 2 < len && u[1] == 0x80 &&
             (u[2] <= 0x8A || u[2] == 0xA8 || u[2] == 0xA9 || u[2] == 0xAF)) ||
            (u[0] == 0xE2 && i + 2 < len && u[1] == 0x81 && u[2] == 0x9F) ||
            (u[0] == 0xE3 && i + 2 < len && u[1] == 0x80 && u[2] == 0x80))
            return -1;
    }
#define SPACE(c) ((c) == ' ' || ((c) >= '\t' && (c) <= '\r') || ((c) >= 0x1C && (c) <= 0x1F))
#define BREAK(c) ((c) == '\n' || (c) == '\r' || (c) == '\v' || (c) == '\f' || \
                  ((c) >= 0x1C && (c) <= 0x1E))
    size_t a = 0, b = len;
    while (a < b && SPACE((unsigned char)text[a])) a++;
    while (b > a && SPACE((unsigned char)text[b - 1])) b--;
    if (a == b) {
        snprintf(out, cap, "no output");
        return 0;
    }
    size_t start = b;
    while (start > a && !BREAK((unsigned char)text[start - 1])) start--;
#undef SPACE
#undef BREAK
    if (b - start >= cap || memchr(text + start, '\0', b - start)) return -1;
    memcpy(out, text + start, b - start), out[b - start] = '\0';
    return 0;
}

/* Run ldconfig (update_ldcache._run_isolated): 0 when it exits 0; 1 when it did not, with
 * Python's status and detail for the "skipped" line in *status and detail ("" when its
 * output is not read exactly as Python would: see last_line); -1 when it could not be run
 * (nothing ran: the caller may hand over). */
static int run_ldconfig(char **argv, const char *real, char (*procfs)[PATH_MAX], int nprocfs,
                        int *status_out, char *detail, size_t cap) {
    int errp[2], outp[2];
    if (pipe2(errp, O_CLOEXEC) || pipe2(outp, O_CLOEXEC)) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) child(argv, real, procfs, nprocfs, outp[1], errp[1]);
    close(errp[1]);
    close(outp[1]);
    char buf[4096];
    ssize_t r, failed = 0;
    while ((r = read(errp[0], buf, sizeof buf)) != 0)
        if (r > 0) failed += r;
        else if (errno != EINTR) break;
    close(errp[0]);
    size_t used = 0, size = 0;
    char *output = NULL;
    int complete = 1;
    long long deadline = now_ms() + NVHOOK_LDCONFIG_TIMEOUT_MS;
    int timed_out = 0;
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd p = {outp[0], POLLIN, 0};
        int n = poll(&p, 1, (int)(left > INT_MAX ? INT_MAX : left));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        if (n == 0) continue;
        r = read(outp[0], buf, sizeof buf); /* ldconfig's output: only shown on failure */
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (used + (size_t)r > MAX_OUTPUT) {
            complete = 0;
            continue;
        }
        if (used + (size_t)r > size) {
            size_t grown = size ? size * 2 : 65536;
            char *o = realloc(output, grown);
            if (!o) {
                complete = 0;
                continue;
            }
            output = o, size = grown;
        }
        memcpy(output + used, buf, (size_t)r), used += (size_t)r;
    }
    close(outp[0]);
    if (timed_out) kill(pid, SIGKILL);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            free(output);
            return -1;
        }
    int result = 1;
    if (failed) {
        result = -1;
    } else if (timed_out) {
        *status_out = -1;
        snprintf(detail, cap, "timed out after %ds", NVHOOK_LDCONFIG_TIMEOUT_MS / 1000);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        result = 0;
    } else {
        /* os.waitstatus_to_exitcode: the exit code, or minus the signal */
        *status_out = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        if (last_line(output ? output : "", used, complete, detail, cap)) detail[0] = '\0';
    }
    free(output);
    return result;
}

static int executable_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* --- create-container ------------------------------------------------------------------ */

struct link {
    const char *target, *path;
    char *dir;        /* the link's folder (in the root, as written) */
    const char *name; /* its last component */
    int device;       /* a --device-link: only when its target is a character device */
    int skip;         /* a device link whose target is not there, a repeat, or in place */
    int missing;      /* its folder is to be made */
};

static char root_host[PATH_MAX]; /* the rootfs as the kernel names it (/proc/self/fd) */

/* The path inside the root of the open fd (safepath.RootFd._inside): 0, or -1. */
static int inside_of(int fd, char *out) {
    char self[64], host[PATH_MAX];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(self, host, sizeof host - 1);
    if (n < 0 || (size_t)n >= sizeof host - 1) return -1;
    host[n] = '\0';
    if (!strcmp(host, root_host)) return strcpy(out, "/"), 0;
    size_t r = strlen(root_host);
    while (r > 0 && root_host[r - 1] == '/') r--;
    if (strncmp(host, root_host, r) || host[r] != '/') return -1;
    strcpy(out, host + r);
    return 0;
}

/* Where the folder dir is in the root once its symlinks are resolved, its missing tail kept
 * (create_symlinks._physical_dir): 0, or -1 on a doubt. */
static int physical_dir(const char *dir, char *out) {
    char cur[PATH_MAX], missing[PATH_MAX] = "";
    if (strlen(dir) >= sizeof cur) return -1;
    strcpy(cur, dir);
    for (;;) {
        int fd = in_root(cur, O_PATH | O_DIRECTORY, 0);
        if (fd >= 0) {
            int r = inside_of(fd, out);
            close(fd);
            if (r) return -1;
            break;
        }
        if (errno != ENOENT) return -1;
        if (!strcmp(cur, "/")) {
            strcpy(out, "/");
            break;
        }
        char *slash = strrchr(cur, '/'), tail[PATH_MAX];
        if (strlen(slash) + strlen(missing) >= sizeof tail) return -1;
        strcpy(tail, slash), strcat(tail, missing), strcpy(missing, tail);
        if (slash == cur) slash[1] = '\0';
        else *slash = '\0';
    }
    if (missing[0]) {
        if (strlen(out) + strlen(missing) >= PATH_MAX) return -1;
        if (!strcmp(out, "/")) strcpy(out, missing);
        else strcat(out, missing);
    }
    return 0;
}

/* Whether target, read by a link in dir (a clean path in the root), climbs above "/"
 * (create_symlinks.target_escapes): 1 or 0, -1 when the path is too long to tell here (a
 * doubt); when it does not and out is given, the path it names, normalised
 * (posixpath.normpath of the join). */
static int escapes(const char *target, const char *dir, char *out) {
    char buf[2 * PATH_MAX];
    size_t len = 0;
    if (target[0] != '/') {
        if (strlen(dir) >= PATH_MAX) return -1;
        strcpy(buf, dir), len = strlen(buf);
        if (len == 1) len = 0; /* "/" */
    }
    buf[len] = '\0';
    for (const char *c = target; *c;) {
        while (*c == '/') c++;
        const char *e = strchrnul(c, '/');
        size_t n = (size_t)(e - c);
        if (n == 0 || (n == 1 && c[0] == '.')) {
        } else if (n == 2 && c[0] == '.' && c[1] == '.') {
            if (len == 0) return 1;
            while (len > 0 && buf[len - 1] != '/') len--;
            if (len > 0) len--; /* the slash */
            buf[len] = '\0';
        } else {
            if (len + n + 2 >= sizeof buf) return -1;
            buf[len++] = '/';
            memcpy(buf + len, c, n), len += n;
            buf[len] = '\0';
        }
        c = e;
    }
    if (out) {
        if (len >= PATH_MAX) return -1;
        strcpy(out, len ? buf : "/");
    }
    return 0;
}

/* lstat of path in the root: its folder resolved inside, the last component as is
 * (RootFd.lstat); 0, or -1 with errno. */
static int lstat_in(const char *path, struct stat *st) {
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (!slash || !slash[1] || (size_t)(slash - path) >= sizeof dir) return errno = EINVAL, -1;
    memcpy(dir, path, (size_t)(slash - path)), dir[slash - path] = '\0';
    int fd = in_root(dir[0] ? dir : "/", O_PATH | O_DIRECTORY, 0);
    if (fd < 0) return -1;
    int r = fstatat(fd, slash + 1, st, AT_SYMLINK_NOFOLLOW);
    int e = errno;
    close(fd);
    errno = e;
    return r;
}

/* The folder dir in the root (an O_PATH fd), created with its missing parents as
 * RootFd.mkdirs does (that mode, umask applied); -1 on a doubt. */
static int mkdirs_in(const char *dir, int mode) {
    char prefix[PATH_MAX];
    size_t len = strlen(dir);
    if (len >= sizeof prefix) return -1;
    int fd = in_root(dir, O_PATH | O_DIRECTORY, 0);
    if (fd >= 0 || errno != ENOENT) return fd;
    for (size_t at = 1; at <= len; at++) {
        if (at < len && dir[at] != '/') continue;
        memcpy(prefix, dir, at), prefix[at] = '\0';
        fd = in_root(prefix, O_PATH | O_DIRECTORY, 0);
        if (fd >= 0) {
            close(fd);
            continue;
        }
        if (errno != ENOENT) return -1;
        char *slash = strrchr(prefix, '/');
        *slash = '\0';
        int parent = in_root(prefix[0] ? prefix : "/", O_PATH | O_DIRECTORY, 0);
        if (parent < 0) return -1;
        int r = mkdirat(parent, slash + 1, (mode_t)mode);
        close(parent);
        if (r) return -1; /* EEXIST: a dangling symlink (refused by Python), or a race */
    }
    return in_root(dir, O_PATH | O_DIRECTORY, 0);
}

/* The "." (1) and ".." (2) components of path, or-ed together. */
static int dot_components(const char *path) {
    int found = 0;
    for (const char *c = path; *c;) {
        size_t len = strcspn(c, "/");
        if (len == 1 && c[0] == '.') found |= 1;
        if (len == 2 && c[0] == '.' && c[1] == '.') found |= 2;
        c += len + (c[len] == '/');
    }
    return found;
}

/* An O_PATH fd of the existing folder dir in the root, kept for the next call with the same
 * folder (most links share one; the caller does not close it); -1 with errno. */
static int dir_in_root(const char *dir) {
    static char cached[PATH_MAX];
    static int fd = -1;
    if (fd >= 0 && !strcmp(cached, dir)) return fd;
    int opened = in_root(dir, O_PATH | O_DIRECTORY, 0);
    if (opened < 0) return -1;
    if (fd >= 0) close(fd);
    strcpy(cached, dir); /* shorter than PATH_MAX: parse_link checks */
    return fd = opened;
}

/* The target of the symlink name in dirfd is target. */
static int same_link(int dirfd, const char *name, const char *target) {
    char current[PATH_MAX];
    ssize_t n = readlinkat(dirfd, name, current, sizeof current);
    if (n < 0 || (size_t)n >= sizeof current) return 0;
    current[n] = '\0';
    return !strcmp(current, target);
}

/* --- the image's CUDA compat folder (nvhook/hook/cuda_compat.py) ---------------------- */

/* A driver version "X.Y[.Z[.W]]", ASCII digits, under 10 each (cuda_compat._version): the
 * number of parts, or 0. */
static int version_of(const char *text, long v[4]) {
    int n = 0;
    for (const char *c = text;;) {
        size_t len = strspn(c, "0123456789");
        if (len == 0 || len >= 10 || n == 4) return 0;
        v[n++] = strtol(c, NULL, 10);
        c += len;
        if (!*c) break;
        if (*c++ != '.') return 0;
    }
    return n >= 2 ? n : 0;
}

/* Python's tuple comparison a <= b. */
static int version_le(const long *a, int na, const long *b, int nb) {
    for (int i = 0; i < na && i < nb; i++)
        if (a[i] != b[i]) return a[i] < b[i];
    return na <= nb;
}

static uint64_t field(const unsigned char *p, int size) {
    uint64_t v = 0;
    for (int i = size - 1; i >= 0; i--) v = v << 8 | p[i]; /* little-endian */
    return v;
}

#define NOTE_SECTION NVHOOK_NOTE_SECTION
#define NOTE_OWNER NVHOOK_NOTE_OWNER
#define MAX_NOTE NVHOOK_MAX_NOTE

/* At most MAX_NOTE bytes at off of fd into a new buffer (*got: what pread returned): 0, or -1
 * for an offset pread cannot take or no memory (a doubt). */
static int pread_note(int fd, uint64_t off, uint64_t len, unsigned char **buf, ssize_t *got) {
    if (len > MAX_NOTE) len = MAX_NOTE;
    if (off > (uint64_t)INT64_MAX / 2 || !(*buf = malloc(len + 1))) return -1;
    *got = pread(fd, *buf, len, (off_t)off);
    return 0;
}

/* The fwd_compatibility note's JSON (cuda_compat.read_fwd_compat_note), parsed into d:
 * 1 when there is one, 0 when Python finds none (None), -1 on a doubt. */
static int read_note(int fd, struct doc *d) {
    unsigned char h[64], *table = NULL, *strtab = NULL, *data = NULL;
    int result = 0;
    ssize_t n = pread(fd, h, sizeof h, 0);
    if (n < 52 || memcmp(h, "\177ELF", 4) || (h[4] != 1 && h[4] != 2)) return 0;
    if (h[5] != 1) return -1; /* big-endian: Python's */
    int wide = h[4] == 2;
    if (wide && n < 64) return 0;
    uint64_t shoff = wide ? field(h + 40, 8) : field(h + 32, 4);
    unsigned shentsize = (unsigned)field(h + (wide ? 58 : 46), 2);
    unsigned shnum = (unsigned)field(h + (wide ? 60 : 48), 2);
    unsigned shstrndx = (unsigned)field(h + (wide ? 62 : 50), 2);
    unsigned size = wide ? 64 : 40;
    if (!shoff || shentsize != size || shnum == 0 || shnum > NVHOOK_MAX_SECTIONS ||
        shstrndx >= shnum)
        return 0;
    if (shoff > (uint64_t)INT64_MAX / 2) return -1;
    size_t tlen = (size_t)shentsize * shnum;
    table = malloc(tlen);
    if (!table) return -1;
    if (pread(fd, table, tlen, (off_t)shoff) != (ssize_t)tlen) goto out;
#define SH(i, off32, off64) \
    field(table + (size_t)(i) * size + (wide ? (off64) : (off32)), wide ? 8 : 4)
#define SH4(i, off) field(table + (size_t)(i) * size + (off), 4)
    ssize_t slen, dlen;
    if (pread_note(fd, SH(shstrndx, 16, 24), SH(shstrndx, 20, 32), &strtab, &slen)) goto doubt;
    if (slen < 0) goto out;
    for (unsigned i = 0; i < shnum; i++) {
        uint64_t name = SH4(i, 0), type = SH4(i, 4);
        size_t want = sizeof NOTE_SECTION; /* with its NUL */
        if (type != 7 /* SHT_NOTE, elf.h */ || name > (uint64_t)slen ||
            (uint64_t)slen - name < want ||
            memcmp(strtab + name, NOTE_SECTION, want))
            continue;
        if (pread_note(fd, SH(i, 16, 24), SH(i, 20, 32), &data, &dlen)) goto doubt;
        if (dlen < 12) goto out; /* struct.error: None */
        uint64_t namesz = field(data, 4), descsz = field(data + 4, 4);
        size_t olen = namesz > (uint64_t)dlen - 12 ? (size_t)dlen - 12 : (size_t)namesz;
        while (olen > 0 && data[12 + olen - 1] == 0) olen--;
        uint64_t start = 12 + ((namesz + 3) & ~(uint64_t)3);
        if (olen != sizeof NOTE_OWNER - 1 || memcmp(data + 12, NOTE_OWNER, olen) ||
            start + descsz > (uint64_t)dlen)
            goto out;
        size_t jlen = (size_t)descsz;
        while (jlen > 0 && data[start + jlen - 1] == 0) jlen--;
        /* Python: not JSON, or not an object, is None; here any parse failure is a doubt */
        if (parse_doc(d, (const char *)data + start, jlen)) goto doubt;
        result = is_type(d, 0, J_OBJ) ? 1 : 0;
        goto out;
    }
out:
    free(table), free(strtab), free(data);
    return result;
doubt:
    free(table), free(strtab), free(data);
    return -1;
#undef SH
#undef SH4
}

/* The folder --cuda-compat HOST puts first (cuda_compat.find_compat and hook._with_compat)
 * into out ("" for none): 0, or -1 on a doubt. */
static int compat_folder(const char *host_driver, char *out) {
    long host[4], best[4] = {0};
    int nhost = version_of(host_driver, host), nbest = 0, found = 0;
    out[0] = '\0';
    if (!nhost) return 0; /* "not a version": nothing is used */
    int fd = in_root(NVHOOK_COMPAT_DIR, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0) return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
    char where[PATH_MAX], name[256];
    DIR *dir = NULL;
    int dup_fd = -1, result = -1;
    if (inside_of(fd, where)) goto done;
    dup_fd = dup(fd);
    if (dup_fd < 0 || !(dir = fdopendir(dup_fd))) goto done;
    dup_fd = -1;
    struct dirent *e;
    errno = 0;
    while ((e = readdir(dir))) {
        long v[4];
        int nv;
        const size_t prefix = sizeof NVHOOK_LIBCUDA_PREFIX - 1;
        if (strncmp(e->d_name, NVHOOK_LIBCUDA_PREFIX, prefix) ||
            !(nv = version_of(e->d_name + prefix, v)))
            continue;
        struct stat st;
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW)) goto done;
        if (!S_ISREG(st.st_mode)) continue;
        if (++found == 1) {
            if (strlen(e->d_name) >= sizeof name) goto done;
            strcpy(name, e->d_name), memcpy(best, v, sizeof v), nbest = nv;
        }
    }
    if (errno) goto done;
    result = 0;
    if (found != 1) goto done; /* none, or more than one: not choosing */
    int used;
    struct doc note = {0};
    int lib = openat(fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    int has_note = 0;
    struct stat st;
    if (lib >= 0) {
        has_note = !fstat(lib, &st) && S_ISREG(st.st_mode) ? read_note(lib, &note) : 0;
        close(lib);
    }
    if (has_note < 0) {
        result = -1;
    } else {
        int supported = has_note ? get(&note, 0, "driver") : -1;
        if (is_type(&note, supported, J_ARR)) {
            int listed = 0;
            for (unsigned k = (unsigned)supported + 1; k < note.t[supported].end;
                 k = note.t[k].end) {
                if (note.t[k].type != J_INT || note.t[k].len > 12) {
                    result = -1; /* 550.0, true, "550": Python's == decides */
                    break;
                }
                listed |= strtol(note.t[k].s, NULL, 10) == host[0];
            }
            used = listed && !version_le(best, nbest, host, nhost);
        } else {
            used = best[0] > host[0];
        }
        /* a folder ld.so.conf cannot hold is not used (update_ldcache.check_folder) */
        if (result == 0 && used && plain(where) && !strpbrk(where, NVHOOK_BAD_FOLDER_CHARS))
            strcpy(out, where);
        else if (result == 0 && used)
            result = -1; /* the Python hook says why */
    }
    free(note.t), free(note.pool);
done:
    if (dir) closedir(dir);
    if (dup_fd >= 0) close(dup_fd);
    close(fd);
    return result;
}

/* --- --params (nvhook/hook/device_files.py) -------------------------------------------- */

#define PARAMS_PATH NVHOOK_PARAMS_PATH
#define MAX_PARAMS NVHOOK_MAX_PARAMS

/* linux/mount.h (not every C library's headers have it) */
struct mount_attr_ {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
};

/* The host's params with "ModifyDeviceFiles: 0" (device_files.private_params), in out. */
static size_t private_params(const char *host, size_t len, char *out) {
    static const char key[] = NVHOOK_PARAMS_KEY, off[] = NVHOOK_PARAMS_OFF;
    size_t k = sizeof key - 1, o = sizeof off - 1;
    for (size_t at = 0; at <= len;) {
        const char *nl = memchr(host + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - host) : len;
        if (end - at >= k && !memcmp(host + at, key, k)) {
            size_t n = 0;
            memcpy(out, host, at), n = at;
            memcpy(out + n, key, k), n += k;
            memcpy(out + n, off, o), n += o;
            memcpy(out + n, host + end, len - end), n += len - end;
            return n;
        }
        if (!nl) break;
        at = end + 1;
    }
    size_t n = len;
    memcpy(out, host, len);
    if (len && host[len - 1] != '\n') out[n++] = '\n';
    memcpy(out + n, key, k), n += k;
    memcpy(out + n, off, o), n += o;
    out[n++] = '\n';
    return n;
}

/* The private copy as device_files makes it (a new file in /run, else /tmp, cloned as a
 * detached mount with ro,nosuid,nodev,noexec): the mount's fd, or -1 (nothing left behind).
 * The file's name must exist until the mount is attached (the kernel refuses to attach a
 * clone of an unlinked file): it stays in params_file until then, and a handover unlinks it. */
static char params_file[128];
static int params_fd = -1;

static int prepare_params(const char *data, size_t len) {
    static const char *const dirs[] = NVHOOK_TMPFILE_DIRS;
    for (size_t d = 0; dirs[d]; d++) {
        char hex[17], path[128];
        if (random_hex(hex, 8)) return -1;
        snprintf(path, sizeof path, "%s/" NVHOOK_PARAMS_PREFIX "%d.%s", dirs[d], (int)getpid(),
                 hex);
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
        if (fd < 0) continue;
        int ok = fchmod(fd, 0444) == 0 && !write_all(fd, data, len);
        if (!ok) {
            close(fd);
            unlink(path);
            continue;
        }
        /* OPEN_TREE_CLONE; MOUNT_ATTR_RDONLY, _NOSUID, _NODEV, _NOEXEC (linux/mount.h): the
         * options of device_files.MOUNT_OPTIONS */
        int tree = (int)syscall(SYS_open_tree, fd, "", 1U | O_CLOEXEC | AT_EMPTY_PATH);
        struct mount_attr_ attr = {0x1 | 0x2 | 0x4 | 0x8, 0, 0, 0};
        ok = tree >= 0 &&
             syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) == 0;
        if (!ok) {
            if (tree >= 0) close(tree);
            close(fd);
            unlink(path);
            return -1; /* Python says why (clone_fd's errors) */
        }
        strcpy(params_file, path);
        params_fd = fd;
        return tree;
    }
    return -1;
}

/* Drop the private copy's name (and file) if it is still there: the mount keeps the file. */
static void forget_params(void) {
    if (params_file[0]) unlink(params_file), params_file[0] = '\0';
    if (params_fd >= 0) close(params_fd), params_fd = -1;
}

/* --- create-container ------------------------------------------------------------------ */

/* Whether ld.so.conf's text has a line "include <a pattern holding /etc/ld.so.conf.d>"
 * (update_ldcache._prepare: the first two words before a "#"): 1 or 0; -1 for text that
 * Python's splitlines() and split() would read otherwise (other control characters,
 * non-ASCII): a doubt. */
static int ld_so_conf_includes(const char *text, size_t len) {
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if ((c < 0x20 && c != '\n' && c != '\t') || c >= 0x7F) return -1;
    }
    for (const char *line = text; line < text + len;) {
        const char *end = memchr(line, '\n', (size_t)(text + len - line));
        if (!end) end = text + len;
        const char *hash = memchr(line, '#', (size_t)(end - line));
        const char *stop = hash ? hash : end, *word[2] = {NULL, NULL};
        size_t wlen[2] = {0, 0};
        int n = 0;
        for (const char *c = line; c < stop && n < 2;) {
            while (c < stop && (*c == ' ' || *c == '\t')) c++;
            const char *w = c;
            while (c < stop && *c != ' ' && *c != '\t') c++;
            if (c > w) word[n] = w, wlen[n] = (size_t)(c - w), n++;
        }
        if (n == 2 && wlen[0] == 7 && !memcmp(word[0], "include", 7) &&
            memmem(word[1], wlen[1], CONF_DIR, sizeof CONF_DIR - 1))
            return 1;
        line = end + 1;
    }
    return 0;
}

/* os.path.join(dir, name) for an absolute dir into out (PATH_MAX): 0, or -1 when too long;
 * an absolute name stands alone. */
static int join(char *out, const char *dir, const char *name) {
    size_t dlen = strlen(dir);
    const char *sep = dlen && dir[dlen - 1] == '/' ? "" : "/";
    int n = name[0] == '/' ? snprintf(out, PATH_MAX, "%s", name)
                           : snprintf(out, PATH_MAX, "%s%s%s", dir, sep, name);
    return n < 0 || n >= PATH_MAX ? -1 : 0;
}

/* Parse TARGET::LINK into l (create_symlinks.parse_link); 0, or -1 on a doubt. */
static int parse_link(const char *value, struct link *l, int device) {
    const char *sep = strstr(value, NVHOOK_LINK_SEPARATOR);
    const size_t seplen = sizeof NVHOOK_LINK_SEPARATOR - 1;
    if (!sep || sep == value || !sep[seplen] || !clean_path(sep + seplen) ||
        strlen(sep) >= PATH_MAX)
        return -1;
    char *target = strndup(value, (size_t)(sep - value));
    if (!target) return -1;
    l->target = target, l->path = sep + seplen, l->device = device, l->skip = 0, l->missing = 0;
    const char *slash = strrchr(l->path, '/');
    l->dir = strndup(l->path, slash == l->path ? 1 : (size_t)(slash - l->path));
    l->name = slash + 1;
    return l->dir ? 0 : -1;
}

/* --- the steps of create-container ---------------------------------------------------- */

/* Everything the steps share: the call, what was read, what was checked. */
struct call {
    int argc;
    char **argv;
    const char *command;
    int full, ldcache_only, links_only;
    struct link links[MAX_ITEMS];
    const char *folders[MAX_ITEMS];
    int nlinks, nfolders;
    const char *ldconfig, *compat, *params;
    char *state, *config; /* the buffers sd and cd point into */
    struct doc sd, cd;
    const char *bundle;
    char rootfs[PATH_MAX];
    char compat_dir[PATH_MAX];
    int params_tree, params_dest;
    const char *wanted[MAX_ITEMS]; /* the folders, each once */
    int nwanted, ld_so_conf_absent, nprocfs;
    size_t body; /* the conf file's size */
    char real[PATH_MAX]; /* the rootfs, symlinks resolved */
    char procfs[MAX_PROCFS][PATH_MAX];
    const char *profile;           /* --application-profile */
    char profile_dir[PATH_MAX];    /* its folder */
    const char *profile_name;      /* its last component */
    unsigned long long mask;       /* the minors of the container's GPU nodes, as bits */
    unsigned beyond[MAX_ITEMS];    /* the minors beyond the mask, sorted: each one a note */
    int nbeyond, noted, dev_absent;
};

/* The command: the two older ones are create-container with fewer options
 * (nvhook.hook.args.COMMANDS); safepath's implementation (nvhook.rootfs.safepath.ENV_IMPL): this
 * program is its openat2 one, which "auto" picks where the kernel has it; "walk" or a typo
 * is Python's. */
static int parse_command(struct call *c) {
    CHECK(c->argc >= 2);
    c->command = c->argv[1];
    c->full = !strcmp(c->command, NVHOOK_HOOK_CREATE_CONTAINER);
    c->ldcache_only = !strcmp(c->command, NVHOOK_HOOK_UPDATE_LDCACHE);
    c->links_only = !strcmp(c->command, NVHOOK_HOOK_CREATE_SYMLINKS);
    CHECK(c->full || c->ldcache_only || c->links_only);
    static const char *const openat2[] = NVHOOK_SAFEPATH_OPENAT2;
    const char *impl = getenv(NVHOOK_ENV_SAFEPATH);
    int known = impl == NULL;
    for (size_t k = 0; openat2[k] && !known; k++) known = !strcmp(impl, openat2[k]);
    CHECK(known);
    return OK;
}

/* Whether the option spelled arg[0:len) is one of list's. */
static int option_in(const char *const *list, const char *arg, size_t len) {
    for (; *list; list++)
        if (strlen(*list) == len && !strncmp(arg, *list, len)) return 1;
    return 0;
}

/* The options (nvhook.hook.args.parse_args); anything else is Python's. The --links first, then
 * the --device-links. */
static int parse_options(struct call *c) {
    static const char *const ldcache_options[] = NVHOOK_UPDATE_LDCACHE_OPTIONS;
    static const char *const links_options[] = NVHOOK_CREATE_SYMLINKS_OPTIONS;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 2; i < c->argc; i++) {
            const char *arg = c->argv[i], *eq = strchr(arg, '='), *value;
            size_t optlen = eq ? (size_t)(eq - arg) : strlen(arg);
            if (eq) value = eq + 1;
            else if (i + 1 < c->argc) value = c->argv[++i];
            else DOUBT();
            CHECK(plain(value));
#define IS(name) (optlen == sizeof name - 1 && !strncmp(arg, name, optlen))
            CHECK(c->full || (c->ldcache_only && option_in(ldcache_options, arg, optlen)) ||
                  (c->links_only && option_in(links_options, arg, optlen)));
            if (IS(NVHOOK_OPT_LINK) || IS(NVHOOK_OPT_DEVICE_LINK)) {
                int device = IS(NVHOOK_OPT_DEVICE_LINK);
                if (device != pass) continue;
                CHECK(c->nlinks < MAX_ITEMS && !parse_link(value, &c->links[c->nlinks], device));
                c->nlinks++;
            } else if (pass) {
                continue;
            } else if (IS(NVHOOK_OPT_FOLDER)) {
                /* update_ldcache.check_folder */
                CHECK(c->nfolders < MAX_ITEMS && value[0] == '/' &&
                      !strpbrk(value, NVHOOK_BAD_FOLDER_CHARS) && !dot_components(value));
                c->folders[c->nfolders++] = value;
            } else if (IS(NVHOOK_OPT_LDCONFIG)) {
                CHECK(!c->ldconfig);
                c->ldconfig = value;
            } else if (IS(NVHOOK_OPT_CUDA_COMPAT)) {
                CHECK(!c->compat);
                c->compat = value;
            } else if (IS(NVHOOK_OPT_PARAMS)) {
                CHECK(!c->params);
                c->params = value;
            } else if (IS(NVHOOK_OPT_APPLICATION_PROFILE)) {
                /* app_profile.check_profile_path: a path not clean is Python's usage error */
                CHECK(!c->profile && clean_path(value) && strlen(value) < PATH_MAX);
                c->profile = value;
                const char *slash = strrchr(value, '/');
                size_t dlen = slash == value ? 1 : (size_t)(slash - value);
                memcpy(c->profile_dir, value, dlen), c->profile_dir[dlen] = '\0';
                c->profile_name = slash + 1;
            } else {
                DOUBT(); /* a typo, an option of a later nvhook: Python's */
            }
#undef IS
        }
    }
    CHECK(c->full ? c->nlinks || c->nfolders || c->compat || c->params || c->profile
                  : c->ldcache_only ? c->nfolders : c->nlinks);
    return OK;
}

/* --- the GPU and MIG layout records (nvhook.hook.dispatch.check_records) ------- */

#define MAX_INSTANCES 64 /* GPU or compute instances in one listing; more is Python's */

static int by_number(const void *a, const void *b) {
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

/* The numbers N of the entries "<prefix>N" (ASCII digits) of directory, sorted: their count,
 * -1 when it cannot be listed, -2 beyond MAX_INSTANCES (miglayout._numbered). */
static int numbered(const char *directory, const char *prefix, unsigned *out) {
    DIR *dir = opendir(directory);
    if (!dir) return -1;
    size_t n = strlen(prefix);
    int count = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        const char *digits = e->d_name + n;
        if (strncmp(e->d_name, prefix, n) || !*digits) continue;
        size_t k = 0;
        while (digits[k] >= '0' && digits[k] <= '9') k++;
        if (digits[k]) continue; /* not "<prefix>N" */
        if (k > 9 || count >= MAX_INSTANCES) { /* a number or a listing beyond ours: Python's */
            count = -2;
            break;
        }
        out[count++] = (unsigned)strtoul(digits, NULL, 10);
    }
    closedir(dir);
    if (count > 0) qsort(out, (size_t)count, sizeof *out, by_number);
    return count;
}

/* Whether the layout under directory now is layout (miglayout.read_layout; a directory that
 * cannot be listed is no layout: it differs). */
static int layout_holds(const char *directory, const char *layout, size_t len) {
    unsigned gis[MAX_INSTANCES], cis[MAX_INSTANCES];
    int ngi = numbered(directory, "gi", gis);
    if (ngi < 0) return 0;
    char now[MAX_INSTANCES * 24], sub[PATH_MAX];
    size_t used = 0;
    for (int g = 0; g < ngi; g++) {
        if (snprintf(sub, sizeof sub, "%s/gi%u", directory, gis[g]) >= (int)sizeof sub) return 0;
        int nci = numbered(sub, "ci", cis);
        if (nci == -1) continue; /* destroyed between the two listings */
        if (nci < 0) return 0;
        for (int k = 0; k < nci; k++) {
            int w = snprintf(now + used, sizeof now - used, "%s%u.%u", used ? "," : "", gis[g],
                             cis[k]);
            if (w < 0 || (size_t)w >= sizeof now - used) return 0;
            used += (size_t)w;
        }
    }
    return used == len && !memcmp(now, layout, len);
}

static int lower_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* "0000:07:00.0": a domain of 4-8 lower-case hex digits, bus and device of 2, a function 0-7
 * (gpurecords._bus_id). */
static int bus_id_ok(const char *s, size_t len) {
    const char *colon = memchr(s, ':', len);
    if (!colon) return 0;
    size_t domain = (size_t)(colon - s);
    return domain >= 4 && domain <= 8 && len == domain + 8 && lower_hex(s, domain) &&
           lower_hex(colon + 1, 2) && colon[3] == ':' && lower_hex(colon + 4, 2) &&
           colon[6] == '.' && colon[7] >= '0' && colon[7] <= '7';
}

/* Whether where has a GPU record's shape: clean, ending in NVHOOK_RECORD_GPUS_DIR and a bus id
 * (gpurecords.gpu_entry_path): an image's own env cannot point the hook elsewhere. */
static int gpu_record_path(const char *where) {
    static const char dir[] = NVHOOK_RECORD_GPUS_DIR;
    size_t len = strlen(where), n = sizeof dir - 1;
    const char *last = NULL;
    for (const char *p = where; (p = strstr(p, dir)); p++) last = p;
    return last && clean_path(where) && bus_id_ok(last + n, len - (size_t)(last - where) - n);
}

/* Whether directory has the shape of GPU minor's layout record: clean, ending in
 * NVHOOK_RECORD_CAPS_DIR "<minor>/mig" (gpurecords.layout_entry_path). */
static int layout_record_path(const char *minor, size_t minor_len, const char *directory) {
    static const char dir[] = NVHOOK_RECORD_CAPS_DIR, mig[] = "/mig";
    size_t len = strlen(directory), tail = sizeof dir - 1 + minor_len + sizeof mig - 1;
    if (len < tail || !clean_path(directory)) return 0;
    const char *end = directory + len - tail;
    return !memcmp(end, dir, sizeof dir - 1) && !memcmp(end + sizeof dir - 1, minor, minor_len) &&
           !strcmp(end + sizeof dir - 1 + minor_len, mig);
}

/* Whether every record of the container's env still holds: each GPU's /proc entry is a
 * directory (miglayout.gone_gpus), each MIG layout is what it was (stale_layouts). One that
 * does not, or cannot be told, is Python's: it prints the line and refuses. */
static int records_hold(const struct doc *cd) {
    static const char gpu[] = NVHOOK_ENV_GPU_RECORD, layout[] = NVHOOK_ENV_LAYOUT_RECORD;
    int env = get(cd, get(cd, 0, "process"), "env");
    if (env < 0) return 1;
    for (unsigned k = (unsigned)env + 1; k < cd->t[env].end; k = cd->t[k].end) {
        const char *entry = cd->t[k].s;
        size_t skip;
        int is_layout = 0;
        if (!strncmp(entry, gpu, sizeof gpu - 1))
            skip = sizeof gpu - 1;
        else if (!strncmp(entry, layout, sizeof layout - 1))
            skip = sizeof layout - 1, is_layout = 1;
        else
            continue;
        const char *minor = entry + skip, *eq = strchr(minor, '=');
        if (!eq) continue; /* not a NAME=VALUE entry: container_env has none such */
        int digits = eq > minor;
        for (const char *d = minor; d < eq; d++) digits = digits && *d >= '0' && *d <= '9';
        const char *at = strchr(eq + 1, '@');
        if (!digits || !at) continue; /* not a record (the Python check ignores it too) */
        if (memchr(entry, '\0', cd->t[k].len)) return 0;
        if (is_layout ? !layout_record_path(minor, (size_t)(eq - minor), at + 1)
                      : !gpu_record_path(at + 1))
            continue; /* not of a record's shape: not looked at (gpurecords docstring) */
        if (is_layout) {
            if (!layout_holds(at + 1, eq + 1, (size_t)(at - eq - 1))) return 0;
        } else {
            struct stat st;
            if (stat(at + 1, &st) || !S_ISDIR(st.st_mode)) return 0;
        }
    }
    return 1;
}

/* The state, then config.json (nvhook.hook.dispatch.read_state, rootfs_of; nvhook.rootfs.spec.container_env). */
static int read_inputs(struct call *c) {
    int more;
    c->state = read_fd(0, MAX_STATE, &state_len, &more);
    CHECK(c->state); /* not readable (a directory?): Python's, with stdin as it is */
    state_data = c->state, stdin_read = more ? 2 : 1;
    CHECK(!more);
    CHECK(!parse_doc(&c->sd, c->state, state_len) && state_ok(&c->sd));
    c->bundle = c->sd.t[get(&c->sd, 0, "bundle")].s;
    CHECK(plain(c->bundle));
    char path[PATH_MAX];
    CHECK(!join(path, c->bundle, NVHOOK_CONFIG_JSON));
    autoclose int cfd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    CHECK(cfd >= 0);
    struct stat st;
    CHECK(!fstat(cfd, &st) && S_ISREG(st.st_mode) && st.st_size <= MAX_CONFIG);
    size_t clen;
    c->config = read_fd(cfd, MAX_CONFIG, &clen, &more);
    CHECK(c->config && !more && !parse_doc(&c->cd, c->config, clen) && spec_ok(&c->cd));
    const struct doc *cd = &c->cd;
    int rootpath = get(cd, get(cd, 0, "root"), "path");
    CHECK(is_type(cd, rootpath, J_STR) && cd->t[rootpath].len > 0);
    const char *rp = cd->t[rootpath].s;
    CHECK(plain(rp));
    CHECK(!join(c->rootfs, c->bundle, rp)); /* rootfs_of: relative to the bundle */
    if (c->compat) { /* the env names no compat setting (cuda_compat.disabled_by, compat_dir_of) */
        static const char disable[] = NVHOOK_ENV_DISABLE_CUDA_COMPAT "=";
        static const char dir[] = NVHOOK_ENV_CUDA_COMPAT_DIR "=";
        int env = get(cd, get(cd, 0, "process"), "env");
        if (env >= 0)
            for (unsigned k = (unsigned)env + 1; k < cd->t[env].end; k = cd->t[k].end)
                CHECK(strncmp(cd->t[k].s, disable, sizeof disable - 1) &&
                      strncmp(cd->t[k].s, dir, sizeof dir - 1));
    }
    if (c->full) CHECK(records_hold(cd)); /* check_records: a stale one is refused by Python */
    return OK;
}

/* The rootfs (safepath.open_root), openat2 or Python. */
static int open_rootfs(struct call *c) {
    rootfd = open(c->rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    CHECK(rootfd >= 0);
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", rootfd);
    ssize_t rn = readlink(self, root_host, sizeof root_host - 1);
    CHECK(rn > 0 && (size_t)rn < sizeof root_host - 1);
    root_host[rn] = '\0';
    autoclose int probe = in_root("/", O_PATH, 0);
    CHECK(probe >= 0);
    return OK;
}

/* The image's compat folder first when its libcuda is used (hook._with_compat). */
static int with_compat(struct call *c) {
    if (c->compat) CHECK(!compat_folder(c->compat, c->compat_dir));
    if (!c->compat_dir[0]) return OK;
    int k = 0;
    for (int i = 0; i < c->nfolders; i++)
        if (strcmp(c->folders[i], c->compat_dir)) c->folders[k++] = c->folders[i];
    CHECK(k < MAX_ITEMS);
    memmove(c->folders + 1, c->folders, (size_t)k * sizeof *c->folders);
    c->folders[0] = c->compat_dir, c->nfolders = k + 1;
    return OK;
}

/* The host's ldconfig (update_ldcache.default_ldconfig), before anything is written. */
static int find_ldconfig(struct call *c) {
    static const char *const candidates[] = NVHOOK_LDCONFIG_CANDIDATES;
    if (!c->nfolders) return OK;
    if (c->ldconfig) {
        CHECK(c->ldconfig[0] == '/' && executable_file(c->ldconfig));
        return OK;
    }
    for (size_t k = 0; candidates[k] && !c->ldconfig; k++)
        if (executable_file(candidates[k])) c->ldconfig = candidates[k];
    CHECK(c->ldconfig);
    return OK;
}

/* Every check first: nothing is written until all the steps are known to go through as the
 * Python hook's would, so a doubt hands over a rootfs as it was. After the first write, a
 * handover happens only where the Python hook, run again from the start, does exactly what
 * it would have done alone (before ldconfig runs: the links it then finds in place, the
 * conf file it rewrites); once ldconfig has run (it may replace links), the outcome is
 * printed here, as Python prints it. */

/* --params (device_files): the host's file read, the container's checked, and the detached
 * mount of the private copy made; attached last. */
static int check_params(struct call *c) {
    if (!c->params) return OK;
    autoclose int fd = open(c->params, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    size_t hlen;
    int more;
    autofree char *host = read_fd(fd, MAX_PARAMS, &hlen, &more);
    CHECK(host && !more);
    c->params_dest = in_root(PARAMS_PATH, O_PATH, 0);
    if (c->params_dest < 0) {
        CHECK(errno == ENOENT || errno == ENOTDIR); /* no driver's procfs: nothing to do */
        return OK;
    }
    struct stat st;
    CHECK(!fstat(c->params_dest, &st) && S_ISREG(st.st_mode));
    /* the host's text, a newline, the key and its value */
    autofree char *private = malloc(hlen + sizeof NVHOOK_PARAMS_KEY + sizeof NVHOOK_PARAMS_OFF);
    CHECK(private);
    c->params_tree = prepare_params(private, private_params(host, hlen, private));
    CHECK(c->params_tree >= 0);
    return OK;
}

/* The links (create_symlinks.create_symlinks): device links whose target is there, every
 * link checked (none where the ld cache step writes: it would change them). */
static int check_links(struct call *c) {
    static const char *const ld_names[] = NVHOOK_LD_NAMES;
    char phys[PATH_MAX], named[PATH_MAX];
    struct stat st;
    struct link *links = c->links;
    for (int i = 0; i < c->nlinks; i++) {
        for (size_t k = 0; ld_names[k]; k++) CHECK(strcmp(links[i].name, ld_names[k]));
        if (!links[i].device) continue;
        CHECK(!physical_dir(links[i].dir, phys));
        int out = escapes(links[i].target, phys, named);
        CHECK(out >= 0);
        if (out) {
            links[i].skip = 1;
            continue;
        }
        if (lstat_in(named, &st)) {
            CHECK(errno == ENOENT || errno == ENOTDIR);
            links[i].skip = 1;
        } else {
            links[i].skip = !S_ISCHR(st.st_mode);
        }
    }
    for (int i = 0; i < c->nlinks; i++) /* _wanted: the same link twice must name one target */
        for (int j = 0; j < i && !links[i].skip; j++)
            if (!links[j].skip && !strcmp(links[i].path, links[j].path)) {
                CHECK(!strcmp(links[i].target, links[j].target));
                links[i].skip = 1;
            }
    for (int i = 0; i < c->nlinks; i++) {
        if (links[i].skip) continue;
        /* a target without ".." cannot climb out: no need to know where the folder is */
        if (dot_components(links[i].target) & 2)
            CHECK(!physical_dir(links[i].dir, phys) && escapes(links[i].target, phys, NULL) == 0);
        int fd = dir_in_root(links[i].dir);
        if (fd < 0) {
            /* created below; not a file on the way (Python refuses that before any link) */
            CHECK(errno == ENOENT);
            links[i].missing = 1;
            continue;
        }
        if (fstatat(fd, links[i].name, &st, AT_SYMLINK_NOFOLLOW)) {
            CHECK(errno == ENOENT);
        } else {
            CHECK(S_ISLNK(st.st_mode) && same_link(fd, links[i].name, links[i].target));
            links[i].skip = 1; /* in place */
        }
    }
    return OK;
}

/* --- --application-profile (nvhook/hook/app_profile.py) ------------------------------- */

static int by_value(const void *a, const void *b) {
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

/* The minors of the GPU nodes (character devices named NODE_PREFIX<digits>) in the folder
 * dev (app_profile.gpu_minors): those the mask holds into c->mask, the others, sorted, into
 * c->beyond; 0, or -1 on a doubt. */
static int gpu_minors(struct call *c, DIR *dev) {
    const size_t prefix = sizeof NVHOOK_GPU_NODE_PREFIX - 1;
    struct dirent *e;
    for (errno = 0; (e = readdir(dev)); errno = 0) {
        const char *digits = e->d_name + prefix;
        if (strncmp(e->d_name, NVHOOK_GPU_NODE_PREFIX, prefix) || !*digits ||
            digits[strspn(digits, "0123456789")])
            continue;
        struct stat st;
        if (fstatat(dirfd(dev), e->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
            if (errno != ENOENT) return -1; /* ENOENT: gone since the listing */
            continue;
        }
        if (!S_ISCHR(st.st_mode)) continue; /* a symlink, a file, a block device */
        unsigned m = minor(st.st_rdev);
        if (m <= NVHOOK_PROFILE_MAX_MINOR) c->mask |= 1ULL << m;
        else if (c->nbeyond == MAX_ITEMS) return -1;
        else c->beyond[c->nbeyond++] = m;
    }
    if (errno) return -1;
    qsort(c->beyond, (size_t)c->nbeyond, sizeof *c->beyond, by_value);
    return 0;
}

/* The profile (app_profile.write_application_profile), checked: the minors of the
 * container's GPU nodes, and with a mask to write, its path: each folder there (resolved
 * inside) or, from the first missing one on (nothing there, not a dangling link: Python
 * refuses that), to be made; the file absent, a regular file or a symlink (replaced). A
 * folder at the file, or anything else in the way, is Python's refusal. The other steps'
 * checks stay true once it is written: no link is named like it (the profile would replace
 * the link), it and its folders but the first are not named like what the ld cache step
 * reads or writes, and with folders to cache, neither a symlink at the file (a folder to
 * cache, the rootfs's /dev or a link's folder may go through it: a handover after this
 * write, Python running again, would see another tree) nor an ld.so.conf that is a symlink
 * (it may name the profile). */
static int check_profile(struct call *c) {
    static const char *const ld_names[] = NVHOOK_LD_NAMES;
    if (!c->profile) return OK;
    for (int i = 0; i < c->nlinks; i++) CHECK(strcmp(c->links[i].name, c->profile_name));
    for (const char *p = c->profile + 1; *p;) { /* a clean path: components between '/' */
        size_t len = strcspn(p, "/");
        if (p != c->profile + 1 || !p[len]) CHECK(!option_in(ld_names, p, len));
        p += len + (p[len] == '/');
    }
    int fd = in_root(NVHOOK_DEV_DIR, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0) {
        CHECK(errno == ENOENT); /* no /dev: no GPU (ENOTDIR, ELOOP: Python's refusal) */
        c->dev_absent = 1;
        return OK;
    }
    DIR *dev = fdopendir(fd);
    if (!dev) close(fd);
    int listed = dev ? gpu_minors(c, dev) : -1;
    if (dev) closedir(dev);
    CHECK(!listed);
    if (!c->mask) return OK; /* nothing to write: only the notes */
    struct stat st;
    const char *dir = c->profile_dir;
    size_t len = strlen(dir);
    int missing = 0;
    char prefix[PATH_MAX];
    for (size_t at = 1; len > 1 && at <= len && !missing; at++) { /* RootFd.mkdirs' turns */
        if (at < len && dir[at] != '/') continue;
        memcpy(prefix, dir, at), prefix[at] = '\0';
        autoclose int folder = in_root(prefix, O_PATH | O_DIRECTORY, 0);
        if (folder >= 0) continue;
        CHECK(errno == ENOENT);
        CHECK(lstat_in(prefix, &st) && errno == ENOENT);
        missing = 1;
    }
    if (!missing) {
        autoclose int folder = in_root(dir, O_PATH | O_DIRECTORY, 0);
        CHECK(folder >= 0);
        if (fstatat(folder, c->profile_name, &st, AT_SYMLINK_NOFOLLOW))
            CHECK(errno == ENOENT);
        else
            CHECK(S_ISREG(st.st_mode) || (S_ISLNK(st.st_mode) && !c->nfolders));
    }
    if (c->nfolders)
        CHECK(lstat_in(LD_SO_CONF, &st) ? errno == ENOENT : !S_ISLNK(st.st_mode));
    return OK;
}

/* ld.so.conf in the root: absent (*absent set), or a regular file that includes our
 * folder. */
static int check_ld_so_conf(int *absent) {
    autoclose int lfd = in_root(LD_SO_CONF, O_PATH, 0);
    if (lfd < 0) {
        CHECK(errno == ENOENT);
        *absent = 1;
        return OK;
    }
    struct stat st;
    CHECK(!fstat(lfd, &st) && S_ISREG(st.st_mode) && st.st_size <= MAX_LD_SO_CONF);
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", lfd);
    autoclose int rfd = open(self, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    CHECK(rfd >= 0);
    size_t tlen;
    int more;
    autofree char *text = read_fd(rfd, MAX_LD_SO_CONF, &tlen, &more);
    CHECK(text && !more && ld_so_conf_includes(text, tlen) == 1);
    return OK;
}

/* The ld cache (update_ldcache._prepare), checked: every folder resolves, the conf folder
 * is there or can be made, ld.so.conf is absent or includes it. */
static int check_ld_cache(struct call *c) {
    c->body = sizeof NVHOOK_CONF_HEADER;
    if (!c->nfolders) return OK;
    for (int i = 0; i < c->nfolders; i++) {
        int dup = 0;
        for (int j = 0; j < c->nwanted; j++) dup |= !strcmp(c->wanted[j], c->folders[i]);
        if (dup) continue;
        autoclose int fd = in_root(c->folders[i], O_PATH, 0);
        CHECK(fd >= 0);
        c->wanted[c->nwanted++] = c->folders[i];
        c->body += strlen(c->folders[i]) + 1;
    }
    autoclose int fd = in_root(CONF_DIR, O_PATH | O_DIRECTORY, 0);
    if (fd < 0) { /* made below: /etc must be a folder, or nothing */
        struct stat st;
        CHECK(errno == ENOENT);
        autoclose int etc = in_root(NVHOOK_ETC, O_PATH | O_DIRECTORY, 0);
        CHECK(etc >= 0 || errno == ENOENT);
        if (etc < 0)
            CHECK(fstatat(rootfd, &NVHOOK_ETC[1], &st, AT_SYMLINK_NOFOLLOW) && errno == ENOENT);
        else
            CHECK(fstatat(etc, NVHOOK_CONF_DIR_NAME, &st, AT_SYMLINK_NOFOLLOW) &&
                  errno == ENOENT);
    }
    int status = check_ld_so_conf(&c->ld_so_conf_absent);
    if (status != OK) return status;
    CHECK(realpath(c->rootfs, c->real));
    c->nprocfs = procfs_under(c->real, c->procfs);
    CHECK(c->nprocfs >= 0);
    return OK;
}

/* Now the writes: the links (their folders made as needed). */
static int write_links(struct call *c) {
    for (int i = 0; i < c->nlinks; i++) {
        const struct link *l = &c->links[i];
        if (l->skip) continue;
        /* the folder as it was checked (the same fd), or made now with its parents */
        autoclose int made = l->missing ? mkdirs_in(l->dir, NVHOOK_DIR_MODE) : -1;
        int fd = l->missing ? made : dir_in_root(l->dir);
        CHECK(fd >= 0);
        if (symlinkat(l->target, fd, l->name))
            CHECK(errno == EEXIST && same_link(fd, l->name, l->target));
    }
    return OK;
}

/* The profile, after the links (app_profile.write_application_profile): its missing folders
 * made, the file replaced (a temp file renamed over it, no fsync). A /dev that was not there
 * must still not be (a link might have made one). A doubt here is a handover before
 * ldconfig: the Python hook, run again, finds the links in place and writes the same. */
static int write_profile(struct call *c) {
    if (!c->profile) return OK;
    int linked = 0;
    for (int i = 0; i < c->nlinks; i++) linked |= !c->links[i].skip;
    if (c->dev_absent && linked) {
        autoclose int fd = in_root(NVHOOK_DEV_DIR, O_RDONLY | O_DIRECTORY, 0);
        CHECK(fd < 0 && errno == ENOENT);
    }
    if (!c->mask) return OK;
    autoclose int dir = mkdirs_in(c->profile_dir, NVHOOK_PROFILE_DIR_MODE);
    CHECK(dir >= 0);
    /* app_profile.profile: the mask in lower-case hex, no newline */
    char text[sizeof NVHOOK_PROFILE_HEAD + sizeof NVHOOK_PROFILE_MASK_PREFIX + 16 +
              sizeof NVHOOK_PROFILE_TAIL];
    int n = snprintf(text, sizeof text, "%s%s%llx%s", NVHOOK_PROFILE_HEAD,
                     NVHOOK_PROFILE_MASK_PREFIX, c->mask, NVHOOK_PROFILE_TAIL);
    CHECK(n > 0 && (size_t)n < sizeof text);
    CHECK(!replace_file(dir, c->profile_name, text, (size_t)n, NVHOOK_PROFILE_FILE_MODE, 0));
    return OK;
}

/* The profile's notes (a minor beyond its mask: app_profile's log), each once, as Python
 * prints them: before ldconfig's report, and never before a handover (Python, run again,
 * prints them). */
static void profile_notes(struct call *c) {
    for (; c->noted < c->nbeyond; c->noted++)
        dprintf(2, PROGRAM " %s: note: %s/%s* minor %u does not fit the profile's mask\n",
                c->command, NVHOOK_DEV_DIR, NVHOOK_GPU_NODE_PREFIX, c->beyond[c->noted]);
}

/* Our conf file, ld.so.conf when the image has none, then ldconfig. */
static int update_ld_cache(struct call *c) {
    if (!c->nfolders) return OK;
    {
        autoclose int confdir = mkdirs_in(CONF_DIR, NVHOOK_DIR_MODE);
        CHECK(confdir >= 0);
        autofree char *conf = malloc(c->body);
        CHECK(conf);
        size_t at = (size_t)sprintf(conf, "%s", NVHOOK_CONF_HEADER);
        for (int i = 0; i < c->nwanted; i++)
            at += (size_t)sprintf(conf + at, "%s\n", c->wanted[i]);
        CHECK(!replace_file(confdir, CONF_NAME, conf, at, NVHOOK_FILE_MODE, 0));
    }
    if (c->ld_so_conf_absent) {
        autoclose int etc = in_root(NVHOOK_ETC, O_PATH | O_DIRECTORY, 0);
        CHECK(etc >= 0 && !replace_file(etc, NVHOOK_LD_SO_CONF_NAME, NVHOOK_INCLUDE_LINE,
                                        sizeof NVHOOK_INCLUDE_LINE - 1, NVHOOK_FILE_MODE, 1));
    }
    /* update_ldcache.update_ldcache's command line */
    char *ld_argv[] = {(char *)c->ldconfig, "-r", c->rootfs, "-C", NVHOOK_LD_SO_CACHE,
                       "-f", LD_SO_CONF, NULL};
    int status = 0;
    char detail[4096];
    int ran = run_ldconfig(ld_argv, c->real, c->procfs, c->nprocfs, &status, detail,
                           sizeof detail);
    CHECK(ran >= 0); /* it could not be run: nothing ran, Python runs it again */
    if (ran == 1) {
        /* an output Python would read otherwise: it runs again, from the start (only here,
         * after ldconfig ran: the one known case where the outcome may differ, when this
         * ldconfig replaced one of the links and its output is not plain) */
        CHECK(detail[0]);
        profile_notes(c);
        dprintf(2, PROGRAM " %s: skipped: %s exited with status %d for %s: %s\n", c->command,
                c->ldconfig, status, c->rootfs, detail);
    }
    return OK;
}

/* The private params, attached last: nothing above opens the driver. */
static int attach_params(struct call *c) {
    if (c->params_tree < 0) return OK;
    int moved = (int)syscall(SYS_move_mount, c->params_tree, "", c->params_dest, "",
                             0x04 | 0x40 /* MOVE_MOUNT_F_ and _T_EMPTY_PATH, linux/mount.h */);
    int e = errno;
    close(c->params_tree), c->params_tree = -1;
    forget_params(); /* the mount keeps the file; its name goes now */
    if (moved) {
        dprintf(2, PROGRAM " %s: cannot mount the private params on %s in %s: %s\n",
                c->command, PARAMS_PATH, c->rootfs, strerror(e));
        return EXIT_HOOK;
    }
    return OK;
}

/* Last, when nothing failed: the profile's notes not printed yet. */
static int print_notes(struct call *c) {
    profile_notes(c);
    return OK;
}

static void release(struct call *c) {
    for (int i = 0; i < c->nlinks; i++) free((char *)c->links[i].target), free(c->links[i].dir);
    free(c->sd.t), free(c->sd.pool), free(c->cd.t), free(c->cd.pool);
    free(c->state), free(c->config);
}

int main(int argc, char **argv) {
    static int (*const steps[])(struct call *) = {
        parse_command,  parse_options, read_inputs,   open_rootfs,     with_compat,
        find_ldconfig,  check_params,  check_links,   check_profile,   check_ld_cache,
        write_links,    write_profile, update_ld_cache, attach_params, print_notes,
    };
    static struct call c;
    original = argv, original_argc = argc;
    c.argc = argc, c.argv = argv, c.params_tree = -1, c.params_dest = -1;
    int status = OK;
    for (size_t i = 0; status == OK && i < sizeof steps / sizeof *steps; i++)
        status = steps[i](&c);
    if (status == HAND_OVER) handover();
    release(&c);
    return status;
}
