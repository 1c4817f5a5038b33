# ib_cm — build, install, test. `make help` lists the targets.
#
#   make run      the main job: ibcm-cmtime on the in-process fabric (builds the
#                 library and that tool, quietly: needs only Rust and a C compiler)
#   make check-quick  the layering check, the Rust tests and the C suite plain:
#                 no sanitizers, no VMs, no fabric (the loop while working)
#   make check    every test: Rust, header, symbols, C suite plain / ASan / valgrind,
#                 the Debian packages, the simulated InfiniBand fabric, and the
#                 SoftRoCE suite in a QEMU VM (IBCM_SKIP_SOFTROCE=1 skips it)
#   make deb      Debian packages under build/deb: libib-cm0, libib-cm-dev, ibcmd
#   make deb-check  installs them here, builds and runs the README's example
#                 against them, purges them (root or sudo)
#   make softroce the C suite on rxe0/rxe1 inside one VM, and the kernel-CM
#                 coexistence check in a second VM
#   make interop  the interoperability suite: libib_cm in one VM, the kernel CM
#                 driven by rdma-core's tools in another
#   make soak     the lifecycle stress for minutes: the C test under ASan, the
#                 engine's lifecycle races under TSan (IBCM_STRESS_SECONDS each)
#   make ibfabric the InfiniBand scenarios on a simulated fabric (ibsim, OpenSM,
#                 umad2sim; c-tests/ibfabric/; about 60 s; skipped without them)
#   make ibscale  only the all-to-alls: 16 HCAs in a ring of switches, 64 and 128
#                 in fat trees, without and with packet drops (16 and 64 with
#                 drops are part of ibfabric), then the grid: 16..128 HCAs x
#                 no path cache / per-process / ibcmd's, a table and a plot

PREFIX   ?= /usr/local
BUILD    ?= $(CURDIR)/build
STAGE    := $(BUILD)/stage
VERSION  := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
CARGO    ?= cargo
CBINDGEN ?= cbindgen
RELEASE  := target/release
CONNECTIONS ?= 10000
MANDIR   ?= $(PREFIX)/share/man

.PHONY: all deps lib header header-check install stage c-build run check \
        layers-check check-quick rust-tests rust-check c-check c-asan c-valgrind symbols-check softroce interop ibfabric ibscale miri tsan fuzz soak \
        deb deb-check clean help

all: lib

help:
	@sed -n 's/^#   //p' Makefile

deps:
	@scripts/install-deps.sh

# The shared object C programs load, linked again from libib_cm.a with
# libib_cm.map as its only version script: for a cdylib rustc hands the
# linker its own anonymous version script first, and the linker keeps that
# (rust-lld: "attempt to reassign symbol ... to version 'IBCM_0.1'"), so
# cargo's libib_cm.so defines the IBCM_0.1 node and binds nothing to it.
# Linked here, every export is sym@@IBCM_0.1 (symbols-check), as rdma-core
# versions its libraries. NATIVE_LIBS: what the Rust standard library in the
# archive needs (rustc --print native-static-libs; ib_cm.pc's Libs.private).
SHARED      := $(RELEASE)/libib_cm.so.$(VERSION)
NATIVE_LIBS := -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc

lib:
	$(CARGO) build --release --locked
	$${CC:-cc} -shared -o $(SHARED) -Wl,-soname,libib_cm.so.0 \
	  -Wl,--version-script=libib_cm.map -Wl,--gc-sections -Wl,-z,relro,-z,now \
	  -Wl,--whole-archive $(RELEASE)/libib_cm.a -Wl,--no-whole-archive $(NATIVE_LIBS)

header:
	$(CBINDGEN) --config cbindgen.toml --quiet --output include/rdma/ib_cm.h .

