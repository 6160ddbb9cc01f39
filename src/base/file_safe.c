/* file_safe.c - non-blocking, link-refusing opens of client/user-named files (see file_safe.h). */
#include "base/file_safe.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *nx_file_kind(mode_t m) {
    if (S_ISLNK(m)) return "a symbolic link";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISDIR(m)) return "a folder";
    return "not a regular file";
}

static bool refuse(nx_err *err, const char *path, mode_t m) {
    return nx_fail(err, "%s: is %s; only a regular file is accepted", path, nx_file_kind(m));
}

FILE *nx_fopen_regular(const char *path, nx_err *err) {
    struct stat ls, fs;
    if (lstat(path, &ls) != 0) {
        nx_fail(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(ls.st_mode)) {
        refuse(err, path, ls.st_mode);
        return NULL;
    }
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        const int e = errno;
        if (e == ELOOP && lstat(path, &ls) == 0 && S_ISLNK(ls.st_mode))
            refuse(err, path, ls.st_mode);
        else
            nx_fail(err, "%s: cannot open: %s", path, strerror(e));
        return NULL;
    }
    if (fstat(fd, &fs) != 0) {
        nx_fail(err, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(fs.st_mode) || fs.st_dev != ls.st_dev || fs.st_ino != ls.st_ino) {
        if (!S_ISREG(fs.st_mode))
            refuse(err, path, fs.st_mode);
        else
            nx_fail(err, "%s: replaced by another file while being opened", path);
        close(fd);
        return NULL;
    }
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        nx_fail(err, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        nx_fail(err, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

FILE *nx_fcreate_begin(const char *path, char *tmp, size_t tmp_cap, nx_err *err) {
    struct stat ls;
    if (lstat(path, &ls) == 0) {
        if (!S_ISREG(ls.st_mode)) {
            refuse(err, path, ls.st_mode);
            return NULL;
        }
    } else if (errno != ENOENT) {
        nx_fail(err, "%s: cannot create: %s", path, strerror(errno));
        return NULL;
    }
    const int n = snprintf(tmp, tmp_cap, "%s.tmp.XXXXXX", path);
    if (n < 0 || (size_t)n >= tmp_cap) {
        nx_fail(err, "%s: cannot create: the path is too long", path);
        return NULL;
    }
    const int fd = mkstemp(tmp); /* O_CREAT | O_EXCL: never opens an existing file or link */
    if (fd < 0) {
        nx_fail(err, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        return NULL;
    }
    FILE *f = NULL;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 || fchmod(fd, 0644) != 0 || !(f = fdopen(fd, "wb"))) {
        nx_fail(err, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return NULL;
    }
    return f;
}

bool nx_fcreate_commit(FILE *f, const char *tmp, const char *path, bool ok, nx_err *err) {
    int e = 0;
    if (ok && (fflush(f) != 0 || fsync(fileno(f)) != 0)) e = errno;
    if (fclose(f) != 0 && !e) e = errno;
    if (ok && !e) {
        struct stat ls;
        if (lstat(path, &ls) == 0 && !S_ISREG(ls.st_mode)) {
            unlink(tmp);
            return refuse(err, path, ls.st_mode);
        }
        if (rename(tmp, path) == 0) return true;
        e = errno;
    }
    unlink(tmp);
    if (!ok) return false; /* the caller's own failure: its message stands */
    return nx_fail(err, "%s: write failed: %s", path, strerror(e));
}
