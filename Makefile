# libshard: one plain Makefile.
#
#   make                      libshard.a, libshard.so, shardctl, examples (in build/)
#   make check                unit tests, server tests, ABI/docs checks
#   make check SANITIZE=address,undefined     the same under ASan+UBSan
#   make check VALGRIND=1     the same under valgrind (leaks are failures)
#   make demo | bench | install PREFIX=... DESTDIR=... | clean
#
# WERROR=1 turns warnings into errors (CI sets it).

VERSION := $(shell sed -n 's/^\#define SHARD_VERSION_STRING "\(.*\)"/\1/p' include/libshard.h)
MAJOR   := $(firstword $(subst ., ,$(VERSION)))

PREFIX  ?= /usr/local
DESTDIR ?=
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
BINDIR  ?= $(PREFIX)/bin
MANDIR  ?= $(PREFIX)/share/man

CC      ?= cc
CFLAGS  ?= -O2 -g
PKGS    := libmariadb jansson libcrypto
DEPS_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
DEPS_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lpthread
CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell pkg-config --libs check 2>/dev/null)

WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat-security
ifeq ($(WERROR),1)
WARN    += -Werror
endif

comma := ,
ifdef SANITIZE
B       := build-$(subst $(comma),-,$(SANITIZE))
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
else
B       := build
SANFLAGS :=
endif
ALL_CFLAGS  = -std=c11 -D_GNU_SOURCE -fPIC -pthread $(WARN) $(CFLAGS) $(SANFLAGS) \
              -Iinclude $(DEPS_CFLAGS)
LIB_CFLAGS  = $(ALL_CFLAGS) -fvisibility=hidden -DLIBSHARD_BUILD
ALL_LDFLAGS = $(LDFLAGS) $(SANFLAGS) -pthread

