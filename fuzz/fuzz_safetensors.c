// fuzz_safetensors.c: the input is a whole .safetensors file, opened with st_open (header
// validation, offsets, overlap, alignment copies). Every tensor found is read end to end, so a
// range the validation let through that lies outside the mapping shows up under ASan.
#include "fuzz.h"

#include "model/safetensors.h"

#include <stdio.h>

static volatile unsigned sink;  // keeps the reads below

Status fuzz_safetensors(const uint8_t *data, size_t size, Err *e) {
    fuzz_write_file(fuzz_tmpdir(), "model.safetensors", data, size);
    char path[1100];
    snprintf(path, sizeof path, "%s/model.safetensors", fuzz_tmpdir());
    StSet set;
    Status st = st_open(path, &set, e);
    if (st != ST_OK) return st;
    for (int i = 0; i < set.n_tensors; i++) {
        const StTensor *t = &set.tensors[i];
        const unsigned char *p = t->data;
        unsigned sum = 0;
        for (size_t k = 0; k < t->nbytes; k++) sum += p[k];
        sink = sum;
        if (st_find(&set, t->name) != t) abort();
    }
    st_close(&set);
    return ST_OK;
}

FUZZ_ENTRY(safetensors)
