// The endpoint's libfabric ops tables: thin noexcept trampolines that take
// the domain lock, call one member and return its status.
#include <algorithm>
#include <mutex>

#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "core/atomic_ops.hpp"
#include "core/domain.hpp"
#include "core/endpoint.hpp"

namespace pm {
namespace {

// After the call, a progress thread that sleeps with nothing to do is woken
// (one relaxed load when it is not asleep): the new operation needs progress.
template <class F>
inline ssize_t locked(Endpoint* ep, F&& f) noexcept {
  ssize_t rc = guard([&]() -> ssize_t {
    std::lock_guard<SpinLock> g(ep->domain().lock());
    return f();
  });
  ep->domain().poke();
  return rc;
}

inline iovec one(const void* buf, size_t len) { return iovec{const_cast<void*>(buf), len}; }

ssize_t pm_ep_send(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] { return ep->send(&v, 1, dest, 0, 0, ctx, ep->tx_op_flags(), false); });
}
ssize_t pm_ep_sendv(fid_ep* f, const iovec* iov, void** desc, size_t cnt, fi_addr_t dest, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] { return ep->send(iov, cnt, dest, 0, 0, ctx, ep->tx_op_flags(), false); });
}
ssize_t pm_ep_sendmsg(fid_ep* f, const fi_msg* m, uint64_t flags) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] {
    return ep->send(m->msg_iov, m->iov_count, m->addr, 0, m->data, m->context, flags, false);
  });
}
ssize_t pm_ep_inject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] {
    return ep->send(&v, 1, dest, 0, 0, nullptr, FI_INJECT, false, SuccessEntry::kNever);
  });
}
ssize_t pm_ep_senddata(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data,
                       fi_addr_t dest, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] {
    return ep->send(&v, 1, dest, 0, data, ctx, ep->tx_op_flags() | FI_REMOTE_CQ_DATA, false);
  });
}
ssize_t pm_ep_injectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] {
    return ep->send(&v, 1, dest, 0, data, nullptr, FI_INJECT | FI_REMOTE_CQ_DATA, false,
                    SuccessEntry::kNever);
  });
}
ssize_t pm_ep_recv(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t src, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] { return ep->recv(&v, 1, src, 0, 0, ctx, ep->rx_op_flags(), false); });
}
ssize_t pm_ep_recvv(fid_ep* f, const iovec* iov, void** desc, size_t cnt, fi_addr_t src, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] { return ep->recv(iov, cnt, src, 0, 0, ctx, ep->rx_op_flags(), false); });
}
ssize_t pm_ep_recvmsg(fid_ep* f, const fi_msg* m, uint64_t flags) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] {
    return ep->recv(m->msg_iov, m->iov_count, m->addr, 0, 0, m->context, flags, false);
  });
}

ssize_t pm_ep_tsend(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t tag,
                    void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] { return ep->send(&v, 1, dest, tag, 0, ctx, ep->tx_op_flags(), true); });
}
ssize_t pm_ep_tsendv(fid_ep* f, const iovec* iov, void** desc, size_t cnt, fi_addr_t dest, uint64_t tag,
                     void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] { return ep->send(iov, cnt, dest, tag, 0, ctx, ep->tx_op_flags(), true); });
}
ssize_t pm_ep_tsendmsg(fid_ep* f, const fi_msg_tagged* m, uint64_t flags) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] {
    return ep->send(m->msg_iov, m->iov_count, m->addr, m->tag, m->data, m->context, flags, true);
  });
}
ssize_t pm_ep_tinject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest, uint64_t tag) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] {
    return ep->send(&v, 1, dest, tag, 0, nullptr, FI_INJECT, true, SuccessEntry::kNever);
  });
}
ssize_t pm_ep_tsenddata(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest,
                        uint64_t tag, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] {
    return ep->send(&v, 1, dest, tag, data, ctx, ep->tx_op_flags() | FI_REMOTE_CQ_DATA, true);
  });
}
ssize_t pm_ep_tinjectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                          uint64_t tag) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] {
    return ep->send(&v, 1, dest, tag, data, nullptr, FI_INJECT | FI_REMOTE_CQ_DATA, true,
                    SuccessEntry::kNever);
  });
}
ssize_t pm_ep_trecv(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t tag,
                    uint64_t ignore, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] { return ep->recv(&v, 1, src, tag, ignore, ctx, ep->rx_op_flags(), true); });
}
ssize_t pm_ep_trecvv(fid_ep* f, const iovec* iov, void** desc, size_t cnt, fi_addr_t src, uint64_t tag,
                     uint64_t ignore, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] { return ep->recv(iov, cnt, src, tag, ignore, ctx, ep->rx_op_flags(), true); });
}
ssize_t pm_ep_trecvmsg(fid_ep* f, const fi_msg_tagged* m, uint64_t flags) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] {
    return ep->recv(m->msg_iov, m->iov_count, m->addr, m->tag, m->ignore, m->context, flags, true);
  });
}

