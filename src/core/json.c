// json.c: cJSON parsing with located errors, typed getters.
#include "json.h"

#include "fileio.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

Status json_parse_text(const char *text, size_t len, const char *what, cJSON **out, Err *e) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t off = end ? (size_t)(end - text) : 0;
        size_t line = 1;
        for (size_t i = 0; i < off && i < len; i++) line += text[i] == '\n';
        return err_set(e, ST_EINVAL, "%s: invalid JSON near line %zu (byte %zu)", what, line, off);
    }
    *out = j;
    return ST_OK;
}

Status json_parse_file(const char *path, cJSON **out, Err *e) {
    char *text;
    size_t len;
    TRY(file_read_all(path, &text, &len, e));
    Status st = json_parse_text(text, len, path, out, e);
    free(text);
    return st;
}

static Status missing(const char *key, const char *what, int required, Err *e) {
    if (required) return err_set(e, ST_EINVAL, "%s: missing field \"%s\"", what, key);
    return ST_ENOTFOUND;
}

int json_has(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v);
}

Status json_get_int(const cJSON *obj, const char *key, const char *what, int required, long long *out, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return missing(key, what, required, e);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9.0e15)
        return err_set(e, ST_EINVAL, "%s: field \"%s\" must be an integer", what, key);
    *out = (long long)v->valuedouble;
    return ST_OK;
}

Status json_get_double(const cJSON *obj, const char *key, const char *what, int required, double *out, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return missing(key, what, required, e);
    if (!cJSON_IsNumber(v)) return err_set(e, ST_EINVAL, "%s: field \"%s\" must be a number", what, key);
    *out = v->valuedouble;
    return ST_OK;
}

Status json_get_bool(const cJSON *obj, const char *key, const char *what, int required, int *out, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return missing(key, what, required, e);
    if (!cJSON_IsBool(v)) return err_set(e, ST_EINVAL, "%s: field \"%s\" must be true or false", what, key);
    *out = cJSON_IsTrue(v);
    return ST_OK;
}

Status json_get_string(const cJSON *obj, const char *key, const char *what, int required, const char **out, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return missing(key, what, required, e);
    if (!cJSON_IsString(v)) return err_set(e, ST_EINVAL, "%s: field \"%s\" must be a string", what, key);
    *out = v->valuestring;
    return ST_OK;
}
