#ifndef HERALD_CMICROHTTPD_SHIM_H
#define HERALD_CMICROHTTPD_SHIM_H
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <stdint.h>
#include <stdarg.h>
#include <microhttpd.h>
/* MHD_start_daemon is variadic and does not import: typed wrappers live here (added with the daemon). */
#endif