ssize_t pm_ep_cancel(fid_t f, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] { return ep->cancel(ctx); });
}
int pm_ep_getopt(fid_t f, int level, int name, void* val, size_t* len) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return int(locked(ep, [&] { return ssize_t(ep->getopt(level, name, val, len)); }));
}
int pm_ep_setopt(fid_t f, int level, int name, const void* val, size_t len) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return int(locked(ep, [&] { return ssize_t(ep->setopt(level, name, val, len)); }));
}
ssize_t pm_ep_tx_left(fid_ep* f) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] { return ssize_t(ep->tx_left()); });
}
ssize_t pm_ep_rx_left(fid_ep* f) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] { return ssize_t(ep->rx_left()); });
}

int pm_ep_close(fid_t f) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return guard([&] {
    Domain& dom = ep->domain();
    {
      std::lock_guard<SpinLock> g(dom.lock());
      ep->close();
    }
    delete ep;
    dom.refs--;
    return 0;
  });
}
int pm_ep_bind(fid_t f, fid_t bf, uint64_t flags) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return int(locked(ep, [&] { return ssize_t(ep->bind(bf, flags)); }));
}
int pm_ep_control(fid_t f, int cmd, void* arg) noexcept {
  Endpoint* ep = Endpoint::from(f);
  if (cmd == FI_ENABLE) return int(locked(ep, [&] { return ssize_t(ep->enable()); }));
  return -FI_ENOSYS;
}
int pm_ep_getname(fid_t f, void* addr, size_t* len) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return int(locked(ep, [&] { return ssize_t(ep->getname(addr, len)); }));
}