LIB_SRC  := $(wildcard lib/*.c lib/move/*.c)
LIB_OBJ  := $(patsubst lib/%.c,$(B)/lib/%.o,$(LIB_SRC))
SONAME   := libshard.so.$(MAJOR)
SOFILE   := libshard.so.$(VERSION)

UNIT_TESTS   := $(patsubst tests/%.c,$(B)/tests/%,$(wildcard tests/unit_*.c))
SERVER_TESTS := $(patsubst tests/%.c,$(B)/tests/%,$(wildcard tests/server_*.c))
BENCHES      := $(patsubst tests/%.c,$(B)/tests/%,$(wildcard tests/bench_*.c))
EXAMPLES     := $(B)/shardctl $(patsubst examples/%.c,$(B)/%,$(filter-out examples/shardctl.c,$(wildcard examples/*.c)))

ifdef VALGRIND
RUN := valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --track-fds=no
# Forked helpers inside tests exit without cleanup: not leaks of the library.
RUN += --child-silent-after-fork=yes
else
RUN :=
endif

.PHONY: all check check-run unit-check server-check abi-check doc-check deps demo \
        bench loadtest fuzz check-tsan install uninstall clean
.SUFFIXES:

all: $(B)/libshard.a $(B)/$(SOFILE) $(EXAMPLES)

$(B)/lib/%.o: lib/%.c lib/*.h lib/move/*.h include/libshard.h | $(B)/lib $(B)/lib/move
	$(CC) $(LIB_CFLAGS) -c -o $@ $<

$(B)/lib $(B)/lib/move $(B)/tests:
	@mkdir -p $@

$(B)/libshard.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/$(SOFILE): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined -o $@ $^ $(ALL_LDFLAGS) $(DEPS_LIBS)
	ln -sf $(SOFILE) $(B)/$(SONAME)
	ln -sf $(SONAME) $(B)/libshard.so

$(B)/shardctl: examples/shardctl.c $(B)/libshard.a
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libshard.a $(ALL_LDFLAGS) $(DEPS_LIBS)

$(B)/%: examples/%.c $(B)/libshard.a
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libshard.a $(ALL_LDFLAGS) $(DEPS_LIBS)

$(B)/tests/harness.o: tests/harness.c tests/harness.h | $(B)/tests
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -c -o $@ $<

# Tests link the static library so they can reach private test hooks.
$(B)/tests/%: tests/%.c tests/*.h $(B)/libshard.a $(B)/tests/harness.o | $(B)/tests
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -Ilib -o $@ $< $(B)/tests/harness.o \
	    $(B)/libshard.a $(ALL_LDFLAGS) $(DEPS_LIBS) $(CHECK_LIBS)

# ---- tests --------------------------------------------------------------

# Installs missing packages when run as root on Debian, else says what to install.
deps:
	@sh tests/deps.sh

check: deps
	@$(MAKE) --no-print-directory check-run

check-run: all $(UNIT_TESTS) $(SERVER_TESTS)
	@LIBSHARD_TESTS_DIR=tests SHARDCTL=$(B)/shardctl B=$(B) RUN="$(RUN)" \
	    sh tests/run.sh $(UNIT_TESTS) $(SERVER_TESTS) tests/abi_check.sh tests/doc_check.sh \
	    examples/python/check.sh

# ThreadSanitizer over the tests where threads share a context (not part of
# make check: run it as make check-tsan).
TSAN_TESTS := server_data server_store server_move server_failover
check-tsan: deps
	@$(MAKE) --no-print-directory SANITIZE=thread all \
	    $(addprefix build-thread/tests/,$(TSAN_TESTS))
	@LIBSHARD_TESTS_DIR=tests TSAN_OPTIONS="halt_on_error=1 exitcode=66" \
	    sh tests/run.sh $(addprefix build-thread/tests/,$(TSAN_TESTS))

# ---- demo and benchmarks ------------------------------------------------

demo: deps
	@$(MAKE) --no-print-directory all
	@SHARDCTL=$(B)/shardctl B=$(B) sh tests/demo.sh

bench: deps
	@sh tests/bench-deps.sh
	@$(MAKE) --no-print-directory all $(BENCHES)
	@rc=0; for b in $(BENCHES); do \
	    LIBSHARD_TESTS_DIR=tests $$b || { echo "$$b: failed" >&2; rc=1; }; done; exit $$rc

# Not part of make check: N threads of mixed operations, then every write verified.
LOADTEST_THREADS ?= 8
LOADTEST_SECONDS ?= 20
loadtest: deps
	@$(MAKE) --no-print-directory all $(B)/tests/loadtest
	@LIBSHARD_TESTS_DIR=tests $(B)/tests/loadtest $(LOADTEST_THREADS) $(LOADTEST_SECONDS)

# ---- fuzzing (clang + libFuzzer; Debian: clang libclang-rt-14-dev) -------

FUZZ_SECONDS ?= 60

fuzz:
	@sh tests/fuzz/run.sh $(FUZZ_SECONDS)

# ---- install ------------------------------------------------------------

install: all
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR) $(DESTDIR)$(BINDIR) \
	    $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man7
	install -m 644 include/libshard.h $(DESTDIR)$(INCDIR)/
	install -m 644 $(B)/libshard.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(B)/$(SOFILE) $(DESTDIR)$(LIBDIR)/
	ln -sf $(SOFILE) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libshard.so
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	    -e 's|@INCDIR@|$(INCDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    pkgconfig/libshard.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/libshard.pc
	install -m 755 $(B)/shardctl $(DESTDIR)$(BINDIR)/
	for s in 1 3 7; do for f in man/man$$s/*.$$s; do [ -f "$$f" ] && \
	    install -m 644 "$$f" $(DESTDIR)$(MANDIR)/man$$s/ || true; done; done

uninstall:
	rm -f $(DESTDIR)$(INCDIR)/libshard.h $(DESTDIR)$(LIBDIR)/libshard.a \
	    $(DESTDIR)$(LIBDIR)/$(SOFILE) $(DESTDIR)$(LIBDIR)/$(SONAME) \
	    $(DESTDIR)$(LIBDIR)/libshard.so $(DESTDIR)$(LIBDIR)/pkgconfig/libshard.pc \
	    $(DESTDIR)$(BINDIR)/shardctl

clean:
	rm -rf build build-*