# The committed header must be exactly what cbindgen generates now.
header-check:
	@tmp=$$(mktemp) && $(CBINDGEN) --config cbindgen.toml --quiet --output $$tmp . && \
	  if cmp -s $$tmp include/rdma/ib_cm.h; then echo "header: up to date"; rm -f $$tmp; \
	  else diff -u include/rdma/ib_cm.h $$tmp | head -40; rm -f $$tmp; \
	       echo "header: include/rdma/ib_cm.h is stale: run make header"; exit 1; fi
	@# The hand-written <rdma/ib_sa.h>: compiles alone as C and C++, and declares
	@# only exported functions (their prototypes: man-check, test_sa_api).
	@for lang in "c -std=c11" "c++ -std=c++11"; do \
	  echo '#include <rdma/ib_sa.h>' | $${CC:-cc} -x $$lang -Wall -Wextra -Werror -pedantic \
	    -fsyntax-only -Iinclude - || exit 1; done
	@for f in $$(grep -o '\bib_sa_[a-z_]*(' include/rdma/ib_sa.h | tr -d '(' | sort -u); do \
	  grep -qx "$$f" c-tests/exported-symbols.txt || \
	    { echo "header: ib_sa.h declares $$f, which is not exported"; exit 1; }; done
	@echo "header: include/rdma/ib_sa.h compiles (C, C++) and declares only exported functions"

install: lib
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/rdma
	install -m 0755 $(SHARED) $(DESTDIR)$(PREFIX)/lib/libib_cm.so.$(VERSION)
	ln -sf libib_cm.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libib_cm.so.0
	ln -sf libib_cm.so.0 $(DESTDIR)$(PREFIX)/lib/libib_cm.so
	install -m 0644 $(RELEASE)/libib_cm.a $(DESTDIR)$(PREFIX)/lib/libib_cm.a
	install -m 0644 include/rdma/ib_cm.h $(DESTDIR)$(PREFIX)/include/rdma/ib_cm.h
	install -m 0644 include/rdma/ib_sa.h $(DESTDIR)$(PREFIX)/include/rdma/ib_sa.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' pkgconfig/ib_cm.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/ib_cm.pc
	install -d $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(PREFIX)/lib/systemd/system \
	  $(DESTDIR)$(PREFIX)/lib/sysusers.d
	install -m 0755 $(RELEASE)/ibcmd $(DESTDIR)$(PREFIX)/sbin/ibcmd
	sed -e 's|@PREFIX@|$(PREFIX)|' systemd/ibcmd.service.in \
	  > $(DESTDIR)$(PREFIX)/lib/systemd/system/ibcmd.service
	sed -e 's|@PREFIX@|$(PREFIX)|' systemd/ibcmd.socket.in \
	  > $(DESTDIR)$(PREFIX)/lib/systemd/system/ibcmd.socket
	install -m 0644 systemd/ibcmd.sysusers.conf $(DESTDIR)$(PREFIX)/lib/sysusers.d/ibcmd.conf
	install -d $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man7
	install -m 0644 man/man3/*.3 $(DESTDIR)$(MANDIR)/man3/
	install -m 0644 man/man7/*.7 $(DESTDIR)$(MANDIR)/man7/
	install -d $(DESTDIR)$(MANDIR)/man8
	install -m 0644 man/man8/*.8 $(DESTDIR)$(MANDIR)/man8/
	install -D -m 0644 c-tests/libib_cm.supp $(DESTDIR)$(PREFIX)/share/ib_cm/libib_cm.supp

# The manual pages (man/, man(7) sources, installed as they are): one per
# exported symbol and none for anything else, prototypes as in the header,
# errnos, environment variables and threads as in src/, ib_cm(7)'s client and
# server run against the staged library (alone and under valgrind), and not
# one message from mandoc -T lint -W warning or groff -ww. Then the docs that
# describe the tree and make run's output (scripts/check-docs.py).
.PHONY: man-check
man-check: stage
	@IBCM_STAGE=$(STAGE) python3 man/check.py
	@python3 scripts/check-docs.py

# Debian packages in rdma-core's split (packaging/deb/, scripts/deb-build.sh):
# the files of `make install PREFIX=/usr`, the libraries in the multiarch
# directory, a symbols file from libib_cm.map that dpkg-gensymbols checks.
deb: lib
	@scripts/deb-build.sh

# The packages installed on this machine with apt-get, the README's example
# (c-tests/readme_example.c) built with plain pkg-config and run, the packages
# purged, and the machine checked to be as it was (scripts/deb-check.sh).
deb-check: deb
	@scripts/deb-check.sh

# An installation under build/stage that the C suite builds against.
stage:
	$(MAKE) install PREFIX=$(STAGE)

# The exported symbols are exactly the API.
symbols-check: stage
	@nm -D --defined-only $(STAGE)/lib/libib_cm.so | awk '{print $$3}' | sed 's/@.*//' | \
	  grep -v '^IBCM_' | sort > $(BUILD)/symbols.txt
	@if diff -u c-tests/exported-symbols.txt $(BUILD)/symbols.txt; then \
	  echo "symbols: $$(wc -l < $(BUILD)/symbols.txt) exported, as listed"; \
	else echo "symbols: exported set differs from c-tests/exported-symbols.txt"; exit 1; fi
	@readelf -d $(STAGE)/lib/libib_cm.so.0 | grep -q 'SONAME.*\[libib_cm.so.0\]' && echo "soname: libib_cm.so.0"
	@# Each export bound to its node of libib_cm.map (sym@@IBCM_0.1), none unversioned.
	@unversioned=$$(nm -D --defined-only $(STAGE)/lib/libib_cm.so | awk '$$3 !~ /@@IBCM_[0-9.]+$$/ && $$3 !~ /^IBCM_/ {print $$3}'); \
	  if [ -n "$$unversioned" ]; then echo "symbols: not versioned: $$unversioned"; exit 1; fi; \
	  echo "symbols: every export versioned: $$(nm -D --defined-only $(STAGE)/lib/libib_cm.so | \
	    sed -n 's/.*@@\(IBCM_[0-9.]*\)$$/\1/p' | sort -u | tr "\n" " ")"