// ---- RMA ----
ssize_t rma_one(fid_ep* f, bool write, const iovec* iov, size_t cnt, fi_addr_t dest, uint64_t addr,
                uint64_t key, uint64_t data, void* ctx, uint64_t flags,
                SuccessEntry entry = SuccessEntry::kByFlags) {
  Endpoint* ep = Endpoint::from(f);
  size_t len = 0;
  for (size_t i = 0; i < cnt; i++) len += iov[i].iov_len;
  RmaTarget t{addr, len, key};
  return locked(ep, [&] { return ep->rma(write, iov, cnt, dest, t, data, ctx, flags, entry); });
}
ssize_t pm_ep_read(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t addr, uint64_t key,
                   void* ctx) noexcept {
  iovec v = one(buf, len);
  return rma_one(f, false, &v, 1, src, addr, key, 0, ctx, Endpoint::from(f)->tx_op_flags());
}
ssize_t pm_ep_readv(fid_ep* f, const iovec* iov, void** desc, size_t cnt, fi_addr_t src, uint64_t addr,
                    uint64_t key, void* ctx) noexcept {
  return rma_one(f, false, iov, cnt, src, addr, key, 0, ctx, Endpoint::from(f)->tx_op_flags());
}
ssize_t rma_msg(fid_ep* f, bool write, const fi_msg_rma* m, uint64_t flags) {
  if (!m || m->rma_iov_count != 1) return -FI_EINVAL;
  Endpoint* ep = Endpoint::from(f);
  RmaTarget t{m->rma_iov[0].addr, m->rma_iov[0].len, m->rma_iov[0].key};
  return locked(ep, [&] { return ep->rma(write, m->msg_iov, m->iov_count, m->addr, t, m->data, m->context, flags); });
}
ssize_t pm_ep_readmsg(fid_ep* f, const fi_msg_rma* m, uint64_t flags) noexcept { return rma_msg(f, false, m, flags); }
ssize_t pm_ep_write(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t addr,
                    uint64_t key, void* ctx) noexcept {
  iovec v = one(buf, len);
  return rma_one(f, true, &v, 1, dest, addr, key, 0, ctx, Endpoint::from(f)->tx_op_flags());
}
ssize_t pm_ep_writev(fid_ep* f, const iovec* iov, void** desc, size_t cnt, fi_addr_t dest, uint64_t addr,
                     uint64_t key, void* ctx) noexcept {
  return rma_one(f, true, iov, cnt, dest, addr, key, 0, ctx, Endpoint::from(f)->tx_op_flags());
}
ssize_t pm_ep_writemsg(fid_ep* f, const fi_msg_rma* m, uint64_t flags) noexcept { return rma_msg(f, true, m, flags); }
ssize_t pm_ep_inject_write(fid_ep* f, const void* buf, size_t len, fi_addr_t dest, uint64_t addr,
                           uint64_t key) noexcept {
  iovec v = one(buf, len);
  return rma_one(f, true, &v, 1, dest, addr, key, 0, nullptr, FI_INJECT, SuccessEntry::kNever);
}
ssize_t pm_ep_writedata(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest,
                        uint64_t addr, uint64_t key, void* ctx) noexcept {
  iovec v = one(buf, len);
  return rma_one(f, true, &v, 1, dest, addr, key, data, ctx,
                 Endpoint::from(f)->tx_op_flags() | FI_REMOTE_CQ_DATA);
}
ssize_t pm_ep_inject_writedata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                               uint64_t addr, uint64_t key) noexcept {
  iovec v = one(buf, len);
  return rma_one(f, true, &v, 1, dest, addr, key, data, nullptr, FI_INJECT | FI_REMOTE_CQ_DATA,
                 SuccessEntry::kNever);
}

