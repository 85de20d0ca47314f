// Opens one pmeth RDM endpoint (the environment picks the interface and the
// wire), prints "ready" and holds it until SIGTERM (then closes it and exits
// 0) or SIGKILL (the crash xdp_cleanup.sh simulates). Exit 1 with the reason
// when the endpoint cannot be opened.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

namespace {
volatile sig_atomic_t g_stop = 0;
void on_term(int) { g_stop = 1; }

int fail(const char* what, int rc) {
  fprintf(stderr, "ep_hold: %s: %s\n", what, fi_strerror(-rc));
  return 1;
}
}  // namespace

int main() {
  signal(SIGTERM, on_term);
  fi_info* hints = fi_allocinfo();
  hints->fabric_attr->prov_name = strdup("pmeth");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG;
  fi_info* info = nullptr;
  int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
  fi_freeinfo(hints);
  if (rc) return fail("fi_getinfo", rc);
  fid_fabric* fab;
  fid_domain* dom;
  fid_ep* ep;
  fid_av* av;
  fid_cq* cq;
  fi_av_attr aa{};
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_CONTEXT;
  if ((rc = fi_fabric(info->fabric_attr, &fab, nullptr))) return fail("fi_fabric", rc);
  if ((rc = fi_domain(fab, info, &dom, nullptr))) return fail("fi_domain", rc);
  if ((rc = fi_endpoint(dom, info, &ep, nullptr))) return fail("fi_endpoint", rc);
  if ((rc = fi_av_open(dom, &aa, &av, nullptr))) return fail("fi_av_open", rc);
  if ((rc = fi_cq_open(dom, &ca, &cq, nullptr))) return fail("fi_cq_open", rc);
  if ((rc = fi_ep_bind(ep, &av->fid, 0))) return fail("fi_ep_bind av", rc);
  if ((rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV))) return fail("fi_ep_bind cq", rc);
  if ((rc = fi_enable(ep))) return fail("fi_enable", rc);
  printf("ready\n");
  fflush(stdout);
  while (!g_stop) usleep(10000);
  fi_close(&ep->fid);
  fi_close(&cq->fid);
  fi_close(&av->fid);
  fi_close(&dom->fid);
  fi_close(&fab->fid);
  fi_freeinfo(info);
  return 0;
}