# $(1): build dir, $(2): extra cmake args
define c_suite
	PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig cmake -S c-tests -B $(1) -DCMAKE_BUILD_TYPE=Debug $(2) >/dev/null
	cmake --build $(1) -j2 >/dev/null
	cd $(1) && ctest --output-on-failure -j2 --timeout 300 -LE "softroce|interop|ibfabric|ibscale"
endef

c-build: stage
	PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig cmake -S c-tests -B $(BUILD)/c -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build $(BUILD)/c -j2

c-check: stage
	$(call c_suite,$(BUILD)/c,)

# The simulated InfiniBand fabric (ibsim + OpenSM, c-tests/ibfabric/):
# skipped when ibsim-utils, opensm or infiniband-diags are not installed.
ibfabric: c-build
	cd $(BUILD)/c && ctest --output-on-failure -j2 --timeout 300 -L ibfabric

# The all-to-all (16 CM processes, one per HCA; needs the ibsim that
# scripts/install-deps.sh builds under build/ibsim).
ibscale: c-build
	cd $(BUILD)/c && ctest --output-on-failure --timeout 600 -L ibscale
	@# The grid (issue 33): N in 16..128 HCAs x no cache / per-process / ibcmd
	@# cache; a table and a plot in build/ibscale (docs/infiniband.md).
	IBCMD=$(STAGE)/sbin/ibcmd IBCMD_HARNESS=$(BUILD)/c/libibcmd_harness.so \
	  c-tests/ibfabric/grid.sh $(BUILD)/c/ibfabric_peer $(BUILD)/c/ibfabric-logs/grid $(BUILD)/ibscale

c-asan: stage
	$(call c_suite,$(BUILD)/c-asan,-DIBCM_SANITIZE=address)

c-valgrind: stage
	$(call c_suite,$(BUILD)/c-valgrind,-DIBCM_VALGRIND=ON)