// ---- atomics ----
// Gathers fi_ioc arrays (count elements each) into iovecs of bytes.
size_t ioc_to_iov(const fi_ioc* ioc, size_t n, fi_datatype dt, iovec* out) {
  size_t sz = atomic_size(dt);
  for (size_t i = 0; i < n && i < kMaxIov; i++) out[i] = iovec{ioc[i].addr, ioc[i].count * sz};
  return std::min(n, kMaxIov);
}
ssize_t atomic_call(fid_ep* f, const fi_ioc* op, size_t opn, const fi_ioc* cmp, size_t cmpn, fi_ioc* res,
                    size_t resn, fi_addr_t dest, uint64_t addr, uint64_t key, fi_datatype dt, fi_op aop,
                    void* ctx, uint64_t flags, AtomicKind kind,
                    SuccessEntry entry = SuccessEntry::kByFlags) {
  Endpoint* ep = Endpoint::from(f);
  if (opn > kMaxIov || cmpn > kMaxIov || resn > kMaxIov) return -FI_EINVAL;
  iovec a[kMaxIov], c[kMaxIov], r[kMaxIov];
  size_t na = op ? ioc_to_iov(op, opn, dt, a) : 0;
  size_t nc = cmp ? ioc_to_iov(cmp, cmpn, dt, c) : 0;
  size_t nr = res ? ioc_to_iov(res, resn, dt, r) : 0;
  size_t count = 0;
  const fi_ioc* counted = aop == FI_ATOMIC_READ ? res : op;
  size_t countn = aop == FI_ATOMIC_READ ? resn : opn;
  for (size_t i = 0; counted && i < countn; i++) count += counted[i].count;
  RmaTarget t{addr, count, key};
  return locked(ep, [&] {
    return ep->atomic(a, na, c, nc, r, nr, dest, t, dt, aop, ctx, flags, int(kind), entry);
  });
}
ssize_t pm_ep_atomic(fid_ep* f, const void* buf, size_t count, void* desc, fi_addr_t dest, uint64_t addr,
                     uint64_t key, fi_datatype dt, fi_op op, void* ctx) noexcept {
  fi_ioc i{const_cast<void*>(buf), count};
  return atomic_call(f, &i, 1, nullptr, 0, nullptr, 0, dest, addr, key, dt, op, ctx,
                     Endpoint::from(f)->tx_op_flags(), AtomicKind::kWrite);
}
ssize_t pm_ep_atomicv(fid_ep* f, const fi_ioc* iov, void** desc, size_t n, fi_addr_t dest, uint64_t addr,
                      uint64_t key, fi_datatype dt, fi_op op, void* ctx) noexcept {
  return atomic_call(f, iov, n, nullptr, 0, nullptr, 0, dest, addr, key, dt, op, ctx,
                     Endpoint::from(f)->tx_op_flags(), AtomicKind::kWrite);
}
ssize_t pm_ep_atomicmsg(fid_ep* f, const fi_msg_atomic* m, uint64_t flags) noexcept {
  if (!m || m->rma_iov_count != 1) return -FI_EINVAL;
  return atomic_call(f, m->msg_iov, m->iov_count, nullptr, 0, nullptr, 0, m->addr, m->rma_iov[0].addr,
                     m->rma_iov[0].key, m->datatype, m->op, m->context, flags, AtomicKind::kWrite);
}
ssize_t pm_ep_atomic_inject(fid_ep* f, const void* buf, size_t count, fi_addr_t dest, uint64_t addr,
                            uint64_t key, fi_datatype dt, fi_op op) noexcept {
  fi_ioc i{const_cast<void*>(buf), count};
  return atomic_call(f, &i, 1, nullptr, 0, nullptr, 0, dest, addr, key, dt, op, nullptr, FI_INJECT,
                     AtomicKind::kWrite, SuccessEntry::kNever);
}
ssize_t pm_ep_fetch(fid_ep* f, const void* buf, size_t count, void* desc, void* res, void* rdesc,
                    fi_addr_t dest, uint64_t addr, uint64_t key, fi_datatype dt, fi_op op, void* ctx) noexcept {
  fi_ioc i{const_cast<void*>(buf), count}, r{res, count};
  return atomic_call(f, buf ? &i : nullptr, buf ? 1 : 0, nullptr, 0, &r, 1, dest, addr, key, dt, op, ctx,
                     Endpoint::from(f)->tx_op_flags(), AtomicKind::kFetch);
}
ssize_t pm_ep_fetchv(fid_ep* f, const fi_ioc* iov, void** desc, size_t n, fi_ioc* res, void** rdesc,
                     size_t rn, fi_addr_t dest, uint64_t addr, uint64_t key, fi_datatype dt, fi_op op,
                     void* ctx) noexcept {
  return atomic_call(f, iov, n, nullptr, 0, res, rn, dest, addr, key, dt, op, ctx,
                     Endpoint::from(f)->tx_op_flags(), AtomicKind::kFetch);
}
ssize_t pm_ep_fetchmsg(fid_ep* f, const fi_msg_atomic* m, fi_ioc* res, void** rdesc, size_t rn,
                       uint64_t flags) noexcept {
  if (!m || m->rma_iov_count != 1) return -FI_EINVAL;
  return atomic_call(f, m->msg_iov, m->iov_count, nullptr, 0, res, rn, m->addr, m->rma_iov[0].addr,
                     m->rma_iov[0].key, m->datatype, m->op, m->context, flags, AtomicKind::kFetch);
}
ssize_t pm_ep_compare(fid_ep* f, const void* buf, size_t count, void* desc, const void* cmp, void* cdesc,
                      void* res, void* rdesc, fi_addr_t dest, uint64_t addr, uint64_t key, fi_datatype dt,
                      fi_op op, void* ctx) noexcept {
  fi_ioc i{const_cast<void*>(buf), count}, c{const_cast<void*>(cmp), count}, r{res, count};
  return atomic_call(f, &i, 1, &c, 1, &r, 1, dest, addr, key, dt, op, ctx, Endpoint::from(f)->tx_op_flags(),
                     AtomicKind::kCompare);
}
ssize_t pm_ep_comparev(fid_ep* f, const fi_ioc* iov, void** desc, size_t n, const fi_ioc* cmp, void** cdesc,
                       size_t cn, fi_ioc* res, void** rdesc, size_t rn, fi_addr_t dest, uint64_t addr,
                       uint64_t key, fi_datatype dt, fi_op op, void* ctx) noexcept {
  return atomic_call(f, iov, n, cmp, cn, res, rn, dest, addr, key, dt, op, ctx,
                     Endpoint::from(f)->tx_op_flags(), AtomicKind::kCompare);
}
ssize_t pm_ep_comparemsg(fid_ep* f, const fi_msg_atomic* m, const fi_ioc* cmp, void** cdesc, size_t cn,
                         fi_ioc* res, void** rdesc, size_t rn, uint64_t flags) noexcept {
  if (!m || m->rma_iov_count != 1) return -FI_EINVAL;
  return atomic_call(f, m->msg_iov, m->iov_count, cmp, cn, res, rn, m->addr, m->rma_iov[0].addr,
                     m->rma_iov[0].key, m->datatype, m->op, m->context, flags, AtomicKind::kCompare);
}
int valid(fid_ep* f, fi_datatype dt, fi_op op, size_t* count, AtomicKind kind) {
  Endpoint* ep = Endpoint::from(f);
  return int(locked(ep, [&] { return ssize_t(ep->atomic_valid(dt, op, int(kind), count)); }));
}
int pm_ep_writevalid(fid_ep* f, fi_datatype dt, fi_op op, size_t* count) noexcept {
  return valid(f, dt, op, count, AtomicKind::kWrite);
}
int pm_ep_fetchvalid(fid_ep* f, fi_datatype dt, fi_op op, size_t* count) noexcept {
  return valid(f, dt, op, count, AtomicKind::kFetch);
}
int pm_ep_comparevalid(fid_ep* f, fi_datatype dt, fi_op op, size_t* count) noexcept {
  return valid(f, dt, op, count, AtomicKind::kCompare);
}
}  // namespace

