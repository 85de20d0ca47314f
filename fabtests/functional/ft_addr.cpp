// fi_getinfo's node and service (docs/fi_pmshm.7.md, docs/fi_pmeth.7.md,
// "Addressing by node and service"): a server opens its endpoint from
// fi_getinfo(node, service, FI_SOURCE), a client reaches it through the
// dest_addr of fi_getinfo(node, service) alone, as libfabric's own fabtests
// do; every entry carries a src_addr; names that name nothing fail with
// -FI_ENODATA. FT_ADDRS gives each rank's IP address ("192.0.2.1,192.0.2.2"
// in the namespace suites; default 127.0.0.1 for every rank).
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <string>

#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr uint32_t kReady = 0xADD001u, kDone = 0xADD002u;

std::string addr_of(int r) {
    const char* env = getenv("FT_ADDRS");
    std::string list = env && *env ? env : "127.0.0.1";
    std::string last;
    size_t start = 0;
    for (int i = 0; i <= r; i++) {
        size_t c = list.find(',', start);
        last = list.substr(start, c == std::string::npos ? std::string::npos : c - start);
        if (c == std::string::npos) break;
        start = c + 1;
    }
    return last;
}

bool in_namespaces() { return getenv("FT_ADDRS") && *getenv("FT_ADDRS"); }

// A service number no other test of this run uses (tests run in parallel).
std::string fresh_service() { return std::to_string(20000 + (getpid() % 40000)); }

struct InfoList {
    fi_info* head = nullptr;
    int rc = 0;
    ~InfoList() { fi_freeinfo(head); }
};

void query(InfoList& out, const char* node, const char* service, uint64_t flags) {
    EpConfig cfg;
    fi_info* hints = make_hints(cfg);
    out.rc = fi_getinfo(kApiVersion, node, service, flags, hints, &out.head);
    fi_freeinfo(hints);
}

std::vector<uint8_t> bytes_of(const void* p, size_t len) {
    auto* b = static_cast<const uint8_t*>(p);
    return std::vector<uint8_t>(b, b + len);
}

// Every entry of a successful query has a src_addr of the endpoint name's
// length; a dest_addr only when `want_dest`.
void check_addrs(const InfoList& l, const char* what, size_t name_len, bool want_dest) {
    FT_CHECK(l.rc == 0 && l.head, "%s: fi_getinfo gave %d (%s)", what, l.rc, errstr(l.rc));
    for (const fi_info* fi = l.head; fi; fi = fi->next) {
        FT_CHECK(fi->src_addr && fi->src_addrlen == name_len, "%s: domain %s: src_addr %p, src_addrlen %zu (want %zu)",
                 what, fi->domain_attr->name, fi->src_addr, fi->src_addrlen, name_len);
        if (want_dest)
            FT_CHECK(fi->dest_addr && fi->dest_addrlen == name_len, "%s: domain %s: dest_addr %p, dest_addrlen %zu",
                     what, fi->domain_attr->name, fi->dest_addr, fi->dest_addrlen);
        else
            FT_CHECK(!fi->dest_addr && !fi->dest_addrlen, "%s: domain %s: unexpected dest_addr", what,
                     fi->domain_attr->name);
    }
}

void expect_enodata(const char* node, const char* service, uint64_t flags, const char* why) {
    InfoList l;
    query(l, node, service, flags);
    FT_CHECK(l.rc == -FI_ENODATA, "fi_getinfo(node=%s, service=%s%s) (%s): expected -FI_ENODATA, got %d (%s)",
             node ? node : "NULL", service ? service : "NULL", flags & FI_SOURCE ? ", FI_SOURCE" : "", why, l.rc,
             errstr(l.rc));
}

