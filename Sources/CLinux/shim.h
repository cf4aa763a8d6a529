#ifndef HERALD_CLINUX_SHIM_H
#define HERALD_CLINUX_SHIM_H
/* Linux system calls that Glibc's Swift module does not export: epoll and eventfd. The one
   place Herald's Swift code gets them from (the APNs engines, the PostgreSQL listener, the
   stream hang-up watcher). */
#include <stdint.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

/* EPOLLRDHUP is an enum constant in glibc's header and imports; these spell the masks the
   watchers use as plain unsigned ints, so Swift needs no `.rawValue` arithmetic. */

/** The events that mean the peer is gone: it shut down its side (FIN), reset (RST), or the socket failed. */
static inline uint32_t herald_epoll_hangup_events(void) { return (uint32_t)(EPOLLRDHUP | EPOLLHUP | EPOLLERR); }

/** A non-blocking, close-on-exec eventfd (-1 on error, errno set). */
static inline int herald_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

/** Adds 1 to an eventfd's counter: whoever polls it wakes up. */
static inline void herald_eventfd_signal(int fd) { uint64_t one = 1; (void)!write(fd, &one, sizeof one); }

/** Resets an eventfd's counter (after it woke a poll). */
static inline void herald_eventfd_drain(int fd) { uint64_t n; (void)!read(fd, &n, sizeof n); }
#endif
