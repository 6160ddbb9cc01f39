/* file_safe.h - opening files named by a client or a user (server slot files, state files, the
 * chat's /save and /load) without ever blocking and without following links.
 *
 * Invariants:
 *  - A read open succeeds only on a regular file.  The final path component may not be a
 *    symbolic link (O_NOFOLLOW); FIFOs, devices, sockets and directories are refused by lstat
 *    before any open, and the descriptor is opened O_NONBLOCK and fstat'ed (same inode as the
 *    lstat, still regular) before O_NONBLOCK is cleared, so a FIFO swapped in between cannot block
 *    the caller either.  Errors name the path and what it is ("is a FIFO (named pipe)").
 *  - A write never opens the destination: it goes to a fresh file created O_EXCL next to it
 *    ("PATH.tmp.XXXXXX", mode 0644) and is renamed over PATH at commit, after fsync; an existing
 *    PATH that is not a regular file (symbolic link, FIFO, device, folder) is refused at begin.
 *    On any failure the temporary file is removed.
 *  - Descriptors are close-on-exec.
 */
#ifndef NX_FILE_SAFE_H
#define NX_FILE_SAFE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "base/common.h"

/* What a file of mode m is, for messages: "a FIFO (named pipe)", "a symbolic link", ... */
const char *nx_file_kind(mode_t m);

/* Opens a regular file for reading ("rb"); NULL + err (naming path) otherwise. */
FILE *nx_fopen_regular(const char *path, nx_err *err);

/* Starts writing PATH: returns a FILE on a new temporary file in PATH's folder, whose name is
 * stored in tmp (tmp_cap bytes); NULL + err when PATH exists and is not a regular file or the
 * temporary file cannot be made. */
FILE *nx_fcreate_begin(const char *path, char *tmp, size_t tmp_cap, nx_err *err);

/* Finishes a write started by nx_fcreate_begin: when ok, flushes, fsyncs, closes and renames tmp
 * over path; otherwise (or on any failure) closes and removes tmp.  Returns whether path now
 * holds the new contents.  When ok is false err is left as the caller set it; a failure here
 * fills err naming path. */
bool nx_fcreate_commit(FILE *f, const char *tmp, const char *path, bool ok, nx_err *err);

#endif