// Every entry has a src_addr (no node or service, FI_SOURCE with a node,
// FI_SOURCE with a service); node + service also give a dest_addr.
void case_src_addr() {
    Endpoint probe;
    size_t len = probe.name().size();
    std::string me = addr_of(rank());
    {
        InfoList l;
        query(l, nullptr, nullptr, 0);
        check_addrs(l, "no node, no service", len, false);
    }
    {
        InfoList l;
        query(l, me.c_str(), nullptr, FI_SOURCE);
        check_addrs(l, "FI_SOURCE node", len, false);
    }
    {
        InfoList l;
        query(l, nullptr, "9228", FI_SOURCE);
        check_addrs(l, "FI_SOURCE service", len, false);
    }
    {
        InfoList l;
        query(l, me.c_str(), "9228", 0);
        check_addrs(l, "node + service", len, true);
    }
}

// Names that name nothing: -FI_ENODATA, at once or within the resolution
// bound; never an entry.
void case_bad_node() {
    double t0 = now_s();
    expect_enodata("g00n13s", "9228", 0, "a host name that does not resolve");
    expect_enodata("g00n13s", nullptr, FI_SOURCE, "FI_SOURCE, a host name that does not resolve");
    expect_enodata("198.51.100.7", "9228", 0, "an address that is neither this host nor on a local subnet");
    expect_enodata("198.51.100.7", nullptr, FI_SOURCE, "FI_SOURCE, an address of no local interface");
    expect_enodata(addr_of(rank()).c_str(), "http", 0, "a service that is not a number");
    expect_enodata(addr_of(rank()).c_str(), "70000", FI_SOURCE, "a service above 65535");
    if (in_namespaces()) {
        // On the interface's subnet, but nobody answers ARP for it. pmshm
        // refuses it at once (not this host); pmeth after its resolution
        // bound (FI_PMETH_RESOLVE_MS, 1 s by default).
        double t1 = now_s();
        expect_enodata("192.0.2.200", "9228", 0, "an address on the subnet that nobody answers for");
        FT_CHECK(now_s() - t1 < 5.0, "the unanswered address took %.1f s to fail", now_s() - t1);
    }
    log("negative queries took %.2f s", now_s() - t0);
}

