#include "core/av.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include <rdma/fi_errno.h>

#include "base/log.hpp"
#include "base/netaddr.hpp"
#include "core/addr_str.hpp"
#include "core/domain.hpp"
#include "core/provider.hpp"

namespace pm {

extern const fi_ops kAvFiOps;
extern const fi_ops_av kAvOps;

Av::Av(Domain& dom, const fi_av_attr& attr, void* context)
    : dom_(dom), type_(attr.type == FI_AV_UNSPEC ? FI_AV_TABLE : attr.type) {
  box_.self = this;
  box_.fid.fid.fclass = FI_CLASS_AV;
  box_.fid.fid.context = context;
  box_.fid.fid.ops = const_cast<fi_ops*>(&kAvFiOps);
  box_.fid.ops = const_cast<fi_ops_av*>(&kAvOps);
  addrlen_ = g_provdef->name_len();
  str_ = dom.info && dom.info->addr_format == FI_ADDR_STR;
  names_.reserve(attr.count);
}

// fi_av_insert of a domain with string addresses (addr_str.hpp): fi_av(3)
// says an array of strings (char **); libfabric's own providers and the
// applications that swap fi_getname's bytes pass the strings themselves, one
// after the other (here every name has the same length, so both readings
// agree). A buffer that starts with this provider's "fi_<name>://" is taken
// as such strings; anything else as char ** (a pointer's first bytes are
// never that text). A string that is not a name takes its slot and gets
// FI_ADDR_NOTAVAIL, as an invalid binary name does.
int Av::insert_str(const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags, void* context) {
  if (count && !addr) return -FI_EINVAL;
  std::string bin(count * addrlen_, '\0');  // zeros: never a valid name
  bool inline_strs = count && looks_like_uri(static_cast<const char*>(addr), uri_size());
  for (size_t i = 0; i < count; i++) {
    const char* s = inline_strs ? static_cast<const char*>(addr) + i * uri_size()
                                : static_cast<const char* const*>(addr)[i];
    std::string one, why;
    if (s && uri_to_name(s, uri_size(), &one, &why)) memcpy(&bin[i * addrlen_], one.data(), addrlen_);
    else PM_WARN(FI_LOG_AV, "address %zu of the insert: %s", i, s ? why.c_str() : "null string");
  }
  return insert(bin.data(), count, fi_addr, flags, context);
}

// The lowest slot holding no name, grown at the end when every slot is used.
fi_addr_t Av::take_slot() {
  if (!free_.empty()) {
    fi_addr_t slot = *free_.begin();
    free_.erase(free_.begin());
    return slot;
  }
  names_.emplace_back();
  valid_.push_back(false);
  return names_.size() - 1;
}

// Entry i takes the i-th lowest unused slot whether or not its name is valid,
// so valid entries get the fi_addr their position promises; an invalid one
// gets FI_ADDR_NOTAVAIL (and FI_EINVAL in the FI_SYNC_ERR array) and its slot
// is left for later inserts. Returns the number of names inserted.
int Av::insert(const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags, void* context) {
  if (flags & ~(FI_MORE | FI_SYNC_ERR)) return -FI_EBADFLAGS;
  int* sync_err = (flags & FI_SYNC_ERR) ? static_cast<int*>(context) : nullptr;
  if ((flags & FI_SYNC_ERR) && !sync_err && count) return -FI_EINVAL;
  const char* a = static_cast<const char*>(addr);
  std::vector<fi_addr_t> unused;
  int ok = 0;
  for (size_t i = 0; i < count; i++) {
    fi_addr_t slot = take_slot();
    std::string name(a + i * addrlen_, addrlen_);
    if (!g_provdef->name_valid(name.data(), name.size())) {
      PM_WARN(FI_LOG_AV, "address %zu of the insert is not a %s address", i, g_provdef->name());
      unused.push_back(slot);
      if (fi_addr) fi_addr[i] = FI_ADDR_NOTAVAIL;
      if (sync_err) sync_err[i] = FI_EINVAL;
      continue;
    }
    std::vector<fi_addr_t>& slots = index_[name];
    slots.insert(std::lower_bound(slots.begin(), slots.end(), slot), slot);
    names_[slot] = std::move(name);
    valid_[slot] = true;
    if (fi_addr) fi_addr[i] = slot;
    if (sync_err) sync_err[i] = 0;
    ok++;
  }
  free_.insert(unused.begin(), unused.end());
  gen_++;
  return ok;
}

int Av::remove(fi_addr_t* fi_addr, size_t count, uint64_t flags) {
  if (flags) return -FI_EBADFLAGS;
  for (size_t i = 0; i < count; i++) {
    fi_addr_t a = fi_addr[i];
    if (a >= names_.size() || !valid_[a]) return -FI_EINVAL;
    auto it = index_.find(names_[a]);
    std::vector<fi_addr_t>& slots = it->second;
    slots.erase(std::find(slots.begin(), slots.end(), a));
    if (slots.empty()) index_.erase(it);
    names_[a].clear();
    valid_[a] = false;
    free_.insert(a);
    gen_++;
  }
  return 0;
}

int Av::lookup(fi_addr_t a, void* out, size_t* addrlen) {
  if (a >= names_.size() || !valid_[a]) return -FI_EINVAL;
  std::string u;
  if (str_) u = name_to_uri(names_[a].data(), names_[a].size());
  const std::string& v = str_ ? u : names_[a];
  size_t n = v.size() + (str_ ? 1 : 0);  // a string with its NUL
  if (out) memcpy(out, v.c_str(), std::min(n, *addrlen));
  *addrlen = n;
  return 0;
}

// The lowest fi_addr holding `name` (a name inserted twice has two).
fi_addr_t Av::addr_of(const void* name, size_t len) const {
  auto it = index_.find(std::string(static_cast<const char*>(name), len));
  return it == index_.end() ? FI_ADDR_NOTAVAIL : it->second.front();
}

// String domains: the string itself (when it is one of our names), so that
// fi_av_insertsvc(node = it, NULL) takes it back; otherwise the readable
// form of the binary name (logs, and people).
const char* Av::straddr(const void* addr, char* buf, size_t* len) {
  std::string s, bin, why;
  if (!str_) s = g_provdef->name_str(addr, addrlen_);
  else if (addr && uri_to_name(static_cast<const char*>(addr), uri_size(), &bin, &why))
    s = name_to_uri(bin.data(), bin.size());
  if (*len) snprintf(buf, *len, "%s", s.c_str());
  *len = s.size() + 1;
  return buf;
}

namespace {
Av* av_of(fid_av* f) { return Av::from(f); }

// fi_av_insertsvc/insertsym: the name fi_getinfo(node, service) would give
// as dest_addr on this AV's domain (outside the domain lock: resolving may
// wait for the network). 0, or -FI_EADDRNOTAVAIL with the reason at info level.
int resolve_svc(Av* av, const char* node, const char* service, std::string* name) {
  AddrRequest req;
  req.node = node;
  req.service = service;
  std::string why;
  if (!parse_service(service, &req.svc, &why)) {
    PM_INFO(FI_LOG_AV, "%s", why.c_str());
    return -FI_EADDRNOTAVAIL;
  }
  fi_info* i = fi_dupinfo(av->domain().info);
  if (!i) return -FI_ENOMEM;
  set_info_addr(&i->src_addr, &i->src_addrlen, nullptr, 0);
  set_info_addr(&i->dest_addr, &i->dest_addrlen, nullptr, 0);
  int rc = 0;
  if (!g_provdef->set_addrs(*i, req, &why) || !i->dest_addr || !req.dest()) {
    PM_INFO(FI_LOG_AV, "no address for node %s, service %s: %s", node ? node : "(null)",
            service ? service : "(null)", why.empty() ? "no destination named" : why.c_str());
    rc = -FI_EADDRNOTAVAIL;
  } else {
    name->assign(static_cast<const char*>(i->dest_addr), i->dest_addrlen);
  }
  fi_freeinfo(i);
  return rc;
}
template <class F>
int locked(Av* av, F&& f) noexcept {
  return guard([&] {
    std::lock_guard<SpinLock> g(av->domain().lock());
    return f();
  });
}
int pm_av_insert(fid_av* f, const void* addr, size_t count, fi_addr_t* out, uint64_t flags,
                 void* ctx) noexcept {
  Av* av = av_of(f);
  return locked(av, [&] {
    return av->strings() ? av->insert_str(addr, count, out, flags, ctx) : av->insert(addr, count, out, flags, ctx);
  });
}
int pm_av_insertsvc(fid_av* f, const char* node, const char* service, fi_addr_t* out, uint64_t flags,
                    void* ctx) noexcept {
  Av* av = av_of(f);
  return guard([&] {
    if (flags) return -FI_EBADFLAGS;
    std::string name, why;
    if (node && !service && looks_like_uri(node, strlen(node))) {  // fi_av(3): a string address as node
      if (!uri_to_name(node, strlen(node), &name, &why)) {
        PM_INFO(FI_LOG_AV, "node %s: %s", node, why.c_str());
        return -FI_EINVAL;
      }
    } else if (int rc = resolve_svc(av, node, service, &name)) {
      return rc;
    }
    std::lock_guard<SpinLock> g(av->domain().lock());
    return av->insert(name.data(), 1, out, 0, ctx);
  });
}
// nodecnt IPv4 addresses from `node` on (the last ones incremented) times
// svccnt services from `service` on, node by node.
int pm_av_insertsym(fid_av* f, const char* node, size_t nodecnt, const char* service, size_t svccnt,
                    fi_addr_t* out, uint64_t flags, void* ctx) noexcept {
  Av* av = av_of(f);
  return guard([&] {
    if (flags) return -FI_EBADFLAGS;
    if (!node || !service || !nodecnt || !svccnt) return -FI_EINVAL;
    in_addr base{};
    uint32_t svc0 = 0;
    std::string why;
    if ((nodecnt > 1 && inet_pton(AF_INET, node, &base) != 1) || !parse_service(service, &svc0, &why) ||
        svc0 + svccnt - 1 > 65535)
      return -FI_EINVAL;
    std::vector<std::string> names;
    for (size_t n = 0; n < nodecnt; n++) {
      char host[INET_ADDRSTRLEN];
      const char* h = node;
      if (nodecnt > 1) {
        in_addr a{htonl(ntohl(base.s_addr) + uint32_t(n))};
        inet_ntop(AF_INET, &a, host, sizeof host);
        h = host;
      }
      for (size_t k = 0; k < svccnt; k++) {
        std::string svc = std::to_string(svc0 + k), name;
        if (int rc = resolve_svc(av, h, svc.c_str(), &name)) return rc;
        names.push_back(std::move(name));
      }
    }
    std::lock_guard<SpinLock> g(av->domain().lock());
    int ok = 0;
    for (size_t i = 0; i < names.size(); i++) {
      int rc = av->insert(names[i].data(), 1, out ? out + i : nullptr, 0, ctx);
      if (rc < 0) return rc;
      ok += rc;
    }
    return ok;
  });
}
int pm_av_remove(fid_av* f, fi_addr_t* a, size_t count, uint64_t flags) noexcept {
  Av* av = av_of(f);
  return locked(av, [&] { return av->remove(a, count, flags); });
}
int pm_av_lookup(fid_av* f, fi_addr_t a, void* out, size_t* len) noexcept {
  Av* av = av_of(f);
  return locked(av, [&] { return av->lookup(a, out, len); });
}
const char* pm_av_straddr(fid_av* f, const void* addr, char* buf, size_t* len) noexcept {
  try {
    return av_of(f)->straddr(addr, buf, len);
  } catch (...) {
    return nullptr;
  }
}
int pm_av_close(fid_t f) noexcept {
  Av* av = self_of_fid<Av, fid_av>(f);
  return guard([&] {
    {
      std::lock_guard<SpinLock> g(av->domain().lock());
      if (av->refs) return -FI_EBUSY;
      av->domain().refs--;
    }
    delete av;
    return 0;
  });
}
}  // namespace

const fi_ops kAvFiOps = {
    .size = ops_size<fi_ops>(),
    .close = pm_av_close,
    .bind = PM_ENOSYS(fi_ops, bind),
    .control = PM_ENOSYS(fi_ops, control),
    .ops_open = PM_ENOSYS(fi_ops, ops_open),
    .tostr = PM_ENOSYS(fi_ops, tostr),
    .ops_set = PM_ENOSYS(fi_ops, ops_set),
};

const fi_ops_av kAvOps = {
    .size = ops_size<fi_ops_av>(),
    .insert = pm_av_insert,
    .insertsvc = pm_av_insertsvc,
    .insertsym = pm_av_insertsym,
    .remove = pm_av_remove,
    .lookup = pm_av_lookup,
    .straddr = pm_av_straddr,
    .av_set = PM_ENOSYS(fi_ops_av, av_set),
};

}  // namespace pm
