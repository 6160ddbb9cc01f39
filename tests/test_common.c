/* test_common.c - error formatting, checked allocation, the ISA level chosen once, NX_ASSERT. */
/* NX_ASSERT as checked builds compile it, whatever this build's type (see test_assert_*). */
#ifndef NX_CHECKS
#define NX_CHECKS 1
#endif
#include "testutil.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/common.h"
#include "base/cpu.h"
#include "base/file_safe.h"

static void test_fail_formats_and_returns_false(void **state) {
    (void)state;
    nx_err e;
    assert_false(nx_fail(&e, "%s: tensor '%s' has %d dims", "m.gguf", "x", 5));
    assert_string_equal(e.msg, "m.gguf: tensor 'x' has 5 dims");
    assert_false(nx_fail_prefix(&e, "loading %s", "model"));
    assert_string_equal(e.msg, "loading model: m.gguf: tensor 'x' has 5 dims");
    assert_false(nx_fail(NULL, "no buffer is fine"));
}

static void test_calloc_overflow_is_an_error(void **state) {
    (void)state;
    nx_err e;
    void *p = nx_calloc(SIZE_MAX / 2, 4, "huge table", &e);
    assert_null(p);
    assert_non_null(strstr(e.msg, "huge table"));
    uint64_t out;
    assert_false(nx_mul_ok(UINT64_MAX, 2, &out));
    assert_true(nx_add_ok(1, 2, &out));
    assert_int_equal(out, 3);
}

static void test_aligned_alloc_is_aligned_and_zeroed(void **state) {
    (void)state;
    unsigned char *p = nx_alloc_aligned(100, "scratch", NULL);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0);
    for (int i = 0; i < 100; i++) assert_int_equal(p[i], 0);
    nx_free_aligned(p);
}

/* The ISA level is chosen once, at the first nx_cpu_isa() call, from the CPU and NX_ISA (which
 * can only lower it), and nothing changes it later: a later NX_ISA has no effect.  Nothing else in
 * this program reads the level, so the first call is here. */
static void test_isa_level_fixed_at_first_use(void **state) {
    (void)state;
    setenv("NX_ISA", "scalar", 1);
    assert_int_equal(nx_cpu_isa(), NX_ISA_SCALAR);
    setenv("NX_ISA", "avx512", 1);
    assert_int_equal(nx_cpu_isa(), NX_ISA_SCALAR);
    unsetenv("NX_ISA");
    assert_int_equal(nx_cpu_isa(), NX_ISA_SCALAR);
}

/* A true NX_ASSERT does nothing; a false one prints file:line, the condition and the message on
 * stderr and aborts (run in a child process). */
/* file_safe: only regular files are read (no blocking on a FIFO: the open would wait for a
 * writer, a read for data, and this test would hang); writes replace only regular files and
 * leave no temporary file behind. */
static void test_file_safe_refuses_non_regular(void **state) {
    (void)state;
    char reg[1024], fifo[1024], link[1024], tmp[1100];
    snprintf(reg, sizeof reg, "%s", tu_tmp_path("fs_reg"));
    snprintf(fifo, sizeof fifo, "%s", tu_tmp_path("fs_fifo"));
    snprintf(link, sizeof link, "%s", tu_tmp_path("fs_link"));
    unlink(reg), unlink(fifo), unlink(link);
    nx_err e;
    FILE *f = nx_fcreate_begin(reg, tmp, sizeof tmp, &e);
    assert_non_null(f);
    assert_int_equal(fputs("one", f) >= 0, 1);
    assert_true(nx_fcreate_commit(f, tmp, reg, true, &e));
    assert_int_equal(access(tmp, F_OK), -1);
    f = nx_fopen_regular(reg, &e);
    assert_non_null(f);
    char buf[8] = {0};
    assert_int_equal(fread(buf, 1, sizeof buf, f), 3);
    assert_string_equal(buf, "one");
    fclose(f);
    /* a failed write keeps the old contents and removes its temporary file */
    f = nx_fcreate_begin(reg, tmp, sizeof tmp, &e);
    assert_non_null(f);
    fputs("two", f);
    snprintf(e.msg, sizeof e.msg, "mine");
    assert_false(nx_fcreate_commit(f, tmp, reg, false, &e));
    assert_string_equal(e.msg, "mine");
    assert_int_equal(access(tmp, F_OK), -1);

    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(symlink(reg, link), 0);
    assert_null(nx_fopen_regular(fifo, &e));
    assert_non_null(strstr(e.msg, "is a FIFO"));
    assert_non_null(strstr(e.msg, fifo));
    assert_null(nx_fopen_regular(link, &e));
    assert_non_null(strstr(e.msg, "is a symbolic link"));
    assert_null(nx_fopen_regular("/dev/null", &e));
    assert_non_null(strstr(e.msg, "/dev/null: is a character device"));
    assert_null(nx_fopen_regular("/", &e));
    assert_non_null(strstr(e.msg, "is a folder"));
    assert_null(nx_fcreate_begin(fifo, tmp, sizeof tmp, &e));
    assert_non_null(strstr(e.msg, "is a FIFO"));
    assert_null(nx_fcreate_begin(link, tmp, sizeof tmp, &e));
    assert_non_null(strstr(e.msg, "is a symbolic link"));
    struct stat sb;
    assert_int_equal(lstat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    unlink(reg), unlink(fifo), unlink(link);
}

static void test_assert_aborts_with_message(void **state) {
    (void)state;
    int evaluated = 0;
    NX_ASSERT(++evaluated == 1, "not reached");
    assert_int_equal(evaluated, 1);
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 2);
        const int two = 2;
        NX_ASSERT(two == 3, "two is %d", two);
        _exit(0); /* not reached when the assertion works */
    }
    close(fd[1]);
    char buf[512] = {0};
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(fd[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    close(fd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
    assert_non_null(strstr(buf, "test_common.c:"));
    assert_non_null(strstr(buf, "two == 3: two is 2"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isa_level_fixed_at_first_use),
        cmocka_unit_test(test_assert_aborts_with_message),
        cmocka_unit_test(test_file_safe_refuses_non_regular),
        cmocka_unit_test(test_fail_formats_and_returns_false),
        cmocka_unit_test(test_calloc_overflow_is_an_error),
        cmocka_unit_test(test_aligned_alloc_is_aligned_and_zeroed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