// The server opens its endpoint from fi_getinfo(its address, S, FI_SOURCE);
// the client knows only the server's address and S. Messages both ways
// (eager and rendezvous), and each side's FI_SOURCE names the other as the
// address it inserted: the client's dest_addr and the server's learnt name
// are the same peer.
void case_service() {
    EpConfig cfg;
    cfg.caps |= FI_SOURCE;
    if (rank() == 0) {
        std::string svc = fresh_service();
        cfg.node = addr_of(0);
        cfg.service = svc;
        cfg.getinfo_flags = FI_SOURCE;
        Endpoint ep(cfg);
        FT_CHECK(ep.info->src_addr, "the FI_SOURCE entry has no src_addr");
        oob_send_bytes(1, std::vector<uint8_t>(svc.begin(), svc.end()));
        std::vector<uint8_t> peer = oob_recv_bytes(1);
        fi_addr_t client = ep.insert(peer);
        auto r = post_recv(ep, 8192, true, 0xA1);
        auto big = post_recv(ep, (1 << 20) + 5, true, 0xA3);
        signal_peer(1, kReady);
        complete_recv(ep, *r, {.len = 4000, .seed = 11, .tag = 0xA1, .src = client});
        complete_recv(ep, *big, {.len = (1 << 20) + 5, .seed = 13, .tag = 0xA3, .src = client});
        auto s = post_send(ep, client, 200000, 12, true, 0xA2);
        complete_send(ep, *s);
        wait_signal_progress(ep, 1, kDone);
    } else {
        std::vector<uint8_t> sv = oob_recv_bytes(0);
        cfg.node = addr_of(0);
        cfg.service = std::string(sv.begin(), sv.end());
        Endpoint ep(cfg);
        FT_CHECK(ep.info->dest_addr && ep.info->dest_addrlen == ep.name().size(),
                 "fi_getinfo(%s, %s) gave no dest_addr of the name's length", cfg.node.c_str(), cfg.service.c_str());
        fi_addr_t server = ep.insert(bytes_of(ep.info->dest_addr, ep.info->dest_addrlen));
        // fi_av_insertsvc and fi_av_insertsym name the same endpoint. Each
        // insert takes an index of its own (fi_av(3), FI_AV_TABLE: fi_addr =
        // insertion index), so compare the names the AV holds.
        auto name_at = [&](fi_addr_t a) {
            std::vector<uint8_t> b(256);
            size_t len = b.size();
            int rc = fi_av_lookup(ep.av, a, b.data(), &len);
            FT_CHECK(rc == 0 && len <= b.size(), "fi_av_lookup(%llu): %d", (unsigned long long)a, rc);
            b.resize(len);
            return b;
        };
        const std::vector<uint8_t> server_name = name_at(server);
        fi_addr_t by_svc = FI_ADDR_NOTAVAIL, by_sym[2] = {FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL};
        int n = fi_av_insertsvc(ep.av, cfg.node.c_str(), cfg.service.c_str(), &by_svc, 0, nullptr);
        FT_CHECK(n == 1 && by_svc != FI_ADDR_NOTAVAIL && name_at(by_svc) == server_name,
                 "fi_av_insertsvc(%s, %s): %d, fi_addr %llu does not name the dest_addr's endpoint",
                 cfg.node.c_str(), cfg.service.c_str(), n, (unsigned long long)by_svc);
        n = fi_av_insertsym(ep.av, cfg.node.c_str(), 1, cfg.service.c_str(), 2, by_sym, 0, nullptr);
        FT_CHECK(n == 2 && by_sym[0] != FI_ADDR_NOTAVAIL && by_sym[1] != FI_ADDR_NOTAVAIL &&
                     name_at(by_sym[0]) == server_name && name_at(by_sym[1]) != server_name,
                 "fi_av_insertsym(%s, 1, %s, 2): %d, fi_addrs %llu %llu: the first must name the dest_addr's "
                 "endpoint, the second another", cfg.node.c_str(), cfg.service.c_str(), n,
                 (unsigned long long)by_sym[0], (unsigned long long)by_sym[1]);
        oob_send_bytes(0, ep.name());
        auto r = post_recv(ep, 200000, true, 0xA2);
        wait_signal_progress(ep, 0, kReady);
        auto s = post_send(ep, server, 4000, 11, true, 0xA1);
        complete_send(ep, *s);
        auto s2 = post_send(ep, server, (1 << 20) + 5, 13, true, 0xA3);
        complete_send(ep, *s2);
        complete_recv(ep, *r, {.len = 200000, .seed = 12, .tag = 0xA2, .src = server});
        signal_peer(0, kDone);
    }
}

// Two endpoints from the same FI_SOURCE service: the first holds the
// service; the second still opens, under a name of its own. A client
// addressing the service reaches the first.
void case_service_taken() {
    std::string svc = fresh_service();
    EpConfig scfg;
    scfg.node = addr_of(0);
    scfg.service = svc;
    scfg.getinfo_flags = FI_SOURCE;
    Endpoint holder(scfg), second(scfg);
    FT_CHECK(holder.name() != second.name(), "two endpoints got the same name");
    EpConfig ccfg;
    ccfg.node = addr_of(0);
    ccfg.service = svc;
    Endpoint client(ccfg);
    fi_addr_t to = client.insert(bytes_of(client.info->dest_addr, client.info->dest_addrlen));
    auto r1 = post_recv(holder, 4096, true, 0xB1);
    auto r2 = post_recv(second, 4096, true, 0xB1);
    auto s = post_send(client, to, 3000, 21, true, 0xB1);
    // (The progress helper thread moves the client's side meanwhile.)
    complete_recv(holder, *r1, {.len = 3000, .seed = 21, .tag = 0xB1});
    complete_send(client, *s);
    second.expect_quiet(0.2, "the endpoint that does not hold the service");
    FT_CALL(fi_cancel(&second.ep->fid, &r2->ctx.fctx));
    second.expect_err(&r2->ctx, FI_ECANCELED, "the cancelled receive");
}

