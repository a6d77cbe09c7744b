// TCP is served only with TLS and a bearer token checked on every call: a
// call without the token or with a wrong one is UNAUTHENTICATED, one with it
// succeeds (through the client library and through trainctl), and the Unix
// socket needs no token. The certificate
// is made with openssl for 127.0.0.1 (exit 77 without openssl).
#define _GNU_SOURCE
#include "e2e/daemon.h"

static int node(const char *addr, const char *token, const char *ca, rpc_status *st) {
  rpc *r;
  char err[256];
  rpc_options o = {token, ca, 0};
  CHECK(rpc_open(&r, addr, &o, err, sizeof err) == 0, "%s", err);
  Traind__V1__GetNodeRequest req = TRAIND__V1__GET_NODE_REQUEST__INIT;
  ProtobufCMessage *reply = NULL;
  int rc = rpc_unary(r, "/traind.v1.Trainer/GetNode", &req.base, &traind__v1__node__descriptor, &reply, 10000, st);
  if (reply) protobuf_c_message_free_unpacked(reply, NULL);
  rpc_close(r);
  return rc;
}

int main(void) {
  td t;
  td_init(&t);
  if (system("openssl version > /dev/null 2>&1") != 0) {
    printf("skipped: openssl is not installed\n");
    tmp_cleanup();
    return 77;
  }
  char cmd[4000], cert[600], key[600], token[600], arg[700];
  snprintf(cert, sizeof cert, "%s/cert.pem", tmp_root);
  snprintf(key, sizeof key, "%s/key.pem", tmp_root);
  snprintf(token, sizeof token, "%s/token", tmp_root);
  snprintf(cmd, sizeof cmd,
           "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
           "-addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout %s -out %s > /dev/null 2>&1",
           key, cert);
  CHECK(system(cmd) == 0, "openssl could not make a certificate");
  const char *secret = "0123456789abcdef-secret-token";
  FILE *f = fopen(token, "w");
  fprintf(f, "%s\n", secret);
  fclose(f);
  td_set(&t, "tcp=127.0.0.1:0");
  snprintf(arg, sizeof arg, "tls_cert=%s", cert);
  td_set(&t, arg);
  snprintf(arg, sizeof arg, "tls_key=%s", key);
  td_set(&t, arg);
  CHECK(t.n_extra == 6, "arguments");
  // td_arg holds 8: the token file goes through the config file instead.
  f = fopen(t.conf, "w");
  fprintf(f, "token_file = %s\n", token);
  fclose(f);
  td_start(&t);

  // The port the kernel chose, from the daemon's log.
  char log[8192] = "";
  f = fopen(t.log, "r");
  size_t n = fread(log, 1, sizeof log - 1, f);
  log[n] = 0;
  fclose(f);
  const char *p = strstr(log, "(port ");
  CHECK(p, "no TCP port in the log:\n%s", log);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", atoi(p + 6));

  rpc_status st;
  int rc = node(addr, NULL, cert, &st);
  CHECK(rc == GRPC_STATUS_UNAUTHENTICATED && strstr(st.msg, "authorization"), "no token: %s %s", rpc_code_name(st.code), st.msg);
  rc = node(addr, "not-the-token-at-all", cert, &st);
  CHECK(rc == GRPC_STATUS_UNAUTHENTICATED, "wrong token: %s %s", rpc_code_name(st.code), st.msg);
  rc = node(addr, secret, cert, &st);
  CHECK(rc == 0, "right token: %s %s", rpc_code_name(st.code), st.msg);
  rc = node(t.sock, NULL, NULL, &st);
  CHECK(rc == 0, "the Unix socket asked for a token: %s", st.msg);
  char out[4096];
  rc = td_ctl(&t, out, sizeof out, "--addr %s --ca %s --token-file %s node", addr, cert, token);
  CHECK(rc == 0, "trainctl over TLS exited %d", rc);
  rc = td_ctl(&t, out, sizeof out, "--addr %s --ca %s node", addr, cert);
  CHECK(rc == 3, "trainctl over TLS without a token exited %d, expected 3", rc);
  printf("TCP: TLS with a bearer token on every call; the Unix socket without\n");
  td_finish(&t);
  return 0;
}
