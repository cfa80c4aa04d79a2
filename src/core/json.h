// json.h: cJSON plus typed getters that report the file and field on a mismatch.
#ifndef STILL_JSON_H
#define STILL_JSON_H

#include "common.h"

#include <cjson/cJSON.h>

// Parse a file; the error names the file and the byte offset of the problem.
Status json_parse_file(const char *path, cJSON **out, Err *e);
Status json_parse_text(const char *text, size_t len, const char *what, cJSON **out, Err *e);

// Getters: `what` names the source (file path) for the message. A missing key returns
// ST_ENOTFOUND when required=0 leaves *out untouched; required=1 turns absence into an error.
Status json_get_int(const cJSON *obj, const char *key, const char *what, int required, long long *out, Err *e);
Status json_get_double(const cJSON *obj, const char *key, const char *what, int required, double *out, Err *e);
Status json_get_bool(const cJSON *obj, const char *key, const char *what, int required, int *out, Err *e);
// *out points into the cJSON tree.
Status json_get_string(const cJSON *obj, const char *key, const char *what, int required, const char **out, Err *e);
// Present and not null.
int json_has(const cJSON *obj, const char *key);

#endif