// fi_av_straddr gives a readable form of a dest_addr and of a name;
// fi_av_insertsvc refuses names that name nothing.
void case_straddr() {
    EpConfig cfg;
    cfg.node = addr_of(0);
    cfg.service = "9228";
    Endpoint ep(cfg);
    for (int k = 0; k < 2; k++) {
        std::vector<uint8_t> a = k ? ep.name() : bytes_of(ep.info->dest_addr, ep.info->dest_addrlen);
        char buf[256];
        size_t len = sizeof buf;
        const char* s = fi_av_straddr(ep.av, a.data(), buf, &len);
        FT_CHECK(s && len > 1 && len <= sizeof buf, "fi_av_straddr: %p, len %zu", (const void*)s, len);
        std::string str(s);
        FT_EQ(str.size() + 1, len, "fi_av_straddr length (with the terminating 0)");
        FT_CHECK(str.rfind(g_opt.prov + "://", 0) == 0, "fi_av_straddr gave \"%s\", not %s://...", s,
                 g_opt.prov.c_str());
        for (char c : str) FT_CHECK(isprint((unsigned char)c), "fi_av_straddr gave unprintable bytes: \"%s\"", s);
        log("%s: %s", k ? "name" : "dest_addr", s);
    }
    fi_addr_t a = 0;
    int n = fi_av_insertsvc(ep.av, "g00n13s", "9228", &a, 0, nullptr);
    FT_CHECK(n < 0, "fi_av_insertsvc(g00n13s): %d, expected an error", n);
    n = fi_av_insertsvc(ep.av, addr_of(0).c_str(), "ftp", &a, 0, nullptr);
    FT_CHECK(n < 0, "fi_av_insertsvc(%s, ftp): %d, expected an error", addr_of(0).c_str(), n);
}

