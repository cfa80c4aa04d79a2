// torch_fixture.h: the PyTorch fixtures of the op tests (written by scripts/ref_ops.py and
// scripts/ref_heads.py): named f32 / i32 records of one file, and the norm-wise comparison of an
// output with its record. File (little endian): "STILLOPS1", then records until the end: u8 kind
// (0 f32, 1 i32), u8 name length, the name, u32 count, count 4-byte values.
#ifndef STILL_TESTS_TORCH_FIXTURE_H
#define STILL_TESTS_TORCH_FIXTURE_H

#include "ops_util.h"

typedef struct {
    char name[64];
    int kind;  // 0 f32, 1 i32
    uint32_t n;
    void *data;  // (n) values
} FixtureRec;

static struct {
    const char *path;
    double tol;  // largest norm-wise relative error expect_ref accepts
    FixtureRec *recs;
    int n;
} fixture;

// Read every record of path; 0 when the file is missing, not a fixture or empty.
static inline int fixture_load(const char *path, double tol) {
    fixture.path = path, fixture.tol = tol;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char magic[9];
    if (fread(magic, 1, 9, f) != 9 || memcmp(magic, "STILLOPS1", 9)) return fclose(f), 0;
    unsigned char hdr[2];
    while (fread(hdr, 1, 2, f) == 2) {
        FixtureRec r = {.kind = hdr[0]};
        if (hdr[1] >= sizeof r.name || fread(r.name, 1, hdr[1], f) != hdr[1] || fread(&r.n, 4, 1, f) != 1) break;
        r.data = xmalloc((size_t)r.n * 4 + 4);
        if (fread(r.data, 4, r.n, f) != r.n) {
            free(r.data);
            break;
        }
        fixture.recs = xrealloc(fixture.recs, (size_t)(fixture.n + 1) * sizeof r);
        fixture.recs[fixture.n++] = r;
    }
    fclose(f);
    return fixture.n > 0;
}

static inline void fixture_free(void) {
    for (int i = 0; i < fixture.n; i++) free(fixture.recs[i].data);
    free(fixture.recs);
    fixture.recs = NULL, fixture.n = 0;
}

// The record `name`; a missing one fails the whole program (the fixture and the test disagree).
static inline const FixtureRec *fixture_get(const char *name) {
    for (int i = 0; i < fixture.n; i++)
        if (!strcmp(fixture.recs[i].name, name)) return &fixture.recs[i];
    printf("FAIL fixture: %s has no record %s\n", fixture.path, name);
    exit(1);
}

static inline float *F(const char *name) { return fixture_get(name)->data; }
static inline int32_t *I(const char *name) { return fixture_get(name)->data; }

// got (n) against the record `name`: the largest error over the largest reference magnitude
// <= fixture.tol; a NaN on either side fails.
static inline void expect_ref(const char *name, const float *got, size_t n) {
    const FixtureRec *r = fixture_get(name);
    EXPECT_MSG(r->n == n, "%s: fixture has %u values, code gives %zu", name, r->n, n);
    const float *want = r->data;
    double maxref = 0, maxerr = 0;
    size_t worst = 0;
    for (size_t i = 0; i < n && i < r->n; i++) {
        maxref = fmax(maxref, fabs(want[i]));
        double e = fabs((double)got[i] - want[i]);
        if (isnan(got[i]) || isnan(want[i])) e = INFINITY;
        if (e > maxerr) maxerr = e, worst = i;
    }
    double rel = maxref > 0 ? maxerr / maxref : maxerr;
    if (getenv("OPS_VERBOSE")) printf("  %-22s rel err vs torch %.2e\n", name, rel);
    EXPECT_MSG(rel <= fixture.tol, "%s: rel err vs torch %.3g > %.0g at [%zu]: %.8g vs %.8g", name, rel, fixture.tol,
               worst, got[worst], want[worst]);
}

#endif
