/* SPDX-License-Identifier: Apache-2.0 */
/* A C program built against an installed npo-hal: includes <rdma/fi_npo_ext.h> from the install
 * prefix, opens the first npo domain (FI_NPO_BACKEND and FI_PROVIDER_PATH come from the caller)
 * and reads its counters through the extension ops. Prints "card N fabric_id F ops_ok O" and
 * exits 0, else names the call that failed and exits 1. (run-install-check.sh) */
#include <stdio.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_npo_ext.h>

int main(void) {
  struct fi_info *hints = fi_allocinfo(), *info = NULL;
  struct fid_fabric *fabric = NULL;
  struct fid_domain *domain = NULL;
  struct fi_npo_domain_ops *ops = NULL;
  struct fi_npo_dma_counters c;
  int rc;
  if (!hints) return 1;
  hints->fabric_attr->prov_name = strdup("npo");
  hints->ep_attr->type = FI_EP_RDM;
  rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
  if (rc) { fprintf(stderr, "fi_getinfo: %d\n", rc); return 1; }
  rc = fi_fabric(info->fabric_attr, &fabric, NULL);
  if (rc) { fprintf(stderr, "fi_fabric: %d\n", rc); return 1; }
  rc = fi_domain(fabric, info, &domain, NULL);
  if (rc) { fprintf(stderr, "fi_domain: %d\n", rc); return 1; }
  rc = fi_open_ops(&domain->fid, FI_NPO_DOMAIN_OPS_NAME, 0, (void **)&ops, NULL);
  if (rc || !ops || ops->size < sizeof(struct fi_npo_domain_ops)) { fprintf(stderr, "fi_open_ops: %d\n", rc); return 1; }
  memset(&c, 0xff, sizeof c);
  rc = ops->dma_counters(domain, &c);
  if (rc) { fprintf(stderr, "dma_counters: %d\n", rc); return 1; }
  printf("domain %s: card %u fabric_id %u ops_ok %llu\n", info->domain_attr->name, c.card, c.fabric_id,
         (unsigned long long)c.ops_ok);
  fi_close(&domain->fid);
  fi_close(&fabric->fid);
  fi_freeinfo(info);
  fi_freeinfo(hints);
  return 0;
}
