// hf_cache.c: local Hugging Face cache lookup (huggingface_hub's layout:
// <cache>/models--<org>--<name>/{refs/<revision>, snapshots/<commit>/...}).
#include "hf_cache.h"

#include "alloc.h"
#include "fileio.h"

#include <ctype.h>
#include <dirent.h>
#include <string.h>

static const char *env_nonempty(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

char *hf_hub_cache_dir(void) {
    const char *v;
    if ((v = env_nonempty("HF_HUB_CACHE"))) return xstrdup(v);
    if ((v = env_nonempty("HUGGINGFACE_HUB_CACHE"))) return xstrdup(v);
    if ((v = env_nonempty("HF_HOME"))) return path_join(v, "hub");
    const char *home = env_nonempty("HOME");
    return path_join(home ? home : "/", ".cache/huggingface/hub");
}

static const char *cache_source(void) {
    if (env_nonempty("HF_HUB_CACHE")) return "HF_HUB_CACHE";
    if (env_nonempty("HUGGINGFACE_HUB_CACHE")) return "HUGGINGFACE_HUB_CACHE";
    if (env_nonempty("HF_HOME")) return "HF_HOME/hub";
    return "default ~/.cache/huggingface/hub";
}

static int valid_part(const char *s, size_t n) {
    if (n == 0 || n > 96 || s[0] == '-' || s[0] == '.' || s[n - 1] == '-' || s[n - 1] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '-' && c != '_' && c != '.') return 0;
        if (i && (c == '-' || c == '.') && s[i - 1] == c) return 0;
    }
    return 1;
}

int hf_is_hub_id(const char *s) {
    const char *slash = strchr(s, '/');
    if (!slash) return valid_part(s, strlen(s));
    if (strchr(slash + 1, '/')) return 0;
    return valid_part(s, (size_t)(slash - s)) && valid_part(slash + 1, strlen(slash + 1));
}

static int is_hex(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!isxdigit((unsigned char)*s) || isupper((unsigned char)*s)) return 0;
    return 1;
}

// A revision names a path under refs/: no empty, "." or ".." components.
static int safe_revision(const char *r) {
    if (!*r || r[0] == '/') return 0;
    for (const char *p = r; *p;) {
        const char *q = strchr(p, '/');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return 0;
        p += n + (q ? 1 : 0);
    }
    return 1;
}

// Read refs/<revision> -> commit hash (trimmed). NULL if absent or not a hash.
static char *read_ref(const char *repo, const char *revision) {
    StrBuf sb = {0};
    sb_printf(&sb, "%s/refs/%s", repo, revision);
    char *path = sb_take(&sb);
    char *text = NULL;
    size_t len = 0;
    Err e = {0};
    if (!file_exists(path) || file_read_all(path, &text, &len, &e) != ST_OK) {
        free(path);
        return NULL;
    }
    free(path);
    while (len && isspace((unsigned char)text[len - 1])) text[--len] = '\0';
    if (!is_hex(text)) {
        free(text);
        return NULL;
    }
    return text;
}

// Snapshots whose name starts with prefix: count, and the first match in *out.
static int match_snapshots(const char *snaps, const char *prefix, char **out, StrBuf *all) {
    DIR *d = opendir(snaps);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    size_t pl = strlen(prefix);
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (all) sb_printf(all, "%s%s", all->len ? ", " : "", de->d_name);
        if (strncmp(de->d_name, prefix, pl)) continue;
        if (!n) *out = xstrdup(de->d_name);
        n++;
    }
    closedir(d);
    return n;
}

static Status not_cached(const char *model, const char *repo, Err *e) {
    return err_set(e, ST_ENOTFOUND,
                   "model \"%s\" is not a directory and is not in the local Hugging Face cache; looked in: "
                   "./%s (directory), %s (hub cache from %s). still never downloads: on a machine with network "
                   "run `huggingface-cli download %s` (or `hf download %s`) and copy the cache here, or point "
                   "HF_HUB_CACHE / HF_HOME at it, or pass the model directory",
                   model, model, repo, cache_source(), model, model);
}

Status hf_resolve_model(const char *model, const char *revision, char **dir, Err *e) {
    *dir = NULL;
    if (!model || !*model) return err_set(e, ST_EINVAL, "--model: empty model name");
    size_t ml = strlen(model);
    if (dir_exists(model) || (ml > 5 && !strcmp(model + ml - 5, ".gguf") && file_exists(model))) {
        *dir = xstrdup(model);  // a model directory, or a GGUF file
        return ST_OK;
    }
    if (!hf_is_hub_id(model))
        return err_set(e, ST_ENOTFOUND, "model \"%s\": no such directory or .gguf file (and not a hub id of the form org/name)",
                       model);
    const char *rev = revision && *revision ? revision : "main";
    if (!safe_revision(rev)) return err_set(e, ST_EINVAL, "--revision \"%s\" is not a valid revision", rev);

    char *cache = hf_hub_cache_dir();
    StrBuf sb = {0};
    sb_printf(&sb, "%s/models--", cache);
    for (const char *p = model; *p; p++) {
        if (*p == '/') sb_puts(&sb, "--");
        else sb_putc(&sb, *p);
    }
    char *repo = sb_take(&sb);
    char *snaps = path_join(repo, "snapshots");
    char *commit = NULL;
    Status st = ST_OK;
    if (!dir_exists(repo)) {
        st = not_cached(model, repo, e);
        goto done;
    }
    commit = read_ref(repo, rev);
    if (!commit && is_hex(rev) && strlen(rev) >= 7 && strlen(rev) <= 40) {
        int n = match_snapshots(snaps, rev, &commit, NULL);
        if (n > 1) {
            st = err_set(e, ST_EINVAL, "%s: revision \"%s\" matches %d snapshots; give more of the commit hash", repo,
                         rev, n);
            goto done;
        }
    }
    if (!commit) {
        StrBuf all = {0};
        char *unused = NULL;
        match_snapshots(snaps, "", &unused, &all);
        free(unused);
        st = err_set(e, ST_ENOTFOUND,
                     "model \"%s\": revision \"%s\" is not in the local cache %s (no refs/%s, no snapshot with that "
                     "commit; snapshots: %s). still never downloads: on a machine with network run "
                     "`huggingface-cli download %s --revision %s`",
                     model, rev, repo, rev, all.len ? all.data : "none", model, rev);
        sb_free(&all);
        goto done;
    }
    char *snap = path_join(snaps, commit);
    if (!dir_exists(snap)) {
        st = err_set(e, ST_ENOTFOUND, "%s: refs/%s points at commit %s, but snapshots/%s is missing (incomplete download?)",
                     repo, rev, commit, commit);
        free(snap);
        goto done;
    }
    *dir = snap;
done:
    free(commit);
    free(snaps);
    free(repo);
    free(cache);
    return st;
}
