#!/bin/sh
# The compose stack's certificates, made by its one-shot `certs` service (openssl, in the ferry
# image) on first start and kept in volumes: a CA of the stack's own (its key never leaves the
# `certs-ca` volume) and one certificate per party, each in a volume only that party mounts, at
# /etc/ferry/tls: tls.crt, tls.key (readable by that party's user only) and ca.crt.
#   reader         DNS reader                                 server (the filter's calls)
#   control-plane  DNS control-plane, localhost, IP 127.0.0.1 server (xDS; the API, also from
#                                                             the host through the published port)
#   envoy          DNS ferry-docker (its node id)             client of both
#   redis          DNS redis, localhost, IP 127.0.0.1         server (TLS; its healthcheck
#                                                             connects to localhost)
# and the CA's certificate alone in `certs-trust` (/certs/trust/ca.crt), for the init job, which
# reaches Redis over TLS and holds no certificate of its own.
# Ferry's servers require client certificates of the CA (mTLS); the control plane lets a
# certificate use the node id it names. Redis asks for none (Ferry's Redis client sends none):
# its clients give the password. A second start finds them and does nothing.
set -eu
out=/certs
if [ -s "$out/redis/tls.crt" ]; then
  echo "certs: present"; exit 0
fi
umask 077
ca="$out/ca"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 365 \
  -subj "/CN=ferry compose CA" -keyout "$ca/ca.key" -out "$ca/ca.crt" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
# issue NAME UID SAN USAGE
issue() {
  dir="$out/$1"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$1" \
    -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\nkeyUsage=critical,digitalSignature\nbasicConstraints=critical,CA:FALSE\n' \
    "$3" "$4" > "$dir/ext.cnf"
  openssl x509 -req -in "$dir/tls.csr" -CA "$ca/ca.crt" -CAkey "$ca/ca.key" -CAcreateserial \
    -days 365 -extfile "$dir/ext.cnf" -out "$dir/tls.crt" 2>/dev/null
  cp "$ca/ca.crt" "$dir/ca.crt"
  rm -f "$dir/tls.csr" "$dir/ext.cnf"
  chown -R "$2:$2" "$dir"
  chmod 0400 "$dir/tls.key"
  chmod 0444 "$dir/tls.crt" "$dir/ca.crt"
}
# The ferry image's user is 10001; the official Envoy image drops to its `envoy` user, 101 (the
# local stand-in runs Envoy as root); Redis runs as 999 (compose's `user:`, the official
# image's redis user).
issue reader 10001 "DNS:reader" serverAuth
issue control-plane 10001 "DNS:control-plane,DNS:localhost,IP:127.0.0.1" serverAuth
issue envoy 101 "DNS:ferry-docker" clientAuth
issue redis 999 "DNS:redis,DNS:localhost,IP:127.0.0.1" serverAuth
cp "$ca/ca.crt" "$out/trust/ca.crt"
chmod 0444 "$out/trust/ca.crt"
echo "certs: made (CA and reader, control-plane, envoy, redis certificates)"
