# The two commands of the README. Both install what they need first.
BUILD_DIR ?= build
ASAN_DIR ?= build-asan
JOBS ?= $(shell nproc)

.PHONY: deps build build-asan test test-asan demo bench clean

deps:
	./deploy/install-deps.sh

build: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD_DIR) -j $(JOBS)

build-asan: deps
	cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAIND_SANITIZE=ON -DTRAIND_CUDA=OFF
	cmake --build $(ASAN_DIR) -j $(JOBS)

# Every test, then the unit and e2e tests again under ASan + UBSan (of the
# tests that run once per cpu products' route, only the kernels'); each run
# ends with the list of tests that skipped (ctest counts them as passed in its
# exit status). The JUnit file is what tests/skipped.py reads.
test: build build-asan
	ctest --test-dir $(BUILD_DIR) --output-on-failure --output-junit ctest-junit.xml
	tests/skipped.py $(BUILD_DIR)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN_DIR) --output-on-failure -L 'unit|e2e' \
	  -E '^test_(exec_streaming|exec_resume|parity_hf)@' --output-junit ctest-junit.xml
	tests/skipped.py $(ASAN_DIR)

demo: build
	BUILD_DIR=$(BUILD_DIR) ./deploy/demo.sh

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR)
