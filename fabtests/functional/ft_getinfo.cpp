// fi_getinfo: RDM entries for the provider, exact -FI_ENODATA for
// impossible hints, returned caps are a superset of the requested ones and
// tx/rx caps a subset of the endpoint caps.
#include <string>
#include <cstring>

#include "ft_fabric.h"

using namespace ft;

namespace {

struct InfoList {
    fi_info* head = nullptr;
    int rc = 0;
    ~InfoList() { fi_freeinfo(head); }
};

// fi_getinfo for g_opt.prov with the given tweaks applied to default hints.
template <class F>
void query(InfoList& out, F&& tweak) {
    EpConfig cfg;
    fi_info* hints = make_hints(cfg);
    tweak(hints);
    out.rc = fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints, &out.head);
    fi_freeinfo(hints);
}

void check_entry(const fi_info* fi, uint64_t want_caps, uint64_t allowed_mode) {
    FT_CHECK(fi->fabric_attr && fi->fabric_attr->prov_name, "entry without fabric_attr/prov_name");
    // libfabric may add its utility providers layered on the one asked for
    // ("<prov>;ofi_rxd"); anything else is wrong.
    const std::string name = fi->fabric_attr->prov_name;
    FT_CHECK(name == g_opt.prov || name.rfind(g_opt.prov + ";ofi_", 0) == 0,
             "entry from provider '%s', asked for '%s'", name.c_str(), g_opt.prov.c_str());
    FT_CHECK(fi->ep_attr && fi->domain_attr && fi->tx_attr && fi->rx_attr, "entry lacks attributes");
    FT_EQ(fi->ep_attr->type, FI_EP_RDM, "ep_attr->type");
    FT_CHECK((fi->caps & want_caps) == want_caps, "caps %s lack requested %s", flags_str(fi->caps).c_str(),
             flags_str(want_caps & ~fi->caps).c_str());
    FT_CHECK((fi->tx_attr->caps & ~fi->caps) == 0, "tx_attr caps %s not within ep caps %s",
             flags_str(fi->tx_attr->caps).c_str(), flags_str(fi->caps).c_str());
    FT_CHECK((fi->rx_attr->caps & ~fi->caps) == 0, "rx_attr caps %s not within ep caps %s",
             flags_str(fi->rx_attr->caps).c_str(), flags_str(fi->caps).c_str());
    FT_CHECK((fi->mode & ~allowed_mode) == 0, "entry requires mode bits %s the hints did not offer",
             flags_str(fi->mode & ~allowed_mode).c_str());
    FT_CHECK(fi->tx_attr->size > 0 && fi->rx_attr->size > 0, "tx/rx size must be non-zero");
    FT_CHECK(fi->tx_attr->iov_limit >= 1 && fi->rx_attr->iov_limit >= 1, "iov_limit must be >= 1");
}

void case_rdm() {
    InfoList l;
    query(l, [](fi_info*) {});
    FT_CHECK(l.rc == 0 && l.head, "fi_getinfo(prov=%s, RDM, FI_MSG|FI_TAGGED): %d (%s)", g_opt.prov.c_str(),
             l.rc, errstr(l.rc));
    int n = 0;
    for (fi_info* fi = l.head; fi; fi = fi->next, ++n) check_entry(fi, FI_MSG | FI_TAGGED, FI_CONTEXT);
    log("%d RDM entries", n);
}

// caps = 0 lists everything; every single cap advertised there can be
// requested on its own, and each result carries it.
void case_caps_subset() {
    InfoList all;
    query(all, [](fi_info* h) { h->caps = 0; });
    FT_CHECK(all.rc == 0 && all.head, "fi_getinfo with caps 0: %d (%s)", all.rc, errstr(all.rc));
    uint64_t adv = 0;
    for (fi_info* fi = all.head; fi; fi = fi->next) {
        check_entry(fi, 0, FI_CONTEXT);
        adv |= fi->caps;
    }
    const uint64_t probe[] = {FI_MSG, FI_TAGGED, FI_MULTI_RECV, FI_SOURCE, FI_DIRECTED_RECV, FI_RMA};
    int tried = 0;
    for (uint64_t cap : probe) {
        if (!(adv & cap)) continue;
        ++tried;
        uint64_t want = cap;
        if (cap & (FI_MULTI_RECV | FI_SOURCE | FI_DIRECTED_RECV)) want |= FI_MSG;
        InfoList l;
        query(l, [&](fi_info* h) { h->caps = want; });
        FT_CHECK(l.rc == 0 && l.head, "caps %s advertised but requesting them gives %d (%s)",
                 flags_str(want).c_str(), l.rc, errstr(l.rc));
        for (fi_info* fi = l.head; fi; fi = fi->next) check_entry(fi, want, FI_CONTEXT);
    }
    FT_CHECK(tried >= 2, "provider advertises neither FI_MSG nor FI_TAGGED (caps %s)", flags_str(adv).c_str());
}