# The same C programs on SoftRoCE: Debian's kernel under QEMU (TCG), rxe0/rxe1
# on a veth pair, ib_umad loaded and the kernel CM not; then one more boot with
# the kernel CM loaded, where opening a device must fail with -EADDRINUSE.
softroce: c-build
	softroce/setup.sh
	@# The Rust API's examples that softroce.rust-async (the async ones) and
	@# softroce.rust-rc-pingpong (rc_pingpong, feature sideway) run in the VM.
	$(CARGO) build --release --locked --quiet --features tokio,sideway --examples
	softroce/run-in-vm.sh -- "cd $(BUILD)/c && ctest --output-on-failure -L softroce"
	softroce/run-in-vm.sh --ibcm -- "cd $(BUILD)/c && ctest --output-on-failure -L softroce -R kernel_cm"

# The two-VM interoperability suite (docs/interop.md).
interop: c-build
	interop/run.sh

# Miri on the unit tests that touch no OS (codec, timers, paths, fabric naming):
# undefined behaviour in safe code's unsafe dependencies shows up here. Needs
# the nightly toolchain with miri; skipped, with a line saying so, without it.
miri:
	@if rustup +nightly component add miri rust-src >/dev/null 2>&1 && \
	    cargo +nightly miri --version >/dev/null 2>&1; then \
	  cargo +nightly miri test -p ib-cm-wire -p ib-cm-engine --lib && \
	  cargo +nightly miri test --lib -- transport::loopback:: pcap:: \
	    ffi::event::tests::both_pointers_into_the_mad_stay_valid; \
	else echo "miri: no nightly toolchain with miri here, skipped"; fi

# ThreadSanitizer on the engine's tests (threads, locks, the worker): needs
# nightly with rust-src to rebuild std instrumented; skipped without it.
# One test at a time there: TSan slows the engine several times over, and
# some tests count retransmissions of 16-20 ms timers, which a neighbour's
# flood on the shared worker would then delay (until engines are values).
TSAN_TEST = RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread" TSAN_OPTIONS=halt_on_error=1 \
	cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu --target-dir target/tsan --lib
tsan:
	@if rustup +nightly component add rust-src >/dev/null 2>&1; then \
	  $(TSAN_TEST) -- cm::tests --test-threads=1 && \
	  $(TSAN_TEST) -- --ignored cm::tests::lifecycle; \
	else echo "tsan: no nightly toolchain with rust-src here, skipped"; fi

# The lifecycle stress for minutes, not part of `make check` (whose suites run
# the same tests for seconds): test_lifecycle_stress under AddressSanitizer,
# then each engine lifecycle race (cm::tests::lifecycle) under
# ThreadSanitizer, IBCM_STRESS_SECONDS each.
IBCM_STRESS_SECONDS ?= 120
soak: stage
	PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig cmake -S c-tests -B $(BUILD)/c-asan -DCMAKE_BUILD_TYPE=Debug \
	  -DIBCM_SANITIZE=address >/dev/null
	cmake --build $(BUILD)/c-asan -j2 --target test_lifecycle_stress >/dev/null
	IBCM_STRESS_SECONDS=$(IBCM_STRESS_SECONDS) $(BUILD)/c-asan/test_lifecycle_stress
	@if rustup +nightly component add rust-src >/dev/null 2>&1; then \
	  IBCM_STRESS_SECONDS=$(IBCM_STRESS_SECONDS) $(TSAN_TEST) -- --ignored cm::tests::lifecycle; \
	else echo "soak: no nightly toolchain with rust-src here, TSan part skipped"; fi

# A short run of the cargo-fuzz targets, failing on any finding: MAD decoding
# and the receive path with connections in every state, FUZZ_SECONDS each;
# ibcmd's routing between tenants against the matching rule, FUZZ_SWITCH_RUNS
# executions (10^6, issue 30's bar: about 2.5 min here).
FUZZ_SECONDS ?= 30
FUZZ_SWITCH_RUNS ?= 1000000
fuzz:
	@if cargo +nightly --version >/dev/null 2>&1 || [ -n "$${RUSTC_BOOTSTRAP:-}" ]; then \
	  SWITCH_RUNS=$(FUZZ_SWITCH_RUNS) bash fuzz/run.sh $(FUZZ_SECONDS); \
	else echo "fuzz: no nightly toolchain here, skipped"; fi