extern const fi_ops kEpFiOps = {
    .size = ops_size<fi_ops>(),
    .close = pm_ep_close,
    .bind = pm_ep_bind,
    .control = pm_ep_control,
    .ops_open = PM_ENOSYS(fi_ops, ops_open),
    .tostr = PM_ENOSYS(fi_ops, tostr),
    .ops_set = PM_ENOSYS(fi_ops, ops_set),
};

extern const fi_ops_ep kEpOps = {
    .size = ops_size<fi_ops_ep>(),
    .cancel = pm_ep_cancel,
    .getopt = pm_ep_getopt,
    .setopt = pm_ep_setopt,
    .tx_ctx = PM_ENOSYS(fi_ops_ep, tx_ctx),
    .rx_ctx = PM_ENOSYS(fi_ops_ep, rx_ctx),
    .rx_size_left = pm_ep_rx_left,
    .tx_size_left = pm_ep_tx_left,
};

extern const fi_ops_cm kEpCmOps = {
    .size = ops_size<fi_ops_cm>(),
    .setname = PM_ENOSYS(fi_ops_cm, setname),
    .getname = pm_ep_getname,
    .getpeer = PM_ENOSYS(fi_ops_cm, getpeer),
    .connect = PM_ENOSYS(fi_ops_cm, connect),
    .listen = PM_ENOSYS(fi_ops_cm, listen),
    .accept = PM_ENOSYS(fi_ops_cm, accept),
    .reject = PM_ENOSYS(fi_ops_cm, reject),
    .shutdown = PM_ENOSYS(fi_ops_cm, shutdown),
    .join = PM_ENOSYS(fi_ops_cm, join),
};

