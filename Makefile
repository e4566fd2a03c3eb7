# libshard: one plain Makefile.
#
#   make                      libshard.a, libshard.so, shardctl, examples (in build/)
#   make check                unit tests, server tests, ABI/docs checks
#   make check SANITIZE=address,undefined     the same under ASan+UBSan
#   make check VALGRIND=1     the same under valgrind (leaks are failures)
#   make demo | bench | install PREFIX=... DESTDIR=... | install-strip | uninstall | clean
#   make demo ZK=1            the demo with the map in ZooKeeper
#
# WERROR=1 turns warnings into errors (CI sets it). CPPFLAGS, CFLAGS and
# LDFLAGS from the environment or the command line are honoured, and a
# change of them rebuilds; HARDEN=0 leaves out the hardening flags.
# LIBDIR is where the libraries and libshard.pc go (default PREFIX/lib); a
# Debian-style multiarch package uses LIBDIR=/usr/lib/x86_64-linux-gnu.

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
CPPFLAGS ?=
OBJCOPY ?= objcopy
AR      ?= ar
PKGS    := libmariadb jansson libcrypto
DEPS_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# The ZooKeeper C client (threaded) ships no .pc file.
ZK_LIBS     := -lzookeeper_mt
DEPS_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) $(ZK_LIBS) -lpthread
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
# Hardening, on unless HARDEN=0: fortified libc calls (when optimising, and
# unless CPPFLAGS or CFLAGS choose their own level), the stack protector,
# and full RELRO (relocations read-only, resolved at load). What a
# distribution passes in CPPFLAGS, CFLAGS and LDFLAGS comes after, and wins.
HARDEN ?= 1
ifeq ($(HARDEN),1)
FORTIFY := $(if $(findstring _FORTIFY_SOURCE,$(CPPFLAGS) $(CFLAGS))$(SANITIZE),,$(if \
           $(filter -O1 -O2 -O3 -Os -Ofast,$(CFLAGS)),-U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2))
HARDEN_CFLAGS  := $(FORTIFY) -fstack-protector-strong
HARDEN_LDFLAGS := -Wl,-z,relro,-z,now
endif
ALL_CFLAGS  = -std=c11 -D_GNU_SOURCE -fPIC -pthread $(WARN) $(HARDEN_CFLAGS) $(CPPFLAGS) \
              $(CFLAGS) $(SANFLAGS) -Iinclude $(DEPS_CFLAGS)
LIB_CFLAGS  = $(ALL_CFLAGS) -fvisibility=hidden -DLIBSHARD_BUILD
ALL_LDFLAGS = $(HARDEN_LDFLAGS) $(LDFLAGS) $(SANFLAGS) -pthread

# Everything built depends on $(B)/.flags, which holds the compiler and the
# flags of the build and is rewritten only when they change: a change of
# CC, CPPFLAGS, CFLAGS, LDFLAGS or HARDEN rebuilds what they went into.
FLAGS_STAMP := $(B)/.flags
flags_now = $(subst ','\'',$(CC) | $(ALL_CFLAGS) | $(LIB_CFLAGS) | $(ALL_LDFLAGS))

# lib/ holds one file per concern; a concern that outgrows one file becomes a
# subdirectory (lib/move/*.c) with its private header.
LIB_SRC  := $(wildcard lib/*.c lib/*/*.c)
LIB_HDR  := $(wildcard lib/*.h lib/*/*.h)
LIB_OBJ  := $(patsubst lib/%.c,$(B)/lib/%.o,$(LIB_SRC))
SONAME   := libshard.so.$(MAJOR)
SOFILE   := libshard.so.$(VERSION)
# Only shard_* is exported from the .so, under the version node LIBSHARD_0.
VERSION_SCRIPT := lib/libshard.ver