rust-check:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(MAKE) rust-tests
	$(CARGO) test --locked --lib -- --ignored cm::tests::lifecycle
	@# The Rust API's example (issue 32): connect, DREQ 220 bytes, DREP 224.
	$(CARGO) run --locked --quiet --example connect | tail -n 1
	@# The async API (feature tokio): its lints and tests, and the Rust
	@# cmtime through both doors, briefly (scripts/perf/rust-vs-c-cmtime.sh
	@# times it against ibcm-cmtime).
	$(CARGO) clippy --locked --workspace --all-targets --features tokio,sideway -- -D warnings
	@# QpAttributes as a sideway QP's (feature sideway: cmake and libclang).
	$(CARGO) test --locked --features sideway --lib api::sideway
	$(CARGO) test --locked --features tokio --test 'rust_api_*'
	$(CARGO) run --locked --quiet --features tokio --example cmtime -- -c 500 --api handler | tail -n 6
	$(CARGO) run --locked --quiet --features tokio --example cmtime -- -c 500 --api async | tail -n 6

# The main job: builds the library and the one tool it runs, quietly (the
# build's output goes to build/run-build.log, shown only when it fails), and
# runs ibcm-cmtime on the in-process fabric. Needs only Rust and a C compiler.
run:
	@mkdir -p $(BUILD)
	@echo "make run: building libib_cm and ibcm-cmtime (log: $(BUILD)/run-build.log)"
	@{ $(MAKE) --no-print-directory -s stage && \
	   $${CC:-cc} -std=c11 -O2 -Wall -Wextra -Werror -I$(STAGE)/include tools/ibcm-cmtime.c \
	     -L$(STAGE)/lib -lib_cm -pthread -o $(BUILD)/ibcm-cmtime; } >$(BUILD)/run-build.log 2>&1 || \
	   { cat $(BUILD)/run-build.log; echo "make run: the build failed"; exit 1; }
	@LD_LIBRARY_PATH=$(STAGE)/lib $(BUILD)/ibcm-cmtime -c $(CONNECTIONS)

# The crate graph and the places that hold unsafe, as docs/architecture.md
# draws them (scripts/check-layers.py), and that check against the ways
# around it that are known (scripts/test-check-layers.sh, ~10 s).
layers-check:
	@python3 scripts/check-layers.py
	@bash scripts/test-check-layers.sh

# The workspace's tests, with cargo's default thread count (rust-check and
# check-quick both run them). The engine is still one per process, so the
# tests of a binary share its worker thread: each allows for a neighbour's
# load in its waits and timers (3 runs of the lib tests and 2 of the
# rust_api_* tests this way, green on 2 cores loaded by other builds).
rust-tests:
	$(CARGO) test --locked -p ib-cm-wire -p ib-cm-engine
	$(CARGO) test --locked -p ib_cm

check-quick: deps
	$(MAKE) layers-check
	$(MAKE) rust-tests
	$(MAKE) c-check

check: deps
	$(MAKE) layers-check
	$(MAKE) rust-check
	$(MAKE) miri
	$(MAKE) tsan
	$(MAKE) fuzz
	$(MAKE) header-check
	$(MAKE) symbols-check
	$(MAKE) man-check
	$(MAKE) deb-check
	$(MAKE) c-check
	$(MAKE) c-asan
	$(MAKE) c-valgrind
	$(MAKE) ibfabric
	@if [ "$${IBCM_SKIP_SOFTROCE:-0}" = 1 ]; then echo "softroce, interop: skipped (IBCM_SKIP_SOFTROCE=1)"; \
	else $(MAKE) softroce && $(MAKE) interop; fi

clean:
	$(CARGO) clean
	rm -rf $(BUILD)
