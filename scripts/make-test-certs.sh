#!/usr/bin/env bash
# Creates throwaway TLS material for tests, simulators and `make run`, the way users produce
# theirs with openssl in the real world. Never use these outside tests.
#
#   scripts/make-test-certs.sh DIR [TOPIC]
#
# DIR receives:
#   ca.pem ca.key                  a throwaway certificate authority (EC P-256)
#   server.pem server.key          server certificate for 127.0.0.1, ::1 and localhost, signed by the CA
#   client.pem client.key          client certificate (an "Apple Push Services" look-alike for TOPIC,
#                                  with Apple's topics extension 1.2.840.113635.100.6.3.6) and its key
#   client-combined.pem            certificate and unencrypted key in one PEM file
#   client-encrypted.key           the key, PEM-encrypted with the passphrase
#   client.p12                     certificate and key as PKCS#12, passphrase in p12-passphrase.txt
#   p12-passphrase.txt             "herald-test-passphrase"
#   other-ca.pem other-client.pem other-client.key   a second CA and a client it signed (for rejection tests)
#   AuthKey_ABC123DEFG.p8          an APNs token-auth key (PKCS#8, EC P-256), key id ABC123DEFG
#   AuthKey_ABC123DEFG.pub.pem     its public key (what the simulator verifies JWTs with)
#   AuthKey_P384.p8                a P-384 key, which APNs does not accept (for error tests)
#   vapid.key                      a VAPID key (EC P-256) for Web Push
#   fcm-service-account.json       a Google service account (RSA key) whose token_uri is the FCM simulator
#                                  on 127.0.0.1:2199 (herald simulate fcm --service-account)
# Existing files are kept: delete DIR to start over.
set -euo pipefail
dir="${1:?usage: make-test-certs.sh DIR [TOPIC]}"
topic="${2:-com.example.app}"
mkdir -p "$dir"
cd "$dir"
[ -s AuthKey_P384.p8 ] && [ -s client.p12 ] && [ -s vapid.key ] && [ -s fcm-service-account.json ] && exit 0

days=3650
pass="herald-test-passphrase"
ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# Certificate authority.
ec ca.key
openssl req -x509 -new -key ca.key -sha256 -days $days -subj "/CN=Herald Test CA/O=Herald Tests" -out ca.pem \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

# Server certificate for loopback.
ec server.key
openssl req -new -key server.key -subj "/CN=localhost/O=Herald Tests" -out server.csr 2>/dev/null
cat > server.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost
EXT
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days $days -sha256 -extfile server.ext -out server.pem 2>/dev/null

# Client certificate shaped like Apple's push certificates.
ec client.key
openssl req -new -key client.key -subj "/UID=${topic}/CN=Apple Push Services: ${topic}/OU=DEF123GHIJ/O=Herald Tests/C=US" -out client.csr 2>/dev/null
cat > client.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth
1.2.840.113635.100.6.3.1=ASN1:NULL
1.2.840.113635.100.6.3.2=ASN1:NULL
1.2.840.113635.100.6.3.6=ASN1:SEQUENCE:topics
[topics]
t1=UTF8String:${topic}
t1s=SEQUENCE:app
t2=UTF8String:${topic}.voip
t2s=SEQUENCE:voip
t3=UTF8String:${topic}.complication
t3s=SEQUENCE:complication
[app]
a=UTF8String:app
[voip]
a=UTF8String:voip
[complication]
a=UTF8String:complication
EXT
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days $days -sha256 -extfile client.ext -out client.pem 2>/dev/null
cat client.pem client.key > client-combined.pem
openssl pkey -in client.key -aes256 -passout "pass:${pass}" -out client-encrypted.key 2>/dev/null
openssl pkcs12 -export -in client.pem -inkey client.key -certfile ca.pem -name "Apple Push Services: ${topic}" \
  -passout "pass:${pass}" -out client.p12 2>/dev/null
printf '%s' "$pass" > p12-passphrase.txt

# A CA the servers do not trust, with a client of its own.
ec other-ca.key
openssl req -x509 -new -key other-ca.key -sha256 -days $days -subj "/CN=Other CA" -out other-ca.pem 2>/dev/null
ec other-client.key
openssl req -new -key other-client.key -subj "/CN=Other Client" -out other-client.csr 2>/dev/null
openssl x509 -req -in other-client.csr -CA other-ca.pem -CAkey other-ca.key -CAcreateserial -days $days -sha256 -out other-client.pem 2>/dev/null

# APNs token-auth keys.
ec AuthKey_ABC123DEFG.p8
openssl pkey -in AuthKey_ABC123DEFG.p8 -pubout -out AuthKey_ABC123DEFG.pub.pem 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-384 -out AuthKey_P384.p8 2>/dev/null

# A VAPID key (RFC 8292) for the sample's webpush route.
ec vapid.key

# A service account for the sample's fcm route, as Google's console writes one (the key inline as
# PEM with \n escapes), pointed at the FCM simulator.
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out fcm-service-account.key 2>/dev/null
{
  printf '{"type": "service_account", "project_id": "herald-sim", "private_key_id": "%s",\n' "$(openssl rand -hex 20)"
  printf ' "private_key": "%s",\n' "$(awk '{printf "%s\\n", $0}' fcm-service-account.key)"
  printf ' "client_email": "herald@herald-sim.iam.gserviceaccount.com", "client_id": "100000000000000000001",\n'
  printf ' "auth_uri": "https://127.0.0.1:2199/auth", "token_uri": "https://127.0.0.1:2199/token"}\n'
} > fcm-service-account.json
rm -f fcm-service-account.key

rm -f ./*.csr ./*.ext ./*.srl
chmod 600 ./*.key ./*.p8 client-combined.pem client.p12 fcm-service-account.json