UNIT_TESTS   := $(patsubst tests/%.c,$(B)/tests/%,$(wildcard tests/unit_*.c))
SERVER_TESTS := $(patsubst tests/%.c,$(B)/tests/%,$(wildcard tests/server_*.c))
BENCHES      := $(patsubst tests/%.c,$(B)/tests/%,$(wildcard tests/bench_*.c))
EXAMPLES     := $(B)/shardctl $(patsubst examples/%.c,$(B)/%,$(wildcard examples/*.c))
# shardctl is a family: main and dispatch, helpers, one file per command family.
SHARDCTL_SRC := $(wildcard examples/shardctl/*.c)
SHARDCTL_HDR := $(wildcard examples/shardctl/*.h)

ifdef VALGRIND
RUN := valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --track-fds=no
# Forked helpers inside tests exit without cleanup: not leaks of the library.
RUN += --child-silent-after-fork=yes
else
RUN :=
endif

.PHONY: all check check-run unit-check server-check programs-check abi-check doc-check deps demo \
        bench loadtest fuzz check-tsan install install-strip uninstall clean FORCE
.SUFFIXES:

all: $(B)/libshard.a $(B)/$(SOFILE) $(EXAMPLES)

$(FLAGS_STAMP): FORCE
	@mkdir -p $(@D)
	@printf '%s\n' '$(flags_now)' | cmp -s - $@ || printf '%s\n' '$(flags_now)' >$@
FORCE:

$(B)/lib/%.o: lib/%.c $(LIB_HDR) include/libshard.h $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(LIB_CFLAGS) -c -o $@ $<

$(B)/lib $(B)/lib/move $(B)/tests:
	@mkdir -p $@

# The installed static library, like the .so, has no global name but the
# API: the objects are linked into one (a relocatable link, cc -r), whose
# hidden symbols (everything not SHARD_EXPORT: the library is compiled with
# -fvisibility=hidden) are then made local. An application with its own
# now_seconds() or conn_get() links against it. Objects built with -flto are
# compiled at this link (GCC), so that the symbols to localise exist.
LTO_REL := $(if $(findstring -flto,$(CFLAGS)),$(CFLAGS) -flinker-output=nolto-rel)
$(B)/libshard.o: $(LIB_OBJ)
	$(CC) -r -nostdlib $(LTO_REL) -o $@.tmp $^
	$(OBJCOPY) --localize-hidden $@.tmp $@
	@rm -f $@.tmp

$(B)/libshard.a: $(B)/libshard.o
	@rm -f $@
	$(AR) rcs $@ $^

# The tests' archive: the same objects with their internal names global, so
# tests reach private hooks (fanout_run, shard__alloc_budget). Never installed.
$(B)/libshard_internal.a: $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(B)/$(SOFILE): $(LIB_OBJ) $(VERSION_SCRIPT) $(FLAGS_STAMP)
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined \
	    -Wl,--version-script=$(VERSION_SCRIPT) -o $@ $(LIB_OBJ) $(ALL_LDFLAGS) $(DEPS_LIBS)
	ln -sf $(SOFILE) $(B)/$(SONAME)
	ln -sf $(SONAME) $(B)/libshard.so

# The build's shardctl (the tests run it) links libshard.a: it runs from the
# build tree as it is.
$(B)/shardctl: $(SHARDCTL_SRC) $(SHARDCTL_HDR) $(B)/libshard.a
	$(CC) $(ALL_CFLAGS) -o $@ $(SHARDCTL_SRC) $(B)/libshard.a $(ALL_LDFLAGS) $(DEPS_LIBS)

# The installed shardctl links the shared library, so that a library update
# reaches it; outside the dynamic linker's own directories (/usr/local/lib
# too: ld.so.cache knows a new library there only after ldconfig) it finds
# it by its RUNPATH, LIBDIR.
SYSTEM_LIBDIRS := /lib /usr/lib /lib64 /usr/lib64 $(wildcard /lib/*-linux-gnu /usr/lib/*-linux-gnu)
SHARDCTL_RPATH := $(if $(filter $(SYSTEM_LIBDIRS),$(LIBDIR)),,-Wl,-rpath,$(LIBDIR))
RPATH_STAMP := $(B)/.rpath
$(RPATH_STAMP): FORCE
	@mkdir -p $(@D)
	@printf '%s\n' '$(SHARDCTL_RPATH)' | cmp -s - $@ || printf '%s\n' '$(SHARDCTL_RPATH)' >$@
$(B)/shardctl-shared: $(SHARDCTL_SRC) $(SHARDCTL_HDR) $(B)/$(SOFILE) $(RPATH_STAMP)
	$(CC) $(ALL_CFLAGS) -o $@ $(SHARDCTL_SRC) $(B)/$(SOFILE) $(SHARDCTL_RPATH) \
	    $(ALL_LDFLAGS) $(DEPS_LIBS)

$(B)/%: examples/%.c $(B)/libshard.a
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libshard.a $(ALL_LDFLAGS) $(DEPS_LIBS)

$(B)/tests/harness.o: tests/harness.c tests/harness.h $(FLAGS_STAMP) | $(B)/tests
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -c -o $@ $<

# Tests link the internal archive so they can reach private test hooks.
$(B)/tests/%: tests/%.c tests/*.h $(B)/libshard_internal.a $(B)/tests/harness.o | $(B)/tests
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -Ilib -o $@ $< $(B)/tests/harness.o \
	    $(B)/libshard_internal.a $(ALL_LDFLAGS) $(DEPS_LIBS) $(CHECK_LIBS)

# ---- tests --------------------------------------------------------------

# Installs missing packages when run as root on Debian, else says what to install.
deps:
	@sh tests/deps.sh

# JOBS: how many test programs run at once (each starts its own servers).
JOBS ?= 2
# Check's per-test timeouts, stretched where a sanitizer or valgrind slows
# everything down (a 65 MB patch under TSan on a loaded machine).
CK_TIMEOUT_MULTIPLIER ?= $(if $(SANITIZE)$(VALGRIND),4,1)

check: deps
	@$(MAKE) --no-print-directory check-run

# make check T=server_move (or T="unit_map server_move abi_check"): only
# those tests, by the name of their tests/*.c or tests/*.sh file.
CHECK_SCRIPTS := abi_check doc_check
ifdef T
CHECK_PROGS := $(addprefix $(B)/tests/,$(filter-out $(CHECK_SCRIPTS),$(T)))
CHECK_RUN   := $(CHECK_PROGS) $(patsubst %,tests/%.sh,$(filter $(CHECK_SCRIPTS),$(T)))
else
CHECK_PROGS := $(UNIT_TESTS) $(SERVER_TESTS)
CHECK_RUN   := $(CHECK_PROGS) tests/abi_check.sh tests/doc_check.sh examples/python/check.sh
endif

check-run: all $(CHECK_PROGS)
	@LIBSHARD_TESTS_DIR=tests SHARDCTL=$(B)/shardctl B=$(B) SANITIZE="$(SANITIZE)" RUN="$(RUN)" JOBS=$(JOBS) \
	    CK_TIMEOUT_MULTIPLIER=$(CK_TIMEOUT_MULTIPLIER) bash tests/run.sh $(CHECK_RUN)

# Parts of make check: the unit tests (no server), the server tests, the
# exported-symbol check, the man pages against the header and shardctl.
unit-check:
	@$(MAKE) --no-print-directory check-run T="$(notdir $(UNIT_TESTS))"
server-check: deps
	@$(MAKE) --no-print-directory check-run T="$(notdir $(SERVER_TESTS))"
# Both in one run (so the server tests start beside the unit tests' last
# ones): CI's sanitizer pass; the scripts of make check have nothing to
# sanitize. Run as make -j2 programs-check, so that make builds them two
# at a time (unit-check server-check under -j would run at once).
programs-check: deps
	@$(MAKE) --no-print-directory check-run T="$(notdir $(UNIT_TESTS) $(SERVER_TESTS))"
abi-check:
	@$(MAKE) --no-print-directory check-run T=abi_check
doc-check:
	@$(MAKE) --no-print-directory check-run T=doc_check

# ThreadSanitizer over the tests where threads share a context (not part of
# make check: run it as make check-tsan). die_after_fork=0: the move tests
# fork movers from a process whose contexts run their store reader thread,
# and the child starts threads of its own.
TSAN_TESTS := server_pool server_fence server_lease server_data_faults server_store server_move server_failover server_import
check-tsan: deps
	@$(MAKE) --no-print-directory SANITIZE=thread all \
	    $(addprefix build-thread/tests/,$(TSAN_TESTS))
	@LIBSHARD_TESTS_DIR=tests TSAN_OPTIONS="halt_on_error=1 exitcode=66 die_after_fork=0" CK_TIMEOUT_MULTIPLIER=4 \
	    JOBS=$(JOBS) bash tests/run.sh $(addprefix build-thread/tests/,$(TSAN_TESTS))

# ---- demo and benchmarks ------------------------------------------------

demo: deps
	@$(MAKE) --no-print-directory all
	@ZK=$(ZK) SHARDCTL=$(B)/shardctl B=$(B) sh tests/demo.sh

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

# The .pc file names its directories relative to ${prefix}, so a package
# relocated with its prefix (or pkg-config --define-prefix) stays right.
pcdir = $(if $(filter $(PREFIX)/%,$(1)),$(2)$(patsubst $(PREFIX)%,%,$(1)),$(1))
PC_LIBDIR := $(call pcdir,$(LIBDIR),$${exec_prefix})
PC_INCDIR := $(call pcdir,$(INCDIR),$${prefix})

MAN_PAGES := $(wildcard man/man[1-9]/*.[1-9])

install: all $(B)/shardctl-shared
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR) $(DESTDIR)$(BINDIR) \
	    $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man7
	install -m 644 include/libshard.h $(DESTDIR)$(INCDIR)/
	install -m 644 $(B)/libshard.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(B)/$(SOFILE) $(DESTDIR)$(LIBDIR)/
	ln -sf $(SOFILE) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libshard.so
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(PC_LIBDIR)|g' \
	    -e 's|@INCDIR@|$(PC_INCDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    pkgconfig/libshard.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/libshard.pc
	install -m 755 $(B)/shardctl-shared $(DESTDIR)$(BINDIR)/shardctl
	for f in $(MAN_PAGES); do \
	    d=$(DESTDIR)$(MANDIR)/$$(basename $$(dirname $$f)); \
	    install -d $$d && install -m 644 $$f $$d/ || exit 1; done
	sh man/links.sh man | while read -r dir link page; do \
	    ln -sf $$page $(DESTDIR)$(MANDIR)/$$dir/$$link || exit 1; done

# install, then without the symbol tables and debugging information (what a
# package ships; the build tree keeps them).
STRIP ?= strip
install-strip: install
	$(STRIP) --strip-unneeded $(DESTDIR)$(BINDIR)/shardctl $(DESTDIR)$(LIBDIR)/$(SOFILE)
	$(STRIP) --strip-debug $(DESTDIR)$(LIBDIR)/libshard.a

# Removes every file that install put there; directories stay.
uninstall:
	rm -f $(DESTDIR)$(INCDIR)/libshard.h $(DESTDIR)$(LIBDIR)/libshard.a \
	    $(DESTDIR)$(LIBDIR)/$(SOFILE) $(DESTDIR)$(LIBDIR)/$(SONAME) \
	    $(DESTDIR)$(LIBDIR)/libshard.so $(DESTDIR)$(LIBDIR)/pkgconfig/libshard.pc \
	    $(DESTDIR)$(BINDIR)/shardctl \
	    $(patsubst man/%,$(DESTDIR)$(MANDIR)/%,$(MAN_PAGES))
	sh man/links.sh man | while read -r dir link page; do \
	    rm -f $(DESTDIR)$(MANDIR)/$$dir/$$link || exit 1; done

clean:
	rm -rf build build-*
