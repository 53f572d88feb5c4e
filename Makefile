# Mooncake-C top-level entry points. `make check` and `make demo` work on a fresh Debian 12
# machine as root: they install missing packages first (scripts/install-deps.sh).
JOBS ?= 2
CTEST_FLAGS ?= --output-on-failure --no-tests=error

.PHONY: all deps build test check tree-snapshot check-asan check-tsan check-fuzz demo te-demo bench bench-store bench-getpath bench-auth bench-disk bench-ha report clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build -j$(JOBS)

# Quick loop for developers: the regular build's tests only.
test: build
	cd build && ctest $(CTEST_FLAGS) -j$(JOBS) -LE fuzz

# Everything CI runs: layer rule, regular tests, ASan+UBSan tests, TSan threaded tests,
# short libFuzzer runs; and nothing written into the source tree on the way.
check: tree-snapshot test check-asan check-tsan check-fuzz
	@scripts/check-layers.sh
	@scripts/check-tree-clean.sh compare
	@echo "make check: all suites passed"

tree-snapshot:
	@scripts/check-tree-clean.sh snapshot

check-asan: deps
	@cmake -S . -B build-asan -DMC_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug >/dev/null
	@cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest $(CTEST_FLAGS) -j$(JOBS) -LE "fuzz|python"

check-tsan: deps
	@cmake -S . -B build-tsan -DMC_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug >/dev/null
	@cmake --build build-tsan -j$(JOBS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest $(CTEST_FLAGS) -j$(JOBS) -L threads

check-fuzz: deps
	@CC=clang cmake -S . -B build-fuzz -DMC_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build-fuzz -j$(JOBS)
	cd build-fuzz && ctest $(CTEST_FLAGS) -L fuzz

# The main job: master + two storage servers on loopback, a slice of the FAST'25 trace
# replayed as KV-block put/get (hit rate, throughput, latency), everything stopped cleanly.
demo: build
	@scripts/demo.sh

# Transfer Engine alone: two processes moving data over tcp and shm.
te-demo: build
	@scripts/te_demo.sh

bench: build
	@scripts/bench.sh

# Store alone against Redis and memcached, as docs/benchmarks.md runs it.
bench-store: build
	@scripts/bench_store.sh

bench-getpath: build
	@scripts/bench_getpath.sh

# What authentication costs: TE, store and master benchmarks with it off and on, interleaved.
bench-auth: build
	@scripts/bench_auth.sh

# Disk tier storage engine against fio on the same file system (O_DIRECT, io_uring).
bench-disk: build
	@scripts/bench_disk.sh

# Master HA on a real 3-member etcd: failover time, put/lookup throughput vs a single master.
bench-ha: build
	@scripts/bench_ha.sh

# Evaluation report: experiments on the FAST'25 trace -> docs/report/ (Markdown + PNG plots).
report: build
	@scripts/report.sh build/bin

clean:
	rm -rf build build-asan build-tsan build-fuzz
