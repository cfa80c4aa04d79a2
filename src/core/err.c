// err.c: the Err record (see common.h).
#include "common.h"

#include <stdarg.h>
#include <string.h>

Status err_set(Err *e, Status code, const char *fmt, ...) {
    if (!e) return code;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return code;
}

Status err_prefix(Err *e, const char *fmt, ...) {
    if (!e) return ST_EINVAL;
    char head[ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    char old[ERR_MSG_MAX];
    memcpy(old, e->msg, sizeof old);
    snprintf(e->msg, sizeof e->msg, "%s%s", head, old);
    if (e->code == ST_OK) e->code = ST_EINVAL;
    return e->code;
}

void err_clear(Err *e) {
    if (!e) return;
    e->code = ST_OK;
    e->msg[0] = '\0';
}

const char *status_name(Status s) {
    switch (s) {
    case ST_OK: return "ok";
    case ST_EINVAL: return "invalid input";
    case ST_EIO: return "i/o error";
    case ST_ENOMEM: return "out of memory";
    case ST_EUNSUPPORTED: return "not supported";
    case ST_ENOTFOUND: return "not found";
    case ST_ERUNTIME: return "runtime error";
    case ST_EINTR: return "interrupted";
    case ST_EUSAGE: return "usage error";
    }
    return "unknown";
}
