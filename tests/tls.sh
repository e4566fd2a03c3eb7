#!/usr/bin/env bash
# tests/tls.sh: throwaway certificates for TLS tests.
#
#   tls.sh DIR      (DIR exists, or is created; its files are overwritten)
#
# Makes, in DIR, with openssl:
#   ca.pem, ca-key.pem                  a test CA
#   server-cert.pem, server-key.pem     signed by it, for 127.0.0.1 and localhost
#                                       (subjectAltName IP:127.0.0.1, DNS:localhost)
#   client-cert.pem, client-key.pem     a client certificate signed by it
#   other-ca.pem, other-ca-key.pem      a second, unrelated CA (signs nothing here)
#
# `servers.sh start DIR2 N --tls DIR` runs servers with ca.pem, server-cert.pem
# and server-key.pem. Keys are unencrypted and mode 600: for tests only.

set -euo pipefail

PROG=${0##*/}
die() { echo "$PROG: $*" >&2; exit 1; }

(($# == 1)) || { echo "usage: $PROG DIR" >&2; exit 2; }
command -v openssl >/dev/null 2>&1 || die "openssl not found"
mkdir -p "$1"
cd "$1"
umask 077
DAYS=3650

# A config of our own: the system's (or $OPENSSL_CONF) must not add or
# change extensions behind our back.
cat >openssl.cnf <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[v3_server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
authorityKeyIdentifier = keyid
[v3_client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
EOF
export OPENSSL_CONF=$PWD/openssl.cnf

ossl() { openssl "$@" 2>>openssl.log || { cat openssl.log >&2; die "openssl $1 failed"; }; }

# P-256 keys: as good as RSA-2048 for this, and made in milliseconds.
newkey() { ossl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }

ca() { # NAME CN
    newkey "$1-key.pem"
    ossl req -config openssl.cnf -new -x509 -key "$1-key.pem" -out "$1.pem" -days "$DAYS" \
        -subj "/O=libshard tests/CN=$2" -extensions v3_ca
}

leaf() { # NAME CN EXTENSIONS
    newkey "$1-key.pem"
    ossl req -config openssl.cnf -new -key "$1-key.pem" -out "$1.csr" \
        -subj "/O=libshard tests/CN=$2"
    ossl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
        -out "$1-cert.pem" -days "$DAYS" -extfile openssl.cnf -extensions "$3"
    rm -f "$1.csr"
}

: >openssl.log
ca ca "libshard test CA"
ca other-ca "unrelated test CA"
leaf server 127.0.0.1 v3_server
leaf client libshard-client v3_client
ossl verify -CAfile ca.pem server-cert.pem client-cert.pem >/dev/null
rm -f ca.srl openssl.log
# The server reads these as whatever user runs it (the caller).
chmod 644 ./*.pem
chmod 600 ./*-key.pem
echo "$PWD"
