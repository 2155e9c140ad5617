/* nvhook-launcher.h: what both native programs say when their Python launcher cannot start.
 *
 * nvhook-runtime.c and nvhook-hook.c hand a call they do not finish themselves to their
 * launcher (NVHOOK_LAUNCHER, a `#!<venv python>` script). When that exec fails with ENOENT
 * although the launcher is there, the interpreter its #! line names is gone: a distribution
 * upgrade removed the Python the venv was made with. interpreter_gone() says so in one line,
 * with the repair, and exits; it returns when the cause is something else. One copy for both
 * programs (docs/native-hook.md). Include after nvhook-contract.h and the libc headers. */
#ifndef NVHOOK_LAUNCHER_H
#define NVHOOK_LAUNCHER_H

/* The packages' repair step, named when the launcher's interpreter is gone and it is there
 * (the tests build with another path). */
#ifndef NVHOOK_SETUP_PATH
#define NVHOOK_SETUP_PATH NVHOOK_REPAIR_SETUP
#endif

/* The launcher's interpreter, when exec said ENOENT of a launcher that is there: the venv's
 * Python is gone (a distribution upgrade removed the python3.X it was made with, and
 * bin/python is a dangling link). Say so in one line, with the repair, and exit; return when
 * the launcher is missing or its interpreter is there (the caller's line says why then). */
static void interpreter_gone(const char *program, int status) {
    char line[256]; /* the kernel reads this much of a #! line (BINPRM_BUF_SIZE) */
    int fd = open(NVHOOK_LAUNCHER, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n;
    do n = read(fd, line, sizeof line - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n < 3 || line[0] != '#' || line[1] != '!') return;
    line[n] = '\0';
    char *interpreter = line + 2;
    while (*interpreter == ' ' || *interpreter == '\t') interpreter++; /* as the kernel reads it */
    interpreter[strcspn(interpreter, " \t\n")] = '\0';
    struct stat st;
    if (interpreter[0] != '/' || stat(interpreter, &st) == 0 || (errno != ENOENT && errno != ENOTDIR))
        return;
    /* follow its links to the one whose target is missing: the path a user recognises */
    static char missing[PATH_MAX], next[PATH_MAX];
    snprintf(missing, sizeof missing, "%s", interpreter);
    for (int hops = 0; hops < 40 && lstat(missing, &st) == 0 && S_ISLNK(st.st_mode); hops++) {
        ssize_t len = readlink(missing, next, sizeof next - 1);
        if (len <= 0) break;
        next[len] = '\0';
        char *slash = strrchr(missing, '/');
        if (next[0] == '/') {
            memcpy(missing, next, (size_t)len + 1);
        } else if (slash != NULL && (size_t)(slash + 1 - missing) + (size_t)len < sizeof missing) {
            memcpy(slash + 1, next, (size_t)len + 1);
        } else {
            break;
        }
    }
    char via[PATH_MAX + 32] = "";
    if (strcmp(missing, interpreter) != 0)
        snprintf(via, sizeof via, " (a link to %s, which is gone)", missing);
    if (access(NVHOOK_SETUP_PATH, X_OK) == 0)
        dprintf(2, "%s: cannot start %s: its interpreter %s is missing%s: "
                "the Python nvhook's venv was made with was removed or upgraded; run "
                NVHOOK_SETUP_PATH " to make the venv again\n", program, NVHOOK_LAUNCHER, interpreter,
                via);
    else
        dprintf(2, "%s: cannot start %s: its interpreter %s is missing%s: "
                "the Python nvhook's venv was made with was removed or upgraded; "
                NVHOOK_REPAIR_REINSTALL "\n", program, NVHOOK_LAUNCHER, interpreter, via);
    _exit(status);
}

#endif
