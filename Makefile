# still: one flat GNU Makefile. `make` builds ./still; `make test`, `make asan`, `make refs`,
# `make bench`, `make fuzz`, `make check-full`, `make demo`; `make CUDA=1` adds the CUDA backend;
# `make CUDA_EMU=1` builds it for the CUDA emulator instead (tests/cuemu), `make test-cuda-emu` runs
# it (part of `make test`), `make asan-cuda-emu` under ASan (part of `make check-full`).
# A dependency step installs missing Debian packages first (NO_DEPS=1 skips it).

CC ?= gcc
ifeq ($(origin CC),default)
CC := gcc
endif
NO_DEPS ?= 0
CUDA ?= 0
CUDA_EMU ?= 0
# CUDA=1 and CUDA_EMU=1 objects are compiled with -DSTILL_CUDA: they get their own build directories.
BUILD ?= $(if $(filter 1,$(CUDA)),build-cuda,$(if $(filter 1,$(CUDA_EMU)),build-emu,build))
MPI ?= auto
# The emulated backend has no NCCL to pair with MPI: single process.
ifeq ($(CUDA_EMU),1)
MPI := 0
endif

DEPS_STAMP := $(BUILD)/.deps-ok
$(shell mkdir -p $(BUILD))
ifneq ($(NO_DEPS),1)
ifeq ($(wildcard $(DEPS_STAMP)),)
$(info still: checking Debian packages (NO_DEPS=1 skips))
DEPS_RC := $(shell scripts/deps.sh build >&2 && touch $(DEPS_STAMP); echo $$?)
endif
endif

PKGS := libcjson libpcre2-8 libutf8proc yaml-0.1
# DEPS_PREFIX=DIR: the Debian packages unpacked under DIR (`dpkg -x`, scripts/gpu_check.sh) instead of
# installed ones, for machines without a package registry; pkg-config is bypassed.
DEPS_PREFIX ?=
ifneq ($(DEPS_PREFIX),)
DEPS_MULTIARCH := $(DEPS_PREFIX)/usr/lib/$(shell gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
PKG_CFLAGS := -I$(DEPS_PREFIX)/usr/include -I$(DEPS_PREFIX)/usr/include/$(notdir $(DEPS_MULTIARCH))
PKG_LIBS := -L$(DEPS_MULTIARCH) -Wl,-rpath,$(DEPS_MULTIARCH) -lcjson -lpcre2-8 -lutf8proc -lyaml
OPENBLAS_ROOTS := $(DEPS_MULTIARCH)/openblas-openmp
OPENBLAS_INC := $(DEPS_PREFIX)/usr/include/$(notdir $(DEPS_MULTIARCH))/openblas-openmp
$(info still: dependencies from $(DEPS_PREFIX))
else
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
OPENBLAS_ROOTS := /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
OPENBLAS_INC := /usr/include/x86_64-linux-gnu/openblas-openmp -I/usr/include/aarch64-linux-gnu/openblas-openmp
endif

# libedit (line editing and history in `still chat`): optional, on when pkg-config finds it.
EDIT_CFLAGS := $(if $(DEPS_PREFIX),,$(shell pkg-config --cflags libedit 2>/dev/null))
EDIT_LIBS := $(if $(DEPS_PREFIX),,$(shell pkg-config --libs libedit 2>/dev/null))
ifneq ($(EDIT_LIBS),)
PKG_CFLAGS += -DSTILL_LIBEDIT $(filter-out -I%editline,$(EDIT_CFLAGS))
PKG_LIBS += $(EDIT_LIBS)
$(info still: libedit on (line editing in still chat))
else
$(info still: libedit off (still chat reads plain lines))
endif

# libmicrohttpd (the HTTP of still serve): optional, on when pkg-config finds it.
HTTPD_CFLAGS := $(if $(DEPS_PREFIX),,$(shell pkg-config --cflags libmicrohttpd 2>/dev/null))
HTTPD_LIBS := $(if $(DEPS_PREFIX),,$(shell pkg-config --libs libmicrohttpd 2>/dev/null))
ifneq ($(HTTPD_LIBS),)
PKG_CFLAGS += -DSTILL_MICROHTTPD $(HTTPD_CFLAGS)
PKG_LIBS += $(HTTPD_LIBS)
$(info still: libmicrohttpd on (still serve))
else
$(info still: libmicrohttpd off (still serve says so))
endif

# OpenBLAS: the OpenMP build, so BLAS and our OpenMP loops share the cores.
OPENBLAS_DIR := $(firstword $(wildcard $(OPENBLAS_ROOTS)))
ifneq ($(OPENBLAS_DIR),)
BLAS_CFLAGS := -DSTILL_OPENBLAS -I$(OPENBLAS_INC)
BLAS_LIBS := -L$(OPENBLAS_DIR) -Wl,-rpath,$(OPENBLAS_DIR) -lopenblas
$(info still: OpenBLAS (openmp) found in $(OPENBLAS_DIR))
else
$(info still: OpenBLAS not found: the CPU backend uses its own matmul (slow))
endif

$(info still: OpenMP on ($(CC) -fopenmp))

MARCH ?= -march=native
OPT ?= -O2
WARN := -Wall -Wextra -Werror -Wvla -Wno-unused-parameter -Wno-format-truncation -Wno-missing-field-initializers
CFLAGS_BASE := -std=gnu11 -D_GNU_SOURCE -g $(WARN) -fopenmp $(PKG_CFLAGS) $(BLAS_CFLAGS) -Isrc
CFLAGS := $(CFLAGS_BASE) $(OPT) $(MARCH) $(EXTRA_CFLAGS)
LDLIBS := -fopenmp $(PKG_LIBS) $(BLAS_LIBS) -lm -lpthread $(EXTRA_LDLIBS)

# MPI: optional, on when mpicc is found.
ifeq ($(MPI),auto)
MPI := $(if $(shell command -v mpicc 2>/dev/null),1,0)
endif
ifeq ($(MPI),1)
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null) -DSTILL_MPI
MPI_LIBS := $(shell mpicc --showme:link 2>/dev/null)
CFLAGS += $(MPI_CFLAGS)
LDLIBS += $(MPI_LIBS)
$(info still: MPI on (mpicc))
else
$(info still: MPI off (single process))
endif

