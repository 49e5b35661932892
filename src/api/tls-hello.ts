/**
 * What the agent offers in its TLS ClientHello. Node's defaults offer some 60 cipher suites
 * (OpenSSL's HIGH, CBC and all), 10 key-exchange groups and 28 signature algorithms: about
 * 350 bytes sent at every connection, and the agent opens one per push (the service's idle
 * timeout closes a connection long before the next). This is the set of the Mozilla
 * "intermediate" server profile seen from the client: TLS 1.3's three suites, TLS 1.2 with
 * forward secrecy and an AEAD only (ECDHE, and DHE for servers without elliptic curves), the
 * groups and signature algorithms those servers use (P-521 and RSA-PSS keys included). Some
 * 120 bytes less per connection, some 13 KB a truck-day. A service or TLS-inspecting proxy that
 * needs anything outside it: `api.tls_hello = "node"` offers Node's own list.
 */
export const TLS_HELLO = {
  ciphers: [
    'TLS_AES_128_GCM_SHA256',
    'TLS_AES_256_GCM_SHA384',
    'TLS_CHACHA20_POLY1305_SHA256',
    'ECDHE-ECDSA-AES128-GCM-SHA256',
    'ECDHE-RSA-AES128-GCM-SHA256',
    'ECDHE-ECDSA-AES256-GCM-SHA384',
    'ECDHE-RSA-AES256-GCM-SHA384',
    'ECDHE-ECDSA-CHACHA20-POLY1305',
    'ECDHE-RSA-CHACHA20-POLY1305',
    'DHE-RSA-AES128-GCM-SHA256',
    'DHE-RSA-AES256-GCM-SHA384',
  ].join(':'),
  ecdhCurve: 'X25519:P-256:P-384:P-521',
  sigalgs: ['ecdsa_secp256r1_sha256', 'ecdsa_secp384r1_sha384', 'ed25519', 'rsa_pss_rsae_sha256', 'rsa_pss_rsae_sha384', 'rsa_pss_rsae_sha512', 'rsa_pkcs1_sha256', 'rsa_pkcs1_sha384', 'rsa_pkcs1_sha512'].join(
    ':',
  ),
} as const;
