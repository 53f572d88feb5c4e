#include "test_util.h"

#include "common/net.h"
#include "common/time.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

pid_t mt_spawn(char *const argv[], const char *log_path)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int fd = open(log_path ? log_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

int mt_stop(pid_t pid, int sig, int timeout_ms)
{
    if (pid <= 0)
        return -1;
    kill(pid, sig);
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        if (r < 0)
            return -1;
        if (mc_now_ms() > deadline)
            break;
        mc_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    if (waitpid(pid, &status, 0) == pid)
        return status;
    return -1;
}

int mt_http_raw(uint16_t port, const char *request, size_t req_len, char **resp_p)
{
    *resp_p = NULL;
    int fd;
    if (mc_net_connect("127.0.0.1", port, 2000, &fd) != MC_OK)
        return -1;
    uint64_t deadline = mc_now_ns() + 5000000000ull;
    if (mc_net_send_all(fd, request, req_len, deadline) != MC_OK) {
        /* the server may answer and close before reading all of a large body */
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        ssize_t n = recv(fd, buf + len, cap - len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == cap)
            break;
    }
    close(fd);
    buf[len] = '\0';
    *resp_p = buf;
    int code = -1;
    if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
        return -1;
    return code;
}

int mt_wait_http_ok(uint16_t port, const char *path, int timeout_ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    char req[512];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    while (mc_now_ms() < deadline) {
        char *resp;
        int code = mt_http_raw(port, req, (size_t)n, &resp);
        free(resp);
        if (code == 200)
            return 0;
        mc_sleep_ms(20);
    }
    return -1;
}

int mt_tmpdir(char *out, size_t len)
{
    const char *t = getenv("TMPDIR");
    snprintf(out, len, "%s/mc_meta_XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(out) ? 0 : -1;
}

void mt_rmdir(const char *dir)
{
    if (!dir || !*dir || strncmp(dir, "/", 1) != 0 || !strstr(dir, "mc_meta_"))
        return;
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/rm", "rm", "-rf", "--", dir, (char *)NULL);
        _exit(127);
    }
    int st;
    if (pid > 0)
        waitpid(pid, &st, 0);
}

void mt_bin_path(const char *name, char *out, size_t len)
{
    const char *d = getenv("MC_BIN_DIR");
    if (d && *d) {
        snprintf(out, len, "%s/%s", d, name);
        return;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    snprintf(out, len, "%s/../bin/%s", self, name);
}

int mt_wait_log(const char *path, const char *needle, int timeout_ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    enum { CAP = 65536 };
    char *buf = malloc(CAP);
    int rc = -1;
    while (buf && rc != 0 && mc_now_ms() < deadline) {
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(buf, 1, CAP - 1, f);
            fclose(f);
            buf[n] = '\0';
            if (strstr(buf, needle))
                rc = 0;
        }
        if (rc != 0)
            mc_sleep_ms(20);
    }
    if (rc != 0) { /* say why: the log as it stands */
        fprintf(stderr, "mt_wait_log: no \"%s\" in %s within %d ms; it ends:\n", needle, path,
                timeout_ms);
        mt_print_log_tail(path);
    }
    free(buf);
    return rc;
}

void mt_print_log_tail(const char *path)
{
    char buf[2049];
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long end = ftell(f);
    fseek(f, end > (long)sizeof(buf) - 1 ? end - (long)sizeof(buf) + 1 : 0, SEEK_SET);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    fprintf(stderr, "%s\n", buf);
}

/* 1 if every thread of pid is stopped ('T' or 't' in /proc/<pid>/task/<tid>/stat). */
static int all_threads_stopped(pid_t pid)
{
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int all = 1, seen = 0;
    struct dirent *de;
    while (all && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char path[384], buf[512];
        snprintf(path, sizeof(path), "%s/%s/stat", dir, de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *rp = strrchr(buf, ')'); /* state follows "(comm) " */
        seen = 1;
        if (!rp || (rp[2] != 'T' && rp[2] != 't'))
            all = 0;
    }
    closedir(d);
    return seen && all;
}

int mt_freeze(pid_t pid, int timeout_ms)
{
    if (pid <= 0 || kill(pid, SIGSTOP) != 0)
        return -1;
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    while (!all_threads_stopped(pid)) {
        if (mc_now_ms() > deadline)
            return -1;
        mc_sleep_ms(2);
    }
    return 0;
}

long mt_mapping_page_kb(pid_t pid, uint64_t addr, const char *name)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    bool in = false;
    while (kb < 0 && fgets(line, sizeof(line), f)) {
        unsigned long long lo, hi;
        int name_at = 0;
        if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %n", &lo, &hi, &name_at) == 2 && name_at > 0)
            in = addr ? (addr >= lo && addr < hi) : strstr(line + name_at, name) != NULL;
        else if (in)
            sscanf(line, "KernelPageSize: %ld kB", &kb);
    }
    fclose(f);
    return kb;
}