# CUDA: `make CUDA=1` (compile-only without a GPU).
NVCC ?= $(firstword $(wildcard /usr/local/cuda/bin/nvcc) nvcc)
ifeq ($(CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_SRCS := $(wildcard src/backend/cuda/*.cu)
CFLAGS += -DSTILL_CUDA -I$(CUDA_HOME)/include
# nvcc objects are C++: the C link adds libstdc++ (static-init guards, new/delete of the runtime).
LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt -lstdc++
# Machine code for the GPUs users have (A100 80, A10 / RTX 30 86, L4 / L40 / RTX 40 89, H100 / H200
# 90), and PTX of the last, which newer GPUs compile when the program loads; the backend refuses
# at startup a GPU none of them runs on. CUDA_ARCHS="90" builds one (faster to compile).
CUDA_ARCHS ?= 80 86 89 90
cuda_space := $(subst ,, )
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
                -gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS))
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_GENCODE) -DSTILL_CUDA_ARCHS=\"$(subst $(cuda_space),_,$(strip $(CUDA_ARCHS)))\" -Isrc \
             -Xcompiler -Wall,-Wno-unused-parameter
$(info still: CUDA on ($(NVCC), CUDA_ARCHS $(CUDA_ARCHS) + PTX $(lastword $(CUDA_ARCHS))))
# NCCL carries the collectives of device buffers when MPI is on too (src/dist/dist_nccl.c).
ifeq ($(MPI),1)
NCCL_HOME ?= $(firstword $(patsubst %/include/nccl.h,%,$(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h)) $(CUDA_HOME))
NCCL_LIBDIR ?= $(firstword $(patsubst %/libnccl.so,%,$(wildcard $(NCCL_HOME)/lib64/libnccl.so $(NCCL_HOME)/lib/libnccl.so \
                 /usr/lib/x86_64-linux-gnu/libnccl.so /usr/lib/aarch64-linux-gnu/libnccl.so)) $(NCCL_HOME)/lib64)
CFLAGS += -I$(NCCL_HOME)/include
LDLIBS += -L$(NCCL_LIBDIR) -Wl,-rpath,$(NCCL_LIBDIR) -lnccl
$(info still: NCCL on ($(NCCL_LIBDIR)))
endif
else ifeq ($(CUDA_EMU),1)
# The CUDA sources, rewritten by tests/cuemu/cu2cpp.py into $(BUILD)/cuemu-src and compiled as host
# C++ against the emulator's shim headers (docs/cuemu.md); backend_create("cuda") gets the emulator.
CUEMU := tests/cuemu
CUDA_SRCS := $(wildcard src/backend/cuda/*.cu)
CUEMU_GEN := $(BUILD)/cuemu-src
CUEMU_GEN_HDRS := $(patsubst %,$(CUEMU_GEN)/%,$(wildcard src/backend/cuda/*.cuh))
CXX := g++
CUEMU_CXXFLAGS := -std=gnu++17 -D_GNU_SOURCE -g $(WARN) $(OPT) $(MARCH) $(PKG_CFLAGS) -Isrc -I$(CUEMU)/include \
                  -iquote src/backend/cuda $(EXTRA_CFLAGS)
# Kernel locals start as a pattern, not as whatever the stack held: a read before a write shows;
# stack frames are probed page by page, so one larger than a thread's stack hits its guard page.
# nvcc's host compiler never sees device code, so C++'s signed / unsigned comparison warning (in
# -Wall) is new to these files: off for them.
CUEMU_KERNEL_FLAGS := -ftrivial-auto-var-init=pattern -fstack-clash-protection -Wno-sign-compare
CFLAGS += -DSTILL_CUDA
LDLIBS += -lstdc++
$(info still: CUDA emulated on the CPU (tests/cuemu, $(CXX)))
else
CUDA_SRCS :=
$(info still: CUDA off (make CUDA=1 to build the CUDA backend))
endif

LIB_SRCS := $(filter-out src/cli/main.c,$(wildcard src/core/*.c src/model/*.c src/backend/*.c src/backend/ref/*.c \
            src/backend/cpu/*.c src/tokenizer/*.c src/gen/*.c src/train/*.c src/dist/*.c src/demo/*.c src/serve/*.c src/cli/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(CUDA_SRCS:%.cu=$(BUILD)/%.o)
ifeq ($(CUDA_EMU),1)
LIB_OBJS += $(BUILD)/tests/cuemu/cuemu.o
endif
LIB := $(BUILD)/libstill.a

TEST_SRCS := $(wildcard tests/unit/*.c tests/ops/*.c tests/model/*.c)
TEST_BINS := $(TEST_SRCS:%.c=$(BUILD)/%)
# helpers the shell tests call (not tests themselves)
TOOL_SRCS := $(wildcard tests/tools/*.c)
TEST_BINS += $(TOOL_SRCS:%.c=$(BUILD)/%)
# Fuzz targets (fuzz/fuzz_NAME.c): objects for the regression replay test; libFuzzer binaries
# for scripts/fuzz.sh, which builds them with clang in build-fuzz/.
FUZZ_SRCS := $(wildcard fuzz/fuzz_*.c)
FUZZ_OBJS := $(FUZZ_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/fuzz/common.o
FUZZ_BINS := $(FUZZ_SRCS:fuzz/%.c=$(BUILD)/fuzz/bin/%)
BENCH_SRCS := $(wildcard bench/*.c)
BENCH_BINS := $(BENCH_SRCS:%.c=$(BUILD)/%)

.PHONY: npm-clients all test test-cuda-emu cuda-emu-build asan asan-cuda-emu refs bench fuzz fuzz-targets check-full demo clean deps FORCE
all: still

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	@$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

ifeq ($(CUDA_EMU),1)
$(CUEMU_GEN)/%.cpp: %.cu $(CUEMU)/cu2cpp.py
	@mkdir -p $(dir $@)
	@python3 $(CUEMU)/cu2cpp.py $< $@

$(CUEMU_GEN_HDRS): $(CUEMU_GEN)/%: % $(CUEMU)/cu2cpp.py
	@mkdir -p $(dir $@)
	@python3 $(CUEMU)/cu2cpp.py $< $@

$(CUDA_SRCS:%.cu=$(BUILD)/%.o): $(BUILD)/%.o: $(CUEMU_GEN)/%.cpp | $(CUEMU_GEN_HDRS)
	@mkdir -p $(dir $@)
	@echo "  CXX   $*.cu (emulated)"
	@$(CXX) $(CUEMU_CXXFLAGS) $(CUEMU_KERNEL_FLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

$(BUILD)/tests/cuemu/cuemu.o: $(CUEMU)/cuemu.cpp
	@mkdir -p $(dir $@)
	@echo "  CXX   $<"
	@$(CXX) $(CUEMU_CXXFLAGS) -MMD -MP -c $< -o $@

.SECONDARY: $(CUDA_SRCS:%.cu=$(CUEMU_GEN)/%.cpp)
endif

# still --version: the commit it was built from (scripts/version.sh rewrites the header only when
# the commit changes).
VERSION_H := $(BUILD)/gen/still_commit.h
$(shell scripts/version.sh $(VERSION_H))
$(BUILD)/src/cli/main.o: $(VERSION_H)
$(BUILD)/src/cli/main.o: CFLAGS += -I$(BUILD)/gen

$(LIB): $(LIB_OBJS)
	@rm -f $@
	@ar rcs $@ $^

# ./still is relinked whenever it was last linked from another build directory (CUDA=1 or not).
ifneq ($(shell cat .still-build 2>/dev/null),$(BUILD))
still: FORCE
endif
still: $(BUILD)/src/cli/main.o $(LIB)
	@echo "  LD    $@"
	@$(CC) $(CFLAGS) -o $@ $(BUILD)/src/cli/main.o $(LIB) $(LDLIBS)
	@echo $(BUILD) >.still-build
FORCE:

# A binary that stays in its build directory (the emulated build's; ./still is the CPU build's).
$(BUILD)/still: $(BUILD)/src/cli/main.o $(LIB)
	@echo "  LD    $@"
	@$(CC) $(CFLAGS) -o $@ $(BUILD)/src/cli/main.o $(LIB) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(LIB) tests/test.h
	@mkdir -p $(dir $@)
	@echo "  TEST  $@"
	@$(CC) $(CFLAGS) -Itests -Ifuzz -MMD -MP -o $@ $< $(filter %.o,$^) $(LIB) $(LDLIBS)

$(BUILD)/tests/unit/test_fuzz_regressions: $(FUZZ_OBJS)

ifeq ($(CUDA_EMU),1)
$(BUILD)/tests/cuemu/test_cuemu: $(CUEMU_GEN)/tests/cuemu/test_cuemu.cpp $(BUILD)/tests/cuemu/cuemu.o tests/test.h
	@mkdir -p $(dir $@)
	@echo "  TEST  $@"
	@$(CXX) $(CUEMU_CXXFLAGS) $(CUEMU_KERNEL_FLAGS) -Itests -MMD -MP -o $@ $< $(BUILD)/tests/cuemu/cuemu.o -lm -lpthread
endif

$(BUILD)/fuzz/bin/%: fuzz/%.c fuzz/common.c fuzz/fuzz.h fuzz/args_specs.h $(LIB)
	@mkdir -p $(dir $@)
	@echo "  FUZZ  $@"
	@$(CC) $(CFLAGS) -DSTILL_LIBFUZZER -o $@ $< fuzz/common.c $(LIB) $(LDLIBS)

fuzz-targets: $(FUZZ_BINS)

tests: $(TEST_BINS)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	@echo "  BENCH $@"
	@$(CC) $(CFLAGS) -MMD -MP -o $@ $< $(LIB) $(LDLIBS)

# Every suite; the last line is "N passed, N failed[, N skipped]". The CPU build's `make test` also
# runs the CUDA backend under the emulator (test-cuda-emu below: about 25 s, its own build-emu/).
ifeq ($(CUDA)$(CUDA_EMU),00)
TEST_CUEMU := cuda-emu-build
endif
test: still $(TEST_BINS) $(TEST_CUEMU) npm-clients
	@STILL_BUILD=$(BUILD) $(if $(TEST_CUEMU),CUEMU_BUILD=build-emu) tests/run.sh all

# The npm packages of package-lock.json (the `openai` client of the still serve tests), installed
# before the tests so that they never reach the network (scripts/npm_clients.sh; cached).
npm-clients:
	@scripts/npm_clients.sh

# Unit, op, parser, regression and small end-to-end tests under ASan + UBSan.
asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT=-O1 MARCH=$(MARCH) MPI=0 $(ASAN_VARS) build-asan/still-asan
	@$(MAKE) --no-print-directory BUILD=build-asan MPI=0 asan-run

ASAN_VARS = EXTRA_CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  EXTRA_LDLIBS="-fsanitize=address,undefined"

build-asan/still-asan: $(BUILD)/src/cli/main.o $(LIB) $(TEST_BINS)
	@echo "  LD    $@"
	@$(CC) $(CFLAGS) -o $@ $(BUILD)/src/cli/main.o $(LIB) $(LDLIBS)

asan-run:
	@STILL_BUILD=build-asan STILL_BIN=build-asan/still-asan ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMP_NUM_THREADS=2 tests/run.sh asan

# Regenerate reference fixtures with Debian's PyTorch / Jinja2 and the npm tokenizers, then diff.
refs: still
	@scripts/deps.sh refs
	@scripts/make_refs.sh

bench: still $(BENCH_BINS)
	@bench/run.sh

# Each libFuzzer target for FUZZ_SECONDS (default 60), one at a time; see scripts/fuzz.sh.
fuzz:
	@scripts/deps.sh fuzz
	@scripts/fuzz.sh

# The CUDA backend's kernels run by the CUDA emulator (tests/cuemu, docs/cuemu.md) against the
# reference and cpu backends: op, head and KV parity, the emulator's own tests, and the CLI and
# bench/cuda_bench check end to end. CUEMU_SCHED=rev or shuffle[:seed] runs the threads and blocks
# in another order.
CUEMU_TESTS := tests/ops/test_backend_parity tests/ops/test_heads_parity tests/ops/test_kv tests/cuemu/test_cuemu \
  tests/ops/test_moe_parity tests/ops/test_family_parity tests/model/test_vocab_head
cuda-emu-build:
	@$(MAKE) --no-print-directory CUDA_EMU=1 NO_DEPS=$(NO_DEPS) build-emu/still build-emu/bench/cuda_bench \
	  $(CUEMU_TESTS:%=build-emu/%)

test-cuda-emu: cuda-emu-build
	@STILL_BUILD=build-emu STILL_BIN=build-emu/still tests/run.sh cuda-emu

# The cuda-emu suite under ASan + UBSan (build-emu-asan/): the red zones around device memory are
# poisoned there, so a kernel that reads or writes out of bounds is reported at its line.
asan-cuda-emu:
	@$(MAKE) --no-print-directory CUDA_EMU=1 BUILD=build-emu-asan OPT=-O1 MARCH=$(MARCH) NO_DEPS=$(NO_DEPS) $(ASAN_VARS) \
	  build-emu-asan/still build-emu-asan/bench/cuda_bench $(CUEMU_TESTS:%=build-emu-asan/%)
	@STILL_BUILD=build-emu-asan ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 tests/run.sh cuda-emu

check-full: test asan asan-cuda-emu refs
	@STILL_BUILD=$(BUILD) tests/run.sh full

demo: still
	./still demo

clean:
	rm -rf build build-asan build-cuda build-emu build-emu-asan build-fuzz still .still-build

-include $(LIB_OBJS:.o=.d) $(BUILD)/src/cli/main.d $(TEST_BINS:=.d) $(BENCH_BINS:=.d) $(FUZZ_OBJS:.o=.d)