void expect_enodata(const char* what, InfoList& l) {
    FT_CHECK(l.rc == -FI_ENODATA, "%s: expected -FI_ENODATA (%d), got %d (%s) with %s", what, -FI_ENODATA, l.rc,
             errstr(l.rc), l.head ? "entries" : "no entries");
}

void case_enodata() {
    InfoList all;
    query(all, [](fi_info* h) {
        h->caps = 0;
        h->ep_attr->type = FI_EP_UNSPEC;
    });
    FT_CHECK(all.rc == 0 && all.head, "fi_getinfo with open hints: %d (%s)", all.rc, errstr(all.rc));
    uint64_t adv = 0;
    bool has_msg_ep = false;
    for (fi_info* fi = all.head; fi; fi = fi->next) {
        adv |= fi->caps;
        has_msg_ep |= fi->ep_attr->type == FI_EP_MSG;
    }
    int checks = 0;
    if (!has_msg_ep) {
        InfoList l;
        query(l, [](fi_info* h) { h->ep_attr->type = FI_EP_MSG; });
        expect_enodata("FI_EP_MSG hints (provider lists no MSG endpoint)", l);
        ++checks;
    }
    const uint64_t impossible[] = {FI_RMA, FI_ATOMIC, FI_TRIGGER, FI_NAMED_RX_CTX, FI_COLLECTIVE, FI_VARIABLE_MSG};
    for (uint64_t cap : impossible) {
        if (!cap || (adv & cap)) continue;  // FI_VARIABLE_MSG is 0 since libfabric 1.21
        InfoList l;
        query(l, [&](fi_info* h) { h->caps |= cap; });
        std::string what = "unadvertised cap " + flags_str(cap);
        expect_enodata(what.c_str(), l);
        ++checks;
    }
    {
        InfoList l;
        EpConfig cfg;
        fi_info* hints = make_hints(cfg);
        free(hints->fabric_attr->prov_name);
        hints->fabric_attr->prov_name = strdup("pmfabric_no_such_provider");
        l.rc = fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints, &l.head);
        fi_freeinfo(hints);
        expect_enodata("unknown provider name", l);
        ++checks;
    }
    FT_CHECK(checks >= 2, "only %d impossible-hint checks applied", checks);
}

// The message ordering the per-peer FIFO gives one-sided operations (see
// docs/architecture.md, "Ordering"): hints asking for it, on both the
// transmit and the receive side, get entries that advertise it.
void case_order() {
    uint64_t order = FI_ORDER_SAS | FI_ORDER_RAW | FI_ORDER_WAW;
#ifdef FI_ORDER_RMA_RAR
    order |= FI_ORDER_RMA_RAR | FI_ORDER_RMA_RAW | FI_ORDER_RMA_WAW;
#endif
#ifdef FI_ORDER_ATOMIC_RAR
    order |= FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAW;
#endif
    InfoList l;
    query(l, [&](fi_info* h) {
        h->caps |= FI_RMA | FI_ATOMIC;
        h->tx_attr->msg_order = order;
        h->rx_attr->msg_order = order;
    });
    FT_CHECK(l.rc == 0 && l.head, "fi_getinfo with msg_order 0x%llx for FI_RMA|FI_ATOMIC: %d (%s)",
             (unsigned long long)order, l.rc, errstr(l.rc));
    for (fi_info* fi = l.head; fi; fi = fi->next) {
        check_entry(fi, FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC, FI_CONTEXT);
        FT_CHECK((fi->tx_attr->msg_order & order) == order, "tx msg_order 0x%llx lacks 0x%llx",
                 (unsigned long long)fi->tx_attr->msg_order, (unsigned long long)(order & ~fi->tx_attr->msg_order));
        FT_CHECK((fi->rx_attr->msg_order & order) == order, "rx msg_order 0x%llx lacks 0x%llx",
                 (unsigned long long)fi->rx_attr->msg_order, (unsigned long long)(order & ~fi->rx_attr->msg_order));
    }
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {{"rdm", 1, case_rdm},
                     {"enodata", 1, case_enodata},
                     {"caps_subset", 1, case_caps_subset},
                     {"order", 1, case_order}});
}