extern const fi_ops_msg kEpMsgOps = {
    .size = ops_size<fi_ops_msg>(),
    .recv = pm_ep_recv,
    .recvv = pm_ep_recvv,
    .recvmsg = pm_ep_recvmsg,
    .send = pm_ep_send,
    .sendv = pm_ep_sendv,
    .sendmsg = pm_ep_sendmsg,
    .inject = pm_ep_inject,
    .senddata = pm_ep_senddata,
    .injectdata = pm_ep_injectdata,
};

extern const fi_ops_tagged kEpTaggedOps = {
    .size = ops_size<fi_ops_tagged>(),
    .recv = pm_ep_trecv,
    .recvv = pm_ep_trecvv,
    .recvmsg = pm_ep_trecvmsg,
    .send = pm_ep_tsend,
    .sendv = pm_ep_tsendv,
    .sendmsg = pm_ep_tsendmsg,
    .inject = pm_ep_tinject,
    .senddata = pm_ep_tsenddata,
    .injectdata = pm_ep_tinjectdata,
};

extern const fi_ops_rma kEpRmaOps = {
    .size = ops_size<fi_ops_rma>(),
    .read = pm_ep_read,
    .readv = pm_ep_readv,
    .readmsg = pm_ep_readmsg,
    .write = pm_ep_write,
    .writev = pm_ep_writev,
    .writemsg = pm_ep_writemsg,
    .inject = pm_ep_inject_write,
    .writedata = pm_ep_writedata,
    .injectdata = pm_ep_inject_writedata,
};

extern const fi_ops_atomic kEpAtomicOps = {
    .size = ops_size<fi_ops_atomic>(),
    .write = pm_ep_atomic,
    .writev = pm_ep_atomicv,
    .writemsg = pm_ep_atomicmsg,
    .inject = pm_ep_atomic_inject,
    .readwrite = pm_ep_fetch,
    .readwritev = pm_ep_fetchv,
    .readwritemsg = pm_ep_fetchmsg,
    .compwrite = pm_ep_compare,
    .compwritev = pm_ep_comparev,
    .compwritemsg = pm_ep_comparemsg,
    .writevalid = pm_ep_writevalid,
    .readwritevalid = pm_ep_fetchvalid,
    .compwritevalid = pm_ep_comparevalid,
};

extern const fi_ops_collective kEpCollOps = {
    .size = ops_size<fi_ops_collective>(),
    .barrier = PM_ENOSYS(fi_ops_collective, barrier),
    .broadcast = PM_ENOSYS(fi_ops_collective, broadcast),
    .alltoall = PM_ENOSYS(fi_ops_collective, alltoall),
    .allreduce = PM_ENOSYS(fi_ops_collective, allreduce),
    .allgather = PM_ENOSYS(fi_ops_collective, allgather),
    .reduce_scatter = PM_ENOSYS(fi_ops_collective, reduce_scatter),
    .reduce = PM_ENOSYS(fi_ops_collective, reduce),
    .scatter = PM_ENOSYS(fi_ops_collective, scatter),
    .gather = PM_ENOSYS(fi_ops_collective, gather),
    .msg = PM_ENOSYS(fi_ops_collective, msg),
    .barrier2 = PM_ENOSYS(fi_ops_collective, barrier2),
};

}  // namespace pm