// FI_ADDR_STR (docs/fi_pmeth.7.md, "String addresses"): every address is
// the string fi_<prov>://<hex of the binary name>. Names swapped as strings,
// inserted as the strings themselves and as char ** (fi_av(3)), looked up,
// printed by fi_av_straddr and taken back by fi_av_insertsvc and fi_getinfo
// as a node; malformed strings refused; messages both ways byte-exact.
void case_str() {
    EpConfig cfg;
    cfg.addr_format = FI_ADDR_STR;
    Endpoint ep(cfg);
    const std::string prefix = "fi_" + g_opt.prov + "://";
    FT_EQ(ep.info->addr_format, (uint32_t)FI_ADDR_STR, "fi_info addr_format");
    auto as_str = [&](const std::vector<uint8_t>& b, const char* what) {
        FT_CHECK(!b.empty() && b.back() == 0, "%s is not NUL-terminated", what);
        std::string s((const char*)b.data());
        FT_CHECK(s.size() + 1 == b.size(), "%s: %zu bytes for a string of %zu characters", what, b.size(), s.size());
        FT_CHECK(s.rfind(prefix, 0) == 0, "%s \"%s\" does not start with %s", what, s.c_str(), prefix.c_str());
        for (size_t i = prefix.size(); i < s.size(); i++)
            FT_CHECK(isxdigit((unsigned char)s[i]) && !isupper((unsigned char)s[i]), "%s: not lowercase hex: %s", what,
                     s.c_str());
        return s;
    };
    as_str(bytes_of(ep.info->src_addr, ep.info->src_addrlen), "src_addr");
    std::vector<uint8_t> mine = ep.name();
    std::string me = as_str(mine, "fi_getname");
    oob_send_bytes(1 - rank(), mine);
    std::vector<uint8_t> theirs = oob_recv_bytes(1 - rank());
    std::string peer = as_str(theirs, "the peer's name");
    FT_EQ(theirs.size(), mine.size(), "every name has the same length");

    auto lookup = [&](fi_addr_t a) {
        std::vector<uint8_t> b(512);
        size_t len = b.size();
        int rc = fi_av_lookup(ep.av, a, b.data(), &len);
        FT_CHECK(rc == 0 && len <= b.size(), "fi_av_lookup(%llu): %d, len %zu", (unsigned long long)a, rc, len);
        b.resize(len);
        return as_str(b, "fi_av_lookup");
    };
    // The string itself (as applications pass fi_getname's bytes) ...
    fi_addr_t a1 = ep.insert(theirs);
    FT_CHECK(lookup(a1) == peer, "lookup of the inserted string differs");
    // ... and an array of strings (char **), with a malformed one beside it.
    std::string upper = peer;
    for (size_t i = prefix.size(); i < upper.size(); i++) upper[i] = (char)toupper((unsigned char)upper[i]);
    std::string shorter = peer.substr(0, peer.size() - 2), other = "fi_x" + peer.substr(4);
    const char* strs[4] = {peer.c_str(), upper.c_str(), shorter.c_str(), other.c_str()};
    fi_addr_t out[4];
    int n = fi_av_insert(ep.av, strs, 4, out, 0, nullptr);
    FT_EQ(n, 1, "fi_av_insert of char *[4] with three malformed strings: names inserted");
    FT_CHECK(out[0] != FI_ADDR_NOTAVAIL && lookup(out[0]) == peer, "char ** insert: the good string");
    for (int i = 1; i < 4; i++)
        FT_CHECK(out[i] == FI_ADDR_NOTAVAIL, "malformed string %d (%s) got fi_addr %llu", i, strs[i],
                 (unsigned long long)out[i]);
    // fi_av_straddr gives the string; fi_av_insertsvc takes it back as node.
    char buf[512];
    size_t len = sizeof buf;
    const char* s = fi_av_straddr(ep.av, theirs.data(), buf, &len);
    FT_CHECK(s && std::string(s) == peer && len == peer.size() + 1, "fi_av_straddr: \"%s\", len %zu", s ? s : "", len);
    fi_addr_t a3 = FI_ADDR_NOTAVAIL;
    n = fi_av_insertsvc(ep.av, s, nullptr, &a3, 0, nullptr);
    FT_CHECK(n == 1 && a3 != FI_ADDR_NOTAVAIL && lookup(a3) == peer, "fi_av_insertsvc(straddr, NULL): %d", n);
    n = fi_av_insertsvc(ep.av, upper.c_str(), nullptr, &a3, 0, nullptr);
    FT_CHECK(n < 0, "fi_av_insertsvc(uppercase string, NULL): %d, expected an error", n);
    // fi_getinfo with the string as node names it as dest_addr.
    {
        fi_info* hints = make_hints(cfg);
        fi_info* got = nullptr;
        int rc = fi_getinfo(kApiVersion, peer.c_str(), nullptr, 0, hints, &got);
        FT_CHECK(rc == 0 && got && got->dest_addr, "fi_getinfo(node = the peer's string): %d", rc);
        FT_CHECK(as_str(bytes_of(got->dest_addr, got->dest_addrlen), "dest_addr") == peer,
                 "dest_addr differs from the node string");
        fi_freeinfo(got);
        got = nullptr;
        rc = fi_getinfo(kApiVersion, upper.c_str(), nullptr, 0, hints, &got);
        FT_CHECK(rc == -FI_ENODATA && !got, "fi_getinfo(node = a malformed string): %d, expected -FI_ENODATA", rc);
        hints->addr_format = FI_SOCKADDR_IN;
        rc = fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints, &got);
        FT_CHECK(rc == -FI_ENODATA && !got, "hints asking for FI_SOCKADDR_IN: %d, expected -FI_ENODATA", rc);
        fi_freeinfo(hints);
    }
    // Traffic both ways through the string-inserted address, byte-exact.
    auto r = post_recv(ep, 70000, true, 0xC1);
    signal_peer(1 - rank(), kReady);
    wait_signal_progress(ep, 1 - rank(), kReady);
    auto snd = post_send(ep, a1, 65000 + rank(), 31 + rank(), true, 0xC1);
    complete_send(ep, *snd);
    complete_recv(ep, *r, {.len = size_t(65000 + 1 - rank()), .seed = uint32_t(31 + 1 - rank()), .tag = 0xC1});
    signal_peer(1 - rank(), kDone);
    wait_signal_progress(ep, 1 - rank(), kDone);
    log("%s: %s", me.c_str(), peer.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {{"src_addr", 1, case_src_addr},
                     {"bad_node", 1, case_bad_node},
                     {"service", 2, case_service},
                     {"service_taken", 1, case_service_taken},
                     {"straddr", 1, case_straddr},
                     {"str", 2, case_str}});
}
